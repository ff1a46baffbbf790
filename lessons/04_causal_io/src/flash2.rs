//! FlashAttention-2's loop order on the two-level memory: lesson 03's algorithm, with every
//! load and store counted.

use lesson03::{RunningState, TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::{FastBuffers, Run, TileCounts, TwoLevelMemory, tile_ranges};

// ANCHOR: flash2
/// FlashAttention-2 forward with tiles `tiles` and a fast memory of `fast_bytes`:
/// outer loop over Q tiles, inner loop over K/V tiles. A Q tile is read once, its output and
/// logsumexp written once; K and V are read once per Q tile.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
    fast_bytes: usize,
) -> Result<Run, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let tiles = tiles.fitted_to(&shape); // tiles larger than the problem: one tile of all of it
    let (br, bc, d) = (tiles.query_rows(), tiles.key_cols(), shape.head_dim);
    let mut mem = TwoLevelMemory::new(fast_bytes);
    // The fast-memory buffers, reused for every tile. The running m and l live in lesson 03's
    // RunningState; the `m` buffer holds a tile of L.
    let FastBuffers {
        q: mut q_tile,
        o: mut o_tile,
        k: mut k_tile,
        v: mut v_tile,
        mut scores,
        m: mut lse_tile,
        l: _,
    } = FastBuffers::reserve(&mut mem, tiles, d)?;

    let mut out = AttentionOutput::empty(&shape);
    let mut counts = TileCounts::default();
    for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            mem.load(q.slice(s![b, h, rows.clone(), ..]), q_tile.slice_mut(s![..n, ..]));
            let mut state = RunningState::new(n, d); // m, l, acc: stay in fast memory
            for keys in tile_ranges(shape.kv_len, bc) {
                let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                counts.add(kind);
                if kind == TileKind::Skipped {
                    continue; // never loaded
                }
                let c = keys.len();
                mem.load(k.slice(s![b, h, keys.clone(), ..]), k_tile.slice_mut(s![..c, ..]));
                mem.load(v.slice(s![b, h, keys.clone(), ..]), v_tile.slice_mut(s![..c, ..]));
                let mut s = scores.slice_mut(s![..n, ..c]);
                general_mat_mul(
                    scale,
                    &q_tile.slice(s![..n, ..]),
                    &k_tile.slice(s![..c, ..]).t(),
                    0.0,
                    &mut s,
                );
                if kind == TileKind::Masked {
                    mask_future_keys(&mut s, rows.start, keys.start, &shape);
                }
                state.update(&mut s, v_tile.slice(s![..c, ..]));
            }
            o_tile.fill(0.0);
            lse_tile.fill(f32::NEG_INFINITY);
            state.finish(o_tile.slice_mut(s![..n, ..]), lse_tile.slice_mut(s![..n]));
            mem.store(o_tile.slice(s![..n, ..]), out.o.slice_mut(s![b, h, rows.clone(), ..]));
            mem.store(lse_tile.slice(s![..n]), out.lse.slice_mut(s![b, h, rows]));
        }
    }
    Ok(Run { output: out, traffic: mem.traffic(), tiles: counts })
}
// ANCHOR_END: flash2
