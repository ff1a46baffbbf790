//! # Exercise 12: GPT-2's layers, then a batch of sequences decoding together
//!
//! Warm-up: GPT-2's LayerNorm and one transformer block over a whole sequence, from the
//! checkpoint's weights. Main task: `Batch`, several sequences of different lengths decoding
//! together, each at its own positions and over its own cached keys and values. The tasks,
//! the contract and hints are in this folder's README.md; the book's chapter 12 explains the
//! model.
//!
//! Check your work with `cargo test -p ex12 --test visible` and `cargo grade ex12`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports, dead_code, unused_mut)]

use lesson11::{KeyValues, KvCache};
use lesson12::model::{Block, LayerNorm, gelu};
use lesson12::{Gpt2, ModelError};
use ndarray::{Array2, Array3, Axis, s};
use reference::{AttentionOptions, ForwardVersion};

/// LayerNorm of each row `x_i [C]` of `x [N, C]`: `(x_i - mean) / sqrt(var + eps) * gain +
/// bias`, with the row's mean and (biased) variance in f32.
pub fn layer_norm(norm: &LayerNorm, x: &Array2<f32>) -> Array2<f32> {
    // TODO: the mean first, then the mean of (x - mean)^2; then each value.
    todo!("exercise 12: layer_norm")
}

/// Block `block` of `model` over a whole sequence `x [N, C]` (its tokens at positions
/// `0..N`): `x + attn(ln_1(x))`, then that plus `mlp(ln_2(..))`. Attention by `attention`, a
/// registered version of the course's contract (`[B, H, N, D]` inputs).
pub fn block_forward(
    model: &Gpt2,
    block: &Block,
    attention: &ForwardVersion,
    x: &Array2<f32>,
) -> Result<Array2<f32>, ModelError> {
    // TODO 1: queries, keys and values of ln_1(x), [H, N, D] each (queries_keys_values).
    // TODO 2: attention over the whole sequence (mind the mask), through `attention.forward`.
    // TODO 3: the rest of the block (finish_block).
    todo!("exercise 12: block_forward")
}

/// The block's queries, keys and values of `x [N, C]`, `[H, N, D]` each: `ln_1`, then
/// `c_attn`, whose `3C` outputs are Q, K and V side by side, each `H` heads of `D` side by
/// side. (A suggestion: `Batch::feed` needs it too.)
fn queries_keys_values(
    model: &Gpt2,
    block: &Block,
    x: &Array2<f32>,
) -> (Array3<f32>, Array3<f32>, Array3<f32>) {
    todo!("exercise 12: queries, keys and values")
}

/// The rest of the block, given the heads' attention output `[H, N, D]`: heads side by side,
/// `attn.c_proj`, the residual add into `x`, then `x += mlp(ln_2(x))`.
fn finish_block(block: &Block, x: &mut Array2<f32>, heads: Array3<f32>) {
    todo!("exercise 12: the rest of the block")
}

/// `B` sequences decoding together: one lesson 11 cache of `B` sequences per layer, and how
/// many tokens each sequence holds.
pub struct Batch<'a> {
    model: &'a Gpt2,
    attention: &'a ForwardVersion,
    /// One per layer, `B` sequences each, room for `n_positions` tokens.
    caches: Vec<KvCache>,
    /// Tokens each sequence holds.
    lens: Vec<usize>,
}

impl<'a> Batch<'a> {
    /// `sequences` empty sequences of `model`, attention by `attention`.
    pub fn new(
        model: &'a Gpt2,
        attention: &'a ForwardVersion,
        sequences: usize,
    ) -> Result<Self, ModelError> {
        let caches = model.empty_caches(sequences)?;
        Ok(Self { model, attention, caches, lens: vec![0; sequences] })
    }

    /// Tokens sequence `seq` holds (0 for no such sequence).
    pub fn len(&self, seq: usize) -> usize {
        self.lens.get(seq).copied().unwrap_or(0)
    }

    /// Feeds `tokens[b]` to sequence `b` (nothing for an empty slice) and returns each
    /// sequence's logits, `[n_b, V]` (`[0, V]` for an empty slice). Errors, with nothing
    /// changed: not one slice per sequence, a token id outside the vocabulary, a sequence
    /// that would pass `n_positions`.
    pub fn feed(&mut self, tokens: &[&[u32]]) -> Result<Vec<Array2<f32>>, ModelError> {
        // TODO 1: check everything first.
        // TODO 2: embed each sequence's new tokens at its own positions, and stack them.
        // TODO 3: per layer: queries, keys and values of all the rows at once; per sequence,
        //         its keys and values into its cache, its queries over its cached keys.
        // TODO 4: the logits (model.head), split back per sequence; the lengths grow.
        todo!("exercise 12: Batch::feed")
    }
}
