//! FlashAttention-1's loop order on the two-level memory (Dao et al. 2022, Algorithm 1).

use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array3, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::{FastBuffers, Run, TileCounts, TwoLevelMemory, tile_ranges};

// ANCHOR: flash1
/// FlashAttention-1 forward: the **outer** loop runs over K/V tiles, the inner loop over Q
/// tiles. K and V are read once, but every Q tile, its output `O_i` and its statistics
/// `m_i`, `l_i` are read from slow memory and written back once per K/V tile. `O_i` is kept
/// normalised after every step, as in the paper.
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
    let FastBuffers {
        q: mut q_tile,
        o: mut o_tile,
        k: mut k_tile,
        v: mut v_tile,
        mut scores,
        m: mut m_tile,
        l: mut l_tile,
    } = FastBuffers::reserve(&mut mem, tiles, d)?;

    // Slow memory: O = 0, m = -inf, l = 0 for every query row (Algorithm 1, line 2).
    let mut out = AttentionOutput::empty(&shape);
    let mut m_slow = Array3::<f32>::from_elem(shape.lse_dims(), f32::NEG_INFINITY);
    let mut l_slow = Array3::<f32>::zeros(shape.lse_dims());
    let mut counts = TileCounts::default();
    for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
        for keys in tile_ranges(shape.kv_len, bc) {
            let c = keys.len();
            mem.load(k.slice(s![b, h, keys.clone(), ..]), k_tile.slice_mut(s![..c, ..]));
            mem.load(v.slice(s![b, h, keys.clone(), ..]), v_tile.slice_mut(s![..c, ..]));
            for rows in tile_ranges(shape.q_len, br) {
                let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                counts.add(kind);
                if kind == TileKind::Skipped {
                    continue;
                }
                let n = rows.len();
                mem.load(q.slice(s![b, h, rows.clone(), ..]), q_tile.slice_mut(s![..n, ..]));
                mem.load(out.o.slice(s![b, h, rows.clone(), ..]), o_tile.slice_mut(s![..n, ..]));
                mem.load(m_slow.slice(s![b, h, rows.clone()]), m_tile.slice_mut(s![..n]));
                mem.load(l_slow.slice(s![b, h, rows.clone()]), l_tile.slice_mut(s![..n]));
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
                for r in 0..n {
                    merge_tile_row(
                        r,
                        &mut s,
                        v_tile.slice(s![..c, ..]),
                        &mut o_tile,
                        &mut m_tile,
                        &mut l_tile,
                    );
                }
                mem.store(o_tile.slice(s![..n, ..]), out.o.slice_mut(s![b, h, rows.clone(), ..]));
                mem.store(m_tile.slice(s![..n]), m_slow.slice_mut(s![b, h, rows.clone()]));
                mem.store(l_tile.slice(s![..n]), l_slow.slice_mut(s![b, h, rows]));
            }
        }
        // L = m + ln l, from the statistics left in slow memory.
        for rows in tile_ranges(shape.q_len, br) {
            let n = rows.len();
            mem.load(m_slow.slice(s![b, h, rows.clone()]), m_tile.slice_mut(s![..n]));
            mem.load(l_slow.slice(s![b, h, rows.clone()]), l_tile.slice_mut(s![..n]));
            let lse = Array1::from_shape_fn(n, |r| {
                if l_tile[r] > 0.0 { m_tile[r] + l_tile[r].ln() } else { f32::NEG_INFINITY }
            });
            mem.store(lse.view(), out.lse.slice_mut(s![b, h, rows]));
        }
    }
    Ok(Run { output: out, traffic: mem.traffic(), tiles: counts })
}

/// Merges row `r` of a score tile into that row's normalised output and statistics:
///
/// $$ \tilde m = \mathrm{rowmax}(S_r),\quad \tilde P = e^{S_r - \tilde m},\quad
///    \tilde\ell = \mathrm{rowsum}(\tilde P),\quad m' = \max(m, \tilde m),\quad
///    \ell' = e^{m - m'}\ell + e^{\tilde m - m'}\tilde\ell, $$
/// $$ O_r \leftarrow \big(\ell\, e^{m - m'} O_r + e^{\tilde m - m'}\, \tilde P V\big) / \ell' . $$
fn merge_tile_row(
    r: usize,
    s: &mut ndarray::ArrayViewMut2<f32>,
    v: ndarray::ArrayView2<f32>,
    o: &mut Array2<f32>,
    m: &mut Array1<f32>,
    l: &mut Array1<f32>,
) {
    let mut p = s.row_mut(r);
    let tile_max = p.fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    if tile_max == f32::NEG_INFINITY {
        return; // the row sees no key of this tile
    }
    p.mapv_inplace(|x| (x - tile_max).exp());
    let tile_sum = p.sum();
    let new_max = m[r].max(tile_max);
    let (old_weight, tile_weight) = ((m[r] - new_max).exp(), (tile_max - new_max).exp());
    let new_sum = old_weight * l[r] + tile_weight * tile_sum;
    // O_r <- (l e^(m - m') O_r + e^(m~ - m') P~ V) / l'
    let mut o_row = o.slice_mut(s![r..=r, ..]);
    o_row *= l[r] * old_weight;
    general_mat_mul(tile_weight, &s.slice(s![r..=r, ..]), &v, 1.0, &mut o_row);
    o_row /= new_sum;
    (m[r], l[r]) = (new_max, new_sum);
}
// ANCHOR_END: flash1
