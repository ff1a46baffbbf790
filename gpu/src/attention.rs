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
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Forward,
    Storage, check_inputs,
};

use crate::GpuError;
use crate::buffers;
use crate::kernel::{Bound, Dispatch};
use crate::version::GpuVersion;

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

/// Q, K, V, O, L and the params uniform of one call, on the device. A clone shares the same
/// buffers.
#[derive(Clone)]
pub struct AttentionBuffers {
    /// The validated shape.
    pub shape: AttentionShape,
    /// Elements from one row of Q, K, V or O to the next: `D` rounded up to the alignment.
    pub row_stride: usize,
    /// The format of Q, K and V on the device (O and L are f32).
    pub storage: Storage,
    /// Whether Q, K and V were checked on upload to hold only numbers f16 can hold (for a
    /// kernel that [needs f16's range](AttentionKernel::inputs_fit_f16)).
    pub checked_f16_range: bool,
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
    /// the scale; plus the device's buffer limits) and uploads them as `kernel` reads them:
    /// each row padded to a multiple of its [`row_alignment`](AttentionKernel::row_alignment),
    /// in its [`storage`](AttentionKernel::storage) format (an input too large for f16 is an
    /// error, never an infinity, where the kernel
    /// [needs f16's range](AttentionKernel::inputs_fit_f16)).
    pub fn upload(
        device: &wgpu::Device,
        kernel: &(impl AttentionKernel + ?Sized),
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<Self, AttentionError> {
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        let params = params_of(&shape, scale, options.causal)?;
        let row_stride = shape.head_dim.next_multiple_of(kernel.row_alignment().max(1));
        let storage = kernel.storage();
        let fit_f16 = kernel.inputs_fit_f16();
        let upload = |tensor, x| upload_rows(device, tensor, x, row_stride, storage, fit_f16);
        let slices = shape.batch * shape.heads;
        Ok(Self {
            shape,
            row_stride,
            storage,
            checked_f16_range: fit_f16 || storage == Storage::F16,
            params: buffers::uniform(device, "params", &params),
            q: upload("Q", q)?,
            k: upload("K", k)?,
            v: upload("V", v)?,
            o: buffers::storage::<f32>(device, "O", slices * shape.q_len * row_stride)?,
            lse: buffers::storage::<f32>(device, "L", slices * shape.q_len)?,
        })
    }

    /// Checks that these buffers, uploaded for another kernel, can feed one that reads
    /// `storage` with rows aligned to `alignment` ([`check_layout`]) and, where it
    /// `needs_f16_range`, were checked on upload for f16's range (an f32 input beyond it would
    /// otherwise become an infinity in the kernel instead of an error). `buffers` names them
    /// in the error.
    pub(crate) fn check_reusable(
        &self,
        buffers: &str,
        storage: Storage,
        alignment: usize,
        needs_f16_range: bool,
    ) -> Result<(), AttentionError> {
        check_layout(buffers, self.storage, self.row_stride, self.shape, storage, alignment)?;
        if needs_f16_range && !self.checked_f16_range {
            return Err(GpuError::KernelMisuse(format!(
                "the kernel needs its inputs in f16's range, and {buffers} were uploaded for a \
                 kernel that did not check it; expected buffers uploaded for this kernel"
            ))
            .into());
        }
        Ok(())
    }

    /// Fills O and L with NaN, so that a kernel that leaves an element unwritten is caught
    /// by the next check of its output (buffers shared between kernels would otherwise still
    /// hold the previous kernel's answer).
    pub fn poison_output(&self, queue: &wgpu::Queue) {
        for buffer in [&self.o, &self.lse] {
            let nans = vec![f32::NAN; buffer.size() as usize / 4];
            queue.write_buffer(buffer, 0, bytemuck::cast_slice(&nans));
        }
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
        let o = download_rows(device, queue, &self.o, self.shape.q_dims(), self.row_stride)?;
        let lse = buffers::download::<f32>(device, queue, &self.lse)?;
        let lse = Array3::from_shape_vec(self.shape.lse_dims(), lse);
        Ok(AttentionOutput { o, lse: lse.expect("L has B*H*Nq elements") })
    }
}

/// Uploads `x [B, H, N, D]` as a kernel reads it: each row padded with zeros to `row_stride`
/// elements, in `storage` (f32, or f16 bit patterns). Where `fit_f16`, or for f16 storage, an
/// element too large for f16 is an error naming it, never an infinity.
pub fn upload_rows(
    device: &wgpu::Device,
    tensor: &'static str,
    x: &Array4<f32>,
    row_stride: usize,
    storage: Storage,
    fit_f16: bool,
) -> Result<wgpu::Buffer, AttentionError> {
    let rows = padded_rows(x, row_stride);
    match storage {
        Storage::F32 if fit_f16 => {
            check_f16_range(tensor, x)?;
            buffers::upload(device, tensor, &rows)
        }
        Storage::F32 => buffers::upload(device, tensor, &rows),
        Storage::F16 => buffers::upload(device, tensor, &f16_bits(tensor, x, &rows)?),
        Storage::BF16 => Err(GpuError::KernelMisuse(
            "the GPU kernels of the course store their inputs in f32 or f16, not bf16".to_string(),
        )
        .into()),
    }
}

/// Downloads an f32 buffer of `dims = (B, H, N, D)` rows padded to `row_stride`, without the
/// padding.
pub fn download_rows(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    dims: (usize, usize, usize, usize),
    row_stride: usize,
) -> Result<Array4<f32>, AttentionError> {
    let (b, h, n, d) = dims;
    let values = buffers::download::<f32>(device, queue, buffer)?;
    let padded = Array4::from_shape_vec((b, h, n, row_stride), values)
        .expect("the buffer holds B*H*N padded rows");
    Ok(padded.slice_move(s![.., .., .., ..d]).as_standard_layout().into_owned())
}

/// The elements of `x [B, H, N, D]` in row-major order, each row padded with zeros to
/// `row_stride` floats.
fn padded_rows(x: &Array4<f32>, row_stride: usize) -> Vec<f32> {
    let (b, h, n, d) = x.dim();
    let mut padded = Array4::<f32>::zeros((b, h, n, row_stride));
    padded.slice_mut(s![.., .., .., ..d]).assign(x);
    padded.into_raw_vec_and_offset().0
}

/// The f16 bit patterns of `rows` (the padded rows of `x`), or
/// [`AttentionError::NotRepresentable`] naming the first element of `x` too large for f16.
fn f16_bits(
    tensor: &'static str,
    x: &Array4<f32>,
    rows: &[f32],
) -> Result<Vec<u16>, AttentionError> {
    check_f16_range(tensor, x)?;
    Ok(rows.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect())
}

/// [`AttentionError::NotRepresentable`] naming the first element of `x` that f16 cannot hold
/// (it would round to an infinity), if any.
fn check_f16_range(tensor: &'static str, x: &Array4<f32>) -> Result<(), AttentionError> {
    let too_large = x.indexed_iter().find(|(_, v)| half::f16::from_f32(**v).is_infinite());
    if let Some(((b, h, n, d), &value)) = too_large {
        let largest = half::f16::MAX.to_f32();
        let index = vec![b, h, n, d];
        return Err(AttentionError::NotRepresentable {
            tensor,
            index,
            value,
            format: "f16",
            largest,
        });
    }
    Ok(())
}

/// Checks that `buffers`, stored as `storage` with rows of `row_stride` elements, can feed a
/// kernel that reads `kernel_storage` with rows aligned to `alignment`: a kernel works its row
/// stride out from `D` and its own alignment, so the format and the stride must be exactly its.
pub(crate) fn check_layout(
    buffers: &str,
    storage: Storage,
    row_stride: usize,
    shape: AttentionShape,
    kernel_storage: Storage,
    alignment: usize,
) -> Result<(), AttentionError> {
    let stride = shape.head_dim.next_multiple_of(alignment.max(1));
    if kernel_storage == storage && row_stride == stride {
        return Ok(());
    }
    Err(GpuError::KernelMisuse(format!(
        "{buffers} as {storage:?} with rows of {row_stride} cannot feed a kernel that reads \
         {kernel_storage:?} with rows of {stride}; expected the same format and row stride"
    ))
    .into())
}

/// The uniform for `shape` (for a caller that binds its own buffers, as lesson 12's GPU model
/// does); an error if a size does not fit the shader's `u32`.
pub fn params_of(
    shape: &AttentionShape,
    scale: f32,
    causal: bool,
) -> Result<Params, AttentionError> {
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
    /// Rows of Q, K, V and O are padded to a multiple of this many elements (1: no padding).
    fn row_alignment(&self) -> usize {
        1
    }

    /// The format the kernel reads Q, K and V in: f32, or f16 for the tensor-core kernels
    /// (rounded on upload). O and L are f32 either way.
    fn storage(&self) -> Storage {
        Storage::F32
    }

    /// Whether every input must be a number that f16 can hold: true for f16 storage, and for
    /// a kernel that splits f32 inputs into two f16s on the GPU (lesson 10's version 11). An
    /// input that f16 cannot hold is then an error on upload, never an infinity.
    fn inputs_fit_f16(&self) -> bool {
        self.storage() == Storage::F16
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
pub type Prepared = Bound<AttentionBuffers>;

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
        let io = AttentionBuffers::upload(device, kernel, q, k, v, options)?;
        let dispatches = kernel.dispatches(device, &io)?;
        Ok(Self { io, dispatches })
    }

    /// Binds `kernel`'s dispatches to buffers already uploaded (for another kernel that reads
    /// them in the same format and row stride): a benchmark uploads a large problem once for
    /// every kernel it times.
    pub fn reusing(
        device: &wgpu::Device,
        kernel: &(impl AttentionKernel + ?Sized),
        io: &AttentionBuffers,
    ) -> Result<Self, AttentionError> {
        let (storage, alignment) = (kernel.storage(), kernel.row_alignment());
        io.check_reusable("buffers uploaded", storage, alignment, kernel.inputs_fit_f16())?;
        let dispatches = kernel.dispatches(device, io)?;
        Ok(Self { io: io.clone(), dispatches })
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

/// A GPU forward version of the course: its card, and how to build its kernel for a device and
/// a head dimension (a kernel may compile its shader for one `D`).
pub type KernelVersion = GpuVersion<fn(&wgpu::Device, usize) -> Built>;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_feed_only_a_kernel_that_reads_their_format_and_row_stride() {
        let shape = AttentionShape { batch: 1, heads: 2, q_len: 3, kv_len: 5, head_dim: 6 };
        let check = |storage, stride, kernel_storage, alignment| {
            check_layout("buffers", storage, stride, shape, kernel_storage, alignment)
        };
        assert!(check(Storage::F32, 6, Storage::F32, 1).is_ok());
        assert!(check(Storage::F32, 8, Storage::F32, 4).is_ok());
        assert!(check(Storage::F16, 16, Storage::F16, 16).is_ok());
        for (storage, stride, kernel_storage, alignment) in
            [(Storage::F32, 6, Storage::F32, 4), (Storage::F32, 8, Storage::F16, 4)]
        {
            let err = check(storage, stride, kernel_storage, alignment).unwrap_err().to_string();
            assert!(err.contains("expected the same format and row stride"), "{err}");
        }
    }
}
