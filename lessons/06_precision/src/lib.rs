//! # Lesson 06 — precision: f16 and bf16 storage, f32 where it matters
//!
//! GPUs run attention with inputs in 16-bit formats: half the memory and bandwidth, and tensor
//! cores several times faster than f32 arithmetic. Storage can be 16-bit; some quantities must
//! stay f32:
//!
//! * **softmax statistics** `m`, `l` and the logsumexp `L`: `l` sums up to `N` terms, and an
//!   f16 running sum stops growing at 2048 ([`demos::running_sum_of_ones`]);
//! * **accumulators** of dot products and of `P V`: sums of many small terms;
//! * **LayerNorm statistics**: `sum x^2` of activations near 1000 overflows f16
//!   ([`demos::layer_norm_stats`]);
//! * **the loss**, for the same reasons.
//!
//! And `e^x` overflows f16 for `x > 11.09` ([`demos::exp_overflow_threshold`]), so
//! subtracting the maximum before `exp` is not optional in f16.
//!
//! [`naive`] stores `S` and `P` in the 16-bit format, as an unfused framework path does;
//! [`flash`] keeps every intermediate in f32 and rounds only `O`. [`policy`] rejects mixed
//! formats and wraps the conversion for f32 callers.

pub mod attention;
pub mod demos;
pub mod element;
pub mod policy;

pub use attention::{Output, flash, flash_rounding_weights, naive};
pub use element::{Dtype, Element, round_checked, round_to, widen};

/// FlashAttention on f16 and on bf16 storage with f32 math, for the course's registry.
pub fn versions() -> Vec<reference::ForwardVersion> {
    use reference::{About, Device, ForwardVersion, Storage, Tolerance};
    let f16 = About::forward(
        "f16 storage, f32 math",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "Q, K, V and O stored in f16, every sum and the softmax state in f32",
    )
    .stored_in(Storage::F16, Tolerance::F16_STORAGE);
    let bf16 = About {
        name: "bf16 storage, f32 math",
        change: "the same in bf16: f32's range, 8 bits of precision",
        ..f16
    }
    .stored_in(Storage::BF16, Tolerance::BF16_STORAGE);
    vec![
        ForwardVersion::new(f16, |q: &_, k: &_, v: &_, options: &_| {
            policy::attention_in_precision(q, k, v, options, Dtype::F16)
        }),
        ForwardVersion::new(bf16, |q: &_, k: &_, v: &_, options: &_| {
            policy::attention_in_precision(q, k, v, options, Dtype::BF16)
        }),
    ]
}
