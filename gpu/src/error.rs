//! What can go wrong on the device, as a type of its own.
//!
//! Every function of this crate that touches a device returns [`reference::AttentionError`], the
//! one error type of the course, so a kernel's `?` works the same on the CPU and the GPU. The
//! device's failures are built here as a [`GpuError`] and converted with `From` into
//! [`AttentionError::Device`]: the contract crate stays free of wgpu, and a caller that needs to
//! tell a refusal from a failure asks [`GpuError::of`] instead of reading the message.

use std::fmt;

use reference::{AttentionError, DeviceError};

use crate::ADAPTER_VAR;

/// A failure of the GPU, or a problem the GPU cannot take.
#[derive(Clone, Debug, PartialEq)]
pub enum GpuError {
    /// wgpu found no adapter at all.
    NoAdapter,
    /// `FLASH_ADAPTER` names no adapter present.
    AdapterNotFound {
        /// The value of the variable.
        wanted: String,
        /// The names of the adapters present.
        available: Vec<String>,
    },
    /// The adapter would not open a device.
    DeviceRefused {
        /// The adapter's name.
        adapter: String,
        /// What the driver said.
        reason: String,
    },
    /// The problem needs more of a device resource than the device offers (a buffer larger
    /// than its largest binding, more workgroups than one dispatch may launch, ...). A
    /// benchmark reports it as "refused", not as a failure.
    ExceedsDeviceLimit {
        /// What is too large, e.g. `"the score matrix S"`.
        what: String,
        /// How much of it the problem needs.
        needed: u64,
        /// How much the device allows.
        limit: u64,
        /// The `wgpu::Limits` field (or other limit) that sets it.
        limit_name: &'static str,
    },
    /// The adapter lacks an optional feature the call needs.
    MissingFeature {
        /// The `wgpu::Features` flag, e.g. `"TIMESTAMP_QUERY"`.
        feature: &'static str,
        /// What needs it.
        needed_for: &'static str,
    },
    /// A WGSL shader that does not parse or validate, or lacks the entry point asked for.
    Shader(String),
    /// A kernel used against its own contract (a shader without a binding the kernel reads
    /// back, a problem of another head dimension than the kernel was compiled for).
    KernelMisuse(String),
    /// The driver rejected a command (validation, out of memory).
    Rejected {
        /// What was being done, e.g. `"launching flash_forward"`.
        doing: String,
        /// What the driver said.
        reason: String,
    },
    /// Waiting for the device, reading a result back or timing a pass failed (a lost device).
    Lost(String),
}

impl GpuError {
    /// The `GpuError` inside `error`, if it came from the device.
    pub fn of(error: &AttentionError) -> Option<&GpuError> {
        match error {
            AttentionError::Device(device) => device.downcast_ref(),
            _ => None,
        }
    }

    /// Whether the device refused a problem too large for it (rather than failed).
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::ExceedsDeviceLimit { .. })
    }
}

impl From<GpuError> for AttentionError {
    fn from(error: GpuError) -> Self {
        AttentionError::Device(DeviceError::new(error))
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAdapter => f.write_str(NO_ADAPTER),
            Self::AdapterNotFound { wanted, available } => write!(
                f,
                "{ADAPTER_VAR}={wanted:?} matches no adapter; expected part of one of these \
                 names: {available:?}"
            ),
            Self::DeviceRefused { adapter, reason } => {
                write!(f, "could not open {adapter}: {reason}")
            }
            Self::ExceedsDeviceLimit { what, needed, limit, limit_name } => write!(
                f,
                "{what} needs {needed} but the device allows at most {limit} ({limit_name}); \
                 expected a smaller problem (fewer heads, shorter sequences) or a larger device"
            ),
            Self::MissingFeature { feature, needed_for } => write!(
                f,
                "this adapter has no {feature} feature, which {needed_for} needs; expected a \
                 device whose driver offers it"
            ),
            Self::Shader(message) | Self::KernelMisuse(message) | Self::Lost(message) => {
                f.write_str(message)
            }
            Self::Rejected { doing, reason } => write!(f, "{doing}: {reason}"),
        }
    }
}

impl std::error::Error for GpuError {}

const NO_ADAPTER: &str = "no GPU adapter found: wgpu found no Vulkan, Metal or DX12 device. \
    On Linux without a GPU, install Mesa's software Vulkan driver (lavapipe): \
    `sudo apt-get install mesa-vulkan-drivers` (Debian, Ubuntu) or \
    `sudo dnf install mesa-vulkan-drivers` (Fedora); with an NVIDIA GPU but no Vulkan loader, \
    install libvulkan1 and point VK_DRIVER_FILES at nvidia_icd.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_error_survives_the_trip_through_attention_error() {
        let refusal =
            GpuError::ExceedsDeviceLimit { what: "S".into(), needed: 2, limit: 1, limit_name: "x" };
        let error = AttentionError::from(refusal.clone());
        assert_eq!(GpuError::of(&error), Some(&refusal));
        assert!(GpuError::of(&error).is_some_and(GpuError::is_refusal));
        assert_eq!(error.to_string(), refusal.to_string());
        assert_eq!(error, AttentionError::from(refusal));
        assert_eq!(GpuError::of(&AttentionError::InvalidScale(f32::NAN)), None);
        assert!(!GpuError::Lost("gone".into()).is_refusal());
    }
}
