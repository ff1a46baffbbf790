//! Exercise 03: tiled FlashAttention-2 forward with the logsumexp.

pub mod mutants;

use std::rc::Rc;

use lesson03::{TileSizes, tiles_to_compute};
use ndarray::Array4;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Problem, ProblemSpec, Tolerance,
    check_agreement, oracle,
};
use testkit::checks::check_against_oracle;
use testkit::strategies::{Case, cases, tile_size};

use crate::check::{Check, for_all};
use crate::forward::{CASES, Contract, LIMITS, forward_checks};
use crate::memory::{HEAD_DIM, TILE, check_working_memory, working_bytes};

// The names of this exercise's own checks (the planted-bug mutants name the check meant to
// catch them).
/// Check name.
pub const ANY_TILES: &str = "any tile sizes: 1, sizes that do not divide N, sizes larger than N";
/// Check name.
pub const TILES_DO_NOT_MATTER: &str = "the output does not depend on the tile sizes";
/// Check name.
pub const ZERO_TILE: &str = "a tile size of 0 is an InvalidTileSize error";
/// Check name.
pub const CAUSAL_SKIP: &str = "causal: key tiles no row of the query tile sees are never computed";
/// Check name.
pub const MEMORY: &str = "working memory does not grow with N (one Br x Bc tile of scores)";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 03 provides: the tiled forward with tiles of `query_rows` (Br)
    /// by `key_cols` (Bc), which returns `AttentionError::InvalidTileSize` for a zero tile size.
    pub trait Exercise03;
    /// Tiled attention following the course contract.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError>;

    /// How many tiles of scores (`S = scale Q_t K_tᵀ`, one per (query tile, key tile) pair)
    /// the code has computed so far, in all: the checks read it before and after a call. The
    /// exercise's given `tile_scores` counts them.
    fn tiles_computed() -> usize;
}

/// The graded checks of exercise 03.
pub fn checks(solution: impl Exercise03 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    // The shared contract checks, with tiles of 7 x 5 (which divide few sequence lengths).
    let x = s.clone();
    let mut checks = forward_checks(Contract::tiled((7, 5), move |br, bc| {
        let x = x.clone();
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc))
    }));

    let x = s.clone();
    checks.push(Check::new(
        ANY_TILES,
        "The last tile of each loop is shorter: clip with min(start + size, N). A tile larger \
         than N is one short tile.",
        move || {
            let strategy = (cases(LIMITS), tile_size(LIMITS.seq), tile_size(LIMITS.seq));
            for_all(CASES, strategy, |(case, br, bc)| {
                let tiled = |q: &_, k: &_, v: &_, o: &_| x.attention(q, k, v, o, br, bc);
                check_against_oracle(&tiled, &case, Tolerance::F32)
                    .map_err(|e| format!("tiles Br = {br}, Bc = {bc}: {e}"))
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        TILES_DO_NOT_MATTER,
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
                    .map_err(|e| format!("tiles {br1} x {bc1} vs {br2} x {bc2}: {e}"))
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        ZERO_TILE,
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
    let x = s.clone();
    checks.push(Check::new(
        CAUSAL_SKIP,
        "Compute every tile's scores with the given tile_scores, once per tile. Key tiles that \
         start at or after shape.visible_keys(last row of the query tile, true) are seen by no \
         row: skip them (and every later one) without computing them.",
        move || {
            let strategy = (cases(LIMITS), tile_size(64), tile_size(64));
            for_all(CASES, strategy, |(case, br, bc)| check_tiles_computed(&*x, &case, br, bc))
        },
    ));
    let x = s;
    checks.push(Check::new(
        MEMORY,
        "Allocate one Br x Bc tile of scores (and Br rows of m, l and acc) per query tile, never \
         the whole of S or a Br x Nkv row of it: that memory is what FlashAttention saves.",
        move || {
            let setup = format!("tiles Br = Bc = {TILE}, B = H = 1, D = {HEAD_DIM}");
            check_working_memory(&setup, |n| {
                let p = Problem::random(&ProblemSpec::new(1, 1, n, n, HEAD_DIM), 1);
                let run = || {
                    x.attention(&p.q, &p.k, &p.v, &p.options, TILE, TILE).map_err(|e| e.to_string())
                };
                working_bytes(run, AttentionOutput::bytes)
            })
        },
    ));
    checks
}

/// The code computes exactly the tiles that have a visible key: all of them without the mask.
fn check_tiles_computed(
    x: &dyn Exercise03,
    case: &Case,
    br: usize,
    bc: usize,
) -> Result<(), String> {
    let p = case.problem();
    let before = x.tiles_computed();
    x.attention(&p.q, &p.k, &p.v, &p.options, br, bc).map_err(|e| e.to_string())?;
    let computed = x.tiles_computed() - before;
    let tiles = TileSizes::new(br, bc).map_err(|e| e.to_string())?;
    let shape = case.spec.shape();
    let needed = tiles_to_compute(&shape, case.spec.causal, tiles) * shape.batch * shape.heads;
    let (nq, nkv) = (case.spec.q_len, case.spec.kv_len);
    let all = nq.div_ceil(br) * nkv.div_ceil(bc) * case.spec.batch * case.spec.heads;
    if computed == needed {
        Ok(())
    } else if computed == 0 {
        Err("computed no tile through tile_scores: compute every tile's scores with it (on the \
             thread that called attention), so the grader can see which tiles you compute"
            .to_string())
    } else {
        Err(format!(
            "tiles Br = {br}, Bc = {bc}: computed {computed} tiles of scores; {needed} of the \
             {all} (query tile, key tile) pairs have a key that some row sees"
        ))
    }
}

/// The lesson's implementation: the reference solution, whose tiles `lesson03::tile_scores`
/// counts, as the exercise's given code does.
pub fn lesson() -> Functions {
    Functions {
        attention: Box::new(|q, k, v, options, query_rows, key_cols| {
            lesson03::attention(q, k, v, options, TileSizes::new(query_rows, key_cols)?)
        }),
        tiles_computed: Box::new(lesson03::tiles_computed),
    }
}
