//! Test bodies shared by every forward implementation of the course.
//!
//! One body, every stage: each lesson's tests call these with its own `attention` function, so
//! the contract is checked the same way everywhere (the idea of candle's `test_device!`).
//! Each check returns `Err` with a message that says what was wrong (the runner, `proptest!` or
//! the grader, names the failing case), so it works inside `proptest!`
//! (`check(...).map_err(TestCaseError::fail)?`) and in plain tests (`.unwrap()`).

use ndarray::{Array4, s};

use crate::strategies::Case;
use crate::{
    AttentionError, AttentionOptions, AttentionOutput, Gradients, Problem, Tolerance, check_output,
    compare, oracle,
};

/// The signature every forward implementation has (extra parameters, such as tile sizes, are
/// bound by a closure).
pub trait Forward:
    Fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError>
{
}

impl<F> Forward for F where
    F: Fn(
        &Array4<f32>,
        &Array4<f32>,
        &Array4<f32>,
        &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>
{
}

/// Runs `forward` on a problem.
pub fn run(
    forward: &(impl Forward + ?Sized),
    p: &Problem,
) -> Result<AttentionOutput<f32>, AttentionError> {
    forward(&p.q, &p.k, &p.v, &p.options)
}

/// A bound on the size of any logit of `p`: `scale * max_i |q_i| * max_j |k_j|`.
///
/// By Cauchy–Schwarz it also bounds `scale * sum_d |q_id k_jd|`, the quantity that sets the
/// rounding error of every f32 dot product `q_i . k_j`.
pub fn logit_bound(p: &Problem) -> f64 {
    let max_norm = |x: &Array4<f32>| {
        x.rows()
            .into_iter()
            .map(|r| r.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt())
            .fold(0.0, f64::max)
    };
    let scale = f64::from(p.options.scale_for(p.q.dim().3).unwrap_or(1.0));
    scale.abs() * max_norm(&p.q) * max_norm(&p.k)
}

// ANCHOR: check_against_oracle
/// `forward` agrees with the f64 oracle on the case's problem, within `tolerance` grown by the
/// problem's [`logit_bound`] (see [`Tolerance::for_logits`]).
pub fn check_against_oracle(
    forward: &(impl Forward + ?Sized),
    case: &Case,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let expected = oracle::attention(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let actual = run(forward, &p).map_err(|e| format!("returned an error: {e}"))?;
    check_output(&actual, &expected, tolerance.for_logits(logit_bound(&p))).map(|_| ())
}
// ANCHOR_END: check_against_oracle

/// Every `(batch, head)` slice is computed on its own: running one slice alone gives exactly
/// the numbers it gets inside the whole batch.
pub fn check_heads_independent(
    forward: &(impl Forward + ?Sized),
    case: &Case,
) -> Result<(), String> {
    let p = case.problem();
    let whole = run(forward, &p).map_err(|e| format!("returned an error: {e}"))?;
    let (batch, heads, _, _) = p.q.dim();
    for b in 0..batch {
        for h in 0..heads {
            let one = |x: &Array4<f32>| x.slice(s![b..=b, h..=h, .., ..]).to_owned();
            let alone = forward(&one(&p.q), &one(&p.k), &one(&p.v), &p.options)
                .map_err(|e| e.to_string())?;
            if alone.o.slice(s![0, 0, .., ..]) != whole.o.slice(s![b, h, .., ..])
                || alone.lse.slice(s![0, 0, ..]) != whole.lse.slice(s![b, h, ..])
            {
                return Err(format!("batch {b}, head {h} differs when computed alone"));
            }
        }
    }
    Ok(())
}

/// The signature of every backward implementation: `q`, `k`, `v`, options, the forward pass's
/// `O` and `L`, and `dO` -> `dQ`, `dK`, `dV`.
pub trait Backward:
    Fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
    &AttentionOutput<f32>,
    &Array4<f32>,
) -> Result<Gradients<f32>, AttentionError>
{
}

impl<F> Backward for F where
    F: Fn(
        &Array4<f32>,
        &Array4<f32>,
        &Array4<f32>,
        &AttentionOptions,
        &AttentionOutput<f32>,
        &Array4<f32>,
    ) -> Result<Gradients<f32>, AttentionError>
{
}

/// A random `dO` for the case's problem: standard normal, shaped like `Q`.
pub fn random_d_o(case: &Case) -> Array4<f32> {
    let s = &case.spec;
    let spec = crate::ProblemSpec::new(s.batch, s.heads, s.q_len, s.q_len, s.head_dim);
    Problem::random(&spec, case.seed ^ 0x5EED_D0D0).q
}

// ANCHOR: check_backward
/// `backward` agrees with the f64 oracle's gradients on the case's problem. It is given the
/// oracle's `O` and `L` rounded to f32 (the best forward output f32 can hold) and a random
/// `dO`; `dQ`, `dK` and `dV` must each be within `tolerance` grown by the logit bound.
pub fn check_backward_against_oracle(
    backward: &(impl Backward + ?Sized),
    case: &Case,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let d_o = random_d_o(case);
    let forward = oracle::attention(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let forward =
        AttentionOutput { o: forward.o.mapv(|x| x as f32), lse: forward.lse.mapv(|x| x as f32) };
    let expected = oracle::attention_backward(&p.q, &p.k, &p.v, &p.options, &d_o)
        .map_err(|e| e.to_string())?;
    let got = backward(&p.q, &p.k, &p.v, &p.options, &forward, &d_o)
        .map_err(|e| format!("returned an error: {e}"))?;
    let tolerance = tolerance.for_logits(logit_bound(&p));
    for (name, actual, expected) in [
        ("dQ", &got.dq, &expected.dq),
        ("dK", &got.dk, &expected.dk),
        ("dV", &got.dv, &expected.dv),
    ] {
        let c = compare(name, actual, expected, tolerance)?;
        if !c.passed() {
            return Err(c.to_string());
        }
    }
    Ok(())
}
// ANCHOR_END: check_backward

/// `L_i >= max_j S_ij`: the logsumexp of a row is never below its largest visible score
/// (up to f32 rounding of the scores).
pub fn check_lse_at_least_row_max(
    forward: &(impl Forward + ?Sized),
    case: &Case,
) -> Result<(), String> {
    let p = case.problem();
    let out = run(forward, &p).map_err(|e| format!("returned an error: {e}"))?;
    let maxima = oracle::row_max_scores(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let slack = 1e-6 * logit_bound(&p).max(1.0);
    for ((index, &lse), &max) in out.lse.indexed_iter().zip(maxima.iter()) {
        let ok = if max == f64::NEG_INFINITY {
            lse == f32::NEG_INFINITY
        } else {
            f64::from(lse) >= max - slack
        };
        if !ok {
            return Err(format!("L{index:?} = {lse} but the row's largest score is {max}"));
        }
    }
    Ok(())
}

/// Bad shapes and options are rejected with the right [`AttentionError`], not a panic.
pub fn check_rejects_bad_inputs(forward: &(impl Forward + ?Sized)) -> Result<(), String> {
    use AttentionError::{EmptyDimension, InvalidScale, ShapeMismatch};
    let mismatch = |tensor, against, axis, expected, found| ShapeMismatch {
        tensor,
        against,
        axis,
        expected,
        found,
    };
    let empty = |tensor, axis, shape| EmptyDimension { tensor, axis, shape };
    let plain = AttentionOptions::new();
    #[rustfmt::skip]
    let cases = [
        // what,               Q shape,      K shape,      V shape,      options,                            expected error
        ("K batch differs",    [2, 2, 3, 4], [1, 2, 5, 4], [1, 2, 5, 4], plain,                              mismatch("K", "Q", "batch", 2, 1)),
        ("K heads differ",     [1, 2, 3, 4], [1, 3, 5, 4], [1, 3, 5, 4], plain,                              mismatch("K", "Q", "heads", 2, 3)),
        ("K head_dim differs", [1, 2, 3, 4], [1, 2, 5, 8], [1, 2, 5, 8], plain,                              mismatch("K", "Q", "head_dim", 4, 8)),
        ("V length differs",   [1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 6, 4], plain,                              mismatch("V", "K", "seq", 5, 6)),
        ("V head_dim differs", [1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 5, 3], plain,                              mismatch("V", "K", "head_dim", 4, 3)),
        ("empty Q",            [1, 2, 0, 4], [1, 2, 5, 4], [1, 2, 5, 4], plain,                              empty("Q", "seq", [1, 2, 0, 4])),
        ("empty K and V",      [1, 2, 3, 4], [1, 2, 0, 4], [1, 2, 0, 4], plain,                              empty("K", "seq", [1, 2, 0, 4])),
        ("zero head_dim",      [1, 1, 3, 0], [1, 1, 3, 0], [1, 1, 3, 0], plain,                              empty("Q", "head_dim", [1, 1, 3, 0])),
        ("zero batch",         [0, 1, 3, 2], [0, 1, 3, 2], [0, 1, 3, 2], plain,                              empty("Q", "batch", [0, 1, 3, 2])),
        ("NaN scale",          [1, 1, 3, 2], [1, 1, 3, 2], [1, 1, 3, 2], plain.with_scale(f32::NAN),         InvalidScale(f32::NAN)),
        ("infinite scale",     [1, 1, 3, 2], [1, 1, 3, 2], [1, 1, 3, 2], plain.with_scale(f32::INFINITY),    InvalidScale(f32::INFINITY)),
    ];
    for (what, q, k, v, options, expected) in cases {
        let zeros = |shape: [usize; 4]| Array4::<f32>::zeros(shape);
        match forward(&zeros(q), &zeros(k), &zeros(v), &options) {
            // NaN != NaN, so the errors are compared by their text.
            Err(e) if e.to_string() == expected.to_string() => {}
            Err(e) => return Err(format!("{what}: expected the error `{expected}`, got `{e}`")),
            Ok(_) => return Err(format!("{what}: expected the error `{expected}`, got a result")),
        }
    }
    Ok(())
}
