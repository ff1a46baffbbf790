//! # Exercise 02: online softmax, then split keys and their merge
//!
//! Warm-up: from a softmax that overflows to one that streams: safe softmax, the running state
//! `(m, l)` and its merge, online softmax, and attention that streams over the keys once.
//! Main task: attention over a range of the keys, and the merge of such partial results into
//! attention over all of them (flash-decoding's combine step). The tasks, the contract and
//! hints are in this folder's README.md; the book's chapter 2 explains the ideas.
//!
//! Check your work with `cargo test -p ex02 --test visible` and `cargo grade ex02`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use std::ops::Range;

use ndarray::{Array1, Array3, Array4, s};
use reference::features::{check_key_range, check_parts};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

/// `e^x_i / sum_j e^x_j` exactly as written (given): it overflows for inputs above about 88.
pub fn naive_softmax(x: &[f32]) -> Vec<f32> {
    let exps: Vec<f32> = x.iter().map(|&xi| xi.exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|&e| e / sum).collect()
}

/// Softmax with the maximum subtracted first. A slice of only `-inf` gives all zeros.
pub fn safe_softmax(x: &[f32]) -> Vec<f32> {
    // TODO: find the maximum m; if it is -inf return zeros; else e^(x_i - m) / sum_j e^(x_j - m).
    todo!("exercise 02: safe_softmax")
}

/// The running statistics of a softmax over a stream of scores: the maximum `m` seen so far
/// and `l = sum_j e^(x_j - m)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxState {
    /// `m`, the largest score seen so far (`-inf` if none).
    pub max: f32,
    /// `l`, the sum of `e^(x - m)` over the scores seen so far.
    pub sum: f32,
}

impl SoftmaxState {
    /// The state of no scores at all.
    pub const EMPTY: Self = Self { max: f32::NEG_INFINITY, sum: 0.0 };

    /// The state after one more score `x`.
    pub fn push(self, x: f32) -> Self {
        // TODO: the new maximum is max(m, x). Rescale the old sum to it, then add e^(x - new max).
        //       If the new maximum is still -inf, return `self` unchanged (why?).
        todo!("exercise 02: SoftmaxState::push")
    }

    /// The state of the concatenation of the streams behind `self` and `other`.
    pub fn merge(self, other: Self) -> Self {
        // TODO: m = max(m_a, m_b); l = l_a e^(m_a - m) + l_b e^(m_b - m); two empty states
        //       merge to EMPTY.
        todo!("exercise 02: SoftmaxState::merge")
    }

    /// The state of a whole slice, one `push` at a time (given).
    pub fn of(x: &[f32]) -> Self {
        x.iter().fold(Self::EMPTY, |state, &xi| state.push(xi))
    }

    /// `m + ln(l)` (given).
    pub fn logsumexp(&self) -> f32 {
        self.max + self.sum.ln()
    }
}

/// Online softmax: the state in one pass, then one pass to normalise.
pub fn online_softmax(x: &[f32]) -> Vec<f32> {
    // TODO: `SoftmaxState::of(x)`, then e^(x_i - m) / l (zeros if m is -inf).
    todo!("exercise 02: online_softmax")
}

/// Online attention following the course contract: each query row streams over its visible
/// keys once, keeping `(m, l)` and an unnormalised output row `acc` of length D.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: validate (check_inputs: shapes, NaN, the scale) and start from
    //         `AttentionOutput::empty(&shape)` (O = 0, L = -inf everywhere).
    // TODO 2: for every batch b, head h and query row i, for each visible key j
    //         (j < shape.visible_keys(i, options.causal)):
    //         score = scale * q_i . k_j; new state = state.push(score);
    //         acc = acc * e^(old max - new max) + e^(score - new max) * v_j.
    // TODO 3: if any key was seen: O_i = acc / l and L_i = state.logsumexp().
    todo!("exercise 02: online attention")
}

/// Main task, part 1: attention over the keys in `keys` only, as if the others did not exist:
/// `O` normalised over the keys of the range that each row sees, and their logsumexp `L`
/// (`O = 0`, `L = -inf` for a row that sees none of them). Every key keeps its index in the
/// whole problem, so the causal mask is the whole problem's.
///
/// Shapes as in `attention`; `keys` must lie within `0..Nkv` (it may be empty).
pub fn partial_attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    keys: Range<usize>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: check the inputs, then the range: `check_key_range(&shape, &keys)?;`
    // TODO 2: your online attention, over the keys of `keys` that the row may see.
    todo!("exercise 02, main task: partial_attention")
}

/// Main task, part 2: the result over all the keys of `parts` (partial results over disjoint
/// ranges of keys of the same problem), from their `O [B, H, Nq, D]` and `L [B, H, Nq]` alone.
pub fn merge_partials(
    parts: &[AttentionOutput<f32>],
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: `check_parts(parts)?;` (at least one part, all of the same shape).
    // TODO 2: for every row: its L from the parts' L, then its O from the parts' O (the
    //         README's formulas), without overflow, and without NaN for a row no part saw.
    todo!("exercise 02, main task: merge_partials")
}
