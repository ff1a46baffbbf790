//! Exercise 07: the fast exp2 and the parallel forward in base 2 (the warm-up), then split-key
//! parallelism for decoding, where a few query rows face many keys (the main task).

pub mod mutants;
mod solution;

use std::rc::Rc;
use std::sync::Arc;

use ndarray::Array4;
use proptest::prelude::*;

use reference::{AttentionError, AttentionOptions, AttentionOutput, Tolerance};
use testkit::checks::{check_against_oracle, run};
use testkit::strategies::{Case, ShapeLimits, cases, tile_size};

use crate::check::{Check, for_all, main_task};
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
/// Check name.
pub const SPLIT_DECODE: &str =
    "split keys: a few query rows against many keys, any number of splits";
/// Check name.
pub const SPLIT_CAUSAL: &str =
    "split keys with the causal mask: Nq < Nkv, chunks past a row's last key";
/// Check name.
pub const SPLIT_THREADS: &str = "split keys: one thread or four, the same bits";
/// Check name.
pub const SPLIT_ERRORS: &str = "zero splits is an error; more splits than keys is not";

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
    /// Attention with each head's keys cut into `splits` chunks computed in parallel and
    /// merged (the main task).
    fn attention_split_keys(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        splits: usize,
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
    let x = s.clone();
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
    checks.extend(main_task(split_checks(s)));
    checks
}

/// Decoding-shaped problems: 1 to 4 query rows, up to 2000 keys, any head dim up to 64.
fn decode_cases() -> impl Strategy<Value = Case> {
    let limits = ShapeLimits { seq: 2000, head_dim: 64, ..LIMITS };
    (cases(limits), 1..=4usize).prop_map(|(mut c, q_len)| {
        c.spec.q_len = q_len;
        c
    })
}

/// A number of splits: 1, a few, or as many as a large machine has cores (often more than
/// the keys of the short problems). Not thousands: each merge step rounds, and a chain of
/// thousands of merges in the log domain (`L = ln(e^L + e^L_s)` one part at a time) drifts
/// by about `u |L|` per step, beyond the error model's bound for `L`, though each step is
/// right; flash-decoding uses tens of splits.
fn splits() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(1usize), 3 => 2..=8usize, 2 => 9..=64usize]
}

/// The main task's checks.
fn split_checks(s: Arc<impl Exercise07 + Send + Sync + 'static>) -> Vec<Check> {
    let x = s.clone();
    let decode = Check::new(
        SPLIT_DECODE,
        "Each chunk gives every row a partial (O, L) over its keys; merge them with the weights \
         e^(L_s - L), L = ln sum e^(L_s) (exercise 02's merge). Chunks must cover every key \
         exactly once: the last may be shorter, and with more splits than keys some are empty.",
        move || {
            let unmasked = decode_cases().prop_map(|mut c| {
                c.spec = c.spec.causal(false);
                c
            });
            for_all(CASES, (unmasked, splits()), |(case, splits)| {
                let split = |q: &_, k: &_, v: &_, o: &_| x.attention_split_keys(q, k, v, o, splits);
                check_against_oracle(&split, &case, Tolerance::F32)
                    .map_err(|e| format!("{splits} splits: {e}"))
            })
        },
    );
    let x = s.clone();
    let causal = Check::new(
        SPLIT_CAUSAL,
        "Key j keeps its index in the whole problem: row i sees it iff j <= i + Nkv - Nq, whatever \
         chunk it is in. A chunk that lies wholly past a row's last visible key gives that row \
         L = -inf and weighs nothing in the merge.",
        move || {
            let causal_decode = decode_cases().prop_map(|mut c| {
                c.spec = c.spec.causal(true);
                c
            });
            for_all(CASES, (causal_decode, splits()), |(case, splits)| {
                let split = |q: &_, k: &_, v: &_, o: &_| x.attention_split_keys(q, k, v, o, splits);
                check_against_oracle(&split, &case, Tolerance::F32)
                    .map_err(|e| format!("{splits} splits: {e}"))
            })
        },
    );
    let x = s.clone();
    let threads = Check::new(
        SPLIT_THREADS,
        "Compute the chunks in parallel, but merge their results in chunk order, not in the \
         order the threads finish: f32 addition is not associative, so the order shows in the \
         bits.",
        move || {
            for_all(16, (decode_cases(), 2..=16usize), |(case, splits)| {
                let p = case.problem();
                let split = |q: &_, k: &_, v: &_, o: &_| x.attention_split_keys(q, k, v, o, splits);
                let pool = |n| {
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(n)
                        .build()
                        .map_err(|e| e.to_string())
                };
                let one = pool(1)?.install(|| run(&split, &p)).map_err(|e| e.to_string())?;
                let four = pool(4)?.install(|| run(&split, &p)).map_err(|e| e.to_string())?;
                if one == four {
                    Ok(())
                } else {
                    Err(format!("{splits} splits: the output differs between 1 and 4 threads"))
                }
            })
        },
    );
    let x = s;
    let errors = Check::new(
        SPLIT_ERRORS,
        "Return AttentionError::InvalidTileSize { which: \"key splits\", value: 0 } for zero \
         splits (after check_inputs); more splits than keys only makes some chunks empty.",
        move || {
            let p = Case { spec: reference::ProblemSpec::new(1, 2, 1, 3, 4), seed: 5 }.problem();
            match x.attention_split_keys(&p.q, &p.k, &p.v, &p.options, 0) {
                Err(AttentionError::InvalidTileSize { value: 0, .. }) => {}
                Err(e) => return Err(format!("0 splits: expected InvalidTileSize, got `{e}`")),
                Ok(_) => return Err("0 splits: expected InvalidTileSize, got a result".into()),
            }
            let many = |q: &_, k: &_, v: &_, o: &_| x.attention_split_keys(q, k, v, o, 10);
            let case = Case { spec: reference::ProblemSpec::new(1, 2, 1, 3, 4), seed: 5 };
            check_against_oracle(&many, &case, Tolerance::F32)
                .map_err(|e| format!("10 splits of 3 keys: {e}"))?;
            let short_k = Array4::zeros((1, 2, 3, 5));
            match x.attention_split_keys(&p.q, &short_k, &p.v, &p.options, 2) {
                Err(AttentionError::ShapeMismatch { .. }) => Ok(()),
                other => Err(format!(
                    "K of head dim 5 against Q's 4 gave {:?}, expected a ShapeMismatch",
                    other.err()
                )),
            }
        },
    );
    vec![decode, causal, threads, errors]
}

/// The reference solutions: the lesson's functions for the warm-up, and the main task's, which
/// lives in the grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        exp2: Box::new(lesson07::exp2::exp2),
        attention: Box::new(|q, k, v, options, query_rows, key_cols| {
            lesson07::attention(q, k, v, options, lesson03::TileSizes::new(query_rows, key_cols)?)
        }),
        attention_split_keys: Box::new(solution::attention_split_keys),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::ParallelBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::ParallelBug>(checks(lesson()), checks)
}
