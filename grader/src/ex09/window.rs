//! Exercise 09's main task: FlashAttention-2 in WGSL with a sliding window, which loads only the
//! tiles of keys some row of the workgroup sees, on both sides of the window.
//!
//! The reference solution is lesson 09's kernel with four changes, written below as text
//! replacements so that the difference is exactly what the learner adds (the book explains the
//! idea and never shows them): the window uniform and a `visible_band` function; the tile loop
//! from the tile holding the workgroup's first row's first visible key to its last row's last
//! one; and each row's keys within a tile from its band's start as well as to its end. The
//! planted bugs are text replacements in that solution.

use ndarray::Array2;
use proptest::prelude::*;
use reference::features::{Features, Window, visible_band};
use reference::{AttentionShape, Problem, ProblemSpec, Tolerance, check_output};
use testkit::strategies::{Case, cases};

use super::{Exercise09, GPU_CASES, fitting, tile_sizes};
use crate::check::{Check, for_all};
use crate::forward::LIMITS;
use crate::wgsl_mutants::WgslBug;

/// Check name.
pub const WINDOW_BARRIERS: &str = "window: every barrier is reached by every thread";
/// Check name.
pub const WINDOW_EDGES: &str =
    "window: diagonal only, one side, wider than N, Nq != Nkv, rows that see nothing";
/// Check name.
pub const WINDOW_RANDOM: &str = "window: random problems, windows and tiles, causal or not";
/// Check name.
pub const WINDOW_SKIP: &str =
    "window: a workgroup loads only the tiles of keys its rows see, on both sides";

/// The declarations the windowed kernel adds before `load_tile` (and the comment line they go
/// before).
const WINDOW_DECLARATIONS: &str = "\
// The sliding window (FlashAttention-2's window_size): row i sees keys
// i + Nkv - Nq - left ..= i + Nkv - Nq + right. An unbounded side arrives as a window that
// bounds nothing (left = Nkv, right = Nq).
struct Window {
    left: u32,
    right: u32,
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(7) var<uniform> window: Window;

// The keys row `row` sees, [band.x, band.y): the window around the row's diagonal key
// row + Nkv - Nq, cut by the causal mask and by 0..Nkv; (0, 0) when it sees none.
fn visible_band(row: u32) -> vec2<u32> {
    let diagonal = i32(row) + i32(params.kv_len) - i32(params.q_len);
    var last = min(i32(params.kv_len) - 1, diagonal + i32(window.right));
    if params.causal == 1u {
        last = min(last, diagonal);
    }
    let first = max(0, diagonal - i32(window.left));
    if last < first {
        return vec2<u32>(0u, 0u);
    }
    return vec2<u32>(u32(first), u32(last + 1));
}

// Copies keys and values [kv_start, kv_start + BLOCK_KV) of `slice` into workgroup memory.
";

/// The changes that turn lesson 09's kernel into the windowed one: `(find, replace)`.
const SOLUTION: [(&str, &str); 5] = [
    (
        "// Copies keys and values [kv_start, kv_start + BLOCK_KV) of `slice` into workgroup memory.\n",
        WINDOW_DECLARATIONS,
    ),
    (
        "    let kv_end = visible_keys(last_row);\n    let my_keys = select(0u, visible_keys(row), row_valid);\n",
        "    // The keys some row of the workgroup sees run from its first row's first visible key\n    \
         // to its last row's last one (bands only move right as the row grows; a row that sees\n    \
         // nothing has the band (0, 0)). The same for every thread: uniform loop bounds.\n    \
         let kv_first = visible_band(q_start).x / BLOCK_KV * BLOCK_KV;\n    \
         let kv_end = visible_band(last_row).y;\n    \
         let my_band = select(vec2<u32>(0u, 0u), visible_band(row), row_valid);\n",
    ),
    (
        "for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV)",
        "for (var kv_start = kv_first; kv_start < kv_end; kv_start += BLOCK_KV)",
    ),
    (
        "        let keys = u32(clamp(i32(my_keys) - i32(kv_start), 0, i32(BLOCK_KV)));\n        if keys > 0u {\n",
        "        let first_key = u32(clamp(i32(my_band.x) - i32(kv_start), 0, i32(BLOCK_KV)));\n        \
         let keys = u32(clamp(i32(my_band.y) - i32(kv_start), 0, i32(BLOCK_KV)));\n        \
         if keys > first_key {\n",
    ),
    ("for (var j = 0u; j < keys; j++) {", "for (var j = first_key; j < keys; j++) {"),
];

/// The reference solution: lesson 09's kernel with a sliding window.
///
/// # Panics
/// If a change no longer applies: lesson 09's shader changed and the solution must follow.
pub fn solution() -> String {
    SOLUTION.iter().fold(lesson09::SHADER.to_string(), |source, (find, replace)| {
        assert!(source.contains(find), "the windowed solution no longer applies: {find:?}");
        source.replace(find, replace)
    })
}

/// Classic mistakes in a windowed WGSL FlashAttention, against [`solution`].
pub const WINDOW_BUGS: [WgslBug; 8] = [
    WgslBug {
        name: "window: one key too far to the left",
        find: "let first = max(0, diagonal - i32(window.left));",
        replace: "let first = max(0, diagonal - i32(window.left) - 1);",
        caught_by: WINDOW_RANDOM,
    },
    WgslBug {
        name: "window: right side ignored",
        find: "var last = min(i32(params.kv_len) - 1, diagonal + i32(window.right));",
        replace: "var last = i32(params.kv_len) - 1;",
        caught_by: WINDOW_RANDOM,
    },
    WgslBug {
        name: "window: centred on key `row` (top-left) instead of key row + Nkv - Nq",
        find: "let diagonal = i32(row) + i32(params.kv_len) - i32(params.q_len);",
        replace: "let diagonal = i32(row);",
        caught_by: WINDOW_EDGES,
    },
    WgslBug {
        name: "window: each row's keys in a tile taken from the tile's first key",
        find: "for (var j = first_key; j < keys; j++) {",
        replace: "for (var j = 0u; j < keys; j++) {",
        caught_by: WINDOW_RANDOM,
    },
    WgslBug {
        name: "window: no left skip (the tile loop starts at key 0)",
        find: "let kv_first = visible_band(q_start).x / BLOCK_KV * BLOCK_KV;",
        replace: "let kv_first = 0u;",
        caught_by: WINDOW_SKIP,
    },
    WgslBug {
        name: "window: no right skip (the tile loop runs to Nkv)",
        find: "let kv_end = visible_band(last_row).y;",
        replace: "let kv_end = params.kv_len;",
        caught_by: WINDOW_SKIP,
    },
    WgslBug {
        name: "window: tiles skipped from the last row's first key, not the first row's",
        find: "let kv_first = visible_band(q_start).x / BLOCK_KV * BLOCK_KV;",
        replace: "let kv_first = visible_band(last_row).x / BLOCK_KV * BLOCK_KV;",
        caught_by: WINDOW_SKIP,
    },
    WgslBug {
        name: "window: the tile loop bounded by each thread's own band",
        find: "for (var kv_start = kv_first; kv_start < kv_end; kv_start += BLOCK_KV)",
        replace: "for (var kv_start = my_band.x / BLOCK_KV * BLOCK_KV; kv_start < my_band.y; kv_start += BLOCK_KV)",
        caught_by: WINDOW_BARRIERS,
    },
];

/// A window side: unbounded, or 0 to 40 keys.
fn side() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![1 => Just(None), 3 => (0..=40usize).prop_map(Some)]
}

/// The main task's checks, for the kernel of `x`.
pub fn checks<X: Exercise09 + ?Sized + 'static>(x: std::rc::Rc<X>) -> Vec<Check> {
    let mut checks = Vec::new();
    let s = x.clone();
    checks.push(Check::new(
        WINDOW_BARRIERS,
        "The tile loop's bounds must be the same for the whole workgroup: from the first row's \
         first visible key to the last row's last one, never a thread's own band.",
        move || gpu::uniformity::check_barriers(&s.window_source()),
    ));
    let s = x.clone();
    checks.push(Check::new(
        WINDOW_EDGES,
        "Row i's window is centred on its diagonal key i + Nkv - Nq (bottom-right, like the \
         causal mask), cut to 0..Nkv; a row whose window lies before key 0 sees nothing: O = 0, \
         L = -inf.",
        move || {
            let windows = [
                (Some(0), Some(0)),
                (Some(2), None),
                (None, Some(1)),
                (Some(100), Some(100)),
                (Some(3), Some(1)),
                (Some(0), None),
            ];
            for (q_len, kv_len) in [(12, 12), (5, 13), (13, 5)] {
                for (left, right) in windows {
                    for causal in [false, true] {
                        let case = Case {
                            spec: ProblemSpec::new(1, 2, q_len, kv_len, 6).causal(causal),
                            seed: 7,
                        };
                        check_window(&*s, &case, Window::new(left, right), 4, 3, false)?;
                    }
                }
            }
            Ok(())
        },
    ));
    let s = x.clone();
    checks.push(Check::new(
        WINDOW_RANDOM,
        "Row i sees keys i + Nkv - Nq - left ..= i + Nkv - Nq + right: in a tile, only the keys \
         between the row's band start and end. Check both ends for off-by-one.",
        move || {
            let strategy = (cases(LIMITS), side(), side(), tile_sizes());
            for_all(GPU_CASES, strategy, |(case, left, right, (br, bc))| {
                let (br, bc) = fitting(&case, br, bc)?;
                check_window(&*s, &case, Window::new(left, right), br, bc, false)
            })
        },
    ));
    let s = x;
    checks.push(Check::new(
        WINDOW_SKIP,
        "Loop over the key tiles from the one holding the workgroup's FIRST row's first visible \
         key to the one holding its LAST row's last visible key: no tile outside them is loaded.",
        move || {
            let strategy = (cases(LIMITS), side(), side(), tile_sizes());
            for_all(GPU_CASES, strategy, |(case, left, right, (br, bc))| {
                let (br, bc) = fitting(&case, br, bc)?;
                check_window(&*s, &case, Window::new(left, right), br, bc, true)
            })
        },
    ));
    checks
}

/// The windowed kernel's output on `case` against the f64 oracle with the window, and (if
/// `count_tiles`) its counts of tiles loaded against the tiles its rows see.
fn check_window<X: Exercise09 + ?Sized>(
    x: &X,
    case: &Case,
    window: Window,
    br: usize,
    bc: usize,
    count_tiles: bool,
) -> Result<(), String> {
    let p: Problem = case.problem();
    let what = format!("{case:?}, {window:?}, tiles Br = {br}, Bc = {bc}");
    let (out, loaded) = x
        .attention_window(&p.q, &p.k, &p.v, &p.options, window, br, bc)
        .map_err(|e| format!("{what}: returned an error: {e}"))?;
    let features = Features::default().window(window.left, window.right);
    let expected = reference::features::expected(&p.q, &p.k, &p.v, &p.options, &features)
        .map_err(|e| e.to_string())?;
    check_output(&out, &expected, Tolerance::F32).map_err(|e| format!("{what}: {e}"))?;
    if count_tiles {
        check_tiles_in_window(&loaded, &case.spec.shape(), case.spec.causal, window, br, bc)
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// Each workgroup loaded exactly the key tiles that overlap the keys its rows see.
fn check_tiles_in_window(
    loaded: &Array2<u32>,
    shape: &AttentionShape,
    causal: bool,
    window: Window,
    br: usize,
    bc: usize,
) -> Result<(), String> {
    for ((slice, query_tile), &count) in loaded.indexed_iter() {
        let rows = query_tile * br..((query_tile + 1) * br).min(shape.q_len);
        let bands: Vec<_> = rows
            .clone()
            .map(|i| visible_band(shape, i, causal, window))
            .filter(|band| !band.is_empty())
            .collect();
        let first = bands.iter().map(|b| b.start).min();
        let end = bands.iter().map(|b| b.end).max();
        let needed = match (first, end) {
            (Some(first), Some(end)) => end.div_ceil(bc) - first / bc,
            _ => 0,
        };
        if count as usize != needed {
            let seen =
                first.zip(end).map_or("no key".to_string(), |(f, e)| format!("keys {f}..{e}"));
            return Err(format!(
                "the workgroup of slice {slice}, rows {rows:?} loaded {count} tiles of keys; its \
                 rows see {seen}, {needed} tiles"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_solution_and_every_planted_bug_are_valid_wgsl() {
        // Validated by naga (with no GPU) and using the window binding; every barrier in
        // uniform control flow except where that is the planted bug.
        let solution = solution();
        let uses = gpu::kernel::bindings_used(&solution, "flash_forward").unwrap();
        assert!(uses.contains(&lesson09::window::WINDOW_BINDING), "{uses:?}");
        gpu::uniformity::check_barriers(&solution).unwrap();
        for bug in WINDOW_BUGS {
            let planted = bug.plant(&solution);
            gpu::kernel::bindings_used(&planted, "flash_forward").unwrap();
            let uniform = gpu::uniformity::check_barriers(&planted).is_ok();
            assert_eq!(uniform, bug.caught_by != WINDOW_BARRIERS, "{}", bug.name);
        }
    }

    /// A learner writes the windowed kernel as a file of its own that the exercise compiles
    /// with the warm-up's kernel appended (`lesson09::window::with_warm_up`): the reference
    /// solution's window declarations and entry point, so written, give the oracle's answer.
    #[test]
    fn a_window_file_composed_with_the_warm_up_is_the_windowed_kernel() {
        let Some(gpu) = gpu::for_tests() else { return };
        let solution = solution();
        // The entry point alone, from `@compute` to the brace that closes its body.
        let start = solution.find("@compute").expect("the solution has an entry point");
        let mut depth = 0;
        let end = start
            + solution[start..]
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    c == '}' && depth == 0
                })
                .expect("the entry point's body closes")
                .0;
        let window_file = format!("{WINDOW_DECLARATIONS}\n{}\n", &solution[start..=end]);
        let source = lesson09::window::with_warm_up(&window_file, lesson09::SHADER);
        let spec = ProblemSpec::new(1, 2, 37, 45, 16).causal(true);
        let problem = Problem::random(&spec, 7);
        let window = Window::new(Some(5), Some(2));
        let tiles = lesson09::TileSizes::new(8, 8).expect("valid tiles");
        let (out, _) = lesson09::window::attention_with_window_shader(
            &gpu.device,
            &gpu.queue,
            &source,
            &problem.q,
            &problem.k,
            &problem.v,
            &problem.options,
            window,
            tiles,
        )
        .expect("the composed shader compiles and runs");
        let features = Features::default().window(window.left, window.right);
        let (q, k, v) = (&problem.q, &problem.k, &problem.v);
        let expected = reference::features::expected(q, k, v, &problem.options, &features).unwrap();
        check_output(&out, &expected, Tolerance::F32).unwrap();
    }
}
