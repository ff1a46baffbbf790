//! # Exercise 08: naive attention in WGSL, then with dropout
//!
//! You write the three kernels in `src/naive.wgsl` (the warm-up) and the same kernels with
//! dropout in `src/dropout.wgsl` (the main task); this file is given and runs them, with
//! lesson 08's host code (buffers, checks, dispatch sizes, and for dropout a uniform at
//! `@binding(7)`): see the exercise's README.

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

pub use reference::features::Dropout;

/// Your shader, compiled into the crate: edit `src/naive.wgsl`.
pub const SHADER: &str = include_str!("naive.wgsl");

/// Your kernels with dropout (the main task), compiled into the crate: edit `src/dropout.wgsl`.
pub const DROPOUT_SHADER: &str = include_str!("dropout.wgsl");

/// The line the untouched stubs start with; delete it from each file when you begin it.
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

/// Naive attention with dropout on the weights and your kernels of `src/dropout.wgsl`, on the
/// shared GPU: `O` of the dropped and rescaled weights, `L` the logsumexp before dropout.
pub fn attention_dropout(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    dropout: Dropout,
) -> Result<AttentionOutput<f32>, AttentionError> {
    if DROPOUT_SHADER.contains(NOT_STARTED) {
        todo!(
            "write the kernels with dropout in exercises/08_gpu_naive/src/dropout.wgsl and \
             delete its first line"
        );
    }
    let gpu = gpu::Gpu::shared()?;
    let (device, queue) = (&gpu.device, &gpu.queue);
    lesson08::dropout::attention_with_dropout_shader(
        device,
        queue,
        DROPOUT_SHADER,
        q,
        k,
        v,
        options,
        dropout,
    )
}
