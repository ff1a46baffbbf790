//! The planted bugs of exercise 09: lesson 09's shader with one classic mistake each.

use crate::ex09;
use crate::forward::{CAUSAL_SQUARE, ONE_KEY, TWO_KEYS};
use crate::wgsl_mutants::WgslBug;

/// Classic mistakes in WGSL FlashAttention (exercise 09), against `lesson09::SHADER`.
///
/// The two missing barriers are races: what they break depends on how the device schedules a
/// workgroup's threads. Lavapipe, where continuous integration runs, runs a workgroup's
/// threads in batches of 8 (Mesa's llvmpipe switches between them as coroutines at barriers),
/// so with more than 8 threads and several tiles of keys the race shows on every run: the check
/// meant to catch them starts with such a problem (40 threads, 12 tiles of 8 keys), since its
/// random cases alone missed it once (seed 1812768156410548020, 2026-11-25); on an
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
