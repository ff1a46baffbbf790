//! The reference solution of exercise 02's main task: attention over a range of keys, and the
//! merge of such partial results into attention over all of them (flash-decoding's combine
//! step). It lives here, not in a lesson, because the book only explains the idea: the learner
//! writes this part.

use std::ops::Range;

use ndarray::{Array1, Array4, Zip, s};
use reference::features::{check_key_range, check_parts};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

/// Online attention over the keys `keys` only, each keeping its place in the whole problem (the
/// causal mask still aligns row `i` with key `i + Nkv - Nq`): `O` normalised over the keys
/// that the row sees in the range, and their logsumexp `L`; `O = 0`, `L = -inf` for a row that
/// sees none of them.
///
/// `q [B, H, Nq, D]`, `k` and `v [B, H, Nkv, D]` -> `O [B, H, Nq, D]`, `L [B, H, Nq]`.
pub fn partial_attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    keys: Range<usize>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    check_key_range(&shape, &keys)?;
    let mut out = AttentionOutput::empty(&shape);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for i in 0..shape.q_len {
                let visible = keys.start..keys.end.min(shape.visible_keys(i, options.causal));
                let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
                let mut acc = Array1::<f32>::zeros(shape.head_dim);
                for j in visible {
                    let score = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                    let new_max = max.max(score);
                    let rescale = (max - new_max).exp(); // e^(-inf) = 0 for the first key
                    let weight = (score - new_max).exp();
                    acc = acc * rescale + &(&v.slice(s![b, h, j, ..]) * weight);
                    (max, sum) = (new_max, sum * rescale + weight);
                }
                if sum > 0.0 {
                    out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / sum));
                    out.lse[[b, h, i]] = max + sum.ln();
                }
            }
        }
    }
    Ok(out)
}

/// The result over the union of the parts' keys, from each part's `O` and `L`:
///
/// `L = ln sum_s e^(L_s)`, `O = sum_s e^(L_s - L) O_s`,
///
/// computed from the largest `L_s` so that nothing overflows. A part whose row saw no key
/// (`L_s = -inf`) weighs 0; a row no part saw gives `O = 0`, `L = -inf`.
pub fn merge_partials(
    parts: &[AttentionOutput<f32>],
) -> Result<AttentionOutput<f32>, AttentionError> {
    check_parts(parts)?;
    let largest = parts.iter().skip(1).fold(parts[0].lse.clone(), |m, part| {
        Zip::from(&m).and(&part.lse).map_collect(|&a, &b| a.max(b))
    });
    let mut out = AttentionOutput { o: Array4::zeros(parts[0].o.dim()), lse: largest.clone() };
    let mut total = largest.mapv(|_| 0.0f32); // sum of e^(L_s - max) per row
    for part in parts {
        // e^(L_s - max): 0 for a part that saw nothing, and for a row that no part saw.
        let weight = Zip::from(&part.lse)
            .and(&largest)
            .map_collect(|&l, &m| if l == f32::NEG_INFINITY { 0.0 } else { (l - m).exp() });
        total += &weight;
        out.o += &(&part.o * &weight.insert_axis(ndarray::Axis(3)));
    }
    for ((b, h, i), &sum) in total.indexed_iter() {
        if sum > 0.0 {
            out.o.slice_mut(s![b, h, i, ..]).mapv_inplace(|x| x / sum);
            out.lse[[b, h, i]] += sum.ln();
        }
    }
    Ok(out)
}
