//! Lesson 10's roofline: each version's measured speed (from `side_by_side`'s CSV) against
//! its arithmetic intensity, under the H100's peaks.
//!
//! The intensity counts the bytes a version moves between the GPU's memory and its
//! multiprocessors, for one slice (one batch element and head) of an N x N problem:
//! each workgroup reads its `Br` rows of Q once and every row of K and V once, and writes its
//! rows of O (f32) and L. So K and V are read `ceil(N / Br)` times, and for large N
//!
//! ```text
//! FLOP / byte = 4 N^2 D / (bytes per input x 2 N D x N / Br + ...) ~ 2 Br / (bytes per input)
//! ```
//!
//! The memory roof assumes every one of those bytes comes from the GPU's memory (HBM); much of
//! the K and V traffic is served by the L2 cache, so the real roof lies higher. `TB/s (model)`
//! is the measured speed divided by the intensity, not a measured bandwidth. The compute roof
//! of the f16 versions is the cooperative-matrix peak measured from WGSL, not the data sheet's;
//! version 11's a third of it (three f16 products for each product of f32s).
//! The tiles (`Br`) are the ones each version picks on the device this runs on: run it on the
//! GPU the CSV was measured on. The tensor-core versions build only on an adapter with
//! cooperative matrices, such as an NVIDIA GPU with tensor cores (elsewhere each says what the
//! adapter lacks and is left out).
//!
//! ```text
//! cargo run --release -p lab --bin roofline             # D = 64 and 128, N = 16384
//! cargo run --release -p lab --bin roofline -- --head-dims 64 --n 4096
//! ```
//!
//! Writes `lesson10_roofline_d64.svg` (and for each head dim) to `--out` (default
//! `book/src/figures`).

use bench::plot::{Plot, Scale};
use bench::report::{Cell, Table, in_workspace};
use gpu::Gpu;
use lesson10::Compiled;
use reference::Storage;

/// The H100 SXM's peaks from NVIDIA's data sheet (dense, no sparsity), and the WGSL
/// cooperative-matrix peak that `lab/src/bin/primitives.rs` measured on one (2026-11-25).
const F32_PEAK_TFLOPS: f64 = 67.0;
const F16_TENSOR_PEAK_TFLOPS: f64 = 989.0;
const WGSL_TENSOR_PEAK_TFLOPS: f64 = 599.0;
const MEMORY_TB_PER_S: f64 = 3.35;

/// Each version of lesson 10 built as the registry builds it (the first of its preferred tiles
/// that runs on `device`), with its number, by its registered name; a version that does not
/// build is said and left out.
fn as_registered(
    device: &wgpu::Device,
    head_dim: usize,
) -> Vec<(&'static str, u32, Box<dyn Compiled>)> {
    let mut built: Vec<(&'static str, u32, Box<dyn Compiled>)> = Vec::new();
    let mut why = Vec::new();
    for variant in lesson10::every_preferred(head_dim) {
        let name = variant.about.name;
        if built.iter().any(|(done, ..)| *done == name) {
            continue;
        }
        match variant.build(device, head_dim) {
            Ok(kernel) => built.push((name, variant.number, kernel)),
            Err(e) => why.push((name, e)),
        }
    }
    for (name, e) in why.iter().filter(|(name, _)| built.iter().all(|(done, ..)| done != name)) {
        println!("{name}: {e}");
    }
    built
}

/// Bytes one slice moves with `rows` query rows per workgroup and rows of Q, K, V and O
/// padded to `padded_dim` numbers: Q once, K and V once per workgroup, O (f32) and L written
/// once.
fn bytes_per_slice(n: usize, padded_dim: usize, rows: usize, input_bytes: usize) -> f64 {
    let (n, d) = (n as f64, padded_dim as f64);
    let workgroups = (n / rows as f64).ceil();
    input_bytes as f64 * (n * d + 2.0 * n * d * workgroups) + 4.0 * (n * d + n)
}

/// `(kernel, TFLOP/s)` of the non-causal rows of `side_by_side`'s CSV at size `n`.
fn measured(csv: &str, n: usize) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    for line in csv.lines().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        if let [size, "false", kernel, _, tflops, ..] = fields[..]
            && size == n.to_string()
            && let Ok(tflops) = tflops.parse()
        {
            found.push((kernel.to_string(), tflops));
        }
    }
    found
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let head_dims = bench::report::list_arg(&args, "--head-dims", vec![64, 128])?;
    let n = *bench::report::list_arg(&args, "--n", vec![16384])?.first().ok_or("--n N")?;
    let out = match args.iter().position(|a| a == "--out") {
        Some(i) => args.get(i + 1).ok_or("--out needs a folder")?.into(),
        None => in_workspace("book/src/figures")?,
    };
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    println!("Tiles as chosen on: {}", gpu.describe());
    println!(
        "Roofs: f32 {F32_PEAK_TFLOPS} TFLOP/s, f16 tensor cores {F16_TENSOR_PEAK_TFLOPS} \
         (WGSL measured {WGSL_TENSOR_PEAK_TFLOPS}, the roof used), memory {MEMORY_TB_PER_S} \
         TB/s (H100 SXM; the roof assumes every byte from memory, none from the L2 cache)"
    );
    for head_dim in head_dims {
        let csv_path = in_workspace(&format!("book/src/figures/lesson10_d{head_dim}.csv"))?;
        let csv = std::fs::read_to_string(&csv_path)
            .map_err(|e| format!("{}: {e}; run side_by_side first", csv_path.display()))?;
        let flops = 4.0 * (n * n * head_dim) as f64;
        let mut table = Table::new(&[
            format!("D={head_dim}, N={n}"),
            "rows/workgroup".into(),
            "input bytes".into(),
            "FLOP/byte".into(),
            "TFLOP/s".into(),
            "TB/s (model)".into(),
            "roof TFLOP/s".into(),
            "of roof".into(),
        ]);
        let mut plot = Plot::new(
            &format!("Roofline, D = {head_dim}, N = {n} (H100 peaks)"),
            "FLOP per byte moved",
            "TFLOP/s",
            Scale::Log10,
            Scale::Log10,
        );
        let mut versions = Vec::new();
        let built = as_registered(&gpu.device, head_dim);
        for (name, tflops) in measured(&csv, n) {
            let Some((_, number, kernel)) = built.iter().find(|(v, ..)| *v == name) else {
                continue;
            };
            let input_bytes = if kernel.storage() == Storage::F16 { 2 } else { 4 };
            let rows = kernel.block_q();
            let padded_dim = head_dim.next_multiple_of(kernel.row_alignment());
            let intensity = flops / bytes_per_slice(n, padded_dim, rows, input_bytes);
            // Version 11 reads f32 and runs three f16 products on the tensor cores for each one.
            let compute = match (number, input_bytes) {
                (11, _) => WGSL_TENSOR_PEAK_TFLOPS / 3.0,
                (_, 2) => WGSL_TENSOR_PEAK_TFLOPS,
                _ => F32_PEAK_TFLOPS,
            };
            let roof = compute.min(intensity * MEMORY_TB_PER_S);
            table.push(vec![
                Cell::Text(name.clone()),
                Cell::int(rows),
                Cell::int(input_bytes),
                Cell::number(intensity, 1),
                Cell::number(tflops, 1),
                Cell::number(tflops / intensity, 2),
                Cell::number(roof, 0),
                Cell::number(tflops / roof, 2),
            ]);
            versions.push((name, intensity, tflops));
        }
        // The roofs: memory up to where each compute peak takes over.
        let (lo, hi) = (4.0, 1024.0);
        for (roof, peak) in [
            ("memory, then f16 tensor cores (data sheet)", F16_TENSOR_PEAK_TFLOPS),
            ("memory, then WGSL cooperative matrices", WGSL_TENSOR_PEAK_TFLOPS),
            ("memory, then f32", F32_PEAK_TFLOPS),
        ] {
            let ridge = peak / MEMORY_TB_PER_S;
            plot = plot.line(roof, [(lo, lo * MEMORY_TB_PER_S), (ridge, peak), (hi, peak)]);
        }
        for (name, intensity, tflops) in versions {
            plot = plot.line(&name, [(intensity, tflops)]);
        }
        println!("\n{}", table.to_text());
        let path = out.join(format!("lesson10_roofline_d{head_dim}.svg"));
        std::fs::write(&path, plot.to_svg()?).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
