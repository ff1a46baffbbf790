//! The planted bugs of exercise 10: lesson 10's version 7 with one classic mistake each in the
//! two functions the learner writes.

use crate::ex10;
use crate::forward::{ONE_KEY, RANDOM, TWO_KEYS};
use crate::wgsl_mutants::WgslBug;

/// Classic mistakes in register micro-tiles, against `lesson10::v7_f32_registers::SOURCE`.
pub const MICRO_TILE_BUGS: [WgslBug; 7] = [
    WgslBug {
        name: "keys of a thread taken as a block (kg * KEYS_PER_THREAD + j), not interleaved",
        find: "keys[j] = k_tile[(kg + KEY_GROUPS * j) * KV_STRIDE + c];",
        replace: "keys[j] = k_tile[(kg * KEYS_PER_THREAD + j) * KV_STRIDE + c];",
        caught_by: ex10::ANY_TILES,
    },
    WgslBug {
        name: "query rows of a thread taken as a block (rg * ROWS_PER_THREAD + i)",
        find: "let q_chunk = q_tile[(rg + ROW_GROUPS * i) * CHUNKS + c];",
        replace: "let q_chunk = q_tile[(rg * ROWS_PER_THREAD + i) * CHUNKS + c];",
        caught_by: ex10::ANY_TILES,
    },
    WgslBug {
        name: "the first chunk of the head dimension left out of the scores",
        find: "    for (var c = 0u; c < CHUNKS; c++) {\n        var keys",
        replace: "    for (var c = 1u; c < CHUNKS; c++) {\n        var keys",
        caught_by: ONE_KEY,
    },
    WgslBug {
        name: "each chunk's dot product replaces the score instead of adding to it",
        find: "s[i * KEYS_PER_THREAD + j] += dot(q_chunk, keys[j]);",
        replace: "s[i * KEYS_PER_THREAD + j] = dot(q_chunk, keys[j]);",
        caught_by: RANDOM,
    },
    WgslBug {
        name: "the first row of V used for two keys of a quad",
        find: "let v1 = v_tile[(key + 1u) * KV_STRIDE + chunk];",
        replace: "let v1 = v_tile[key * KV_STRIDE + chunk];",
        caught_by: TWO_KEYS,
    },
    WgslBug {
        name: "every O chunk of a thread computed from its first chunk of V",
        find: "let chunk = min(kg + KEY_GROUPS * u, CHUNKS - 1u);",
        replace: "let chunk = min(kg, CHUNKS - 1u);",
        caught_by: ex10::TAILS,
    },
    WgslBug {
        name: "weights of a thread's rows read as a block (rg * ROWS_PER_THREAD + i)",
        find: "p4[i] = p_tile[(rg + ROW_GROUPS * i) * KEY_QUADS + quad];",
        replace: "p4[i] = p_tile[(rg * ROWS_PER_THREAD + i) * KEY_QUADS + quad];",
        caught_by: ex10::ANY_TILES,
    },
];
