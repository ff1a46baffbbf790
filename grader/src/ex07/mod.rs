//! Exercise 07: the fast exp2 and the parallel forward in base 2.

pub mod mutants;

use std::rc::Rc;
use std::sync::Arc;

use ndarray::Array4;

use reference::{AttentionError, AttentionOptions, AttentionOutput, Tolerance};
use testkit::checks::{check_against_oracle, run};
use testkit::strategies::{ShapeLimits, cases, tile_size};

use crate::check::{Check, for_all};
use crate::forward::{CASES, Contract, LIMITS, forward_checks};

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const EXP2_ACCURACY: &str = "exp2 within 2e-7 of the exact value on [-126, 0]";
/// Check name.
pub const EXP2_EXACT: &str = "exp2 is exactly 1 at 0, 1/2 at -1, and 0 for -200 and -inf";
/// Check name.
pub const ANY_TILES: &str = "any tile sizes: 1, sizes that do not divide N, sizes larger than N";
/// Check name.
pub const THREADS: &str = "one thread or four: the same bits";
/// Check name.
pub const BASE_TWO: &str = "base 2: two keys weighted 1/4 and 3/4, L back in natural log";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 07 provides.
    pub trait Exercise07;
    /// `2^x` for `x <= 0`, vectorisable, relative error below `2e-7`, 0 below `2^-126`.
    fn exp2(x: f32) -> f32;
    /// The parallel forward with tiles `Br x Bc`.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The graded checks of exercise 07.
pub fn checks(solution: impl Exercise07 + Send + Sync + 'static) -> Vec<Check> {
    let s = Arc::new(solution); // shared with the threads of the pools below
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        EXP2_ACCURACY,
        "Split x = n + f with n = round(x), so |f| <= 1/2, and use a degree-7 polynomial for 2^f; \
         with n = floor(x), f reaches 1 and the same polynomial is 8 times less accurate.",
        move || {
            let mut worst = (0.0f64, 0.0f32);
            for i in 0..=252_000 {
                let v = -(i as f32) * 5e-4;
                let (got, exact) = (f64::from(x.exp2(v)), f64::from(v).exp2());
                let err = (got - exact).abs() / exact;
                let err = if err.is_nan() { f64::INFINITY } else { err }; // NaN is the worst error
                if err > worst.0 {
                    worst = (err, v);
                }
            }
            if worst.0 < 2e-7 {
                Ok(())
            } else {
                Err(format!("relative error {:.2e} at x = {}", worst.0, worst.1))
            }
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        EXP2_EXACT,
        "Clamp x to -127 first: 2^n is then built from exponent bits n + 127 = 0, which is +0.0. \
         Without the clamp, n + 127 goes negative and the bits are garbage.",
        move || {
            for (v, expected) in [(0.0, 1.0), (-1.0, 0.5), (-200.0, 0.0), (f32::NEG_INFINITY, 0.0)]
            {
                let got = x.exp2(v);
                if got != expected {
                    return Err(format!("exp2({v}) = {got}, expected {expected}"));
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        BASE_TWO,
        "e^(s - m) = 2^((s - m) log2 e): multiply the scores by scale * log2(e) once, so that \
         exp2 of their differences gives the natural weights; at the end L = ln(2) * (m + \
         log2(l)), since m and log2(l) are in base 2.",
        move || {
            // Scores 0 and ln 3 (D = 4, scale 1/2): weights 1/4 and 3/4, O = 7, L = ln 4.
            let head = |rows: Vec<f32>, n| Array4::from_shape_vec((1, 1, n, 4), rows);
            let q = head(vec![1.0, 0.0, 0.0, 0.0], 1).map_err(|e| e.to_string())?;
            let k = head(vec![0.0, 0.0, 0.0, 0.0, 2.0 * 3f32.ln(), 0.0, 0.0, 0.0], 2)
                .map_err(|e| e.to_string())?;
            let v =
                head(vec![4.0, 0.0, 0.0, 0.0, 8.0, 0.0, 0.0, 0.0], 2).map_err(|e| e.to_string())?;
            let out = x
                .attention(&q, &k, &v, &AttentionOptions::new(), 1, 2)
                .map_err(|e| e.to_string())?;
            let (o, l) = (out.o[[0, 0, 0, 0]], out.lse[[0, 0, 0]]);
            if (o - 7.0).abs() > 1e-5 * 7.0 || (l - 4f32.ln()).abs() > 1e-5 {
                return Err(format!(
                    "O = {o}, L = {l}; expected O = 7 (weights 1/4, 3/4), L = ln 4 = {}",
                    4f32.ln()
                ));
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.extend(forward_checks(Contract::tiled((7, 5), move |br, bc| {
        let x = x.clone();
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc))
    })));
    let x = s.clone();
    checks.push(Check::new(
        ANY_TILES,
        "Cut each head's rows into tiles of Br, the last one shorter (split_at), so that every row \
         belongs to exactly one task.",
        move || {
            for_all(
                CASES,
                (cases(LIMITS), tile_size(LIMITS.seq), tile_size(LIMITS.seq)),
                |(case, br, bc)| {
                    let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc);
                    check_against_oracle(&tiled, &case, Tolerance::F32)
                        .map_err(|e| format!("tiles {br} x {bc}: {e}"))
                },
            )
        },
    ));
    let x = s;
    checks.push(Check::new(
        THREADS,
        "Give every (batch, head, query tile) its own task that computes its rows alone, in a fixed \
         order; never combine partial results in the order threads finish.",
        move || {
            for_all(16, cases(ShapeLimits { seq: 128, ..LIMITS }), |case| {
                let p = case.problem();
                let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, 16, 32);
                let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().map_err(|e| e.to_string());
                let one = pool(1)?.install(|| run(&tiled, &p)).map_err(|e| e.to_string())?;
                let four = pool(4)?.install(|| run(&tiled, &p)).map_err(|e| e.to_string())?;
                if one == four { Ok(()) } else { Err("the output differs between 1 and 4 threads".to_string()) }
            })
        },
    ));
    checks
}

/// The lesson's implementation: the reference solution.
pub fn lesson() -> Functions {
    Functions {
        exp2: Box::new(lesson07::exp2::exp2),
        attention: Box::new(|q, k, v, options, query_rows, key_cols| {
            lesson07::attention(q, k, v, options, lesson03::TileSizes::new(query_rows, key_cols)?)
        }),
    }
}
