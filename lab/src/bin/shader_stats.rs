//! What the driver's compiler made of each kernel: registers per thread, spills to local
//! memory, instruction counts, as the driver reports them through Vulkan's
//! `VK_KHR_pipeline_executable_properties`.
//!
//! wgpu gives no access to those statistics, so this example translates each kernel's WGSL
//! to SPIR-V with naga (wgpu's own translator, with the options wgpu uses for that kernel)
//! and creates the compute pipeline a second time through raw Vulkan (`ash`, the Vulkan
//! bindings inside wgpu), asking the driver to keep its statistics. So it needs a GPU whose
//! driver reports them, such as NVIDIA's (the register counts the book quotes are its); a
//! driver that lacks the extension (Mesa 22's lavapipe) is reported as such, and nothing is
//! measured. It opens the first Vulkan device, whatever `FLASH_ADAPTER` says.
//!
//! ```text
//! cargo run --release -p lab --bin shader_stats                  # D = 64, 128, 256
//! cargo run --release -p lab --bin shader_stats -- --head-dims 64 --out stats/
//! cargo run --release -p lab --bin shader_stats -- --only v6,v8     # names starting so
//! cargo run --release -p lab --bin shader_stats -- --wgsl k.wgsl --entry main
//! ```
//!
//! With `--out DIR`, each kernel's statistics and the driver's internal representations (where
//! it gives any) are written to `DIR/<kernel>.txt`, and the driver's pipeline-cache data for
//! that kernel alone (which holds its machine code) to `DIR/<kernel>.cache`.

use std::ffi::CStr;

use ash::vk;
use gpu::Gpu;
use gpu::kernel::Checks;
use lesson10::tuning::load_choices;
use lesson10::{Kernel, LeaveOut, Shader, V1, V3, V6, Variant, Version};
use reference::AttentionError;

/// naga's SPIR-V for `shader`'s entry point `flash_forward`, with the options wgpu uses.
fn spirv(shader: &Shader) -> Result<Vec<u32>, String> {
    let overrides = shader.overrides.iter().map(|&(name, value)| (name, value)).collect::<Vec<_>>();
    gpu::kernel::spirv(&shader.source, "flash_forward", &overrides, shader.checks)
        .map_err(|e| e.to_string())
}

/// The bindings of every attention shader: the params uniform, then Q, K, V, O and L.
const ATTENTION_BINDINGS: [vk::DescriptorType; 6] = [
    vk::DescriptorType::UNIFORM_BUFFER,
    vk::DescriptorType::STORAGE_BUFFER,
    vk::DescriptorType::STORAGE_BUFFER,
    vk::DescriptorType::STORAGE_BUFFER,
    vk::DescriptorType::STORAGE_BUFFER,
    vk::DescriptorType::STORAGE_BUFFER,
];

/// A Vulkan error as text, naming the call that gave it.
fn vk_err(what: &'static str) -> impl Fn(vk::Result) -> String {
    move |e| format!("{what}: {e}")
}

/// What the driver says of one compiled kernel: its statistics as `name: value` lines, its
/// text internal representations (if it gives any), and its pipeline-cache data.
struct Compiled {
    statistics: Vec<String>,
    representations: Vec<String>,
    cache: Vec<u8>,
}

/// A Vulkan device opened with every feature the adapter has and the extension that reports
/// pipeline statistics.
struct Vulkan {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    executables: ash::khr::pipeline_executable_properties::Device,
    name: String,
}

impl Vulkan {
    fn open() -> Result<Self, String> {
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let instance = unsafe {
            entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
        }
        .map_err(vk_err("vkCreateInstance"))?;
        let physical =
            unsafe { instance.enumerate_physical_devices() }.map_err(vk_err("devices"))?;
        let physical = *physical.first().ok_or("no Vulkan device")?;
        let properties = unsafe { instance.get_physical_device_properties(physical) };
        let name = properties.device_name_as_c_str().unwrap_or(c"?").to_string_lossy().into_owned();
        let extensions = unsafe { instance.enumerate_device_extension_properties(physical) }
            .map_err(vk_err("extensions"))?;
        let has =
            |wanted: &CStr| extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(wanted));
        let stats = ash::khr::pipeline_executable_properties::NAME;
        if !has(stats) {
            return Err(format!("{name}: the driver lacks {}", stats.to_string_lossy()));
        }
        let mut wanted = vec![stats.as_ptr()];
        if has(ash::khr::cooperative_matrix::NAME) {
            wanted.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        // Every feature the device has, switched on: the shaders need f16, 16-bit storage,
        // subgroups, the memory model and cooperative matrices.
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let mut features = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut v11)
            .push_next(&mut v12)
            .push_next(&mut v13)
            .push_next(&mut exec);
        if wanted.len() > 1 {
            features = features.push_next(&mut coop);
        }
        unsafe { instance.get_physical_device_features2(physical, &mut features) };
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or("no compute queue")? as u32;
        let queue = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&[1.0])];
        let create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue)
            .enabled_extension_names(&wanted)
            .push_next(&mut features);
        let device = unsafe { instance.create_device(physical, &create, None) }
            .map_err(vk_err("vkCreateDevice"))?;
        let executables = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
        Ok(Self { _entry: entry, instance, device, executables, name })
    }

    /// A pipeline layout of one descriptor set whose bindings 0, 1, ... have these types.
    fn layout(
        &self,
        types: &[vk::DescriptorType],
    ) -> Result<(vk::DescriptorSetLayout, vk::PipelineLayout), String> {
        let bindings: Vec<_> = (0..)
            .zip(types)
            .map(|(binding, &ty)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding)
                    .descriptor_type(ty)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        let set_layout = unsafe { self.device.create_descriptor_set_layout(&info, None) }
            .map_err(vk_err("descriptor set layout"))?;
        let set_layouts = [set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        let layout = unsafe { self.device.create_pipeline_layout(&info, None) }
            .map_err(vk_err("pipeline layout"))?;
        Ok((set_layout, layout))
    }

    /// What the driver says of `words` compiled as a compute pipeline whose bindings have the
    /// types `bindings`.
    fn statistics(
        &self,
        words: &[u32],
        entry: &CStr,
        bindings: &[vk::DescriptorType],
    ) -> Result<Compiled, String> {
        let (set_layout, layout) = self.layout(bindings)?;
        let module = unsafe {
            self.device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
        }
        .map_err(vk_err("vkCreateShaderModule"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        let create = vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout).flags(
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
        );
        // A fresh pipeline cache per kernel: its data afterwards is the driver's own blob for
        // this one pipeline, which holds the machine code (written out with --out).
        let cache = unsafe {
            self.device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
        }
        .map_err(vk_err("pipeline cache"))?;
        let pipeline = unsafe { self.device.create_compute_pipelines(cache, &[create], None) }
            .map_err(|(_, e)| format!("vkCreateComputePipelines: {e}"))?[0];
        let blob = unsafe { self.device.get_pipeline_cache_data(cache) }
            .map_err(vk_err("pipeline cache data"))?;
        let mut lines = Vec::new();
        let mut representations = Vec::new();
        let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
        let executables = unsafe { self.executables.get_pipeline_executable_properties(&info) }
            .map_err(vk_err("executable properties"))?;
        for index in 0..executables.len() as u32 {
            let executable =
                vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(index);
            let stats = unsafe { self.executables.get_pipeline_executable_statistics(&executable) }
                .map_err(vk_err("statistics"))?;
            for stat in stats {
                let name = stat.name_as_c_str().unwrap_or(c"?").to_string_lossy().into_owned();
                let value = unsafe {
                    match stat.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            stat.value.b32.to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                            stat.value.i64.to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                            stat.value.u64.to_string()
                        }
                        _ => stat.value.f64.to_string(),
                    }
                };
                lines.push(format!("{name}: {value}"));
            }
            representations.extend(self.representations(&executable)?);
        }
        unsafe {
            self.device.destroy_pipeline_cache(cache, None);
            self.device.destroy_pipeline(pipeline, None);
            self.device.destroy_shader_module(module, None);
            self.device.destroy_pipeline_layout(layout, None);
            self.device.destroy_descriptor_set_layout(set_layout, None);
        }
        Ok(Compiled { statistics: lines, representations, cache: blob })
    }

    /// The text internal representations of one executable (the driver's intermediate code or
    /// machine code, where it exposes them).
    fn representations(
        &self,
        executable: &vk::PipelineExecutableInfoKHR,
    ) -> Result<Vec<String>, String> {
        let fp = self.executables.fp();
        let handle = self.device.handle();
        let mut count = 0u32;
        let call = |count: &mut u32, data: *mut vk::PipelineExecutableInternalRepresentationKHR| unsafe {
            (fp.get_pipeline_executable_internal_representations_khr)(
                handle, executable, count, data,
            )
        };
        call(&mut count, std::ptr::null_mut())
            .result()
            .map_err(|e| format!("representations: {e}"))?;
        let mut reps =
            vec![vk::PipelineExecutableInternalRepresentationKHR::default(); count as usize];
        call(&mut count, reps.as_mut_ptr())
            .result()
            .map_err(|e| format!("representations: {e}"))?;
        let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
        for (rep, buffer) in reps.iter_mut().zip(&mut buffers) {
            rep.p_data = buffer.as_mut_ptr().cast();
        }
        call(&mut count, reps.as_mut_ptr())
            .result()
            .map_err(|e| format!("representations: {e}"))?;
        Ok(reps
            .iter()
            .zip(&buffers)
            .filter(|(rep, _)| rep.is_text == vk::TRUE)
            .map(|(rep, buffer)| {
                let name = rep.name_as_c_str().unwrap_or(c"?").to_string_lossy().into_owned();
                let text = String::from_utf8_lossy(buffer).trim_end_matches('\0').to_string();
                format!("== {name}\n{text}")
            })
            .collect())
    }
}

impl Drop for Vulkan {
    fn drop(&mut self) {
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// A kernel to report: its WGSL, made only when it is wanted (making every shape takes a while).
type Make<'a> = Box<dyn FnOnce() -> Result<Shader, AttentionError> + 'a>;

/// The kernels to report at `head_dim`, each by its name: versions 1 and 3 with the tiles they
/// prefer on the device, and every tile shape of versions 4 to 11 that runs on it.
fn kernels(gpu: &Gpu, head_dim: usize) -> Vec<(String, Make<'_>)> {
    let device = &gpu.device;
    let as_registered = |variant: Result<Variant, AttentionError>| -> Make<'_> {
        Box::new(move || variant?.shader(head_dim))
    };
    let v1 = Kernel::<V1>::choose(device, head_dim).map(Variant::of::<V1>);
    let v3 = Kernel::<V3>::choose(device, head_dim).map(Variant::of::<V3>);
    let mut all: Vec<(String, Make)> = vec![
        ("v1 register tiles".to_string(), as_registered(v1)),
        ("v3 no bounds checks".to_string(), as_registered(v3)),
    ];
    // Versions 8's and 9's other times to load K and V after every version's shapes.
    let shapes = lesson10::every_variant(head_dim).into_iter().filter(|v| v.number >= 4);
    for variant in shapes.chain(load_choices(head_dim)) {
        if variant.runs_on(device, head_dim) {
            let name = variant.describe();
            all.push((name, Box::new(move || variant.shader(head_dim))));
        }
    }
    // Version 6 without parts of its work: which part keeps an array in memory, and how many
    // registers each part takes (the registers decide how many workgroups share a
    // multiprocessor, so leaving a part out can change that too).
    if let Ok(best) = Kernel::<V6>::choose(device, head_dim) {
        for (what, leave_out) in [
            ("rescale", LeaveOut::RESCALE),
            ("output", LeaveOut::OUTPUT),
            ("rescale, output", LeaveOut::RESCALE.and(LeaveOut::OUTPUT)),
            ("softmax", LeaveOut::SOFTMAX),
            ("K/V staging", LeaveOut::STAGING),
            ("K/V loads", LeaveOut::LOADS),
            ("K/V stores", LeaveOut::STASH),
        ] {
            let variant = Variant::of::<V6>(best).leaving_out(leave_out);
            let name = format!("{} without {what}", V6::describe(&best));
            all.push((name, Box::new(move || variant.shader(head_dim))));
        }
    }
    all
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let head_dims = bench::report::list_arg(&args, "--head-dims", vec![64, 128, 256])?;
    let out = value("--out").map(std::path::PathBuf::from);
    let only = bench::report::names_arg(&args, "--only")?;
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    if args.iter().any(|a| a == "--wgsl") {
        let path = value("--wgsl").ok_or("--wgsl needs the path of a WGSL file")?;
        let entry = value("--entry").ok_or("--wgsl needs --entry NAME, the entry point")?;
        return any_kernel(path, entry);
    }
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let vulkan = Vulkan::open()?;
    println!(
        "Device: {} (statistics from {}); {}",
        gpu.describe(),
        vulkan.name,
        bench::Machine::this().date
    );
    // The microbenchmark's kernels (lab/src/bin/primitives.wgsl): fragments from registers and
    // from workgroup memory at full speed, for comparison.
    println!("\nprimitives.wgsl");
    for (mode, products) in [(0, 4), (1, 2), (4, 4), (5, 4)] {
        let constants = [("MODE", mode), ("PRODUCTS", products)];
        let source = gpu::wgsl::specialise(include_str!("primitives.wgsl"), &constants)
            .map_err(|e| e.to_string())?;
        let words =
            gpu::kernel::spirv(&source, "main", &[], Checks::Off).map_err(|e| e.to_string())?;
        match vulkan.statistics(&words, c"main", &[vk::DescriptorType::STORAGE_BUFFER]) {
            Ok(compiled) => {
                println!("mode {mode}, {products} products: {}", compiled.statistics.join(", "))
            }
            Err(e) => println!("mode {mode}: {e}"),
        }
    }
    for head_dim in head_dims {
        println!("\nD = {head_dim}");
        for (name, build) in kernels(gpu, head_dim) {
            if !lesson10::selected_by_any(&name, &only) {
                continue;
            }
            let shader = match build() {
                Ok(shader) => shader,
                Err(e) => {
                    println!("{name}: not built: {e}");
                    continue;
                }
            };
            let result = spirv(&shader)
                .and_then(|words| vulkan.statistics(&words, c"flash_forward", &ATTENTION_BINDINGS));
            match result {
                Ok(Compiled { statistics: lines, representations, cache }) => {
                    println!("{name}: {}", lines.join(", "));
                    if let Some(dir) = &out {
                        let file: String = format!("d{head_dim} {name}")
                            .chars()
                            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                            .collect();
                        let text =
                            format!("{}\n\n{}\n", lines.join("\n"), representations.join("\n\n"));
                        std::fs::write(dir.join(format!("{file}.txt")), text)
                            .map_err(|e| e.to_string())?;
                        std::fs::write(dir.join(format!("{file}.cache")), &cache)
                            .map_err(|e| e.to_string())?;
                    }
                }
                Err(e) => println!("{name}: {e}"),
            }
        }
    }
    Ok(())
}

/// The statistics of entry point `entry` of the WGSL file at `path`, taken as it is (constants
/// set, loops unrolled: lesson 11's `decode_benchmark --write-shader` writes its kernels so),
/// with the bindings the file declares.
fn any_kernel(path: &str, entry: &str) -> Result<(), String> {
    let source = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let types = declared_bindings(&source).map_err(|e| format!("{path}: {e}"))?;
    let words =
        gpu::kernel::spirv(&source, entry, &[], Checks::Off).map_err(|e| format!("{path}: {e}"))?;
    let entry_name = std::ffi::CString::new(entry).map_err(|e| e.to_string())?;
    let vulkan = Vulkan::open()?;
    println!("Statistics from {}; {}", vulkan.name, bench::Machine::this().date);
    let compiled = vulkan.statistics(&words, &entry_name, &types)?;
    println!("{path} {entry}: {}", compiled.statistics.join(", "));
    Ok(())
}

/// The descriptor type of each binding the WGSL `source` declares, in order: group 0, bindings
/// 0, 1, ... with no gap, each a uniform or a storage buffer (what the course's kernels use).
fn declared_bindings(source: &str) -> Result<Vec<vk::DescriptorType>, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let mut types = std::collections::BTreeMap::new();
    for (_, global) in module.global_variables.iter() {
        let Some(binding) = &global.binding else { continue };
        let number = binding.binding;
        let kind = match global.space {
            _ if binding.group != 0 => {
                return Err(format!("binding {number} is in group {}, not 0", binding.group));
            }
            naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
            naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
            other => {
                return Err(format!(
                    "binding {number} is {other:?}, not a uniform or storage buffer"
                ));
            }
        };
        types.insert(number, kind);
    }
    if !types.keys().copied().eq(0..types.len() as u32) {
        let numbers: Vec<u32> = types.keys().copied().collect();
        return Err(format!("bindings {numbers:?}: expected 0, 1, ... with no gap"));
    }
    Ok(types.into_values().collect())
}
