//! Host code for naive attention with dropout on the weights (FlashAttention-2's
//! `dropout_p`): exercise 08's main task runs the learner's `dropout.wgsl` through it, and its
//! grader the reference solution and the planted bugs; this lesson's own kernels have no
//! dropout.
//!
//! The kernels are called as lesson 08's are (same entry points, bindings and grids), with one
//! more uniform, the dropout, at `@binding(7)`, bound to each kernel that reads it:
//!
//! ```wgsl
//! struct Dropout { threshold: u32, seed_lo: u32, seed_hi: u32, heads: u32,
//!                  keep_scale: f32, pad0: u32, pad1: u32, pad2: u32 }
//! ```
//!
//! Weight `(b, h, i, j)` is kept iff the first word of Philox-4x32-10 with the counter
//! `(j, i, h, b)` and the key `(seed_lo, seed_hi)` is at least `threshold` (`floor(p 2^32)`),
//! and a kept weight is multiplied by `keep_scale = 1 / (1 - p)`: [`reference::features::Dropout`].

use gpu::GpuError;
use gpu::attention::AttentionBuffers;
use gpu::buffers;
use gpu::kernel::{bindings_used, check_loop_iterations, launch};
use ndarray::Array4;
use reference::features::{Dropout, Features};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::NaiveAttention;

/// The binding of the dropout uniform.
pub const DROPOUT_BINDING: u32 = 7;

/// The three entry points, in dispatch order.
const ENTRY_POINTS: [&str; 3] = ["scores", "softmax", "weighted_sum"];

/// Rounds of Philox-4x32-10 and the test that ends its loop, per weight: lavapipe counts each
/// against its loop limit if the driver keeps the loop (see
/// [`gpu::kernel::LAVAPIPE_LOOP_LIMIT`]).
const PHILOX_ITERATIONS: usize = 11;

/// Dropout as the kernels' uniform `dropout` (a uniform struct's size must be a multiple of 16
/// bytes, hence the padding).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DropoutParams {
    /// A weight is kept iff its random word is at least this: `floor(p 2^32)`.
    pub threshold: u32,
    /// The seed's low 32 bits: the first word of Philox's key.
    pub seed_lo: u32,
    /// The seed's high 32 bits: the second word of the key.
    pub seed_hi: u32,
    /// `H`, to split a slice `b * H + h` into `b` and `h`.
    pub heads: u32,
    /// What a kept weight is multiplied by, `1 / (1 - p)` rounded to f32.
    pub keep_scale: f32,
    /// Padding to 32 bytes.
    pub pad: [u32; 3],
}

impl DropoutParams {
    /// `dropout` for a problem with `heads` heads.
    pub fn of(dropout: Dropout, heads: usize) -> Self {
        Self {
            threshold: dropout.threshold(),
            seed_lo: dropout.seed as u32,
            seed_hi: (dropout.seed >> 32) as u32,
            heads: heads as u32,
            keep_scale: dropout.keep_scale() as f32,
            pad: [0; 3],
        }
    }
}

/// Naive attention with dropout, with the WGSL `source` of kernels that apply it: `q
/// [B,H,Nq,D]`, `k`, `v [B,H,Nkv,D]` -> `O [B,H,Nq,D]` of the dropped weights and `L [B,H,Nq]`,
/// the logsumexp before dropout (as FlashAttention-2 returns it).
#[allow(clippy::too_many_arguments)] // lesson 08's arguments and the dropout
pub fn attention_with_dropout_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    source: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    dropout: Dropout,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, .. } = check_inputs(q, k, v, options)?;
    Features::default().dropout(dropout.p, dropout.seed).check(&shape)?;
    // Every weight may draw its random word in a loop over a row's keys.
    let iterations = (PHILOX_ITERATIONS + 3) * (shape.kv_len + 1);
    check_loop_iterations(device, "naive attention with dropout", iterations as u64)?;
    let kernel = NaiveAttention::from_source(device, source)?;
    let mut reads_dropout = [false; 3];
    for (reads, entry) in reads_dropout.iter_mut().zip(ENTRY_POINTS) {
        *reads = bindings_used(source, entry)?.contains(&DROPOUT_BINDING);
    }
    if !reads_dropout.contains(&true) {
        return Err(GpuError::KernelMisuse(
            "no kernel reads the dropout (@binding(7)); expected the kernel that writes the \
             weights or the one that sums them to apply the mask"
                .to_string(),
        )
        .into());
    }
    let io = AttentionBuffers::upload(device, &kernel, q, k, v, options)?;
    let params = buffers::uniform(device, "dropout", &DropoutParams::of(dropout, shape.heads));
    let binding = [(DROPOUT_BINDING, &params)];
    let more = reads_dropout.map(|reads| if reads { &binding[..] } else { &[][..] });
    launch(device, queue, &kernel.dispatches_with(device, &io, more)?, None)?;
    io.read_output(device, queue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_split_into_the_two_words_of_the_key() {
        let dropout = Dropout { p: 0.25, seed: 0x0123_4567_89AB_CDEF };
        let params = DropoutParams::of(dropout, 3);
        assert_eq!((params.seed_lo, params.seed_hi), (0x89AB_CDEF, 0x0123_4567));
        assert_eq!((params.threshold, params.heads, params.keep_scale), (1 << 30, 3, 4.0 / 3.0));
    }
}
