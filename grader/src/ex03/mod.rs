//! Exercise 03: tiled FlashAttention-2 forward with the logsumexp (the warm-up), then a sliding
//! window that skips the tiles outside it on both sides (the main task).

pub mod mutants;
mod solution;

use std::rc::Rc;

use lesson03::{TileSizes, tiles_to_compute};
use ndarray::Array4;
use proptest::prelude::*;
use reference::features::visible_band;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Features, Problem, ProblemSpec, Tolerance,
    Window, check_agreement, check_output, features, oracle,
};
use testkit::checks::check_against_oracle;
use testkit::strategies::{Case, cases, tile_size};

use crate::check::{Check, for_all, main_task};
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
/// Check name.
pub const WINDOW_RANDOM: &str = "sliding window on random problems and tiles, causal or not";
/// Check name.
pub const WINDOW_EDGES: &str =
    "sliding window edges: window 0, window >= N, Nq != Nkv, rows that see nothing";
/// Check name.
pub const WINDOW_SKIP: &str =
    "sliding window: tiles on either side of the window are never computed";

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

    /// The tiled forward with a sliding window (the main task).
    #[allow(clippy::too_many_arguments)]
    fn attention_window(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        window: Window,
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
            // A valid call first: an untouched stub reaches todo!() there, so that this check
            // grades nothing before the forward is written (the stub validates its tiles).
            crate::check::unless_not_started(|| {
                x.attention(&q, &q, &q, &AttentionOptions::new(), 2, 2)
            });
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
    let x = s.clone();
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
    checks.extend(main_task(window_checks(s)));
    checks
}

/// The main task's checks.
fn window_checks(s: Rc<impl Exercise03 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let random = Check::new(
        WINDOW_RANDOM,
        "Row i sees key j iff i + Nkv - Nq - left <= j <= i + Nkv - Nq + right (None: no bound \
         on that side), and with the causal mask also j <= i + Nkv - Nq. Mask each computed tile \
         row by row. A row whose window starts in a later tile sees only -inf in this one: keep \
         e^(-inf - -inf) = NaN out of its state.",
        move || {
            let strategy = (cases(LIMITS), window(), tile_size(LIMITS.seq), tile_size(LIMITS.seq));
            for_all(CASES, strategy, |(case, window, br, bc)| {
                check_window(&*x, &case, window, br, bc)
            })
        },
    );
    let x = s.clone();
    let edges = Check::new(
        WINDOW_EDGES,
        "The window is centred on the diagonal key i + Nkv - Nq, not on key i: with Nq != Nkv \
         they differ. Window (0, 0) is the diagonal alone; a row whose window holds no key \
         (before key 0 or after key Nkv - 1) gives O = 0 and L = -inf.",
        move || {
            let strategy = (cases(LIMITS), edge_window(), tile_size(16), tile_size(16));
            let rectangular = strategy.prop_map(|(mut case, window, br, bc)| {
                if case.spec.q_len == case.spec.kv_len {
                    case.spec.kv_len += 3;
                }
                (case, window, br, bc)
            });
            for_all(CASES, rectangular, |(case, window, br, bc)| {
                let window = window.window(case.spec.q_len.max(case.spec.kv_len));
                check_window(&*x, &case, window, br, bc)
            })
        },
    );
    let x = s;
    let skip = Check::new(
        WINDOW_SKIP,
        "For a tile of query rows, the keys any row sees run from the first row's window start \
         to the last row's window end: compute the key tiles that overlap that range, through \
         tile_scores, and no others (left of it as well as right of it).",
        move || {
            let strategy = (cases(LIMITS), window(), tile_size(32), tile_size(32));
            for_all(CASES, strategy, |(case, window, br, bc)| {
                check_window_tiles(&*x, &case, window, br, bc)
            })
        },
    );
    vec![random, edges, skip]
}

/// A window side: unbounded, 0, a few keys, or up to the longest sequence and beyond.
fn window_side() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![2 => Just(None), 1 => Just(Some(0)), 3 => (1..=16usize).prop_map(Some), 2 => (0..=2 * LIMITS.seq).prop_map(Some)]
}

fn window() -> impl Strategy<Value = Window> {
    (window_side(), window_side()).prop_map(|(left, right)| Window::new(left, right))
}

/// The windows at the edges of the definition.
#[derive(Clone, Copy, Debug)]
enum EdgeWindow {
    /// `(0, 0)`: the diagonal key alone.
    DiagonalOnly,
    /// `(0, None)`: the diagonal and every key after it.
    NothingBefore,
    /// `(None, 0)`: the diagonal and every key before it (the causal mask's set).
    NothingAfter,
    /// `(n, n)` for the longer sequence `n`: every key.
    WiderThanTheProblem,
    /// `(1, 1)`.
    OneEachSide,
}

impl EdgeWindow {
    /// The window for a problem whose longer sequence is `n`.
    fn window(self, n: usize) -> Window {
        match self {
            Self::DiagonalOnly => Window::new(Some(0), Some(0)),
            Self::NothingBefore => Window::new(Some(0), None),
            Self::NothingAfter => Window::new(None, Some(0)),
            Self::WiderThanTheProblem => Window::new(Some(n), Some(n)),
            Self::OneEachSide => Window::new(Some(1), Some(1)),
        }
    }
}

fn edge_window() -> impl Strategy<Value = EdgeWindow> {
    use EdgeWindow::*;
    let edges = [DiagonalOnly, NothingBefore, NothingAfter, WiderThanTheProblem, OneEachSide];
    proptest::sample::select(edges.to_vec())
}

fn check_window(
    x: &dyn Exercise03,
    case: &Case,
    window: Window,
    br: usize,
    bc: usize,
) -> Result<(), String> {
    let p = case.problem();
    let features = Features::default().window(window.left, window.right);
    let expected =
        features::expected(&p.q, &p.k, &p.v, &p.options, &features).map_err(|e| e.to_string())?;
    let actual = x
        .attention_window(&p.q, &p.k, &p.v, &p.options, window, br, bc)
        .map_err(|e| format!("{window:?}, tiles {br} x {bc}: returned an error: {e}"))?;
    check_output(&actual, &expected, Tolerance::F32)
        .map(|_| ())
        .map_err(|e| format!("{window:?}, tiles Br = {br}, Bc = {bc}: {e}"))
}

/// The (query tile, key tile) pairs of one head in which some row sees some key.
fn window_tiles(
    shape: &reference::AttentionShape,
    causal: bool,
    window: Window,
    br: usize,
    bc: usize,
) -> usize {
    let (br, bc) = (br.min(shape.q_len), bc.min(shape.kv_len));
    let mut count = 0;
    for r0 in (0..shape.q_len).step_by(br) {
        let bands: Vec<_> = (r0..(r0 + br).min(shape.q_len))
            .map(|i| visible_band(shape, i, causal, window))
            .collect();
        for c0 in (0..shape.kv_len).step_by(bc) {
            let c1 = (c0 + bc).min(shape.kv_len);
            if bands.iter().any(|b| b.start < c1 && c0 < b.end) {
                count += 1;
            }
        }
    }
    count
}

fn check_window_tiles(
    x: &dyn Exercise03,
    case: &Case,
    window: Window,
    br: usize,
    bc: usize,
) -> Result<(), String> {
    let p = case.problem();
    let before = x.tiles_computed();
    x.attention_window(&p.q, &p.k, &p.v, &p.options, window, br, bc).map_err(|e| e.to_string())?;
    let computed = x.tiles_computed() - before;
    let shape = case.spec.shape();
    let heads = shape.batch * shape.heads;
    let needed = window_tiles(&shape, case.spec.causal, window, br, bc) * heads;
    let all = shape.q_len.div_ceil(br.min(shape.q_len))
        * shape.kv_len.div_ceil(bc.min(shape.kv_len))
        * heads;
    if computed == needed {
        Ok(())
    } else if computed == 0 && needed > 0 {
        // Either every tile was skipped, or the scores do not go through tile_scores: the same
        // call without a window tells which.
        let before = x.tiles_computed();
        let full = x.attention_window(&p.q, &p.k, &p.v, &p.options, Window::FULL, br, bc);
        if let Err(e) = full {
            return Err(format!(
                "{window:?}, tiles Br = {br}, Bc = {bc}: computed no tile, and with \
                 Window::FULL it returned an error: {e}"
            ));
        }
        if x.tiles_computed() > before {
            Err(format!(
                "{window:?}, tiles Br = {br}, Bc = {bc}: skipped every key tile, though {needed} \
                 of the {all} (query tile, key tile) pairs have a key that some row sees (with \
                 Window::FULL it computes tiles, so the bounds of the tile loop are off)"
            ))
        } else {
            Err("computed no tile through tile_scores, with a window or without: compute every \
                 tile's scores with it (on the thread that called attention_window), so the \
                 grader can see which tiles you compute"
                .to_string())
        }
    } else {
        Err(format!(
            "{window:?}, tiles Br = {br}, Bc = {bc}: computed {computed} tiles of scores; \
             {needed} of the {all} (query tile, key tile) pairs have a key that some row sees"
        ))
    }
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

/// The reference solutions, whose tiles `lesson03::tile_scores` counts as the exercise's given
/// code does: the lesson's forward for the warm-up, and the main task's, which lives in the
/// grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        attention: Box::new(|q, k, v, options, query_rows, key_cols| {
            lesson03::attention(q, k, v, options, TileSizes::new(query_rows, key_cols)?)
        }),
        attention_window: Box::new(|q, k, v, options, window, query_rows, key_cols| {
            let tiles = TileSizes::new(query_rows, key_cols)?;
            solution::attention_window(q, k, v, options, window, tiles)
        }),
        tiles_computed: Box::new(lesson03::tiles_computed),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::TiledBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::TiledBug>(checks(lesson()), checks)
}
