//! Host code for version 7 with two of FlashAttention-2's features, a logit softcap and ALiBi
//! slopes: exercise 10's main task runs the learner's `features.wgsl` through it, and its
//! grader the reference solution and the planted bugs; this lesson's own versions have
//! neither feature.
//!
//! The shader is called as version 7 is ([`crate::attention_with_shader`]: constants written
//! in, marked loops unrolled, bounds checks on), with two more bindings:
//!
//! ```wgsl
//! struct Features { softcap: f32, heads: u32, pad0: u32, pad1: u32 }
//! @group(0) @binding(6) var<uniform> features: Features;          // softcap 0: none
//! @group(0) @binding(7) var<storage, read> alibi_slopes: array<f32>;  // one per head, 0: none
//! ```
//!
//! The score of row `i` and key `j` is `c tanh(scale q_i.k_j / c) - m_h |i + Nkv - Nq - j|`
//! ([`reference::features`]): capped, then biased by the head's slope times the key's distance
//! from the row's diagonal.

use gpu::GpuError;
use gpu::attention::AttentionBuffers;
use gpu::buffers;
use gpu::kernel::{Checks, bindings_used, launch};
use ndarray::Array4;
use reference::features::{Feature, Features};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::{F32Tiles, Kernel, V7};

/// The binding of the features uniform.
pub const FEATURES_BINDING: u32 = 6;

/// The binding of the ALiBi slopes.
pub const SLOPES_BINDING: u32 = 7;

/// The softcap and the head count as the kernel's uniform `features` (a uniform struct's size
/// must be a multiple of 16 bytes, hence the padding).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FeatureParams {
    /// The softcap `c > 0`, or 0 for none.
    pub softcap: f32,
    /// `H`: a slice `b * H + h` takes slope `h`.
    pub heads: u32,
    /// Padding to 16 bytes.
    pub pad: [u32; 2],
}

/// FlashAttention with version 7's host code, the WGSL `template` of a kernel with a softcap
/// and ALiBi, and `features` (which may use only those two).
#[allow(clippy::too_many_arguments)] // attention_with_shader's arguments and the features
pub fn attention_with_features_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    template: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
    features.check_supported(&shape, &[Feature::Softcap, Feature::Alibi])?;
    let kernel = Kernel::<V7>::from_template(device, shape.head_dim, tiles, template, Checks::On)?;
    let source = tiles.source_from(template, shape.head_dim)?;
    let used = bindings_used(&source, "flash_forward")?;
    if !(used.contains(&FEATURES_BINDING) && used.contains(&SLOPES_BINDING)) {
        return Err(GpuError::KernelMisuse(
            "flash_forward does not read both the features (@binding(6)) and the ALiBi slopes \
             (@binding(7)); expected the kernel to use features.softcap, features.heads and \
             alibi_slopes"
                .to_string(),
        )
        .into());
    }
    let params = FeatureParams {
        softcap: features.softcap.unwrap_or(0.0),
        heads: shape.heads as u32,
        pad: [0; 2],
    };
    let slopes = features.alibi_slopes.clone().unwrap_or_else(|| vec![0.0; shape.heads]);
    let io = AttentionBuffers::upload(device, &kernel, q, k, v, options)?;
    let params = buffers::uniform(device, "features", &params);
    let slopes = buffers::upload(device, "ALiBi slopes", &slopes)?;
    let more = [(FEATURES_BINDING, &params), (SLOPES_BINDING, &slopes)];
    launch(device, queue, &kernel.dispatches_with(device, &io, &more)?, None)?;
    io.read_output(device, queue)
}
