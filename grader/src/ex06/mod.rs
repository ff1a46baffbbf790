//! Exercise 06: attention on f16 and bf16 storage, with f32 where it matters; the main task,
//! attention on FP8 (e4m3) inputs with one descale per batch and head.

pub mod mutants;
mod solution;

use std::rc::Rc;

use half::{bf16, f16};
use lesson06::policy::Tensor;
use lesson06::{Element, Output, round_to, widen};
use ndarray::{Array2, Array3, Array4, s};
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, NonFiniteValue, Problem, ProblemSpec,
    Tolerance, check_output, oracle,
};
use testkit::checks::{check_rejects_bad_inputs, check_rejects_non_finite_inputs};
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all, main_task};
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
/// Check name.
pub const E4M3_DECODE: &str =
    "e4m3: each of the 256 codes decodes to its value (subnormals, 448, NaN)";
/// Check name.
pub const E4M3_ENCODE: &str =
    "e4m3: f32 rounds to the nearest code, ties to even; NaN, infinities and |x| > 464 are None";
/// Check name.
pub const FP8_QUANTIZE: &str =
    "quantize: one descale per batch and head, amax / 448, every value within half a step";
/// Check name.
pub const FP8_ATTENTION: &str =
    "FP8 attention: the f64 oracle on the values the codes stand for, causal or not";
/// Check name.
pub const FP8_ERRORS: &str =
    "FP8: non-finite inputs, NaN codes, bad shapes and bad descales are the right errors";

/// An FP8 tensor as the grader sees the learner's `Fp8Tensor`: element `[b, h, n, d]` stands
/// for `descale[b, h] * value(codes[b, h, n, d])`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8 {
    /// e4m3 codes `[B, H, N, D]`.
    pub codes: Array4<u8>,
    /// One descale per batch and head, `[B, H]`.
    pub descale: Array2<f32>,
}

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
    /// The value of an e4m3 code (main task).
    fn e4m3_to_f32(code: u8) -> f32;
    /// The nearest e4m3 code, or `None` (main task).
    fn f32_to_e4m3(x: f32) -> Option<u8>;
    /// `x` in e4m3 with one descale per batch and head (main task).
    fn quantize(x: &Array4<f32>, tensor: &'static str) -> Result<Fp8, AttentionError>;
    /// Attention on FP8 inputs, in f32 (main task).
    fn attention_fp8(
        q: &Fp8,
        k: &Fp8,
        v: &Fp8,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
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
    let x = s.clone();
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
    checks.extend(main_task(fp8_checks(s)));
    checks
}

/// The e4m3 values of the codes `0x00..=0x7E` (the non-negative finite ones), in code order,
/// from the format's definition: `m/8 * 2^-6` for exponent field 0, else `(1 + m/8) 2^(e-7)`.
/// (Pinned to values worked by hand in this module's tests.)
fn e4m3_table() -> Vec<f64> {
    (0u8..=0x7E)
        .map(|code| {
            let (e, m) = (i32::from(code >> 3), f64::from(code & 7) / 8.0);
            if e == 0 { m * 2f64.powi(-6) } else { (1.0 + m) * 2f64.powi(e - 7) }
        })
        .collect()
}

/// The code `x` must round to, by search over the table: the nearest value, the even code
/// (last bit 0) on a tie; `None` for NaN, the infinities and `|x| > 464`.
fn nearest_code(x: f32, table: &[f64]) -> Option<u8> {
    if !x.is_finite() || x.abs() > 464.0 {
        return None;
    }
    let a = f64::from(x.abs());
    let distance = |code: usize| (table[code] - a).abs();
    let best = (0..table.len())
        .min_by(|&c, &d| distance(c).total_cmp(&distance(d)).then((c % 2).cmp(&(d % 2))))?;
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    Some(sign | best as u8)
}

/// `"0x3A (1.25)"`, for messages.
fn describe(code: Option<u8>, decode: impl Fn(u8) -> f32) -> String {
    match code {
        Some(c) => format!("{c:#04X} ({})", decode(c)),
        None => "None".to_string(),
    }
}

/// The main task's checks: the format, the quantization, FP8 attention and its errors.
fn fp8_checks(s: Rc<impl Exercise06 + 'static>) -> Vec<Check> {
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        E4M3_DECODE,
        "Split the byte into s eeee mmm. Exponent field 0 is subnormal: (m/8) 2^-6, no implicit \
         1. Otherwise (1 + m/8) 2^(e - 7). Only s 1111 111 is NaN: 1111 110 is 448.",
        move || {
            let table = e4m3_table();
            for code in 0..=255u8 {
                let got = x.e4m3_to_f32(code);
                let magnitude = table.get(usize::from(code & 0x7F)).copied();
                let expected = magnitude.map(|m| if code & 0x80 == 0 { m } else { -m });
                let ok = match expected {
                    None => got.is_nan(),
                    Some(e) => f64::from(got) == e,
                };
                if !ok {
                    let expected = expected.map_or("NaN".to_string(), |e| e.to_string());
                    return Err(format!(
                        "code {code:#04X} ({code:08b}): got {got}, expected {expected}"
                    ));
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        E4M3_ENCODE,
        "Find the binade of |x| (below 2^-6, the subnormals' spacing 2^-9 continues), divide by \
         its step (exact: a power of two), round_ties_even, multiply back; a value that rounds \
         past 448 is None. Rebuild the code from the rounded value: it may have carried into \
         the next binade.",
        move || {
            let table = e4m3_table();
            let decode = |c| x.e4m3_to_f32(c);
            let check = |value: f32| {
                let (got, expected) = (x.f32_to_e4m3(value), nearest_code(value, &table));
                // +0 and -0 are the same number: either code will do for a zero result.
                let same = got == expected
                    || matches!((got, expected), (Some(a), Some(b)) if a & 0x7F == 0 && b & 0x7F == 0);
                if same {
                    Ok(())
                } else {
                    Err(format!(
                        "f32_to_e4m3({value:e}) = {}, expected {}",
                        describe(got, decode),
                        describe(expected, decode)
                    ))
                }
            };
            // Every value, every midpoint between neighbours (ties), and the f32 numbers
            // just beside each midpoint, both signs.
            for pair in table.windows(2) {
                let midpoint = ((pair[0] + pair[1]) / 2.0) as f32; // exact: 5 significant bits
                for value in [pair[0] as f32, midpoint, midpoint.next_down(), midpoint.next_up()] {
                    check(value)?;
                    check(-value)?;
                }
            }
            let edges = [448.0, 460.0, 464.0, 464f32.next_up(), 1e30, f32::MAX, f32::MIN_POSITIVE];
            let specials = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-45];
            for value in edges.into_iter().chain(specials) {
                check(value)?;
                check(-value)?;
            }
            // Random values over the whole range, log-uniform in size.
            let random = (-14.0f32..9.0, any::<bool>(), any::<u32>());
            for_all(CASES * 40, random, |(log2, negative, noise)| {
                let magnitude = 2f32.powf(log2) * (1.0 + (noise % 1000) as f32 * 1e-6);
                check(if negative { -magnitude } else { magnitude })
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        FP8_QUANTIZE,
        "For each (batch, head) on its own: amax = the largest |x| of that slice, descale = \
         max(amax / 448, f32::MIN_POSITIVE), code = f32_to_e4m3(x / descale). One descale for \
         the whole tensor, or for a head across batches, is what this check catches: slices of \
         different sizes.",
        move || {
            let by_hand = Array4::from_shape_vec((1, 2, 1, 3), vec![448.0, -1.0, 0.5, 0.0, 0.0, 0.0])
                .expect("six values");
            let got = x.quantize(&by_hand, "Q").map_err(|e| format!("returned an error: {e}"))?;
            let expected = Fp8 {
                codes: Array4::from_shape_vec((1, 2, 1, 3), vec![0x7E, 0xB8, 0x30, 0, 0, 0])
                    .expect("six codes"),
                descale: Array2::from_shape_vec((1, 2), vec![1.0, f32::MIN_POSITIVE])
                    .expect("two descales"),
            };
            if got != expected {
                return Err(format!(
                    "quantize of [[448, -1, 0.5], [0, 0, 0]] (two heads): {got:?}, expected {expected:?}"
                ));
            }
            // Slices (batch, head) whose sizes differ by up to 2^120 either way; some all zero.
            let size = prop_oneof![Just(None), (-120..=120i32).prop_map(Some)];
            let slices = (1..=3usize, 1..=4usize).prop_flat_map(move |(batch, heads)| {
                let sizes = proptest::collection::vec(size.clone(), batch * heads);
                (Just(batch), Just(heads), sizes)
            });
            for_all(CASES, (slices, 1..=12usize, 1..=9usize, any::<u64>()), |(slices, n, d, seed)| {
                let (batch, heads, sizes) = slices;
                let mut t = Problem::random(&ProblemSpec::new(batch, heads, n, 1, d), seed).q;
                for (slice, size) in sizes.iter().enumerate() {
                    let factor = size.map_or(0.0, |k| 2f32.powi(k));
                    let (b, h) = (slice / heads, slice % heads);
                    t.slice_mut(s![b, h, .., ..]).mapv_inplace(|v| v * factor);
                }
                let got = x.quantize(&t, "K").map_err(|e| format!("returned an error: {e}"))?;
                check_quantized(&t, &got)
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        FP8_ATTENTION,
        "Each element stands for descale[b, h] * value(code): widen Q, K and V to those f32 \
         values (or fold d_q d_k into the score scale and d_v into O), then the warm-up's \
         attention in f32.",
        move || {
            // The grader quantizes (its own solution), then spreads the descales by powers of
            // two per head, so that a descale forgotten or used for the wrong tensor shows.
            let spread = proptest::collection::vec(-3..=3i32, 3);
            for_all(CASES, (cases(LIMITS), spread), |(case, spread)| {
                let p = case.problem();
                let mut inputs = Vec::new();
                for ((x, name), shift) in
                    [(&p.q, "Q"), (&p.k, "K"), (&p.v, "V")].into_iter().zip(&spread)
                {
                    let mut fp8 = solution::quantize(x, name).map_err(|e| e.to_string())?;
                    for ((_, h), d) in fp8.descale.indexed_iter_mut() {
                        *d *= 2f32.powi(shift * (1 - 2 * (h as i32 % 2)));
                    }
                    inputs.push(fp8);
                }
                let [q, k, v] = &inputs[..] else { unreachable!("three tensors") };
                let widened =
                    |x: &Fp8, name| solution::dequantize(x, name).map_err(|e| e.to_string());
                let expected = oracle::expected(
                    &widened(q, "Q")?,
                    &widened(k, "K")?,
                    &widened(v, "V")?,
                    &p.options,
                )
                .map_err(|e| e.to_string())?;
                let out = x
                    .attention_fp8(q, k, v, &p.options)
                    .map_err(|e| format!("returned an error: {e}"))?;
                check_output(&out, &expected, Tolerance::F32).map(|_| ()).map_err(|e| e.to_string())
            })
        },
    ));
    let x = s;
    checks.push(Check::new(
        FP8_ERRORS,
        "quantize: check_finite(tensor, x)? first. attention_fp8: each descale must be [B, H] \
         of its codes and positive and finite (InvalidFeature naming \"Q descale\", \"K \
         descale\" or \"V descale\"); then widen and let check_inputs find bad shapes, NaN \
         codes (0x7F, 0xFF) and overflowing logits.",
        move || {
            let through_fp8 =
                |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
                    let (q, k, v) = (x.quantize(q, "Q")?, x.quantize(k, "K")?, x.quantize(v, "V")?);
                    x.attention_fp8(&q, &k, &v, o)
                };
            check_rejects_bad_inputs(&through_fp8)?;
            check_rejects_non_finite_inputs(&through_fp8)?;
            check_fp8_errors(&*x)
        },
    ));
    checks
}

/// `got` is `x` quantized as the contract says: one descale per (batch, head), within an ulp
/// of `max(amax / 448, f32::MIN_POSITIVE)`, and every element within half a step of e4m3
/// (a relative `2^-4` for normal values, `2^-10` descales below them) of `x`.
fn check_quantized(x: &Array4<f32>, got: &Fp8) -> Result<(), String> {
    let (batch, heads, _, _) = x.dim();
    if got.codes.dim() != x.dim() || got.descale.dim() != (batch, heads) {
        return Err(format!(
            "codes {:?} and descale {:?}, expected {:?} and [{batch}, {heads}]",
            got.codes.shape(),
            got.descale.shape(),
            x.shape()
        ));
    }
    let table = e4m3_table();
    for ((b, h), &d) in got.descale.indexed_iter() {
        let slice = x.slice(s![b, h, .., ..]);
        let amax = slice.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
        let expected = (amax / 448.0).max(f64::from(f32::MIN_POSITIVE));
        if (f64::from(d) - expected).abs() > expected * 2f64.powi(-22) {
            return Err(format!(
                "head [{b}, {h}] (largest |x| {amax:e}): descale {d:e}, expected {expected:e}"
            ));
        }
        for ((n, c), &value) in slice.indexed_iter() {
            let code = got.codes[[b, h, n, c]];
            let magnitude = table.get(usize::from(code & 0x7F)).copied().unwrap_or(f64::NAN);
            let stands_for = if code & 0x80 == 0 { magnitude } else { -magnitude };
            let error = (f64::from(d) * stands_for - f64::from(value)).abs();
            let half_step = 2f64.powi(-4) * f64::from(value.abs()) + 2f64.powi(-10) * f64::from(d);
            // NaN (a NaN code) fails too.
            let within = error <= half_step * (1.0 + 2f64.powi(-16));
            if !within {
                return Err(format!(
                    "x[{b}, {h}, {n}, {c}] = {value:e} became code {code:#04X} x descale {d:e} = \
                     {:e}, more than half a step away",
                    f64::from(d) * stands_for
                ));
            }
        }
    }
    Ok(())
}

/// NaN codes, descales of the wrong shape and descales that are not positive finite numbers
/// are the errors the contract names.
fn check_fp8_errors(x: &(impl Exercise06 + ?Sized)) -> Result<(), String> {
    let p = Problem::random(&ProblemSpec::new(1, 2, 3, 4, 5).causal(true), 17);
    let quantized = |t: &Array4<f32>, name| solution::quantize(t, name).map_err(|e| e.to_string());
    let (q, k, v) = (quantized(&p.q, "Q")?, quantized(&p.k, "K")?, quantized(&p.v, "V")?);
    let run = |q: &Fp8, k: &Fp8, v: &Fp8| x.attention_fp8(q, k, v, &p.options);
    for (code, index) in [(0x7F, [0, 1, 2, 3]), (0xFF, [0, 0, 3, 4])] {
        let mut bad = k.clone();
        bad.codes[index] = code;
        bad.codes[[0, 1, 3, 4]] = 0x7F; // also bad, later: must not be the one named
        let expected = AttentionError::NonFinite {
            tensor: "K",
            index: index.to_vec(),
            value: NonFiniteValue::NaN,
        };
        match run(&q, &bad, &v) {
            Err(e) if e == expected => {}
            other => {
                return Err(format!(
                    "K code {code:#04X} at {index:?}: {other:?}, expected Err({expected:?})"
                ));
            }
        }
    }
    let wrong_shape = Fp8 { descale: Array2::ones((2, 1)), ..v.clone() };
    let cases = [
        ("V descale [2, 1] for V [1, 2, ...]", run(&q, &k, &wrong_shape), "V descale"),
        ("Q descale 0", run(&with_descale(&q, 0.0), &k, &v), "Q descale"),
        ("K descale -1", run(&q, &with_descale(&k, -1.0), &v), "K descale"),
        ("V descale NaN", run(&q, &k, &with_descale(&v, f32::NAN)), "V descale"),
        ("Q descale +inf", run(&with_descale(&q, f32::INFINITY), &k, &v), "Q descale"),
    ];
    for (what, result, name) in cases {
        match result {
            Err(AttentionError::InvalidFeature { feature, .. }) if feature == name => {}
            other => {
                return Err(format!(
                    "{what}: {other:?}, expected Err(InvalidFeature {{ feature: \"{name}\", .. }})"
                ));
            }
        }
    }
    Ok(())
}

/// `x` with its descale of head `[0, 1]` replaced by `d`.
fn with_descale(x: &Fp8, d: f32) -> Fp8 {
    let mut x = x.clone();
    x.descale[[0, 1]] = d;
    x
}

/// The reference solution: the lesson's functions for the warm-up, and the main task's, which
/// lives in the grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    let tiles = lesson03::TileSizes::default();
    Functions {
        attention_f16: Box::new(move |q, k, v, options| lesson06::flash(q, k, v, options, tiles)),
        attention_bf16: Box::new(move |q, k, v, options| lesson06::flash(q, k, v, options, tiles)),
        dispatch: Box::new(|q, k, v, options| {
            lesson06::policy::attention(q, k, v, options, lesson06::policy::Algorithm::Flash)
        }),
        e4m3_to_f32: Box::new(solution::e4m3_to_f32),
        f32_to_e4m3: Box::new(solution::f32_to_e4m3),
        quantize: Box::new(solution::quantize),
        attention_fp8: Box::new(solution::attention_fp8),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::PrecisionBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::PrecisionBug>(checks(lesson()), checks)
}
