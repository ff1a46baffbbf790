//! The reference solution of exercise 07's main task: split-key parallelism (flash-decoding on
//! the CPU). It lives here, not in a lesson, because the book only explains the idea: the
//! learner writes this part.

use std::ops::Range;

use ndarray::{Array1, Array2, Array4, ArrayView2, s};
use rayon::prelude::*;
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

/// Attention in which each head's keys are cut into `splits` consecutive chunks of nearly equal
/// size, one rayon task per (batch, head, chunk), each giving every query row a partial result
/// over its chunk; the partials are then merged in chunk order, so the bits do not depend on
/// the number of threads. Shapes as in `lesson07::attention`; `splits >= 1`.
pub fn attention_split_keys(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    splits: usize,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    if splits == 0 {
        return Err(AttentionError::InvalidTileSize { which: "key splits", value: 0 });
    }
    let chunk = |s: usize| s * shape.kv_len / splits..(s + 1) * shape.kv_len / splits;
    let tasks: Vec<(usize, usize, usize)> = (0..shape.batch)
        .flat_map(|b| (0..shape.heads).flat_map(move |h| (0..splits).map(move |s| (b, h, s))))
        .collect();
    // Every chunk in parallel; `collect` keeps the tasks' order.
    let partials: Vec<Partial> = tasks
        .par_iter()
        .map(|&(b, h, s)| {
            let visible = |i| shape.visible_keys(i, options.causal);
            let (q, k, v) =
                (q.slice(s![b, h, .., ..]), k.slice(s![b, h, .., ..]), v.slice(s![b, h, .., ..]));
            Partial::over(q, k, v, scale, chunk(s), visible)
        })
        .collect();
    // Then each head's chunks merged in order.
    let mut out = AttentionOutput::empty(&shape);
    for (head, parts) in partials.chunks(splits).enumerate() {
        let (b, h) = (head / shape.heads, head % shape.heads);
        for i in 0..shape.q_len {
            let max = parts.iter().fold(f32::NEG_INFINITY, |m, p| m.max(p.lse[i]));
            if max == f32::NEG_INFINITY {
                continue; // no chunk holds a key this row sees: O = 0, L = -inf
            }
            let weights: Vec<f32> = parts.iter().map(|p| (p.lse[i] - max).exp()).collect();
            let total: f32 = weights.iter().sum();
            let mut o = out.o.slice_mut(s![b, h, i, ..]);
            for (part, w) in parts.iter().zip(&weights) {
                o.scaled_add(w / total, &part.o.row(i));
            }
            out.lse[[b, h, i]] = max + total.ln();
        }
    }
    Ok(out)
}

/// One chunk's partial result for every query row of a head: `O` normalised over the chunk's
/// keys the row sees, and their logsumexp (`-inf` if none).
struct Partial {
    o: Array2<f32>,   // [Nq, D]
    lse: Array1<f32>, // [Nq]
}

impl Partial {
    fn over(
        q: ArrayView2<f32>,
        k: ArrayView2<f32>,
        v: ArrayView2<f32>,
        scale: f32,
        keys: Range<usize>,
        visible: impl Fn(usize) -> usize,
    ) -> Self {
        let (q_len, head_dim) = q.dim();
        let mut part = Self {
            o: Array2::zeros((q_len, head_dim)),
            lse: Array1::from_elem(q_len, f32::NEG_INFINITY),
        };
        for i in 0..q_len {
            let seen = keys.start..keys.end.min(visible(i));
            if seen.is_empty() {
                continue;
            }
            let scores: Vec<f32> = seen.clone().map(|j| scale * q.row(i).dot(&k.row(j))).collect();
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let weights: Vec<f32> = scores.iter().map(|&x| (x - max).exp()).collect();
            let sum: f32 = weights.iter().sum();
            let mut o = part.o.row_mut(i);
            for (j, w) in seen.zip(&weights) {
                o.scaled_add(w / sum, &v.row(j));
            }
            part.lse[i] = max + sum.ln();
        }
        part
    }
}
