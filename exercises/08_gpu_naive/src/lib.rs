//! # Exercise 08: naive attention in WGSL
//!
//! You write the three kernels in `src/naive.wgsl`; this file is given and runs them, with
//! lesson 08's host code (buffers, checks, dispatch sizes): see the exercise's README.

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

/// Your shader, compiled into the crate: edit `src/naive.wgsl`.
pub const SHADER: &str = include_str!("naive.wgsl");

/// The line the untouched stub starts with; delete it from `naive.wgsl` when you begin.
const NOT_STARTED: &str = "// NOT STARTED";

/// Naive attention with your kernels, on a given device and queue.
pub fn attention_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    if SHADER.contains(NOT_STARTED) {
        todo!(
            "write the kernels in exercises/08_gpu_naive/src/naive.wgsl and delete its first line"
        );
    }
    lesson08::attention_with_shader(device, queue, SHADER, q, k, v, options)
}

/// [`attention_on`] on the shared GPU.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    attention_on(&gpu.device, &gpu.queue, q, k, v, options)
}
