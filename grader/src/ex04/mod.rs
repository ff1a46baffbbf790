//! Exercise 04: causal tile classification and FlashAttention-1's loop order on the counting
//! two-level memory.

pub mod mutants;
mod solution;

use std::ops::Range;
use std::rc::Rc;

use lesson03::{TileKind, TileSizes};
use lesson04::{Run, Traffic};
use ndarray::Array4;
use proptest::prelude::*;
use reference::{AttentionError, AttentionOptions, AttentionShape, Problem, ProblemSpec, Window};

use crate::check::{Check, for_all, main_task};
use crate::forward::{Contract, forward_checks};

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const CLASSIFY: &str = "tile classification agrees with the mask, element by element";
/// Check name.
pub const BYTES_MOVED: &str = "bytes moved: the FlashAttention-1 closed form";
/// Check name.
pub const CAUSAL_TILES: &str = "causal: tiles counted, and skipped tiles never loaded";
/// Check name.
pub const TILES_DO_NOT_FIT: &str = "tiles that do not fit in fast memory are a TilesDoNotFit error";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 04 provides.
    pub trait Exercise04;
    /// How the causal mask treats the tile pair `rows x keys` (or `Full` without a mask).
    fn classify(
        shape: &AttentionShape,
        causal: bool,
        rows: Range<usize>,
        keys: Range<usize>,
    ) -> TileKind;
    /// FlashAttention-1 forward on a `TwoLevelMemory` of `fast_bytes`, with tiles `Br x Bc`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
        fast_bytes: usize,
    ) -> Result<Run, AttentionError>;
    /// The bytes FlashAttention-2 with a sliding window reads and writes (the main task).
    fn window_traffic(
        shape: &AttentionShape,
        causal: bool,
        window: Window,
        query_rows: usize,
        key_cols: usize,
    ) -> Traffic;
}

/// Check name.
pub const WINDOW_BY_HAND: &str =
    "window IO by hand: 12 x 12, window (3, 1), 3 x 3 tiles, the book's picture";
/// Check name.
pub const WINDOW_TRAFFIC: &str =
    "window IO: the bytes FlashAttention-2 moves, for random shapes, windows and tiles";

/// Fast memory large enough for any tile the checks draw.
const AMPLE: usize = 1 << 30;

/// Shapes and tiles for the IO checks: B, H, Nq, Nkv, D, Br, Bc.
fn io_sizes() -> impl Strategy<Value = (usize, usize, usize, usize, usize, usize, usize)> {
    (1..=2usize, 1..=2usize, 1..=40usize, 1..=40usize, 1..=16usize, 1..=12usize, 1..=12usize)
}

/// The graded checks of exercise 04.
pub fn checks(solution: impl Exercise04 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        CLASSIFY,
        "A tile is Skipped iff its LAST row sees none of its keys, Masked iff some row (its first \
         row sees the fewest) misses some key, Full otherwise. Visible keys of row i: \
         0..shape.visible_keys(i, true).",
        move || {
            let strategy = (1..=30usize, 1..=30usize, 1..=8usize, 1..=8usize);
            for_all(256, strategy, |(nq, nkv, br, bc)| {
                let shape = AttentionShape { batch: 1, heads: 1, q_len: nq, kv_len: nkv, head_dim: 1 };
                for r0 in (0..nq).step_by(br) {
                    for c0 in (0..nkv).step_by(bc) {
                        let (rows, keys) = (r0..(r0 + br).min(nq), c0..(c0 + bc).min(nkv));
                        let seen = rows.clone().flat_map(|i| keys.clone().map(move |j| (i, j)));
                        let visible: Vec<bool> = seen.map(|(i, j)| j < shape.visible_keys(i, true)).collect();
                        let expected = if visible.iter().all(|&v| !v) {
                            TileKind::Skipped
                        } else if visible.iter().all(|&v| v) {
                            TileKind::Full
                        } else {
                            TileKind::Masked
                        };
                        let got = x.classify(&shape, true, rows.clone(), keys.clone());
                        if got != expected {
                            return Err(format!("rows {rows:?} x keys {keys:?} of Nq={nq}, Nkv={nkv}: {got:?}, expected {expected:?}"));
                        }
                        if x.classify(&shape, false, rows.clone(), keys.clone()) != TileKind::Full {
                            return Err(format!("without a mask every tile is Full; rows {rows:?} x keys {keys:?} was not"));
                        }
                    }
                }
                Ok(())
            })
        },
    ));
    let x = s.clone();
    checks.extend(forward_checks(Contract::tiled((7, 5), move |br, bc| {
        let x = x.clone();
        Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
            x.attention(q, k, v, o, br, bc, AMPLE).map(|r| r.output)
        })
    })));
    let x = s.clone();
    checks.push(Check::new(
        BYTES_MOVED,
        "Per head: load K and V tiles once each; per (K/V tile, Q tile) pair load Q_i, O_i, m_i, l_i \
         and store O_i, m_i, l_i; at the end load m and l once more and store L. Move data only \
         through mem.load and mem.store.",
        move || {
            for_all(96, io_sizes(), |(b, h, nq, nkv, d, br, bc)| {
                let p = Problem::random(&ProblemSpec::new(b, h, nq, nkv, d), 1);
                let run = x.attention(&p.q, &p.k, &p.v, &p.options, br, bc, AMPLE).map_err(|e| e.to_string())?;
                let (tk, heads) = (nkv.div_ceil(bc), b * h);
                let read = 4 * heads * (2 * nkv * d + tk * (2 * nq * d + 2 * nq) + 2 * nq);
                let written = 4 * heads * (tk * (nq * d + 2 * nq) + nq);
                let t = run.traffic;
                if (t.bytes_read, t.bytes_written) == (read, written) {
                    Ok(())
                } else {
                    Err(format!(
                        "B={b} H={h} Nq={nq} Nkv={nkv} D={d} tiles {br}x{bc}: read {} and wrote {} bytes, expected {read} and {written}",
                        t.bytes_read, t.bytes_written
                    ))
                }
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        CAUSAL_TILES,
        "Count every (K/V tile, Q tile) pair with TileCounts::add(kind). For a Skipped pair do not \
         load Q_i, O_i, m_i or l_i at all.",
        move || {
            for (t, tile, d) in [(1, 4, 3), (3, 4, 8), (6, 5, 2)] {
                let n = t * tile;
                let p = Problem::random(&ProblemSpec::new(1, 1, n, n, d).causal(true), 2);
                let run = x
                    .attention(&p.q, &p.k, &p.v, &p.options, tile, tile, AMPLE)
                    .map_err(|e| e.to_string())?;
                let expected = lesson04::TileCounts {
                    full: t * (t - 1) / 2,
                    masked: t,
                    skipped: t * (t - 1) / 2,
                };
                if run.tiles != expected {
                    return Err(format!(
                        "{t}x{t} tiles of {tile}: counted {:?}, expected {expected:?}",
                        run.tiles
                    ));
                }
                let visited = t * (t + 1) / 2;
                let read = 4 * (2 * n * d + visited * (2 * tile * d + 2 * tile) + 2 * n);
                if run.traffic.bytes_read != read {
                    return Err(format!(
                        "{t}x{t} tiles of {tile}, D={d}: read {} bytes, expected {read}",
                        run.traffic.bytes_read
                    ));
                }
            }
            Ok(())
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        TILES_DO_NOT_FIT,
        "Reserve the working set first: mem.reserve(working_set_bytes(tiles, d))?.",
        move || {
            let z = Array4::<f32>::zeros((1, 1, 8, 4));
            let needed =
                lesson04::working_set_bytes(TileSizes::new(4, 4).map_err(|e| e.to_string())?, 4);
            match x.attention(&z, &z, &z, &AttentionOptions::new(), 4, 4, needed - 1) {
                Err(AttentionError::TilesDoNotFit { .. }) => Ok(()),
                Err(e) => Err(format!("expected TilesDoNotFit, got `{e}`")),
                Ok(_) => Err(format!(
                    "{} bytes are too few for 4x4 tiles, D = 4, but it ran",
                    needed - 1
                )),
            }
        },
    ));
    checks.extend(main_task(window_checks(s)));
    checks
}

/// The main task's checks.
fn window_checks(s: Rc<impl Exercise04 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let by_hand = Check::new(
        WINDOW_BY_HAND,
        "Count per query tile: its Q rows read once, its O rows and L written once, and K and V \
         read for every key tile that some row of the query tile sees (10 of the 16 here: the \
         M and # tiles of chapter 3's picture). 4 bytes per number.",
        move || {
            let shape = AttentionShape { batch: 1, heads: 1, q_len: 12, kv_len: 12, head_dim: 2 };
            let got = x.window_traffic(&shape, false, Window::new(Some(3), Some(1)), 3, 3);
            // Read: Q 12 x 2, then K and V of 10 tiles of 3 x 2; written: O 12 x 2 and L 12.
            let expected =
                Traffic { bytes_read: 4 * (24 + 10 * 2 * 6), bytes_written: 4 * (24 + 12) };
            if got == expected { Ok(()) } else { Err(format!("{got:?}, expected {expected:?}")) }
        },
    );
    let x = s;
    let traffic = Check::new(
        WINDOW_TRAFFIC,
        "The key tiles a query tile loads run from the one holding its first row's first visible \
         key to the one holding its last row's last visible key; tail tiles are shorter, and a \
         query tile that sees no key still reads Q and writes O and L.",
        move || {
            let side = prop_oneof![Just(None), (0..=45usize).prop_map(Some)];
            let strategy = (io_sizes(), any::<bool>(), side.clone(), side);
            for_all(256, strategy, |((b, h, nq, nkv, d, br, bc), causal, left, right)| {
                let shape =
                    AttentionShape { batch: b, heads: h, q_len: nq, kv_len: nkv, head_dim: d };
                let window = Window::new(left, right);
                let expected = measured_window_traffic(&shape, causal, window, br, bc)?;
                let got = x.window_traffic(&shape, causal, window, br, bc);
                if got == expected {
                    Ok(())
                } else {
                    Err(format!(
                        "{shape:?}, causal {causal}, {window:?}, tiles {br} x {bc}: {got:?}, expected {expected:?}"
                    ))
                }
            })
        },
    );
    vec![by_hand, traffic]
}

/// The bytes moved by FlashAttention-2 with a sliding window, run on random data on a
/// `TwoLevelMemory` that counts them (its output checked against the oracle, so the count is
/// that of a correct run).
fn measured_window_traffic(
    shape: &AttentionShape,
    causal: bool,
    window: Window,
    br: usize,
    bc: usize,
) -> Result<Traffic, String> {
    let spec =
        ProblemSpec::new(shape.batch, shape.heads, shape.q_len, shape.kv_len, shape.head_dim)
            .causal(causal);
    let p = Problem::random(&spec, 5);
    let (run, traffic) =
        solution::flash2_window_on_memory(&p.q, &p.k, &p.v, &p.options, window, br, bc)
            .map_err(|e| e.to_string())?;
    let features = reference::Features::default().window(window.left, window.right);
    let expected = reference::features::expected(&p.q, &p.k, &p.v, &p.options, &features)
        .map_err(|e| e.to_string())?;
    reference::check_output(&run, &expected, reference::Tolerance::F32)
        .map_err(|e| format!("the grader's own windowed run is wrong ({e}): please report it"))?;
    Ok(traffic)
}

/// The reference solutions: the lesson's functions for the warm-up, and the main task's, which
/// lives in the grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        classify: Box::new(lesson03::classify_tile),
        attention: Box::new(|q, k, v, options, query_rows, key_cols, fast_bytes| {
            let tiles = TileSizes::new(query_rows, key_cols)?;
            lesson04::flash1::attention(q, k, v, options, tiles, fast_bytes)
        }),
        window_traffic: Box::new(solution::window_traffic),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::Flash1Bug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::Flash1Bug>(checks(lesson()), checks)
}
