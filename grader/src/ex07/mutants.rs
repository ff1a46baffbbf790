//! The planted-bug implementation of exercise 07: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array1, Array4, s};
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
    }
}

impl crate::ex07::Exercise07 for Planted<ParallelBug> {
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
