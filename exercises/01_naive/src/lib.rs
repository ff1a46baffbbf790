//! # Exercise 01: naive attention, then ALiBi and a softcap
//!
//! Warm-up: write attention the straightforward way: materialise `S`, then `P`, then `O = P V`.
//! Main task: the same with two of FlashAttention-2's features, ALiBi biases and a logit
//! softcap. The tasks, the contract and hints are in this folder's README.md; the book's
//! chapter 1 explains the ideas.
//!
//! Check your work with `cargo test -p ex01 --test visible` (small examples) and
//! `cargo grade ex01` (the hidden checks).

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use ndarray::{Array3, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Feature,
    Features, check_inputs,
};

/// Naive attention: `q [B, H, Nq, D]`, `k [B, H, Nkv, D]`, `v [B, H, Nkv, D]` ->
/// `O [B, H, Nq, D]` and the logsumexp `L [B, H, Nq]`.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: check the inputs (shapes, NaN and infinities, the scale) and find the scale:
    //         `let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;`
    // TODO 2: S = scale * Q Kᵀ for every batch b and head h: an array [B, H, Nq, Nkv].
    // TODO 3: if `options.causal`, set S[b, h, i, j] = -inf for every key
    //         j >= shape.visible_keys(i, true).
    // TODO 4: P = softmax of each row of S, subtracting the row's maximum m first, and
    //         L = m + ln(sum of e^(S - m)). A row of only -inf gives P = 0 and L = -inf.
    // TODO 5: O = P V for every batch and head.
    todo!("exercise 01: naive attention")
}

/// Main task: naive attention whose scores carry two of FlashAttention-2's features, a logit
/// softcap `c` and an ALiBi slope `m_h` per head:
///
/// `s_ij = c tanh(scale q_i.k_j / c) - m_h |i + Nkv - Nq - j|`, then the causal mask (if
/// `options.causal`), the softmax and `O = P V` as in `attention`.
///
/// `features.softcap` and `features.alibi_slopes` are each `None` when not used. Shapes as in
/// `attention`.
pub fn attention_with_features(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: check the inputs as in `attention`, then the features, refusing those this
    //         function does not compute:
    //         `features.check_supported(&shape, &[Feature::Alibi, Feature::Softcap])?;`
    // TODO 2: the scores of every batch and head with the softcap, then the ALiBi bias (the
    //         README shows the bias as a picture and says which key a row is "at").
    // TODO 3: the causal mask, the softmax with its logsumexp, and O = P V, as before.
    todo!("exercise 01, main task: ALiBi and softcap")
}
