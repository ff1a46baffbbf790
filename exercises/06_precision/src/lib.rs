//! # Exercise 06: attention in 16 bits, then in 8
//!
//! Warm-up: attention whose inputs and output are stored in f16 or bf16, computed so that the
//! result is as accurate as the 16-bit output allows: every quantity that sums or compares many
//! terms stays f32. And a dispatcher that refuses to mix formats.
//! Main task: FP8, FlashAttention-3's 8-bit format (e4m3): its codes, rounding to it, one scale
//! per batch and head, and attention on it. The tasks, the contract and hints are in this
//! folder's README.md; the book's chapter 6 explains the ideas.
//!
//! Check your work with `cargo test -p ex06 --test visible` and `cargo grade ex06`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use half::{bf16, f16};
use lesson06::policy::Tensor;
use lesson06::{Element, Output};
use ndarray::{Array2, Array3, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_finite,
    check_inputs,
};

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

// The main task: FP8.

/// The largest finite e4m3 value, `1.75 * 2^8`.
pub const E4M3_LARGEST: f32 = 448.0;

/// A tensor in FP8 e4m3 with one descale per batch and head (FlashAttention-3's `q_descale`,
/// `k_descale`, `v_descale`): element `[b, h, n, d]` stands for
/// `descale[b, h] * e4m3_to_f32(codes[b, h, n, d])`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Tensor {
    /// The e4m3 codes, `[B, H, N, D]`.
    pub codes: Array4<u8>,
    /// The factor that turns a head's codes back into values, `[B, H]`.
    pub descale: Array2<f32>,
}

/// The value of an e4m3 code `s eeee mmm` (exponent bias 7, subnormals in exponent field 0;
/// `0x7F` and `0xFF` are NaN, there are no infinities).
pub fn e4m3_to_f32(code: u8) -> f32 {
    // TODO: split the bits; the subnormal case; the two NaN codes.
    todo!("exercise 06, main task: e4m3_to_f32")
}

/// The e4m3 code nearest to `x`, ties to the code with the even mantissa; `None` for NaN, the
/// infinities and values that round beyond 448.
pub fn f32_to_e4m3(x: f32) -> Option<u8> {
    // TODO: the step between codes near |x|, round to a multiple of it, then build the code.
    todo!("exercise 06, main task: f32_to_e4m3")
}

/// `x [B, H, N, D]` in e4m3 with one descale per `(batch, head)`:
/// `max(amax / 448, f32::MIN_POSITIVE)`, amax the largest `|x|` of that slice; each code is
/// `f32_to_e4m3(x / descale)`. NaN or an infinity in `x` is `AttentionError::NonFinite` naming
/// `tensor` (`"Q"`, `"K"` or `"V"`).
pub fn quantize(x: &Array4<f32>, tensor: &'static str) -> Result<Fp8Tensor, AttentionError> {
    // TODO: check_finite, then one descale and its codes per (batch, head).
    todo!("exercise 06, main task: quantize")
}

/// Attention on FP8 inputs, computed in f32: `O [B, H, Nq, D]` and `L [B, H, Nq]`, the values
/// the codes stand for as inputs. A descale that is not `[B, H]` of its codes, or not a
/// positive finite number, is `AttentionError::InvalidFeature` with `feature` `"Q descale"`,
/// `"K descale"` or `"V descale"`; everything else as the course contract says (a NaN code is
/// `NonFinite` at its index).
pub fn attention_fp8(
    q: &Fp8Tensor,
    k: &Fp8Tensor,
    v: &Fp8Tensor,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: check each descale.
    // TODO 2: the attention of the values the codes stand for, in f32.
    todo!("exercise 06, main task: attention_fp8")
}
