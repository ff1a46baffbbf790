//! Test bodies shared by every forward implementation of the course.
//!
//! One body, every stage: each lesson's tests call these with its own `attention` function, so
//! the contract is checked the same way everywhere (the idea of candle's `test_device!`).
//! Each check returns `Err` with a message that says what was wrong (the runner, `proptest!` or
//! the grader, names the failing case), so it works inside `proptest!`
//! (`check(...).map_err(TestCaseError::fail)?`) and in plain tests (`.unwrap()`).

use ndarray::{Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, NonFiniteValue, Problem, ProblemSpec,
    Tolerance, check_gradients, check_output, oracle,
};
use reference::{Backward, Forward};

use crate::strategies::Case;

/// Runs `forward` on a problem.
pub fn run(
    forward: &(impl Forward + ?Sized),
    p: &Problem,
) -> Result<AttentionOutput<f32>, AttentionError> {
    forward(&p.q, &p.k, &p.v, &p.options)
}

// ANCHOR: check_against_oracle
/// `forward` agrees with the f64 oracle on the case's problem: every element of `O` and `L`
/// within its bound of the error model (`reference::compare`).
pub fn check_against_oracle(
    forward: &(impl Forward + ?Sized),
    case: &Case,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let actual = run(forward, &p).map_err(|e| format!("returned an error: {e}"))?;
    check_output(&actual, &expected, tolerance).map(|_| ())
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

/// A random `dO` for the case's problem: standard normal, shaped like `Q`.
pub fn random_d_o(case: &Case) -> Array4<f32> {
    let s = &case.spec;
    let spec = ProblemSpec::new(s.batch, s.heads, s.q_len, s.q_len, s.head_dim);
    Problem::random(&spec, case.seed ^ 0x5EED_D0D0).q
}

// ANCHOR: check_backward
/// `backward` agrees with the f64 oracle's gradients on the case's problem. It is given the
/// oracle's `O` and `L` rounded to f32 (the best forward output f32 can hold) and a random
/// `dO`; every element of `dQ`, `dK` and `dV` must be within its bound of the error model
/// ([`reference::oracle::ExpectedGradients`]).
pub fn check_backward_against_oracle(
    backward: &(impl Backward + ?Sized),
    case: &Case,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let d_o = random_d_o(case);
    let forward = oracle_forward_in_f32(&p)?;
    let expected = oracle::expected_gradients(&p.q, &p.k, &p.v, &p.options, &d_o)
        .map_err(|e| e.to_string())?;
    let got = backward(&p.q, &p.k, &p.v, &p.options, &forward, &d_o)
        .map_err(|e| format!("returned an error: {e}"))?;
    check_gradients(&got, &expected, tolerance).map(|_| ())
}

/// The oracle's `O` and `L` for `p`, rounded to f32: the forward output a backward pass is given.
pub fn oracle_forward_in_f32(p: &Problem) -> Result<AttentionOutput<f32>, String> {
    let out = oracle::attention(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    Ok(AttentionOutput { o: out.o.mapv(|x| x as f32), lse: out.lse.mapv(|x| x as f32) })
}
// ANCHOR_END: check_backward

/// `L_i >= max_j S_ij`: the logsumexp of a row is never below its largest visible score, up
/// to the rounding the error model allows `L_i` (`tolerance`).
pub fn check_lse_at_least_row_max(
    forward: &(impl Forward + ?Sized),
    case: &Case,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let out = run(forward, &p).map_err(|e| format!("returned an error: {e}"))?;
    let maxima = oracle::row_max_scores(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let slack = tolerance.allowed(&expected).lse;
    for (((index, &lse), &max), &slack) in out.lse.indexed_iter().zip(&maxima).zip(&slack) {
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
        // NaN != NaN: a NaN scale is the expected error whatever NaN it holds.
        let same = |e: &AttentionError| {
            *e == expected
                || matches!((e, &expected), (InvalidScale(a), InvalidScale(b)) if a.is_nan() && b.is_nan())
        };
        match forward(&zeros(q), &zeros(k), &zeros(v), &options) {
            Err(e) if same(&e) => {}
            Err(e) => return Err(format!("{what}: expected the error `{expected}`, got `{e}`")),
            Ok(_) => return Err(format!("{what}: expected the error `{expected}`, got a result")),
        }
    }
    Ok(())
}

// ANCHOR: check_non_finite
/// NaN and infinities in `Q`, `K` or `V` are [`AttentionError::NonFinite`] errors naming the
/// tensor and the first bad element, never an output (the contract's non-finite policy). The
/// cases include a NaN in the query of a row that sees no key, which a stage that masks before
/// it looks would report as an empty row.
pub fn check_rejects_non_finite_inputs(forward: &(impl Forward + ?Sized)) -> Result<(), String> {
    use NonFiniteValue::{MinusInfinity, NaN, PlusInfinity};
    let spec = ProblemSpec::new(1, 2, 3, 4, 5);
    #[rustfmt::skip]
    let cases = [
        // tensor, value,         where,        causal, also bad later (must not be the one named)
        ("Q",      NaN,           [0, 1, 2, 3], false, [0, 1, 2, 4]),
        ("Q",      PlusInfinity,  [0, 0, 0, 0], false, [0, 1, 0, 0]),
        ("K",      MinusInfinity, [0, 1, 3, 3], false, [0, 1, 3, 4]),
        ("K",      NaN,           [0, 0, 1, 2], true,  [0, 1, 0, 0]),
        ("V",      PlusInfinity,  [0, 1, 0, 0], true,  [0, 1, 2, 0]),
        ("V",      NaN,           [0, 0, 3, 4], false, [0, 1, 0, 0]),
    ];
    for (tensor, value, index, causal, later) in cases {
        let mut p = Problem::random(&spec.causal(causal), 11);
        let x = match tensor {
            "Q" => &mut p.q,
            "K" => &mut p.k,
            _ => &mut p.v,
        };
        let bad = match value {
            NaN => f32::NAN,
            PlusInfinity => f32::INFINITY,
            MinusInfinity => f32::NEG_INFINITY,
        };
        x[later] = f32::NAN;
        x[index] = bad;
        let expected = AttentionError::NonFinite { tensor, index: index.to_vec(), value };
        expect_error(forward, &p, &format!("{value} in {tensor}{index:?}"), &expected)?;
    }
    // Causal with Nq = 3 > Nkv = 1: rows 0 and 1 see no key. A NaN in their queries is still
    // bad data, not an empty row.
    let mut p = Problem::random(&ProblemSpec::new(1, 1, 3, 1, 2).causal(true), 5);
    p.q[[0, 0, 0, 1]] = f32::NAN;
    let expected = AttentionError::NonFinite { tensor: "Q", index: vec![0, 0, 0, 1], value: NaN };
    expect_error(forward, &p, "NaN in the query of a row that sees no key", &expected)
}
// ANCHOR_END: check_non_finite

/// Logits that could overflow f32 are [`AttentionError::LogitsOverflow`]: an absurd scale, or
/// inputs so large that their dot products overflow.
pub fn check_rejects_overflowing_logits(forward: &(impl Forward + ?Sized)) -> Result<(), String> {
    let p = Problem::random(&ProblemSpec::new(1, 1, 2, 3, 4), 8);
    let huge_scale = Problem { options: p.options.with_scale(f32::MAX), ..p.clone() };
    let huge = Problem { q: p.q.mapv(|x| x * 1e19), k: p.k.mapv(|x| x * 1e19), ..p };
    for (what, p) in [("scale f32::MAX", huge_scale), ("Q and K x 1e19", huge)] {
        match run(forward, &p) {
            Err(AttentionError::LogitsOverflow { .. }) => {}
            Err(e) => return Err(format!("{what}: expected a LogitsOverflow error, got `{e}`")),
            Ok(_) => return Err(format!("{what}: expected a LogitsOverflow error, got a result")),
        }
    }
    Ok(())
}

fn expect_error(
    forward: &(impl Forward + ?Sized),
    p: &Problem,
    what: &str,
    expected: &AttentionError,
) -> Result<(), String> {
    match run(forward, p) {
        Err(e) if e == *expected => Ok(()),
        Err(e) => Err(format!("{what}: expected the error `{expected}`, got `{e}`")),
        Ok(out) => Err(format!(
            "{what}: expected the error `{expected}`, got a result (L[0, 0, 0] = {})",
            out.lse.first().copied().unwrap_or(f32::NAN)
        )),
    }
}
