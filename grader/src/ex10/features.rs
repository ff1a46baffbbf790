//! Exercise 10's main task: two of FlashAttention-2's features, a logit softcap and ALiBi
//! slopes, in the fast f32 kernel, whose softmax works in base 2 (`exp2`, with `log2 e`
//! folded into the scores): each feature must be applied in natural units and only then
//! converted.
//!
//! The reference solution is lesson 10's version 7 with three changes, written below as text
//! replacements so that the difference is exactly what the learner adds (the book explains the
//! idea and never shows them): the two bindings and a `logit` function; the head's slope; the
//! scores taken through `logit`. The planted bugs are text replacements in that solution.

use std::rc::Rc;

use lesson10::F32Tiles;
use proptest::prelude::*;
use reference::features::Features;
use reference::{ProblemSpec, Tolerance, check_output};
use testkit::strategies::{Case, cases};

use super::{Exercise10, GPU_CASES, fitting, tile_shapes};
use crate::check::{Check, for_all};
use crate::forward::LIMITS;
use crate::wgsl_mutants::WgslBug;

/// Check name.
pub const SOFTCAP: &str = "softcap: random problems, caps and tile shapes, large logits included";
/// Check name.
pub const TANH_FROM_EXPONENTIALS: &str =
    "softcap past exp's range, with tanh computed from exponentials as some drivers do";
/// Check name.
pub const ALIBI: &str = "ALiBi: a slope per head, Nq != Nkv, causal or not";
/// Check name.
pub const BOTH: &str = "softcap and ALiBi together, head dims 64 and 128, tail tiles";

/// The absolute error of a GPU's `tanh`, at most: Vulkan requires it to be as accurate as the
/// exponentials it can be computed from, `3 + 2|x|` units in the last place each; with the
/// argument clamped to 15 (or `2x` to 30, if the driver works from `e^(2x)`), a ratio of two
/// of them is within about 126 units of `2^-24` of `tanh`, which is at most 1. Rounded up to
/// 128 units, `2^-17`. (Mesa's lavapipe and conforming drivers do better.)
const TANH_ERROR: f64 = 1.0 / 131_072.0;

/// The tolerance with a softcap `cap`: f32's, and the driver's `tanh` error times `cap` in
/// every logit (`c tanh(s / c)`).
fn with_softcap(cap: f32) -> Tolerance {
    Tolerance::F32.with_logit_error(f64::from(cap) * TANH_ERROR)
}

/// The declarations the kernel with features adds after its bindings.
const FEATURE_DECLARATIONS: &str = "\
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

// FlashAttention-2's softcap and ALiBi: the score of row i and key j is
// c tanh(scale q_i.k_j / c) - slope_h |i + Nkv - Nq - j| (softcap 0: none; slopes 0: none).
struct Features {
    softcap: f32,
    heads: u32,
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(6) var<uniform> features: Features;
@group(0) @binding(7) var<storage, read> alibi_slopes: array<f32>;

// The score of query row `row` and key `key` in log2 units, as the kernel's exp2 needs it,
// from the scaled dot product `s` in natural units: capped, biased, then times log2(e).
fn logit(s: f32, slope: f32, row: u32, key: u32) -> f32 {
    let distance = abs(i32(row) + i32(params.kv_len) - i32(params.q_len) - i32(key));
    let bias = -slope * f32(distance);
    var x = s;
    if features.softcap > 0.0 {
        // tanh(15) is 1 in f32; a driver may compute tanh from exponentials, which overflow
        // for large arguments, so the argument is clamped first.
        x = features.softcap * tanh(clamp(x / features.softcap, -15.0, 15.0));
    }
    return (x + bias) * LOG2_E;
}
";

/// The changes that turn version 7 into the kernel with features: `(find, replace)`.
const SOLUTION: [(&str, &str); 3] = [
    ("@group(0) @binding(5) var<storage, read_write> lse: array<f32>;\n", FEATURE_DECLARATIONS),
    (
        "    let scale = params.scale * LOG2_E;      // scores in log2 units: exp(x) = exp2(x log2 e)\n",
        "    let slope = alibi_slopes[slice % features.heads];  // this head's ALiBi slope\n",
    ),
    (
        "                var x = s[i * KEYS_PER_THREAD + j] * scale;\n",
        "                let key = kv_start + kg + KEY_GROUPS * j;\n                \
         var x = logit(s[i * KEYS_PER_THREAD + j] * params.scale, slope, q_start + rg + ROW_GROUPS * i, key);\n",
    ),
];

/// The reference solution: lesson 10's version 7 with a softcap and ALiBi.
///
/// # Panics
/// If a change no longer applies: version 7's shader changed and the solution must follow.
pub fn solution() -> String {
    SOLUTION.iter().fold(
        lesson10::v7_f32_registers::SOURCE.to_string(),
        |source, (find, replace)| {
            assert!(
                source.contains(find),
                "the solution with features no longer applies: {find:?}"
            );
            source.replace(find, replace)
        },
    )
}

/// Classic mistakes with a softcap and ALiBi in a base-2 kernel, against [`solution`].
pub const FEATURE_BUGS: [WgslBug; 8] = [
    WgslBug {
        name: "softcap applied to the score in log2 units, c tanh(s log2(e) / c)",
        find: "x = features.softcap * tanh(clamp(x / features.softcap, -15.0, 15.0));",
        replace: "x = features.softcap * tanh(clamp(x * LOG2_E / features.softcap, -15.0, 15.0)) / LOG2_E;",
        caught_by: SOFTCAP,
    },
    WgslBug {
        name: "softcap applied to the dot product before the scale",
        find: "var x = logit(s[i * KEYS_PER_THREAD + j] * params.scale,",
        replace: "var x = params.scale * logit(s[i * KEYS_PER_THREAD + j],",
        caught_by: SOFTCAP,
    },
    WgslBug {
        name: "ALiBi bias added in natural units after the conversion to log2",
        find: "return (x + bias) * LOG2_E;",
        replace: "return x * LOG2_E + bias;",
        caught_by: ALIBI,
    },
    WgslBug {
        name: "ALiBi distance from key `row` (top-left) instead of row + Nkv - Nq",
        find: "abs(i32(row) + i32(params.kv_len) - i32(params.q_len) - i32(key))",
        replace: "abs(i32(row) - i32(key))",
        caught_by: ALIBI,
    },
    WgslBug {
        name: "ALiBi slope of slice / H (the batch) instead of slice % H (the head)",
        find: "alibi_slopes[slice % features.heads]",
        replace: "alibi_slopes[slice / features.heads]",
        caught_by: ALIBI,
    },
    WgslBug {
        name: "ALiBi bias added instead of subtracted",
        find: "let bias = -slope * f32(distance);",
        replace: "let bias = slope * f32(distance);",
        caught_by: ALIBI,
    },
    WgslBug {
        name: "tanh's argument not clamped (exponentials overflow on some drivers)",
        find: "tanh(clamp(x / features.softcap, -15.0, 15.0))",
        replace: "tanh(x / features.softcap)",
        caught_by: TANH_FROM_EXPONENTIALS,
    },
    WgslBug {
        name: "ALiBi bias added before the softcap, which then caps it too",
        find: "    var x = s;\n    if features.softcap > 0.0 {\n        \
               // tanh(15) is 1 in f32; a driver may compute tanh from exponentials, which overflow\n        \
               // for large arguments, so the argument is clamped first.\n        \
               x = features.softcap * tanh(clamp(x / features.softcap, -15.0, 15.0));\n    }\n    \
               return (x + bias) * LOG2_E;",
        replace: "    var x = s + bias;\n    if features.softcap > 0.0 {\n        \
                  x = features.softcap * tanh(clamp(x / features.softcap, -15.0, 15.0));\n    }\n    \
                  return x * LOG2_E;",
        caught_by: BOTH,
    },
];

/// ALiBi slopes for `heads` heads: the paper's for 8 heads, `2^-(h + 1)` (1/2, 1/4, ...),
/// times `factor`. Fixed slopes, not drawn ones, so that a failing case shrinks to a small
/// problem, never to a slope so small that a bug hides in the rounding.
fn slopes(heads: usize, factor: f32) -> Vec<f32> {
    (0..heads).map(|h| factor * 2f32.powi(-(h as i32 % 8) - 1)).collect()
}

/// The main task's checks, for the kernel of `x`.
pub fn checks<X: Exercise10 + ?Sized + 'static>(x: Rc<X>) -> Vec<Check> {
    let mut checks = Vec::new();
    let s = x.clone();
    checks.push(Check::new(
        SOFTCAP,
        "The cap works on the scaled score in natural units, c tanh(scale q.k / c), as the \
         oracle and FlashAttention-2 define it; only then does the kernel's log2(e) apply. \
         Clamp tanh's argument (tanh(15) is already 1 in f32).",
        move || {
            let cap = prop_oneof![Just(1.0f32), Just(5.0), Just(30.0)];
            for_all(GPU_CASES, (cases(LIMITS), tile_shapes(), cap), |(case, wanted, cap)| {
                let features = Features { softcap: Some(cap), ..Features::default() };
                check_features(&*s, &case, wanted, &features, with_softcap(cap))
            })
        },
    ));
    let s = x.clone();
    checks.push(Check::new(
        TANH_FROM_EXPONENTIALS,
        "Some drivers compute tanh as (e^(2x) - 1) / (e^(2x) + 1), which is inf / inf = NaN once \
         e^(2x) overflows (x > 44): clamp tanh's argument to [-15, 15] first (tanh(15) is 1 in \
         f32), as the README's main-task hint 2 says.",
        move || {
            let source = with_tanh_from_exponentials(&s.features_source());
            let cap = prop_oneof![Just(1.0f32), Just(5.0)];
            for_all(GPU_CASES, (cases(LIMITS), tile_shapes(), cap), |(case, wanted, cap)| {
                check_large_logits(&source, &case, wanted, cap)
            })
        },
    ));
    let s = x.clone();
    checks.push(Check::new(
        ALIBI,
        "The bias is -slope_h |i + Nkv - Nq - j| in natural units (row i's diagonal is key \
         i + Nkv - Nq, bottom-right as the causal mask), h = slice % H, and it is converted to \
         log2 units with the rest of the score.",
        move || {
            let factor = prop_oneof![Just(1.0f32), Just(0.25), Just(2.0)];
            for_all(GPU_CASES, (cases(LIMITS), tile_shapes(), factor), |(case, wanted, factor)| {
                let features = Features::default().alibi(slopes(case.spec.heads, factor));
                check_features(&*s, &case, wanted, &features, Tolerance::F32)
            })
        },
    ));
    let s = x;
    checks.push(Check::new(
        BOTH,
        "With both features the score is capped first and biased after, as the oracle does \
         (FlashAttention-2's order), both in natural units, and only then multiplied by \
         log2(e).",
        move || {
            for head_dim in [64, 128] {
                for (q_len, kv_len, causal) in [(65, 33, true), (33, 65, false), (1, 97, true)] {
                    let spec = ProblemSpec::new(2, 3, q_len, kv_len, head_dim).causal(causal);
                    let case = Case { spec, seed: 9 };
                    let features = Features { softcap: Some(20.0), ..Features::default() }
                        .alibi(slopes(3, 1.0));
                    let wanted = F32Tiles {
                        row_groups: 8,
                        rows_per_thread: 4,
                        keys_per_thread: 2,
                        prefetch: true,
                    };
                    check_features(&*s, &case, wanted, &features, with_softcap(20.0))?;
                }
            }
            Ok(())
        },
    ));
    checks
}

/// The kernel's output with `features` on `case`, tiles `wanted` as the device allows, against
/// the f64 oracle with the same features.
fn check_features<X: Exercise10 + ?Sized>(
    x: &X,
    case: &Case,
    wanted: F32Tiles,
    features: &Features,
    tolerance: Tolerance,
) -> Result<(), String> {
    let tiles = fitting(wanted, case.spec.head_dim)?;
    let p = case.problem();
    let what = format!(
        "{case:?}, softcap {:?}, slopes {:?}, {tiles:?}",
        features.softcap, features.alibi_slopes
    );
    let out = x
        .attention_features(&p.q, &p.k, &p.v, &p.options, features, tiles)
        .map_err(|e| format!("{what}: returned an error: {e}"))?;
    let expected = reference::features::expected(&p.q, &p.k, &p.v, &p.options, features)
        .map_err(|e| e.to_string())?;
    check_output(&out, &expected, tolerance).map(|_| ()).map_err(|e| format!("{what}: {e}"))
}

/// `source` with every call of WGSL's `tanh` computed from exponentials, as some drivers
/// compute it: `(e^(2x) - 1) / (e^(2x) + 1)`, NaN once `e^(2x)` overflows f32 (x > 44).
/// Lavapipe's own `tanh` is stable, so this is how a check run there sees what such a driver
/// would do to an argument left unclamped.
pub fn with_tanh_from_exponentials(source: &str) -> String {
    // `tanh(` as a call of its own, not the end of another name (`atanh(`, `my_tanh(`).
    let mut renamed = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("tanh(") {
        let part_of_a_name =
            rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        renamed.push_str(&rest[..at]);
        renamed.push_str(if part_of_a_name { "tanh(" } else { "tanh_from_exponentials(" });
        rest = &rest[at + "tanh(".len()..];
    }
    renamed.push_str(rest);
    format!(
        "{renamed}\n// tanh as some drivers compute it (the grader's stand-in for them).\n\
         fn tanh_from_exponentials(x: f32) -> f32 {{\n    let e = exp(2.0 * x);\n    \
         return (e - 1.0) / (e + 1.0);\n}}\n"
    )
}

/// The features kernel `source` with a softcap `cap` on `case` with its queries scaled by 100
/// (logits of hundreds, `s / cap` far past 44), against the oracle.
fn check_large_logits(source: &str, case: &Case, wanted: F32Tiles, cap: f32) -> Result<(), String> {
    let tiles = fitting(wanted, case.spec.head_dim)?;
    let p = case.problem();
    let q = &p.q * 100.0;
    let features = Features { softcap: Some(cap), ..Features::default() };
    let what = format!("{case:?} with Q x 100, softcap {cap}, {tiles:?}");
    let gpu = gpu::Gpu::shared().map_err(|e| e.to_string())?;
    let out = lesson10::features::attention_with_features_shader(
        &gpu.device,
        &gpu.queue,
        source,
        &q,
        &p.k,
        &p.v,
        &p.options,
        &features,
        tiles,
    )
    .map_err(|e| {
        // The other checks compile the shader as written; this one's stand-in for tanh takes
        // one f32, so a call on a vector fails here alone: say so, not that the shader is wrong.
        let e = e.to_string();
        if e.contains("the shader") && (e.contains("not valid") || e.contains("not parse")) {
            format!(
                "{what}: with tanh replaced by tanh_from_exponentials(x: f32), the kernel no \
                 longer compiles: call tanh on one f32 at a time. The compiler said: {}",
                e.replace("the shader is not valid", "").replace("the shader does not parse", "")
            )
        } else {
            format!("{what}: returned an error: {e}")
        }
    })?;
    let expected = reference::features::expected(&q, &p.k, &p.v, &p.options, &features)
        .map_err(|e| e.to_string())?;
    check_output(&out, &expected, with_softcap(cap)).map(|_| ()).map_err(|e| format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_solution_and_every_planted_bug_are_valid_wgsl() {
        let tiles =
            F32Tiles { row_groups: 4, rows_per_thread: 4, keys_per_thread: 2, prefetch: true };
        let solution = solution();
        let source = tiles.source_from(&solution, 64).unwrap();
        let used = gpu::kernel::bindings_used(&source, "flash_forward").unwrap();
        assert!(used.contains(&6) && used.contains(&7), "{used:?}");
        for bug in FEATURE_BUGS {
            let planted = tiles.source_from(&bug.plant(&solution), 64).unwrap();
            gpu::kernel::bindings_used(&planted, "flash_forward").unwrap();
        }
    }

    #[test]
    fn only_calls_of_tanh_itself_are_replaced() {
        let rewritten = with_tanh_from_exponentials("let a = tanh(x) + atanh(y) + my_tanh(z);");
        assert!(rewritten.starts_with(
            "let a = tanh_from_exponentials(x) + atanh(y) + my_tanh(z);\n// tanh as some"
        ));
    }

    #[test]
    fn slopes_halve_from_head_to_head() {
        assert_eq!(slopes(3, 2.0), [1.0, 0.5, 0.25]);
    }
}
