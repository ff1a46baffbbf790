//! # Exercise 04: causal tiles and FlashAttention-1's loop order, then a window's IO
//!
//! Warm-up: decide what the causal mask does to a tile pair, and write FlashAttention-1
//! (outer loop over K/V tiles, inner loop over Q tiles) on the two-level memory of lesson 04,
//! which counts every byte you move.
//! Main task: count, without running anything, the bytes FlashAttention-2 moves with a
//! sliding window. The tasks, the contract and hints are in this folder's README.md; the
//! book's chapter 4 explains the ideas.
//!
//! Check your work with `cargo test -p ex04 --test visible` and `cargo grade ex04`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports, unused_mut)]

use std::ops::Range;

use lesson03::{TileKind, TileSizes, mask_future_keys};
use lesson04::{Run, TileCounts, Traffic, TwoLevelMemory, tile_ranges, working_set_bytes};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array3, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Window,
    check_inputs,
};

/// What the causal mask does to the tile pair `query_rows x keys`: `Full` (every row sees
/// every key, or there is no mask), `Masked` (some entries are hidden) or `Skipped` (no row
/// sees any key).
pub fn classify_tile(
    shape: &AttentionShape,
    causal: bool,
    query_rows: Range<usize>,
    keys: Range<usize>,
) -> TileKind {
    // TODO: row i sees keys 0..shape.visible_keys(i, true), a prefix that grows with i.
    //       Which row of the tile sees the fewest keys? Which sees the most?
    todo!("exercise 04: classify_tile")
}

/// FlashAttention-1 forward on a `TwoLevelMemory::new(fast_bytes)`: returns `O`, `L`, the
/// bytes moved and the tile counts.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
    fast_bytes: usize,
) -> Result<Run, AttentionError> {
    // TODO 1: validate (check_inputs); clamp the tiles (tiles.fitted_to(&shape)); create the
    //         memory and reserve working_set_bytes(tiles, D) in it.
    // TODO 2: slow memory: O = 0 (AttentionOutput::empty), m = -inf and l = 0 for every row.
    // TODO 3: for every batch and head, for each K/V tile (load K_j and V_j once):
    //           for each Q tile: classify and count (TileCounts::add); skip Skipped pairs
    //           without loading anything; else load Q_i, O_i, m_i, l_i; S = scale Q_i K_jᵀ;
    //           mask Masked tiles (mask_future_keys); merge each row into O_i, m_i, l_i
    //           (O_i stays normalised); store O_i, m_i, l_i.
    // TODO 4: per Q tile, load m and l and store L = m + ln(l) (-inf where l = 0).
    // Move slow-memory data only with mem.load and mem.store, so that every byte is counted.
    todo!("exercise 04: FlashAttention-1")
}

/// Main task: the bytes FlashAttention-2 (outer loop over query tiles, chapter 3's order)
/// reads and writes with a sliding window `window` (and the causal mask if `causal`), tiles
/// `Br x Bc` clamped to the problem as `tiles.fitted_to(shape)` does, 4-byte numbers:
///
/// * per query tile: its rows of `Q` read once, its rows of `O` and `L` written once (even if
///   no row of it sees a key);
/// * per (query tile, key tile) pair in which some row sees some key: that key tile's `K` and
///   `V` read; other pairs are never loaded.
///
/// For every batch and head of `shape`. Counted from the shape alone: run nothing.
pub fn window_traffic(
    shape: &AttentionShape,
    causal: bool,
    window: Window,
    tiles: TileSizes,
) -> Traffic {
    // TODO 1: which keys does a row see? Which key tiles does a query tile load?
    // TODO 2: add up the bytes per query tile, then for every batch and head.
    todo!("exercise 04, main task: a window's IO")
}
