//! Exercise 06: attention on f16 and bf16 storage, with f32 where it matters.

pub mod mutants;

use std::rc::Rc;

use half::{bf16, f16};
use lesson06::policy::Tensor;
use lesson06::{Element, Output, round_to, widen};
use ndarray::{Array3, Array4};
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Tolerance, check_output, oracle,
};
use testkit::checks::{check_rejects_bad_inputs, check_rejects_non_finite_inputs};
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all};
use crate::forward::{CASES, LIMITS};

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const F16: &str = "f16: O within f16 rounding of the oracle, L as accurate as f32";
/// Check name.
pub const BF16: &str = "bf16: O within bf16 rounding of the oracle, L as accurate as f32";
/// Check name.
pub const LARGE_LOGITS: &str = "large logits (inputs x100) stay finite";
/// Check name.
pub const LONG_ROW: &str = "a row of 4096 equal scores: the softmax sum stays f32";
/// Check name.
pub const BAD_SHAPES: &str = "bad shapes, NaN and infinities are rejected with the right error";
/// Check name.
pub const MIXED_FORMATS: &str = "mixed formats are a MixedDtypes error, never a silent conversion";
/// Check name.
pub const EACH_FORMAT: &str = "each format runs in that format";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 06 provides.
    pub trait Exercise06;
    /// Attention on f16 storage: O in f16, L in f32.
    fn attention_f16(
        q: &Array4<f16>,
        k: &Array4<f16>,
        v: &Array4<f16>,
        options: &AttentionOptions,
    ) -> Result<Output<f16>, AttentionError>;
    /// Attention on bf16 storage: O in bf16, L in f32.
    fn attention_bf16(
        q: &Array4<bf16>,
        k: &Array4<bf16>,
        v: &Array4<bf16>,
        options: &AttentionOptions,
    ) -> Result<Output<bf16>, AttentionError>;
    /// Attention on tensors of one format, an error for mixed formats.
    fn dispatch(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Tensor, Array3<f32>), AttentionError>;
}

/// `O` within `tolerance` of the oracle on the rounded inputs (`O` rounded once to the format),
/// `L` within the f32 bound.
fn check_format<T: Element>(
    case: &Case,
    tolerance: Tolerance,
    run: impl Fn(
        &Array4<T>,
        &Array4<T>,
        &Array4<T>,
        &AttentionOptions,
    ) -> Result<Output<T>, AttentionError>,
) -> Result<(), String> {
    let p = case.problem();
    let (q, k, v) = (round_to::<T>(&p.q), round_to::<T>(&p.k), round_to::<T>(&p.v));
    let expected = oracle::expected(&widen(&q), &widen(&k), &widen(&v), &p.options)
        .map_err(|e| e.to_string())?;
    let out = run(&q, &k, &v, &p.options).map_err(|e| format!("returned an error: {e}"))?;
    let out = AttentionOutput { o: widen(&out.o), lse: out.lse };
    check_output(&out, &expected, tolerance)
        .map(|_| ())
        .map_err(|e| format!("{:?} (L must be as accurate as f32): {e}", T::DTYPE))
}

/// The graded checks of exercise 06.
pub fn checks(solution: impl Exercise06 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        F16,
        "Widen every loaded value to f32 and compute S, m, l and the accumulator in f32; round \
         only the final O to f16. Return L in f32.",
        move || {
            let ordinary = cases(LIMITS).prop_map(|mut c| {
                c.spec = c.spec.logit_scale(1.0);
                c
            });
            for_all(CASES, ordinary, |case| {
                check_format::<f16>(&case, Tolerance::F16_OUTPUT, |q, k, v, o| {
                    x.attention_f16(q, k, v, o)
                })
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        BF16,
        "The same code as for f16, generic over the storage format (the Element trait).",
        move || {
            for_all(CASES, cases(LIMITS), |case| {
                check_format::<bf16>(&case, Tolerance::BF16_OUTPUT, |q, k, v, o| {
                    x.attention_bf16(q, k, v, o)
                })
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        LARGE_LOGITS,
        "Subtract the running maximum before exp, and rescale when it grows: e^x overflows f32 \
         above 88.7 and f16 above 11.09.",
        move || {
            let extreme = cases(LIMITS).prop_map(|mut c| {
                c.spec = c.spec.logit_scale(100.0);
                c
            });
            // The error model grows with the logits by itself.
            for_all(CASES, extreme, |case| {
                check_format::<f16>(&case, Tolerance::F16_OUTPUT, |q, k, v, o| {
                    x.attention_f16(q, k, v, o)
                })
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        LONG_ROW,
        "A running sum kept in f16 stops growing at 2048 (2048 + 1 rounds to 2048): keep l, and \
         the accumulator, in f32.",
        move || {
            let n = 4096;
            let q = Array4::<f16>::from_elem((1, 1, 1, 4), f16::from_f32(0.0));
            let k = Array4::<f16>::from_elem((1, 1, n, 4), f16::from_f32(0.5));
            let v = Array4::<f16>::from_elem((1, 1, n, 4), f16::from_f32(1.0));
            let out =
                x.attention_f16(&q, &k, &v, &AttentionOptions::new()).map_err(|e| e.to_string())?;
            let o = out.o[[0, 0, 0, 0]].to_f32();
            if (o - 1.0).abs() > 1e-3 {
                return Err(format!(
                    "O = {o}, expected 1 (4096 equal weights of 1/4096 times V = 1)"
                ));
            }
            let l = out.lse[[0, 0, 0]];
            if (l - (n as f32).ln()).abs() > 1e-5 {
                return Err(format!("L = {l}, expected ln 4096 = {}", (n as f32).ln()));
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        BAD_SHAPES,
        "Validate with check_inputs(q, k, v, options)? first (it works on any T): shapes do not \
         depend on the storage format, and an f16 infinity (an overflow where the tensor was \
         made) is bad data, not a number to compute with.",
        move || {
            let f16_path = |q: &_, k: &_, v: &_, o: &_| {
                x.attention_f16(&round_to(q), &round_to(k), &round_to(v), o)
                    .map(|out| reference::AttentionOutput { o: widen(&out.o), lse: out.lse })
            };
            check_rejects_bad_inputs(&f16_path)?;
            check_rejects_non_finite_inputs(&f16_path)
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        MIXED_FORMATS,
        "Match on (q, k, v): all F32, all F16 or all BF16 run; anything else returns \
         AttentionError::MixedDtypes with the three format names.",
        move || {
            let z = Array4::<f32>::zeros((1, 1, 2, 2));
            let (a, b) = (Tensor::F16(round_to(&z)), Tensor::BF16(round_to(&z)));
            match x.dispatch(&a, &b, &a, &AttentionOptions::new()) {
                Err(AttentionError::MixedDtypes { q: "f16", k: "bf16", v: "f16" }) => Ok(()),
                Err(e) => Err(format!(
                    "f16, bf16, f16: expected MixedDtypes {{ q: f16, k: bf16, v: f16 }}, got `{e}`"
                )),
                Ok(_) => Err("f16, bf16, f16: expected MixedDtypes, got a result".to_string()),
            }
        },
    ));
    let x = s;
    checks.push(Check::new(
        EACH_FORMAT,
        "Tensor::F16 inputs give a Tensor::F16 output equal to attention_f16's, and so on.",
        move || {
            let p = reference::Problem::random(
                &reference::ProblemSpec::new(1, 2, 9, 11, 8).causal(true),
                3,
            );
            let t16 = |a: &Array4<f32>| Tensor::F16(round_to(a));
            let (o, lse) = x
                .dispatch(&t16(&p.q), &t16(&p.k), &t16(&p.v), &p.options)
                .map_err(|e| e.to_string())?;
            let direct = x
                .attention_f16(&round_to(&p.q), &round_to(&p.k), &round_to(&p.v), &p.options)
                .map_err(|e| e.to_string())?;
            if (o, lse) != (Tensor::F16(direct.o), direct.lse) {
                Err("dispatch on f16 tensors differs from attention_f16".to_string())
            } else {
                Ok(())
            }
        },
    ));
    checks
}

/// The lesson's implementation: the reference solution.
pub fn lesson() -> Functions {
    let tiles = lesson03::TileSizes::default();
    Functions {
        attention_f16: Box::new(move |q, k, v, options| lesson06::flash(q, k, v, options, tiles)),
        attention_bf16: Box::new(move |q, k, v, options| lesson06::flash(q, k, v, options, tiles)),
        dispatch: Box::new(|q, k, v, options| {
            lesson06::policy::attention(q, k, v, options, lesson06::policy::Algorithm::Flash)
        }),
    }
}
