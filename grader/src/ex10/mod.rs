//! Exercise 10: register micro-tiles, the arithmetic of lesson 10's version 7, in WGSL; the
//! main task, a softcap and ALiBi in that base-2 kernel.

pub mod features;
pub mod mutants;

use std::rc::Rc;

use lesson10::{F32Tiles, TileShape, V7, Version};
use ndarray::Array4;
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Problem, ProblemSpec, Tolerance,
};
use testkit::checks::check_against_oracle;
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all, main_task};
use crate::forward::{Contract, LIMITS, forward_checks};

/// Random cases per GPU check: each new head dim or tile shape compiles a pipeline.
const GPU_CASES: u32 = 24;

// The names of this exercise's own checks (the planted-bug mutants name the check meant to
// catch them).
/// Check name.
pub const BARRIERS: &str = "every barrier is reached by every thread of the workgroup";
/// Check name.
pub const ANY_TILES: &str = "any tile shape: 4 or 8 rows and 1, 2 or 4 keys per thread";
/// Check name.
pub const TAILS: &str = "head dims 64 and 128 with tail tiles and causal offsets";
/// Check name.
pub const REPEATABLE: &str = "two runs give the same bits";

/// What a solution of exercise 10 provides: its WGSL shader, which lesson 10's host code for
/// version 7 runs (with wgpu's run-time bounds checks on).
pub trait Exercise10 {
    /// The shader's WGSL source, before the host writes its constants in and unrolls it.
    fn source(&self) -> String;

    /// The main task's shader (a softcap and ALiBi), before the host writes its constants in.
    fn features_source(&self) -> String;

    /// FlashAttention with a softcap and ALiBi, the main task's shader and `tiles` on the
    /// shared GPU.
    #[allow(clippy::too_many_arguments)]
    fn attention_features(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &reference::features::Features,
        tiles: F32Tiles,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        let (device, queue, source) = (&gpu.device, &gpu.queue, self.features_source());
        lesson10::features::attention_with_features_shader(
            device, queue, &source, q, k, v, options, features, tiles,
        )
    }

    /// FlashAttention with this shader and `tiles` on the shared GPU.
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        tiles: F32Tiles,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        let source = self.source();
        lesson10::attention_with_shader(&gpu.device, &gpu.queue, &source, q, k, v, options, tiles)
    }
}

/// The tiles closest to `wanted` that the shared GPU runs at `head_dim`: at least as many
/// row groups as one subgroup holds groups of 8 (4 on NVIDIA), then fewer rows (the query
/// rows take most of the workgroup memory), and fewer keys only as the last resort, so that
/// the interleaving of keys stays covered.
fn fitting(mut tiles: F32Tiles, head_dim: usize) -> Result<F32Tiles, String> {
    let gpu = gpu::Gpu::shared().map_err(|e| e.to_string())?;
    let available = gpu.device.limits().max_compute_workgroup_storage_size as usize;
    let groups_per_subgroup = (gpu.info.subgroup_max_size as usize / 8).max(1);
    tiles.row_groups = tiles.row_groups.max(groups_per_subgroup);
    while tiles.workgroup_bytes(head_dim) > available {
        if tiles.rows_per_thread > 4 {
            tiles.rows_per_thread = 4;
        } else if tiles.row_groups > groups_per_subgroup {
            tiles.row_groups /= 2;
        } else if tiles.keys_per_thread > 1 {
            tiles.keys_per_thread /= 2;
        } else {
            return Err(format!("no tile shape fits this GPU at head dim {head_dim}"));
        }
    }
    tiles.check_subgroups(&gpu.device).map_err(|e| e.to_string())?;
    Ok(tiles)
}

/// A tile shape to draw: 1 to 16 row groups, 4 or 8 rows and 1, 2 or 4 keys per thread.
fn tile_shapes() -> impl Strategy<Value = F32Tiles> {
    let row_groups = prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(16)];
    let rows = prop_oneof![Just(4usize), Just(8)];
    let keys = prop_oneof![Just(1usize), Just(2), Just(4)];
    (row_groups, rows, keys, any::<bool>()).prop_map(|(row_groups, rows, keys, prefetch)| {
        F32Tiles { row_groups, rows_per_thread: rows, keys_per_thread: keys, prefetch }
    })
}

/// Tiles that hold an `Nq x Nkv` example whole (where the device allows), for the hand
/// examples of the shared contract.
fn whole(q_len: usize, kv_len: usize) -> F32Tiles {
    let row_groups = q_len.div_ceil(4).next_power_of_two().min(16);
    let keys_per_thread = kv_len.div_ceil(8).next_power_of_two().min(4);
    F32Tiles { row_groups, rows_per_thread: 4, keys_per_thread, prefetch: true }
}

/// The graded checks of exercise 10.
pub fn checks(solution: impl Exercise10 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let x = s.clone();
    let mut checks = vec![Check::new(
        BARRIERS,
        "The given code's barriers are in uniform control flow; keep any barrier you add out of \
         conditions that differ between threads (better: add none, score_block and add_values \
         need none).",
        move || {
            let tiles =
                F32Tiles { row_groups: 4, rows_per_thread: 4, keys_per_thread: 4, prefetch: true };
            let source = tiles.source_from(&x.source(), 64).map_err(|e| e.to_string())?;
            gpu::uniformity::check_barriers(&source)
        },
    )];
    // The contract of every forward stage: random cases with 4 row groups of 4 rows and 2 keys
    // per thread, hand examples with tiles that hold them whole (both fitted to the device).
    let x = s.clone();
    let mut contract = Contract::tiled((16, 16), move |br, bc| {
        let x = x.clone();
        let wanted = whole(br, bc);
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
            // The shader first: an untouched stub reaches todo!() here, so that even the checks
            // of bad input (which the host code rejects) grade nothing before it is written.
            let _ = x.source();
            let head_dim = reference::check_inputs(q, k, v, o)?.shape.head_dim;
            let tiles = fitting(wanted, head_dim)
                .map_err(|e| AttentionError::from(gpu::GpuError::KernelMisuse(e)))?;
            x.attention(q, k, v, o, tiles)
        })
    });
    contract.setup =
        "tiles of 4 row groups of 4 rows, 2 keys per thread, as the device allows".to_string();
    checks.extend(forward_checks(contract));
    let x = s.clone();
    checks.push(Check::new(
        TAILS,
        "At D = 64 each thread owns two chunks of O (kg and kg + 8), at D = 128 four: \
         acc[i * OUT_CHUNKS + u] is chunk kg + KEY_GROUPS * u. Keys past Nkv have weight 0 and \
         zero values, so every key of the tile can be added.",
        move || {
            for head_dim in [64, 128] {
                for (q_len, kv_len) in [(65, 33), (33, 65), (1, 97), (97, 1)] {
                    for causal in [false, true] {
                        let spec = ProblemSpec::new(1, 2, q_len, kv_len, head_dim).causal(causal);
                        let case = Case { spec, seed: 4 };
                        let wanted = F32Tiles {
                            row_groups: 8,
                            rows_per_thread: 4,
                            keys_per_thread: 2,
                            prefetch: true,
                        };
                        let tiles = fitting(wanted, head_dim)?;
                        let run = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, tiles);
                        check_against_oracle(&run, &case, Tolerance::F32)
                            .map_err(|e| format!("{case:?}, {tiles:?}: {e}"))?;
                    }
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        ANY_TILES,
        "Rows and keys are interleaved across threads: row rg + ROW_GROUPS * i, key \
         kg + KEY_GROUPS * j, not rg * ROWS_PER_THREAD + i or kg * KEYS_PER_THREAD + j (the \
         given softmax and p_tile use the interleaved layout). With one row group (for rows) or \
         one key per thread (for keys) both orders agree, so small tiles hide the mistake.",
        move || {
            for_all(GPU_CASES, (cases(LIMITS), tile_shapes()), |(case, wanted)| {
                let tiles = fitting(wanted, case.spec.head_dim)?;
                let run = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, tiles);
                check_against_oracle(&run, &case, Tolerance::F32)
                    .map_err(|e| format!("{tiles:?}: {e}"))
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        REPEATABLE,
        "Results that change from run to run are a race: a thread reading workgroup memory \
         another thread writes without a barrier between. Read only q_tile, k_tile, p_tile and \
         v_tile, and write none of them.",
        move || {
            let p = Problem::random(&ProblemSpec::new(2, 2, 150, 170, 64).causal(true), 17);
            let tiles = fitting(V7::tried(64)[0], 64)?;
            let run =
                || x.attention(&p.q, &p.k, &p.v, &p.options, tiles).map_err(|e| e.to_string());
            let first = run()?;
            for _ in 0..2 {
                if run()? != first {
                    return Err(format!("{tiles:?}: two runs of the same problem differ"));
                }
            }
            Ok(())
        },
    ));
    checks.extend(main_task(features::checks(s)));
    checks
}

/// FlashAttention with the WGSL sources `micro_tiles` and `features`: the reference solutions
/// ([`lesson`]), or a mutant with a changed copy of one of them.
pub struct Shader {
    /// The shader of the warm-up.
    pub micro_tiles: String,
    /// The shader with a softcap and ALiBi of the main task.
    pub features: String,
}

impl Exercise10 for Shader {
    fn source(&self) -> String {
        self.micro_tiles.clone()
    }

    fn features_source(&self) -> String {
        self.features.clone()
    }
}

/// The reference solutions: the lesson's version 7 for the warm-up, and for the main task
/// version 7 with a softcap and ALiBi ([`features::solution`], which lives in the grader: the
/// book explains the idea without printing it).
pub fn lesson() -> Shader {
    Shader {
        micro_tiles: lesson10::v7_f32_registers::SOURCE.to_string(),
        features: features::solution(),
    }
}

/// The self-check: the lesson's shaders pass every check, and each planted bug, in the
/// warm-up's shader or in the main task's, fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    let lesson = [lesson10::v7_f32_registers::SOURCE.to_string(), features::solution()];
    let bugs = (&mutants::MICRO_TILE_BUGS[..], &features::FEATURE_BUGS[..]);
    crate::wgsl_mutants::self_check(lesson, bugs, |[micro_tiles, features]| {
        checks(Shader { micro_tiles, features })
    })
}

#[cfg(test)]
mod tests {
    /// The exercise's stub: lesson 10's version 7 with its header and the bodies of the two
    /// functions the learner writes replaced.
    const STUB: &str = include_str!("../../../exercises/10_fast_gpu/src/micro_tiles.wgsl");

    /// `source` from its first constant on, with the bodies of `score_block` and `add_values`
    /// cut out.
    fn without_the_task(source: &str) -> String {
        let mut text = source[source.find("const HEAD_DIM").expect("constants")..].to_string();
        for name in ["fn score_block(", "fn add_values("] {
            let start = text.find(name).expect("the function");
            let open = start + text[start..].find("->").expect("a result") + 2;
            let open = open + text[open..].find('{').expect("a body");
            let mut depth = 0;
            let close = (open..text.len())
                .find(|&i| {
                    match text.as_bytes()[i] {
                        b'{' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .expect("a closing brace");
            text.replace_range(open..=close, "{}");
        }
        text
    }

    /// `text` without the lines that mark the book's anchors (the lesson has some, the stub
    /// none).
    fn without_anchor_lines(text: &str) -> String {
        let marker = ["// ANCHOR", ":"].concat();
        let end_marker = ["// ANCHOR_END", ":"].concat();
        text.lines()
            .filter(|line| !line.starts_with(&marker) && !line.starts_with(&end_marker))
            .map(|line| format!("{line}\n"))
            .collect()
    }

    #[test]
    fn the_stub_is_the_lesson_without_the_two_functions_bodies() {
        let lesson = without_the_task(&without_anchor_lines(lesson10::v7_f32_registers::SOURCE));
        assert_eq!(without_the_task(&without_anchor_lines(STUB)), lesson);
        assert!(STUB.starts_with("// NOT STARTED"));
    }
}
