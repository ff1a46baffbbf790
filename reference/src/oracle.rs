//! The f64 oracle: attention computed straight from its definition, in double precision.
//!
//! Every stage of the course is tested against this function. It is written for obviousness,
//! not speed: it materialises the whole score matrix of one head and works row by row.
//!
//! [`expected`] and [`expected_gradients`] return the same answers together with the size of
//! the terms behind every element, which the error model of
//! [`crate::compare`](mod@crate::compare) turns into the error each element may carry.

use std::ops::Range;

use ndarray::{Array2, Array3, Array4, ArrayView2, Axis, Zip, s};

use crate::contract::{check_finite, check_inputs};
use crate::{AttentionError, AttentionOptions, AttentionOutput, AttentionShape, Gradients};

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
    let checked = check_inputs(q, k, v, options)?;
    let (shape, scale) = (checked.shape, f64::from(checked.scale));
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
    let checked = check_inputs(q, k, v, options)?;
    let (shape, scale) = (checked.shape, f64::from(checked.scale));
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
    let checked = check_inputs(q, k, v, options)?;
    let (shape, scale) = (checked.shape, f64::from(checked.scale));
    crate::contract::check_same_shape("dO", d_o, "Q", q)?;
    check_finite("dO", d_o)?;
    let mut grads = Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let head = |x: &Array4<f32>| to_f64(x.slice(s![b, h, .., ..]));
            let (q, k, v, d_o) = (head(q), head(k), head(v), head(d_o));
            let p = probabilities(&q, 0, &k, scale, &shape, options.causal); // [Nq, Nkv]
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

/// The softmax weights `P` of query rows `first_row..` of one head (`q` holds those rows), 0
/// for masked entries and for rows that see no key.
fn probabilities(
    q: &Array2<f64>,
    first_row: usize,
    k: &Array2<f64>,
    scale: f64,
    shape: &AttentionShape,
    causal: bool,
) -> Array2<f64> {
    let mut p = q.dot(&k.t()) * scale;
    for (i, mut row) in p.outer_iter_mut().enumerate() {
        let visible = shape.visible_keys(first_row + i, causal);
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

// ANCHOR: expected
/// The oracle's forward answer, and the size of the terms behind each element: the quantities
/// the error model ([`crate::Tolerance`]) scales each element's allowed error by.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// `O` and `L`, from [`attention`].
    pub output: AttentionOutput<f64>,
    /// `M_id = sum_j P_ij |V_jd|` over the keys row `i` sees: the size of the terms whose sum
    /// is `O_id` (equal to `|O_id|` only when the `V_jd` share a sign). An answer that is small
    /// because its terms cancel is judged by the size of its terms.
    pub value_terms: Array4<f64>,
    /// `sum_j |V_jd|` over the keys row `i` sees: what an absolute error of 1 in every weight
    /// would cost `O_id`. A weight that underflows (below the format's normal range) has lost
    /// its relative precision, so the error model allows each weight the format's absolute
    /// underflow error; that only matters where `O_id` is made of such weights alone.
    pub visible_values: Array4<f64>,
    /// `Λ_i = |scale| max_j sum_d |q_id| |k_jd|` over the keys row `i` sees (0 if none): the
    /// size of the terms of the row's dot products, which sets the rounding error of its logits.
    pub logit_terms: Array3<f64>,
    /// `D`, the length of each dot product `q_i . k_j`.
    pub head_dim: usize,
    /// `Nkv`, the most terms a sum over keys can have.
    pub kv_len: usize,
}
// ANCHOR_END: expected

/// [`attention`], with the term sizes of [`Expected`].
pub fn expected(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<Expected, AttentionError> {
    expected_rows(q, k, v, options, 0..q.dim().2)
}

/// [`expected`] for query rows `rows` only (the output has `rows.len()` rows): the oracle for
/// a few rows of a problem too large to compute whole in f64, as benchmarks validate.
pub fn expected_rows(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    rows: Range<usize>,
) -> Result<Expected, AttentionError> {
    let checked = check_inputs(q, k, v, options)?;
    let (shape, scale) = (checked.shape, f64::from(checked.scale));
    assert!(rows.end <= shape.q_len, "rows {rows:?} of {} query rows", shape.q_len);
    let dims = (shape.batch, shape.heads, rows.len());
    let mut output = AttentionOutput {
        o: Array4::<f64>::zeros((dims.0, dims.1, dims.2, shape.head_dim)),
        lse: Array3::<f64>::from_elem(dims, f64::NEG_INFINITY),
    };
    let mut value_terms = output.o.clone();
    let mut visible_values = output.o.clone();
    let mut logit_terms = Array3::<f64>::zeros(dims);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let head = |x: &Array4<f32>| to_f64(x.slice(s![b, h, .., ..]));
            let q = to_f64(q.slice(s![b, h, rows.clone(), ..]));
            let (k, v) = (head(k), head(v));
            let p = probabilities(&q, rows.start, &k, scale, &shape, options.causal);
            output.o.slice_mut(s![b, h, .., ..]).assign(&p.dot(&v));
            let scores = q.dot(&k.t()) * scale;
            for (r, row) in scores.outer_iter().enumerate() {
                let seen = row.slice(s![..shape.visible_keys(rows.start + r, options.causal)]);
                if !seen.is_empty() {
                    let max = seen.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                    output.lse[[b, h, r]] = max + seen.mapv(|x| (x - max).exp()).sum().ln();
                }
            }
            let v_size = v.mapv(f64::abs);
            value_terms.slice_mut(s![b, h, .., ..]).assign(&p.dot(&v_size));
            let seen = visible(rows.len(), rows.start, &shape, options.causal);
            visible_values.slice_mut(s![b, h, .., ..]).assign(&seen.dot(&v_size));
            let largest = largest_logit_terms(&q, rows.start, &k, scale, &shape, options.causal);
            logit_terms.slice_mut(s![b, h, ..]).assign(&largest);
        }
    }
    let (head_dim, kv_len) = (shape.head_dim, shape.kv_len);
    Ok(Expected { output, value_terms, visible_values, logit_terms, head_dim, kv_len })
}

/// 1 where row `first_row + i` sees key `j`, 0 elsewhere: `[rows, Nkv]`.
fn visible(rows: usize, first_row: usize, shape: &AttentionShape, causal: bool) -> Array2<f64> {
    Array2::from_shape_fn((rows, shape.kv_len), |(i, j)| {
        if j < shape.visible_keys(first_row + i, causal) { 1.0 } else { 0.0 }
    })
}

/// `Λ_i = |scale| max_j sum_d |q_id| |k_jd|` over the keys row `first_row + i` sees (0 if
/// none), one per row of `q`.
fn largest_logit_terms(
    q: &Array2<f64>,
    first_row: usize,
    k: &Array2<f64>,
    scale: f64,
    shape: &AttentionShape,
    causal: bool,
) -> ndarray::Array1<f64> {
    let terms = q.mapv(f64::abs).dot(&k.mapv(f64::abs).t()) * scale.abs(); // [rows, Nkv]
    terms
        .outer_iter()
        .enumerate()
        .map(|(i, row)| {
            let seen = row.slice(s![..shape.visible_keys(first_row + i, causal)]);
            seen.fold(0.0f64, |m, &x| m.max(x))
        })
        .collect()
}

// ANCHOR: expected_gradients
/// The oracle's gradients, and for each element the size of the rounding errors an f32
/// backward pass makes in it, in units of f32's unit roundoff (the error model; the tolerance
/// multiplies these by the unit roundoff and its safety factor).
///
/// For a row `i` that sees keys, with `Λ_i` as in [`Expected`] and `L_i` its logsumexp, a
/// recomputed weight `P_ij = e^(S_ij - L_i)` is off by a relative error of about
/// `w_i = (sqrt(D) + 2) Λ_i + |L_i| + sqrt(D) + sqrt(Nq) + sqrt(Nkv) + 2` units (the logit's
/// dot product, `L`'s rounding, and the lengths of the sums that follow). Then, with
/// `A_ij = sum_d |dO_id| |V_jd|` (the terms of `dP_ij`) and `B_i = sum_j P_ij A_ij` (the terms
/// of `D_i`, by either formula), `dS_ij = P_ij (dP_ij - D_i)` carries about
/// `E_ij = P_ij w_i (A_ij + B_i)`, and
///
/// $$ dV_{jd}:\ \textstyle\sum_i P_{ij}\, w_i\, |dO_{id}|,\qquad
///    dQ_{id}:\ |\mathrm{scale}| \sum_j E_{ij} |K_{jd}|,\qquad
///    dK_{jd}:\ |\mathrm{scale}| \sum_i E_{ij} |Q_{id}| . $$
///
/// A gradient that is zero by cancellation (one visible key makes `dS` exactly 0) is judged
/// by the size of the terms that cancel, not by its own size. As in the forward pass, a weight
/// below f32's normal range may be off by an absolute error: the same sums with 1 in place of
/// `P_ij w_i`, over the visible weights, say what that costs each element.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedGradients {
    /// `dQ`, `dK`, `dV`, from [`attention_backward`].
    pub gradients: Gradients<f64>,
    /// The error sizes above, element by element, in units of the unit roundoff.
    pub error_terms: Gradients<f64>,
    /// What an absolute error of 1 in every visible weight costs each element.
    pub visible_terms: Gradients<f64>,
}
// ANCHOR_END: expected_gradients

/// [`attention_backward`], with the error sizes of [`ExpectedGradients`].
pub fn expected_gradients(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    d_o: &Array4<f32>,
) -> Result<ExpectedGradients, AttentionError> {
    let gradients = attention_backward(q, k, v, options, d_o)?;
    let forward = attention(q, k, v, options)?;
    let shape = AttentionShape::of(q, k, v)?;
    let scale = f64::from(options.scale_for(shape.head_dim)?);
    let zeros = || Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    let (mut error_terms, mut visible_terms) = (zeros(), zeros());
    let lengths = [shape.head_dim, shape.q_len, shape.kv_len].map(|n| (n as f64).sqrt());
    let sum_lengths: f64 = lengths.iter().sum();
    let dot_growth = lengths[0] + 2.0;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let head = |x: &Array4<f32>| to_f64(x.slice(s![b, h, .., ..]));
            let (q, k, v, d_o) = (head(q), head(k), head(v), head(d_o));
            let p = probabilities(&q, 0, &k, scale, &shape, options.causal);
            let logit_terms = largest_logit_terms(&q, 0, &k, scale, &shape, options.causal);
            let lse = forward.lse.slice(s![b, h, ..]);
            // w_i, the relative error of row i's recomputed weights (0 for a row that sees none).
            let mut w = ndarray::Array1::<f64>::zeros(shape.q_len);
            Zip::from(&mut w).and(&logit_terms).and(&lse).for_each(|w, &terms, &l| {
                if l.is_finite() {
                    *w = dot_growth * terms + l.abs() + sum_lengths + 2.0;
                }
            });
            let a = d_o.mapv(f64::abs).dot(&v.mapv(f64::abs).t()); // A_ij, [Nq, Nkv]
            let a_plus_b = &a + &(&p * &a).sum_axis(Axis(1)).insert_axis(Axis(1)); // A_ij + B_i
            let size = scale.abs();
            let (k_size, q_size, d_o_size) =
                (k.mapv(f64::abs), q.mapv(f64::abs), d_o.mapv(f64::abs));
            // Rounding: weights P_ij w_i, dS errors E_ij.
            let weighted = &p * &w.view().insert_axis(Axis(1));
            let e = &weighted * &a_plus_b;
            error_terms.dq.slice_mut(s![b, h, .., ..]).assign(&(e.dot(&k_size) * size));
            error_terms.dk.slice_mut(s![b, h, .., ..]).assign(&(e.t().dot(&q_size) * size));
            error_terms.dv.slice_mut(s![b, h, .., ..]).assign(&weighted.t().dot(&d_o_size));
            // Underflow: every visible weight off by an absolute 1.
            let seen = visible(shape.q_len, 0, &shape, options.causal);
            let e = &seen * &a_plus_b;
            visible_terms.dq.slice_mut(s![b, h, .., ..]).assign(&(e.dot(&k_size) * size));
            visible_terms.dk.slice_mut(s![b, h, .., ..]).assign(&(e.t().dot(&q_size) * size));
            visible_terms.dv.slice_mut(s![b, h, .., ..]).assign(&seen.t().dot(&d_o_size));
        }
    }
    Ok(ExpectedGradients { gradients, error_terms, visible_terms })
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
        (probabilities(q, 0, k, scale, shape, causal).dot(v) * d_o).sum()
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
        let o = probabilities(&head(&p.q), 0, &head(&p.k), 0.5, &shape, true).dot(&head(&p.v));
        let expected = attention(&p.q, &p.k, &p.v, &p.options).unwrap().o;
        for (a, b) in o.iter().zip(expected.iter()) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn expected_agrees_with_the_oracle_and_so_do_its_rows() {
        use crate::{Problem, ProblemSpec};
        let p = Problem::random(&ProblemSpec::new(2, 2, 7, 5, 3).causal(true).spike(true), 4);
        let whole = attention(&p.q, &p.k, &p.v, &p.options).unwrap();
        let e = expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * (1.0 + b.abs());
        assert!(e.output.o.iter().zip(&whole.o).all(|(&a, &b)| close(a, b)));
        assert!(e.output.lse.iter().zip(&whole.lse).all(|(&a, &b)| close(a, b)));
        let rows = expected_rows(&p.q, &p.k, &p.v, &p.options, 3..6).unwrap();
        assert_eq!(rows.output.o, e.output.o.slice(s![.., .., 3..6, ..]));
        assert_eq!(rows.output.lse, e.output.lse.slice(s![.., .., 3..6]));
        assert_eq!(rows.value_terms, e.value_terms.slice(s![.., .., 3..6, ..]));
        assert_eq!(rows.logit_terms, e.logit_terms.slice(s![.., .., 3..6]));
    }

    #[test]
    fn value_terms_are_the_weighted_sizes_of_the_values() {
        // Scores 0 and ln 3: weights 1/4 and 3/4; V column 0 is [4, -8]: O = -5, terms 7.
        let q = head(array![[1.0]]);
        let k = head(array![[0.0], [3f32.ln()]]);
        let v = head(array![[4.0], [-8.0]]);
        let e = expected(&q, &k, &v, &AttentionOptions::new().with_scale(1.0)).unwrap();
        assert!((e.output.o[[0, 0, 0, 0]] + 5.0).abs() < 1e-6);
        assert!((e.value_terms[[0, 0, 0, 0]] - 7.0).abs() < 1e-6);
        assert!((e.logit_terms[[0, 0, 0]] - 3f64.ln()).abs() < 1e-6); // |1| x |ln 3|
    }

    #[test]
    fn gradient_error_terms_are_not_zero_where_the_gradient_cancels() {
        // One key: dS = P (dP - D) = 0 exactly, so dQ and dK are 0, but their terms are not.
        let q = head(array![[1.0, 0.5], [0.0, 1.0]]);
        let k = head(array![[0.5, -0.5]]);
        let v = head(array![[2.0, 3.0]]);
        let d_o = head(array![[1.0, 2.0], [3.0, 4.0]]);
        let e = expected_gradients(&q, &k, &v, &AttentionOptions::new(), &d_o).unwrap();
        assert!(e.gradients.dq.iter().all(|&x| x.abs() < 1e-12));
        assert!(e.error_terms.dq.iter().all(|&x| x > 1.0));
        assert!(e.error_terms.dk.iter().all(|&x| x > 1.0));
        assert!(e.error_terms.dv.iter().all(|&x| x > 1.0));
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
