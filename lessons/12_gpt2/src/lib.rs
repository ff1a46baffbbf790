//! # Lesson 12 — FlashAttention inside a GPT-2
//!
//! The attention kernels of lessons 01 to 10 inside a real model: GPT-2, read from the
//! checkpoint files Hugging Face publishes, and checked against what PyTorch's `transformers`
//! computes for the same weights.
//!
//! * [`Config`]: the sizes, from the checkpoint's `config.json`.
//! * [`checkpoint`]: the weights, from `model.safetensors`, every tensor checked against the
//!   shape the config implies (GPT-2's `Conv1D` layers store `[in, out]`).
//! * [`tokenizer`]: GPT-2's byte-level BPE, from `vocab.json` and `merges.txt`.
//! * [`model`]: the forward pass in ndarray, its attention through any registered version of
//!   the course ([`Attention`]), and generation with lesson 11's cache ([`Session`]).
//! * [`gpu`] (feature `gpu`, on by default): the same model in WGSL, every activation kept on
//!   the device, attention through any registered GPU kernel, the cache on the device.
//! * [`precision`]: strategies that store weights, activations and the residual stream in
//!   f16 or bf16, and a monitor of every layer's output that finds the first NaN or infinity.
//!
//! `checkpoint/make_tiny.py` made the tiny checkpoint in `checkpoint/tiny` (random weights,
//! GPT-2's format) and what PyTorch computes for it ([`pytorch`]); the tests compare ours
//! with that.

pub mod checkpoint;
pub mod checks;
pub mod config;
pub mod error;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod model;
pub mod precision;
pub mod pytorch;
pub mod tokenizer;

pub use config::Config;
pub use error::ModelError;
pub use model::{Attention, Gpt2, Session, Trace, generate};
pub use precision::{Monitor, Precision};
pub use tokenizer::Tokenizer;

/// The folder of the tiny checkpoint the tests and the tour read.
pub fn tiny_checkpoint() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoint/tiny")
}
