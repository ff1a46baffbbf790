//! # Exercise 01: naive attention
//!
//! Write attention the straightforward way: materialise `S`, then `P`, then `O = P V`.
//! The task, the contract and hints are in this folder's README.md; the book's chapter 1
//! explains the ideas.
//!
//! Check your work with `cargo test -p ex01 --test visible` (small examples) and
//! `cargo grade ex01` (the hidden checks).

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use ndarray::{Array3, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
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
