//! # Exercise 10: register micro-tiles in WGSL, then a softcap and ALiBi in base 2
//!
//! You write two functions of `src/micro_tiles.wgsl` (the warm-up) and the same kernel with a
//! softcap and ALiBi in `src/features.wgsl` (the main task); this file is given and runs the
//! shaders with lesson 10's host code for version 7 (constants written in, marked loops
//! unrolled, one workgroup per (slice, query tile)), with wgpu's run-time bounds checks on:
//! see the exercise's README.

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

pub use lesson10::F32Tiles;
pub use reference::features::Features;

/// Your shader, compiled into the crate: edit `src/micro_tiles.wgsl`.
pub const SHADER: &str = include_str!("micro_tiles.wgsl");

/// Your shader with a softcap and ALiBi (the main task): edit `src/features.wgsl`.
pub const FEATURES_SHADER: &str = include_str!("features.wgsl");

/// The line the untouched stubs start with; delete it from each file when you begin it.
const NOT_STARTED: &str = "// NOT STARTED";

/// Your shader's source, once you have started (the untouched stub reaches `todo!()`).
pub fn shader() -> &'static str {
    if SHADER.contains(NOT_STARTED) {
        todo!(
            "write score_block and add_values in exercises/10_fast_gpu/src/micro_tiles.wgsl \
             and delete its first line"
        );
    }
    SHADER
}

/// FlashAttention forward with your shader and `tiles`, on a given device and queue.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    lesson10::attention_with_shader(device, queue, shader(), q, k, v, options, tiles)
}

/// [`attention_on`] on the shared GPU.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    attention_on(&gpu.device, &gpu.queue, q, k, v, options, tiles)
}

/// Your main task's shader, once you have started it.
pub fn features_shader() -> &'static str {
    if FEATURES_SHADER.contains(NOT_STARTED) {
        todo!(
            "write the kernel with a softcap and ALiBi in exercises/10_fast_gpu/src/features.wgsl \
             and delete its first line"
        );
    }
    FEATURES_SHADER
}

/// FlashAttention with a softcap and ALiBi slopes (`features`, which may use only those two)
/// and your shader of `src/features.wgsl`, on the shared GPU.
pub fn attention_features(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    let (device, queue, source) = (&gpu.device, &gpu.queue, features_shader());
    lesson10::features::attention_with_features_shader(
        device, queue, source, q, k, v, options, features, tiles,
    )
}
