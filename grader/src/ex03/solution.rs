//! The reference solution of exercise 03's main task: the tiled forward with a sliding window,
//! computing only the key tiles that overlap some row's window. It lives here, not in a lesson,
//! because the book only explains the idea: the learner writes this part.

use std::ops::Range;

use lesson03::{RunningState, TileSizes, tile_scores};
use ndarray::{Array2, Array4, ArrayViewMut2, s};
use reference::features::visible_band;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, Window, check_inputs,
};

/// Tiled FlashAttention-2 forward in which row `i` sees only the keys of its window,
/// `i + Nkv - Nq - left ..= i + Nkv - Nq + right` (and the causal mask, if set): key tiles
/// outside every row's window are skipped on both sides, those that cross a window's edge are
/// masked. Shapes as in `lesson03::attention`.
pub fn attention_window(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    window: Window,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let fitted = tiles.fitted_to(&shape);
    let (br, bc) = (fitted.query_rows(), fitted.key_cols());
    let mut out = AttentionOutput::empty(&shape);
    let band = |i| visible_band(&shape, i, options.causal, window);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for first_row in (0..shape.q_len).step_by(br) {
                let rows = first_row..(first_row + br).min(shape.q_len);
                let mut state = RunningState::new(rows.len(), shape.head_dim);
                let mut scores = Array2::<f32>::zeros((rows.len(), bc));
                let seen = keys_seen(rows.clone().map(band));
                // The key tiles that overlap `seen`, on the grid of Bc.
                for first_key in (seen.start / bc * bc..seen.end).step_by(bc) {
                    let keys = first_key..(first_key + bc).min(shape.kv_len);
                    let mut s = scores.slice_mut(s![.., ..keys.len()]);
                    let q_tile = q.slice(s![b, h, rows.clone(), ..]);
                    tile_scores(scale, q_tile, k.slice(s![b, h, keys.clone(), ..]), &mut s);
                    mask_outside_windows(&mut s, rows.clone(), first_key, &band);
                    state.update(&mut s, v.slice(s![b, h, keys, ..]));
                }
                let (o, lse) = (s![b, h, rows.clone(), ..], s![b, h, rows]);
                state.finish(out.o.slice_mut(o), out.lse.slice_mut(lse));
            }
        }
    }
    Ok(out)
}

/// The keys that some row sees, from each row's band: from the smallest start to the largest
/// end among the rows that see any key (empty if none does).
fn keys_seen(bands: impl Iterator<Item = Range<usize>>) -> Range<usize> {
    let seen = bands.filter(|band| !band.is_empty());
    let union = |a: Range<usize>, b: Range<usize>| a.start.min(b.start)..a.end.max(b.end);
    seen.reduce(union).unwrap_or(0..0)
}

/// Sets `S = -inf` outside each row's window: row `r` of the tile is query `rows.start + r`,
/// column `c` is key `first_key + c`.
fn mask_outside_windows(
    s: &mut ArrayViewMut2<f32>,
    rows: Range<usize>,
    first_key: usize,
    band: &impl Fn(usize) -> Range<usize>,
) {
    for (mut row, i) in s.outer_iter_mut().zip(rows) {
        let visible = band(i);
        for (c, score) in row.iter_mut().enumerate() {
            if !visible.contains(&(first_key + c)) {
                *score = f32::NEG_INFINITY;
            }
        }
    }
}
