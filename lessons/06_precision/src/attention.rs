//! Attention with inputs stored in a 16-bit format, computed with f32 accumulation.

use lesson03::{RunningState, TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, Array3, Array4, ArrayView1, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::element::{Element, round_to, widen};

/// The output of a half-precision attention call: `O` in the storage format, and the
/// logsumexp `L` **always in f32** (the backward pass recomputes `P = e^(S - L)` from it, and
/// an error of `e` in `L` is a relative error of `e` in every weight of the row).
#[derive(Clone, Debug, PartialEq)]
pub struct Output<T> {
    /// `O [B, H, Nq, D]`, stored in `T`.
    pub o: Array4<T>,
    /// `L [B, H, Nq]`, f32.
    pub lse: Array3<f32>,
}

// ANCHOR: naive
/// Naive attention on `T` storage, the way a framework's unfused fp16 path runs it: every
/// intermediate matrix is a tensor of `T` in memory. Each score is a dot product accumulated
/// in f32 and then **stored in `T`**; the softmax statistics are f32, but `P` is **stored in
/// `T`**; `O = P V` is accumulated in f32 and stored in `T`.
pub fn naive<T: Element>(
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
) -> Result<Output<T>, AttentionError> {
    let CheckedInputs { shape, scale, logit_bound } = check_inputs(q, k, v, options)?;
    // S is stored in T: a logit beyond T's range would become an infinity, then NaN.
    if logit_bound > f64::from(T::LARGEST) {
        let largest = f64::from(T::LARGEST);
        return Err(AttentionError::LogitsOverflow { bound: logit_bound, largest });
    }
    let mut o = Array4::from_elem(q.dim(), T::from_f32(0.0));
    let mut lse = Array3::from_elem(shape.lse_dims(), f32::NEG_INFINITY);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            // S, stored in T (masked scores are -inf, which every format can hold).
            let scores: Array2<T> = Array2::from_shape_fn((shape.q_len, shape.kv_len), |(i, j)| {
                let visible = j < shape.visible_keys(i, options.causal);
                let score = if visible {
                    scale * dot(q.slice(s![b, h, i, ..]), k.slice(s![b, h, j, ..]))
                } else {
                    f32::NEG_INFINITY
                };
                T::from_f32(score)
            });
            // P, stored in T; m and l in f32.
            let mut probs = Array2::from_elem(scores.dim(), T::from_f32(0.0));
            for i in 0..shape.q_len {
                let row = scores.row(i);
                let max = row.iter().fold(f32::NEG_INFINITY, |m, x| m.max(x.to_f32()));
                if max == f32::NEG_INFINITY {
                    continue;
                }
                let sum: f32 = row.iter().map(|x| (x.to_f32() - max).exp()).sum();
                for (p, x) in probs.row_mut(i).iter_mut().zip(row) {
                    *p = T::from_f32((x.to_f32() - max).exp() / sum);
                }
                lse[[b, h, i]] = max + sum.ln();
            }
            // O = P V, accumulated in f32, stored in T.
            for i in 0..shape.q_len {
                for c in 0..shape.head_dim {
                    let acc = dot(probs.row(i), v.slice(s![b, h, .., c]));
                    o[[b, h, i, c]] = T::from_f32(acc);
                }
            }
        }
    }
    Ok(Output { o, lse })
}

/// `sum_i a_i b_i`, each term and the sum in f32.
fn dot<T: Element>(a: ArrayView1<T>, b: ArrayView1<T>) -> f32 {
    a.iter().zip(b.iter()).map(|(x, y)| x.to_f32() * y.to_f32()).sum()
}
// ANCHOR_END: naive

// ANCHOR: flash
/// FlashAttention on `T` storage: tiles of `Q`, `K`, `V` are widened to f32 when loaded, and
/// `S`, `P`, the statistics `m`, `l` and the accumulator stay f32 for the whole pass; only the
/// final `O` is rounded to `T`, once.
///
/// Widening is exact, so running lesson 03's f32 kernel on the widened inputs gives exactly
/// the numbers of a kernel that widens each tile as it loads it; this one widens whole tensors
/// up front for brevity.
pub fn flash<T: Element>(
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
    tiles: lesson03::TileSizes,
) -> Result<Output<T>, AttentionError> {
    check_inputs(q, k, v, options)?; // errors name the T tensors, before anything is widened
    let out = lesson03::attention(&widen(q), &widen(k), &widen(v), options, tiles)?;
    Ok(Output { o: round_to(&out.o), lse: out.lse })
}
// ANCHOR_END: flash

// ANCHOR: flash_rounding_weights
/// FlashAttention as tensor-core kernels run it: like [`flash`], except that each tile's `P` is
/// **rounded to `T`** before the product `P V`, because tensor cores multiply 16-bit matrices.
/// The Triton tutorial's fused attention (`p.to(v.dtype)`), the CS336 kernels and
/// FlashAttention-2's CUDA kernels all do this; `m`, `l` (which sums the unrounded `P`) and
/// the accumulator stay f32. Each weight then carries a relative error of up to `T`'s unit
/// roundoff, which the chapter's error table measures.
pub fn flash_rounding_weights<T: Element>(
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<Output<T>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let tiles = tiles.fitted_to(&shape);
    let (q, k, v) = (widen(q), widen(k), widen(v));
    let mut out = AttentionOutput::empty(&shape);
    for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
        for first_row in (0..shape.q_len).step_by(tiles.query_rows()) {
            let rows = first_row..(first_row + tiles.query_rows()).min(shape.q_len);
            let q_tile = q.slice(s![b, h, rows.clone(), ..]);
            let mut state = RunningState::new(rows.len(), shape.head_dim);
            for first_key in (0..shape.kv_len).step_by(tiles.key_cols()) {
                let keys = first_key..(first_key + tiles.key_cols()).min(shape.kv_len);
                let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                if kind == TileKind::Skipped {
                    break;
                }
                let mut p = Array2::<f32>::zeros((rows.len(), keys.len()));
                let k_tile = k.slice(s![b, h, keys.clone(), ..]);
                general_mat_mul(scale, &q_tile, &k_tile.t(), 0.0, &mut p); // S
                if kind == TileKind::Masked {
                    mask_future_keys(&mut p.view_mut(), rows.start, keys.start, &shape);
                }
                state.rescale_to_tile(&mut p.view_mut()); // S becomes P; l sums it in f32
                p.mapv_inplace(|w| T::from_f32(w).to_f32()); // P rounded to T for the product
                state.add_weighted_values(p.view(), v.slice(s![b, h, keys, ..]));
            }
            state.finish(
                out.o.slice_mut(s![b, h, rows.clone(), ..]),
                out.lse.slice_mut(s![b, h, rows]),
            );
        }
    }
    Ok(Output { o: round_to(&out.o), lse: out.lse })
}
// ANCHOR_END: flash_rounding_weights
