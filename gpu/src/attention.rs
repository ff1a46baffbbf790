//! The buffers every attention kernel shares, and one way to run any of them.
//!
//! Layout on the GPU is the course's `[B, H, N, D]`, row-major, flattened: element
//! `(b, h, n, d)` of `Q` is `q[((b * H + h) * Nq + n) * stride + d]`. Kernels see `B` and `H`
//! only as their product, the number of independent `(batch, head)` slices. The row stride is
//! `D` rounded up to the kernel's [`AttentionKernel::row_alignment`]: a kernel that reads rows
//! as `vec4<f32>` asks for 4, and rows are padded with zeros (which add nothing to a dot
//! product) so that every row starts on a whole `vec4`.

use ndarray::{Array3, Array4, s};
use reference::{
    About, AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs,
    Forward, check_inputs,
};

use crate::GpuError;
use crate::buffers;
use crate::kernel::{Dispatch, launch};

// ANCHOR: params
/// The sizes and flags of one call, as the uniform `params` of every attention shader:
///
/// ```wgsl
/// struct Params { slices: u32, q_len: u32, kv_len: u32, head_dim: u32,
///                 scale: f32, causal: u32, pad0: u32, pad1: u32 }
/// ```
///
/// (A uniform struct's size must be a multiple of 16 bytes, hence the padding.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    /// `B * H`, the number of independent `(batch, head)` slices.
    pub slices: u32,
    /// `Nq`
    pub q_len: u32,
    /// `Nkv`
    pub kv_len: u32,
    /// `D`
    pub head_dim: u32,
    /// The softmax scale, usually `1 / sqrt(D)`.
    pub scale: f32,
    /// 1 for the bottom-right causal mask, 0 for none.
    pub causal: u32,
    /// Padding to 32 bytes.
    pub pad: [u32; 2],
}
// ANCHOR_END: params

/// Q, K, V, O, L and the params uniform of one call, on the device.
pub struct AttentionBuffers {
    /// The validated shape.
    pub shape: AttentionShape,
    /// Floats from one row of Q, K, V or O to the next: `D` rounded up to the alignment.
    pub row_stride: usize,
    /// The uniform of sizes and flags.
    pub params: wgpu::Buffer,
    /// `Q [B*H, Nq, D]`
    pub q: wgpu::Buffer,
    /// `K [B*H, Nkv, D]`
    pub k: wgpu::Buffer,
    /// `V [B*H, Nkv, D]`
    pub v: wgpu::Buffer,
    /// `O [B*H, Nq, D]`, written by the kernel.
    pub o: wgpu::Buffer,
    /// `L [B*H, Nq]`, written by the kernel.
    pub lse: wgpu::Buffer,
}

impl AttentionBuffers {
    /// Validates the inputs (the same checks as every CPU stage: shapes, NaN and infinities,
    /// the scale; plus the device's buffer limits) and uploads them, each row padded to a multiple of `row_alignment` floats.
    pub fn upload(
        device: &wgpu::Device,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        row_alignment: usize,
    ) -> Result<Self, AttentionError> {
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        let params = params_of(&shape, scale, options.causal)?;
        let row_stride = shape.head_dim.next_multiple_of(row_alignment.max(1));
        let rows = |x: &Array4<f32>| padded_rows(x, row_stride);
        let slices = shape.batch * shape.heads;
        Ok(Self {
            shape,
            row_stride,
            params: buffers::uniform(device, "params", &params),
            q: buffers::upload(device, "Q", &rows(q))?,
            k: buffers::upload(device, "K", &rows(k))?,
            v: buffers::upload(device, "V", &rows(v))?,
            o: buffers::storage::<f32>(device, "O", slices * shape.q_len * row_stride)?,
            lse: buffers::storage::<f32>(device, "L", slices * shape.q_len)?,
        })
    }

    /// Bytes of the six buffers on the device.
    pub fn bytes(&self) -> u64 {
        [&self.params, &self.q, &self.k, &self.v, &self.o, &self.lse].iter().map(|b| b.size()).sum()
    }

    /// Downloads `O` and `L` into the course's output type.
    pub fn read_output(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let o = buffers::download::<f32>(device, queue, &self.o)?;
        let lse = buffers::download::<f32>(device, queue, &self.lse)?;
        let shape = &self.shape;
        let (b, h, n, d) = shape.q_dims();
        let o = Array4::from_shape_vec((b, h, n, self.row_stride), o)
            .expect("O has B*H*Nq*stride elements")
            .slice_move(s![.., .., .., ..d]);
        Ok(AttentionOutput {
            o: o.as_standard_layout().into_owned(),
            lse: Array3::from_shape_vec(shape.lse_dims(), lse).expect("L has B*H*Nq elements"),
        })
    }
}

/// The elements of `x [B, H, N, D]` in row-major order, each row padded with zeros to
/// `row_stride` floats.
fn padded_rows(x: &Array4<f32>, row_stride: usize) -> Vec<f32> {
    let (b, h, n, d) = x.dim();
    let mut padded = Array4::<f32>::zeros((b, h, n, row_stride));
    padded.slice_mut(s![.., .., .., ..d]).assign(x);
    padded.into_raw_vec_and_offset().0
}

/// The uniform for `shape`; an error if a size does not fit the shader's `u32`.
fn params_of(shape: &AttentionShape, scale: f32, causal: bool) -> Result<Params, AttentionError> {
    let as_u32 = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| GpuError::ExceedsDeviceLimit {
            what: what.to_string(),
            needed: n as u64,
            limit: u64::from(u32::MAX),
            limit_name: "u32 indices in the shaders",
        })
    };
    Ok(Params {
        slices: as_u32("B * H", shape.batch * shape.heads)?,
        q_len: as_u32("Nq", shape.q_len)?,
        kv_len: as_u32("Nkv", shape.kv_len)?,
        head_dim: as_u32("D", shape.head_dim)?,
        scale,
        causal: u32::from(causal),
        pad: [0; 2],
    })
}

/// What an attention kernel provides: the dispatches that turn [`AttentionBuffers`] into `O`
/// and `L` (one for FlashAttention, several for the naive three-kernel version, which also
/// allocates its own `S` buffer).
pub trait AttentionKernel {
    /// Rows of Q, K, V and O are padded to a multiple of this many floats (1: no padding).
    fn row_alignment(&self) -> usize {
        1
    }

    /// Bytes of GPU memory the kernel allocates for itself on this problem, beyond the
    /// [`AttentionBuffers`] (the naive kernels' score matrix; nothing for FlashAttention).
    fn scratch_bytes(&self, _shape: &AttentionShape) -> u64 {
        0
    }

    /// Checks that the kernel supports this problem on this device (head dim, workgroup
    /// memory, buffer sizes) and prepares its dispatches.
    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError>;
}

/// A kernel's dispatches bound to one problem's buffers on the device: upload once, run as
/// often as needed (a benchmark's repeats, a model's layers), read back when wanted.
pub struct Prepared {
    /// Q, K, V, O, L and the params on the device.
    pub io: AttentionBuffers,
    dispatches: Vec<Dispatch>,
}

impl Prepared {
    /// Validates and uploads the inputs, and binds `kernel`'s dispatches to them.
    pub fn new(
        device: &wgpu::Device,
        kernel: &(impl AttentionKernel + ?Sized),
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<Self, AttentionError> {
        let io = AttentionBuffers::upload(device, q, k, v, options, kernel.row_alignment())?;
        let dispatches = kernel.dispatches(device, &io)?;
        Ok(Self { io, dispatches })
    }

    /// Runs the dispatches once and waits for the GPU; with a `timer`, returns the GPU time.
    pub fn run(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timer: Option<&crate::GpuTimer>,
    ) -> Result<Option<f64>, AttentionError> {
        launch(device, queue, &self.dispatches, timer)
    }

    /// Downloads `O` and `L` as the last run left them.
    pub fn read_output(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        self.io.read_output(device, queue)
    }
}

// ANCHOR: attention_on
/// Runs `kernel` on one problem with a given device and queue: upload, dispatch, download.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    kernel: &(impl AttentionKernel + ?Sized),
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let prepared = Prepared::new(device, kernel, q, k, v, options)?;
    prepared.run(device, queue, None)?;
    prepared.read_output(device, queue)
}
// ANCHOR_END: attention_on

/// A GPU kernel version of the course: its card, and how to build it for a device and a head
/// dimension (a kernel may compile its shader for one `D`).
pub struct KernelVersion {
    /// Name, lesson, kind ([`reference::Kind::GpuKernel`]), storage format, tolerance.
    pub about: About,
    /// Compiles the kernel for `device` and head dimension `D`, or says why it cannot.
    pub build: fn(&wgpu::Device, usize) -> Built,
}

/// What building a kernel gives: the kernel, or why it does not fit the device or head dim.
pub type Built = Result<Box<dyn AttentionKernel>, AttentionError>;

impl KernelVersion {
    /// This version as a [`Forward`] on `gpu`: inputs validated first (bad input is reported
    /// before any shader is compiled), then the kernel built for their head dimension, and one
    /// upload, run and download.
    pub fn forward_on(&self, gpu: &'static crate::Gpu) -> Box<dyn Forward> {
        let build = self.build;
        Box::new(
            move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, options: &AttentionOptions| {
                let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
                let kernel = build(&gpu.device, shape.head_dim)?;
                attention_on(&gpu.device, &gpu.queue, kernel.as_ref(), q, k, v, options)
            },
        )
    }
}

/// `kernel` boxed as a [`KernelVersion::build`] result.
pub fn boxed(kernel: Result<impl AttentionKernel + 'static, AttentionError>) -> Built {
    Ok(Box::new(kernel?))
}
