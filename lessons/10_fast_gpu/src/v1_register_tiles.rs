//! Version 1: register micro-tiles (f32). Each thread computes a 4 x 4 block of the score tile,
//! so every number it reads from workgroup memory feeds 8 multiply-adds instead of 1
//! (`v1_register_tiles.wgsl` says how, and what it measured).

use gpu::GpuError;
use gpu::kernel::Checks;
use reference::{About, AttentionError, AttentionShape, Device};

use crate::{LeaveOut, Shader, TileShape, Version};

/// Version 1's WGSL source.
pub const SOURCE: &str = include_str!("v1_register_tiles.wgsl");

/// Version 1.
pub struct V1;

/// How version 1 divides the work: `ROW_GROUPS` groups of 8 threads, each thread 4 query rows
/// and `KEYS_PER_THREAD` keys of every tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterTiles {
    /// Groups of 8 threads that share 4 query rows: `BLOCK_Q = 4 * row_groups`.
    pub row_groups: usize,
    /// Keys of a tile per thread: 4 or 2. `BLOCK_KV = 8 * keys_per_thread`.
    pub keys_per_thread: usize,
}

impl RegisterTiles {
    /// Keys per tile.
    pub fn block_kv(&self) -> usize {
        8 * self.keys_per_thread
    }

    /// Threads per workgroup.
    pub fn threads(&self) -> usize {
        8 * self.row_groups
    }

    /// Loop iterations one thread runs at most, counted the way lavapipe counts them (every
    /// trip of every loop, nested ones included, plus one final test per loop run): an upper
    /// bound, so that a problem lavapipe would cut off is refused (see
    /// [`gpu::kernel::LAVAPIPE_LOOP_LIMIT`]).
    pub fn loop_iterations(&self, shape: &AttentionShape) -> u64 {
        let (chunks, keys, threads) =
            (shape.head_dim.div_ceil(4), self.keys_per_thread, self.threads());
        let out_chunks = chunks.div_ceil(8);
        let staging = (self.block_kv() * chunks).div_ceil(threads) + 1;
        let scores = (chunks + 1) * (keys + 1 + 5 * (keys + 1)) + 17;
        let softmax = 5 * (keys + 1) + 5 * (9 + out_chunks + 1 + keys + 1);
        let values = (self.block_kv() / 4 + 1) * (5 + (out_chunks + 1) * 5);
        let per_tile = 1 + 2 * staging + scores + softmax + values;
        let setup = (self.block_q() * chunks).div_ceil(threads) + 1 + 5 * 9 + 5 * 9 + 5 * 9;
        (shape.kv_len.div_ceil(self.block_kv()) * per_tile + setup) as u64
    }
}

impl TileShape for RegisterTiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        4 * self.row_groups
    }

    /// Bytes of workgroup memory at head dimension `head_dim`: the query rows, one tile of
    /// keys (K, then V, rows padded to an odd number of vec4s), P, and one number per thread
    /// and row for the exchanges of maxima and sums.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let chunks = head_dim.div_ceil(4);
        let vec4 = 16;
        let queries = self.block_q() * chunks * vec4;
        let keys = self.block_kv() * (chunks | 1) * vec4;
        let weights = self.block_q() * self.block_kv() * 4;
        let parts = self.block_q() * 8 * 4;
        queries + keys + weights + parts
    }
}

impl Version for V1 {
    type Tiles = RegisterTiles;
    const NUMBER: u32 = 1;
    const ROW_ALIGNMENT: usize = 4;

    fn about() -> About {
        About::forward(
            "v1 register tiles",
            env!("CARGO_PKG_NAME"),
            Device::Gpu,
            "each thread a 4 x 4 block of scores: 8 multiply-adds per number read, not 1",
        )
    }

    fn requires() -> wgpu::Features {
        wgpu::Features::empty()
    }

    /// The largest tiles first: 64 query rows and 32 keys where the workgroup memory allows
    /// (48 KiB on an H100 at D = 64), fewer rows, then 16 keys, where it does not (lavapipe
    /// offers 32 KiB).
    fn preferred(_head_dim: usize) -> Vec<RegisterTiles> {
        let shapes = [4, 2].into_iter().flat_map(|keys_per_thread| {
            [16, 8, 4, 2, 1].map(|row_groups| RegisterTiles { row_groups, keys_per_thread })
        });
        shapes.collect()
    }

    fn tried(head_dim: usize) -> Vec<RegisterTiles> {
        Self::preferred(head_dim)
    }

    /// A workgroup of `8 * row_groups` threads, at most the device's limit.
    fn check(
        tiles: &RegisterTiles,
        device: &wgpu::Device,
        _head_dim: usize,
    ) -> Result<(), AttentionError> {
        let limit = device.limits().max_compute_invocations_per_workgroup as usize;
        if tiles.threads() > limit {
            return Err(GpuError::ExceedsDeviceLimit {
                what: format!("v1 register tiles: {tiles:?}"),
                needed: tiles.threads() as u64,
                limit: limit as u64,
                limit_name: "max_compute_invocations_per_workgroup",
            }
            .into());
        }
        Ok(())
    }

    /// Its overrides set, wgpu's run-time checks on.
    fn shader(
        tiles: &RegisterTiles,
        head_dim: usize,
        _leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        let overrides = vec![
            ("HEAD_DIM", head_dim as f64),
            ("ROW_GROUPS", tiles.row_groups as f64),
            ("KEYS_PER_THREAD", tiles.keys_per_thread as f64),
        ];
        Ok(Shader { source: SOURCE.into(), overrides, checks: Checks::On })
    }

    fn describe(tiles: &RegisterTiles) -> String {
        format!("v1 {} rows, {} keys", tiles.block_q(), tiles.block_kv())
    }

    /// Rows are padded to `vec4`s in memory; the shader takes the head dim as it is.
    fn compiled_head_dim(head_dim: usize) -> usize {
        head_dim
    }

    fn loop_iterations(tiles: &RegisterTiles, shape: &AttentionShape) -> u64 {
        tiles.loop_iterations(shape)
    }
}
