//! The f64 oracle: attention computed straight from its definition, in double precision.
//!
//! Every stage of the course is tested against this function. It is written for obviousness,
//! not speed: it materialises the whole score matrix of one head and works row by row.

use ndarray::{Array2, Array3, Array4, ArrayView2, Axis, s};

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

/// The gradients of a scalar loss with respect to Q, K and V, given `dO = dLoss/dO`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients<T> {
    /// `dQ [B, H, Nq, D]`
    pub dq: Array4<T>,
    /// `dK [B, H, Nkv, D]`
    pub dk: Array4<T>,
    /// `dV [B, H, Nkv, D]`
    pub dv: Array4<T>,
}

// ANCHOR: backward
/// The attention backward pass in f64, straight from the chain rule, with every matrix
/// materialised. For one head, with `P` the softmax weights (0 where masked):
///
/// $$ dV = P^\top dO,\quad dP = dO\,V^\top,\quad D_i = \textstyle\sum_j P_{ij}\,dP_{ij}
///    = dO_i \cdot O_i,\quad dS = P \circ (dP - D),$$
/// $$ dQ = \mathrm{scale}\cdot dS\,K,\qquad dK = \mathrm{scale}\cdot dS^\top Q . $$
pub fn attention_backward(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    d_o: &Array4<f32>,
) -> Result<Gradients<f64>, AttentionError> {
    let shape = AttentionShape::of(q, k, v)?;
    crate::contract::check_same_shape("dO", d_o, "Q", q)?;
    let scale = f64::from(options.scale_for(shape.head_dim)?);
    let mut grads = Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let head = |x: &Array4<f32>| to_f64(x.slice(s![b, h, .., ..]));
            let (q, k, v, d_o) = (head(q), head(k), head(v), head(d_o));
            let p = probabilities(&q, &k, scale, &shape, options.causal); // [Nq, Nkv]
            let d_v = p.t().dot(&d_o);
            let d_p = d_o.dot(&v.t());
            let d = (&p * &d_p).sum_axis(Axis(1)); // D_i = sum_j P_ij dP_ij
            let d_s = &p * &(&d_p - &d.insert_axis(Axis(1)));
            grads.dq.slice_mut(s![b, h, .., ..]).assign(&(d_s.dot(&k) * scale));
            grads.dk.slice_mut(s![b, h, .., ..]).assign(&(d_s.t().dot(&q) * scale));
            grads.dv.slice_mut(s![b, h, .., ..]).assign(&d_v);
        }
    }
    Ok(grads)
}

/// The softmax weights `P [Nq, Nkv]` of one head, 0 for masked entries and for rows that see
/// no key.
fn probabilities(
    q: &Array2<f64>,
    k: &Array2<f64>,
    scale: f64,
    shape: &AttentionShape,
    causal: bool,
) -> Array2<f64> {
    let mut p = q.dot(&k.t()) * scale;
    for (i, mut row) in p.outer_iter_mut().enumerate() {
        let visible = shape.visible_keys(i, causal);
        let max = row.slice(s![..visible]).fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        row.slice_mut(s![visible..]).fill(0.0);
        if visible > 0 {
            let mut seen = row.slice_mut(s![..visible]);
            seen.mapv_inplace(|x| (x - max).exp());
            let sum = seen.sum();
            seen /= sum;
        }
    }
    p
}
// ANCHOR_END: backward

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

    /// `sum(O * dO)` in f64 for f64 inputs of one head: the loss whose gradient is the backward
    /// pass given `dO`.
    fn loss(
        q: &Array2<f64>,
        k: &Array2<f64>,
        v: &Array2<f64>,
        d_o: &Array2<f64>,
        shape: &AttentionShape,
        causal: bool,
    ) -> f64 {
        let scale = 1.0 / (q.ncols() as f64).sqrt();
        (probabilities(q, k, scale, shape, causal).dot(v) * d_o).sum()
    }

    #[test]
    fn backward_matches_central_finite_differences() {
        use crate::{Problem, ProblemSpec};
        for (nq, nkv, causal) in [(3, 4, false), (4, 4, true), (5, 3, true), (2, 6, true)] {
            let p = Problem::random(&ProblemSpec::new(1, 1, nq, nkv, 3).causal(causal), 17);
            let d_o = Problem::random(&ProblemSpec::new(1, 1, nq, nq, 3), 18).q;
            let grads = attention_backward(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
            let shape = AttentionShape { batch: 1, heads: 1, q_len: nq, kv_len: nkv, head_dim: 3 };
            let head = |x: &Array4<f32>| x.slice(s![0, 0, .., ..]).mapv(f64::from);
            let (q, k, v, d_o) = (head(&p.q), head(&p.k), head(&p.v), head(&d_o));
            let h = 1e-6;
            for (name, analytic, which) in
                [("dQ", &grads.dq, 0), ("dK", &grads.dk, 1), ("dV", &grads.dv, 2)]
            {
                let base = [&q, &k, &v][which];
                for ((i, j), _) in base.indexed_iter() {
                    let shifted = |delta: f64| {
                        let mut x = [q.clone(), k.clone(), v.clone()];
                        x[which][[i, j]] += delta;
                        loss(&x[0], &x[1], &x[2], &d_o, &shape, causal)
                    };
                    let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
                    let exact = analytic[[0, 0, i, j]];
                    assert!(
                        (numeric - exact).abs() < 1e-6 * (1.0 + exact.abs()),
                        "{name}[{i},{j}] Nq={nq} Nkv={nkv} causal={causal}: analytic {exact}, numeric {numeric}"
                    );
                }
            }
        }
    }

    #[test]
    fn backward_weights_are_the_forward_weights() {
        use crate::{Problem, ProblemSpec};
        let p = Problem::random(&ProblemSpec::new(1, 1, 5, 3, 4).causal(true), 2);
        let shape = AttentionShape::of(&p.q, &p.k, &p.v).unwrap();
        let head = |x: &Array4<f32>| x.slice(s![0, 0, .., ..]).mapv(f64::from);
        let o = probabilities(&head(&p.q), &head(&p.k), 0.5, &shape, true).dot(&head(&p.v));
        let expected = attention(&p.q, &p.k, &p.v, &p.options).unwrap().o;
        for (a, b) in o.iter().zip(expected.iter()) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn backward_rejects_a_do_of_the_wrong_shape() {
        let x = Array4::<f32>::zeros((1, 2, 3, 4));
        let wrong = Array4::<f32>::zeros((1, 2, 3, 5));
        let err = attention_backward(&x, &x, &x, &AttentionOptions::new(), &wrong).unwrap_err();
        assert_eq!(
            err.to_string().split(';').next().unwrap(),
            "dO has head_dim = 5 but Q has head_dim = 4"
        );
    }
}
