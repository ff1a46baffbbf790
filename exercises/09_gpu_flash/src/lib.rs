//! # Exercise 09: FlashAttention forward in WGSL, then with a sliding window
//!
//! You write the kernels in `src/flash.wgsl` (the warm-up) and `src/window.wgsl` (the main
//! task); this file is given and runs them with lesson 09's host code (checks of the tiles
//! against the device, `override` constants, one dispatch of `ceil(Nq / Br) x (B * H)`
//! workgroups, and for the window a uniform at `@binding(7)`): see the exercise's README.

use ndarray::{Array2, Array4};
use reference::{AttentionError, AttentionOptions, AttentionOutput};

pub use lesson09::TileSizes;
pub use reference::features::Window;

/// Your shader, compiled into the crate: edit `src/flash.wgsl`.
pub const SHADER: &str = include_str!("flash.wgsl");

/// Your windowed shader (the main task), compiled into the crate: edit `src/window.wgsl`.
pub const WINDOW_SHADER: &str = include_str!("window.wgsl");

/// The line the untouched stubs start with; delete it from each file when you begin it.
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

/// Your windowed shader, once you have started it: `src/window.wgsl` followed by your
/// `src/flash.wgsl`, whose entry point is renamed `flash_forward_without_window`
/// (`lesson09::window::with_warm_up`). So the window's kernel uses the warm-up's bindings,
/// constants, `visible_keys` and `load_tile` without copying them, and the compiler's line
/// numbers in `window.wgsl` are its own.
pub fn window_shader() -> String {
    if WINDOW_SHADER.contains(NOT_STARTED) {
        todo!(
            "write the windowed kernel in exercises/09_gpu_flash/src/window.wgsl and delete its \
             first line"
        );
    }
    lesson09::window::with_warm_up(WINDOW_SHADER, shader())
}

/// FlashAttention with a sliding window and your windowed kernel, on the shared GPU: the
/// output, and how many tiles of keys each workgroup loaded, `[B * H, ceil(Nq / Br)]`.
pub fn attention_window(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    window: Window,
    tiles: TileSizes,
) -> Result<(AttentionOutput<f32>, Array2<u32>), AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    let (device, queue, source) = (&gpu.device, &gpu.queue, window_shader());
    lesson09::window::attention_with_window_shader(
        device, queue, &source, q, k, v, options, window, tiles,
    )
}
