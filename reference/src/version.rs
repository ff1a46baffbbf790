//! What the course's registry knows about each implementation.
//!
//! Every lesson exports its implementations as *versions* of one operation (the idea of
//! llm.c's `dev/cuda`: the first is the simplest, each later one changes one thing and says
//! what). A version is an [`About`] (its name, lesson, kind, storage format and tolerance)
//! and the code: a [`Forward`] or [`Backward`] function for CPU stages, a kernel constructor for
//! GPU ones (`gpu::attention::KernelVersion`). The `registry` crate collects them in course order; the tour,
//! the cross-stage equivalence test and the benchmarks read that one list.

use crate::compare::Tolerance;
use crate::contract::{Backward, Forward};

/// What a version computes, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A forward pass on the CPU: a [`Forward`] function.
    CpuForward,
    /// A backward pass on the CPU: a [`Backward`] function.
    CpuBackward,
    /// A forward pass as GPU kernels, built for a device and a head dimension.
    GpuKernel,
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
    /// CPU forward, CPU backward or GPU kernel.
    pub kind: Kind,
    /// The format its inputs are stored in.
    pub storage: Storage,
    /// How close to the f64 oracle it must be (the error model of
    /// [`crate::compare`](mod@crate::compare)).
    pub tolerance: Tolerance,
    /// One line: what this version changes from the one before it, and why.
    pub change: &'static str,
}

/// A CPU forward version: its card and its function.
pub struct ForwardVersion {
    /// Name, lesson, kind, format, tolerance.
    pub about: About,
    /// The forward pass, with its own parameters (tile sizes, ...) bound.
    pub forward: Box<dyn Forward>,
}

/// A CPU backward version: its card and its function.
pub struct BackwardVersion {
    /// Name, lesson, kind, format, tolerance.
    pub about: About,
    /// The backward pass, with its own parameters bound.
    pub backward: Box<dyn Backward>,
}

impl About {
    /// A version that stores its inputs in f32 and is held to the f32 error model.
    pub const fn f32(
        name: &'static str,
        lesson: &'static str,
        kind: Kind,
        change: &'static str,
    ) -> Self {
        Self { name, lesson, kind, storage: Storage::F32, tolerance: Tolerance::F32, change }
    }

    /// The same version, storing its inputs in `storage` and held to `tolerance`.
    pub const fn stored_in(self, storage: Storage, tolerance: Tolerance) -> Self {
        Self { storage, tolerance, ..self }
    }
}

impl ForwardVersion {
    /// A CPU forward version: `about.kind` must be [`Kind::CpuForward`] (the registry's tests
    /// check it).
    pub fn new(about: About, forward: impl Forward + 'static) -> Self {
        Self { about, forward: Box::new(forward) }
    }
}

impl BackwardVersion {
    /// A CPU backward version: `about.kind` must be [`Kind::CpuBackward`].
    pub fn new(about: About, backward: impl Backward + 'static) -> Self {
        Self { about, backward: Box::new(backward) }
    }
}
