//! Planted bugs in the WGSL kernels of exercises 08 and 09. Each mutant is the lesson's shader
//! with one classic mistake put in by a text replacement, so the bug is exactly the diff: what
//! is replaced, and by what.

use crate::ex09;
use crate::forward::{CAUSAL_SQUARE, INDEPENDENT, LARGE_LOGITS, ONE_KEY, TWO_KEYS};

/// One planted bug: every occurrence of `find` in the lesson's shader becomes `replace`.
#[derive(Clone, Copy, Debug)]
pub struct WgslBug {
    /// What the bug is.
    pub name: &'static str,
    /// Text of the lesson's shader to change.
    pub find: &'static str,
    /// What it becomes.
    pub replace: &'static str,
    /// The check meant to catch it (whose hint must fit it).
    pub caught_by: &'static str,
}

impl WgslBug {
    /// The shader `source` with this bug planted.
    ///
    /// # Panics
    /// If `find` is not in `source`: the lesson's shader changed and the mutant must follow.
    pub fn plant(&self, source: &str) -> String {
        assert!(
            source.contains(self.find),
            "mutant {:?} no longer applies to the shader",
            self.name
        );
        source.replace(self.find, self.replace)
    }
}

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

/// Classic mistakes in WGSL FlashAttention (exercise 09), against `lesson09::SHADER`.
///
/// The two missing barriers are races: what they break depends on how the device schedules a
/// workgroup's threads. Lavapipe, where continuous integration runs, runs a workgroup's
/// threads in batches of 8 (Mesa's llvmpipe switches between them as coroutines at barriers),
/// so with more than 8 threads the race has shown in every self-check and stress run; on an
/// NVIDIA H100 the self-check caught both too (2026-11-22), but another GPU could hide them
/// on some runs. The barrier moved under a condition is caught by
/// the static check, whatever the device.
pub const FLASH_BUGS: [WgslBug; 10] = [
    WgslBug {
        name: "no barrier after loading a tile",
        find: "load_tile(slice, kv_start, thread);\n        workgroupBarrier();",
        replace: "load_tile(slice, kv_start, thread);",
        caught_by: ex09::ANY_TILES,
    },
    WgslBug {
        name: "no barrier before loading the next tile",
        find: "        workgroupBarrier();                   // everyone is done with the tile before reloading\n",
        replace: "",
        caught_by: ex09::ANY_TILES,
    },
    WgslBug {
        name: "tail tile of keys ignored",
        find: "kv_start < kv_end; kv_start += BLOCK_KV",
        replace: "kv_start + BLOCK_KV <= kv_end; kv_start += BLOCK_KV",
        caught_by: ex09::TAILS,
    },
    WgslBug {
        name: "causal mask shifted by one key",
        find: "let end = i32(row) + 1 + i32(params.kv_len)",
        replace: "let end = i32(row) + 2 + i32(params.kv_len)",
        caught_by: CAUSAL_SQUARE,
    },
    WgslBug {
        name: "accumulator not rescaled by exp(m - m')",
        find: "acc[c] *= correction;",
        replace: "",
        caught_by: ex09::TILES_DO_NOT_MATTER,
    },
    WgslBug {
        name: "L stored as ln(l) instead of m + ln(l)",
        find: "m + log(l), l > 0.0",
        replace: "log(l), l > 0.0",
        caught_by: ONE_KEY,
    },
    WgslBug {
        name: "scores not multiplied by the scale",
        find: "s[j] = params.scale * (",
        replace: "s[j] = (",
        caught_by: TWO_KEYS,
    },
    WgslBug {
        name: "causal tiles skipped from the tile's first row",
        find: "let kv_end = visible_keys(last_row);",
        replace: "let kv_end = visible_keys(q_start);",
        caught_by: ex09::CAUSAL_SKIP,
    },
    WgslBug {
        name: "no causal tile skipping (every tile loaded, the mask does the rest)",
        find: "let kv_end = visible_keys(last_row);",
        replace: "let kv_end = params.kv_len;",
        caught_by: ex09::CAUSAL_SKIP,
    },
    WgslBug {
        name: "second barrier moved under `if keys > 0u`, which differs between threads",
        find: "            m = tile_max;\n        }\n        workgroupBarrier();                   // everyone is done with the tile before reloading\n",
        replace: "            m = tile_max;\n            workgroupBarrier();\n        }\n",
        caught_by: ex09::BARRIERS,
    },
];
