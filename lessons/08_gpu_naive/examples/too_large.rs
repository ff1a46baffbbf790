//! Chapter 8's problem that the naive kernels cannot run: B = 4, H = 16, N = 4096, D = 64, whose
//! score matrix S needs 4 GiB, more than one storage buffer binding holds on any device wgpu
//! opens through Vulkan. The kernel refuses it before launching anything.
//!
//! ```text
//! cargo run -p lesson08 --example too_large
//! ```
//!
//! The error also carries the device's limit (2147483644 bytes on an H200, 134217728 on
//! lavapipe); this prints the fields that are the same on every device, so that the book's copy
//! of the output does not depend on the machine that made it.

use gpu::GpuError;
use lesson08::score_bytes;
use ndarray::Array4;
use reference::{AttentionOptions, AttentionShape};

fn main() -> Result<(), String> {
    let shape = AttentionShape { batch: 4, heads: 16, q_len: 4096, kv_len: 4096, head_dim: 64 };
    let AttentionShape { batch, heads, q_len, head_dim, .. } = shape;
    let bytes = score_bytes(&shape);
    println!(
        "B = {batch}, H = {heads}, N = {q_len}, D = {head_dim}: S holds {bytes} bytes ({} GiB)",
        bytes >> 30
    );
    // Q, K and V are 64 MiB each, within the 128 MiB per binding of wgpu's default limits, which
    // every device offers; only S is too large.
    let x = Array4::<f32>::zeros((batch, heads, q_len, head_dim));
    let err = match lesson08::attention(&x, &x, &x, &AttentionOptions::default()) {
        Ok(_) => return Err("this device ran it: its storage buffer bindings hold S".into()),
        Err(err) => err,
    };
    match GpuError::of(&err) {
        Some(GpuError::ExceedsDeviceLimit { what, needed, limit, limit_name })
            if needed > limit =>
        {
            println!("refused before launching a kernel, with GpuError::ExceedsDeviceLimit:");
            println!("  what:       {what}");
            println!("  needed:     {needed}");
            println!("  limit_name: {limit_name}");
            println!(
                "  limit:      this device's largest binding (it differs from device to device)"
            );
            Ok(())
        }
        _ => Err(format!("expected a refusal, got: {err}")),
    }
}
