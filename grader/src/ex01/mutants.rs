//! The planted-bug implementation of exercise 01: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array4, s};
use reference::layout::{bhsd_to_bshd, bshd_to_bhsd};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, Feature, Features,
    check_inputs,
};

use crate::ex01::Exercise01;
use crate::mutants::{Planted, planted_bugs, row_max, rows, weighted_sum};
use crate::{ex01, forward};

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
        /// The ALiBi bias added instead of subtracted: far keys weigh more.
        AlibiSignFlipped => ex01::ALIBI_BY_HAND,
        /// The ALiBi distance `|i - j|`, aligned top-left instead of bottom-right.
        AlibiTopLeft => ex01::ALIBI_BY_HAND,
        /// Every head uses the first head's slope.
        AlibiFirstSlopeForEveryHead => ex01::ALIBI_RANDOM,
        /// The softcap applied to `q.k` before the scale.
        SoftcapBeforeScale => ex01::SOFTCAP_BY_HAND,
        /// The softcap applied after the ALiBi bias.
        SoftcapAfterAlibi => ex01::ALIBI_AND_SOFTCAP,
        /// The features are not checked: a slope missing for a head panics, a window is
        /// silently left out.
        FeaturesNotChecked => ex01::FEATURE_ERRORS,
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
            let (q, k, v) = (bshd_to_bhsd(q), bshd_to_bhsd(k), bshd_to_bhsd(v));
            let out = naive(&q, &k, &v, options, &Features::default(), None)?;
            let lse = out.lse.permuted_axes([0, 2, 1]).as_standard_layout().into_owned();
            return Ok(AttentionOutput { o: bhsd_to_bshd(&out.o), lse });
        }
        naive(q, k, v, options, &Features::default(), self.bug)
    }

    fn attention_with_features(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &Features,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        naive(q, k, v, options, features, self.bug)
    }
}

fn naive(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    bug: Option<NaiveBug>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
    if bug != Some(NaiveBug::FeaturesNotChecked) {
        features.check_supported(&shape, &[Feature::Alibi, Feature::Softcap])?;
    }
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
        let score = |j: usize| {
            let dot = query.dot(&k.slice(s![b, h, j, ..]));
            featured_score(dot, scale, features, (h, i, j), &shape, bug)
        };
        let scores: Vec<f32> = (0..visible).map(score).collect();
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

/// The score of row `i` and key `j` of head `h`: scaled, softcapped, biased by ALiBi, with the
/// feature bugs.
fn featured_score(
    dot: f32,
    scale: f32,
    features: &Features,
    (h, i, j): (usize, usize, usize),
    shape: &reference::AttentionShape,
    bug: Option<NaiveBug>,
) -> f32 {
    let cap = |s: f32| features.softcap.map_or(s, |c| c * (s / c).tanh());
    let mut s =
        if bug == Some(NaiveBug::SoftcapBeforeScale) { cap(dot) * scale } else { scale * dot };
    if !matches!(bug, Some(NaiveBug::SoftcapBeforeScale | NaiveBug::SoftcapAfterAlibi)) {
        s = cap(s);
    }
    if let Some(slopes) = &features.alibi_slopes {
        let slope =
            if bug == Some(NaiveBug::AlibiFirstSlopeForEveryHead) { slopes[0] } else { slopes[h] };
        let diagonal = if bug == Some(NaiveBug::AlibiTopLeft) {
            i as i64
        } else {
            i as i64 + shape.kv_len as i64 - shape.q_len as i64
        };
        let bias = slope * (diagonal - j as i64).abs() as f32;
        s = if bug == Some(NaiveBug::AlibiSignFlipped) { s + bias } else { s - bias };
    }
    if bug == Some(NaiveBug::SoftcapAfterAlibi) { cap(s) } else { s }
}
