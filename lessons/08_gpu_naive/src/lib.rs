//! # Lesson 08 — naive attention on the GPU
//!
//! Lesson 01's algorithm, one WGSL kernel per step, with the score matrix in GPU memory:
//!
//! $$ S = \mathrm{scale}\cdot QK^\top \;\to\; P = \mathrm{softmax}(S),\; L = \ln\textstyle\sum e^{S}
//!    \;\to\; O = PV . $$
//!
//! Three dispatches in one compute pass; each reads what the one before wrote to the storage
//! buffer `S` (`B * H * Nq * Nkv` floats). The GPU is fast at the arithmetic, but `S` must be
//! written and read back through the GPU's main memory, and it must fit in one storage buffer
//! binding: [`NaiveAttention::dispatches`] refuses, with
//! [`gpu::GpuError::ExceedsDeviceLimit`], a problem whose `S` is larger than the device can
//! bind (128 MiB on lavapipe; just under 2 GiB on a GPU, where wgpu caps every Vulkan device's
//! limit at the largest `i32`), long before the GPU runs out of memory.

use gpu::attention::{AttentionBuffers, AttentionKernel};
use gpu::buffers;
use gpu::kernel::{Dispatch, bind, check_loop_iterations, compile, workgroup_count};
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput, AttentionShape, check_inputs};

pub mod dropout;
pub mod primer;

/// The WGSL source of the three kernels.
pub const SHADER: &str = include_str!("naive.wgsl");

/// Threads per side of the 2-D workgroups of `scores` and `weighted_sum` (`TILE` in the shader).
const TILE: usize = 16;
/// Threads per workgroup of `softmax` (`ROWS` in the shader).
const ROWS: usize = 64;

/// The three compiled kernels.
pub struct NaiveAttention {
    scores: wgpu::ComputePipeline,
    softmax: wgpu::ComputePipeline,
    weighted_sum: wgpu::ComputePipeline,
}

impl NaiveAttention {
    /// Compiles the three entry points of [`SHADER`].
    pub fn new(device: &wgpu::Device) -> Result<Self, AttentionError> {
        Self::from_source(device, SHADER)
    }

    /// [`NaiveAttention::new`] with another WGSL source in place of [`SHADER`] (exercise 08
    /// runs the learner's `naive.wgsl` through this), with the same entry points and bindings.
    pub fn from_source(device: &wgpu::Device, source: &str) -> Result<Self, AttentionError> {
        let constants = [("TILE", TILE as f64), ("ROWS", ROWS as f64)];
        let entry = |name| compile(device, name, source, name, &constants);
        Ok(Self {
            scores: entry("scores")?,
            softmax: entry("softmax")?,
            weighted_sum: entry("weighted_sum")?,
        })
    }
}

/// Bytes of the score matrix `S` (then `P`) for a problem: `4 * B * H * Nq * Nkv`.
pub fn score_bytes(shape: &AttentionShape) -> u64 {
    (shape.batch * shape.heads * shape.q_len * shape.kv_len * size_of::<f32>()) as u64
}

// ANCHOR: dispatches
impl AttentionKernel for NaiveAttention {
    /// The score matrix `S`.
    fn scratch_bytes(&self, shape: &AttentionShape) -> u64 {
        score_bytes(shape)
    }

    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError> {
        self.dispatches_with(device, io, [&[], &[], &[]])
    }
}

impl NaiveAttention {
    /// [`AttentionKernel::dispatches`] with more buffers bound to each of the three kernels,
    /// `(binding, buffer)`, in the order `scores`, `softmax`, `weighted_sum` (a kernel with
    /// dropout's uniform: see [`dropout`]).
    pub fn dispatches_with(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
        more: [&[(u32, &wgpu::Buffer)]; 3],
    ) -> Result<Vec<Dispatch>, AttentionError> {
        let shape = &io.shape;
        let slices = shape.batch * shape.heads;
        buffers::check_storage_size(device, "the score matrix S", score_bytes(shape))?;
        // The longest loops: softmax's three passes over a row of S (each counting one more
        // than its trips, see LAVAPIPE_LOOP_LIMIT); scores' loop over D.
        let iterations = (3 * (shape.kv_len + 1)).max(shape.head_dim + 1) as u64;
        check_loop_iterations(device, "naive attention", iterations)?;
        let s = buffers::storage::<f32>(device, "S", slices * shape.q_len * shape.kv_len)?;
        let tiles = |n: usize, per: usize| workgroup_count(n.div_ceil(per));
        let (params, q, k, v, o, lse) = (&io.params, &io.q, &io.k, &io.v, &io.o, &io.lse);
        Ok(vec![
            Dispatch {
                label: "scores",
                bind_group: bind(
                    device,
                    &self.scores,
                    &with(&[(0, params), (1, q), (2, k), (4, &s)], more[0]),
                )?,
                pipeline: self.scores.clone(),
                workgroups: [
                    tiles(shape.kv_len, TILE),
                    tiles(shape.q_len, TILE),
                    workgroup_count(slices),
                ],
            },
            Dispatch {
                label: "softmax",
                bind_group: bind(
                    device,
                    &self.softmax,
                    &with(&[(0, params), (4, &s), (6, lse)], more[1]),
                )?,
                pipeline: self.softmax.clone(),
                workgroups: [tiles(shape.q_len, ROWS), workgroup_count(slices), 1],
            },
            Dispatch {
                label: "weighted_sum",
                bind_group: bind(
                    device,
                    &self.weighted_sum,
                    &with(&[(0, params), (3, v), (4, &s), (5, o)], more[2]),
                )?,
                pipeline: self.weighted_sum.clone(),
                workgroups: [
                    tiles(shape.head_dim, TILE),
                    tiles(shape.q_len, TILE),
                    workgroup_count(slices),
                ],
            },
        ])
    }
}
// ANCHOR_END: dispatches

/// The bindings `buffers` followed by `more`.
fn with<'a>(
    buffers: &[(u32, &'a wgpu::Buffer)],
    more: &[(u32, &'a wgpu::Buffer)],
) -> Vec<(u32, &'a wgpu::Buffer)> {
    buffers.iter().chain(more).copied().collect()
}

/// Naive attention on a given device and queue: `q [B,H,Nq,D]`, `k`, `v [B,H,Nkv,D]` ->
/// `O [B,H,Nq,D]`, `L [B,H,Nq]`, through an `S [B,H,Nq,Nkv]` buffer in GPU memory.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    attention_with_shader(device, queue, SHADER, q, k, v, options)
}

/// [`attention_on`] with another WGSL source in place of [`SHADER`]: exercise 08 runs the
/// learner's `naive.wgsl` through this, and its grader the planted-bug shaders.
pub fn attention_with_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    source: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    check_inputs(q, k, v, options)?; // bad input is reported before any shader is compiled
    let kernel = NaiveAttention::from_source(device, source)?;
    gpu::attention::attention_on(device, queue, &kernel, q, k, v, options)
}

/// [`attention_on`] on the process's shared GPU ([`gpu::Gpu::shared`]).
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    attention_on(&gpu.device, &gpu.queue, q, k, v, options)
}

/// This lesson's kernels, for the course's registry.
pub fn versions() -> Vec<gpu::attention::KernelVersion> {
    use gpu::attention::{KernelVersion, boxed};
    use reference::{About, Device};
    let about = About::forward(
        "GPU naive, 3 WGSL kernels",
        env!("CARGO_PKG_NAME"),
        Device::Gpu,
        "lesson 01 on a GPU: S and P in GPU memory, one thread per element or row",
    );
    vec![KernelVersion::new(about, |device, _| boxed(NaiveAttention::new(device)))]
}
