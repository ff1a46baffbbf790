//! The planted-bug implementation of exercise 01: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array4, s};
use reference::layout::{bhsd_to_bshd, bshd_to_bhsd};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex01::Exercise01;
use crate::forward;
use crate::mutants::{Planted, planted_bugs, row_max, rows, weighted_sum};

planted_bugs! {
    /// Classic mistakes in naive attention (exercise 01).
    pub enum NaiveBug {
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
        /// The causal flag is ignored.
        CausalIgnored => forward::CAUSAL_SQUARE,
        /// Each query sees one key too many (the mask is shifted by one).
        MaskOffByOne => forward::CAUSAL_SQUARE,
        /// `e^S` without subtracting the row maximum: overflows on large logits.
        MaxNotSubtracted => forward::LARGE_LOGITS,
        /// The logsumexp stored as `ln(l)` instead of `m + ln(l)`.
        LseWithoutMax => forward::ONE_KEY,
        /// Inputs read as `[B, N, H, D]`: attention over heads instead of positions.
        HeadsAsSequence => forward::INDEPENDENT,
    }
}

impl Exercise01 for Planted<NaiveBug> {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        if self.has(NaiveBug::HeadsAsSequence) {
            let out = naive(&bshd_to_bhsd(q), &bshd_to_bhsd(k), &bshd_to_bhsd(v), options, None)?;
            let lse = out.lse.permuted_axes([0, 2, 1]).as_standard_layout().into_owned();
            return Ok(AttentionOutput { o: bhsd_to_bshd(&out.o), lse });
        }
        naive(q, k, v, options, self.bug)
    }
}

fn naive(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    bug: Option<NaiveBug>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
    if bug == Some(NaiveBug::NoScale) {
        scale = 1.0;
    }
    let mut out = AttentionOutput::empty(&shape);
    for (b, h, i) in rows(&shape) {
        let visible = match bug {
            Some(NaiveBug::CausalIgnored) => shape.kv_len,
            Some(NaiveBug::MaskOffByOne) => shape.visible_keys(i + 1, options.causal),
            _ => shape.visible_keys(i, options.causal),
        };
        if visible == 0 {
            continue;
        }
        let query = q.slice(s![b, h, i, ..]);
        let scores: Vec<f32> =
            (0..visible).map(|j| scale * query.dot(&k.slice(s![b, h, j, ..]))).collect();
        let max = if bug == Some(NaiveBug::MaxNotSubtracted) { 0.0 } else { row_max(&scores) };
        let weights: Vec<f32> = scores.iter().map(|&x| (x - max).exp()).collect();
        let sum: f32 = weights.iter().sum();
        let o = weighted_sum(&weights, |j| v.slice(s![b, h, j, ..])) / sum;
        out.o.slice_mut(s![b, h, i, ..]).assign(&o);
        out.lse[[b, h, i]] =
            if bug == Some(NaiveBug::LseWithoutMax) { sum.ln() } else { max + sum.ln() };
    }
    Ok(out)
}
