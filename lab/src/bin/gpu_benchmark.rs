//! The GPU benchmark of the course's registered kernels (lessons 08 to 10), in the style of
//! llm.c's `dev/cuda`: every version is first validated against the f64 oracle, then, at every
//! size, the first and last 64 query rows of one `(batch, head)` slice are checked against the
//! oracle before it is timed. Times are GPU time from timestamp queries: three warm-up
//! launches, then the median of several, alternating two input sets (`bench::time_gpu`). With
//! PyTorch and CUDA available, PyTorch's `scaled_dot_product_attention` is timed in the same
//! run (math and memory-efficient fp32, FlashAttention-2 fp16).
//!
//! ```text
//! cargo run --release -p lab --bin gpu_benchmark             # B=4 H=16 D=64, N to 16384
//! cargo run --release -p lab --bin gpu_benchmark -- --quick  # small sizes (lavapipe)
//! PYTHON=python3 FLASH_ADAPTER=H100 cargo run --release -p lab --bin gpu_benchmark
//! ```
//!
//! Throughput: `4 B H Nq Nkv D / t` FLOP/s (two matrix products of `2 N^2 D` per head), half
//! of that with the causal mask. Writes `gpu_benchmark.csv` and `.svg` to `--out` (default
//! `book/src/figures`).

use bench::report::in_workspace;
use bench::{Figures, Machine, Peer, Repeats, Sizes, Sweep};
use gpu::{Gpu, GpuTimer};
use reference::{ForwardVersion, ProblemSpec};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let figures = Figures::from_args(&args)?;
    let sizes = match quick {
        // Small enough for lavapipe.
        true => Sizes {
            batch: 1,
            heads: 2,
            head_dim: 64,
            seqs: vec![64, 128, 256],
            repeats: Repeats::new(1, 3),
        },
        // The problems of the peers' table in the course's GPU notes: N from 256 to 16384.
        false => Sizes {
            batch: 4,
            heads: 16,
            head_dim: 64,
            seqs: (8..=14).map(|e| 1 << e).collect(),
            repeats: Repeats::new(3, 15),
        },
    };
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    let Sizes { batch, heads, head_dim: d, .. } = sizes;
    println!("Device: {}; {}", gpu.describe(), Machine::this().date);
    println!(
        "B={batch} H={heads} D={d} f32, N = Nq = Nkv; GPU time, median of {}",
        sizes.repeats.timed
    );

    // 1. Validate every registered version against the f64 oracle before timing anything.
    let specs = [
        ProblemSpec::new(1, 2, 333, 333, d),
        ProblemSpec::new(1, 2, 200, 333, d).causal(true),
        ProblemSpec::new(2, 1, 333, 77, d).causal(true).logit_scale(30.0),
    ];
    let (versions, cannot): (Vec<_>, Vec<_>) =
        registry::gpu_kernels().into_iter().partition(|v| v.missing_on(&gpu.device).is_none());
    for version in cannot {
        let why = version.missing_on(&gpu.device).expect("partitioned");
        println!("not run on this GPU: {} ({why})", version.about.name);
    }
    for version in &versions {
        bench::validate(
            &ForwardVersion { about: version.about, forward: version.forward_on(gpu) },
            &specs,
        )?;
    }
    println!("every version agrees with the f64 oracle");

    // 2. Time every version at every size, then PyTorch's backends in the same run.
    let mut built = Vec::new();
    for version in &versions {
        built.push((version.about, (version.build)(&gpu.device, d).map_err(|e| e.to_string())?));
    }
    let kernels: Vec<_> = built.iter().map(|(about, kernel)| (*about, kernel.as_ref())).collect();
    let mut sweep = Sweep::new(sizes);
    sweep.time_kernels(gpu, &timer, &kernels);
    let peer = Peer::new(in_workspace("lab/peer/sdpa_gpu.py")?)
        .option("repeats", sweep.sizes.repeats.timed);
    match peer.run(&sweep.sizes.peer_problems()) {
        Ok(report) => {
            println!("PyTorch peer: {}; math and efficient in fp32, flash in fp16", report.version);
            sweep.add_peer(&report);
        }
        Err(e) => println!("PyTorch peer not run: {e}"),
    }

    // 3. Tables, CSV and SVG, all from the measurements.
    for causal in [false, true] {
        let mask = if causal { "causal" } else { "not causal" };
        println!("\n{mask} — TFLOP/s\n{}", sweep.tflops_table(causal).to_text());
    }
    let stem = if quick { "gpu_benchmark_quick" } else { "gpu_benchmark" };
    let title = format!("Attention forward on {} (B={batch}, H={heads}, D={d})", gpu.info.name);
    figures.write_csv(stem, &sweep.csv())?;
    figures.write_svg(stem, &sweep.tflops_plot(&title))?;
    println!("wrote {stem}.csv and .svg to {}", figures.display());
    Ok(())
}
