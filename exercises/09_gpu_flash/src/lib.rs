//! # Exercise 09: FlashAttention forward in WGSL
//!
//! You write the kernel in `src/flash.wgsl`; this file is given and runs it with lesson 09's
//! host code (checks of the tiles against the device, `override` constants, one dispatch of
//! `ceil(Nq / Br) x (B * H)` workgroups): see the exercise's README.

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

pub use lesson09::TileSizes;

/// Your shader, compiled into the crate: edit `src/flash.wgsl`.
pub const SHADER: &str = include_str!("flash.wgsl");

/// The line the untouched stub starts with; delete it from `flash.wgsl` when you begin.
const NOT_STARTED: &str = "// NOT STARTED";

/// FlashAttention forward with your kernel, on a given device and queue.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    lesson09::attention_with_shader(device, queue, shader(), q, k, v, options, tiles)
}

/// Your shader's source, once you have started (the untouched stub reaches `todo!()`).
pub fn shader() -> &'static str {
    if SHADER.contains(NOT_STARTED) {
        todo!(
            "write the kernel in exercises/09_gpu_flash/src/flash.wgsl and delete its first line"
        );
    }
    SHADER
}

/// [`attention_on`] on the shared GPU.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: TileSizes,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    attention_on(&gpu.device, &gpu.queue, q, k, v, options, tiles)
}
