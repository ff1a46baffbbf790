//! Exercise 05: the backward pass with recomputation from the logsumexp (the warm-up), then
//! the backward of a logit softcap and of dropout with its mask regenerated (the main task).

pub mod mutants;
mod solution;

use std::rc::Rc;

use ndarray::Array4;
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Feature, Features, Gradients, Problem,
    ProblemSpec, Tolerance, check_gradients, features,
};
use testkit::checks::{check_backward_against_oracle, oracle_forward_in_f32};
use testkit::strategies::{Case, cases, tile_size};

use crate::check::{Check, for_all, main_task};
use crate::forward::{CASES, LIMITS};
use crate::memory::{HEAD_DIM, TILE, check_working_memory, working_bytes};

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const ONE_KEY: &str = "one key: dV collects dO, dQ and dK are zero";
/// Check name.
pub const ANY_TILES: &str = "any tile sizes: 1, sizes that do not divide N, sizes larger than N";
/// Check name.
pub const BAD_SHAPES: &str = "bad shapes of dO, O and L are errors";
/// Check name.
pub const RANDOM: &str = "gradients on random problems without a mask";
/// Check name.
pub const CAUSAL_SQUARE: &str = "gradients with a causal mask, Nq = Nkv";
/// Check name.
pub const CAUSAL_RECTANGULAR: &str =
    "gradients with a causal mask, Nq != Nkv (rows that see no key)";
/// Check name.
pub const LARGE_LOGITS: &str = "gradients with large logits (inputs x100)";
/// Check name.
pub const MEMORY: &str = "working memory grows with N, never with N x N";
/// Check name.
pub const BAD_VALUES: &str = "NaN in dO or O, and an L that disagrees with the mask, are errors";
/// Check name.
pub const SOFTCAP_GRADIENTS: &str = "softcap: gradients on random problems, causal or not";
/// Check name.
pub const DROPOUT_GRADIENTS: &str =
    "dropout: gradients with the mask regenerated from the seed, on random problems";
/// Check name.
pub const BOTH_GRADIENTS: &str = "softcap and dropout together, any tile sizes";
/// Check name.
pub const FEATURE_ERRORS: &str =
    "bad features are errors: softcap, dropout probability, features not computed here";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 05 provides: the tiled backward pass with tiles `Br x Bc`.
    pub trait Exercise05;
    /// `dQ`, `dK`, `dV` from the inputs, the forward output `O`, `L` and `dO`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<Gradients<f32>, AttentionError>;
    /// The backward pass with a softcap and dropout (the main task).
    #[allow(clippy::too_many_arguments)]
    fn backward_with_features(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &Features,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<Gradients<f32>, AttentionError>;
}

/// Cases whose spec is adjusted by `tweak`.
fn cases_with(tweak: impl Fn(&mut Case) + 'static) -> impl Strategy<Value = Case> {
    cases(LIMITS).prop_map(move |mut c| {
        tweak(&mut c);
        c
    })
}

/// The graded checks of exercise 05.
pub fn checks(solution: impl Exercise05 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let tiled = |s: Rc<dyn Exercise05>, br: usize, bc: usize| {
        move |q: &_, k: &_, v: &_, o: &_, f: &_, d: &_| s.backward(q, k, v, o, f, d, br, bc)
    };
    let oracle_check =
        |s: Rc<dyn Exercise05>, name: &'static str, hint: &'static str, tweak: fn(&mut Case)| {
            Check::new(name, hint, move || {
                let backward = tiled(s.clone(), 7, 5);
                for_all(CASES, cases_with(tweak), |case| {
                    check_backward_against_oracle(&backward, &case, Tolerance::F32)
                        .map_err(|e| format!("with tiles Br = 7, Bc = 5: {e}"))
                })
            })
        };
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        ONE_KEY,
        "With one key P = 1, so dV = sum_i dO_i, and dS = P (dP - D) = 0 since D_i = dO_i . O_i = dP_i.",
        move || {
            let q = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 0.0, 0.0, 1.0]).map_err(|e| e.to_string())?;
            let k = Array4::from_shape_vec((1, 1, 1, 2), vec![0.5, -0.5]).map_err(|e| e.to_string())?;
            let v = Array4::from_shape_vec((1, 1, 1, 2), vec![2.0, 3.0]).map_err(|e| e.to_string())?;
            let d_o = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 2.0, 3.0, 4.0]).map_err(|e| e.to_string())?;
            // One key: L is the score itself, scale * q_i . k = +-0.5 / sqrt(2).
            let score = 0.5 / 2f32.sqrt();
            let o = Array4::from_shape_vec((1, 1, 2, 2), vec![2.0, 3.0, 2.0, 3.0]).map_err(|e| e.to_string())?;
            let lse = ndarray::Array3::from_shape_vec((1, 1, 2), vec![score, -score]).map_err(|e| e.to_string())?;
            let forward = AttentionOutput { o, lse };
            let g = x.backward(&q, &k, &v, &AttentionOptions::new(), &forward, &d_o, 1, 1).map_err(|e| e.to_string())?;
            if g.dv.as_slice() != Some(&[4.0, 6.0][..]) {
                return Err(format!("dV = {:?}, expected [4, 6]", g.dv.as_slice()));
            }
            if g.dq.iter().chain(g.dk.iter()).any(|x| x.abs() > 1e-6) {
                return Err(format!("dQ = {:?}, dK = {:?}, expected zeros", g.dq.as_slice(), g.dk.as_slice()));
            }
            Ok(())
        },
    ));
    checks.push(oracle_check(
        s.clone(),
        RANDOM,
        "Recompute P = e^(S - L) with S = scale Q Kᵀ. dV += Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP - D) \
         with D_i = dO_i . O_i; dQ += scale dS K; dK += scale dSᵀ Q.",
        |c| c.spec = c.spec.causal(false).logit_scale(1.0),
    ));
    checks.push(oracle_check(
        s.clone(),
        CAUSAL_SQUARE,
        "Mask S with -inf before recomputing P (masked entries get P = 0 and no gradient), and \
         skip key tiles no row of the query tile can see.",
        |c| {
            c.spec = c.spec.causal(true).logit_scale(1.0);
            c.spec.kv_len = c.spec.q_len;
        },
    ));
    checks.push(oracle_check(
        s.clone(),
        CAUSAL_RECTANGULAR,
        "A row that sees no key has L = -inf: give it P = 0 (e^(-inf - -inf) is NaN).",
        |c| {
            c.spec = c.spec.causal(true);
            if c.spec.kv_len == c.spec.q_len {
                c.spec.kv_len += 1;
            }
        },
    ));
    checks.push(oracle_check(
        s.clone(),
        LARGE_LOGITS,
        "Use the saved L, not a fresh maximum: P = e^(S - L) is at most 1 and never overflows.",
        |c| c.spec = c.spec.logit_scale(100.0),
    ));
    let x = s.clone();
    checks.push(Check::new(
        ANY_TILES,
        "dK_j and dV_j ACCUMULATE over every query tile (+=, beta = 1 in general_mat_mul); the last \
         tile of each loop is shorter.",
        move || {
            for_all(CASES, (cases(LIMITS), tile_size(LIMITS.seq), tile_size(LIMITS.seq)), |(case, br, bc)| {
                let backward = tiled(x.clone(), br, bc);
                check_backward_against_oracle(&backward, &case, Tolerance::F32)
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        MEMORY,
        "Keep two Br x Bc tiles (P, then dP and dS) and the N numbers of D, never an N x N matrix \
         or a Br x N slab of one: recompute P = e^(S - L) tile by tile.",
        move || {
            let setup = format!("tiles Br = Bc = {TILE}, B = H = 1, D = {HEAD_DIM}");
            check_working_memory(&setup, |n| {
                let spec = ProblemSpec::new(1, 1, n, n, HEAD_DIM);
                let (p, d_o) = (Problem::random(&spec, 1), Problem::random(&spec, 2).q);
                let forward = oracle_forward_in_f32(&p)?;
                let run = || {
                    x.backward(&p.q, &p.k, &p.v, &p.options, &forward, &d_o, TILE, TILE)
                        .map_err(|e| e.to_string())
                };
                let gradient_bytes =
                    |g: &Gradients<f32>| (g.dq.len() + g.dk.len() + g.dv.len()) * size_of::<f32>();
                working_bytes(run, gradient_bytes)
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        BAD_VALUES,
        "Check the values too: check_finite(\"dO\", d_o)?, check_finite(\"O\", &forward.o)? and \
         check_logsumexp(&forward.lse, &shape, causal)?. An L of -inf for a row that sees keys \
         would silently give it zero gradients.",
        move || {
            let p = Problem::random(&ProblemSpec::new(1, 2, 3, 2, 4).causal(true), 9);
            let forward = oracle_forward_in_f32(&p)?;
            let d_o = Array4::<f32>::ones((1, 2, 3, 4));
            let mut all_empty = forward.clone();
            all_empty.lse.fill(f32::NEG_INFINITY);
            let mut nan_o = forward.clone();
            nan_o.o[[0, 1, 2, 3]] = f32::NAN;
            let mut inf_d_o = d_o.clone();
            inf_d_o[[0, 0, 1, 0]] = f32::INFINITY;
            let cases = [
                ("L = -inf in every row", &all_empty, &d_o),
                ("a NaN in O", &nan_o, &d_o),
                ("+inf in dO", &forward, &inf_d_o),
            ];
            for (what, fwd, d_o) in cases {
                match x.backward(&p.q, &p.k, &p.v, &p.options, fwd, d_o, 2, 2) {
                    Err(
                        AttentionError::InvalidLogsumexp { .. } | AttentionError::NonFinite { .. },
                    ) => {}
                    Err(e) => {
                        return Err(format!(
                            "{what}: expected an InvalidLogsumexp or NonFinite error, got `{e}`"
                        ));
                    }
                    Ok(_) => return Err(format!("{what}: expected an error, got gradients")),
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        BAD_SHAPES,
        "Check dO and O against Q's shape and L against [B, H, Nq] (check_same_shape, \
         check_lse_shape) before any work.",
        move || {
            let z = Array4::<f32>::zeros((1, 2, 3, 4));
            let good = AttentionOutput { o: z.clone(), lse: ndarray::Array3::zeros((1, 2, 3)) };
            let bad_o = AttentionOutput { o: Array4::zeros((1, 2, 4, 4)), ..good.clone() };
            let bad_l = AttentionOutput { lse: ndarray::Array3::zeros((1, 2, 2)), ..good.clone() };
            let bad_d_o = Array4::<f32>::zeros((1, 2, 3, 5));
            let opts = AttentionOptions::new();
            for (what, fwd, d_o) in [("dO", &good, &bad_d_o), ("O", &bad_o, &z), ("L", &bad_l, &z)]
            {
                match x.backward(&z, &z, &z, &opts, fwd, d_o, 2, 2) {
                    Err(AttentionError::ShapeMismatch { tensor, .. }) if tensor == what => {}
                    Err(e) => {
                        return Err(format!(
                            "a wrong {what}: expected a ShapeMismatch naming {what}, got `{e}`"
                        ));
                    }
                    Ok(_) => {
                        return Err(format!(
                            "a wrong {what}: expected a ShapeMismatch, got gradients"
                        ));
                    }
                }
            }
            Ok(())
        },
    ));
    checks.extend(main_task(feature_checks(s)));
    checks
}

/// The main task's checks.
fn feature_checks(s: Rc<impl Exercise05 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let softcap = Check::new(
        SOFTCAP_GRADIENTS,
        "Recompute P from the CAPPED scores, e^(c tanh(s / c) - L). Then the chain rule adds one \
         factor: dS_ij = P_ij (dP_ij - D_i) (1 - tanh^2(s_ij / c)), with s_ij = scale q_i.k_j \
         the score before the cap.",
        move || {
            let strategy = (cases(LIMITS), crate::features::softcap());
            for_all(CASES, strategy, |(case, c)| {
                check_features(&*x, &case, &Features::default().softcap(c), 7, 5)
            })
        },
    );
    let x = s.clone();
    let dropout = Check::new(
        DROPOUT_GRADIENTS,
        "Regenerate the forward's mask, applied to the weights P after the softcap (never to \
         the scores): Z_ij = features.dropout.keeps(b, h, i, j), with the \
         batch, head, row and key of the WHOLE problem (not of the tile). A kept weight counts \
         1 / (1 - p) times, a dropped one 0, in dV = (P o Z / (1 - p))^T dO and in \
         dP = (dO V^T) o Z / (1 - p). D_i = dO_i . O_i already holds the dropout.",
        move || {
            let strategy = (cases(LIMITS), dropout_p(), any::<u64>());
            for_all(CASES, strategy, |(case, p, seed)| {
                check_features(&*x, &case, &Features::default().dropout(p, seed), 7, 5)
            })
        },
    );
    let x = s.clone();
    let both = Check::new(
        BOTH_GRADIENTS,
        "The order is the forward's: scores, then the cap, then P = e^(capped - L), then the \
         dropout mask on P (after the cap, never on the scores). Backward, each factor goes \
         where it belongs: the softcap's slope into dS, dropout's Z / (1 - p) into dV and dP; \
         tiles of any size must see the same mask.",
        move || {
            let features = (crate::features::softcap(), dropout_p(), any::<u64>());
            let tiles = (tile_size(LIMITS.seq), tile_size(LIMITS.seq));
            for_all(CASES, (cases(LIMITS), features, tiles), |(case, (c, p, seed), (br, bc))| {
                let features = Features::default().softcap(c).dropout(p, seed);
                check_features(&*x, &case, &features, br, bc)
            })
        },
    );
    let x = s;
    let errors = Check::new(
        FEATURE_ERRORS,
        "Call features.check_supported(&shape, &[Feature::Softcap, Feature::Dropout])? with the \
         other checks: it refuses a softcap that is not a positive number, a dropout \
         probability outside [0, 1), and the features this exercise does not compute.",
        move || feature_errors(&*x),
    );
    vec![softcap, dropout, both, errors]
}

/// A dropout probability: the common 0.1, or anything up to 0.9.
fn dropout_p() -> impl Strategy<Value = f32> {
    prop_oneof![Just(0.1f32), 0.0f32..0.9]
}

/// The forward pass of `features` on the case's problem, from the f64 oracle rounded to f32,
/// as the backward's input.
fn forward_with(
    case: &Case,
    features: &Features,
) -> Result<(Problem, AttentionOutput<f32>), String> {
    let p = case.problem();
    let out =
        features::attention(&p.q, &p.k, &p.v, &p.options, features).map_err(|e| e.to_string())?;
    let forward = AttentionOutput { o: out.o.mapv(|x| x as f32), lse: out.lse.mapv(|x| x as f32) };
    Ok((p, forward))
}

fn check_features(
    x: &dyn Exercise05,
    case: &Case,
    features: &Features,
    br: usize,
    bc: usize,
) -> Result<(), String> {
    let (p, forward) = forward_with(case, features)?;
    let d_o = testkit::checks::random_d_o(case);
    let expected = features::expected_gradients(&p.q, &p.k, &p.v, &p.options, features, &d_o)
        .map_err(|e| e.to_string())?;
    let actual = x
        .backward_with_features(&p.q, &p.k, &p.v, &p.options, features, &forward, &d_o, br, bc)
        .map_err(|e| format!("returned an error: {e}"))?;
    check_gradients(&actual, &expected, Tolerance::F32)
        .map(|_| ())
        .map_err(|e| format!("{features:?}, tiles Br = {br}, Bc = {bc}: {e}"))
}

fn feature_errors(x: &dyn Exercise05) -> Result<(), String> {
    let case = Case { spec: ProblemSpec::new(1, 2, 3, 4, 2), seed: 3 };
    let (p, forward) = forward_with(&case, &Features::default())?;
    let d_o = testkit::checks::random_d_o(&case);
    let refuses = |features: Features, feature: &str| -> Result<(), String> {
        match x
            .backward_with_features(&p.q, &p.k, &p.v, &p.options, &features, &forward, &d_o, 2, 2)
        {
            Err(AttentionError::InvalidFeature { feature: f, .. }) if f == feature => Ok(()),
            Err(other) => Err(format!(
                "{features:?} gave the error \"{other}\", expected one about the {feature}"
            )),
            Ok(_) => Err(format!(
                "{features:?} returned gradients, expected an error about the {feature}"
            )),
        }
    };
    for c in [0.0, -2.0, f32::NAN] {
        refuses(Features::default().softcap(c), Feature::Softcap.name())?;
    }
    for dropout in [1.0, -0.5, f32::NAN] {
        refuses(Features::default().dropout(dropout, 1), Feature::Dropout.name())?;
    }
    refuses(Features::default().window(Some(1), Some(1)), Feature::Window.name())?;
    refuses(Features::default().alibi(vec![0.5, 0.25]), Feature::Alibi.name())?;
    // The warm-up's checks of dO, O and L still come first.
    let wrong_d_o = Array4::<f32>::zeros((1, 2, 3, 5));
    let softcap = Features::default().softcap(5.0);
    match x
        .backward_with_features(&p.q, &p.k, &p.v, &p.options, &softcap, &forward, &wrong_d_o, 2, 2)
    {
        Err(AttentionError::ShapeMismatch { tensor: "dO", .. }) => Ok(()),
        other => Err(format!(
            "dO of head dim 5 against Q's 2 gave {:?}, expected a ShapeMismatch naming dO",
            other.err()
        )),
    }
}

/// The reference solutions: the lesson's backward for the warm-up, and the main task's, which
/// lives in the grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        backward: Box::new(|q, k, v, options, forward, d_o, query_rows, key_cols| {
            let tiles = lesson03::TileSizes::new(query_rows, key_cols)?;
            lesson05::backward(q, k, v, options, forward, d_o, tiles)
        }),
        backward_with_features: Box::new(
            |q, k, v, options, features, forward, d_o, query_rows, key_cols| {
                let tiles = lesson03::TileSizes::new(query_rows, key_cols)?;
                solution::backward_with_features(q, k, v, options, features, forward, d_o, tiles)
            },
        ),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::BackwardBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::BackwardBug>(checks(lesson()), checks)
}
