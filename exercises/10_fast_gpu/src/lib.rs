//! # Exercise 10: register micro-tiles in WGSL
//!
//! You write two functions of `src/micro_tiles.wgsl`; this file is given and runs the shader
//! with lesson 10's host code for version 7 (constants written in, marked loops unrolled, one
//! workgroup per (slice, query tile)), with wgpu's run-time bounds checks on: see the
//! exercise's README.

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

pub use lesson10::F32Tiles;

/// Your shader, compiled into the crate: edit `src/micro_tiles.wgsl`.
pub const SHADER: &str = include_str!("micro_tiles.wgsl");

/// The line the untouched stub starts with; delete it from `micro_tiles.wgsl` when you begin.
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
