//! Exercise 08's main task: naive attention in WGSL with dropout on the weights, the mask drawn
//! from Philox-4x32-10 (a counter-based random generator) with only the 32-bit integers WGSL
//! has.
//!
//! The reference solution is lesson 08's kernels with two changes, written below as text
//! replacements so that the difference is exactly what the learner adds (the book explains the
//! idea and never shows them): the dropout uniform with the generator (a 32 x 32 -> 64-bit
//! product from 16-bit halves, Philox's ten rounds, the keep factor of a weight); and the
//! softmax writing each weight times its keep factor, after `L` is taken. The planted bugs are
//! text replacements in that solution.

use ndarray::{Array4, s};
use proptest::prelude::*;
use reference::features::{Dropout, Features};
use reference::{Problem, ProblemSpec, Tolerance, check_output};
use testkit::strategies::{Case, cases};

use super::Exercise08;
use crate::check::{Check, for_all};
use crate::forward::LIMITS;
use crate::wgsl_mutants::WgslBug;

/// Random cases per GPU check (as exercise 09's).
const GPU_CASES: u32 = 24;

/// Check name.
pub const DROPOUT_MASK: &str =
    "dropout mask: each weight kept or dropped exactly as Philox-4x32-10 of (j, i, h, b) says";
/// Check name.
pub const DROPOUT_RANDOM: &str =
    "dropout: random problems, probabilities and seeds, causal or not, against the f64 oracle";
/// Check name.
pub const DROPOUT_EDGES: &str = "dropout: p = 0, p = 0.999, rows that see no key, L before dropout";

/// The declarations the dropout kernels add before `scores` (and the comment line they go
/// before).
const DROPOUT_DECLARATIONS: &str = "\
// Dropout on the weights (FlashAttention-2's dropout_p): weight (b, h, i, j) is kept iff the
// first word of Philox-4x32-10 with the counter (j, i, h, b) and the seed as its key is at
// least threshold = floor(p 2^32); a kept weight is multiplied by keep_scale = 1 / (1 - p).
struct Dropout {
    threshold: u32,
    seed_lo: u32,
    seed_hi: u32,
    heads: u32,
    keep_scale: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(7) var<uniform> dropout: Dropout;

// The 64-bit product of two u32 as (high word, low word). WGSL has no 64-bit integers: multiply
// 16-bit halves, whose products fit in 32 bits, and add them up with their carries.
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let lo_lo = (a & 0xFFFFu) * (b & 0xFFFFu);
    let hi_lo = (a >> 16u) * (b & 0xFFFFu);
    let lo_hi = (a & 0xFFFFu) * (b >> 16u);
    let hi_hi = (a >> 16u) * (b >> 16u);
    // Bits 16 to 31 of the product, with what they carry into bit 32: at most 3 * 0xFFFF.
    let middle = (lo_lo >> 16u) + (hi_lo & 0xFFFFu) + (lo_hi & 0xFFFFu);
    let high = hi_hi + (hi_lo >> 16u) + (lo_hi >> 16u) + (middle >> 16u);
    return vec2<u32>(high, (middle << 16u) | (lo_lo & 0xFFFFu));
}

// Philox-4x32-10: ten rounds, each two wide products of the counter's words, the key bumped
// by the Weyl constants between rounds.
fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if round > 0u {
            k += vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let p0 = mul_wide(0xD2511F53u, c.x);
        let p1 = mul_wide(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
    }
    return c;
}

// What weight (slice = b H + h, i, j) is multiplied by: 0 if dropped, 1 / (1 - p) if kept.
fn keep_factor(slice: u32, i: u32, j: u32) -> f32 {
    let b = slice / dropout.heads;
    let h = slice % dropout.heads;
    let word = philox(vec4<u32>(j, i, h, b), vec2<u32>(dropout.seed_lo, dropout.seed_hi)).x;
    return select(0.0, dropout.keep_scale, word >= dropout.threshold);
}

// S[i, j] = scale * q_i . k_j, for every visible key (masked entries are never read).
";

/// The changes that turn lesson 08's kernels into the dropout ones: `(find, replace)`.
const SOLUTION: [(&str, &str); 2] = [
    (
        "// S[i, j] = scale * q_i . k_j, for every visible key (masked entries are never read).\n",
        DROPOUT_DECLARATIONS,
    ),
    (
        "s[row + j] = select(0.0, exp(s[row + j] - m) / l, j < keys);  // masked: P = 0",
        "// L is taken before dropout; the weights written are the dropped and rescaled ones.\n        \
         s[row + j] = select(0.0, exp(s[row + j] - m) / l * keep_factor(slice, i, j), j < keys);",
    ),
];

/// The reference solution: lesson 08's kernels with dropout.
///
/// # Panics
/// If a change no longer applies: lesson 08's shader changed and the solution must follow.
pub fn solution() -> String {
    SOLUTION.iter().fold(lesson08::SHADER.to_string(), |source, (find, replace)| {
        assert!(source.contains(find), "the dropout solution no longer applies: {find:?}");
        source.replace(find, replace)
    })
}

/// Classic mistakes in dropout on a GPU, against [`solution`].
pub const DROPOUT_BUGS: [WgslBug; 8] = [
    WgslBug {
        name: "dropout: the middle partial products' carry into the high word lost",
        find: "let high = hi_hi + (hi_lo >> 16u) + (lo_hi >> 16u) + (middle >> 16u);",
        replace: "let high = hi_hi + (hi_lo >> 16u) + (lo_hi >> 16u);",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: Philox's key not bumped between rounds",
        find: "k += vec2<u32>(0x9E3779B9u, 0xBB67AE85u);",
        replace: "",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: nine rounds instead of ten",
        find: "round < 10u;",
        replace: "round < 9u;",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: the counter (i, j, h, b) instead of (j, i, h, b)",
        find: "philox(vec4<u32>(j, i, h, b)",
        replace: "philox(vec4<u32>(i, j, h, b)",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: the seed's high word left out of the key",
        find: "vec2<u32>(dropout.seed_lo, dropout.seed_hi)",
        replace: "vec2<u32>(dropout.seed_lo, 0u)",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: batch and head taken the wrong way round from the slice",
        find: "let b = slice / dropout.heads;\n    let h = slice % dropout.heads;",
        replace: "let h = slice / dropout.heads;\n    let b = slice % dropout.heads;",
        caught_by: DROPOUT_MASK,
    },
    WgslBug {
        name: "dropout: kept weights not multiplied by 1 / (1 - p)",
        find: "return select(0.0, dropout.keep_scale, word >= dropout.threshold);",
        replace: "return select(0.0, 1.0, word >= dropout.threshold);",
        caught_by: DROPOUT_RANDOM,
    },
    WgslBug {
        name: "dropout: the row sum taken over the kept weights (L and P after dropout)",
        find: "        l += exp(s[row + j] - m);\n",
        replace: "        l += exp(s[row + j] - m) * keep_factor(slice, i, j);\n",
        caught_by: DROPOUT_EDGES,
    },
];

/// The main task's checks, for the kernels of `x`.
pub fn checks<X: Exercise08 + ?Sized + 'static>(x: std::rc::Rc<X>) -> Vec<Check> {
    let mut checks = Vec::new();
    let s = x.clone();
    checks.push(Check::new(
        DROPOUT_MASK,
        "Check your wide product (the carry of the middle terms into the high word), that the \
         key grows by (0x9E3779B9, 0xBB67AE85) before each round but the first, ten rounds, the \
         counter (j, i, h, b) with b = slice / H and h = slice % H, and the key (seed_lo, \
         seed_hi). Random123's first test vector: counter and key all zero give 0x6627e8d5 in \
         the first word.",
        move || check_mask(&*s),
    ));
    let s = x.clone();
    checks.push(Check::new(
        DROPOUT_RANDOM,
        "O = (P o Z / (1 - p)) V: a kept weight is multiplied by dropout.keep_scale, a dropped \
         one is 0, masked keys stay 0.",
        move || {
            let p = prop_oneof![Just(0.0f32), Just(0.2), Just(0.5), Just(0.9)];
            for_all(GPU_CASES, (cases(LIMITS), p, any::<u64>()), |(case, p, seed)| {
                check_dropout(&*s, &case, Dropout { p, seed })
            })
        },
    ));
    let s = x;
    checks.push(Check::new(
        DROPOUT_EDGES,
        "L is the logsumexp of the scores before dropout (the backward pass needs it), and the \
         weights are normalised by the sum over every visible key, dropped or not: drop after \
         the softmax. A row that sees no key: O = 0, L = -inf.",
        move || {
            let edges = [
                ((1, 2, 9, 9), true, 0.0),
                ((2, 1, 17, 9), true, 0.3),
                ((1, 2, 12, 30), false, 0.999),
                ((1, 1, 1, 40), false, 0.5),
            ];
            for ((b, h, q_len, kv_len), causal, p) in edges {
                let case = Case {
                    spec: ProblemSpec::new(b, h, q_len, kv_len, 8).causal(causal),
                    seed: 13,
                };
                check_dropout(&*s, &case, Dropout { p, seed: 0xFEED_0000_0000_0001 })?;
            }
            Ok(())
        },
    ));
    checks
}

/// The kernels' output with `dropout` on `case` against the f64 oracle with the same dropout.
fn check_dropout<X: Exercise08 + ?Sized>(
    x: &X,
    case: &Case,
    dropout: Dropout,
) -> Result<(), String> {
    let p = case.problem();
    let what = format!("{case:?}, p = {}, seed = {:#x}", dropout.p, dropout.seed);
    let out = x
        .attention_dropout(&p.q, &p.k, &p.v, &p.options, dropout)
        .map_err(|e| format!("{what}: returned an error: {e}"))?;
    let features = Features::default().dropout(dropout.p, dropout.seed);
    let expected = reference::features::expected(&p.q, &p.k, &p.v, &p.options, &features)
        .map_err(|e| e.to_string())?;
    check_output(&out, &expected, Tolerance::F32).map(|_| ()).map_err(|e| format!("{what}: {e}"))
}

/// Reads the mask off the output: with `Q = 0` every visible weight is `1/Nkv`, and with
/// `V_j = e_j` (D >= Nkv) element `O[b, h, i, j]` is weight `(b, h, i, j)` after dropout, so it
/// is positive exactly where the weight is kept.
fn check_mask<X: Exercise08 + ?Sized>(x: &X) -> Result<(), String> {
    let (batch, heads, q_len, kv_len, head_dim) = (2, 3, 5, 6, 8);
    let q = Array4::zeros((batch, heads, q_len, head_dim));
    let k = Problem::random(&ProblemSpec::new(batch, heads, 1, kv_len, head_dim), 1).k;
    let v = Array4::from_shape_fn(
        (batch, heads, kv_len, head_dim),
        |(_, _, j, d)| {
            if j == d { 1.0 } else { 0.0 }
        },
    );
    let options = reference::AttentionOptions::new();
    for seed in [0, 1, 0xDEAD_BEEF_0000_0001, u64::MAX] {
        let dropout = Dropout { p: 0.5, seed };
        let out = x
            .attention_dropout(&q, &k, &v, &options, dropout)
            .map_err(|e| format!("seed {seed:#x}: returned an error: {e}"))?;
        for ((b, h, i, j), &o) in out.o.slice(s![.., .., .., ..kv_len]).indexed_iter() {
            let expected = dropout.keeps(b, h, i, j);
            if (o > 0.0) != expected {
                let what = if expected { "kept" } else { "dropped" };
                return Err(format!(
                    "p = 0.5, seed {seed:#x}: weight (b {b}, h {h}, i {i}, j {j}) must be {what}, \
                     got O[{b}, {h}, {i}, {j}] = {o} (Q = 0, so every weight is 1/{kv_len} before \
                     dropout; V_j = e_j, so O[.., i, j] is weight (i, j) after it)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_solution_and_every_planted_bug_are_valid_wgsl() {
        let solution = solution();
        for entry in ["scores", "softmax", "weighted_sum"] {
            gpu::kernel::bindings_used(&solution, entry).unwrap();
        }
        let softmax = gpu::kernel::bindings_used(&solution, "softmax").unwrap();
        assert!(softmax.contains(&lesson08::dropout::DROPOUT_BINDING), "{softmax:?}");
        for bug in DROPOUT_BUGS {
            gpu::kernel::bindings_used(&bug.plant(&solution), "softmax").unwrap();
        }
    }
}
