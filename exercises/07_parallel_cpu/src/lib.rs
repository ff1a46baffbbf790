//! # Exercise 07: a fast CPU FlashAttention, then split keys for decoding
//!
//! Warm-up: two pieces of lesson 07: an exponential the compiler can vectorise, and the tiled
//! forward run on every core, in base 2.
//! Main task: parallelism for decoding, where one query row meets thousands of keys: the keys
//! split into chunks computed on different cores and merged (flash-decoding on the CPU). The
//! tasks, the contract and hints are in this folder's README.md; the book's chapter 7 explains
//! the ideas.
//!
//! Check your work with `cargo test -p ex07 --test visible` and `cargo grade ex07`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports)]

use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array4, ArrayViewMut1, ArrayViewMut2, Axis, s};
use rayon::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

/// `2^x` for `x <= 0` (and `-inf`), with plain arithmetic only, relative error below `2e-7`,
/// and exactly 0 once `2^x` is below `2^-126`.
pub fn exp2(x: f32) -> f32 {
    // TODO: clamp x to at least -127; n = round(x) (the magic number 1.5 * 2^23 rounds for
    //       you); f = x - n; 2^f by a degree-7 polynomial in f ln 2; 2^n from the bits
    //       (n + 127) << 23.
    todo!("exercise 07: exp2")
}

/// The parallel FlashAttention forward: every (batch, head, query tile) is a rayon task that
/// writes its own rows of `O` and `L`; scores in base 2 (`scale * log2(e)`), softmax with
/// [`exp2`], `L` converted back to the natural log.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: validate (check_inputs gives the scale); scale_log2 = scale * LOG2_E;
    //         out = AttentionOutput::empty.
    // TODO 2: cut the output into disjoint tiles: view O as [B*H, Nq, D] and L as [B*H, Nq],
    //         and split each head's rows with `split_at(Axis(0), rows)`.
    // TODO 3: `tasks.into_par_iter().for_each(...)`: each task runs chapter 3's inner loop on
    //         its query tile, with exp2 and base-2 statistics, and writes O = acc / l and
    //         L = ln(2) * (m + log2 l) into its views.
    todo!("exercise 07: parallel forward")
}

/// Main task: attention with each head's keys cut into `splits` consecutive chunks, every
/// (batch, head, chunk) computed as its own rayon task, each giving every query row a partial
/// `(O, L)` over the chunk's keys; the partials merged into the result over all keys. The bits
/// must not depend on the number of threads. `splits` must be at least 1; more splits than
/// keys leaves some chunks empty. Shapes as in `attention`.
pub fn attention_split_keys(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    splits: usize,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: validate (check_inputs), and refuse zero splits with
    //         AttentionError::InvalidTileSize { which: "key splits", value: 0 }.
    // TODO 2: the chunks' partial results, in parallel.
    // TODO 3: each head's partials merged, in an order that does not depend on the threads.
    todo!("exercise 07, main task: split keys")
}
