//! f16 and bf16 attention against the f64 oracle, with per-format tolerances; the
//! demonstrations of what must stay f32; the precision policy.

use half::{bf16, f16};
use lesson06::policy::{Algorithm, Tensor, attention, attention_in_precision};
use lesson06::{Dtype, Element, demos, flash, naive, round_to, widen};
use proptest::prelude::*;
use reference::checks::{check_rejects_bad_inputs, logit_bound};
use reference::strategies::{Case, ShapeLimits, cases, config};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Problem, ProblemSpec, Tolerance,
    check_output, compare, oracle,
};

const LIMITS: ShapeLimits = ShapeLimits { seq: 160, ..ShapeLimits::CPU };

/// Runs `T`-storage attention on the case's inputs rounded to `T`, and compares `O` with the
/// oracle on those same rounded inputs (so only the computation's error is measured) within
/// `o_tolerance`, and `L` within the f32 tolerance: `L` must stay f32.
fn check_in<T: Element>(
    case: &Case,
    algorithm: Algorithm,
    o_tolerance: Tolerance,
) -> Result<(), TestCaseError> {
    let p = case.problem();
    let (q, k, v) = (round_to::<T>(&p.q), round_to::<T>(&p.k), round_to::<T>(&p.v));
    let rounded = Problem { q: widen(&q), k: widen(&k), v: widen(&v), options: p.options };
    let expected = oracle::attention(&rounded.q, &rounded.k, &rounded.v, &p.options).unwrap();
    let out = match algorithm {
        Algorithm::Naive => naive(&q, &k, &v, &p.options).unwrap(),
        Algorithm::Flash => {
            flash(&q, &k, &v, &p.options, lesson03::TileSizes::new(7, 5).unwrap()).unwrap()
        }
    };
    let bound = logit_bound(&rounded);
    let o_tolerance =
        if algorithm == Algorithm::Naive { o_tolerance.for_logits(bound) } else { o_tolerance };
    let o = compare("O", &widen(&out.o), &expected.o, o_tolerance).unwrap();
    prop_assert!(o.passed(), "{:?} {:?}: {}", T::DTYPE, algorithm, o);
    if algorithm == Algorithm::Flash {
        let l =
            compare("L", &out.lse, &expected.lse, Tolerance::F32_CPU.for_logits(bound)).unwrap();
        prop_assert!(l.passed(), "{:?}: L must be f32-accurate: {}", T::DTYPE, l);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn f16_flash_is_within_f16_rounding_of_the_oracle(case in cases(LIMITS)) {
        check_in::<f16>(&case, Algorithm::Flash, Tolerance::F16)?;
    }

    #[test]
    fn bf16_flash_is_within_bf16_rounding_of_the_oracle(case in cases(LIMITS)) {
        check_in::<bf16>(&case, Algorithm::Flash, Tolerance::BF16)?;
    }

    #[test]
    fn naive_half_attention_is_within_tolerance_grown_by_the_logits(case in cases(LIMITS)) {
        check_in::<f16>(&case, Algorithm::Naive, Tolerance::F16)?;
        check_in::<bf16>(&case, Algorithm::Naive, Tolerance::BF16)?;
    }

    #[test]
    fn f32_storage_is_the_f32_contract(case in cases(LIMITS)) {
        let p = case.problem();
        let expected = oracle::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
        let tol = Tolerance::F32_CPU.for_logits(logit_bound(&p));
        for out in [naive(&p.q, &p.k, &p.v, &p.options).unwrap(), flash(&p.q, &p.k, &p.v, &p.options, lesson03::TileSizes::default()).unwrap()] {
            check_output(&AttentionOutput { o: out.o, lse: out.lse }, &expected, tol).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn exp_overflows_f16_just_above_11() {
    let t = demos::exp_overflow_threshold::<f16>();
    assert!((11.08..11.1).contains(&t), "{t}"); // ln 65504 = 11.0898
    assert!(demos::exp_overflow_threshold::<bf16>() > 88.0);
    assert!(demos::exp_overflow_threshold::<f32>() > 88.0);
}

#[test]
fn an_f16_running_sum_stops_at_2048() {
    assert_eq!(demos::running_sum_of_ones::<f16>(4096), 2048.0);
    assert_eq!(demos::running_sum_of_ones::<bf16>(4096), 256.0);
    assert_eq!(demos::running_sum_of_ones::<f32>(4096), 4096.0);
}

#[test]
fn layer_norm_statistics_need_f32_for_large_offsets() {
    // Activations 1000 + 100 z: mean 1000, variance 10000.
    let mut rng = reference::problem::SplitMix64::new(5);
    let x: Vec<f32> = (0..1024).map(|_| 1000.0 + 100.0 * rng.normal()).collect();
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
    let rel =
        |(m, v): (f32, f32)| ((f64::from(m) - mean).abs() / mean, (f64::from(v) - var).abs() / var);
    let (_, f16_var) = rel(demos::layer_norm_stats::<f16>(&x));
    let (_, bf16_var) = rel(demos::layer_norm_stats::<bf16>(&x));
    let (f32_mean, f32_var) = rel(demos::layer_norm_stats::<f32>(&x));
    assert!(
        !f16_var.is_finite() || f16_var > 1.0,
        "f16 variance error {f16_var}: sum x^2 overflows"
    );
    assert!(bf16_var > 0.5, "bf16 variance error {bf16_var}");
    assert!(f32_mean < 1e-5 && f32_var < 1e-2, "f32 errors {f32_mean}, {f32_var}");
}

#[test]
fn an_f16_softmax_must_subtract_the_maximum() {
    let x = [12.0, 11.0, 10.0]; // e^12 = 162755 > 65504
    assert!(demos::softmax_in::<f16>(&x, false).iter().any(|p| !p.is_finite()));
    let safe = demos::softmax_in::<f16>(&x, true);
    let expected = lesson02_like_softmax(&x);
    for (a, b) in safe.iter().zip(expected) {
        assert!((a - b).abs() < 1e-3, "{safe:?}");
    }
    assert!(
        demos::softmax_in::<f32>(&x, false).iter().all(|p| p.is_finite()),
        "f32 is fine up to 88"
    );
}

fn lesson02_like_softmax(x: &[f32]) -> Vec<f32> {
    let z: f32 = x.iter().map(|v| (v - 12.0).exp()).sum();
    x.iter().map(|v| (v - 12.0).exp() / z).collect()
}

#[test]
fn mixed_formats_are_rejected_with_a_clear_error() {
    let x = ndarray::Array4::<f32>::zeros((1, 1, 2, 2));
    let (f32_t, f16_t) = (Tensor::F32(x.clone()), Tensor::F16(round_to(&x)));
    let err =
        attention(&f16_t, &f32_t, &f16_t, &AttentionOptions::new(), Algorithm::Flash).unwrap_err();
    assert_eq!(err, AttentionError::MixedDtypes { q: "f16", k: "f32", v: "f16" });
    assert!(
        err.to_string()
            .starts_with("Q is f16, K is f32 and V is f16; expected all three in the same format")
    );
}

#[test]
fn dispatch_runs_the_format_it_is_given() {
    let p = Problem::random(&ProblemSpec::new(1, 2, 9, 11, 8).causal(true), 3);
    for algorithm in [Algorithm::Naive, Algorithm::Flash] {
        let t = |x: &ndarray::Array4<f32>| Tensor::BF16(round_to(x));
        let (o, lse) = attention(&t(&p.q), &t(&p.k), &t(&p.v), &p.options, algorithm).unwrap();
        assert_eq!(o.dtype(), Dtype::BF16);
        let direct = match algorithm {
            Algorithm::Naive => {
                naive::<bf16>(&round_to(&p.q), &round_to(&p.k), &round_to(&p.v), &p.options)
                    .unwrap()
            }
            Algorithm::Flash => flash::<bf16>(
                &round_to(&p.q),
                &round_to(&p.k),
                &round_to(&p.v),
                &p.options,
                lesson03::TileSizes::default(),
            )
            .unwrap(),
        };
        assert_eq!((o, lse), (Tensor::BF16(direct.o), direct.lse));
    }
}

#[test]
fn the_safe_wrapper_is_f32_in_f32_out() {
    let p = Problem::random(&ProblemSpec::new(2, 2, 33, 17, 16), 8);
    let exact =
        lesson03::attention(&p.q, &p.k, &p.v, &p.options, lesson03::TileSizes::default()).unwrap();
    assert_eq!(attention_in_precision(&p.q, &p.k, &p.v, &p.options, Dtype::F32).unwrap(), exact);
    // In f16 the end-to-end error (inputs rounded, then O) is f16-sized, not f32-sized.
    let expected = oracle::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
    let f16_out = attention_in_precision(&p.q, &p.k, &p.v, &p.options, Dtype::F16).unwrap();
    let c =
        compare("O", &f16_out.o, &expected.o, Tolerance::F16.for_logits(logit_bound(&p))).unwrap();
    assert!(c.passed(), "{c}");
    assert!(c.rel_frobenius_error > 1e-5, "rounding to f16 must show: {c}");
    check_rejects_bad_inputs(&|q: &_, k: &_, v: &_, o: &_| {
        attention_in_precision(q, k, v, o, Dtype::F16)
    })
    .unwrap();
}

/// 4096 equal scores and V = 1: the weights are 1/4096 each and O = 1. A softmax sum `l`
/// kept in f16 would stall at 2048 and give O = 2.
#[test]
fn long_rows_need_an_f32_softmax_sum() {
    let n = 4096;
    let q = ndarray::Array4::<f16>::from_elem((1, 1, 1, 4), f16::from_f32(0.0));
    let k = ndarray::Array4::<f16>::from_elem((1, 1, n, 4), f16::from_f32(0.5));
    let v = ndarray::Array4::<f16>::from_elem((1, 1, n, 4), f16::from_f32(1.0));
    let options = AttentionOptions::new();
    for out in [
        naive(&q, &k, &v, &options).unwrap(),
        flash(&q, &k, &v, &options, lesson03::TileSizes::default()).unwrap(),
    ] {
        assert!(out.o.iter().all(|x| (x.to_f32() - 1.0).abs() < 1e-3), "{:?}", out.o);
        assert!((out.lse[[0, 0, 0]] - (n as f32).ln()).abs() < 1e-5);
    }
}
