//! What the course's registry knows about each implementation.
//!
//! Every lesson exports its implementations as *versions* of an operation (the idea of
//! llm.c's `dev/cuda`: the first is the simplest, each later one changes one thing and says
//! what). The operations are the forward pass, the backward pass and decoding with a KV cache
//! ([`Operation`]; a training step will be the next). A version is an [`About`] (its name,
//! lesson, operation, device, storage format and tolerance) and the code: a [`Forward`],
//! [`Backward`] or [`Decoder`] for the CPU, a kernel constructor for the GPU
//! (`gpu::attention::KernelVersion` and its twins). The `registry` crate lists them by
//! operation in course order; the tour, the course-wide tests and the benchmarks read those
//! lists.

use crate::compare::Tolerance;
use crate::contract::{Backward, Decoder, Forward};

/// What a version computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `O` and `L` from `Q`, `K`, `V`: a [`Forward`].
    Forward,
    /// `dQ`, `dK`, `dV` from the forward's inputs and outputs and `dO`: a [`Backward`].
    Backward,
    /// The last tokens' queries over a KV cache: a [`Decoder`].
    Decode,
}

/// Where a version computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// On the CPU, as Rust code.
    Cpu,
    /// On the GPU, as WGSL kernels built for a device.
    Gpu,
}

impl Device {
    /// `"CPU"` or `"GPU"`.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "CPU",
            Device::Gpu => "GPU",
        }
    }
}

/// The format Q, K and V are stored in while the version computes (its arithmetic is f32 in
/// every version of the course).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// 32-bit floats: the inputs as given.
    F32,
    /// Inputs rounded to IEEE half precision.
    F16,
    /// Inputs rounded to bfloat16.
    BF16,
}

impl Storage {
    /// `"f32"`, `"f16"` or `"bf16"`.
    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
            Storage::BF16 => "bf16",
        }
    }
}

/// A version's identity card.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct About {
    /// Short name, unique in the course, shown in tables (`"tiled FlashAttention-2"`).
    pub name: &'static str,
    /// The package that implements it (`"lesson03"`).
    pub lesson: &'static str,
    /// Forward, backward or decoding.
    pub operation: Operation,
    /// CPU or GPU.
    pub device: Device,
    /// The format its inputs are stored in.
    pub storage: Storage,
    /// How close to the f64 oracle it must be (the error model of
    /// [`crate::compare`](mod@crate::compare)).
    pub tolerance: Tolerance,
    /// One line: what this version changes from the one before it, and why.
    pub change: &'static str,
}

impl About {
    /// A forward version on `device` that stores its inputs in f32 and is held to the f32
    /// error model.
    pub const fn forward(
        name: &'static str,
        lesson: &'static str,
        device: Device,
        change: &'static str,
    ) -> Self {
        Self::f32(name, lesson, Operation::Forward, device, change)
    }

    /// A backward version, as [`About::forward`].
    pub const fn backward(
        name: &'static str,
        lesson: &'static str,
        device: Device,
        change: &'static str,
    ) -> Self {
        Self::f32(name, lesson, Operation::Backward, device, change)
    }

    /// A decoding version, as [`About::forward`].
    pub const fn decode(
        name: &'static str,
        lesson: &'static str,
        device: Device,
        change: &'static str,
    ) -> Self {
        Self::f32(name, lesson, Operation::Decode, device, change)
    }

    const fn f32(
        name: &'static str,
        lesson: &'static str,
        operation: Operation,
        device: Device,
        change: &'static str,
    ) -> Self {
        let (storage, tolerance) = (Storage::F32, Tolerance::F32);
        Self { name, lesson, operation, device, storage, tolerance, change }
    }

    /// The same version, storing its inputs in `storage` and held to `tolerance`.
    pub const fn stored_in(self, storage: Storage, tolerance: Tolerance) -> Self {
        Self { storage, tolerance, ..self }
    }
}

/// A forward version: its card and its function (CPU code, or a GPU version on a device).
pub struct ForwardVersion {
    /// Name, lesson, operation, device, format, tolerance.
    pub about: About,
    /// The forward pass, with its own parameters (tile sizes, ...) bound.
    pub forward: Box<dyn Forward>,
}

/// A backward version: its card and its function (CPU code, or a GPU version on a device).
pub struct BackwardVersion {
    /// Name, lesson, operation, device, format, tolerance.
    pub about: About,
    /// The backward pass, with its own parameters bound.
    pub backward: Box<dyn Backward>,
}

/// A decoding version: its card and its cache.
pub struct DecodeVersion {
    /// Name, lesson, operation, device, format, tolerance.
    pub about: About,
    /// Fills its cache, which then decodes.
    pub decoder: Box<dyn Decoder>,
}

impl ForwardVersion {
    /// A forward version: `about` must be a forward card (the registry's tests check it).
    pub fn new(about: About, forward: impl Forward + 'static) -> Self {
        Self { about, forward: Box::new(forward) }
    }
}

impl BackwardVersion {
    /// A backward version: `about` must be a backward card.
    pub fn new(about: About, backward: impl Backward + 'static) -> Self {
        Self { about, backward: Box::new(backward) }
    }
}

impl DecodeVersion {
    /// A decoding version: `about` must be a decoding card.
    pub fn new(about: About, decoder: impl Decoder + 'static) -> Self {
        Self { about, decoder: Box::new(decoder) }
    }
}
