//! Lesson 10's side-by-side benchmark: every lesson-10 version the GPU can run, beside
//! PyTorch's `scaled_dot_product_attention` (math and memory-efficient in fp32,
//! FlashAttention-2 and cuDNN in fp16) timed in the same run, at D = 64 and 128, with and
//! without the causal mask. Each version is validated against the f64 oracle first, and each
//! output's first and last rows again at every size (`bench::Sweep`). Times are GPU time from
//! timestamp queries, the median of several launches alternating two input sets.
//!
//! The tensor-core versions run only on an adapter with cooperative matrices, such as an
//! NVIDIA GPU with tensor cores (elsewhere each is listed as not run), and the PyTorch peer
//! only where torch finds CUDA; versions 1 and 7 run on any adapter, lavapipe included.
//!
//! ```text
//! PYTHON=python3 cargo run --release -p lab --bin side_by_side            # B=4 H=16
//! cargo run --release -p lab --bin side_by_side -- --quick                 # lavapipe
//! cargo run --release -p lab --bin side_by_side -- --head-dims 64 --seqs 4096,16384
//! cargo run --release -p lab --bin side_by_side -- --only v2,v3,v8  # these versions
//! ```
//!
//! Writes `lesson10_d64.csv`/`.svg` and `lesson10_d128.csv`/`.svg` to `--out` (default
//! `book/src/figures`).

use bench::report::in_workspace;
use bench::{Figures, Machine, Peer, Repeats, Sizes, Sweep};
use gpu::{Gpu, GpuTimer};
use reference::{ForwardVersion, ProblemSpec, Storage};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let list = |flag: &str, default: Vec<usize>| bench::report::list_arg(&args, flag, default);
    let head_dims = list("--head-dims", if quick { vec![64] } else { vec![64, 128] })?;
    let seqs =
        list("--seqs", if quick { vec![128, 256] } else { (10..=14).map(|e| 1 << e).collect() })?;
    let repeats = if quick { Repeats::new(1, 3) } else { Repeats::new(3, 10) };
    let figures = Figures::from_args(&args)?;
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    println!("Device: {}; {}", gpu.describe(), Machine::this().date);
    // `--only v8,v10`: the versions whose names start so (`v1` is version 1 only).
    let only = bench::report::names_arg(&args, "--only")?;
    let versions: Vec<_> = lesson10::versions()
        .into_iter()
        .filter(|v| lesson10::selected_by_any(v.about.name, &only))
        .collect();
    if versions.is_empty() {
        return Err(format!("--only {only:?}: no version of lesson 10 has a name starting so"));
    }
    for version in &versions {
        if let Some(why) = version.missing_on(&gpu.device) {
            println!("not run on this GPU: {} ({why})", version.about.name);
        }
    }
    let versions: Vec<_> =
        versions.into_iter().filter(|v| v.missing_on(&gpu.device).is_none()).collect();
    let peer = Peer::new(in_workspace("lab/peer/sdpa_gpu.py")?);

    for head_dim in head_dims {
        let (batch, heads) = if quick { (1, 2) } else { (4, 16) };
        let sizes = Sizes { batch, heads, head_dim, seqs: seqs.clone(), repeats };
        // 1. Every version against the f64 oracle before anything is timed.
        let specs = [
            ProblemSpec::new(1, 2, 333, 333, head_dim),
            ProblemSpec::new(1, 2, 200, 333, head_dim).causal(true),
            ProblemSpec::new(2, 1, 333, 77, head_dim).causal(true).logit_scale(30.0),
        ];
        for version in &versions {
            let forward = ForwardVersion { about: version.about, forward: version.forward_on(gpu) };
            bench::validate(&forward, &specs)?;
        }
        // 2. Every version at every size, then PyTorch's backends on the same problems.
        let mut built = Vec::new();
        for version in &versions {
            built.push((
                version.about,
                (version.build)(&gpu.device, head_dim).map_err(|e| e.to_string())?,
            ));
        }
        let kernels: Vec<_> =
            built.iter().map(|(about, kernel)| (*about, kernel.as_ref())).collect();
        let mut sweep = Sweep::new(sizes);
        sweep.time_kernels(gpu, &timer, &kernels);
        let peer = peer.clone().option("repeats", sweep.sizes.repeats.timed);
        match peer.run(&sweep.sizes.peer_problems()) {
            Ok(report) => {
                println!("\nPyTorch peer: {}", report.version);
                sweep.add_peer(&report);
            }
            Err(e) => println!("\nPyTorch peer not run: {e}"),
        }
        // 3. Tables, CSV and SVG from the measurements.
        let Sizes { batch, heads, .. } = sweep.sizes;
        println!(
            "\nB={batch} H={heads} D={head_dim}; every version validated against the f64 oracle"
        );
        // The ratios of the fastest f16 version and of the fastest f32 one (at the largest N,
        // without the mask) to every other version and every peer.
        let fastest_in = |storage| {
            let of_format = versions.iter().filter(|v| v.about.storage == storage);
            fastest(&sweep, of_format.map(|v| v.about.name))
        };
        let best: Vec<_> =
            [Storage::F16, Storage::F32].into_iter().filter_map(fastest_in).collect();
        for causal in [false, true] {
            let mask = if causal { "causal" } else { "not causal" };
            println!("\nD={head_dim}, {mask}: TFLOP/s\n{}", sweep.tflops_table(causal).to_text());
            for name in &best {
                println!(
                    "{name}, times faster than\n{}",
                    sweep.speedup_table(name, causal).to_text()
                );
            }
        }
        let stem = format!("lesson10_d{head_dim}{}", if quick { "_quick" } else { "" });
        let title =
            format!("Attention forward on {} (B={batch}, H={heads}, D={head_dim})", gpu.info.name);
        figures.write_csv(&stem, &sweep.csv())?;
        figures.write_svg(&stem, &sweep.tflops_plot(&title))?;
        println!("wrote {stem}.csv and .svg to {}", figures.display());
    }
    Ok(())
}

/// Of the kernels `names`, the one with the shortest time at the sweep's largest N without
/// the mask, if any of them ran there.
fn fastest<'a>(sweep: &Sweep, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let n = *sweep.sizes.seqs.iter().max()?;
    let timed = names.filter_map(|name| Some((name, sweep.seconds(name, n, false)?)));
    timed.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(name, _)| name)
}
