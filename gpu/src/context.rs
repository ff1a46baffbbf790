//! Choosing an adapter and opening a device on it.

use std::sync::OnceLock;

use reference::AttentionError;

use crate::GpuError;

/// Environment variable that forces an adapter: any part of its name, e.g. `llvmpipe` or
/// `H100` (case does not matter).
pub const ADAPTER_VAR: &str = "FLASH_ADAPTER";

/// Environment variable that lets GPU tests pass without running when no adapter exists
/// (`FLASH_SKIP_GPU_TESTS=1`). Without it a machine with no adapter fails every GPU test with
/// the error of [`Gpu::new`], so a missing driver is never mistaken for a passing test.
pub const SKIP_TESTS_VAR: &str = "FLASH_SKIP_GPU_TESTS";

/// Optional features the course uses when the adapter has them: 16-bit floats in shaders,
/// subgroup operations, and timestamps for [`crate::GpuTimer`].
const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::TIMESTAMP_QUERY);

/// Tensor cores, where the adapter has them: WGSL cooperative matrices (an experimental
/// feature of wgpu 30), used by lesson 10's tensor-core kernels with 16 x 16 x 16 tiles of f16
/// inputs and f32 accumulators. Requested only when the adapter offers exactly that shape.
const TENSOR_CORES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;

/// Whether `adapter` multiplies 16 x 16 f16 tiles into f32 accumulators on its tensor cores.
fn has_f16_tensor_cores(adapter: &wgpu::Adapter) -> bool {
    use wgpu::CooperativeScalarType::{F16, F32};
    adapter.features().contains(TENSOR_CORES | wgpu::Features::SHADER_F16)
        && adapter
            .cooperative_matrix_properties()
            .iter()
            .any(|p| (p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type) == (16, 16, 16, F16, F32))
}

/// Whether `device` was opened with tensor cores (see [`Gpu::has_tensor_cores`]).
pub fn has_tensor_cores(device: &wgpu::Device) -> bool {
    device.features().contains(TENSOR_CORES)
}

/// An open device: the adapter it came from, the device and its queue.
pub struct Gpu {
    /// What the adapter says about itself (name, backend, device type, driver).
    pub info: wgpu::AdapterInfo,
    /// The device, opened with the adapter's own limits (not wgpu's conservative defaults:
    /// those allow 16 KiB of workgroup memory where an H100 has 48 KiB).
    pub device: wgpu::Device,
    /// The device's queue.
    pub queue: wgpu::Queue,
}

impl Gpu {
    /// Opens the best adapter: a discrete GPU before an integrated one, before a software
    /// driver; or the one named by the `FLASH_ADAPTER` environment variable.
    ///
    /// Errors when there is no adapter at all (the message says how to get lavapipe), when
    /// `FLASH_ADAPTER` names none of them, or when the device cannot be opened.
    pub fn new() -> Result<Self, AttentionError> {
        pollster::block_on(Self::open())
    }

    /// One device per process, opened on first use: tests and benchmarks share it instead of
    /// paying for a new device (and a new shader cache) each time.
    pub fn shared() -> Result<&'static Self, AttentionError> {
        static SHARED: OnceLock<Result<Gpu, AttentionError>> = OnceLock::new();
        SHARED.get_or_init(Self::new).as_ref().map_err(Clone::clone)
    }

    async fn open() -> Result<Self, AttentionError> {
        let descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        let instance = wgpu::Instance::new(descriptor);
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let wanted = std::env::var(ADAPTER_VAR).ok().filter(|name| !name.is_empty());
        let adapter = choose_adapter(adapters, wanted.as_deref())?;
        let info = adapter.get_info();
        let tensor_cores = has_f16_tensor_cores(&adapter);
        let mut features = adapter.features() & OPTIONAL_FEATURES;
        let mut experimental = wgpu::ExperimentalFeatures::disabled();
        if tensor_cores {
            features |= TENSOR_CORES;
            // SAFETY: wgpu asks for this token before any EXPERIMENTAL feature: it warns that
            // such features may still have bugs. Only lesson 10's tensor-core kernels use it,
            // and their tests run on the GPUs they are measured on.
            experimental = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("flash attention course"),
                required_features: features,
                required_limits: adapter.limits(),
                experimental_features: experimental,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| GpuError::DeviceRefused {
                adapter: info.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self { info, device, queue })
    }

    /// Whether the device was opened with tensor cores (16 x 16 x 16 f16 cooperative matrices
    /// with f32 accumulators); lavapipe has none.
    pub fn has_tensor_cores(&self) -> bool {
        has_tensor_cores(&self.device)
    }

    /// Whether the adapter is software that runs on the CPU (lavapipe): the same kernels,
    /// hundreds of times slower than a GPU's.
    pub fn runs_on_the_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// One line for tables and logs: `NVIDIA H200 (Vulkan, DiscreteGpu, driver 580.159.04)`.
    pub fn describe(&self) -> String {
        let info = &self.info;
        let driver = if info.driver_info.is_empty() { &info.driver } else { &info.driver_info };
        format!("{} ({:?}, {:?}, driver {driver})", info.name, info.backend, info.device_type)
    }
}

/// The shared device for a GPU test, or `None` (after saying so on stderr) when there is no
/// adapter and `FLASH_SKIP_GPU_TESTS` is set.
///
/// # Panics
/// When there is no adapter and the skip variable is not set: the panic message is the
/// error of [`Gpu::new`], which says how to install one.
pub fn for_tests() -> Option<&'static Gpu> {
    match Gpu::shared() {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var_os(SKIP_TESTS_VAR).is_some() => {
            eprintln!("GPU test skipped ({SKIP_TESTS_VAR} is set): {e}");
            None
        }
        Err(e) => panic!("{e}\n(set {SKIP_TESTS_VAR}=1 to skip GPU tests on purpose)"),
    }
}

/// Picks the adapter named by `wanted`, or else the most capable kind available.
fn choose_adapter(
    adapters: Vec<wgpu::Adapter>,
    wanted: Option<&str>,
) -> Result<wgpu::Adapter, AttentionError> {
    if adapters.is_empty() {
        return Err(GpuError::NoAdapter.into());
    }
    if let Some(wanted) = wanted {
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        let position = names.iter().position(|n| n.to_lowercase().contains(&wanted.to_lowercase()));
        return match position {
            Some(i) => Ok(adapters.into_iter().nth(i).expect("position is in range")),
            None => {
                Err(GpuError::AdapterNotFound { wanted: wanted.to_string(), available: names }
                    .into())
            }
        };
    }
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    Ok(adapters.into_iter().min_by_key(rank).expect("adapters is not empty"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapters() -> Vec<wgpu::Adapter> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
    }

    #[test]
    fn no_adapter_says_how_to_get_one() {
        let err = choose_adapter(Vec::new(), None).expect_err("no adapters");
        assert!(err.to_string().contains("apt-get install mesa-vulkan-drivers"), "{err}");
    }

    #[test]
    fn an_unknown_adapter_name_lists_the_ones_there_are() {
        let adapters = adapters();
        if adapters.is_empty() {
            return; // covered by no_adapter_says_how_to_get_one
        }
        let first = adapters[0].get_info().name;
        let err = choose_adapter(adapters, Some("no such gpu")).expect_err("no match");
        assert!(err.to_string().contains(&first), "{err}");
        let again = choose_adapter(self::adapters(), Some(&first.to_uppercase())).unwrap();
        assert_eq!(again.get_info().name, first);
    }
}
