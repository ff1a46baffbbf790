//! Lesson 12's GPT-2 with every attention version the registry lists: on the CPU with every
//! CPU forward version, on the GPU with every kernel version the test adapter runs (lavapipe
//! in CI), each through the checks lesson 12's own tests run with one version
//! (`lesson12::checks`).

use gpu::Gpu;
use gpu::attention::KernelVersion;
use lesson12::checks::{self, on_gpu};
use lesson12::gpu::GpuGpt2;
use lesson12::{Attention, Gpt2, tiny_checkpoint};

/// `check` with every CPU forward version, naming the first that fails.
fn with_every_cpu_version(check: fn(&Attention) -> Result<(), String>) {
    for version in registry::cpu_forwards() {
        let attention = Attention::new(version);
        check(&attention).unwrap_or_else(|e| panic!("{}: {e}", attention.name()));
    }
}

#[test]
fn every_layer_and_the_logits_match_pytorch_with_every_cpu_version() {
    with_every_cpu_version(checks::matches_pytorch);
}

#[test]
fn greedy_generation_gives_pytorchs_tokens_with_every_cpu_version() {
    with_every_cpu_version(checks::greedy_matches_pytorch);
}

#[test]
fn cached_decoding_equals_the_whole_sequence_with_every_cpu_version() {
    with_every_cpu_version(checks::cache_equals_whole_sequence);
}

/// Every registered GPU kernel this adapter can run, with the shared device.
fn runnable() -> Option<(&'static Gpu, Vec<KernelVersion>)> {
    let gpu = gpu::for_tests()?;
    let kernels = registry::gpu_kernels();
    Some((gpu, kernels.into_iter().filter(|k| k.missing_on(&gpu.device).is_none()).collect()))
}

#[test]
fn the_tiny_checkpoint_matches_pytorch_with_every_gpu_kernel_that_takes_its_head_dim() {
    let Some((gpu, kernels)) = runnable() else { return };
    let mut ran = Vec::new();
    for kernel in &kernels {
        // A kernel that does not take D = 16 is left out here; every kernel runs at D = 64 and
        // 128 below.
        let took = on_gpu::matches_pytorch(kernel, gpu)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.about.name));
        if took {
            ran.push(kernel.about.name);
        }
    }
    // Lessons 08 and 09 take any head dim.
    assert!(ran.len() >= 2, "only {ran:?} ran");
}

#[test]
fn random_models_at_head_dims_10_64_and_128_match_the_cpu_model_with_every_gpu_kernel() {
    let Some((gpu, kernels)) = runnable() else { return };
    let mut untested: Vec<&str> = kernels.iter().map(|k| k.about.name).collect();
    // And 3 heads of 10: 30 channels and an MLP of 120, sizes no tile of the linear layers
    // divides (kernels that take only D >= 64 are left out there).
    for (heads, head_dim) in [(2, 64), (1, 128), (3, 10)] {
        for kernel in &kernels {
            let took = on_gpu::matches_the_cpu_model(kernel, gpu, (heads, head_dim))
                .unwrap_or_else(|e| panic!("{} at D = {head_dim}: {e}", kernel.about.name));
            if took && head_dim >= 64 {
                untested.retain(|&name| name != kernel.about.name);
            }
        }
    }
    assert!(untested.is_empty(), "never ran at D = 64 or 128: {untested:?}");
}

#[test]
fn greedy_generation_gives_pytorchs_tokens_with_every_gpu_kernel() {
    let Some((gpu, kernels)) = runnable() else { return };
    for kernel in &kernels {
        on_gpu::greedy_matches_pytorch(kernel, gpu)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.about.name));
    }
}

#[test]
fn feeding_the_devices_cache_in_pieces_equals_one_pass_with_every_gpu_kernel() {
    let Some((gpu, kernels)) = runnable() else { return };
    for kernel in &kernels {
        on_gpu::cache_equals_whole_sequence(kernel, gpu)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.about.name));
    }
}

#[test]
fn a_kernel_the_adapter_cannot_run_is_refused_with_the_reason() {
    let Some(gpu) = gpu::for_tests() else { return };
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    for kernel in registry::gpu_kernels() {
        if let Some(missing) = kernel.missing_on(&gpu.device) {
            let Err(error) = GpuGpt2::new(&model, &kernel, gpu) else {
                panic!("{} was built without {missing}", kernel.about.name)
            };
            assert!(error.to_string().contains(&missing.to_string()), "{error}");
        }
    }
}
