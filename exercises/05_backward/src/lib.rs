//! # Exercise 05: the backward pass, then softcap and dropout
//!
//! Warm-up: compute `dQ`, `dK` and `dV` from `dO`, recomputing the softmax weights `P` tile by
//! tile from `Q`, `K` and the logsumexp `L` saved by the forward pass, never storing an
//! `N x N` matrix.
//! Main task: the same backward pass through a logit softcap and through dropout, whose mask
//! is regenerated from its seed instead of being stored. The tasks, the contract and hints are
//! in this folder's README.md; the book's chapter 5 explains the ideas.
//!
//! Check your work with `cargo test -p ex05 --test visible` and `cargo grade ex05`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Feature,
    Features, Gradients, check_finite, check_inputs, check_logsumexp, check_lse_shape,
    check_same_shape,
};

/// The tiled backward pass: `q [B,H,Nq,D]`, `k`, `v [B,H,Nkv,D]`, the forward pass's
/// `O [B,H,Nq,D]` and `L [B,H,Nq]`, and `dO [B,H,Nq,D]` -> `dQ`, `dK`, `dV`.
pub fn backward(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
    tiles: TileSizes,
) -> Result<Gradients<f32>, AttentionError> {
    // TODO 1: validate: check_inputs(q, k, v, options)? (shapes, NaN, the scale), then
    //         check_same_shape("dO", d_o, "Q", q)?, check_same_shape("O", &forward.o, "Q", q)?,
    //         check_lse_shape(&forward.lse, q)?, and the values: check_finite("dO", d_o)?,
    //         check_finite("O", &forward.o)?, check_logsumexp(&forward.lse, &shape, causal)?.
    // TODO 2: per batch and head, D_i = dO_i . O_i for every query row.
    // TODO 3: for each K/V tile j (outer loop): dK_j = dV_j = 0; for each query tile i that is
    //         not Skipped: S = scale Q_i K_jᵀ (masked if Masked); P = e^(S - L_i) (0 for a
    //         row with L = -inf); dV_j += Pᵀ dO_i; dP = dO_i V_jᵀ; dS = P ∘ (dP - D_i);
    //         dQ_i += scale dS K_j; dK_j += scale dSᵀ Q_i. Then write dK_j and dV_j.
    todo!("exercise 05: backward")
}

/// Main task: the backward pass of attention with a logit softcap (`features.softcap`) and
/// dropout (`features.dropout`), either or both. `forward` is the forward pass of the same
/// features: `O` with dropout applied, and `L`, the logsumexp of the capped scores before
/// dropout. Shapes as in `backward`.
#[allow(clippy::too_many_arguments)]
pub fn backward_with_features(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
    tiles: TileSizes,
) -> Result<Gradients<f32>, AttentionError> {
    // TODO 1: validate as in `backward`, then the features:
    //         `features.check_supported(&shape, &[Feature::Softcap, Feature::Dropout])?;`
    // TODO 2: your tiled backward, with P recomputed from the capped scores, each weight's
    //         dropout factor regenerated from `features.dropout` (the README says where each
    //         factor goes), and the softcap's derivative in dS.
    todo!("exercise 05, main task: softcap and dropout backward")
}
