//! The planted bugs of exercise 08: lesson 08's shader with one classic mistake each.

use crate::forward::{CAUSAL_SQUARE, INDEPENDENT, LARGE_LOGITS, ONE_KEY, TWO_KEYS};
use crate::wgsl_mutants::WgslBug;

/// Classic mistakes in naive WGSL attention (exercise 08), against `lesson08::SHADER`.
pub const NAIVE_BUGS: [WgslBug; 6] = [
    WgslBug {
        name: "scores not multiplied by the scale",
        find: "= params.scale * dot;",
        replace: "= dot;",
        caught_by: TWO_KEYS,
    },
    WgslBug {
        name: "causal mask shifted by one key",
        find: "let end = i32(row) + 1 + i32(params.kv_len)",
        replace: "let end = i32(row) + 2 + i32(params.kv_len)",
        caught_by: CAUSAL_SQUARE,
    },
    WgslBug {
        name: "row maximum not subtracted before exp",
        find: "exp(s[row + j] - m)",
        replace: "exp(s[row + j])",
        caught_by: LARGE_LOGITS,
    },
    WgslBug {
        name: "L stored as ln(l) instead of m + ln(l)",
        find: "m + log(l), keys > 0u",
        replace: "log(l), keys > 0u",
        caught_by: ONE_KEY,
    },
    WgslBug {
        name: "last visible key left out of O = PV",
        find: "j < visible_keys(i); j++",
        replace: "j + 1u < visible_keys(i); j++",
        caught_by: ONE_KEY,
    },
    WgslBug {
        name: "Q read as [B, N, H, D]",
        find: "let q_row = (slice * params.q_len + i) * d_len;",
        replace: "let q_row = (i * params.slices + slice) * d_len;",
        caught_by: INDEPENDENT,
    },
];
