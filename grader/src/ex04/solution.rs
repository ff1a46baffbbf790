//! Exercise 04's main task: the bytes FlashAttention-2 moves with a sliding window. The
//! reference solution, `window_traffic`, lives here, not in a lesson, because the book only
//! explains the idea: the learner writes it. Beside it, the grader's own windowed
//! FlashAttention-2 on the counting memory, which the checks run to measure what the
//! prediction must equal.

use std::ops::Range;

use lesson03::{RunningState, TileSizes};
use lesson04::{FastBuffers, Traffic, TwoLevelMemory, tile_ranges};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array4, s};
use reference::features::visible_band;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Window,
    check_inputs,
};

const FLOAT: usize = size_of::<f32>();

/// The bytes FlashAttention-2's loop order moves with `window` (and the causal mask if
/// `causal`), tiles `Br x Bc`: per query tile, `Q` read and `O` and `L` written once, and `K`
/// and `V` read for every key tile in which some row of the query tile sees a key.
pub fn window_traffic(
    shape: &AttentionShape,
    causal: bool,
    window: Window,
    query_rows: usize,
    key_cols: usize,
) -> Traffic {
    let (br, bc, d) = (query_rows.min(shape.q_len), key_cols.min(shape.kv_len), shape.head_dim);
    let mut per_head = Traffic::default();
    for rows in tile_ranges(shape.q_len, br) {
        let seen = keys_seen(shape, causal, window, rows.clone());
        let keys_loaded: usize = tile_ranges(shape.kv_len, bc)
            .filter(|keys| keys.start < seen.end && seen.start < keys.end)
            .map(|keys| keys.len())
            .sum();
        per_head.bytes_read += (rows.len() * d + 2 * keys_loaded * d) * FLOAT; // Q; K and V
        per_head.bytes_written += (rows.len() * d + rows.len()) * FLOAT; // O and L
    }
    let heads = shape.batch * shape.heads;
    Traffic {
        bytes_read: per_head.bytes_read * heads,
        bytes_written: per_head.bytes_written * heads,
    }
}

/// The keys some row of `rows` sees: from the smallest band start to the largest band end
/// (empty if no row sees a key).
fn keys_seen(
    shape: &AttentionShape,
    causal: bool,
    window: Window,
    rows: Range<usize>,
) -> Range<usize> {
    rows.map(|i| visible_band(shape, i, causal, window))
        .filter(|band| !band.is_empty())
        .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
        .unwrap_or(0..0)
}

/// FlashAttention-2 with a sliding window on a [`TwoLevelMemory`] with room for the working
/// set: the output and the bytes moved.
pub fn flash2_window_on_memory(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    window: Window,
    query_rows: usize,
    key_cols: usize,
) -> Result<(AttentionOutput<f32>, Traffic), AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let tiles = TileSizes::new(query_rows, key_cols)?.fitted_to(&shape);
    let (br, bc, d) = (tiles.query_rows(), tiles.key_cols(), shape.head_dim);
    let mut mem = TwoLevelMemory::new(usize::MAX);
    let mut fast = FastBuffers::reserve(&mut mem, tiles, d)?;
    let mut out = AttentionOutput::empty(&shape);
    let band = |i| visible_band(&shape, i, options.causal, window);
    for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            mem.load(q.slice(s![b, h, rows.clone(), ..]), fast.q.slice_mut(s![..n, ..]));
            let mut state = RunningState::new(n, d);
            let seen = keys_seen(&shape, options.causal, window, rows.clone());
            for keys in tile_ranges(shape.kv_len, bc) {
                if !(keys.start < seen.end && seen.start < keys.end) {
                    continue; // no row sees a key of this tile: never loaded
                }
                let c = keys.len();
                mem.load(k.slice(s![b, h, keys.clone(), ..]), fast.k.slice_mut(s![..c, ..]));
                mem.load(v.slice(s![b, h, keys.clone(), ..]), fast.v.slice_mut(s![..c, ..]));
                let mut scores = fast.scores.slice_mut(s![..n, ..c]);
                let (q_tile, k_tile) = (fast.q.slice(s![..n, ..]), fast.k.slice(s![..c, ..]));
                general_mat_mul(scale, &q_tile, &k_tile.t(), 0.0, &mut scores);
                for (mut row, i) in scores.outer_iter_mut().zip(rows.clone()) {
                    let visible = band(i);
                    for (score, j) in row.iter_mut().zip(keys.clone()) {
                        if !visible.contains(&j) {
                            *score = f32::NEG_INFINITY;
                        }
                    }
                }
                state.update(&mut scores, fast.v.slice(s![..c, ..]));
            }
            fast.o.fill(0.0);
            fast.m.fill(f32::NEG_INFINITY);
            state.finish(fast.o.slice_mut(s![..n, ..]), fast.m.slice_mut(s![..n]));
            mem.store(fast.o.slice(s![..n, ..]), out.o.slice_mut(s![b, h, rows.clone(), ..]));
            mem.store(fast.m.slice(s![..n]), out.lse.slice_mut(s![b, h, rows]));
        }
    }
    Ok((out, mem.traffic()))
}
