//! The GPU side of the course: everything a WGSL kernel needs that is not the kernel itself.
//!
//! - [`Gpu`]: finds an adapter (a real GPU through Vulkan, Metal or DX12, or Mesa's software
//!   driver lavapipe on a machine without one), opens a device with the adapter's real limits
//!   and the optional features it has, and shares it between tests ([`Gpu::shared`]).
//! - [`buffers`]: upload and download of plain data through `bytemuck`, with size checks
//!   against the device's limits.
//! - [`kernel`]: compile a WGSL compute shader with its `override` constants, bind buffers,
//!   record dispatches, run them, with shader and launch errors turned into `Result`s.
//! - [`GpuTimer`]: how long the GPU itself spent on a pass, from timestamp queries.
//! - [`attention`]: the buffers every attention kernel reads and writes (Q, K, V, O, L and a
//!   small uniform of sizes) and [`attention::attention_on`], which runs any kernel that
//!   implements [`attention::AttentionKernel`] on a given device and queue.
//! - [`backward`]: the same for backward kernels: the buffers they share (Q, K, V, O, L, dO,
//!   `D = rowsum(dO * O)`, dQ, dK, dV), upload once (or after a forward, in place) and run.
//! - [`version`]: a GPU version of an operation: its card, how to build it, the features it
//!   requires.
//! - [`wgsl`]: text tools for shaders specialised on the host ([`wgsl::specialise`] sets their
//!   constants, [`wgsl::unroll`] unrolls the loops over them).
//! - [`uniformity`]: a static check that every barrier of a WGSL shader is reached by every
//!   invocation of its workgroup (naga does not check it; a GPU may hang or race).
//!
//! Device failures are [`GpuError`]s, carried in the course's one error type as
//! `AttentionError::Device` (converted with `From`; [`GpuError::of`] gets them back).
//!
//! Every function that touches a device takes `&wgpu::Device` and `&wgpu::Queue` rather than
//! creating its own, so one device serves a whole test binary or benchmark.

pub mod attention;
pub mod backward;
pub mod buffers;
mod context;
mod error;
pub mod kernel;
mod timer;
pub mod uniformity;
pub mod version;
pub mod wgsl;

pub use context::{ADAPTER_VAR, Gpu, SKIP_TESTS_VAR, for_tests, has_tensor_cores};
pub use error::GpuError;
pub use timer::GpuTimer;
