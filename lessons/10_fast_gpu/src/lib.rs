//! # Lesson 10 — FlashAttention in WGSL as fast as the GPU allows
//!
//! Lesson 09's kernel is right but slow: one thread per query row, one multiply-add per number
//! read from workgroup memory. This lesson makes it fast in numbered versions, in the manner of
//! llm.c's `dev/cuda`: each version is one WGSL file whose header says what it changes from
//! the one before, why, and what that measured on an H100/H200. All of them compute lesson
//! 03's algorithm (FlashAttention-2's loop order, online softmax, `O` normalised once) and are
//! checked against the same f64 oracle.
//!
//! | version | file | what it adds |
//! |---|---|---|
//! | 1 | `v1_register_tiles.wgsl` | register micro-tiles: a 4 x 4 block of scores per thread, exp2, masks only where needed |
//! | 2 | `v2_tensor_cores.wgsl` | tensor cores (WGSL cooperative matrices): f16 inputs, f32 sums, lazy rescale |
//! | 3 | `v2_tensor_cores.wgsl` | the same shader without wgpu's run-time bounds checks |
//! | 4 | `v4_specialised.wgsl` | constants instead of overrides, 32 rows per subgroup, prefetch |
//! | 5 | `v5_pipelined.wgsl` | software pipelining: products of one tile beside the softmax of the next, two barriers per tile |
//! | 6 | `v6_registers.wgsl` | loops over fragments unrolled by the host ([`gpu::wgsl::unroll`]): every fragment in registers |
//! | 7 | `v7_f32_registers.wgsl` | version 1 (f32) with version 6's constants and unrolling, subgroup shuffles, prefetch |
//! | 8 | `v8_arena.wgsl` | version 6 with K, V and P in one f16 arena: 8 subgroups of 16 rows fit; K and V read where staged |
//! | 9 | `v9_overlap.wgsl` | version 8 with the next tile's scores computed in the phase of this tile's softmax |
//! | 10 | `v10_pairs.wgsl` | version 9 with subgroups in pairs on 32 rows: each fragment of K and V serves 32 rows |
//!
//! Every version runs through [`Kernel`], which compiles a version's shader for one head
//! dimension and tile size and implements the course's [`AttentionKernel`], so the tests,
//! the registry and the benchmark treat them all alike.

pub mod features;
use gpu::GpuError;
use gpu::attention::{AttentionBuffers, AttentionKernel, Built, KernelVersion, boxed};
use gpu::kernel::{
    Checks, Dispatch, bind, check_loop_iterations, compile, compile_with_checks, workgroup_count,
};
use gpu::wgsl::{specialise, unroll};
use ndarray::Array4;
use reference::{
    About, AttentionError, AttentionOptions, AttentionOutput, AttentionShape, Device, Storage,
    Tolerance,
};

/// Version 1's WGSL source.
pub const V1_REGISTER_TILES: &str = include_str!("v1_register_tiles.wgsl");

/// Version 2's WGSL source.
pub const V2_TENSOR_CORES: &str = include_str!("v2_tensor_cores.wgsl");

/// Version 4's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V4_SPECIALISED: &str = include_str!("v4_specialised.wgsl");

/// Version 5's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V5_PIPELINED: &str = include_str!("v5_pipelined.wgsl");

/// Version 6's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V6_REGISTERS: &str = include_str!("v6_registers.wgsl");

/// Version 7's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V7_F32_REGISTERS: &str = include_str!("v7_f32_registers.wgsl");

/// Version 8's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V8_ARENA: &str = include_str!("v8_arena.wgsl");

/// Version 9's WGSL source (its constants set by [`gpu::wgsl::specialise`]; version 8's tiles).
pub const V9_OVERLAP: &str = include_str!("v9_overlap.wgsl");

/// Version 10's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const V10_PAIRS: &str = include_str!("v10_pairs.wgsl");

/// Version 11's WGSL: f32 inputs, each split into two f16s for the tensor cores.
pub const V11_SPLIT_F32: &str = include_str!("v11_split_f32.wgsl");

/// Largest head dimension (`MAX_OUT_CHUNKS` and `MAX_FRAGMENTS` in the shaders).
pub const MAX_HEAD_DIM: usize = 256;

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
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        4 * self.row_groups
    }

    /// Keys per tile.
    pub fn block_kv(&self) -> usize {
        8 * self.keys_per_thread
    }

    /// Threads per workgroup.
    pub fn threads(&self) -> usize {
        8 * self.row_groups
    }

    /// Bytes of workgroup memory at head dimension `head_dim`: the query rows, one tile of
    /// keys (K, then V, rows padded to an odd number of vec4s), P, and one number per thread
    /// and row for the exchanges of maxima and sums.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let chunks = head_dim.div_ceil(4);
        let vec4 = 16;
        let queries = self.block_q() * chunks * vec4;
        let keys = self.block_kv() * (chunks | 1) * vec4;
        let weights = self.block_q() * self.block_kv() * 4;
        let parts = self.block_q() * 8 * 4;
        queries + keys + weights + parts
    }

    /// The largest tiles that fit `device` at `head_dim`: 64 query rows and 32 keys where the
    /// workgroup memory allows (48 KiB on an H100 at D = 64), fewer rows, then 16 keys,
    /// where it does not (lavapipe offers 32 KiB).
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let limits = device.limits();
        let available = limits.max_compute_workgroup_storage_size as usize;
        let threads = limits.max_compute_invocations_per_workgroup as usize;
        let candidates = [4, 2].into_iter().flat_map(|keys_per_thread| {
            [16, 8, 4, 2, 1].map(|row_groups| RegisterTiles { row_groups, keys_per_thread })
        });
        let mut fitting = candidates
            .filter(|t| t.threads() <= threads && t.workgroup_bytes(head_dim) <= available);
        fitting.next().ok_or_else(|| {
            let smallest = RegisterTiles { row_groups: 1, keys_per_thread: 2 };
            AttentionError::TilesDoNotFit { needed: smallest.workgroup_bytes(head_dim), available }
        })
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

/// Version 7's shape of work, written into its source as constants: version 1's groups of 8
/// threads sharing query rows (4 or 8 per thread), and whether the next tile of K and V is prefetched into
/// registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32Tiles {
    /// Groups of 8 threads that share query rows: 1 to 16.
    pub row_groups: usize,
    /// Query rows per thread (and per group): 4 or 8. `BLOCK_Q = rows_per_thread * row_groups`.
    pub rows_per_thread: usize,
    /// Keys of a tile per thread: 1, 2 or 4. `BLOCK_KV = 8 * keys_per_thread`.
    pub keys_per_thread: usize,
    /// Whether each thread reads its share of the next tile into registers during this one.
    pub prefetch: bool,
}

impl F32Tiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        self.rows_per_thread * self.row_groups
    }

    /// Keys per tile.
    pub fn block_kv(&self) -> usize {
        8 * self.keys_per_thread
    }

    /// Threads per workgroup.
    pub fn threads(&self) -> usize {
        8 * self.row_groups
    }

    /// Bytes of workgroup memory at `head_dim`: the query rows, a tile of K and one of V (rows
    /// padded to an odd number of vec4s), and P.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let chunks = head_dim.div_ceil(4);
        let vec4 = 16;
        let queries = self.block_q() * chunks * vec4;
        let keys_and_values = 2 * self.block_kv() * (chunks | 1) * vec4;
        queries + keys_and_values + self.block_q() * self.block_kv() * 4
    }

    /// vec4s of K (and as many of V) that each thread holds when it prefetches.
    pub fn staged_per_thread(&self, head_dim: usize) -> usize {
        (self.block_kv() * head_dim.div_ceil(4)).div_ceil(self.threads())
    }

    /// Every tile shape the tests check and the tuning example times at `head_dim`, the
    /// preferred first: large tiles; prefetch only where each thread holds at most 8 vec4s of
    /// K and 8 of V (more would crowd out the scores and O).
    pub fn tried(head_dim: usize) -> Vec<Self> {
        let shapes = [
            (16, 4, 4),
            (8, 8, 4),
            (8, 4, 4),
            (4, 8, 4),
            (16, 4, 2),
            (8, 8, 2),
            (8, 4, 2),
            (4, 4, 4),
            (4, 4, 2),
            (2, 4, 2),
            (16, 4, 1),
            (8, 8, 1),
            (4, 4, 1),
            (1, 4, 1),
        ];
        let mut all = Vec::new();
        for (row_groups, rows_per_thread, keys_per_thread) in shapes {
            let tiles = F32Tiles { row_groups, rows_per_thread, keys_per_thread, prefetch: true };
            if tiles.staged_per_thread(head_dim) <= 8 {
                all.push(tiles);
            }
            all.push(F32Tiles { prefetch: false, ..tiles });
        }
        all
    }

    /// The first of [`F32Tiles::tried`] that fits `device` at `head_dim`: in its workgroup
    /// memory, and in whole subgroups ([`F32Tiles::check_subgroups`]).
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let mut tried = Self::tried(head_dim);
        tried.retain(|t| t.check_subgroups(device).is_ok());
        first_that_fits(device, &tried, |t| t.workgroup_bytes(head_dim))
    }

    /// Whether `device`'s subgroups tile a workgroup exactly, each holding whole groups of 8
    /// threads (the shuffles of a row stay within one subgroup): a subgroup size that is a
    /// multiple of 8 and divides the number of threads.
    pub fn check_subgroups(&self, device: &wgpu::Device) -> Result<(), AttentionError> {
        if !device.features().contains(wgpu::Features::SUBGROUP) {
            let feature = "SUBGROUP";
            return Err(GpuError::MissingFeature { feature, needed_for: "v7 f32 registers" }.into());
        }
        let info = device.adapter_info();
        self.fits_subgroups(info.subgroup_min_size as usize, info.subgroup_max_size as usize)
    }

    /// Whether subgroups of `smallest` to `largest` threads (powers of two) tile a workgroup
    /// exactly, each holding whole groups of 8 threads.
    pub fn fits_subgroups(&self, smallest: usize, largest: usize) -> Result<(), AttentionError> {
        if smallest < 8 || !smallest.is_power_of_two() || !self.threads().is_multiple_of(largest) {
            return Err(GpuError::KernelMisuse(format!(
                "v7 f32 registers: {} threads per workgroup in subgroups of {smallest} to \
                 {largest}; expected subgroups of at least 8 threads (a power of two) that \
                 divide the workgroup",
                self.threads()
            ))
            .into());
        }
        Ok(())
    }

    /// Whether version 7 accepts these tiles: 1 to 16 row groups, a power of two, 4 or 8
    /// rows and 1, 2 or 4 keys per thread.
    pub fn check(&self) -> Result<(), AttentionError> {
        let sensible = [1, 2, 4, 8, 16].contains(&self.row_groups)
            && [4, 8].contains(&self.rows_per_thread)
            && [1, 2, 4].contains(&self.keys_per_thread);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v7 f32 registers: {self:?}; expected 1, 2, 4, 8 or 16 row groups, 4 or 8 \
                 rows and 1, 2 or 4 keys per thread"
            ))
            .into());
        }
        Ok(())
    }

    /// Version 7's source for these tiles at `head_dim`: its constants set, its marked loops
    /// unrolled ([`gpu::wgsl::unroll`]).
    pub fn source(&self, head_dim: usize) -> Result<String, AttentionError> {
        self.source_from(V7_F32_REGISTERS, head_dim)
    }

    /// `template` (version 7's source, or exercise 10's) for these tiles at `head_dim`.
    pub fn source_from(&self, template: &str, head_dim: usize) -> Result<String, AttentionError> {
        let constants = [
            ("HEAD_DIM", head_dim),
            ("ROW_GROUPS", self.row_groups),
            ("ROWS_PER_THREAD", self.rows_per_thread),
            ("KEYS_PER_THREAD", self.keys_per_thread),
            ("PREFETCH", self.prefetch as usize),
        ];
        unroll(&specialise(template, &constants)?)
    }

    /// Loop iterations one thread runs at most, counted as [`RegisterTiles::loop_iterations`]
    /// counts them; the unrolled loops are no loops any more.
    pub fn loop_iterations(&self, shape: &AttentionShape) -> u64 {
        let chunks = shape.head_dim.div_ceil(4);
        let staging = if self.prefetch {
            0
        } else {
            2 * ((self.block_kv() * chunks).div_ceil(self.threads()) + 1)
        };
        let per_tile = 1 + staging + (chunks + 1) + (self.block_kv() / 4 + 1);
        let setup = (self.block_q() * chunks).div_ceil(self.threads()) + 2;
        (shape.kv_len.div_ceil(self.block_kv()) * per_tile + setup) as u64
    }
}

/// Version 2's tiles: 64 query rows (4 subgroups of 16) and `block_kv` keys per tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorCoreTiles {
    /// Keys per tile: 64, or 32 where 64 would not fit in workgroup memory (D >= 128).
    pub block_kv: usize,
}

impl TensorCoreTiles {
    /// Query rows per workgroup: 16 per subgroup, 4 subgroups.
    pub const BLOCK_Q: usize = 64;

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): K and V in f16 (rows of
    /// D + 8 halves), S in f32 and P in f16 (rows padded by 4 and 8), a rescale factor per
    /// row and a flag (16 bytes).
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (Self::BLOCK_Q, self.block_kv);
        2 * keys * (head_dim + 8) * 2
            + rows * (keys + 4) * 4
            + rows * (keys + 8) * 2
            + rows * 4
            + 16
    }

    /// 64 keys per tile where they fit on `device` at `head_dim`, else 32.
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let candidates = [64, 32].map(|block_kv| TensorCoreTiles { block_kv });
        first_that_fits(device, &candidates, |t| t.workgroup_bytes(head_dim))
    }
}

/// The first of `candidates` (best first, smallest last) whose workgroup memory, `bytes`, fits
/// `device`; if none does, the error says what the smallest needs.
fn first_that_fits<T: Copy>(
    device: &wgpu::Device,
    candidates: &[T],
    bytes: impl Fn(&T) -> usize,
) -> Result<T, AttentionError> {
    let available = device.limits().max_compute_workgroup_storage_size as usize;
    let fits = candidates.iter().find(|t| bytes(t) <= available);
    fits.copied().ok_or_else(|| {
        let needed = candidates.last().map_or(0, &bytes);
        AttentionError::TilesDoNotFit { needed, available }
    })
}

/// Version 4's shape of work, written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialisedTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2 (two feed each K or V fragment to two products).
    pub row_tiles: usize,
    /// Keys per tile: 32 or 64.
    pub block_kv: usize,
    /// Whether the next tile of K and V is read into registers during this one.
    pub prefetch: bool,
}

impl SpecialisedTiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): Q, or K and V, in f16 (rows
    /// of D + 8 halves), S in f32 and P in f16 (rows padded by 4 and 8), a rescale factor per
    /// row and a flag (16 bytes).
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let kv_rows = (2 * keys).max(rows);
        kv_rows * (head_dim + 8) * 2 + rows * (keys + 4) * 4 + rows * (keys + 8) * 2 + rows * 4 + 16
    }

    /// The tiles measured fastest on an H100 at `head_dim` (lab/src/bin/tune.rs, 2026-11-25),
    /// then smaller ones, the first that fits `device`.
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let tiles = |subgroups, row_tiles, block_kv, prefetch| SpecialisedTiles {
            subgroups,
            row_tiles,
            block_kv,
            prefetch,
        };
        let candidates = if head_dim <= 64 {
            vec![tiles(4, 2, 32, true), tiles(4, 1, 64, true), tiles(4, 1, 32, true)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32, true), tiles(2, 1, 32, true)]
        } else {
            vec![tiles(4, 1, 32, false), tiles(2, 1, 32, false), tiles(1, 1, 32, false)]
        };
        first_that_fits(device, &candidates, |t| t.workgroup_bytes(head_dim))
    }

    /// Every tile shape the tuning example times and the tests check at `head_dim`: each
    /// knob changed one at a time around a few starting points (two row tiles only up to
    /// D = 128: beyond, their fragments would not fit in 255 registers).
    pub fn tried(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv, prefetch| SpecialisedTiles {
            subgroups,
            row_tiles,
            block_kv,
            prefetch,
        };
        let mut all = vec![
            tiles(4, 1, 64, true),
            tiles(4, 1, 32, true),
            tiles(4, 1, 32, false),
            tiles(4, 2, 32, false),
            tiles(4, 2, 32, true),
            tiles(8, 1, 32, true),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    /// The constants [`gpu::wgsl::specialise`] writes into version 4's source.
    pub fn constants(&self, head_dim: usize) -> [(&'static str, usize); 5] {
        [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("PREFETCH", self.prefetch as usize),
        ]
    }
}

/// Version 5's shape of work, written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelinedTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2.
    pub row_tiles: usize,
    /// Keys per tile: 16, 32 or 64.
    pub block_kv: usize,
    /// V staged as `V^T`, which the tensor cores read as a column-major operand.
    pub transpose_v: bool,
}

/// Parts of version 5's, 6's or 10's work left out, to measure what each costs
/// (lab/src/bin/tune.rs); any but [`LeaveOut::NOTHING`] gives a wrong answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaveOut(pub u32);

impl LeaveOut {
    /// The kernel as registered.
    pub const NOTHING: Self = Self(0);
    /// No reads of S, no exponentials, no writes of P.
    pub const SOFTMAX: Self = Self(1);
    /// No `S = Q K^T` on the tensor cores (zeros are stored as S).
    pub const SCORES: Self = Self(2);
    /// No `O += P V`.
    pub const VALUES: Self = Self(4);
    /// S is not stored to workgroup memory (the store stays behind a condition that never
    /// holds, so that the compiler keeps `S = Q K^T`, which nothing else reads).
    pub const STORE_S: Self = Self(8);
    /// No K or V read from global memory or staged in workgroup memory.
    pub const STAGING: Self = Self(16);

    /// O is never rescaled (version 6 only).
    pub const RESCALE: Self = Self(32);
    /// O and L are never written (version 6 only).
    pub const OUTPUT: Self = Self(64);
    /// K and V staged as zeros, never read from memory (versions 6 and 10).
    pub const LOADS: Self = Self(128);
    /// K and V read from memory, never stored to workgroup memory (version 6 only).
    pub const STASH: Self = Self(256);

    /// The parts version 10 can leave out: the softmax, either product, the store of S and
    /// the loads of K and V.
    pub const IN_VERSION_10: Self = Self(1 | 2 | 4 | 8 | 128);

    /// Both parts left out.
    pub fn and(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl PipelinedTiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): K and V of a tile, or Q
    /// before the loop, in f16 (rows of D + 8 halves); S in f32 (rows padded by 4 floats per
    /// lane that reads a row); P in f16 (rows padded by 8); a rescale factor per row; a flag.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let lanes_per_row = 32 / (16 * self.row_tiles);
        let row = (head_dim + 8) * 2;
        let values = if self.transpose_v { head_dim * (keys + 8) * 2 } else { keys * row };
        (keys * row + values).max(rows * row)
            + rows * (keys + 4 * lanes_per_row) * 4
            + rows * (keys + 8) * 2
            + rows * 4
            + 16
    }

    /// The tiles measured fastest on an H100 at `head_dim` (lab/src/bin/tune.rs, 2026-11-25),
    /// then smaller ones, the first that fits `device`.
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        first_that_fits(device, &Self::preferred(head_dim), |t| t.workgroup_bytes(head_dim))
    }

    /// The tiles to try at `head_dim`, best first.
    fn preferred(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv| PipelinedTiles {
            subgroups,
            row_tiles,
            block_kv,
            transpose_v: false,
        };
        if head_dim <= 64 {
            vec![tiles(4, 2, 32), tiles(4, 1, 64), tiles(4, 1, 32)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16), tiles(2, 1, 16)]
        }
    }

    /// Version 6's tiles to try at `head_dim`, best first, as measured on an H100
    /// (2026-11-25, lab/src/bin/tune.rs at N = 16384: 100 TFLOP/s at D = 64, 93 at D = 128).
    fn preferred_in_registers(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv| PipelinedTiles {
            subgroups,
            row_tiles,
            block_kv,
            transpose_v: false,
        };
        if head_dim <= 64 {
            vec![tiles(4, 2, 32), tiles(4, 1, 16)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16), tiles(2, 1, 16)]
        }
    }

    /// Every tile shape the tuning example times and the tests check at `head_dim`.
    pub fn tried(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv| PipelinedTiles {
            subgroups,
            row_tiles,
            block_kv,
            transpose_v: true,
        };
        let mut all = vec![
            PipelinedTiles { transpose_v: false, ..tiles(4, 2, 32) },
            PipelinedTiles { transpose_v: false, ..tiles(4, 1, 32) },
            tiles(4, 2, 32),
            tiles(4, 1, 64),
            tiles(4, 1, 32),
            tiles(4, 1, 16),
            tiles(8, 1, 32),
            tiles(8, 1, 16),
            tiles(4, 2, 16),
            tiles(2, 2, 32),
            tiles(2, 1, 16),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    /// Every tile shape the tuning example times and the tests check for version 6 at
    /// `head_dim` (V is never transposed there).
    pub fn tried_in_registers(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv| PipelinedTiles {
            subgroups,
            row_tiles,
            block_kv,
            transpose_v: false,
        };
        let mut all = vec![
            tiles(4, 1, 64),
            tiles(2, 2, 64),
            tiles(2, 1, 64),
            tiles(4, 2, 32),
            tiles(4, 1, 32),
            tiles(2, 2, 32),
            tiles(8, 1, 32),
            tiles(4, 1, 16),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    /// Version 6's tiles measured fastest on an H100 at `head_dim`, then smaller ones, the
    /// first that fits `device`.
    pub fn for_device_in_registers(
        device: &wgpu::Device,
        head_dim: usize,
    ) -> Result<Self, AttentionError> {
        let candidates = Self::preferred_in_registers(head_dim);
        first_that_fits(device, &candidates, |t| t.workgroup_bytes(head_dim))
    }

    /// Version 6's source for these tiles at `head_dim`: its constants set, its marked loops
    /// unrolled ([`gpu::wgsl::unroll`]).
    pub fn source_in_registers(
        &self,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<String, AttentionError> {
        unroll(&specialise(V6_REGISTERS, &self.constants_in_registers(head_dim, leave_out))?)
    }

    /// The constants [`gpu::wgsl::specialise`] writes into version 6's source.
    pub fn constants_in_registers(
        &self,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> [(&'static str, usize); 5] {
        [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("LEAVE_OUT", leave_out.0 as usize),
        ]
    }

    /// Whether `version` (5 or 6) accepts these tiles at `head_dim` (a multiple of 16).
    pub fn check(&self, version: &str, head_dim: usize) -> Result<(), AttentionError> {
        let (subgroups, row_tiles, block_kv) = (self.subgroups, self.row_tiles, self.block_kv);
        check_subgroup_tiles(version, self, (subgroups, row_tiles, block_kv), head_dim)
    }

    /// The constants [`gpu::wgsl::specialise`] writes into version 5's source.
    pub fn constants(&self, head_dim: usize, leave_out: LeaveOut) -> [(&'static str, usize); 6] {
        [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("TRANSPOSE_V", self.transpose_v as usize),
            ("LEAVE_OUT", leave_out.0 as usize),
        ]
    }
}

/// When version 8 reads each thread's share of the next K and V tiles from global memory.
/// Version 9 reads them where they are staged ([`LoadAt::Staging`]) or, for both other
/// choices, at the start of the phase that stages them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadAt {
    /// Where they are staged, after the softmax: no registers held across the products.
    Staging = 0,
    /// At the start of the products before their staging.
    Products = 1,
    /// A whole tile ahead, as version 6 does.
    TileAhead = 2,
}

impl LoadAt {
    /// How the kernels' names say it (`Tiles::describe`).
    fn phrase(self) -> &'static str {
        match self {
            LoadAt::Staging => "at staging",
            LoadAt::Products => "before products",
            LoadAt::TileAhead => "a tile ahead",
        }
    }
}

/// The order in which a workgroup of versions 8 to 10 reads the tiles of K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// Tile 0, 1, 2, ...: the workgroups of a slice read the same tile at about the same time.
    InOrder = 0,
    /// Workgroup x of a slice, of `query_tiles`, starts at tile `x * spread / query_tiles` of
    /// its `tiles` and wraps around (the shaders' `kv_tile`). Without the causal mask `spread`
    /// is `tiles`, or the tiles in 4 MiB of K and V where a slice's take more (D = 128 at
    /// N = 16384: 178.4 TFLOP/s against 154.3 spread over all 8 MiB, version 10 on an H100,
    /// 2026-11-27); with the mask it is `tiles` (169.4 against 161.4 with the cap there).
    Rotated = 1,
}

impl KeyOrder {
    /// How the kernels' names say it (`Tiles::describe`): nothing for the original order.
    fn phrase(self) -> &'static str {
        match self {
            KeyOrder::InOrder => "",
            KeyOrder::Rotated => ", keys rotated",
        }
    }
}

/// Which query tile of which slice each workgroup of versions 8 to 10 takes (the shaders'
/// `assignment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryOrder {
    /// Workgroup (x, y) of the grid takes query tile x of slice y: with the causal mask the
    /// longest workgroups of each slice are launched last, and the slice launched last ends
    /// the dispatch with its longest.
    AsLaunched,
    /// With the causal mask, the workgroups take the slices in groups of about `workgroups`
    /// workgroups (at least one slice), and in each group the query tiles longest first, the
    /// group's slices in turn: the shortest workgroups end each group and the dispatch. Without
    /// the mask, as launched. With the keys rotated, groups of about two rounds of the
    /// workgroups an H100 holds at once ran fastest with the mask: version 10 at D = 128 (one
    /// workgroup on each of 132 multiprocessors) with 256 at 153.4 TFLOP/s against 146.6 as
    /// launched at N = 4096 and 178.2 against 168.5 at 16384, version 8 at D = 64 (two) with 512
    /// at 139.3 against 124.6 and 159.8 against 154.1 (one tune run each on an H100,
    /// 2026-11-27; the chapter's "Longest first, in groups").
    LongestFirst {
        /// Workgroups in a group: rounded down to whole slices.
        workgroups: usize,
    },
}

impl QueryOrder {
    /// Workgroups in a group, as the shaders' `QUERY_GROUP` takes it: 0 for as launched.
    fn group(self) -> usize {
        match self {
            QueryOrder::AsLaunched => 0,
            QueryOrder::LongestFirst { workgroups } => workgroups,
        }
    }

    /// How the kernels' names say it (`Tiles::describe`): nothing for as launched.
    fn phrase(self) -> String {
        match self {
            QueryOrder::AsLaunched => String::new(),
            QueryOrder::LongestFirst { workgroups } => {
                format!(", longest first in groups of {workgroups}")
            }
        }
    }

    /// Longest first in groups of about two rounds of the workgroups an H100 holds at once,
    /// the groups measured fastest: 132 multiprocessors with `per_multiprocessor` workgroups
    /// on each, so 256 where one workgroup fits a multiprocessor (version 10 at D = 128) and
    /// 512 where two do (version 8's 16-key tiles at D = 64).
    fn two_rounds(per_multiprocessor: usize) -> Self {
        QueryOrder::LongestFirst { workgroups: 256 * per_multiprocessor }
    }

    /// Whether `version` can take this order: groups of at least one workgroup.
    fn check(self, version: &str) -> Result<(), AttentionError> {
        if self == (QueryOrder::LongestFirst { workgroups: 0 }) {
            return Err(GpuError::KernelMisuse(format!(
                "{version}: query tiles longest first in groups of 0 workgroups; expected \
                 groups of 1 or more (or QueryOrder::AsLaunched)"
            ))
            .into());
        }
        Ok(())
    }

    /// Each of `tiles` in the orders tested: keys in order and as launched, keys rotated and
    /// as launched, keys rotated and `longest_first`.
    fn tried<T: Copy>(
        tiles: Vec<T>,
        longest_first: QueryOrder,
        with: impl Fn(T, KeyOrder, QueryOrder) -> T,
    ) -> Vec<T> {
        let orders = [
            (KeyOrder::InOrder, QueryOrder::AsLaunched),
            (KeyOrder::Rotated, QueryOrder::AsLaunched),
            (KeyOrder::Rotated, longest_first),
        ];
        let mut all = Vec::new();
        for (key_order, query_order) in orders {
            all.extend(tiles.iter().map(|&t| with(t, key_order, query_order)));
        }
        all
    }
}

/// Bytes of workgroup memory that versions 8 to 10 declare: the f16 arena of `arena` vec4s,
/// S in f32 (`rows` rows of `s_stride` vec4s), a rescale factor per row and the 16-byte flag.
fn arena_layout_bytes(arena: usize, rows: usize, s_stride: usize) -> usize {
    arena * 8 + rows * s_stride * 16 + rows * 4 + 16
}

/// The tiles of K, V and P together in versions 8 to 10's arena, for `rows` query rows and
/// `keys` keys per tile, in vec4s of halves (the shaders' `KVP`).
fn kvp(rows: usize, keys: usize, head_dim: usize) -> usize {
    let p_stride = keys / 4 + 2;
    2 * keys * ArenaTiles::kv_stride(head_dim) + rows * p_stride
}

/// Version 8's shape of work and its measured choices, written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2.
    pub row_tiles: usize,
    /// Keys per tile: 16, 32 or 64.
    pub block_kv: usize,
    /// Whether Q's fragments stay in registers (else they are read from workgroup memory for
    /// every tile).
    pub q_in_registers: bool,
    /// When the next K and V are read.
    pub load_at: LoadAt,
    /// The order of the tiles of K and V.
    pub key_order: KeyOrder,
    /// Which query tile each workgroup takes.
    pub query_order: QueryOrder,
}

impl ArenaTiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16), as the shader declares it:
    /// the f16 arena (Q where it is kept, K, V and P; at least one pass of Q, see
    /// [`ArenaTiles::query_passes`]), S in f32, a rescale factor per row and the flag.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let lanes_per_row = 32 / (16 * self.row_tiles);
        let kv_stride = Self::kv_stride(head_dim);
        let s_stride = keys / 4 + lanes_per_row;
        let q_kept = if self.q_in_registers { 0 } else { rows * kv_stride };
        let (_, pass_subgroups) = self.query_passes(head_dim);
        let pass_rows = pass_subgroups * 16 * self.row_tiles;
        let arena = (q_kept + self.kvp(head_dim)).max(pass_rows * kv_stride);
        arena_layout_bytes(arena, rows, s_stride)
    }

    /// How Q reaches its registers: `(passes, subgroups per pass)`. With Q in registers, Q
    /// passes through the arena as many subgroups' rows at a time as fit where K, V and P will
    /// be (at least one); kept in the arena, it is staged once.
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let subgroup_rows = 16 * self.row_tiles;
        let per_pass = if self.q_in_registers {
            (self.kvp(head_dim) / (subgroup_rows * Self::kv_stride(head_dim)))
                .clamp(1, self.subgroups)
        } else {
            self.subgroups
        };
        (self.subgroups.div_ceil(per_pass), per_pass)
    }

    /// A row of K, V or Q in the arena, in vec4s of halves: padded by 2 against bank conflicts
    /// (the shader's `KV_STRIDE`).
    fn kv_stride(head_dim: usize) -> usize {
        head_dim / 4 + 2
    }

    /// The tiles of K, V and P together in the arena, in vec4s of halves.
    fn kvp(&self, head_dim: usize) -> usize {
        kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether version 8 accepts these tiles at `head_dim` (a multiple of 16).
    pub fn check(&self, head_dim: usize) -> Result<(), AttentionError> {
        self.check_for("v8 arena", head_dim)
    }

    /// Whether `version` (8 or 9, which take the same tiles) accepts them at `head_dim`.
    fn check_for(&self, version: &str, head_dim: usize) -> Result<(), AttentionError> {
        let (subgroups, row_tiles, block_kv) = (self.subgroups, self.row_tiles, self.block_kv);
        check_subgroup_tiles(version, self, (subgroups, row_tiles, block_kv), head_dim)?;
        self.query_order.check(version)
    }

    /// Version 8's source for these tiles at `head_dim`: its constants set, its marked loops
    /// unrolled ([`gpu::wgsl::unroll`]).
    pub fn source(&self, head_dim: usize) -> Result<String, AttentionError> {
        self.source_from(V8_ARENA, head_dim)
    }

    /// `template` (version 8's or 9's source) for these tiles at `head_dim`.
    pub fn source_from(&self, template: &str, head_dim: usize) -> Result<String, AttentionError> {
        let constants = [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("Q_IN_REGISTERS", self.q_in_registers as usize),
            ("LOAD_AT", self.load_at as usize),
            ("KEY_ORDER", self.key_order as usize),
            ("QUERY_GROUP", self.query_order.group()),
        ];
        unroll(&specialise(template, &constants)?)
    }

    /// Every shape the tests check and the tuning example times at `head_dim`, each with Q's
    /// fragments in registers and read per tile, K and V read where they are staged (the
    /// fastest timing in the fastest shapes, though not in every shape:
    /// [`ArenaTiles::load_choices`]), each in the orders of [`QueryOrder::tried`].
    pub fn tried(head_dim: usize) -> Vec<Self> {
        let mut all = Vec::new();
        for q_in_registers in [true, false] {
            for (subgroups, row_tiles, block_kv) in [
                (8, 1, 32),
                (4, 1, 16),
                (4, 2, 32),
                (4, 1, 32),
                (8, 1, 16),
                (4, 2, 16),
                (4, 1, 64),
                (2, 2, 32),
            ] {
                all.push(ArenaTiles {
                    subgroups,
                    row_tiles,
                    block_kv,
                    q_in_registers,
                    load_at: LoadAt::Staging,
                    key_order: KeyOrder::InOrder,
                    query_order: QueryOrder::AsLaunched,
                });
            }
        }
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        QueryOrder::tried(all, Self::longest_first(head_dim), |t, key_order, query_order| Self {
            key_order,
            query_order,
            ..t
        })
    }

    /// With the causal mask, the query tiles longest first in groups of two rounds
    /// ([`QueryOrder::two_rounds`]): two workgroups on a multiprocessor at D = 64, where
    /// version 8's preferred tiles take 107 registers, one above (the other shapes' counts
    /// are not measured, and version 9's groups were not timed).
    fn longest_first(head_dim: usize) -> QueryOrder {
        QueryOrder::two_rounds(if head_dim <= 64 { 2 } else { 1 })
    }

    /// [`ArenaTiles::tried`] with each of the other times to read K and V: what the tuning
    /// example measured to choose [`LoadAt::Staging`].
    pub fn load_choices(head_dim: usize) -> Vec<Self> {
        let others = [LoadAt::TileAhead, LoadAt::Products];
        let tried = Self::tried(head_dim);
        others
            .iter()
            .flat_map(|&load_at| tried.iter().map(move |t| Self { load_at, ..*t }))
            .collect()
    }

    /// The tiles measured fastest at `head_dim` (lab/src/bin/tune.rs, the keys in order): on an H100
    /// on 2026-11-26 at D = 64 (16 keys, 159.7 TFLOP/s against 141.9 with 32), on an H100 on
    /// 2026-11-25 and an H200 on 2026-11-26 at D = 128; then smaller ones, the first that fits
    /// `device`.
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        first_that_fits(device, &Self::preferred(head_dim), |t| t.workgroup_bytes(head_dim))
    }

    /// The tiles to try at `head_dim`, best first: only shapes of [`ArenaTiles::tried`], since
    /// the kernel runs without bounds checks, so only in shapes the tests cover. Their keys are
    /// rotated ([`KeyOrder::Rotated`]: 1.17 times as fast as in order at D = 64 and N = 4096,
    /// 1.11 at 16384, on an H200 on 2026-11-26; 1.14 and 1.10 on an H100 on 2026-11-27; at
    /// D = 128 and 256, and for version 9, which takes these tiles too, both orders pass the
    /// tests but were not timed against each other), and with the causal mask the query tiles
    /// are taken longest first ([`ArenaTiles::longest_first`]).
    pub fn preferred(head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, row_tiles, block_kv| ArenaTiles {
            subgroups,
            row_tiles,
            block_kv,
            q_in_registers: true,
            load_at: LoadAt::Staging,
            key_order: KeyOrder::Rotated,
            query_order: Self::longest_first(head_dim),
        };
        if head_dim <= 64 {
            vec![tiles(8, 1, 16), tiles(4, 1, 16)]
        } else if head_dim <= 128 {
            vec![tiles(8, 1, 32), tiles(8, 1, 16), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16)]
        }
    }
}

/// Version 10's shape of work: pairs of subgroups that share 32 query rows, each subgroup of
/// a pair computing half the keys of their scores and half the columns of their output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairTiles {
    /// Subgroups of 32 threads per workgroup, in pairs: 2, 4 or 8. They share each tile of K
    /// and V.
    pub subgroups: usize,
    /// Keys per tile: 32 or 64 (a pair splits them into two halves of 16-key blocks).
    pub block_kv: usize,
    /// When the next K and V are read: where staged, or at the start of their phase
    /// ([`LoadAt::Products`]; a tile ahead is not offered).
    pub load_at: LoadAt,
    /// The order of the tiles of K and V.
    pub key_order: KeyOrder,
    /// Which query tile each workgroup takes.
    pub query_order: QueryOrder,
}

impl PairTiles {
    /// Query rows per workgroup: 32 per pair.
    pub fn block_q(&self) -> usize {
        16 * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 32), as the shader declares it:
    /// the f16 arena (K, V and P, or one pass of Q if that is larger), S in f32, a rescale
    /// factor per row and the flag.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let rows = self.block_q();
        let pass_rows = 32 * self.query_passes(head_dim).1;
        let arena = self.kvp(head_dim).max(pass_rows * ArenaTiles::kv_stride(head_dim));
        arena_layout_bytes(arena, rows, self.block_kv / 4 + 2)
    }

    /// How Q reaches its registers: `(passes, pairs per pass)`, as many pairs' rows at a time
    /// as fit where K, V and P will be (at least one pair).
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let pair_rows = 32 * ArenaTiles::kv_stride(head_dim);
        let pairs = self.subgroups / 2;
        let per_pass = (self.kvp(head_dim) / pair_rows).clamp(1, pairs);
        (pairs.div_ceil(per_pass), per_pass)
    }

    /// The tiles of K, V and P together in the arena, in vec4s of halves.
    fn kvp(&self, head_dim: usize) -> usize {
        kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether version 10 accepts these tiles at `head_dim` (which it pads to a multiple
    /// of 32).
    pub fn check(&self, head_dim: usize) -> Result<(), AttentionError> {
        let sensible = [2, 4, 8].contains(&self.subgroups)
            && [32, 64].contains(&self.block_kv)
            && self.load_at != LoadAt::TileAhead
            && head_dim.is_multiple_of(32);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v10 pairs: {self:?} at head_dim {head_dim}; expected 2, 4 or 8 subgroups, 32 or \
                 64 keys, K and V read where staged or before the products, a head_dim that \
                 is a multiple of 32"
            ))
            .into());
        }
        self.query_order.check("v10 pairs")
    }

    /// Version 10's source for these tiles at `head_dim`: its constants set, its marked loops
    /// unrolled ([`gpu::wgsl::unroll`]).
    pub fn source(&self, head_dim: usize) -> Result<String, AttentionError> {
        self.source_leaving_out(head_dim, LeaveOut::NOTHING)
    }

    /// [`PairTiles::source`] with parts of the work left out, for measurements only: the
    /// output is wrong. Parts version 10 cannot leave out are refused.
    pub fn source_leaving_out(
        &self,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<String, AttentionError> {
        let unknown = leave_out.0 & !LeaveOut::IN_VERSION_10.0;
        if unknown != 0 {
            return Err(GpuError::KernelMisuse(format!(
                "v10 pairs: LEAVE_OUT {} asks for parts it cannot leave out (bits {unknown:#b}); \
                 it can leave out only the softmax (1), QK^T (2), PV (4), the store of S (8) \
                 and the K/V loads (128)",
                leave_out.0
            ))
            .into());
        }
        let constants = [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("LOAD_AT", self.load_at as usize),
            ("KEY_ORDER", self.key_order as usize),
            ("QUERY_GROUP", self.query_order.group()),
            ("LEAVE_OUT", leave_out.0 as usize),
        ];
        unroll(&specialise(V10_PAIRS, &constants)?)
    }

    /// Every shape the tests check and the tuning example times, each in the orders of
    /// [`QueryOrder::tried`] (those that do not fit a device's workgroup memory are left out
    /// where they run).
    pub fn tried(_head_dim: usize) -> Vec<Self> {
        let mut all = Vec::new();
        for load_at in [LoadAt::Staging, LoadAt::Products] {
            for (subgroups, block_kv) in [(8, 32), (4, 32), (2, 32), (4, 64), (2, 64)] {
                let (key_order, query_order) = (KeyOrder::InOrder, QueryOrder::AsLaunched);
                all.push(PairTiles { subgroups, block_kv, load_at, key_order, query_order });
            }
        }
        QueryOrder::tried(all, QueryOrder::two_rounds(1), |t, key_order, query_order| Self {
            key_order,
            query_order,
            ..t
        })
    }

    /// The tiles to try at `head_dim`, best first (only shapes of [`PairTiles::tried`]), their
    /// keys rotated ([`KeyOrder::Rotated`]: 1.13 times as fast as in order at D = 128 and
    /// N = 4096, 1.01 at 16384, on an H200 on 2026-11-26, spread over the whole slice; 1.14
    /// and 1.09 on an H100 on 2026-11-27, over at most 4 MiB of K and V), and with the causal
    /// mask the query tiles taken longest first in groups of 256 workgroups
    /// ([`QueryOrder::two_rounds`]: one workgroup of 4 pairs fits a multiprocessor at D = 64
    /// and 128; groups of 256 were timed at D = 128 only).
    pub fn preferred(_head_dim: usize) -> Vec<Self> {
        let tiles = |subgroups, block_kv| PairTiles {
            subgroups,
            block_kv,
            load_at: LoadAt::Staging,
            key_order: KeyOrder::Rotated,
            query_order: QueryOrder::two_rounds(1),
        };
        vec![tiles(8, 32), tiles(4, 32), tiles(2, 32)]
    }

    /// The first of [`PairTiles::preferred`] that fits `device` at `head_dim` (a multiple
    /// of 32).
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        first_that_fits(device, &Self::preferred(head_dim), |t| t.workgroup_bytes(head_dim))
    }
}

/// Version 11's shape of work: version 8's with one 16-row query tile per subgroup, Q in
/// registers and K and V read where they are staged; every f32 input is split into two f16s
/// (hi and lo), so K, V and P take twice version 8's arena and Q twice its registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitTiles {
    /// Subgroups of 32 threads per workgroup, 16 query rows each: 4 or 8.
    pub subgroups: usize,
    /// Keys per tile: 16 or 32.
    pub block_kv: usize,
}

impl SplitTiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        16 * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16), as the shader declares it:
    /// the f16 arena (K, V and P, hi and lo, or one pass of Q's his and los if that is
    /// larger), S in f32, a rescale factor per row and the flag.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (_, per_pass) = self.query_passes(head_dim);
        let pass = 2 * 16 * per_pass * ArenaTiles::kv_stride(head_dim);
        let arena = self.kvp(head_dim).max(pass);
        arena_layout_bytes(arena, self.block_q(), self.block_kv / 4 + 2)
    }

    /// How Q reaches its registers: `(passes, subgroups per pass)`, as many subgroups' rows
    /// (hi and lo) at a time as fit where K, V and P will be (at least one).
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let subgroup_rows = 2 * 16 * ArenaTiles::kv_stride(head_dim);
        let per_pass = (self.kvp(head_dim) / subgroup_rows).clamp(1, self.subgroups);
        (self.subgroups.div_ceil(per_pass), per_pass)
    }

    /// K, V and P, each as hi and lo, in vec4s of halves (the shader's `KVP`).
    fn kvp(&self, head_dim: usize) -> usize {
        2 * kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether version 11 accepts these tiles at `head_dim`.
    pub fn check(&self, head_dim: usize) -> Result<(), AttentionError> {
        let sensible = [4, 8].contains(&self.subgroups)
            && [16, 32].contains(&self.block_kv)
            && head_dim.is_multiple_of(16);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v11 split f32: {self:?} at head_dim {head_dim}; expected 4 or 8 subgroups, 16 \
                 or 32 keys, a head_dim that is a multiple of 16"
            ))
            .into());
        }
        Ok(())
    }

    /// Version 11's source for these tiles at `head_dim`: its constants set, its marked loops
    /// unrolled ([`gpu::wgsl::unroll`]).
    pub fn source(&self, head_dim: usize) -> Result<String, AttentionError> {
        let constants =
            [("HEAD_DIM", head_dim), ("BLOCK_KV", self.block_kv), ("SUBGROUPS", self.subgroups)];
        unroll(&specialise(V11_SPLIT_F32, &constants)?)
    }

    /// Every shape the tests check and the tuning example times (those that do not fit a
    /// device's workgroup memory are left out where they run).
    pub fn tried(_head_dim: usize) -> Vec<Self> {
        [(8, 16), (4, 16), (8, 32), (4, 32)]
            .into_iter()
            .map(|(subgroups, block_kv)| SplitTiles { subgroups, block_kv })
            .collect()
    }

    /// The tiles to try at `head_dim`, best first (only shapes of [`SplitTiles::tried`]), as
    /// measured on an H100 (2026-11-26, lab/src/bin/tune.rs at N = 4096 and 16384): 4 subgroups
    /// at D = 64 (65.6 and 73.3 TFLOP/s against 60.1 and 67.7 with 8), 8 at D = 128 (66.3 and
    /// 68.0 against 47.3 and 40.6); at D = 256 only 4 fit.
    pub fn preferred(head_dim: usize) -> Vec<Self> {
        let subgroups = if head_dim <= 64 { [4, 8] } else { [8, 4] };
        subgroups.into_iter().map(|subgroups| SplitTiles { subgroups, block_kv: 16 }).collect()
    }

    /// The first of [`SplitTiles::preferred`] that fits `device` at `head_dim`.
    pub fn for_device(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        first_that_fits(device, &Self::preferred(head_dim), |t| t.workgroup_bytes(head_dim))
    }
}

/// Whether a tensor-core version (5, 6, 8 or 9) accepts `tiles`, whose shape is `(subgroups,
/// row tiles, keys per tile)`, at `head_dim`: 1 to 8 subgroups, 1 or 2 row tiles, 16, 32 or 64
/// keys, a head dimension that is a multiple of 16.
fn check_subgroup_tiles(
    version: &str,
    tiles: &impl std::fmt::Debug,
    (subgroups, row_tiles, block_kv): (usize, usize, usize),
    head_dim: usize,
) -> Result<(), AttentionError> {
    let sensible = [1, 2].contains(&row_tiles)
        && [16, 32, 64].contains(&block_kv)
        && [1, 2, 4, 8].contains(&subgroups)
        && head_dim.is_multiple_of(16);
    if !sensible {
        return Err(GpuError::KernelMisuse(format!(
            "{version}: {tiles:?} at head_dim {head_dim}; expected 1 or 2 row tiles, 16, 32 or \
             64 keys, 1 to 8 subgroups, a head_dim that is a multiple of 16"
        ))
        .into());
    }
    Ok(())
}

/// Whether the kernel called `name` is one that `prefix` selects (the examples' `--only`): it
/// starts with `prefix`, and a prefix that is only a version number (`v1`) selects that
/// version, not one whose number starts the same way (`v1 register tiles`, not `v10 pairs`).
pub fn selected_by(name: &str, prefix: &str) -> bool {
    let only_a_number = !prefix.contains(' ') && prefix.ends_with(|c: char| c.is_ascii_digit());
    let rest = name.strip_prefix(prefix);
    rest.is_some_and(|rest| !(only_a_number && rest.starts_with(|c: char| c.is_ascii_digit())))
}

/// Whether an example's `--only` list, `prefixes`, selects the kernel called `name`: every
/// kernel when the list is empty (no `--only`), else those that one of them selects
/// ([`selected_by`]).
pub fn selected_by_any(name: &str, prefixes: &[String]) -> bool {
    prefixes.is_empty() || prefixes.iter().any(|prefix| selected_by(name, prefix))
}

/// The tiles a kernel was compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiles {
    /// Version 1.
    Register(RegisterTiles),
    /// Versions 2 and 3.
    TensorCore(TensorCoreTiles),
    /// Version 4.
    Specialised(SpecialisedTiles),
    /// Version 5.
    Pipelined(PipelinedTiles),
    /// Version 6 (the same shapes as version 5; V is never transposed).
    InRegisters(PipelinedTiles),
    /// Version 7.
    F32Registers(F32Tiles),
    /// Version 8.
    Arena(ArenaTiles),
    /// Version 9 (version 8's tiles and workgroup memory).
    Overlap(ArenaTiles),
    /// Version 10.
    Pairs(PairTiles),
    /// Version 11.
    Split(SplitTiles),
}

impl Tiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        match self {
            Tiles::Register(t) => t.block_q(),
            Tiles::TensorCore(_) => TensorCoreTiles::BLOCK_Q,
            Tiles::Specialised(t) => t.block_q(),
            Tiles::Pipelined(t) | Tiles::InRegisters(t) => t.block_q(),
            Tiles::F32Registers(t) => t.block_q(),
            Tiles::Arena(t) | Tiles::Overlap(t) => t.block_q(),
            Tiles::Pairs(t) => t.block_q(),
            Tiles::Split(t) => t.block_q(),
        }
    }

    /// Loop iterations per thread as lavapipe counts them; the tensor-core version never
    /// runs there.
    fn loop_iterations(&self, shape: &AttentionShape) -> u64 {
        match self {
            Tiles::Register(t) => t.loop_iterations(shape),
            Tiles::F32Registers(t) => t.loop_iterations(shape),
            Tiles::TensorCore(_)
            | Tiles::Specialised(_)
            | Tiles::Pipelined(_)
            | Tiles::InRegisters(_)
            | Tiles::Arena(_)
            | Tiles::Overlap(_)
            | Tiles::Pairs(_)
            | Tiles::Split(_) => 0,
        }
    }
}

impl Tiles {
    /// Every tile shape of the tensor-core versions 4 to 6 and 8 to 11 that the tuning example
    /// times and the tests check at `head_dim` (a multiple of 16).
    pub fn tensor_core_shapes(head_dim: usize) -> Vec<Tiles> {
        let v4 = SpecialisedTiles::tried(head_dim).into_iter().map(Tiles::Specialised);
        let v5 = PipelinedTiles::tried(head_dim).into_iter().map(Tiles::Pipelined);
        let v6 = PipelinedTiles::tried_in_registers(head_dim).into_iter().map(Tiles::InRegisters);
        let v8 = ArenaTiles::tried(head_dim).into_iter().map(Tiles::Arena);
        let v9 = ArenaTiles::tried(head_dim).into_iter().map(Tiles::Overlap);
        let v10 = PairTiles::tried(head_dim).into_iter().map(Tiles::Pairs);
        let v11 = SplitTiles::tried(head_dim).into_iter().map(Tiles::Split);
        v4.chain(v5).chain(v6).chain(v8).chain(v9).chain(v10).chain(v11).collect()
    }

    /// Bytes of workgroup memory at `head_dim`; none for versions 1 to 3, which choose
    /// tiles that fit.
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        match self {
            Tiles::Register(t) => t.workgroup_bytes(head_dim),
            Tiles::TensorCore(t) => t.workgroup_bytes(head_dim),
            Tiles::Specialised(t) => t.workgroup_bytes(head_dim),
            Tiles::Pipelined(t) | Tiles::InRegisters(t) => t.workgroup_bytes(head_dim),
            Tiles::F32Registers(t) => t.workgroup_bytes(head_dim),
            Tiles::Arena(t) | Tiles::Overlap(t) => t.workgroup_bytes(head_dim),
            Tiles::Pairs(t) => t.workgroup_bytes(head_dim.next_multiple_of(32)),
            Tiles::Split(t) => t.workgroup_bytes(head_dim),
        }
    }

    /// The registered name of the version these tiles belong to (its card in [`versions`]
    /// holds its tolerance).
    pub fn version(&self) -> &'static str {
        match self {
            Tiles::Register(_) => "v1 register tiles",
            Tiles::TensorCore(_) => "v3 no bounds checks",
            Tiles::Specialised(_) => "v4 specialised",
            Tiles::Pipelined(_) => "v5 pipelined",
            Tiles::InRegisters(_) => "v6 registers",
            Tiles::F32Registers(_) => "v7 f32 registers",
            Tiles::Arena(_) => "v8 arena",
            Tiles::Overlap(_) => "v9 overlap",
            Tiles::Pairs(_) => "v10 pairs",
            Tiles::Split(_) => "v11 split f32",
        }
    }

    /// The format the version these tiles belong to reads its inputs in: f32 for versions 1,
    /// 7 and 11, f16 for the others.
    pub fn storage(&self) -> Storage {
        match self {
            Tiles::Register(_) | Tiles::F32Registers(_) | Tiles::Split(_) => Storage::F32,
            _ => Storage::F16,
        }
    }

    /// A short name, e.g. `v5 4x2x16 rows, 32 keys`.
    pub fn describe(&self) -> String {
        match self {
            Tiles::Register(t) => {
                format!("v1 {} rows, {} keys", t.block_q(), t.block_kv())
            }
            Tiles::TensorCore(t) => format!("v2 64 rows, {} keys", t.block_kv),
            Tiles::Specialised(t) => format!(
                "v4 {}x{}x16 rows, {} keys{}",
                t.subgroups,
                t.row_tiles,
                t.block_kv,
                if t.prefetch { ", prefetch" } else { "" }
            ),
            Tiles::Pipelined(t) => format!(
                "v5 {}x{}x16 rows, {} keys{}",
                t.subgroups,
                t.row_tiles,
                t.block_kv,
                if t.transpose_v { "" } else { ", V row-major" }
            ),
            Tiles::InRegisters(t) => {
                format!("v6 {}x{}x16 rows, {} keys", t.subgroups, t.row_tiles, t.block_kv)
            }
            Tiles::F32Registers(t) => format!(
                "v7 {}x{} rows, {} keys{}",
                t.row_groups,
                t.rows_per_thread,
                t.block_kv(),
                if t.prefetch { ", prefetch" } else { "" }
            ),
            Tiles::Arena(t) | Tiles::Overlap(t) => format!(
                "{} {}x{}x16 rows, {} keys, Q {}, loads {}{}{}",
                if matches!(self, Tiles::Arena(_)) { "v8" } else { "v9" },
                t.subgroups,
                t.row_tiles,
                t.block_kv,
                if t.q_in_registers { "in registers" } else { "per tile" },
                t.load_at.phrase(),
                t.key_order.phrase(),
                t.query_order.phrase(),
            ),
            Tiles::Pairs(t) => format!(
                "v10 {} pairs, {} keys, loads {}{}{}",
                t.subgroups / 2,
                t.block_kv,
                t.load_at.phrase(),
                t.key_order.phrase(),
                t.query_order.phrase(),
            ),
            Tiles::Split(t) => format!("v11 {}x1x16 rows, {} keys", t.subgroups, t.block_kv),
        }
    }
}

/// The head dimensions every version supports: at most [`MAX_HEAD_DIM`].
fn check_head_dim(head_dim: usize) -> Result<(), AttentionError> {
    if head_dim > MAX_HEAD_DIM {
        return Err(AttentionError::UnsupportedHeadDim { head_dim, max: MAX_HEAD_DIM });
    }
    Ok(())
}

/// Whether `device` can run the tensor-core versions: cooperative matrices, subgroups of 32.
fn check_tensor_cores(
    device: &wgpu::Device,
    head_dim: usize,
    version: &'static str,
) -> Result<(), AttentionError> {
    check_head_dim(head_dim)?;
    if !gpu::has_tensor_cores(device) {
        let feature = "EXPERIMENTAL_COOPERATIVE_MATRIX (tensor cores)";
        return Err(GpuError::MissingFeature { feature, needed_for: version }.into());
    }
    let info = device.adapter_info();
    if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32) {
        return Err(GpuError::KernelMisuse(format!(
            "{version} is written for subgroups of 32 threads; this adapter's are {} to {}",
            info.subgroup_min_size, info.subgroup_max_size
        ))
        .into());
    }
    Ok(())
}

/// One compiled version: its pipeline, and the head dimension and tiles it was compiled for
/// (which say the format it reads Q, K and V in: [`Tiles::storage`]).
pub struct Kernel {
    name: &'static str,
    pipeline: wgpu::ComputePipeline,
    head_dim: usize,
    tiles: Tiles,
    shader: Shader,
}

/// The WGSL a kernel was compiled from: the source (constants already written in), the
/// values of its `override`s, and whether wgpu's run-time checks were added. The
/// `shader_stats` example hands it to the driver again to read what the compiler made of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shader {
    /// WGSL source.
    pub source: String,
    /// `override` constants and their values.
    pub overrides: Vec<(&'static str, f64)>,
    /// wgpu's run-time checks.
    pub checks: Checks,
}

impl Kernel {
    /// Version 1 for `head_dim`, with the largest tiles that fit `device`.
    pub fn register_tiles(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        Self::register_tiles_with(device, head_dim, RegisterTiles::for_device(device, head_dim)?)
    }

    /// Version 1 for `head_dim` with the given tiles (the tests try several).
    pub fn register_tiles_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: RegisterTiles,
    ) -> Result<Self, AttentionError> {
        check_head_dim(head_dim)?;
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        let needed = tiles.workgroup_bytes(head_dim);
        if needed > available {
            return Err(AttentionError::TilesDoNotFit { needed, available });
        }
        let constants = [
            ("HEAD_DIM", head_dim as f64),
            ("ROW_GROUPS", tiles.row_groups as f64),
            ("KEYS_PER_THREAD", tiles.keys_per_thread as f64),
        ];
        let source = V1_REGISTER_TILES;
        let pipeline =
            compile(device, "v1_register_tiles.wgsl", source, "flash_forward", &constants)?;
        let tiles = Tiles::Register(tiles);
        let shader =
            Shader { source: source.into(), overrides: constants.into(), checks: Checks::On };
        Ok(Self { name: "v1 register tiles", pipeline, head_dim, tiles, shader })
    }

    /// Version 2 for `head_dim` (up to 256; rows are padded to a multiple of 16), on a device
    /// with tensor cores and subgroups of 32 threads; with `Checks::Off`, version 3 (the same
    /// shader without wgpu's run-time bounds checks).
    pub fn tensor_cores(
        device: &wgpu::Device,
        head_dim: usize,
        checks: Checks,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v2 tensor cores")?;
        let padded = head_dim.next_multiple_of(16);
        let tiles = TensorCoreTiles::for_device(device, padded)?;
        let constants = [("HEAD_DIM", padded as f64), ("BLOCK_KV", tiles.block_kv as f64)];
        let source = V2_TENSOR_CORES;
        let label = "v2_tensor_cores.wgsl";
        let pipeline =
            compile_with_checks(device, label, source, "flash_forward", &constants, checks)?;
        let tiles = Tiles::TensorCore(tiles);
        let name = if checks == Checks::On { "v2 tensor cores" } else { "v3 no bounds checks" };
        let shader = Shader { source: source.into(), overrides: constants.into(), checks };
        Ok(Self { name, pipeline, head_dim, tiles, shader })
    }

    /// Version 4 for `head_dim` with the tiles measured fastest that fit `device`.
    pub fn specialised(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        Self::specialised_with(device, head_dim, SpecialisedTiles::for_device(device, padded)?)
    }

    /// Version 4 for `head_dim` with the given tiles (the tests and the tuning try several).
    pub fn specialised_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: SpecialisedTiles,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v4 specialised")?;
        let padded = head_dim.next_multiple_of(16);
        let threads = 32 * tiles.subgroups;
        let sensible = [1, 2].contains(&tiles.row_tiles)
            && [32, 64].contains(&tiles.block_kv)
            && [1, 2, 4, 8].contains(&tiles.subgroups)
            && (2 * tiles.block_kv * padded / 4).is_multiple_of(threads);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v4 specialised: {tiles:?} at head_dim {padded}; expected 1 or 2 row tiles, 32 \
                 or 64 keys, 1 to 8 subgroups sharing a tile evenly"
            ))
            .into());
        }
        let source = || specialise(V4_SPECIALISED, &tiles.constants(padded));
        let name = ("v4 specialised", "v4_specialised.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Specialised(tiles), source)
    }

    /// A tensor-core version whose constants are written into its source: checks that its
    /// `tiles` fit `device`'s workgroup memory, then compiles `source()` without wgpu's
    /// run-time checks. `name` is the version's name and its file's.
    fn specialised_kernel(
        device: &wgpu::Device,
        (name, label): (&'static str, &str),
        head_dim: usize,
        tiles: Tiles,
        source: impl FnOnce() -> Result<String, AttentionError>,
    ) -> Result<Self, AttentionError> {
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        let needed = tiles.workgroup_bytes(head_dim.next_multiple_of(16));
        if needed > available {
            return Err(AttentionError::TilesDoNotFit { needed, available });
        }
        let source = source()?;
        let pipeline =
            compile_with_checks(device, label, &source, "flash_forward", &[], Checks::Off)?;
        let shader = Shader { source, overrides: Vec::new(), checks: Checks::Off };
        Ok(Self { name, pipeline, head_dim, tiles, shader })
    }

    /// Version 5 for `head_dim` with the tiles measured fastest that fit `device`.
    pub fn pipelined(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        let tiles = PipelinedTiles::for_device(device, padded)?;
        Self::pipelined_with(device, head_dim, tiles, LeaveOut::NOTHING)
    }

    /// Version 5 for `head_dim` with the given tiles (the tests and the tuning try several),
    /// and, for measurements only, parts of its work left out.
    pub fn pipelined_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: PipelinedTiles,
        leave_out: LeaveOut,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v5 pipelined")?;
        let padded = head_dim.next_multiple_of(16);
        tiles.check("v5 pipelined", padded)?;
        let source = || specialise(V5_PIPELINED, &tiles.constants(padded, leave_out));
        let name = ("v5 pipelined", "v5_pipelined.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Pipelined(tiles), source)
    }

    /// Version 6 for `head_dim` with the tiles measured fastest that fit `device`.
    pub fn in_registers(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        let tiles = PipelinedTiles::for_device_in_registers(device, padded)?;
        Self::in_registers_with(device, head_dim, tiles, LeaveOut::NOTHING)
    }

    /// Version 6 for `head_dim` with the given tiles, and, for measurements only, parts of its
    /// work left out.
    pub fn in_registers_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: PipelinedTiles,
        leave_out: LeaveOut,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v6 registers")?;
        let padded = head_dim.next_multiple_of(16);
        tiles.check("v6 registers", padded)?;
        let tiles = PipelinedTiles { transpose_v: false, ..tiles };
        let source = || tiles.source_in_registers(padded, leave_out);
        let name = ("v6 registers", "v6_registers.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::InRegisters(tiles), source)
    }

    /// Version 8 for `head_dim` with the tiles measured fastest that fit `device`.
    pub fn arena(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        Self::arena_with(device, head_dim, ArenaTiles::for_device(device, padded)?)
    }

    /// Version 8 for `head_dim` with the given tiles and choices.
    pub fn arena_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: ArenaTiles,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v8 arena")?;
        let padded = head_dim.next_multiple_of(16);
        tiles.check(padded)?;
        let source = || tiles.source(padded);
        let name = ("v8 arena", "v8_arena.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Arena(tiles), source)
    }

    /// Version 9 for `head_dim` with version 8's tiles measured fastest that fit `device`.
    pub fn overlap(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        Self::overlap_with(device, head_dim, ArenaTiles::for_device(device, padded)?)
    }

    /// Version 9 for `head_dim` with the given tiles and choices.
    pub fn overlap_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: ArenaTiles,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v9 overlap")?;
        let padded = head_dim.next_multiple_of(16);
        tiles.check_for("v9 overlap", padded)?;
        let source = || tiles.source_from(V9_OVERLAP, padded);
        let name = ("v9 overlap", "v9_overlap.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Overlap(tiles), source)
    }

    /// Version 10 for `head_dim` (rows padded to a multiple of 32) with the tiles measured
    /// fastest that fit `device`.
    pub fn pairs(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(32);
        Self::pairs_with(device, head_dim, PairTiles::for_device(device, padded)?)
    }

    /// Version 10 for `head_dim` with the given tiles and choices.
    pub fn pairs_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: PairTiles,
    ) -> Result<Self, AttentionError> {
        Self::pairs_leaving_out(device, head_dim, tiles, LeaveOut::NOTHING)
    }

    /// Version 10 for `head_dim` with the given tiles and choices, and, for measurements only,
    /// parts of its work left out ([`PairTiles::source_leaving_out`]).
    pub fn pairs_leaving_out(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: PairTiles,
        leave_out: LeaveOut,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v10 pairs")?;
        let padded = head_dim.next_multiple_of(32);
        tiles.check(padded)?;
        let source = || tiles.source_leaving_out(padded, leave_out);
        let name = ("v10 pairs", "v10_pairs.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Pairs(tiles), source)
    }

    /// Version 11 for `head_dim` with the tiles measured fastest that fit `device`.
    pub fn split_f32(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        let padded = head_dim.next_multiple_of(16);
        Self::split_f32_with(device, head_dim, SplitTiles::for_device(device, padded)?)
    }

    /// Version 11 for `head_dim` with the given tiles: f32 inputs, split on the GPU.
    pub fn split_f32_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: SplitTiles,
    ) -> Result<Self, AttentionError> {
        check_tensor_cores(device, head_dim, "v11 split f32")?;
        let padded = head_dim.next_multiple_of(16);
        tiles.check(padded)?;
        let source = || tiles.source(padded);
        let name = ("v11 split f32", "v11_split_f32.wgsl");
        Self::specialised_kernel(device, name, head_dim, Tiles::Split(tiles), source)
    }

    /// Version 7 for `head_dim`, with the largest tiles that fit `device`.
    pub fn f32_registers(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        check_head_dim(head_dim)?;
        Self::f32_registers_with(device, head_dim, F32Tiles::for_device(device, head_dim)?)
    }

    /// Version 7 for `head_dim` with the given tiles (the tests and the tuning try several),
    /// compiled without wgpu's run-time checks: its tests cover every index.
    pub fn f32_registers_with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: F32Tiles,
    ) -> Result<Self, AttentionError> {
        Self::f32_registers_from(device, head_dim, tiles, V7_F32_REGISTERS, Checks::Off)
    }

    /// Version 7's host code with the shader `template` (exercise 10's runs a learner's, with
    /// wgpu's run-time checks on) for `head_dim` and `tiles`.
    pub fn f32_registers_from(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: F32Tiles,
        template: &str,
        checks: Checks,
    ) -> Result<Self, AttentionError> {
        check_head_dim(head_dim)?;
        tiles.check()?;
        tiles.check_subgroups(device)?;
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        let needed = tiles.workgroup_bytes(head_dim);
        if needed > available {
            return Err(AttentionError::TilesDoNotFit { needed, available });
        }
        let source = tiles.source_from(template, head_dim)?;
        let label = "v7_f32_registers.wgsl";
        let pipeline = compile_with_checks(device, label, &source, "flash_forward", &[], checks)?;
        let shader = Shader { source, overrides: Vec::new(), checks };
        let (name, tiles) = ("v7 f32 registers", Tiles::F32Registers(tiles));
        Ok(Self { name, pipeline, head_dim, tiles, shader })
    }

    /// The version that `tiles` belong to, compiled with them for `head_dim` (versions 2
    /// and 3 choose their own tiles: `Tiles::TensorCore` gives version 3).
    pub fn with_tiles(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: Tiles,
    ) -> Result<Self, AttentionError> {
        match tiles {
            Tiles::Register(t) => Self::register_tiles_with(device, head_dim, t),
            Tiles::TensorCore(_) => Self::tensor_cores(device, head_dim, Checks::Off),
            Tiles::Specialised(t) => Self::specialised_with(device, head_dim, t),
            Tiles::Pipelined(t) => Self::pipelined_with(device, head_dim, t, LeaveOut::NOTHING),
            Tiles::InRegisters(t) => {
                Self::in_registers_with(device, head_dim, t, LeaveOut::NOTHING)
            }
            Tiles::F32Registers(t) => Self::f32_registers_with(device, head_dim, t),
            Tiles::Arena(t) => Self::arena_with(device, head_dim, t),
            Tiles::Overlap(t) => Self::overlap_with(device, head_dim, t),
            Tiles::Pairs(t) => Self::pairs_with(device, head_dim, t),
            Tiles::Split(t) => Self::split_f32_with(device, head_dim, t),
        }
    }

    /// The tiles this kernel was compiled for.
    pub fn tiles(&self) -> Tiles {
        self.tiles
    }

    /// The WGSL it was compiled from.
    pub fn shader(&self) -> &Shader {
        &self.shader
    }

    /// The grid for `shape`: `(query tiles, slices)`.
    pub fn grid(&self, shape: &AttentionShape) -> (usize, usize) {
        (shape.q_len.div_ceil(self.tiles.block_q()), shape.batch * shape.heads)
    }
}

impl AttentionKernel for Kernel {
    /// Rows are read as `vec4`, and by the tensor cores as 16-wide slices.
    fn row_alignment(&self) -> usize {
        match self.tiles {
            Tiles::Register(_) | Tiles::F32Registers(_) => 4,
            Tiles::TensorCore(_)
            | Tiles::Specialised(_)
            | Tiles::Pipelined(_)
            | Tiles::InRegisters(_)
            | Tiles::Arena(_)
            | Tiles::Overlap(_)
            | Tiles::Split(_) => 16,
            // Each subgroup of a pair takes half of the 16-wide slices.
            Tiles::Pairs(_) => 32,
        }
    }

    fn storage(&self) -> Storage {
        self.tiles.storage()
    }

    /// Version 11 splits each f32 input into two f16s on the GPU: f16 must hold it.
    fn inputs_fit_f16(&self) -> bool {
        self.storage() == Storage::F16 || matches!(self.tiles, Tiles::Split(_))
    }

    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError> {
        self.dispatches_with(device, io, &[])
    }
}

impl Kernel {
    /// [`AttentionKernel::dispatches`] with more buffers bound, `(binding, buffer)` (a kernel
    /// with FlashAttention's softcap and ALiBi: see [`features`]).
    pub fn dispatches_with(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
        more: &[(u32, &wgpu::Buffer)],
    ) -> Result<Vec<Dispatch>, AttentionError> {
        let shape = &io.shape;
        if shape.head_dim != self.head_dim {
            return Err(GpuError::KernelMisuse(format!(
                "{} was compiled for head_dim = {}, the problem has head_dim = {}; expected a \
                 kernel built for this head_dim",
                self.name, self.head_dim, shape.head_dim
            ))
            .into());
        }
        let buffers = [&io.params, &io.q, &io.k, &io.v, &io.o, &io.lse];
        let mut bindings: Vec<(u32, &wgpu::Buffer)> = (0..).zip(buffers).collect();
        bindings.extend_from_slice(more);
        let bind_group = bind(device, &self.pipeline, &bindings)?;
        check_loop_iterations(device, self.name, self.tiles.loop_iterations(shape))?;
        let (query_tiles, slices) = self.grid(shape);
        Ok(vec![Dispatch {
            label: self.name,
            pipeline: self.pipeline.clone(),
            bind_group,
            workgroups: [workgroup_count(query_tiles), workgroup_count(slices), 1],
        }])
    }
}

/// Version 7's host code with another WGSL template in place of its own, and wgpu's
/// run-time bounds checks on: exercise 10 runs the learner's `micro_tiles.wgsl` through this,
/// and its grader the planted-bug shaders.
#[allow(clippy::too_many_arguments)] // a device's attention_on's arguments, the template, tiles
pub fn attention_with_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    template: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // Bad input is reported before the shader is built for its head dimension.
    let head_dim = reference::check_inputs(q, k, v, options)?.shape.head_dim;
    let kernel = Kernel::f32_registers_from(device, head_dim, tiles, template, Checks::On)?;
    gpu::attention::attention_on(device, queue, &kernel, q, k, v, options)
}

// ANCHOR: versions
/// This lesson's kernel versions, for the course's registry.
pub fn versions() -> Vec<KernelVersion> {
    let v1 = About::forward(
        "v1 register tiles",
        env!("CARGO_PKG_NAME"),
        Device::Gpu,
        "each thread a 4 x 4 block of scores: 8 multiply-adds per number read, not 1",
    );
    let v2 = About {
        name: "v2 tensor cores",
        change: "both matrix products on the tensor cores: f16 inputs, f32 sums, P rounded to f16",
        ..v1
    }
    .stored_in(Storage::F16, Tolerance::F16_STORAGE_AND_WEIGHTS);
    fn register_tiles(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::register_tiles(device, d))
    }
    fn tensor_cores(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::tensor_cores(device, d, Checks::On))
    }
    fn unchecked(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::tensor_cores(device, d, Checks::Off))
    }
    let v3 = About {
        name: "v3 no bounds checks",
        change: "v2 compiled without wgpu's run-time bounds checks (its tests prove every index)",
        ..v2
    };
    let v4 = About {
        name: "v4 specialised",
        change: "constants for exact fragment arrays, 32 rows per subgroup, next tile prefetched",
        ..v2
    };
    fn specialised(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::specialised(device, d))
    }
    let tensor_core_features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    let v5 = About {
        name: "v5 pipelined",
        change: "products of one tile beside the softmax of the next: two barriers per tile",
        ..v2
    };
    fn pipelined(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::pipelined(device, d))
    }
    let v6 = About {
        name: "v6 registers",
        change: "the host unrolls every loop over fragments: all of them in registers, none in memory",
        ..v2
    };
    fn in_registers(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::in_registers(device, d))
    }
    let v7 = About {
        name: "v7 f32 registers",
        change: "v1 with v6's constants and unrolled loops (arrays in registers), shuffles, prefetch",
        ..v1
    };
    fn f32_registers(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::f32_registers(device, d))
    }
    let v8 = About {
        name: "v8 arena",
        change: "K, V and P in one f16 arena (Q passes through it): 8 subgroups fit; loads where staged",
        ..v2
    };
    fn arena(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::arena(device, d))
    }
    let v9 = About {
        name: "v9 overlap",
        change: "the next tile's scores computed in the phase of this tile's softmax",
        ..v2
    };
    fn overlap(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::overlap(device, d))
    }
    let v10 = About {
        name: "v10 pairs",
        change: "subgroups in pairs on 32 rows, each half the keys of S and half the columns of O",
        ..v2
    };
    fn pairs(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::pairs(device, d))
    }
    let v11 = About {
        name: "v11 split f32",
        change: "f32 inputs as two f16s each on the tensor cores: three products for every one",
        ..v1
    }
    .stored_in(Storage::F32, Tolerance::F16_PAIRS);
    fn split_f32(device: &wgpu::Device, d: usize) -> Built {
        boxed(Kernel::split_f32(device, d))
    }
    vec![
        KernelVersion::new(v1, register_tiles),
        KernelVersion::new(v2, tensor_cores).requiring(tensor_core_features),
        KernelVersion::new(v3, unchecked).requiring(tensor_core_features),
        KernelVersion::new(v4, specialised).requiring(tensor_core_features),
        KernelVersion::new(v5, pipelined).requiring(tensor_core_features),
        KernelVersion::new(v6, in_registers).requiring(tensor_core_features),
        KernelVersion::new(v7, f32_registers).requiring(wgpu::Features::SUBGROUP),
        KernelVersion::new(v8, arena).requiring(tensor_core_features),
        KernelVersion::new(v9, overlap).requiring(tensor_core_features),
        KernelVersion::new(v10, pairs).requiring(tensor_core_features),
        KernelVersion::new(v11, split_f32).requiring(tensor_core_features),
    ]
}
// ANCHOR_END: versions

#[cfg(test)]
mod tests {
    use super::{selected_by, selected_by_any};

    #[test]
    fn a_prefix_selects_names_without_cutting_a_number_short() {
        assert!(selected_by("v1 register tiles", "v1"));
        assert!(!selected_by("v10 pairs", "v1"));
        assert!(selected_by("v10 pairs", "v10"));
        assert!(selected_by("v10 4 pairs, 32 keys", "v10 4 pairs"));
        assert!(selected_by("v8 8x1x16 rows, 16 keys", "v8 8x1x16 rows, 1"));
        assert!(!selected_by("v8 arena", "v9"));
        assert!(selected_by("v10 pairs", "v"));
    }

    #[test]
    fn no_list_selects_every_name_and_a_list_those_one_prefix_selects() {
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(selected_by_any("v10 pairs", &[]));
        assert!(selected_by_any("v10 pairs", &list(&["v8", "v10"])));
        assert!(!selected_by_any("v10 pairs", &list(&["v8", "v1"])));
    }
}
