//! A GPU version of one of the course's operations: its card, how to build it, and the device
//! features it cannot run without. The forward kernels ([`crate::attention::KernelVersion`]),
//! the backward kernels ([`crate::backward::BackwardKernelVersion`]) and decoding
//! ([`DecodeKernelVersion`]) all take this shape; only what `build` makes differs.

use reference::{About, Decoder};

use crate::GpuError;

/// A GPU version: its card, and `build`, which makes it for a device.
pub struct GpuVersion<Build> {
    /// Name, lesson, operation, device ([`reference::Device::Gpu`]), storage format,
    /// tolerance.
    pub about: About,
    /// Makes the version for a device (a kernel may compile its shader for one head dim).
    pub build: Build,
    /// Device features the version cannot run without (tensor cores); empty for most.
    pub requires: wgpu::Features,
}

impl<Build> GpuVersion<Build> {
    /// A version that runs on any adapter the course supports (lavapipe included).
    pub fn new(about: About, build: Build) -> Self {
        Self { about, build, requires: wgpu::Features::empty() }
    }

    /// The same version, runnable only on devices with `features`.
    pub fn requiring(self, features: wgpu::Features) -> Self {
        Self { requires: features, ..self }
    }

    /// Why this version cannot run on `device` (a feature it requires is missing), or `None`.
    pub fn missing_on(&self, device: &wgpu::Device) -> Option<GpuError> {
        let missing = self.requires - device.features();
        let named = [
            (
                wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
                "EXPERIMENTAL_COOPERATIVE_MATRIX (tensor cores)",
            ),
            (wgpu::Features::SHADER_F16, "SHADER_F16"),
            (wgpu::Features::SUBGROUP, "SUBGROUP"),
        ];
        let first = named.iter().find(|(feature, _)| missing.contains(*feature));
        (!missing.is_empty()).then(|| GpuError::MissingFeature {
            feature: first.map_or("a feature the kernel requires", |(_, name)| name),
            needed_for: self.about.name,
        })
    }
}

/// A GPU decoding version: its card, and its decoder on a GPU.
pub type DecodeKernelVersion = GpuVersion<fn(&'static crate::Gpu) -> Box<dyn Decoder>>;
