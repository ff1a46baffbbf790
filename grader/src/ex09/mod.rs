//! Exercise 09: FlashAttention forward as a WGSL kernel; the main task, the same kernel with a
//! sliding window.

pub mod mutants;
pub mod window;

use std::rc::Rc;

use ndarray::{Array2, Array4};
use proptest::prelude::*;
use reference::ProblemSpec;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Tolerance, check_agreement, oracle,
};
use testkit::checks::check_against_oracle;
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all, main_task};
use crate::forward::{Contract, LIMITS, forward_checks};

/// Random cases per GPU check: every new head dim or tile size compiles a pipeline (a fraction
/// of a second on lavapipe), so fewer than the CPU exercises' 48.
const GPU_CASES: u32 = 24;

// The names of this exercise's own checks (the planted-bug mutants name the check meant to
// catch them).
/// Check name.
pub const BARRIERS: &str = "every barrier is reached by every thread of the workgroup";
/// Check name.
pub const ANY_TILES: &str = "any tile sizes: 1, sizes that do not divide N, many threads";
/// Check name.
pub const TAILS: &str =
    "tail tiles and causal offsets: Nq, Nkv one past a tile, Nq > Nkv, Nq < Nkv";
/// Check name.
pub const TILES_DO_NOT_MATTER: &str = "the output does not depend on the tile sizes";
/// Check name.
pub const CAUSAL_SKIP: &str = "causal: tiles of keys no row of the workgroup sees are never loaded";

/// What a solution of exercise 09 provides: its WGSL kernels, which lesson 09's host code runs
/// with `query_rows` (Br) threads per workgroup and tiles of `key_cols` (Bc) keys.
pub trait Exercise09 {
    /// The kernel's WGSL source.
    fn source(&self) -> String;

    /// The windowed kernel's WGSL source (the main task).
    fn window_source(&self) -> String;

    /// FlashAttention with a sliding window and the windowed kernel on the shared GPU: the
    /// output and the tiles of keys each workgroup loaded.
    #[allow(clippy::too_many_arguments)]
    fn attention_window(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        window: reference::features::Window,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<(AttentionOutput<f32>, Array2<u32>), AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        let tiles = lesson09::TileSizes::new(query_rows, key_cols)?;
        let source = self.window_source();
        let (d, queue) = (&gpu.device, &gpu.queue);
        lesson09::window::attention_with_window_shader(
            d, queue, &source, q, k, v, options, window, tiles,
        )
    }

    /// FlashAttention with this kernel on the shared GPU.
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        let tiles = lesson09::TileSizes::new(query_rows, key_cols)?;
        let source = self.source();
        lesson09::attention_with_shader(&gpu.device, &gpu.queue, &source, q, k, v, options, tiles)
    }
}

/// Tiles that the kernel accepts for `case` on the shared GPU (Bc shrunk to fit workgroup
/// memory at the case's head dim), or why there is no GPU.
fn fitting(case: &Case, br: usize, bc: usize) -> Result<(usize, usize), String> {
    let gpu = gpu::Gpu::shared().map_err(|e| e.to_string())?;
    Ok((br, bc.min(lesson09::largest_key_tile(&gpu.device, case.spec.head_dim)).max(1)))
}

/// Tile sizes to draw: 1, small, and up to 128 rows and 64 keys.
fn tile_sizes() -> impl Strategy<Value = (usize, usize)> {
    let size = |max: usize| prop_oneof![1 => Just(1), 3 => 2..=16usize, 4 => 2..=max];
    (size(128), size(lesson09::MAX_BLOCK_KV))
}

/// The graded checks of exercise 09.
pub fn checks(solution: impl Exercise09 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let x = s.clone();
    let mut checks = vec![Check::new(
        BARRIERS,
        "A barrier under `if row_valid` (or after an early return, or in a loop whose bound \
         differs between threads) is skipped by some threads: the workgroup may hang or race. \
         Bound the tile loop by the workgroup's LAST row, the same for every thread, and keep \
         both barriers directly in its body.",
        move || gpu::uniformity::check_barriers(&x.source()),
    )];
    let x = s.clone();
    checks.push(Check::new(
        TAILS,
        "Keys past the last whole tile must still be used; with Nq > Nkv the first rows see no \
         key (O = 0, L = -inf); row i sees keys j <= i + Nkv - Nq.",
        move || {
            for (q_len, kv_len) in [(17, 9), (9, 17), (16, 8), (1, 33), (33, 1)] {
                for causal in [false, true] {
                    let case = Case {
                        spec: ProblemSpec::new(1, 2, q_len, kv_len, 5).causal(causal),
                        seed: 3,
                    };
                    let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, 16, 8);
                    check_against_oracle(&tiled, &case, Tolerance::F32)
                        .map_err(|e| format!("{case:?}, tiles Br = 16, Bc = 8: {e}"))?;
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        TILES_DO_NOT_MATTER,
        "If one tiling works and another does not, look at how m, l and acc carry over from one \
         tile of keys to the next: acc and l must be rescaled by exp(m_old - m_new).",
        move || {
            for_all(GPU_CASES, (cases(LIMITS), tile_sizes(), tile_sizes()), |(case, a, b)| {
                let (a, b) = (fitting(&case, a.0, a.1)?, fitting(&case, b.0, b.1)?);
                let p = case.problem();
                let run = |(br, bc): (usize, usize)| {
                    x.attention(&p.q, &p.k, &p.v, &p.options, br, bc).map_err(|e| e.to_string())
                };
                let (out_a, out_b) = (run(a)?, run(b)?);
                let expected =
                    oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
                check_agreement(&out_a, &out_b, &expected, Tolerance::F32)
                    .map(|_| ())
                    .map_err(|e| format!("tiles {a:?} vs {b:?}: {e}"))
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        CAUSAL_SKIP,
        "Load every tile with load_tile, and stop the tile loop at the last key the workgroup's \
         LAST row sees: visible_keys(min(q_start + BLOCK_Q, Nq) - 1). Loading every tile and \
         masking gives the right answer but does the work FlashAttention skips.",
        move || {
            let causal = cases(LIMITS).prop_map(|mut c| {
                c.spec = c.spec.causal(true);
                c
            });
            for_all(GPU_CASES, (causal, tile_sizes()), |(case, (br, bc))| {
                let (br, bc) = fitting(&case, br, bc)?;
                check_tiles_loaded(&x.source(), &case, br, bc)
            })
        },
    ));
    // The contract of every forward stage, with 40 threads (several subgroups on any GPU, and
    // not a multiple of 32) and tiles of 8 keys.
    let x = s.clone();
    checks.extend(forward_checks(Contract::tiled((40, 8), move |br, bc| {
        let x = x.clone();
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc))
    })));
    let x = s.clone();
    checks.push(Check::new(
        ANY_TILES,
        "Every thread must reach both barriers in every iteration: the loop bound must be the \
         same for the whole workgroup (use the tile's last row), and rows past Nq still load \
         their share. The last tile of keys is shorter: load min(BLOCK_KV, Nkv - kv_start).",
        move || {
            let run = |case: &Case, br, bc| {
                let (br, bc) = fitting(case, br, bc)?;
                let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc);
                check_against_oracle(&tiled, case, Tolerance::F32)
                    .map_err(|e| format!("{case:?}, tiles Br = {br}, Bc = {bc}: {e}"))
            };
            // First a problem of many tiles of keys with 40 threads: a missing barrier races
            // here on every run where threads run in groups (lavapipe runs groups of 8 one
            // after another), whatever tiles the random cases below draw.
            let many_tiles = Case { spec: ProblemSpec::new(1, 2, 70, 90, 16), seed: 5 };
            run(&many_tiles, 40, 8)?;
            for_all(GPU_CASES, (cases(LIMITS), tile_sizes()), |(case, (br, bc))| run(&case, br, bc))
        },
    ));
    checks.extend(main_task(window::checks(s)));
    checks
}

/// Each workgroup of `source` loads exactly the tiles of keys its last row sees.
fn check_tiles_loaded(source: &str, case: &Case, br: usize, bc: usize) -> Result<(), String> {
    let gpu = gpu::Gpu::shared().map_err(|e| e.to_string())?;
    let p = case.problem();
    let tiles = lesson09::TileSizes::new(br, bc).map_err(|e| e.to_string())?;
    let (d, q) = (&gpu.device, &gpu.queue);
    let (_, loaded) =
        lesson09::tiles_loaded_with_shader(d, q, source, &p.q, &p.k, &p.v, &p.options, tiles)
            .map_err(|e| e.to_string())?;
    let shape = case.spec.shape();
    for ((slice, query_tile), &count) in loaded.indexed_iter() {
        let last_row = ((query_tile + 1) * br).min(shape.q_len) - 1;
        let needed = shape.visible_keys(last_row, case.spec.causal).div_ceil(bc);
        if count as usize != needed {
            return Err(format!(
                "tiles Br = {br}, Bc = {bc}: the workgroup of slice {slice}, query tile \
                 {query_tile} loaded {count} tiles of keys; its last row (row {last_row}) sees \
                 {} keys, {needed} tiles",
                shape.visible_keys(last_row, case.spec.causal)
            ));
        }
    }
    Ok(())
}

/// FlashAttention with the WGSL sources `flash` and `window`: the reference solutions
/// ([`lesson`]), or a mutant with a changed copy of one of them.
pub struct Shader {
    /// The kernel of the warm-up.
    pub flash: String,
    /// The windowed kernel of the main task.
    pub window: String,
}

impl Exercise09 for Shader {
    fn source(&self) -> String {
        self.flash.clone()
    }

    fn window_source(&self) -> String {
        self.window.clone()
    }
}

/// The reference solutions: the lesson's kernel for the warm-up, and for the main task the
/// lesson's kernel with a window ([`window::solution`], which lives in the grader: the book
/// explains the idea without printing it).
pub fn lesson() -> Shader {
    Shader { flash: lesson09::SHADER.to_string(), window: window::solution() }
}

/// The self-check: the lesson's shaders pass every check, and each planted bug, in the
/// warm-up's shader or in the main task's, fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    let lesson = [lesson09::SHADER.to_string(), window::solution()];
    let bugs = (&mutants::FLASH_BUGS[..], &window::WINDOW_BUGS[..]);
    crate::wgsl_mutants::self_check(lesson, bugs, |[flash, window]| {
        checks(Shader { flash, window })
    })
}
