//! f16 and bf16 attention against the f64 oracle, with per-format tolerances; the
//! demonstrations of what must stay f32; the precision policy.

use half::{bf16, f16};
use lesson06::policy::{Algorithm, Tensor, attention, attention_in_precision};
use lesson06::{Dtype, Element, demos, flash, flash_rounding_weights, naive, round_to, widen};
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, NonFiniteValue, Problem, ProblemSpec,
    Tolerance, check_output, oracle,
};
use testkit::checks::{
    check_rejects_bad_inputs, check_rejects_non_finite_inputs, check_rejects_overflowing_logits,
};
use testkit::strategies::{Case, ShapeLimits, cases, config};

const LIMITS: ShapeLimits = ShapeLimits { seq: 160, ..ShapeLimits::CPU };

/// The three ways this lesson computes on `T` storage.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// `S` and `P` stored in `T`.
    Naive,
    /// Every intermediate in f32, `O` rounded once.
    Flash,
    /// As `Flash`, with `P` rounded to `T` before `P V`.
    FlashRoundingWeights,
}

/// Runs `T`-storage attention on the case's inputs rounded to `T`, and compares it with the
/// oracle on those same rounded inputs (so only the computation's error is measured), within
/// `tolerance`. For the flash kernels `L` is held to the f32 bound: it must stay f32.
fn check_in<T: Element>(
    case: &Case,
    kernel: Kernel,
    tolerance: Tolerance,
) -> Result<(), TestCaseError> {
    let p = case.problem();
    let (q, k, v) = (round_to::<T>(&p.q), round_to::<T>(&p.k), round_to::<T>(&p.v));
    let expected = oracle::expected(&widen(&q), &widen(&k), &widen(&v), &p.options).unwrap();
    let tiles = lesson03::TileSizes::new(7, 5).unwrap();
    let out = match kernel {
        Kernel::Naive => naive(&q, &k, &v, &p.options),
        Kernel::Flash => flash(&q, &k, &v, &p.options, tiles),
        Kernel::FlashRoundingWeights => flash_rounding_weights(&q, &k, &v, &p.options, tiles),
    }
    .unwrap();
    let out = AttentionOutput { o: widen(&out.o), lse: out.lse };
    check_output(&out, &expected, tolerance)
        .map_err(|e| TestCaseError::fail(format!("{:?} {kernel:?}: {e}", T::DTYPE)))?;
    Ok(())
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn f16_flash_is_within_f16_rounding_of_o(case in cases(LIMITS)) {
        check_in::<f16>(&case, Kernel::Flash, Tolerance::F16_OUTPUT)?;
    }

    #[test]
    fn bf16_flash_is_within_bf16_rounding_of_o(case in cases(LIMITS)) {
        check_in::<bf16>(&case, Kernel::Flash, Tolerance::BF16_OUTPUT)?;
    }

    #[test]
    fn flash_rounding_p_is_within_the_rounding_of_p_and_o(case in cases(LIMITS)) {
        check_in::<f16>(&case, Kernel::FlashRoundingWeights, Tolerance::F16_WEIGHTS)?;
        check_in::<bf16>(&case, Kernel::FlashRoundingWeights, Tolerance::BF16_WEIGHTS)?;
    }

    #[test]
    fn naive_half_attention_is_within_the_rounding_of_s_p_and_o(case in cases(LIMITS)) {
        check_in::<f16>(&case, Kernel::Naive, Tolerance::F16_STORAGE)?;
        check_in::<bf16>(&case, Kernel::Naive, Tolerance::BF16_STORAGE)?;
    }

    #[test]
    fn f32_storage_is_the_f32_contract(case in cases(LIMITS)) {
        check_in::<f32>(&case, Kernel::Naive, Tolerance::F32)?;
        check_in::<f32>(&case, Kernel::Flash, Tolerance::F32)?;
        check_in::<f32>(&case, Kernel::FlashRoundingWeights, Tolerance::F32)?;
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
    // Welford's update in f32, on inputs stored in f16: only the inputs' own rounding remains.
    let (welford_mean, welford_var) = rel(demos::layer_norm_stats_welford::<f16>(&x));
    assert!(welford_mean < 1e-3 && welford_var < 2e-3, "Welford {welford_mean}, {welford_var}");
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
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    let f16_out = attention_in_precision(&p.q, &p.k, &p.v, &p.options, Dtype::F16).unwrap();
    let [o, _] = check_output(&f16_out, &expected, Tolerance::F16_STORAGE).unwrap();
    assert!(o.rel_frobenius_error > 1e-5, "rounding to f16 must show: {o}");
    let wrapper = |q: &_, k: &_, v: &_, o: &_| attention_in_precision(q, k, v, o, Dtype::F16);
    check_rejects_bad_inputs(&wrapper).unwrap();
    check_rejects_non_finite_inputs(&wrapper).unwrap();
    check_rejects_overflowing_logits(&wrapper).unwrap();
}

#[test]
fn an_input_beyond_the_formats_range_is_an_error_not_an_empty_row() {
    let mut p = Problem::random(&ProblemSpec::new(1, 2, 4, 5, 8), 4);
    p.v[[0, 1, 2, 3]] = 1e5; // f16's largest finite value is 65504
    let err = attention_in_precision(&p.q, &p.k, &p.v, &p.options, Dtype::F16).unwrap_err();
    assert_eq!(
        err,
        AttentionError::NotRepresentable {
            tensor: "V",
            index: vec![0, 1, 2, 3],
            value: 1e5,
            format: "f16",
            largest: 65504.0
        }
    );
    // bf16 has f32's range: the same input is fine there.
    assert!(attention_in_precision(&p.q, &p.k, &p.v, &p.options, Dtype::BF16).is_ok());
}

#[test]
fn infinities_stored_in_f16_are_errors() {
    let p = Problem::random(&ProblemSpec::new(1, 1, 3, 3, 4), 4);
    let mut k = round_to::<f16>(&p.k);
    k[[0, 0, 2, 1]] = f16::INFINITY;
    let (q, v) = (round_to::<f16>(&p.q), round_to::<f16>(&p.v));
    let tiles = lesson03::TileSizes::default();
    let expected = AttentionError::NonFinite {
        tensor: "K",
        index: vec![0, 0, 2, 1],
        value: NonFiniteValue::PlusInfinity,
    };
    assert_eq!(naive(&q, &k, &v, &p.options).unwrap_err(), expected);
    assert_eq!(flash(&q, &k, &v, &p.options, tiles).unwrap_err(), expected);
    assert_eq!(flash_rounding_weights(&q, &k, &v, &p.options, tiles).unwrap_err(), expected);
}

#[test]
fn rounding_p_before_pv_costs_accuracy_that_rounding_only_o_does_not() {
    // One fixed problem, so the comparison is deterministic: rounding P adds an error of the
    // size of f16's unit roundoff to every weight, on top of the rounding of O itself
    // (root-mean-square errors).
    let p = Problem::random(&ProblemSpec::new(1, 4, 256, 256, 64), 7);
    let (q, k, v) = (round_to::<f16>(&p.q), round_to::<f16>(&p.k), round_to::<f16>(&p.v));
    let expected = oracle::attention(&widen(&q), &widen(&k), &widen(&v), &p.options).unwrap();
    let tiles = lesson03::TileSizes::default();
    let error = |o: &ndarray::Array4<f16>| {
        let squares: f64 =
            widen(o).iter().zip(&expected.o).map(|(&a, &r)| (f64::from(a) - r).powi(2)).sum();
        (squares / o.len() as f64).sqrt()
    };
    let only_o = error(&flash(&q, &k, &v, &p.options, tiles).unwrap().o);
    let p_too = error(&flash_rounding_weights(&q, &k, &v, &p.options, tiles).unwrap().o);
    assert!(p_too > only_o, "rounding P: {p_too:e}, rounding only O: {only_o:e}");
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

#[test]
fn logits_beyond_the_storage_formats_range_are_an_error_in_naive_attention() {
    // Q and K near 300 (f16 holds them) make logits near 300 * 300 * 8 / sqrt(8) = 2.5e5:
    // beyond f16's 65504. Naive attention stores S in f16 and must refuse; FlashAttention
    // keeps S in f32 and computes it.
    let q = ndarray::Array4::<f16>::from_elem((1, 1, 2, 8), f16::from_f32(300.0));
    let k = ndarray::Array4::<f16>::from_elem((1, 1, 3, 8), f16::from_f32(300.0));
    let v = ndarray::Array4::<f16>::from_elem((1, 1, 3, 8), f16::from_f32(1.0));
    let options = AttentionOptions::new();
    let err = naive(&q, &k, &v, &options).unwrap_err();
    assert!(
        matches!(err, AttentionError::LogitsOverflow { largest, .. } if largest == 65504.0),
        "{err}"
    );
    let out = flash(&q, &k, &v, &options, lesson03::TileSizes::default()).unwrap();
    assert!(out.o.iter().all(|x| x.to_f32() == 1.0));
}
