//! # Lesson 03 — tiled FlashAttention forward on the CPU
//!
//! FlashAttention-2's loop order: the **outer** loop walks over tiles of `Br` query rows, the
//! **inner** loop over tiles of `Bc` keys and values. For one query tile it keeps, per row,
//! the running maximum `m`, the running sum `l` and an unnormalised output `acc` (`Br x D`),
//! and for each key tile:
//!
//! $$ S = \mathrm{scale}\cdot Q_t K_t^\top,\quad m' = \max(m, \mathrm{rowmax}(S)),\quad
//!    P = e^{S - m'},$$
//! $$ l \leftarrow l\,e^{m - m'} + \mathrm{rowsum}(P),\quad
//!    acc \leftarrow acc\,e^{m - m'} + P V_t,\quad m \leftarrow m' . $$
//!
//! After the last key tile, `O = acc / l` (normalised once) and `L = m + ln l`. This is the
//! merge of lesson 02 applied to whole tiles. The working memory is `S`/`P` for one tile pair
//! (`Br x Bc`) plus `acc`, `m`, `l` (`Br x (D + 2)`): it does not grow with `N`.
//!
//! With `causal`, key tiles that lie entirely in the future of every row of the query tile are
//! never visited, and the mask is applied only to tiles that straddle the diagonal.

use std::cell::Cell;
use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, ArrayView2, ArrayViewMut1, ArrayViewMut2, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

/// Tile sizes: `Br` query rows per outer tile and `Bc` keys per inner tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileSizes {
    query_rows: usize,
    key_cols: usize,
}

impl TileSizes {
    /// Tiles of `query_rows` (`Br`) by `key_cols` (`Bc`); both must be at least 1. They need not
    /// divide the sequence lengths: the last tile of each loop is simply shorter.
    pub fn new(query_rows: usize, key_cols: usize) -> Result<Self, AttentionError> {
        if query_rows == 0 {
            return Err(AttentionError::InvalidTileSize {
                which: "query rows (Br)",
                value: query_rows,
            });
        }
        if key_cols == 0 {
            return Err(AttentionError::InvalidTileSize {
                which: "key columns (Bc)",
                value: key_cols,
            });
        }
        Ok(Self { query_rows, key_cols })
    }

    /// `Br`
    pub fn query_rows(&self) -> usize {
        self.query_rows
    }

    /// `Bc`
    pub fn key_cols(&self) -> usize {
        self.key_cols
    }

    // ANCHOR: fitted_to
    /// The tiles clamped to the problem: a tile larger than the sequence it cuts is one tile
    /// of the whole sequence. Every stage clamps before it allocates, so tiles of `2^40` rows
    /// over 8 rows cost 8 rows of memory, not an allocation that aborts the process.
    pub fn fitted_to(self, shape: &AttentionShape) -> Self {
        Self {
            query_rows: self.query_rows.min(shape.q_len),
            key_cols: self.key_cols.min(shape.kv_len),
        }
    }
    // ANCHOR_END: fitted_to
}

impl Default for TileSizes {
    /// 64 x 64: a tile of S is 16 KiB in f32, so S, Q, K, V tiles fit a typical 48 KiB L1 cache
    /// together for D up to about 32, and L2 for any D in the course.
    fn default() -> Self {
        Self { query_rows: 64, key_cols: 64 }
    }
}

// ANCHOR: attention
/// Tiled FlashAttention-2 forward: `q [B,H,Nq,D]`, `k [B,H,Nkv,D]`, `v [B,H,Nkv,D]` ->
/// `O [B,H,Nq,D]`, `L [B,H,Nq]`, without ever holding more than one `Br x Bc` tile of scores.
pub fn attention(
    q: &ndarray::Array4<f32>,
    k: &ndarray::Array4<f32>,
    v: &ndarray::Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let tiles = tiles.fitted_to(&shape);
    let mut out = AttentionOutput::empty(&shape);

    for b in 0..shape.batch {
        for h in 0..shape.heads {
            // Outer loop: one tile of Br query rows at a time (the last one may be shorter).
            for first_row in (0..shape.q_len).step_by(tiles.query_rows) {
                let rows = first_row..(first_row + tiles.query_rows).min(shape.q_len);
                let query_tile = QueryTile {
                    q: q.slice(s![b, h, rows.clone(), ..]),
                    first_row,
                    o: out.o.slice_mut(s![b, h, rows.clone(), ..]),
                    lse: out.lse.slice_mut(s![b, h, rows]),
                };
                let k_bh = k.slice(s![b, h, .., ..]);
                let v_bh = v.slice(s![b, h, .., ..]);
                forward_query_tile(
                    query_tile,
                    k_bh,
                    v_bh,
                    &shape,
                    scale,
                    options.causal,
                    tiles.key_cols,
                );
            }
        }
    }
    Ok(out)
}
// ANCHOR_END: attention

/// One tile of query rows and the parts of `O` and `L` it writes.
struct QueryTile<'a> {
    /// `[Br, D]`
    q: ArrayView2<'a, f32>,
    /// Index of the tile's first row in the whole sequence.
    first_row: usize,
    /// `[Br, D]`
    o: ArrayViewMut2<'a, f32>,
    /// `[Br]`
    lse: ArrayViewMut1<'a, f32>,
}

// ANCHOR: query_tile
/// The inner loop for one query tile: walk over key tiles of `Bc`, merging each into the
/// running state, then normalise once and write `O` and `L`.
fn forward_query_tile(
    tile: QueryTile,
    k: ArrayView2<f32>, // [Nkv, D] of this batch and head
    v: ArrayView2<f32>, // [Nkv, D]
    shape: &AttentionShape,
    scale: f32,
    causal: bool,
    key_cols: usize,
) {
    let (rows, head_dim) = tile.q.dim();
    let query_rows = tile.first_row..tile.first_row + rows;
    let mut state = RunningState::new(rows, head_dim);
    let mut scores = Array2::<f32>::zeros((rows, key_cols)); // S, then P, of one tile pair

    for first_key in (0..shape.kv_len).step_by(key_cols) {
        let keys = first_key..(first_key + key_cols).min(shape.kv_len);
        let kind = classify_tile(shape, causal, query_rows.clone(), keys.clone());
        if kind == TileKind::Skipped {
            break; // every later key tile lies further in the future: skip them all unread
        }
        let mut s = scores.slice_mut(s![.., ..keys.len()]);
        tile_scores(scale, tile.q.view(), k.slice(s![keys.clone(), ..]), &mut s); // [Br, Bc]
        if kind == TileKind::Masked {
            mask_future_keys(&mut s, tile.first_row, first_key, shape);
        }
        state.update(&mut s, v.slice(s![keys, ..]));
    }
    state.finish(tile.o, tile.lse);
}
// ANCHOR_END: query_tile

// ANCHOR: tile_scores
/// `S = scale · Q_t K_tᵀ` for one tile pair: `q_tile [Br, D]`, `k_tile [Bc, D]`, written into
/// `s [Br, Bc]`. It also counts the tiles it computes, on the calling thread, so that a test
/// can see that the causal tiles right of the diagonal are never computed
/// ([`tiles_computed`]).
pub fn tile_scores(
    scale: f32,
    q_tile: ArrayView2<f32>,
    k_tile: ArrayView2<f32>,
    s: &mut ArrayViewMut2<f32>,
) {
    TILES_COMPUTED.with(|count| count.set(count.get() + 1));
    general_mat_mul(scale, &q_tile, &k_tile.t(), 0.0, s);
}

thread_local! {
    static TILES_COMPUTED: Cell<usize> = const { Cell::new(0) };
}

/// How many tiles of scores [`tile_scores`] has computed on this thread so far.
pub fn tiles_computed() -> usize {
    TILES_COMPUTED.with(Cell::get)
}
// ANCHOR_END: tile_scores

// ANCHOR: classify
/// What the causal mask does to one (query tile, key tile) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileKind {
    /// Every row of the query tile sees every key of the key tile: no mask needed.
    Full,
    /// The tile straddles the diagonal: some entries must be masked.
    Masked,
    /// No row sees any key of the tile: it is never loaded or computed.
    Skipped,
}

/// Classifies the tile pair `query_rows x keys` under the bottom-right causal mask.
///
/// Visible keys form a prefix that grows with the row, so the tile's first row sees the fewest
/// keys and its last row the most.
pub fn classify_tile(
    shape: &AttentionShape,
    causal: bool,
    query_rows: Range<usize>,
    keys: Range<usize>,
) -> TileKind {
    if !causal {
        TileKind::Full
    } else if keys.start >= shape.visible_keys(query_rows.end - 1, true) {
        TileKind::Skipped
    } else if keys.end > shape.visible_keys(query_rows.start, true) {
        TileKind::Masked
    } else {
        TileKind::Full
    }
}
// ANCHOR_END: classify

/// How many (query tile, key tile) pairs of one head have a key that some row of the query
/// tile sees: the tiles FlashAttention computes (all of them without the mask).
pub fn tiles_to_compute(shape: &AttentionShape, causal: bool, tiles: TileSizes) -> usize {
    let tiles = tiles.fitted_to(shape);
    let ranges = |n: usize, size: usize| (0..n).step_by(size).map(move |s| s..(s + size).min(n));
    ranges(shape.q_len, tiles.query_rows)
        .map(|rows| {
            ranges(shape.kv_len, tiles.key_cols)
                .filter(|keys| {
                    classify_tile(shape, causal, rows.clone(), keys.clone()) != TileKind::Skipped
                })
                .count()
        })
        .sum()
}

/// Sets `S_ij = -inf` for the keys of this tile that row `first_row + i` may not see.
pub fn mask_future_keys(
    s: &mut ArrayViewMut2<f32>,
    first_row: usize,
    first_key: usize,
    shape: &AttentionShape,
) {
    for (i, mut row) in s.outer_iter_mut().enumerate() {
        let visible = shape.visible_keys(first_row + i, true);
        let first_hidden = visible.saturating_sub(first_key).min(row.len());
        row.slice_mut(s![first_hidden..]).fill(f32::NEG_INFINITY);
    }
}

// ANCHOR: running_state
/// Per query row of a tile: the running max `m`, running sum `l`, and unnormalised output
/// `acc = sum_j e^(S_j - m) V_j` over the key tiles merged so far.
pub struct RunningState {
    max: Array1<f32>, // m   [Br]
    sum: Array1<f32>, // l   [Br]
    acc: Array2<f32>, // acc [Br, D]
}

impl RunningState {
    /// The state of `rows` query rows before any key: `m = -inf`, `l = 0`, `acc = 0`.
    pub fn new(rows: usize, head_dim: usize) -> Self {
        Self {
            max: Array1::from_elem(rows, f32::NEG_INFINITY),
            sum: Array1::zeros(rows),
            acc: Array2::zeros((rows, head_dim)),
        }
    }

    /// Merges one key tile: `s` holds `S [Br, Bc]` and is overwritten with `P`; `v` is
    /// `V_t [Bc, D]`.
    pub fn update(&mut self, s: &mut ArrayViewMut2<f32>, v: ArrayView2<f32>) {
        self.rescale_to_tile(s);
        self.add_weighted_values(s.view(), v);
    }

    /// The softmax half of [`update`](Self::update): per row, the new maximum `m'`, `P = e^(S -
    /// m')` written over `s`, `l` and `acc` rescaled by `e^(m - m')` and `P`'s row sums added
    /// to `l`.
    pub fn rescale_to_tile(&mut self, s: &mut ArrayViewMut2<f32>) {
        for (r, mut row) in s.outer_iter_mut().enumerate() {
            let tile_max = row.fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let new_max = self.max[r].max(tile_max);
            if new_max == f32::NEG_INFINITY {
                // The row has seen no key yet. With the prefix-shaped causal mask it will see
                // none at all and `finish` leaves it at O = 0, L = -inf; P = 0 keeps the NaN of
                // e^(-inf - -inf) out of `acc` and `l` all the same.
                row.fill(0.0);
                continue;
            }
            let correction = (self.max[r] - new_max).exp(); // e^(m - m'); 0 on the first tile
            row.mapv_inplace(|x| (x - new_max).exp()); // P = e^(S - m')
            self.sum[r] = self.sum[r] * correction + row.sum();
            self.acc.row_mut(r).mapv_inplace(|a| a * correction);
            self.max[r] = new_max;
        }
    }

    /// The values half of [`update`](Self::update): `acc += P V_t`, `[Br, Bc] x [Bc, D]`.
    pub fn add_weighted_values(&mut self, p: ArrayView2<f32>, v: ArrayView2<f32>) {
        general_mat_mul(1.0, &p, &v, 1.0, &mut self.acc);
    }

    /// `O = acc / l` and `L = m + ln l`, once, after the last key tile. A row that saw no key
    /// keeps `O = 0` and `L = -inf`.
    pub fn finish(self, mut o: ArrayViewMut2<f32>, mut lse: ArrayViewMut1<f32>) {
        for r in 0..self.sum.len() {
            if self.sum[r] > 0.0 {
                let normalised = &self.acc.row(r) / self.sum[r];
                o.row_mut(r).assign(&normalised);
                lse[r] = self.max[r] + self.sum[r].ln();
            }
        }
    }
}
// ANCHOR_END: running_state

/// This lesson's implementation with its default tiles, for the course's registry.
pub fn versions() -> Vec<reference::ForwardVersion> {
    use reference::{About, Device, ForwardVersion};
    let about = About::forward(
        "tiled FlashAttention-2",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "tiles of queries and keys, one running state per query tile, O normalised once",
    );
    let tiles = TileSizes::default();
    vec![ForwardVersion::new(about, move |q: &_, k: &_, v: &_, options: &_| {
        attention(q, k, v, options, tiles)
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_sizes_must_be_positive() {
        assert_eq!(
            TileSizes::new(0, 4),
            Err(AttentionError::InvalidTileSize { which: "query rows (Br)", value: 0 })
        );
        assert_eq!(
            TileSizes::new(4, 0),
            Err(AttentionError::InvalidTileSize { which: "key columns (Bc)", value: 0 })
        );
        let t = TileSizes::new(3, 5).unwrap();
        assert_eq!((t.query_rows(), t.key_cols()), (3, 5));
    }

    #[test]
    fn tiles_larger_than_the_problem_are_clamped_to_it() {
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 8, kv_len: 3, head_dim: 4 };
        let huge = TileSizes::new(1 << 40, usize::MAX).unwrap().fitted_to(&shape);
        assert_eq!((huge.query_rows(), huge.key_cols()), (8, 3));
        let small = TileSizes::new(2, 2).unwrap();
        assert_eq!(small.fitted_to(&shape), small);
    }

    #[test]
    fn tiles_are_classified_against_the_bottom_right_diagonal() {
        use TileKind::*;
        // Nq = 4, Nkv = 6: row i sees keys 0..=i+2.
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 4, kv_len: 6, head_dim: 1 };
        assert_eq!(classify_tile(&shape, true, 0..2, 0..3), Full); // rows 0-1 see keys 0..=2
        assert_eq!(classify_tile(&shape, true, 0..2, 3..4), Masked); // row 1 sees key 3, row 0 not
        assert_eq!(classify_tile(&shape, true, 0..2, 4..6), Skipped); // nobody sees keys 4, 5
        assert_eq!(classify_tile(&shape, true, 2..4, 4..6), Masked);
        assert_eq!(classify_tile(&shape, false, 0..2, 4..6), Full);
    }

    #[test]
    fn diagonal_tile_masks_only_future_keys() {
        // Nq = Nkv = 4, tile rows 2..4 against keys 2..4: row 2 sees key 2, row 3 sees 2 and 3.
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 4, kv_len: 4, head_dim: 1 };
        let mut s = Array2::<f32>::zeros((2, 2));
        mask_future_keys(&mut s.view_mut(), 2, 2, &shape);
        assert_eq!(s, ndarray::array![[0.0, f32::NEG_INFINITY], [0.0, 0.0]]);
    }

    #[test]
    fn a_larger_later_score_rescales_what_came_before() {
        // One row, two key tiles of one key each: scores 0 then 2, values 1 then 3.
        let mut state = RunningState::new(1, 1);
        state.update(
            &mut Array2::from_elem((1, 1), 0.0).view_mut(),
            Array2::from_elem((1, 1), 1.0).view(),
        );
        state.update(
            &mut Array2::from_elem((1, 1), 2.0).view_mut(),
            Array2::from_elem((1, 1), 3.0).view(),
        );
        let (mut o, mut lse) = (Array2::zeros((1, 1)), Array1::zeros(1));
        state.finish(o.view_mut(), lse.view_mut());
        let (w0, w1) = (1.0 / (1.0 + 2f32.exp()), 2f32.exp() / (1.0 + 2f32.exp()));
        assert!((o[[0, 0]] - (w0 * 1.0 + w1 * 3.0)).abs() < 1e-6);
        assert!((lse[0] - (1.0 + 2f32.exp()).ln()).abs() < 1e-6);
    }
}
