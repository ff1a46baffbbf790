//! The planted-bug implementation of exercise 02: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array1, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex02::{Exercise02, State};
use crate::mutants::{Planted, planted_bugs, rows};
use crate::{ex02, forward};

planted_bugs! {
    /// Classic mistakes in online softmax and online attention (exercise 02).
    pub enum OnlineBug {
        /// "Safe" softmax that does not subtract the maximum.
        SafeWithoutMax => ex02::SAFE_NEAR_1000,
        /// `push` adds `e^(x - m')` but does not rescale the old sum.
        PushWithoutRescale => ex02::PUSH,
        /// `merge` rescales only the first state.
        MergeRescalesOneSide => ex02::MERGE,
        /// `merge` of two empty states computes `e^(-inf - -inf)` = NaN.
        MergeWithoutEmptyGuard => ex02::MERGE_IDENTITY,
        /// Online attention rescales `l` but not the output accumulator.
        AccumulatorNotRescaled => forward::RANDOM,
        /// Online attention forgets `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
    }
}

impl Exercise02 for Planted<OnlineBug> {
    fn safe_softmax(&self, x: &[f32]) -> Vec<f32> {
        if self.has(OnlineBug::SafeWithoutMax) {
            lesson02::naive_softmax(x)
        } else {
            lesson02::safe_softmax(x)
        }
    }

    fn push(&self, (max, sum): State, x: f32) -> State {
        let new_max = max.max(x);
        if new_max == f32::NEG_INFINITY {
            return (max, sum);
        }
        let carried =
            if self.has(OnlineBug::PushWithoutRescale) { sum } else { sum * (max - new_max).exp() };
        (new_max, carried + (x - new_max).exp())
    }

    fn merge(&self, a: State, b: State) -> State {
        let max = a.0.max(b.0);
        if max == f32::NEG_INFINITY && !self.has(OnlineBug::MergeWithoutEmptyGuard) {
            return (f32::NEG_INFINITY, 0.0);
        }
        let b_part =
            if self.has(OnlineBug::MergeRescalesOneSide) { b.1 } else { b.1 * (b.0 - max).exp() };
        (max, a.1 * (a.0 - max).exp() + b_part)
    }

    fn online_softmax(&self, x: &[f32]) -> Vec<f32> {
        let (max, sum) = x.iter().fold((f32::NEG_INFINITY, 0.0), |st, &xi| self.push(st, xi));
        x.iter().map(|&xi| if sum > 0.0 { (xi - max).exp() / sum } else { 0.0 }).collect()
    }

    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
        if self.has(OnlineBug::NoScale) {
            scale = 1.0;
        }
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape) {
            let (mut state, mut acc) =
                ((f32::NEG_INFINITY, 0.0), Array1::<f32>::zeros(shape.head_dim));
            for j in 0..shape.visible_keys(i, options.causal) {
                let score = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                let new = self.push(state, score);
                if !self.has(OnlineBug::AccumulatorNotRescaled) {
                    acc *= (state.0 - new.0).exp();
                }
                acc.scaled_add((score - new.0).exp(), &v.slice(s![b, h, j, ..]));
                state = new;
            }
            if state.1 > 0.0 {
                out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / state.1));
                out.lse[[b, h, i]] = state.0 + state.1.ln();
            }
        }
        Ok(out)
    }
}
