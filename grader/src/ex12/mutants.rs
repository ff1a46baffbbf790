//! The planted-bug implementation of exercise 12: one classic mistake per switch (see
//! [`crate::mutants`]), in LayerNorm, in a block's wiring, and in a batch decoding together.

use ndarray::{Array2, Array3};

use lesson06::Dtype;
use lesson11::{KeyValues, KvCache};
use lesson12::model::{Block, LayerNorm};
use lesson12::{Gpt2, ModelError, Monitor};
use reference::ForwardVersion;

use super::solution::check_one_slice_per_sequence;
use super::{Exercise12, Step, attend, drive};
use crate::ex12;
use crate::mutants::{Planted, planted_bugs};

planted_bugs! {
    /// Classic mistakes in GPT-2's layers and in decoding a batch (exercise 12).
    pub enum ModelBug {
        /// LayerNorm's sums rounded to f16 as they go (an f16 model without f32 statistics).
        LayerNormStatsInF16 => ex12::LAYER_NORM,
        /// The variance in one pass, `E[x^2] - mean^2`.
        OnePassVariance => ex12::LAYER_NORM,
        /// `c_proj`'s weight read as a linear layer's `[out, in]`: `x W^T`. Square, so no
        /// shape error says so.
        UntransposedConv1d => ex12::BLOCK,
        /// Attention over the whole sequence with no causal mask.
        NoCausalMaskInPrefill => ex12::BLOCK,
        /// Every chunk embedded at positions `0 .. n`, not after the cached tokens.
        PositionsFromZero => ex12::BATCH_ONE,
        /// The new queries attend over the cache before their own keys are appended.
        AttendBeforeAppend => ex12::BATCH_ONE,
        /// Every sequence's tokens placed after sequence 0's length.
        OneStartForAll => ex12::BATCH_RAGGED,
        /// No causal mask once a sequence has cached tokens ("the query is the newest token",
        /// true for one token, not for a chunk).
        NoMaskForCachedChunks => ex12::BATCH_RAGGED,
        /// Each sequence's tokens checked only when its turn comes: the sequences before a bad
        /// one have already been appended.
        LateValidation => ex12::BATCH_ERRORS,
    }
}

impl Exercise12 for Planted<ModelBug> {
    fn layer_norm(&self, norm: &LayerNorm, x: &Array2<f32>) -> Array2<f32> {
        if self.has(ModelBug::LayerNormStatsInF16) {
            return norm.forward(x, Dtype::F16);
        }
        let c = x.ncols() as f32;
        let mut out = x.clone();
        for mut row in out.rows_mut() {
            let mean = row.sum() / c;
            let variance = if self.has(ModelBug::OnePassVariance) {
                row.iter().map(|v| v * v).sum::<f32>() / c - mean * mean
            } else {
                row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / c
            };
            let inverse = 1.0 / (variance + norm.epsilon).sqrt();
            for (j, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) * inverse * norm.gain[j] + norm.bias[j];
            }
        }
        out
    }

    fn block_forward(
        &self,
        model: &Gpt2,
        block: &Block,
        attention: &ForwardVersion,
        x: &Array2<f32>,
    ) -> Result<Array2<f32>, ModelError> {
        let mut block = block.clone();
        if self.has(ModelBug::UntransposedConv1d) {
            block.attn_out.weight = block.attn_out.weight.t().to_owned();
        }
        let (q, k, v) = model.queries_keys_values(&block, x);
        let heads = attend(attention, q, k, v, !self.has(ModelBug::NoCausalMaskInPrefill))?;
        let mut x = x.clone();
        model.finish_block(&block, 0, &mut x, heads, &mut Monitor::default());
        Ok(x)
    }

    fn run_batch(
        &self,
        model: &Gpt2,
        attention: &ForwardVersion,
        sequences: usize,
        steps: &[Vec<Vec<u32>>],
    ) -> Result<Vec<Step>, ModelError> {
        let caches = model.empty_caches(sequences)?;
        let batch =
            PlantedBatch { planted: self, model, attention, caches, lens: vec![0; sequences] };
        Ok(drive(batch, PlantedBatch::feed, PlantedBatch::len, sequences, steps))
    }
}

/// A batch written plainly, sequence by sequence, with the switches.
struct PlantedBatch<'a> {
    planted: &'a Planted<ModelBug>,
    model: &'a Gpt2,
    attention: &'a ForwardVersion,
    caches: Vec<KvCache>,
    lens: Vec<usize>,
}

impl PlantedBatch<'_> {
    fn len(&self, seq: usize) -> usize {
        self.lens.get(seq).copied().unwrap_or(0)
    }

    fn feed(&mut self, tokens: &[&[u32]]) -> Result<Vec<Array2<f32>>, ModelError> {
        use ModelBug::*;
        let model = self.model;
        check_one_slice_per_sequence(tokens.len(), self.lens.len())?;
        if !self.planted.has(LateValidation) {
            for (b, t) in tokens.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
                model.config.check_tokens(t, self.lens[b])?;
            }
        }
        let mut out = Vec::new();
        for (b, t) in tokens.iter().enumerate() {
            if t.is_empty() {
                out.push(Array2::zeros((0, model.config.vocab_size)));
                continue;
            }
            let start = match () {
                _ if self.planted.has(PositionsFromZero) => 0,
                _ if self.planted.has(OneStartForAll) => self.lens[0],
                _ => self.lens[b],
            };
            model.config.check_tokens(t, start)?;
            let mut x = model.embed(t, start)?;
            for (layer, (block, cache)) in model.blocks.iter().zip(&mut self.caches).enumerate() {
                let (q, k, v) = model.queries_keys_values(block, &x);
                if !self.planted.has(AttendBeforeAppend) {
                    cache.append(b, k.view(), v.view())?;
                }
                let (keys, values) = cached(cache, b, &k, &v);
                let causal = !(self.planted.has(NoMaskForCachedChunks) && self.lens[b] > 0);
                let heads = attend(self.attention, q, keys, values, causal)?;
                if self.planted.has(AttendBeforeAppend) {
                    cache.append(b, k.view(), v.view())?;
                }
                model.finish_block(block, layer, &mut x, heads, &mut Monitor::default());
            }
            out.push(model.head(&x).1);
            self.lens[b] += t.len();
        }
        Ok(out)
    }
}

/// Sequence `seq`'s cached keys and values `[H, len, D]`; with nothing cached yet (only when
/// attending before appending), the new ones `k`, `v` alone.
fn cached(
    cache: &KvCache,
    seq: usize,
    k: &Array3<f32>,
    v: &Array3<f32>,
) -> (Array3<f32>, Array3<f32>) {
    if cache.len(seq) == 0 {
        return (k.clone(), v.clone());
    }
    lesson12::model::cached(cache, seq)
}
