//! Exercise 03: tiled FlashAttention-2 forward with the logsumexp.

use std::rc::Rc;

use ndarray::Array4;
use reference::checks::check_against_oracle;
use reference::strategies::{cases, tile_size};
use reference::{AttentionError, AttentionOptions, AttentionOutput, Tolerance, check_agreement, oracle};

use crate::check::{Check, for_all};
use crate::forward::{CASES, LIMITS, forward_checks};

/// What a solution of exercise 03 provides: the tiled forward with tiles of `query_rows` (Br)
/// by `key_cols` (Bc), which returns `AttentionError::InvalidTileSize` for a zero tile size.
pub trait Exercise03 {
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

/// The graded checks of exercise 03.
pub fn checks(solution: impl Exercise03 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    // The shared contract checks, with tiles of 7 x 5 (which divide few sequence lengths).
    let x = s.clone();
    let mut checks =
        forward_checks(Rc::new(move |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, 7, 5)));

    let x = s.clone();
    checks.push(Check::new(
        "any tile sizes: 1, sizes that do not divide N, sizes larger than N",
        "The last tile of each loop is shorter: clip with min(start + size, N). A tile larger \
         than N is one short tile.",
        move || {
            let strategy = (cases(LIMITS), tile_size(LIMITS.seq), tile_size(LIMITS.seq));
            for_all(CASES, strategy, |(case, br, bc)| {
                let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc);
                check_against_oracle(&tiled, &case, Tolerance::F32)
                    .map_err(|e| format!("tiles {br} x {bc}: {e}"))
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        "the output does not depend on the tile sizes",
        "If one tiling works and another does not, look at how m, l and acc carry over from one \
         key tile to the next: every earlier tile must be rescaled by e^(m_old - m_new).",
        move || {
            let strategy =
                (cases(LIMITS), tile_size(64), tile_size(64), tile_size(64), tile_size(64));
            for_all(CASES, strategy, |(case, br1, bc1, br2, bc2)| {
                let p = case.problem();
                let run = |br, bc| {
                    x.attention(&p.q, &p.k, &p.v, &p.options, br, bc).map_err(|e| e.to_string())
                };
                let (a, b) = (run(br1, bc1)?, run(br2, bc2)?);
                let expected =
                    oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
                check_agreement(&a, &b, &expected, Tolerance::F32)
                    .map(|_| ())
                    .map_err(|e| format!("tiles {br1}x{bc1} vs {br2}x{bc2}: {e}"))
            })
        },
    ));
    let x = s;
    checks.push(Check::new(
        "a tile size of 0 is an InvalidTileSize error",
        "Validate the tile sizes (TileSizes::new) and return the error instead of looping forever \
         or panicking.",
        move || {
            let q = Array4::<f32>::zeros((1, 1, 4, 2));
            for (br, bc) in [(0, 4), (4, 0)] {
                match x.attention(&q, &q, &q, &AttentionOptions::new(), br, bc) {
                    Err(AttentionError::InvalidTileSize { value: 0, .. }) => {}
                    Err(e) => {
                        return Err(format!(
                            "tiles {br} x {bc}: expected InvalidTileSize, got `{e}`"
                        ));
                    }
                    Ok(_) => {
                        return Err(format!(
                            "tiles {br} x {bc}: expected InvalidTileSize, got a result"
                        ));
                    }
                }
            }
            Ok(())
        },
    ));
    checks
}

/// The lesson's implementation: the reference solution.
pub struct Lesson;

impl Exercise03 for Lesson {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        lesson03::attention(q, k, v, options, lesson03::TileSizes::new(query_rows, key_cols)?)
    }
}
