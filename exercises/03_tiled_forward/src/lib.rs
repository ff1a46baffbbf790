//! # Exercise 03: tiled FlashAttention forward, then a sliding window
//!
//! Warm-up: the FlashAttention-2 forward pass on the CPU: outer loop over tiles of `Br` query
//! rows, inner loop over tiles of `Bc` keys, a running `(m, l, acc)` per query row, `O`
//! normalised once at the end, and the logsumexp `L`.
//! Main task: the same forward with FlashAttention-2's sliding window (`window_size`), which
//! computes only the tiles that overlap the window. The tasks, the contract and hints are in
//! this folder's README.md; the book's chapter 3 explains the ideas.
//!
//! Check your work with `cargo test -p ex03 --test visible` and `cargo grade ex03`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports, dead_code)]

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array4, ArrayView2, ArrayViewMut1, ArrayViewMut2, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Window,
    check_inputs,
};

/// Tile sizes: `Br` query rows per outer tile and `Bc` keys per inner tile (given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileSizes {
    query_rows: usize,
    key_cols: usize,
}

impl TileSizes {
    /// Tiles of `query_rows` (`Br`) by `key_cols` (`Bc`); both must be at least 1.
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

    /// The tiles clamped to the problem: a tile larger than the sequence it cuts is one tile of
    /// the whole sequence (given).
    pub fn fitted_to(self, shape: &AttentionShape) -> Self {
        Self {
            query_rows: self.query_rows.min(shape.q_len),
            key_cols: self.key_cols.min(shape.kv_len),
        }
    }
}

/// `S = scale · Q_t K_tᵀ` for one tile pair, and the tile counter (given, from lesson 03).
/// Compute every tile's scores with `tile_scores(scale, q_tile, k_tile, &mut s)`, once per
/// tile: the grader counts the tiles it computes to see that the causal tiles right of the
/// diagonal are skipped.
pub use lesson03::{tile_scores, tiles_computed};

/// Tiled FlashAttention-2 forward: `q [B,H,Nq,D]`, `k [B,H,Nkv,D]`, `v [B,H,Nkv,D]` ->
/// `O [B,H,Nq,D]`, `L [B,H,Nq]`, never holding more than one `Br x Bc` tile of scores.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: validate: `let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;`
    //         (shapes, NaN and infinities, the scale); `tiles.fitted_to(&shape)` (a tile larger
    //         than the sequence is one tile of all of it); start from
    //         `AttentionOutput::empty(&shape)`.
    // TODO 2: for every batch and head, for each tile of Br query rows (the last may be
    //         shorter): a RunningState for its rows, then for each tile of Bc keys:
    //           - causal: if the tile's LAST row cannot see the tile's first key, no row can:
    //             skip this and every later key tile;
    //           - S = scale * Q_tile K_tileᵀ  (Br x Bc) with `tile_scores`;
    //           - causal: set S to -inf where row i may not see key j
    //             (j >= shape.visible_keys(i, true));
    //           - state.update(S, V_tile).
    //         Then state.finish(...) writes this tile's rows of O and L.
    todo!("exercise 03: tiled forward")
}

/// Main task: the tiled forward with a sliding window. Row `i` sees key `j` only if
/// `i + Nkv - Nq - left <= j <= i + Nkv - Nq + right` (a side that is `None` has no bound), and
/// the causal mask if `options.causal`. Key tiles in which no row of the query tile sees a key
/// are never computed, on either side of the window.
pub fn attention_window(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    window: Window,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: validate as in `attention`.
    // TODO 2: for each query tile: which keys does some row of it see? Loop only over the key
    //         tiles that overlap them (on the grid of Bc: key tiles start at multiples of Bc),
    //         computing each with `tile_scores`.
    // TODO 3: mask each computed tile row by row: -inf outside the row's window (and the
    //         causal mask); then your RunningState does the rest.
    todo!("exercise 03, main task: sliding window")
}

/// Per query row of a tile: the running max `m`, running sum `l`, and unnormalised output
/// `acc = sum_j e^(S_j - m) V_j` over the key tiles merged so far.
struct RunningState {
    max: Array1<f32>, // m   [Br]
    sum: Array1<f32>, // l   [Br]
    acc: Array2<f32>, // acc [Br, D]
}

impl RunningState {
    /// The state before any key: m = -inf, l = 0, acc = 0 (given).
    fn new(rows: usize, head_dim: usize) -> Self {
        Self {
            max: Array1::from_elem(rows, f32::NEG_INFINITY),
            sum: Array1::zeros(rows),
            acc: Array2::zeros((rows, head_dim)),
        }
    }

    /// Merges one key tile: `s` holds the tile's scores `[Br, Bc]` (overwrite it with P), `v`
    /// is the tile's values `[Bc, D]`.
    fn update(&mut self, s: &mut ArrayViewMut2<f32>, v: ArrayView2<f32>) {
        // TODO: per row r: m' = max(m, rowmax(S)); if m' is -inf the row sees nothing yet
        //       (set its P to 0 and move on); otherwise correction = e^(m - m'), P = e^(S - m'),
        //       l = l * correction + rowsum(P), acc_r *= correction, m = m'.
        //       Then acc += P V for all rows at once.
        todo!("exercise 03: RunningState::update")
    }

    /// Writes `O = acc / l` and `L = m + ln(l)` for every row that saw a key.
    fn finish(self, o: ArrayViewMut2<f32>, lse: ArrayViewMut1<f32>) {
        // TODO
        todo!("exercise 03: RunningState::finish")
    }
}
