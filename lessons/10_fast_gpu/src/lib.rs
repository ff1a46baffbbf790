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
//!
//! Every version runs through [`Kernel`], which compiles a version's shader for one head
//! dimension and tile size and implements the course's [`AttentionKernel`], so the tests,
//! the registry and the benchmark treat them all alike.

use gpu::GpuError;
use gpu::attention::{AttentionBuffers, AttentionKernel, Built, KernelVersion, boxed};
use gpu::kernel::{
    Checks, Dispatch, bind, check_loop_iterations, compile, compile_with_checks, workgroup_count,
};
use reference::{About, AttentionError, AttentionShape, Kind, Storage, Tolerance};

/// Version 1's WGSL source.
pub const V1_REGISTER_TILES: &str = include_str!("v1_register_tiles.wgsl");

/// Version 2's WGSL source.
pub const V2_TENSOR_CORES: &str = include_str!("v2_tensor_cores.wgsl");

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
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        let fitting = [64, 32].map(|block_kv| TensorCoreTiles { block_kv });
        let mut fits = fitting.into_iter().filter(|t| t.workgroup_bytes(head_dim) <= available);
        fits.next().ok_or(AttentionError::TilesDoNotFit {
            needed: TensorCoreTiles { block_kv: 32 }.workgroup_bytes(head_dim),
            available,
        })
    }
}

/// The tiles a kernel was compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiles {
    /// Version 1.
    Register(RegisterTiles),
    /// Version 2.
    TensorCore(TensorCoreTiles),
}

impl Tiles {
    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        match self {
            Tiles::Register(t) => t.block_q(),
            Tiles::TensorCore(_) => TensorCoreTiles::BLOCK_Q,
        }
    }

    /// Loop iterations per thread as lavapipe counts them; the tensor-core version never
    /// runs there.
    fn loop_iterations(&self, shape: &AttentionShape) -> u64 {
        match self {
            Tiles::Register(t) => t.loop_iterations(shape),
            Tiles::TensorCore(_) => 0,
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

/// One compiled version: its pipeline, the head dimension and tiles it was compiled for, and
/// the format it reads Q, K and V in.
pub struct Kernel {
    name: &'static str,
    pipeline: wgpu::ComputePipeline,
    head_dim: usize,
    tiles: Tiles,
    storage: Storage,
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
        Ok(Self { name: "v1 register tiles", pipeline, head_dim, tiles, storage: Storage::F32 })
    }

    /// Version 2 for `head_dim` (up to 256; rows are padded to a multiple of 16), on a device
    /// with tensor cores and subgroups of 32 threads; with `Checks::Off`, version 3 (the same
    /// shader without wgpu's run-time bounds checks).
    pub fn tensor_cores(
        device: &wgpu::Device,
        head_dim: usize,
        checks: Checks,
    ) -> Result<Self, AttentionError> {
        check_head_dim(head_dim)?;
        if !gpu::has_tensor_cores(device) {
            let feature = "EXPERIMENTAL_COOPERATIVE_MATRIX (tensor cores)";
            return Err(GpuError::MissingFeature { feature, needed_for: "v2 tensor cores" }.into());
        }
        let info = device.adapter_info();
        if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32) {
            return Err(GpuError::KernelMisuse(format!(
                "v2 tensor cores is written for subgroups of 32 threads; this adapter's are {} \
                 to {}",
                info.subgroup_min_size, info.subgroup_max_size
            ))
            .into());
        }
        let padded = head_dim.next_multiple_of(16);
        let tiles = TensorCoreTiles::for_device(device, padded)?;
        let constants = [("HEAD_DIM", padded as f64), ("BLOCK_KV", tiles.block_kv as f64)];
        let source = V2_TENSOR_CORES;
        let label = "v2_tensor_cores.wgsl";
        let pipeline =
            compile_with_checks(device, label, source, "flash_forward", &constants, checks)?;
        let tiles = Tiles::TensorCore(tiles);
        let name = if checks == Checks::On { "v2 tensor cores" } else { "v3 no bounds checks" };
        Ok(Self { name, pipeline, head_dim, tiles, storage: Storage::F16 })
    }

    /// The tiles this kernel was compiled for.
    pub fn tiles(&self) -> Tiles {
        self.tiles
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
            Tiles::Register(_) => 4,
            Tiles::TensorCore(_) => 16,
        }
    }

    fn storage(&self) -> Storage {
        self.storage
    }

    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
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
        let bindings: Vec<(u32, &wgpu::Buffer)> = (0..).zip(buffers).collect();
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

// ANCHOR: versions
/// This lesson's kernel versions, for the course's registry.
pub fn versions() -> Vec<KernelVersion> {
    let v1 = About::f32(
        "v1 register tiles",
        env!("CARGO_PKG_NAME"),
        Kind::GpuKernel,
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
    let tensor_core_features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    vec![
        KernelVersion::new(v1, register_tiles),
        KernelVersion::new(v2, tensor_cores).requiring(tensor_core_features),
        KernelVersion::new(v3, unchecked).requiring(tensor_core_features),
    ]
}
// ANCHOR_END: versions
