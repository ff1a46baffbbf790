//! The reference solution of exercise 01's main task: naive attention with ALiBi slopes and a
//! logit softcap. It lives here, not in a lesson, because the book only explains the idea: the
//! learner writes this part.

use ndarray::{Array2, Array4, ArrayView1, ArrayViewMut1, Axis, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Feature,
    Features, check_inputs,
};

/// Naive attention whose scores are softcapped, then biased by ALiBi (FlashAttention-2's order):
///
/// `s_ij = c tanh(scale q_i.k_j / c) - m_h |i + Nkv - Nq - j|`, masked as usual.
///
/// `q [B, H, Nq, D]`, `k` and `v [B, H, Nkv, D]` -> `O [B, H, Nq, D]`, `L [B, H, Nq]`.
pub fn attention_with_features(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    features.check_supported(&shape, &[Feature::Alibi, Feature::Softcap])?;
    let mut out = AttentionOutput::empty(&shape);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let slope = features.alibi_slopes.as_ref().map_or(0.0, |slopes| slopes[h]);
            let mut scores = q.slice(s![b, h, .., ..]).dot(&k.slice(s![b, h, .., ..]).t());
            for ((i, j), score) in scores.indexed_iter_mut() {
                *score = biased_score(*score * scale, features.softcap, slope, &shape, i, j);
                if j >= shape.visible_keys(i, options.causal) {
                    *score = f32::NEG_INFINITY;
                }
            }
            softmax_rows(&mut scores, out.lse.slice_mut(s![b, h, ..]));
            out.o.slice_mut(s![b, h, .., ..]).assign(&scores.dot(&v.slice(s![b, h, .., ..])));
        }
    }
    Ok(out)
}

/// A scaled score `s` capped to `c tanh(s / c)`, then biased by `-slope` per key of distance
/// from row `i`'s diagonal (key `i + Nkv - Nq`).
fn biased_score(
    s: f32,
    softcap: Option<f32>,
    slope: f32,
    shape: &AttentionShape,
    i: usize,
    j: usize,
) -> f32 {
    let capped = softcap.map_or(s, |c| c * (s / c).tanh());
    let diagonal = i as i64 + shape.kv_len as i64 - shape.q_len as i64;
    capped - slope * (diagonal - j as i64).abs() as f32
}

/// Turns each row of `scores` `[Nq, Nkv]` into its softmax weights, in place, and writes its
/// logsumexp into `lse` `[Nq]` (a row of only `-inf` gives zeros and `-inf`).
fn softmax_rows(scores: &mut Array2<f32>, mut lse: ArrayViewMut1<f32>) {
    for (mut row, l) in scores.axis_iter_mut(Axis(0)).zip(lse.iter_mut()) {
        let max = row_max(row.view());
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            *l = f32::NEG_INFINITY;
            continue;
        }
        row.mapv_inplace(|x| (x - max).exp());
        let sum = row.sum();
        row /= sum;
        *l = max + sum.ln();
    }
}

fn row_max(row: ArrayView1<f32>) -> f32 {
    row.fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}
