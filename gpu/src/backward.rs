//! The buffers every backward kernel reads and writes, and one way to run any of them: the
//! backward twin of [`crate::attention`].
//!
//! A backward pass recomputes `P` from `Q`, `K` and the forward's logsumexp `L`, and needs, per
//! query row, `D_i = dO_i . O_i` (FlashAttention-2 computes it in a pass of its own before the
//! main kernels). Its buffers, bound at fixed numbers so that every backward shader declares
//! them alike ([`BackwardBuffers::bindings`]):
//!
//! | binding | buffer | shape | format |
//! |---|---|---|---|
//! | 0 | `params` | [`Params`](crate::attention::Params) | uniform |
//! | 1, 2, 3 | `Q`, `K`, `V` | `[B*H, N, stride]` | the kernel's storage |
//! | 4 | `O` | `[B*H, Nq, stride]` | f32 |
//! | 5 | `L` | `[B*H, Nq]` | f32 |
//! | 6 | `dO` | `[B*H, Nq, stride]` | the kernel's storage |
//! | 7 | `D` | `[B*H, Nq]` | f32, written by the kernel |
//! | 8, 9, 10 | `dQ`, `dK`, `dV` | `[B*H, N, stride]` | f32, written by the kernel |
//!
//! Rows are padded to the kernel's row alignment as the forward's are. After a forward pass on
//! the GPU, [`BackwardBuffers::after_forward`] binds the forward's `Q`, `K`, `V`, `O` and `L`
//! where they already are and uploads only `dO`: a training step uploads its inputs once.

use ndarray::Array4;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, Backward, CheckedInputs,
    Gradients, Storage, check_backward_inputs, check_dims, check_finite,
};

use crate::attention::{AttentionBuffers, download_rows, params_of, upload_rows};
use crate::buffers;
use crate::kernel::{Bound, Dispatch, bind, bindings_used};
use crate::version::GpuVersion;

/// The buffers of one backward call on the device. A clone shares the same buffers.
#[derive(Clone)]
pub struct BackwardBuffers {
    /// The validated shape.
    pub shape: AttentionShape,
    /// Elements from one row of Q, K, V, O, dO or a gradient to the next.
    pub row_stride: usize,
    /// The format of Q, K, V and dO on the device (everything else is f32).
    pub storage: Storage,
    /// The uniform of sizes and flags (the forward's [`Params`](crate::attention::Params)).
    pub params: wgpu::Buffer,
    /// `Q [B*H, Nq, D]`
    pub q: wgpu::Buffer,
    /// `K [B*H, Nkv, D]`
    pub k: wgpu::Buffer,
    /// `V [B*H, Nkv, D]`
    pub v: wgpu::Buffer,
    /// The forward's output `O [B*H, Nq, D]`.
    pub o: wgpu::Buffer,
    /// The forward's logsumexp `L [B*H, Nq]`.
    pub lse: wgpu::Buffer,
    /// `dO [B*H, Nq, D]`
    pub d_o: wgpu::Buffer,
    /// `D [B*H, Nq]`, `D_i = dO_i . O_i`, written by the kernel.
    pub delta: wgpu::Buffer,
    /// `dQ [B*H, Nq, D]`, written by the kernel.
    pub dq: wgpu::Buffer,
    /// `dK [B*H, Nkv, D]`, written by the kernel.
    pub dk: wgpu::Buffer,
    /// `dV [B*H, Nkv, D]`, written by the kernel.
    pub dv: wgpu::Buffer,
}

impl BackwardBuffers {
    /// Validates the inputs ([`check_backward_inputs`]: shapes, NaN and infinities, a
    /// logsumexp that agrees with the mask) and uploads them as `kernel` reads them.
    #[allow(clippy::too_many_arguments)] // the backward contract's six inputs, device, kernel
    pub fn upload(
        device: &wgpu::Device,
        kernel: &(impl BackwardKernel + ?Sized),
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
    ) -> Result<Self, AttentionError> {
        let CheckedInputs { shape, scale, .. } =
            check_backward_inputs(q, k, v, options, forward, d_o)?;
        let params = params_of(&shape, scale, options.causal)?;
        let row_stride = shape.head_dim.next_multiple_of(kernel.row_alignment().max(1));
        let (storage, fit_f16) = (kernel.storage(), kernel.inputs_fit_f16());
        let upload = |tensor, x| upload_rows(device, tensor, x, row_stride, storage, fit_f16);
        let o = upload_rows(device, "O", &forward.o, row_stride, Storage::F32, false)?;
        let lse = forward.lse.as_standard_layout();
        let lse = buffers::upload(device, "L", lse.as_slice().expect("a standard layout"))?;
        let inputs = Inputs {
            params: buffers::uniform(device, "params", &params),
            q: upload("Q", q)?,
            k: upload("K", k)?,
            v: upload("V", v)?,
            o,
            lse,
        };
        Self::with(device, shape, row_stride, storage, inputs, upload("dO", d_o)?)
    }

    /// The buffers of a backward call after a forward call on the same device: the forward's
    /// `Q`, `K`, `V`, `O` and `L` where they are (no copy), `dO` uploaded. The kernel must read
    /// its inputs in the forward's format and row stride; `forward`'s kernel must have run.
    pub fn after_forward(
        device: &wgpu::Device,
        kernel: &(impl BackwardKernel + ?Sized),
        forward: &AttentionBuffers,
        d_o: &Array4<f32>,
    ) -> Result<Self, AttentionError> {
        let (shape, stride) = (forward.shape, forward.row_stride);
        let (storage, alignment, fit_f16) =
            (kernel.storage(), kernel.row_alignment(), kernel.inputs_fit_f16());
        forward.check_reusable("a forward's buffers", storage, alignment, fit_f16)?;
        let (b, h, n, d) = shape.q_dims();
        check_dims("dO", d_o.dim().into(), "Q", [b, h, n, d])?;
        check_finite("dO", d_o)?;
        let d_o = upload_rows(device, "dO", d_o, stride, forward.storage, fit_f16)?;
        let inputs = Inputs {
            params: forward.params.clone(),
            q: forward.q.clone(),
            k: forward.k.clone(),
            v: forward.v.clone(),
            o: forward.o.clone(),
            lse: forward.lse.clone(),
        };
        Self::with(device, shape, stride, forward.storage, inputs, d_o)
    }

    /// The buffers around `inputs` and `d_o`, with `D` and the gradients allocated.
    fn with(
        device: &wgpu::Device,
        shape: AttentionShape,
        row_stride: usize,
        storage: Storage,
        inputs: Inputs,
        d_o: wgpu::Buffer,
    ) -> Result<Self, AttentionError> {
        let slices = shape.batch * shape.heads;
        let rows = |n: usize| slices * n * row_stride;
        let Inputs { params, q, k, v, o, lse } = inputs;
        Ok(Self {
            shape,
            row_stride,
            storage,
            params,
            q,
            k,
            v,
            o,
            lse,
            d_o,
            delta: buffers::storage::<f32>(device, "D", slices * shape.q_len)?,
            dq: buffers::storage::<f32>(device, "dQ", rows(shape.q_len))?,
            dk: buffers::storage::<f32>(device, "dK", rows(shape.kv_len))?,
            dv: buffers::storage::<f32>(device, "dV", rows(shape.kv_len))?,
        })
    }

    /// Every buffer with its binding number (the table in the module documentation). A
    /// kernel binds those its entry point uses ([`crate::kernel::bindings_used`]).
    pub fn bindings(&self) -> [(u32, &wgpu::Buffer); 11] {
        let buffers = [
            &self.params,
            &self.q,
            &self.k,
            &self.v,
            &self.o,
            &self.lse,
            &self.d_o,
            &self.delta,
            &self.dq,
            &self.dk,
            &self.dv,
        ];
        let mut numbered = [(0, &self.params); 11];
        for (slot, (binding, buffer)) in numbered.iter_mut().zip((0..).zip(buffers)) {
            *slot = (binding, buffer);
        }
        numbered
    }

    /// A bind group for entry point `entry` of the WGSL `source`, compiled as `pipeline`: the
    /// buffers of [`BackwardBuffers::bindings`] that the entry point uses (wgpu leaves the
    /// others out of the pipeline's layout).
    pub fn bind_used(
        &self,
        device: &wgpu::Device,
        pipeline: &wgpu::ComputePipeline,
        source: &str,
        entry: &str,
    ) -> Result<wgpu::BindGroup, AttentionError> {
        let used = bindings_used(source, entry)?;
        let buffers: Vec<(u32, &wgpu::Buffer)> =
            self.bindings().into_iter().filter(|(binding, _)| used.contains(binding)).collect();
        bind(device, pipeline, &buffers)
    }

    /// Fills `D` and the gradients with NaN, so that a kernel that leaves an element unwritten
    /// is caught by the next check of its output.
    pub fn poison_output(&self, queue: &wgpu::Queue) {
        for buffer in [&self.delta, &self.dq, &self.dk, &self.dv] {
            let nans = vec![f32::NAN; buffer.size() as usize / 4];
            queue.write_buffer(buffer, 0, bytemuck::cast_slice(&nans));
        }
    }

    /// Bytes of the buffers on the device (shared ones included).
    pub fn bytes(&self) -> u64 {
        self.bindings().iter().map(|(_, buffer)| buffer.size()).sum()
    }

    /// Downloads `dQ`, `dK` and `dV`.
    pub fn read_gradients(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<Gradients<f32>, AttentionError> {
        let s = &self.shape;
        let kv_dims = (s.batch, s.heads, s.kv_len, s.head_dim);
        let read = |buffer, dims| download_rows(device, queue, buffer, dims, self.row_stride);
        Ok(Gradients {
            dq: read(&self.dq, s.q_dims())?,
            dk: read(&self.dk, kv_dims)?,
            dv: read(&self.dv, kv_dims)?,
        })
    }

    /// Downloads `D [B, H, Nq]` as the kernel wrote it.
    pub fn read_delta(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<ndarray::Array3<f32>, AttentionError> {
        let values = buffers::download::<f32>(device, queue, &self.delta)?;
        Ok(ndarray::Array3::from_shape_vec(self.shape.lse_dims(), values)
            .expect("D has B*H*Nq elements"))
    }
}

/// The buffers a backward call shares with its forward call.
struct Inputs {
    params: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    o: wgpu::Buffer,
    lse: wgpu::Buffer,
}

/// What a backward kernel provides: the dispatches that turn [`BackwardBuffers`] into `D`,
/// `dQ`, `dK` and `dV` (FlashAttention-2 runs three: `D`, then `dK` and `dV` with each
/// workgroup owning a tile of keys, then `dQ` with each owning a tile of queries).
pub trait BackwardKernel {
    /// Rows of Q, K, V, O, dO and the gradients are padded to a multiple of this many
    /// elements (1: no padding).
    fn row_alignment(&self) -> usize {
        1
    }

    /// The format the kernel reads Q, K, V and dO in.
    fn storage(&self) -> Storage {
        Storage::F32
    }

    /// Whether every input must be a number that f16 can hold (as for
    /// [`crate::attention::AttentionKernel::inputs_fit_f16`]).
    fn inputs_fit_f16(&self) -> bool {
        self.storage() == Storage::F16
    }

    /// Bytes of GPU memory the kernel allocates for itself on this problem, beyond the
    /// [`BackwardBuffers`].
    fn scratch_bytes(&self, _shape: &AttentionShape) -> u64 {
        0
    }

    /// Checks that the kernel supports this problem on this device and prepares its
    /// dispatches.
    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &BackwardBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError>;
}

/// A backward kernel's dispatches bound to one problem's buffers: upload once, run as often as
/// needed, read back when wanted.
pub type PreparedBackward = Bound<BackwardBuffers>;

impl PreparedBackward {
    /// Validates and uploads the inputs, and binds `kernel`'s dispatches to them.
    #[allow(clippy::too_many_arguments)] // the backward contract's six inputs, device, kernel
    pub fn new(
        device: &wgpu::Device,
        kernel: &(impl BackwardKernel + ?Sized),
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
    ) -> Result<Self, AttentionError> {
        let io = BackwardBuffers::upload(device, kernel, q, k, v, options, forward, d_o)?;
        Self::on(device, kernel, io)
    }

    /// Binds `kernel`'s dispatches to `io`, buffers already on the device
    /// ([`BackwardBuffers::after_forward`]).
    pub fn on(
        device: &wgpu::Device,
        kernel: &(impl BackwardKernel + ?Sized),
        io: BackwardBuffers,
    ) -> Result<Self, AttentionError> {
        let dispatches = kernel.dispatches(device, &io)?;
        Ok(Self { io, dispatches })
    }

    /// Downloads the gradients as the last run left them.
    pub fn read_gradients(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<Gradients<f32>, AttentionError> {
        self.io.read_gradients(device, queue)
    }
}

/// Runs `kernel` on one problem with a given device and queue: upload, dispatch, download.
#[allow(clippy::too_many_arguments)] // the backward contract's six inputs, device, queue, kernel
pub fn backward_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    kernel: &(impl BackwardKernel + ?Sized),
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
) -> Result<Gradients<f32>, AttentionError> {
    let prepared = PreparedBackward::new(device, kernel, q, k, v, options, forward, d_o)?;
    prepared.run(device, queue, None)?;
    prepared.read_gradients(device, queue)
}

/// A GPU backward version: its card, and how to build its kernel for a device and a head
/// dimension.
pub type BackwardKernelVersion = GpuVersion<fn(&wgpu::Device, usize) -> BuiltBackward>;

/// What building a backward kernel gives.
pub type BuiltBackward = Result<Box<dyn BackwardKernel>, AttentionError>;

impl BackwardKernelVersion {
    /// This version as a [`Backward`] on `gpu`: inputs validated first, then the kernel built
    /// for their head dimension, and one upload, run and download.
    pub fn backward_on(&self, gpu: &'static crate::Gpu) -> Box<dyn Backward> {
        let build = self.build;
        Box::new(
            move |q: &Array4<f32>,
                  k: &Array4<f32>,
                  v: &Array4<f32>,
                  options: &AttentionOptions,
                  forward: &AttentionOutput<f32>,
                  d_o: &Array4<f32>| {
                let checked = check_backward_inputs(q, k, v, options, forward, d_o)?;
                let kernel = build(&gpu.device, checked.shape.head_dim)?;
                let (device, queue) = (&gpu.device, &gpu.queue);
                backward_on(device, queue, kernel.as_ref(), q, k, v, options, forward, d_o)
            },
        )
    }
}

/// `kernel` boxed as a [`BackwardKernelVersion::build`] result.
pub fn boxed(kernel: Result<impl BackwardKernel + 'static, AttentionError>) -> BuiltBackward {
    Ok(Box::new(kernel?))
}
