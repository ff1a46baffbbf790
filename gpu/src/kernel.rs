//! Compiling WGSL, binding buffers, launching dispatches: the three steps every kernel of the
//! course goes through, with every wgpu error turned into an [`AttentionError`].
//!
//! wgpu reports validation errors (a shader that does not compile, a binding of the wrong
//! type, too many workgroups) to an error handler that panics by default. Each step here runs
//! inside an *error scope* instead, and a caught error comes back as `Err`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use reference::AttentionError;

use crate::GpuError;

/// One compute dispatch: a pipeline, its buffers, and how many workgroups to launch.
pub struct Dispatch {
    /// Name for error messages, e.g. `"scores S = Q K^T"`.
    pub label: &'static str,
    /// The compiled kernel.
    pub pipeline: wgpu::ComputePipeline,
    /// Its buffers, as bound by [`bind`].
    pub bind_group: wgpu::BindGroup,
    /// Workgroups along x, y, z.
    pub workgroups: [u32; 3],
}

/// Compiles the entry point `entry` of a WGSL source, giving its `override` constants the
/// values in `constants` (WGSL overrides are set when the pipeline is created, so one shader
/// file serves every tile size).
///
/// Pipelines are kept, per device, source, entry point and constants, for the life of the
/// process: compiling one takes a tenth of a second or more on lavapipe, and tests (proptest's
/// shrinking above all) ask for the same few pipelines hundreds of times.
pub fn compile(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<wgpu::ComputePipeline, AttentionError> {
    compile_with_checks(device, label, source, entry, constants, Checks::On)
}

/// Whether wgpu adds its run-time checks to a shader: every array index clamped to the
/// array's length, every loop given an iteration bound. They make an out-of-bounds access
/// harmless, and cost time in a hot loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Checks {
    /// The default: safe whatever the shader does.
    On,
    /// No checks: only for kernels whose every index is proved in range by their tests on
    /// the sizes they accept (lesson 10's fastest versions). A wrong index then reads or
    /// writes other memory instead of a clamped element.
    Off,
}

/// [`compile`], choosing whether wgpu's run-time checks are added ([`Checks`]).
pub fn compile_with_checks(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
    checks: Checks,
) -> Result<wgpu::ComputePipeline, AttentionError> {
    type Key = (wgpu::Device, String, String, Vec<(String, u64)>, Checks);
    static PIPELINES: Mutex<BTreeMap<Key, wgpu::ComputePipeline>> = Mutex::new(BTreeMap::new());
    let values = constants.iter().map(|&(name, value)| (name.to_string(), value.to_bits()));
    let key = (device.clone(), source.to_string(), entry.to_string(), values.collect(), checks);
    if let Some(pipeline) = PIPELINES.lock().expect("not poisoned").get(&key) {
        return Ok(pipeline.clone());
    }
    let pipeline = compile_uncached(device, label, source, entry, constants, checks)?;
    PIPELINES.lock().expect("not poisoned").insert(key, pipeline.clone());
    Ok(pipeline)
}

fn compile_uncached(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
    checks: Checks,
) -> Result<wgpu::ComputePipeline, AttentionError> {
    catch_errors(device, &format!("compiling {label}"), || {
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let module = match checks {
            Checks::On => device.create_shader_module(descriptor),
            // SAFETY: wgpu's contract for a trusted module is that the shader never indexes
            // out of bounds nor loops forever; `Checks::Off` is documented as only for kernels
            // whose tests prove that on every size they accept.
            Checks::Off => unsafe {
                device.create_shader_module_trusted(
                    descriptor,
                    wgpu::ShaderRuntimeChecks::unchecked(),
                )
            },
        };
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        })
    })
}

/// The SPIR-V that wgpu's translator (naga) makes of entry point `entry` of a WGSL `source`
/// for a Vulkan 1.3 device, with `overrides` set and run-time checks as `checks` says (the
/// options wgpu uses). For checks without a GPU (every shader must translate, not only
/// validate: naga's writer has failed on shaders its validator accepted) and for handing a
/// kernel to the driver directly (the lab's `shader_stats`).
pub fn spirv(
    source: &str,
    entry: &str,
    overrides: &[(&str, f64)],
    checks: Checks,
) -> Result<Vec<u32>, AttentionError> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let shader_error = |what: &str, e: String| GpuError::Shader(format!("{what}: {e}"));
    let (module, info) = validated(source)?;
    let stage = module
        .entry_points
        .iter()
        .find(|e| e.name == entry)
        .ok_or_else(|| GpuError::Shader(format!("the shader has no entry point `{entry}`")))?
        .stage;
    let constants = overrides.iter().map(|&(name, value)| (name.to_string(), value)).collect();
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((stage, entry)),
        &constants,
    )
    .map_err(|e| shader_error("its overrides", e.to_string()))?;
    let checked = checks == Checks::On;
    let index = if checked { BoundsCheckPolicy::Restrict } else { BoundsCheckPolicy::Unchecked };
    let options = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::empty(),
        // The shader's own group and binding numbers, as wgpu's pipeline layout has them.
        fake_missing_bindings: true,
        bounds_check_policies: BoundsCheckPolicies {
            index,
            buffer: BoundsCheckPolicy::Unchecked,
            image_load: BoundsCheckPolicy::Unchecked,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: checked,
        emit_int_div_checks: checked,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions { shader_stage: stage, entry_point: entry.to_string() };
    spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| shader_error("naga's SPIR-V writer failed", e.to_string()).into())
}

/// The WGSL `source` parsed by naga, or the error naga gives, with the line it points at.
fn parsed(source: &str) -> Result<naga::Module, GpuError> {
    naga::front::wgsl::parse_str(source).map_err(|e| {
        GpuError::Shader(format!("the shader does not parse: {}", e.emit_to_string(source)))
    })
}

/// [`parsed`], then validated with every capability (the device's own features are checked
/// when wgpu compiles the shader).
fn validated(source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), GpuError> {
    let module = parsed(source)?;
    let flags = naga::valid::ValidationFlags::all();
    let info = naga::valid::Validator::new(flags, naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| {
            GpuError::Shader(format!("the shader is not valid: {}", e.emit_to_string(source)))
        })?;
    Ok((module, info))
}

/// The `@binding` numbers of group 0 that entry point `entry` of the WGSL `source` uses. A
/// binding the shader declares but never touches is left out of the layout the pipeline gets,
/// so binding a buffer to it fails: callers that need a binding check for it here and say so.
pub fn bindings_used(source: &str, entry: &str) -> Result<Vec<u32>, AttentionError> {
    let (module, info) = validated(source)?;
    let index = module
        .entry_points
        .iter()
        .position(|e| e.name == entry)
        .ok_or_else(|| GpuError::Shader(format!("the shader has no entry point `{entry}`")))?;
    let uses = info.get_entry_point(index);
    Ok(module
        .global_variables
        .iter()
        .filter(|(handle, _)| !uses[*handle].is_empty())
        .filter_map(|(_, global)| global.binding.as_ref())
        .filter(|binding| binding.group == 0)
        .map(|binding| binding.binding)
        .collect())
}

/// Bytes of workgroup memory that the WGSL `source` declares (every `var<workgroup>`, at
/// naga's size of its type). The hosts that choose tiles compute the same number from the
/// tile sizes to pick a shape that fits a device; tests compare the two.
pub fn workgroup_memory_bytes(source: &str) -> Result<usize, AttentionError> {
    let module = parsed(source)?;
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| GpuError::Shader(format!("the shader's types have no layout: {e}")))?;
    Ok(module
        .global_variables
        .iter()
        .filter(|(_, global)| global.space == naga::AddressSpace::WorkGroup)
        .map(|(_, global)| layouter[global.ty].size as usize)
        .sum())
}

/// Binds each `(binding, buffer)` pair to `@group(0) @binding(binding)` of `pipeline`. Only
/// the bindings the entry point uses may be given (wgpu derives the layout from the shader).
pub fn bind(
    device: &wgpu::Device,
    pipeline: &wgpu::ComputePipeline,
    buffers: &[(u32, &wgpu::Buffer)],
) -> Result<wgpu::BindGroup, AttentionError> {
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .map(|&(binding, buffer)| wgpu::BindGroupEntry {
            binding,
            resource: buffer.as_entire_binding(),
        })
        .collect();
    catch_errors(device, "binding buffers", || {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    })
}

/// A workgroup count as `u32`, saturating: a count too large for `u32` is also far above the
/// device's limit, which [`launch`] reports.
pub fn workgroup_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Checks a dispatch size against `max_compute_workgroups_per_dimension` (65535 on most
/// devices): a clear error instead of a launch that the device rejects.
pub fn check_workgroups(
    device: &wgpu::Device,
    label: &str,
    workgroups: [u32; 3],
) -> Result<(), AttentionError> {
    let limit = device.limits().max_compute_workgroups_per_dimension;
    match workgroups.iter().find(|&&count| count > limit) {
        Some(&count) => Err(GpuError::ExceedsDeviceLimit {
            what: format!("{label}: {workgroups:?} workgroups"),
            needed: u64::from(count),
            limit: u64::from(limit),
            limit_name: "max_compute_workgroups_per_dimension",
        }
        .into()),
        None => Ok(()),
    }
}

/// Lavapipe (Mesa's `llvmpipe` Vulkan driver) stops every loop of a shader invocation once the
/// invocation has run this many loop iterations in total (`LP_MAX_TGSI_LOOP_ITERATIONS`, a
/// guard against endless loops), and the kernel then returns a wrong answer without any error.
/// Loops with a trip count known when the pipeline is compiled (an `override` constant) are
/// unrolled first and do not count.
pub const LAVAPIPE_LOOP_LIMIT: u64 = 65_535;

/// An error if the device is lavapipe and one invocation of `kernel` would run more than
/// [`LAVAPIPE_LOOP_LIMIT`] loop iterations (`iterations`, counted by the kernel's host code
/// from its loops). Real GPUs have no such limit.
pub fn check_loop_iterations(
    device: &wgpu::Device,
    kernel: &str,
    iterations: u64,
) -> Result<(), AttentionError> {
    let is_lavapipe = device.adapter_info().name.contains("llvmpipe");
    if is_lavapipe && iterations > LAVAPIPE_LOOP_LIMIT {
        return Err(GpuError::ExceedsDeviceLimit {
            what: format!("{kernel}: {iterations} loop iterations in one thread"),
            needed: iterations,
            limit: LAVAPIPE_LOOP_LIMIT,
            limit_name: "lavapipe's loop limit per invocation, LP_MAX_TGSI_LOOP_ITERATIONS",
        }
        .into());
    }
    Ok(())
}

/// A kernel's dispatches bound to one call's buffers `io` on the device: upload once, run as
/// often as needed (a benchmark's repeats, a model's layers), read back when wanted. The
/// forward's is [`crate::attention::Prepared`], the backward's
/// [`crate::backward::PreparedBackward`].
pub struct Bound<Io> {
    /// The buffers on the device.
    pub io: Io,
    pub(crate) dispatches: Vec<Dispatch>,
}

impl<Io> Bound<Io> {
    /// Runs the dispatches once and waits for the GPU; with a `timer`, returns the GPU time.
    pub fn run(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timer: Option<&crate::GpuTimer>,
    ) -> Result<Option<f64>, AttentionError> {
        launch(device, queue, &self.dispatches, timer)
    }

    /// Runs the dispatches `times` times back to back in one pass and waits; with a `timer`,
    /// returns the GPU time of all of them.
    pub fn run_repeated(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timer: Option<&crate::GpuTimer>,
        times: usize,
    ) -> Result<Option<f64>, AttentionError> {
        launch_repeated(device, queue, &self.dispatches, timer, times)
    }
}

/// Runs `dispatches` in order in one compute pass (wgpu makes each dispatch see the writes of
/// the ones before it) and waits for the GPU. With a `timer`, returns the GPU time of the pass.
pub fn launch(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    dispatches: &[Dispatch],
    timer: Option<&crate::GpuTimer>,
) -> Result<Option<f64>, AttentionError> {
    launch_repeated(device, queue, dispatches, timer, 1)
}

/// [`launch`], with the dispatches recorded `times` times back to back in the one pass: the
/// GPU time of the pass is then that of `times` runs with no idle gap between them (a
/// benchmark's way to keep the GPU at its working clock on short problems).
pub fn launch_repeated(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    dispatches: &[Dispatch],
    timer: Option<&crate::GpuTimer>,
    times: usize,
) -> Result<Option<f64>, AttentionError> {
    for d in dispatches {
        check_workgroups(device, d.label, d.workgroups)?;
    }
    catch_errors(device, "launching the kernels", || {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("attention"),
                timestamp_writes: timer.map(crate::GpuTimer::pass_writes),
            });
            for d in std::iter::repeat_n(dispatches, times).flatten() {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                let [x, y, z] = d.workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
        }
        if let Some(timer) = timer {
            timer.resolve(&mut encoder);
        }
        queue.submit([encoder.finish()]);
    })?;
    crate::buffers::wait(device)?;
    timer.map(|t| t.seconds(device, queue)).transpose()
}

/// Runs `work` inside validation and out-of-memory error scopes; the first error caught
/// becomes `Err`, prefixed by `doing`.
pub fn catch_errors<R>(
    device: &wgpu::Device,
    doing: &str,
    work: impl FnOnce() -> R,
) -> Result<R, AttentionError> {
    let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let result = work();
    let errors = [pollster::block_on(validation.pop()), pollster::block_on(out_of_memory.pop())];
    match errors.into_iter().flatten().next() {
        Some(error) => {
            Err(GpuError::Rejected { doing: doing.to_string(), reason: error.to_string() }.into())
        }
        None => Ok(result),
    }
}
