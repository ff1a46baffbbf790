//! The f64 oracle: attention computed straight from its definition, in double precision.
//!
//! Every stage of the course is tested against this function. It is written for obviousness,
//! not speed: it materialises the whole score matrix of one head and works row by row.

use ndarray::{Array2, Array3, Array4, ArrayView2, s};

use crate::{AttentionError, AttentionOptions, AttentionOutput, AttentionShape};

// ANCHOR: oracle
/// Attention in f64 for f32 inputs `q [B,H,Nq,D]`, `k [B,H,Nkv,D]`, `v [B,H,Nkv,D]`.
///
/// Returns `O [B,H,Nq,D]` and `L [B,H,Nq]` in f64, following the contract in
/// [`crate::contract`].
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f64>, AttentionError> {
    let shape = AttentionShape::of(q, k, v)?;
    let scale = f64::from(options.scale_for(shape.head_dim)?);
    let mut o = Array4::<f64>::zeros(shape.q_dims());
    let mut lse = Array3::<f64>::from_elem(shape.lse_dims(), f64::NEG_INFINITY);

    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let q = to_f64(q.slice(s![b, h, .., ..]));
            let k = to_f64(k.slice(s![b, h, .., ..]));
            let v = to_f64(v.slice(s![b, h, .., ..]));
            let scores = q.dot(&k.t()) * scale; // [Nq, Nkv]

            for i in 0..shape.q_len {
                let visible = shape.visible_keys(i, options.causal);
                if visible == 0 {
                    continue; // O_i = 0 and L_i = -inf, as initialised
                }
                let row = scores.slice(s![i, ..visible]);
                let max = row.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let weights = row.mapv(|x| (x - max).exp());
                let sum = weights.sum();
                let out = weights.dot(&v.slice(s![..visible, ..])) / sum;
                o.slice_mut(s![b, h, i, ..]).assign(&out);
                lse[[b, h, i]] = max + sum.ln();
            }
        }
    }
    Ok(AttentionOutput { o, lse })
}
// ANCHOR_END: oracle

/// The largest visible score of every query row, `max_j S_ij` as `[B, H, Nq]` (`-inf` for a
/// row that sees no key). The logsumexp of a row can never be smaller than this.
pub fn row_max_scores(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<Array3<f64>, AttentionError> {
    let shape = AttentionShape::of(q, k, v)?;
    let scale = f64::from(options.scale_for(shape.head_dim)?);
    let mut maxima = Array3::<f64>::from_elem(shape.lse_dims(), f64::NEG_INFINITY);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let scores = to_f64(q.slice(s![b, h, .., ..]))
                .dot(&to_f64(k.slice(s![b, h, .., ..])).t())
                * scale;
            for i in 0..shape.q_len {
                let visible = shape.visible_keys(i, options.causal);
                maxima[[b, h, i]] =
                    scores.slice(s![i, ..visible]).fold(f64::NEG_INFINITY, |m, &x| m.max(x));
            }
        }
    }
    Ok(maxima)
}

fn to_f64(x: ArrayView2<f32>) -> Array2<f64> {
    x.mapv(f64::from)
}

#[cfg(test)]
mod tests {
    //! Known answers, worked out by hand, so the oracle itself is checked against something
    //! other than code.
    use super::*;
    use ndarray::{Array, array};

    fn head(rows: Array2<f32>) -> Array4<f32> {
        let (n, d) = rows.dim();
        rows.into_shape_with_order((1, 1, n, d)).unwrap()
    }

    #[test]
    fn one_key_returns_its_value_and_its_score() {
        let q = head(array![[1.0, 2.0]]);
        let k = head(array![[3.0, -1.0]]);
        let v = head(array![[5.0, 7.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(0.5)).unwrap();
        assert_eq!(out.o.as_slice().unwrap(), &[5.0, 7.0]);
        // S = 0.5 * (1*3 + 2*(-1)) = 0.5, and the logsumexp of one score is that score.
        assert_eq!(out.lse[[0, 0, 0]], 0.5);
    }

    #[test]
    fn identical_keys_average_the_values() {
        let q = head(array![[0.3, -0.7]]);
        let k = head(array![[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]);
        let v = head(array![[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 8.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(1.0)).unwrap();
        let o = out.o.slice(s![0, 0, 0, ..]).to_vec();
        assert!((o[0] - 2.5).abs() < 1e-12 && (o[1] - 2.0).abs() < 1e-12, "{o:?}");
        // Four equal scores s = 0.3 - 0.7 = -0.4: L = s + ln 4.
        let expected = -0.4f32 as f64 + 4f64.ln(); // -0.4 after f32 rounding of the inputs
        assert!((out.lse[[0, 0, 0]] - expected).abs() < 1e-6);
    }

    #[test]
    fn two_keys_weighted_by_hand() {
        // Scores 0 and ln 3 give weights 1/4 and 3/4.
        let q = head(array![[1.0]]);
        let k = head(array![[0.0], [3f32.ln()]]);
        let v = head(array![[4.0], [8.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(1.0)).unwrap();
        assert!((out.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-6);
        assert!((out.lse[[0, 0, 0]] - 4f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn default_scale_is_one_over_sqrt_d() {
        // D = 4 so the scale is 1/2; scores 0 and 2 ln 3 give weights 1/4 and 3/4.
        let q = head(array![[1.0, 0.0, 0.0, 0.0]]);
        let k = head(array![[0.0, 0.0, 0.0, 0.0], [2.0 * 3f32.ln(), 0.0, 0.0, 0.0]]);
        let v = head(array![[4.0, 0.0, 0.0, 0.0], [8.0, 0.0, 0.0, 0.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::new()).unwrap();
        assert!((out.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-6);
    }

    #[test]
    fn causal_mask_is_aligned_bottom_right() {
        // Nq = 2, Nkv = 4: row 0 sees keys 0..=2, row 1 sees all four keys.
        let q = Array::zeros((1, 1, 2, 1));
        let k = Array::zeros((1, 1, 4, 1));
        let v = head(array![[1.0], [2.0], [3.0], [10.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
        assert!((out.o[[0, 0, 0, 0]] - 2.0).abs() < 1e-12); // mean of 1, 2, 3
        assert!((out.o[[0, 0, 1, 0]] - 4.0).abs() < 1e-12); // mean of 1, 2, 3, 10
        assert!((out.lse[[0, 0, 0]] - 3f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn rows_that_see_no_key_give_zero_and_minus_infinity() {
        // Nq = 3, Nkv = 1: rows 0 and 1 see nothing, row 2 sees key 0.
        let q = Array::zeros((1, 1, 3, 2));
        let k = Array::zeros((1, 1, 1, 2));
        let v = head(array![[2.0, 3.0]]);
        let out = attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
        assert_eq!(out.o.as_slice().unwrap(), &[0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
        assert_eq!(out.lse.as_slice().unwrap(), &[f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0]);
    }

    #[test]
    fn row_max_is_the_largest_visible_score() {
        let q = head(array![[1.0], [2.0]]);
        let k = head(array![[3.0], [-1.0]]);
        let v = Array::zeros((1, 1, 2, 1));
        let opts = AttentionOptions::causal().with_scale(1.0);
        let maxima = row_max_scores(&q, &k, &v, &opts).unwrap();
        // Row 0 sees key 0 only (score 3); row 1 sees scores 6 and -2.
        assert_eq!(maxima.as_slice().unwrap(), &[3.0, 6.0]);
    }
}
