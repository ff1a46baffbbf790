//! # Lesson 04 — causal masking, loop order, and IO complexity
//!
//! Three attention algorithms, each computing real attention on a simulated two-level memory
//! ([`memory::TwoLevelMemory`]) that counts every byte moved between slow memory (HBM) and
//! fast memory (SRAM) of `M` bytes:
//!
//! * [`naive`]: standard attention. `S` and `P` are written to slow memory and read back:
//!   $\Theta(N d + N^2)$ bytes.
//! * [`flash1`]: FlashAttention-1's loop order. The **outer** loop runs over K/V tiles, so the
//!   output `O` and the statistics `m`, `l` of every query row go back to slow memory after
//!   each K/V tile and are read again for the next: $\Theta(N^2 d^2 / M)$.
//! * [`flash2`]: FlashAttention-2's loop order (lesson 03's algorithm). The outer loop runs
//!   over Q tiles, whose state stays in fast memory until it is finished: also
//!   $\Theta(N^2 d^2 / M)$, with a smaller constant, and no rereading of `O`.
//!
//! With `causal`, the flash algorithms skip tiles that lie wholly in the future and mask only
//! tiles on the diagonal; every run reports how many tiles were computed, masked and skipped.

use std::ops::Range;

use lesson03::TileSizes;
use ndarray::{Array1, Array2};
use reference::{AttentionError, AttentionOutput};

pub mod flash1;
pub mod flash2;
pub mod memory;
pub mod naive;

pub use memory::{Traffic, TwoLevelMemory};

/// What one run of an algorithm produced and cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// `O` and `L`, as every stage returns them.
    pub output: AttentionOutput<f32>,
    /// Bytes moved between slow and fast memory.
    pub traffic: Traffic,
    /// How the (query tile, key tile) pairs were handled.
    pub tiles: TileCounts,
}

/// How many (query tile, key tile) pairs were computed without a mask, computed with a mask,
/// or skipped without being read, summed over every batch and head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileCounts {
    /// Computed, no mask needed.
    pub full: usize,
    /// Computed, then masked (tiles on the diagonal).
    pub masked: usize,
    /// Never loaded: no row of the query tile sees any key of the key tile.
    pub skipped: usize,
}

impl TileCounts {
    /// Counts one tile pair of `kind`.
    pub fn add(&mut self, kind: lesson03::TileKind) {
        match kind {
            lesson03::TileKind::Full => self.full += 1,
            lesson03::TileKind::Masked => self.masked += 1,
            lesson03::TileKind::Skipped => self.skipped += 1,
        }
    }
}

// ANCHOR: working_set
/// Bytes of fast memory the algorithms keep for tiles of `Br x Bc` and head dimension `d`:
/// a Q tile and an output tile (`Br x d` each), a K and a V tile (`Bc x d` each), a tile of
/// scores (`Br x Bc`) and the row statistics `m`, `l` (`Br` each), all f32.
/// (Saturating at `usize::MAX` for absurd sizes, which then fit no memory.)
pub fn working_set_bytes(tiles: TileSizes, head_dim: usize) -> usize {
    let (br, bc, d) = (tiles.query_rows() as u128, tiles.key_cols() as u128, head_dim as u128);
    let bytes = (2 * br * d + 2 * bc * d + br * bc + 2 * br) * size_of::<f32>() as u128;
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The buffers every algorithm of this lesson keeps in fast memory, reserved in one place so
/// that all three have the same working set, [`working_set_bytes`].
pub struct FastBuffers {
    /// A tile of `Q`, `[Br, D]`.
    pub q: Array2<f32>,
    /// A tile of the output, `[Br, D]`.
    pub o: Array2<f32>,
    /// A tile of `K`, `[Bc, D]`.
    pub k: Array2<f32>,
    /// A tile of `V`, `[Bc, D]`.
    pub v: Array2<f32>,
    /// A tile of scores or probabilities, `[Br, Bc]`.
    pub scores: Array2<f32>,
    /// Row statistics `m` (or a tile of `L`), `[Br]`.
    pub m: Array1<f32>,
    /// Row statistics `l`, `[Br]`.
    pub l: Array1<f32>,
}

impl FastBuffers {
    /// Reserves the working set in `mem`'s fast memory (an error if it does not fit) and makes
    /// the buffers.
    pub fn reserve(
        mem: &mut TwoLevelMemory,
        tiles: TileSizes,
        head_dim: usize,
    ) -> Result<Self, AttentionError> {
        mem.reserve(working_set_bytes(tiles, head_dim))?;
        let (br, bc, d) = (tiles.query_rows(), tiles.key_cols(), head_dim);
        Ok(Self {
            q: Array2::zeros((br, d)),
            o: Array2::zeros((br, d)),
            k: Array2::zeros((bc, d)),
            v: Array2::zeros((bc, d)),
            scores: Array2::zeros((br, bc)),
            m: Array1::zeros(br),
            l: Array1::zeros(br),
        })
    }
}
// ANCHOR_END: working_set

/// The largest square tiles (`Br = Bc`) whose working set fits in `fast_bytes`, found by
/// bisection, so it returns at once for any memory size (`usize::MAX` means "no limit"; a
/// stage then clamps the tiles to its problem with [`TileSizes::fitted_to`]).
pub fn tiles_for_fast_memory(
    fast_bytes: usize,
    head_dim: usize,
) -> Result<TileSizes, AttentionError> {
    let fits = |b: usize| {
        let bytes = working_set_bytes(TileSizes::new(b, b).expect("b >= 1"), head_dim);
        bytes < usize::MAX && bytes <= fast_bytes
    };
    if !fits(1) {
        let needed = working_set_bytes(TileSizes::new(1, 1)?, head_dim);
        return Err(AttentionError::TilesDoNotFit { needed, available: fast_bytes });
    }
    // fits(low) holds and fits(high) does not: for a side above sqrt(usize::MAX), b * b alone
    // is more bytes than any memory.
    let (mut low, mut high) = (1usize, usize::MAX.isqrt() + 1);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) { low = middle } else { high = middle }
    }
    TileSizes::new(low, low)
}

/// `0..n` cut into ranges of `size` (the last one shorter if `size` does not divide `n`).
pub fn tile_ranges(n: usize, size: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n).step_by(size).map(move |start| start..(start + size).min(n))
}

/// FlashAttention-1's loop order, for the course's registry (the naive and FlashAttention-2
/// walks of this lesson compute what lessons 01 and 03 do; they are here to count traffic).
pub fn versions() -> Vec<reference::ForwardVersion> {
    use reference::{About, Device, ForwardVersion};
    let about = About::forward(
        "FlashAttention-1 loop order",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "the outer loop over key tiles: O, m and l of every row read and written per key tile",
    );
    let tiles = TileSizes::default();
    vec![ForwardVersion::new(about, move |q: &_, k: &_, v: &_, options: &_| {
        // Fast memory is no limit here: the registry compares results, not traffic.
        flash1::attention(q, k, v, options, tiles, usize::MAX).map(|run| run.output)
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_ranges_cover_everything_once() {
        let ranges: Vec<_> = tile_ranges(10, 4).collect();
        assert_eq!(ranges, vec![0..4, 4..8, 8..10]);
        assert_eq!(tile_ranges(3, 8).collect::<Vec<_>>(), vec![0..3]);
    }

    #[test]
    fn largest_square_tiles_that_fit() {
        // d = 64, B = 32: (2*32*64 + 2*32*64 + 32*32 + 2*32) * 4 = 9280 * 4 = 37120 bytes.
        let tiles = TileSizes::new(32, 32).unwrap();
        assert_eq!(working_set_bytes(tiles, 64), 37_120);
        assert_eq!(tiles_for_fast_memory(37_120, 64).unwrap(), tiles);
        assert_eq!(tiles_for_fast_memory(37_119, 64).unwrap(), TileSizes::new(31, 31).unwrap());
        assert!(matches!(
            tiles_for_fast_memory(100, 64),
            Err(AttentionError::TilesDoNotFit { .. })
        ));
    }

    #[test]
    fn any_memory_size_gives_an_answer_at_once() {
        // "No limit": the largest square whose working set fits in usize::MAX bytes.
        let tiles = tiles_for_fast_memory(usize::MAX, 64).unwrap();
        let b = tiles.query_rows() as u128;
        assert!((4 * b * 64 + b * b + 2 * b) * 4 <= usize::MAX as u128);
        assert!(tiles_for_fast_memory(usize::MAX, usize::MAX).is_err());
    }
}
