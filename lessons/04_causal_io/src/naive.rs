//! Standard attention on the two-level memory: `S` and `P` live in slow memory.

use lesson02::SoftmaxState;
use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::{FastBuffers, Run, TileCounts, TwoLevelMemory, tile_ranges};

// ANCHOR: naive
/// Standard attention as three kernels that meet in slow memory:
///
/// 1. `S = scale · Q Kᵀ`, tile by tile, masked, written to slow memory (`Nq x Nkv`);
/// 2. softmax: each row's `(m, l)` from one read of `S`, then a second read of `S` to write
///    `P` (`Nq x Nkv`) and `L`;
/// 3. `O = P V`, reading `P` tile by tile.
///
/// The same tiles and the same fast memory as the flash algorithms, but `S` and `P` cross
/// between the memories: `Θ(N·d + N²)` bytes. Nothing is skipped: a causal tile wholly in the
/// future is still computed and written (as `-inf`).
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
    // `tile` holds a tile of S or of P; the row statistics live in SoftmaxStates, and the `m`
    // buffer holds a tile of L.
    let FastBuffers {
        q: mut q_tile,
        o: mut o_tile,
        k: mut k_tile,
        v: mut v_tile,
        scores: mut tile,
        m: mut lse_tile,
        l: _,
    } = FastBuffers::reserve(&mut mem, tiles, d)?;

    let mut out = AttentionOutput::empty(&shape);
    let mut counts = TileCounts::default();
    for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
        // Slow memory for this head's S and P.
        let mut s_slow = Array2::<f32>::zeros((shape.q_len, shape.kv_len));
        let mut p_slow = Array2::<f32>::zeros((shape.q_len, shape.kv_len));

        // Kernel 1: S = scale Q Kᵀ.
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            mem.load(q.slice(s![b, h, rows.clone(), ..]), q_tile.slice_mut(s![..n, ..]));
            for keys in tile_ranges(shape.kv_len, bc) {
                let c = keys.len();
                let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                counts.add(if kind == TileKind::Skipped { TileKind::Masked } else { kind });
                mem.load(k.slice(s![b, h, keys.clone(), ..]), k_tile.slice_mut(s![..c, ..]));
                let mut s = tile.slice_mut(s![..n, ..c]);
                general_mat_mul(
                    scale,
                    &q_tile.slice(s![..n, ..]),
                    &k_tile.slice(s![..c, ..]).t(),
                    0.0,
                    &mut s,
                );
                if kind != TileKind::Full {
                    mask_future_keys(&mut s, rows.start, keys.start, &shape);
                }
                mem.store(s.view(), s_slow.slice_mut(s![rows.clone(), keys]));
            }
        }

        // Kernel 2: P = softmax(S) row by row, and L.
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            let mut stats = vec![SoftmaxState::EMPTY; n];
            for keys in tile_ranges(shape.kv_len, bc) {
                let mut s = tile.slice_mut(s![..n, ..keys.len()]);
                mem.load(s_slow.slice(s![rows.clone(), keys]), s.view_mut());
                for (state, row) in stats.iter_mut().zip(s.rows()) {
                    *state =
                        state.merge(SoftmaxState::of(row.as_slice().expect("a contiguous row")));
                }
            }
            for keys in tile_ranges(shape.kv_len, bc) {
                let mut p = tile.slice_mut(s![..n, ..keys.len()]);
                mem.load(s_slow.slice(s![rows.clone(), keys.clone()]), p.view_mut());
                for (state, mut row) in stats.iter().zip(p.rows_mut()) {
                    row.mapv_inplace(|x| {
                        if state.sum > 0.0 { (x - state.max).exp() / state.sum } else { 0.0 }
                    });
                }
                mem.store(p.view(), p_slow.slice_mut(s![rows.clone(), keys]));
            }
            for (r, state) in stats.iter().enumerate() {
                lse_tile[r] = if state.sum > 0.0 { state.logsumexp() } else { f32::NEG_INFINITY };
            }
            mem.store(lse_tile.slice(s![..n]), out.lse.slice_mut(s![b, h, rows]));
        }

        // Kernel 3: O = P V.
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            let mut acc = o_tile.slice_mut(s![..n, ..]);
            acc.fill(0.0);
            for keys in tile_ranges(shape.kv_len, bc) {
                let c = keys.len();
                mem.load(
                    p_slow.slice(s![rows.clone(), keys.clone()]),
                    tile.slice_mut(s![..n, ..c]),
                );
                mem.load(v.slice(s![b, h, keys, ..]), v_tile.slice_mut(s![..c, ..]));
                general_mat_mul(
                    1.0,
                    &tile.slice(s![..n, ..c]),
                    &v_tile.slice(s![..c, ..]),
                    1.0,
                    &mut acc,
                );
            }
            mem.store(acc.view(), out.o.slice_mut(s![b, h, rows, ..]));
        }
    }
    Ok(Run { output: out, traffic: mem.traffic(), tiles: counts })
}
// ANCHOR_END: naive
