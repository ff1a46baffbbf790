//! Host code for a FlashAttention kernel with a sliding window (FlashAttention-2's
//! `window_size`). Exercise 09's main task runs the learner's `window.wgsl` through it, and its
//! grader the reference solution and the planted bugs; this lesson's own kernel has no window.
//!
//! The kernel is called as lesson 09's is (same bindings, `override` constants, grid and
//! counts of tiles loaded), with one more uniform, the window, at `@binding(7)`:
//!
//! ```wgsl
//! struct Window { left: u32, right: u32, pad0: u32, pad1: u32 }
//! ```
//!
//! Row `i` sees key `j` iff `i + Nkv - Nq - left <= j <= i + Nkv - Nq + right` (and
//! `j <= i + Nkv - Nq` with the causal mask). A side that is `None` arrives as a window that
//! bounds nothing on that side (`left = Nkv`, `right = Nq`), so the kernel needs no special case.

use gpu::GpuError;
use gpu::attention::AttentionBuffers;
use gpu::buffers;
use ndarray::{Array2, Array4};
use reference::features::Window;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

use crate::{FlashAttention, TileSizes};

/// The binding of the window uniform.
pub const WINDOW_BINDING: u32 = 7;

/// The window as the kernel's uniform `window` (a uniform struct's size must be a multiple of
/// 16 bytes, hence the padding).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct WindowParams {
    /// Keys visible before the diagonal, at most `Nkv` (`None` is `Nkv`: no bound).
    pub left: u32,
    /// Keys visible after the diagonal, at most `Nq` (`None` is `Nq`: no bound).
    pub right: u32,
    /// Padding to 16 bytes.
    pub pad: [u32; 2],
}

impl WindowParams {
    /// `window` for a problem of `shape`, each side clamped to what bounds nothing (a wider
    /// window sees the same keys), so that it fits a `u32`.
    pub fn of(window: Window, shape: &AttentionShape) -> Result<Self, AttentionError> {
        let side = |bound: Option<usize>, widest: usize| -> Result<u32, AttentionError> {
            let value = bound.map_or(widest, |b| b.min(widest));
            u32::try_from(value).map_err(|_| {
                GpuError::KernelMisuse(format!(
                    "a window side of {value} keys does not fit the kernel's u32; expected \
                     sequences shorter than 2^32"
                ))
                .into()
            })
        };
        Ok(Self {
            left: side(window.left, shape.kv_len)?,
            right: side(window.right, shape.q_len)?,
            pad: [0; 2],
        })
    }
}

/// What the warm-up's entry point is renamed to in [`with_warm_up`].
pub const RENAMED_ENTRY: &str = "flash_forward_without_window";

/// A windowed kernel written as a file of its own (`window_file`: the window uniform, any
/// helpers, and an entry point `flash_forward`) that uses the declarations of the unwindowed
/// kernel `warm_up` (its bindings, constants and functions): `window_file` followed by
/// `warm_up`, whose entry point is renamed [`RENAMED_ENTRY`]. WGSL declarations may come in any
/// order, so the window's code can call what the warm-up declares, and a compiler's line
/// numbers in `window_file` are its own.
pub fn with_warm_up(window_file: &str, warm_up: &str) -> String {
    let warm_up = warm_up.replace("fn flash_forward(", &format!("fn {RENAMED_ENTRY}("));
    format!(
        "{window_file}\n// ---- the warm-up's kernel, its entry point renamed {RENAMED_ENTRY} ----\n{warm_up}"
    )
}

/// FlashAttention with the WGSL `source` of a windowed kernel and `window`: the output, and how
/// many tiles of keys each workgroup loaded, `[B * H, ceil(Nq / Br)]` (with a window, a
/// workgroup needs only the tiles from its first row's first visible key to its last row's
/// last one).
#[allow(clippy::too_many_arguments)] // lesson 09's arguments and the window
pub fn attention_with_window_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    source: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    window: Window,
    tiles: TileSizes,
) -> Result<(AttentionOutput<f32>, Array2<u32>), AttentionError> {
    let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
    let window = WindowParams::of(window, &shape)?;
    let kernel = FlashAttention::from_source(device, source, tiles, shape.head_dim)?;
    if !gpu::kernel::bindings_used(source, "flash_forward")?.contains(&WINDOW_BINDING) {
        return Err(GpuError::KernelMisuse(
            "flash_forward never reads the window (@binding(7)); expected the windowed kernel \
             to use window.left and window.right"
                .to_string(),
        )
        .into());
    }
    let io = AttentionBuffers::upload(device, &kernel, q, k, v, options)?;
    let window = buffers::uniform(device, "window", &window);
    kernel.run_counting_tiles(device, queue, &io, &[(WINDOW_BINDING, &window)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbounded_side_becomes_a_window_as_wide_as_the_problem() {
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 5, kv_len: 9, head_dim: 4 };
        let full = WindowParams::of(Window::FULL, &shape).unwrap();
        assert_eq!((full.left, full.right), (9, 5));
        let wide = WindowParams::of(Window::new(Some(1 << 40), Some(2)), &shape).unwrap();
        assert_eq!((wide.left, wide.right), (9, 2));
    }
}
