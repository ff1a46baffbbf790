//! What a decoding step's time is made of: from the GPU benchmark's tables (the CSV files
//! `decode_benchmark` wrote, `book/src/figures/decode_gpu_b*.csv` by default), a fit of each
//! kernel's time per step to `t = fixed + bytes / rate` over the steps whose cache is too large
//! for the GPU's L2 cache. `fixed` is what a step costs whatever it reads (launches, a
//! workgroup's start and its final reductions, the merge); `rate` is how fast it reads once it
//! streams.
//!
//! ```text
//! cargo run -p lesson11 --example decode_fit                      # the committed tables
//! cargo run -p lesson11 --example decode_fit -- --out DIR         # the tables in DIR
//! ```

use std::path::Path;

use bench::Figures;

/// Steps that read 64 MiB of cache or more are fitted: more than an H100's 50 MB of L2
/// cache, so that each step reads its cache from memory. (The bytes are rebuilt from the
/// tables' rates and times, which rounding leaves a hair off 64 MiB: hence 60.)
const LEAST_BYTES: f64 = 60.0 * 1024.0 * 1024.0;

/// The columns of one CSV file: names, and rows of numbers (NaN where a cell is empty).
fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<f64>>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header = lines.next().ok_or_else(|| format!("{}: empty", path.display()))?;
    let names = header.split(',').map(str::to_string).collect();
    let rows = lines.map(|line| line.split(',').map(|x| x.parse().unwrap_or(f64::NAN)).collect());
    Ok((names, rows.collect()))
}

/// The least-squares line `t = fixed + slope * bytes` through `points` `(bytes, t)`.
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (mean_x, mean_y) = points.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let covariance: f64 = points.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let variance: f64 = points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    let slope = covariance / variance;
    (mean_y - slope * mean_x, slope)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let figures = Figures::from_args(&args)?;
    // Every (column, bytes, microseconds) of the steps past the L2 cache, both batches.
    let mut samples: Vec<(String, f64, f64)> = Vec::new();
    for batch in [1, 8] {
        let (names, rows) = read_csv(&figures.path(&format!("decode_gpu_b{batch}.csv")))?;
        let column = |name: &str| names.iter().position(|n| n == name);
        let (ours, rate) = match (column("ours us"), column("ours GB/s")) {
            (Some(ours), Some(rate)) => (ours, rate),
            _ => return Err(format!("decode_gpu_b{batch}.csv lacks `ours us` or `ours GB/s`")),
        };
        for row in rows {
            let bytes = row[rate] * row[ours] * 1e3; // GB/s x us
            if bytes < LEAST_BYTES {
                continue;
            }
            for (name, &us) in names.iter().zip(&row) {
                // Ours, and PyTorch's kernels replayed from CUDA graphs (the eager timings of
                // short steps measure Python's launches, which no fit to bytes describes).
                let kernel = name.trim_end_matches(" us");
                if (kernel == "ours" || kernel.ends_with("_graph")) && us.is_finite() {
                    samples.push((kernel.to_string(), bytes, us));
                }
            }
        }
    }
    let mut kernels: Vec<String> = Vec::new(); // ours first, then the peers in table order
    for (kernel, _, _) in &samples {
        if !kernels.contains(kernel) {
            kernels.push(kernel.clone());
        }
    }
    println!(
        "One decoding step, t = fixed + bytes / rate, fitted to the steps that read 64 MiB or \
         more (past the L2 cache), batches 1 and 8:"
    );
    println!(
        "{:<20} {:>6} {:>9} {:>10} {:>13}",
        "kernel", "steps", "fixed us", "rate GB/s", "worst misfit"
    );
    for kernel in kernels {
        let points: Vec<(f64, f64)> =
            samples.iter().filter(|s| s.0 == kernel).map(|s| (s.1, s.2)).collect();
        if points.len() < 3 {
            continue;
        }
        let (fixed, slope) = fit(&points);
        let misfit =
            points.iter().map(|(x, y)| ((fixed + slope * x - y) / y).abs()).fold(0.0, f64::max);
        println!(
            "{kernel:<20} {:>6} {fixed:>9.1} {:>10.0} {:>12.0}%",
            points.len(),
            1e-3 / slope, // bytes per us -> GB/s
            100.0 * misfit
        );
    }
    Ok(())
}
