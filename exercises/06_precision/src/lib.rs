//! # Exercise 06: attention in 16 bits
//!
//! Attention whose inputs and output are stored in f16 or bf16, computed so that the result is
//! as accurate as the 16-bit output allows: every quantity that sums or compares many terms
//! stays f32. And a dispatcher that refuses to mix formats. The task, the contract and hints
//! are in this folder's README.md; the book's chapter 6 explains the ideas.
//!
//! Check your work with `cargo test -p ex06 --test visible` and `cargo grade ex06`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use half::{bf16, f16};
use lesson06::policy::Tensor;
use lesson06::{Element, Output};
use ndarray::{Array3, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionShape, CheckedInputs, check_inputs};

/// Attention on `T` storage (`T` is f32, f16 or bf16): `O [B,H,Nq,D]` in `T`, the logsumexp
/// `L [B,H,Nq]` in f32. Widen with `x.to_f32()`, round with `T::from_f32(x)`.
pub fn attention<T: Element>(
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
) -> Result<Output<T>, AttentionError> {
    // TODO 1: validate (check_inputs works on any T) and start O at T::from_f32(0.0)
    //         and L at -inf.
    // TODO 2: for every batch, head and query row, stream over the visible keys as in
    //         exercise 02, with the score, the running max m, the running sum l and the
    //         accumulator all in f32.
    // TODO 3: store O = acc / l rounded to T, and L = m + ln(l) in f32.
    todo!("exercise 06: attention on T storage")
}

/// Attention on tensors of one format; mixed formats are `AttentionError::MixedDtypes`.
/// Returns `O` in the inputs' format and `L` in f32.
pub fn dispatch(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    options: &AttentionOptions,
) -> Result<(Tensor, Array3<f32>), AttentionError> {
    // TODO: match on (q, k, v): three F32, three F16 or three BF16 call `attention` and wrap O
    //       back in the same variant; anything else is MixedDtypes { q, k, v } with the names
    //       from `.dtype().name()`.
    todo!("exercise 06: dispatch")
}
