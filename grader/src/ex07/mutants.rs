//! The planted-bug implementation of exercise 07: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array1, Array2, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex07;
use crate::mutants::{Planted, planted_bugs, rows};

planted_bugs! {
    /// Classic mistakes in the fast exp2 and the base-2 parallel forward (exercise 07).
    pub enum ParallelBug {
        /// `n = floor(x)`: the fraction reaches 1 and the polynomial loses accuracy.
        Exp2RoundsDown => ex07::EXP2_ACCURACY,
        /// No clamp at -127: very negative inputs give garbage exponent bits.
        Exp2NotClamped => ex07::EXP2_EXACT,
        /// Base-2 exponentials of natural-log scores: `log2(e)` not folded into the scale.
        NoLog2E => ex07::BASE_TWO,
        /// `L` left in base 2.
        LseInBase2 => ex07::BASE_TWO,
        /// The accumulator not rescaled when the maximum grows.
        MissingRescale => ex07::ANY_TILES,
        /// The last, shorter query tile never computed.
        TailTileDropped => ex07::ANY_TILES,
        /// The chunks' partial outputs averaged instead of weighed by `e^(L_s - L)`.
        SplitMergeWithoutWeights => ex07::SPLIT_DECODE,
        /// Each chunk stops one key short: the last key of every chunk is lost.
        ChunkDropsItsLastKey => ex07::SPLIT_DECODE,
        /// The causal mask counted from the chunk's first key.
        CausalPerChunk => ex07::SPLIT_CAUSAL,
        /// The partials merged last chunk first when several threads run.
        MergeOrderFollowsThreads => ex07::SPLIT_THREADS,
        /// Zero splits not refused: a division by zero panics.
        ZeroSplitsNotRefused => ex07::SPLIT_ERRORS,
    }
}

impl Planted<ParallelBug> {
    /// Row `i`'s partial `(O, L)` over the keys `keys` of head `(b, h)`, with the chunk bugs.
    #[allow(clippy::too_many_arguments)]
    fn partial(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        (b, h, i): (usize, usize, usize),
        keys: std::ops::Range<usize>,
        scale: f32,
        visible: usize,
    ) -> (Array1<f32>, f32) {
        let end = if self.has(ParallelBug::ChunkDropsItsLastKey) {
            keys.end.saturating_sub(1).max(keys.start)
        } else {
            keys.end
        };
        let last =
            if self.has(ParallelBug::CausalPerChunk) { keys.start + visible } else { visible };
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        let mut acc = Array1::<f32>::zeros(q.dim().3);
        for j in keys.start..end.min(last) {
            let x = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
            let new_m = m.max(x);
            let correction = (m - new_m).exp();
            let p = (x - new_m).exp();
            (l, m) = (l * correction + p, new_m);
            acc *= correction;
            acc.scaled_add(p, &v.slice(s![b, h, j, ..]));
        }
        if l > 0.0 { (acc / l, m + l.ln()) } else { (acc, f32::NEG_INFINITY) }
    }
}

impl crate::ex07::Exercise07 for Planted<ParallelBug> {
    fn attention_split_keys(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        splits: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        if splits == 0 && !self.has(ParallelBug::ZeroSplitsNotRefused) {
            return Err(AttentionError::InvalidTileSize { which: "key splits", value: 0 });
        }
        let n = shape.kv_len;
        // With the bug and zero splits, the chunk bounds below divide by zero (a panic).
        let mut order: Vec<usize> = (0..splits.max(1)).collect();
        if self.has(ParallelBug::MergeOrderFollowsThreads) && rayon::current_num_threads() > 1 {
            order.reverse();
        }
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape) {
            let visible = shape.visible_keys(i, options.causal);
            let parts: Vec<(Array1<f32>, f32)> = order
                .iter()
                .map(|&s| {
                    let keys = s * n / splits..(s + 1) * n / splits;
                    self.partial(q, k, v, (b, h, i), keys, scale, visible)
                })
                .collect();
            let max = parts.iter().fold(f32::NEG_INFINITY, |m, p| m.max(p.1));
            if max == f32::NEG_INFINITY {
                continue;
            }
            let weights: Vec<f32> = parts
                .iter()
                .map(|p| match (self.has(ParallelBug::SplitMergeWithoutWeights), p.1) {
                    (_, l) if l == f32::NEG_INFINITY => 0.0,
                    (true, _) => 1.0,
                    (false, l) => (l - max).exp(),
                })
                .collect();
            let total: f32 = weights.iter().sum();
            let mut o = Array2::<f32>::zeros((1, shape.head_dim));
            for (part, w) in parts.iter().zip(&weights) {
                o.row_mut(0).scaled_add(w / total, &part.0);
            }
            out.o.slice_mut(s![b, h, i, ..]).assign(&o.row(0));
            let lse_total: f32 = parts.iter().map(|p| (p.1 - max).exp()).sum();
            out.lse[[b, h, i]] = max + lse_total.ln();
        }
        Ok(out)
    }

    fn exp2(&self, x: f32) -> f32 {
        let x = if self.has(ParallelBug::Exp2NotClamped) { x } else { x.max(-127.0) };
        let n = if self.has(ParallelBug::Exp2RoundsDown) { x.floor() } else { x.round() };
        let p = lesson07::exp2::two_to_the_fraction(x - n);
        p * f32::from_bits(((n as i32).wrapping_add(127) as u32) << 23)
    }

    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        lesson03::TileSizes::new(query_rows, key_cols)?;
        let log2e = if self.has(ParallelBug::NoLog2E) { 1.0 } else { std::f32::consts::LOG2_E };
        let scale = scale * log2e;
        let computed_rows = if self.has(ParallelBug::TailTileDropped) {
            shape.q_len / query_rows * query_rows
        } else {
            shape.q_len
        };
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape).filter(|&(_, _, i)| i < computed_rows) {
            let (mut m, mut l, mut acc) =
                (f32::NEG_INFINITY, 0.0f32, Array1::<f32>::zeros(shape.head_dim));
            for j in 0..shape.visible_keys(i, options.causal) {
                let s = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                let new_m = m.max(s);
                let correction =
                    if self.has(ParallelBug::MissingRescale) { 1.0 } else { self.exp2(m - new_m) };
                let p = self.exp2(s - new_m);
                l = l * correction + p;
                acc *= correction;
                acc.scaled_add(p, &v.slice(s![b, h, j, ..]));
                m = new_m;
            }
            if l > 0.0 {
                out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / l));
                let base2 = m + l.log2();
                out.lse[[b, h, i]] = if self.has(ParallelBug::LseInBase2) {
                    base2
                } else {
                    std::f32::consts::LN_2 * base2
                };
            }
        }
        Ok(out)
    }
}
