//! # Lesson 09 — FlashAttention forward as a WGSL compute shader
//!
//! The algorithm of lesson 03 (FlashAttention-2 loop order, online softmax, `O` normalised
//! once, `L = m + ln l`), mapped onto a GPU:
//!
//! | lesson 03 (CPU)                  | this lesson (WGSL)                                      |
//! |----------------------------------|---------------------------------------------------------|
//! | outer loop over query tiles      | one **workgroup** per (slice, query tile): a grid of `ceil(Nq / Br) x (B * H)` |
//! | rows of the query tile           | one **thread** per row, `Br` threads per workgroup      |
//! | `K`, `V` tile in cache           | `K`, `V` tile copied into **workgroup memory**          |
//! | `m`, `l`, `acc` arrays           | each thread's `m`, `l`, `acc[D]` in **registers**       |
//! | nothing                          | two **barriers** per tile: after loading, before reloading |
//!
//! The shader is [`SHADER`] (`src/flash.wgsl`); this file checks that a problem fits the
//! kernel and the device, compiles the shader for a tile size and head dimension, and launches
//! it through the course's `gpu` crate.

use gpu::GpuError;
use gpu::attention::{AttentionBuffers, AttentionKernel};
use gpu::buffers;
use gpu::kernel::{Dispatch, bind, check_loop_iterations, compile, launch, workgroup_count};
use ndarray::{Array2, Array4};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

pub use lesson03::TileSizes;

pub mod window;

/// The WGSL source of the kernel.
pub const SHADER: &str = include_str!("flash.wgsl");

/// Largest head dimension the shader supports (`4 * MAX_CHUNKS` in `flash.wgsl`).
pub const MAX_HEAD_DIM: usize = 128;

/// Largest key tile the shader supports (`MAX_BLOCK_KV` in `flash.wgsl`).
pub const MAX_BLOCK_KV: usize = 64;

/// 64 query rows (threads) per workgroup and 32 keys per tile: with `D = 128` the K and V
/// tiles take exactly 32 KiB of workgroup memory, the most that lavapipe offers (an H100 or
/// H200 offers 48 KiB).
pub fn default_tiles() -> TileSizes {
    TileSizes::new(64, 32).expect("64 and 32 are at least 1")
}

// ANCHOR: kernel_new
/// The compiled kernel for one tile size and head dimension.
pub struct FlashAttention {
    pipeline: wgpu::ComputePipeline,
    tiles: TileSizes,
    head_dim: usize,
}

impl FlashAttention {
    /// Checks the tiles and head dimension against the shader and the device, then compiles
    /// the shader with them as its `override` constants.
    pub fn new(
        device: &wgpu::Device,
        tiles: TileSizes,
        head_dim: usize,
    ) -> Result<Self, AttentionError> {
        Self::from_source(device, SHADER, tiles, head_dim)
    }

    /// [`FlashAttention::new`] with another WGSL source in place of [`SHADER`] (exercise 09
    /// runs the learner's `flash.wgsl` through this), with the same entry point and bindings.
    pub fn from_source(
        device: &wgpu::Device,
        source: &str,
        tiles: TileSizes,
        head_dim: usize,
    ) -> Result<Self, AttentionError> {
        check_fits(device, tiles, head_dim)?;
        if !gpu::kernel::bindings_used(source, "flash_forward")?.contains(&6) {
            return Err(GpuError::KernelMisuse(
                "flash_forward never writes tiles_loaded (@binding(6)); expected the kernel to \
                 count the tiles each workgroup loads and write the count, as the given code \
                 does (load_tile's first line and the end of flash_forward)"
                    .to_string(),
            )
            .into());
        }
        let constants = [
            ("BLOCK_Q", tiles.query_rows() as f64),
            ("BLOCK_KV", tiles.key_cols() as f64),
            ("HEAD_DIM", head_dim as f64),
        ];
        let pipeline = compile(device, "flash.wgsl", source, "flash_forward", &constants)?;
        Ok(Self { pipeline, tiles, head_dim })
    }
}
// ANCHOR_END: kernel_new

/// Bytes of workgroup memory the kernel needs: a `Bc x D` tile of K and one of V, in f32,
/// with `D` rounded up to a multiple of 4 (rows are stored as `vec4<f32>`).
pub fn workgroup_bytes(tiles: TileSizes, head_dim: usize) -> usize {
    2 * tiles.key_cols() * head_dim.next_multiple_of(4) * size_of::<f32>()
}

/// The largest key tile (`Bc`) the kernel accepts on `device` at `head_dim`: at most
/// [`MAX_BLOCK_KV`], and no more keys than fit in the device's workgroup memory.
pub fn largest_key_tile(device: &wgpu::Device, head_dim: usize) -> usize {
    let available = device.limits().max_compute_workgroup_storage_size as usize;
    let one_key = workgroup_bytes(TileSizes::new(1, 1).expect("1 is at least 1"), head_dim);
    MAX_BLOCK_KV.min(available / one_key)
}

// ANCHOR: check_fits
/// The shader's own limits (`D <= 128`, `Bc <= 64`) and the device's (threads per workgroup,
/// workgroup memory), as errors rather than a failed launch or a lost device.
fn check_fits(
    device: &wgpu::Device,
    tiles: TileSizes,
    head_dim: usize,
) -> Result<(), AttentionError> {
    if head_dim > MAX_HEAD_DIM {
        return Err(AttentionError::UnsupportedHeadDim { head_dim, max: MAX_HEAD_DIM });
    }
    if tiles.key_cols() > MAX_BLOCK_KV {
        return Err(AttentionError::TileTooLarge {
            which: "key columns (Bc)",
            value: tiles.key_cols(),
            max: MAX_BLOCK_KV,
        });
    }
    let limits = device.limits();
    let threads =
        limits.max_compute_invocations_per_workgroup.min(limits.max_compute_workgroup_size_x);
    if tiles.query_rows() > threads as usize {
        return Err(GpuError::ExceedsDeviceLimit {
            what: format!("a workgroup of Br = {} threads", tiles.query_rows()),
            needed: tiles.query_rows() as u64,
            limit: u64::from(threads),
            limit_name: "max_compute_invocations_per_workgroup",
        }
        .into());
    }
    let needed = workgroup_bytes(tiles, head_dim);
    let available = limits.max_compute_workgroup_storage_size as usize;
    if needed > available {
        return Err(AttentionError::TilesDoNotFit { needed, available });
    }
    Ok(())
}
// ANCHOR_END: check_fits

// ANCHOR: dispatches
impl FlashAttention {
    /// The grid of workgroups for `shape`: `(query tiles, slices)`, `ceil(Nq / Br) x (B * H)`.
    pub fn grid(&self, shape: &AttentionShape) -> (usize, usize) {
        (shape.q_len.div_ceil(self.tiles.query_rows()), shape.batch * shape.heads)
    }

    /// The kernel's one dispatch on the buffers `io`; it writes how many tiles of keys each
    /// workgroup loaded into `tiles_loaded` (one `u32` per workgroup of [`grid`](Self::grid)).
    pub fn dispatch(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
        tiles_loaded: &wgpu::Buffer,
    ) -> Result<Dispatch, AttentionError> {
        self.dispatch_with(device, io, tiles_loaded, &[])
    }

    /// [`dispatch`](Self::dispatch) with more buffers bound, `(binding, buffer)` (a windowed
    /// kernel's window: see [`window`]).
    pub fn dispatch_with(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
        tiles_loaded: &wgpu::Buffer,
        more: &[(u32, &wgpu::Buffer)],
    ) -> Result<Dispatch, AttentionError> {
        let shape = &io.shape;
        if shape.head_dim != self.head_dim {
            return Err(GpuError::KernelMisuse(format!(
                "this kernel was compiled for head_dim = {}, the problem has head_dim = {}; \
                 expected a kernel built with FlashAttention::new for this head_dim",
                self.head_dim, shape.head_dim
            ))
            .into());
        }
        let mut buffers = vec![
            (0, &io.params),
            (1, &io.q),
            (2, &io.k),
            (3, &io.v),
            (4, &io.o),
            (5, &io.lse),
            (6, tiles_loaded),
        ];
        buffers.extend_from_slice(more);
        let bind_group = bind(device, &self.pipeline, &buffers)?;
        check_loop_iterations(device, "flash_forward", loop_iterations(self.tiles, shape))?;
        let (query_tiles, slices) = self.grid(shape);
        Ok(Dispatch {
            label: "flash_forward",
            pipeline: self.pipeline.clone(),
            bind_group,
            workgroups: [workgroup_count(query_tiles), workgroup_count(slices), 1],
        })
    }
}

impl AttentionKernel for FlashAttention {
    /// The shader reads rows as `vec4<f32>`.
    fn row_alignment(&self) -> usize {
        4
    }

    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError> {
        let (query_tiles, slices) = self.grid(&io.shape);
        let tiles_loaded = buffers::storage::<u32>(device, "tiles loaded", query_tiles * slices)?;
        Ok(vec![self.dispatch(device, io, &tiles_loaded)?])
    }
}
// ANCHOR_END: dispatches

/// Loop iterations one thread runs at most, as lavapipe counts them (see
/// [`gpu::kernel::LAVAPIPE_LOOP_LIMIT`]): only loops whose trip count is not an `override`
/// constant count (those over `CHUNKS` are unrolled), and each run of a loop counts one more
/// than its trip count (the final test). Per tile of keys: the tile loop, the loading loop
/// (`ceil(Bc * D/4 / Br)` trips) and the two loops over the tile's keys (`Bc` trips each).
/// Measured on lavapipe (Mesa 22.3, 2026-11-22): with `Br = Bc = 1` and `D = 128` (38 per
/// key) the output was cut off after 1725 keys, 65535 / 38.
pub fn loop_iterations(tiles: TileSizes, shape: &AttentionShape) -> u64 {
    let (br, bc) = (tiles.query_rows(), tiles.key_cols());
    let chunks = shape.head_dim.div_ceil(4);
    let per_tile = 1 + ((bc * chunks).div_ceil(br) + 1) + 2 * (bc + 1);
    (shape.kv_len.div_ceil(bc) * per_tile + 1) as u64
}

/// FlashAttention forward on a given device and queue: `q [B,H,Nq,D]`, `k`, `v [B,H,Nkv,D]` ->
/// `O [B,H,Nq,D]`, `L [B,H,Nq]`.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    attention_with_shader(device, queue, SHADER, q, k, v, options, tiles)
}

/// [`attention_on`] with another WGSL source in place of [`SHADER`]: exercise 09 runs the
/// learner's `flash.wgsl` through this, and its grader the planted-bug shaders.
#[allow(clippy::too_many_arguments)] // attention_on's arguments and the source
pub fn attention_with_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    source: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // Bad input is reported before any shader is compiled.
    let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
    let kernel = FlashAttention::from_source(device, source, tiles, shape.head_dim)?;
    gpu::attention::attention_on(device, queue, &kernel, q, k, v, options)
}

// ANCHOR: tiles_loaded
/// [`attention_with_shader`], and how many tiles of keys each workgroup loaded: `[B * H,
/// ceil(Nq / Br)]`. Without the mask every workgroup loads `ceil(Nkv / Bc)` tiles; with it, a
/// workgroup loads only the tiles its last row sees, `ceil(visible_keys(last row) / Bc)`.
#[allow(clippy::too_many_arguments)] // attention_with_shader's arguments
pub fn tiles_loaded_with_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    source: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<(AttentionOutput<f32>, Array2<u32>), AttentionError> {
    let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
    let kernel = FlashAttention::from_source(device, source, tiles, shape.head_dim)?;
    let io = AttentionBuffers::upload(device, &kernel, q, k, v, options)?;
    kernel.run_counting_tiles(device, queue, &io, &[])
}

impl FlashAttention {
    /// The kernel's one dispatch on `io` (with `more` buffers bound, as in
    /// [`dispatch_with`](Self::dispatch_with)), run to the end: the output, and how many tiles
    /// of keys each workgroup loaded, `[B * H, ceil(Nq / Br)]`.
    pub fn run_counting_tiles(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        io: &AttentionBuffers,
        more: &[(u32, &wgpu::Buffer)],
    ) -> Result<(AttentionOutput<f32>, Array2<u32>), AttentionError> {
        let (query_tiles, slices) = self.grid(&io.shape);
        let tiles_loaded = buffers::storage::<u32>(device, "tiles loaded", query_tiles * slices)?;
        launch(device, queue, &[self.dispatch_with(device, io, &tiles_loaded, more)?], None)?;
        let counts = buffers::download::<u32>(device, queue, &tiles_loaded)?;
        let counts =
            Array2::from_shape_vec((slices, query_tiles), counts).expect("one count per workgroup");
        Ok((io.read_output(device, queue)?, counts))
    }
}
// ANCHOR_END: tiles_loaded

/// [`attention_on`] on the process's shared GPU ([`gpu::Gpu::shared`]).
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    attention_on(&gpu.device, &gpu.queue, q, k, v, options, tiles)
}

// ANCHOR: versions
/// This lesson's kernel at two tile sizes, for the course's registry. The first is the
/// default; the second trades keys per tile for more rows (threads) per workgroup.
pub fn versions() -> Vec<gpu::attention::KernelVersion> {
    use gpu::attention::{KernelVersion, boxed};
    use reference::{About, Device};
    let first = About::forward(
        "GPU FlashAttention 64x32",
        env!("CARGO_PKG_NAME"),
        Device::Gpu,
        "lesson 03 on a GPU: one thread per query row, K and V tiles in workgroup memory",
    );
    let second = About {
        name: "GPU FlashAttention 128x16",
        change: "twice the rows per workgroup, half the keys per tile",
        ..first
    };
    fn flash(device: &wgpu::Device, br: usize, bc: usize, d: usize) -> gpu::attention::Built {
        boxed(FlashAttention::new(device, TileSizes::new(br, bc)?, d))
    }
    vec![
        KernelVersion::new(first, |device, d| {
            boxed(FlashAttention::new(device, default_tiles(), d))
        }),
        KernelVersion::new(second, |device, d| flash(device, 128, 16, d)),
    ]
}
// ANCHOR_END: versions
