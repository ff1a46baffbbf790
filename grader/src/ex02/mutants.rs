//! The planted-bug implementation of exercise 02: one classic mistake per switch (see
//! [`crate::mutants`]).

use std::ops::Range;

use ndarray::{Array1, Array4, s};
use reference::features::{check_key_range, check_parts};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex02::{Exercise02, State};
use crate::mutants::{Planted, planted_bugs, row_max, rows};
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
        /// The merge averages the parts' `O` instead of weighing each by `e^(L_s - L)`.
        MergeWithoutWeights => ex02::MERGE_PARTS_BY_HAND,
        /// The merge computes `e^(L_s)` without subtracting the largest `L` first.
        MergeWithoutMax => ex02::MERGE_LARGE_L,
        /// The merge of rows that no part saw computes `e^(-inf - -inf)` = NaN.
        MergeEmptyRowsNaN => ex02::MERGE_EMPTY_PARTS,
        /// Partial attention applies the causal mask to positions counted from the range's
        /// start.
        PartialMaskFromRangeStart => ex02::PARTIAL,
        /// Partial attention starts at key 0 instead of the range's start.
        PartialFromKeyZero => ex02::PARTIAL,
        /// Partial attention does not check its range: keys past `Nkv` panic.
        RangeNotChecked => ex02::SPLIT_ERRORS,
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
        self.online(q, k, v, options, 0..k.dim().2)
    }

    fn partial_attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        keys: Range<usize>,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        if !self.has(OnlineBug::RangeNotChecked) {
            let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
            check_key_range(&shape, &keys)?;
        }
        self.online(q, k, v, options, keys)
    }

    fn merge_partials(
        &self,
        parts: &[AttentionOutput<f32>],
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        check_parts(parts)?;
        let mut out =
            AttentionOutput { o: Array4::zeros(parts[0].o.dim()), lse: parts[0].lse.clone() };
        for (index, l) in out.lse.indexed_iter_mut() {
            let (b, h, i) = index;
            let part_lse: Vec<f32> = parts.iter().map(|p| p.lse[index]).collect();
            let max = if self.has(OnlineBug::MergeWithoutMax) { 0.0 } else { row_max(&part_lse) };
            if max == f32::NEG_INFINITY && !self.has(OnlineBug::MergeEmptyRowsNaN) {
                continue; // no part saw this row: O = 0, L = -inf
            }
            let weights: Vec<f32> =
                part_lse
                    .iter()
                    .map(|&ls| {
                        if self.has(OnlineBug::MergeWithoutWeights) {
                            1.0
                        } else {
                            (ls - max).exp()
                        }
                    })
                    .collect();
            let seen: Vec<f32> = part_lse
                .iter()
                .map(|&ls| if ls == f32::NEG_INFINITY { 0.0 } else { 1.0 })
                .collect();
            let sum: f32 = if self.has(OnlineBug::MergeWithoutWeights) {
                seen.iter().sum()
            } else {
                weights.iter().sum()
            };
            let mut o = out.o.slice_mut(s![b, h, i, ..]);
            for (part, (w, seen)) in parts.iter().zip(weights.iter().zip(&seen)) {
                let w = if self.has(OnlineBug::MergeWithoutWeights) { w * seen } else { *w };
                o.scaled_add(w / sum, &part.o.slice(s![b, h, i, ..]));
            }
            *l = max + weights.iter().sum::<f32>().ln();
        }
        Ok(out)
    }
}

impl Planted<OnlineBug> {
    /// Online attention over the keys `keys`, with the bugs.
    fn online(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        keys: Range<usize>,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
        if self.has(OnlineBug::NoScale) {
            scale = 1.0;
        }
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape) {
            let (mut state, mut acc) =
                ((f32::NEG_INFINITY, 0.0), Array1::<f32>::zeros(shape.head_dim));
            let visible = shape.visible_keys(i, options.causal);
            let keys = match self.bug {
                Some(OnlineBug::PartialFromKeyZero) => 0..keys.end.min(visible),
                Some(OnlineBug::PartialMaskFromRangeStart) => {
                    keys.start..keys.end.min(keys.start + visible)
                }
                _ => keys.start..keys.end.min(visible),
            };
            for j in keys {
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
