//! Exercise 09: FlashAttention forward as a WGSL kernel.

use std::rc::Rc;

use ndarray::Array4;
use proptest::prelude::*;
use reference::ProblemSpec;
use reference::checks::check_against_oracle;
use reference::strategies::{Case, cases};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Tolerance, check_agreement, oracle,
};

use crate::check::{Check, for_all};
use crate::forward::{LIMITS, forward_checks_within};

/// Random cases per GPU check: every new head dim or tile size compiles a pipeline (a fraction
/// of a second on lavapipe), so fewer than the CPU exercises' 48.
const GPU_CASES: u32 = 24;

/// What a solution of exercise 09 provides: FlashAttention computed by its WGSL kernel with
/// `query_rows` (Br) threads per workgroup and tiles of `key_cols` (Bc) keys.
pub trait Exercise09 {
    /// Tiled attention following the course contract.
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
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
        "any tile sizes: 1, sizes that do not divide N, many threads",
        "Every thread must reach both barriers in every iteration: the loop bound must be the \
         same for the whole workgroup (use the tile's last row), and rows past Nq still load \
         their share. The last tile of keys is shorter: load min(BLOCK_KV, Nkv - kv_start).",
        move || {
            for_all(GPU_CASES, (cases(LIMITS), tile_sizes()), |(case, (br, bc))| {
                let (br, bc) = fitting(&case, br, bc)?;
                let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc);
                check_against_oracle(&tiled, &case, Tolerance::F32)
                    .map_err(|e| format!("tiles {br} x {bc}: {e}"))
            })
        },
    )];
    let x = s.clone();
    checks.push(Check::new(
        "tail tiles and causal offsets: Nq, Nkv one past a tile, Nq > Nkv, Nq < Nkv",
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
                        .map_err(|e| format!("{case:?}, tiles 16 x 8: {e}"))?;
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        "the output does not depend on the tile sizes",
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
    // The contract of every forward stage, with 40 threads (several subgroups on any GPU, and
    // not a multiple of 32) and tiles of 8 keys.
    let x = s;
    checks.extend(forward_checks_within(
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, 40, 8)),
        Tolerance::F32,
    ));
    checks
}

/// FlashAttention with the WGSL source `shader` in place of lesson 09's: the lesson itself (the
/// reference solution) with [`lesson09::SHADER`], a mutant with a changed copy.
pub struct Shader(pub String);

impl Exercise09 for Shader {
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
        lesson09::attention_with_shader(&gpu.device, &gpu.queue, &self.0, q, k, v, options, tiles)
    }
}

/// The lesson's kernel: the reference solution.
pub fn lesson() -> Shader {
    Shader(lesson09::SHADER.to_string())
}
