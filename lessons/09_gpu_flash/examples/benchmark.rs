//! The GPU benchmark of lessons 08 and 09, in the style of llm.c's `dev/cuda`: every kernel
//! version is first validated against the f64 oracle, then, at every size, the first and last
//! 64 query rows of one `(batch, head)` slice are checked against the oracle before it is
//! timed. Times are GPU time from timestamp queries: three warm-up launches, then the median of
//! several, alternating between two input sets. With PyTorch and CUDA available, PyTorch's
//! `scaled_dot_product_attention` is timed in the same run (math and memory-efficient fp32,
//! FlashAttention-2 fp16).
//!
//! ```text
//! cargo run --release -p lesson09 --example benchmark             # B=4 H=16 D=64, N to 16384
//! cargo run --release -p lesson09 --example benchmark -- --quick  # small sizes (lavapipe)
//! PYTHON=python3 FLASH_ADAPTER=H100 cargo run --release -p lesson09 --example benchmark
//! ```
//!
//! Throughput: `4 B H Nq Nkv D / t` FLOP/s (two matrix products of `2 N^2 D` per head), half
//! of that with the causal mask. Writes `gpu_benchmark.csv` and `.svg` to `--out` (default
//! `book/src/figures`).

use std::path::PathBuf;
use std::process::Command;

use gpu::attention::{AttentionBuffers, AttentionKernel, Prepared};
use gpu::{Gpu, GpuTimer};
use ndarray::s;
use reference::plot::{Plot, Series, write_csv};
use reference::{Problem, ProblemSpec, Tolerance, check_output, oracle};

/// Sizes of one benchmark run.
struct Sizes {
    batch: usize,
    heads: usize,
    head_dim: usize,
    seqs: Vec<usize>,
    repeats: usize,
}

impl Sizes {
    /// B=4, H=16, D=64 as in the peers' table of the course (../GPU notes), N up to 16384.
    fn full() -> Self {
        let seqs = vec![256, 512, 1024, 2048, 4096, 8192, 16384];
        Self { batch: 4, heads: 16, head_dim: 64, seqs, repeats: 15 }
    }

    /// Small enough for lavapipe.
    fn quick() -> Self {
        Self { batch: 1, heads: 2, head_dim: 64, seqs: vec![64, 128, 256], repeats: 3 }
    }

    fn flops(&self, n: usize, causal: bool) -> f64 {
        let full =
            4.0 * (self.batch * self.heads) as f64 * (n as f64).powi(2) * self.head_dim as f64;
        if causal { full / 2.0 } else { full }
    }
}

/// One version on one problem, checked against the oracle (before any timing).
fn validate(gpu: &Gpu, kernel: &dyn AttentionKernel, spec: &ProblemSpec) -> Result<(), String> {
    let p = Problem::random(spec, 7);
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let actual =
        gpu::attention::attention_on(&gpu.device, &gpu.queue, kernel, &p.q, &p.k, &p.v, &p.options)
            .map_err(|e| e.to_string())?;
    check_output(&actual, &expected, Tolerance::F32).map(|_| ())
}

/// A measurement: median GPU seconds and bytes of GPU buffers, or why there is none.
type Measurement = Result<(f64, u64), String>;

/// Times `kernel` on two alternating problems of size `n`, after checking rows of slice (0, 0)
/// of its output against the f64 oracle.
fn measure(
    gpu: &Gpu,
    timer: &GpuTimer,
    kernel: &dyn AttentionKernel,
    sizes: &Sizes,
    n: usize,
    causal: bool,
) -> Measurement {
    let spec = ProblemSpec::new(sizes.batch, sizes.heads, n, n, sizes.head_dim).causal(causal);
    let problems = [Problem::random(&spec, 1), Problem::random(&spec, 2)];
    let (device, queue) = (&gpu.device, &gpu.queue);
    let runs = problems
        .iter()
        .map(|p| Prepared::new(device, kernel, &p.q, &p.k, &p.v, &p.options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    runs[0].run(device, queue, None).map_err(|e| e.to_string())?;
    check_first_slice(gpu, &runs[0].io, &problems[0])?;
    for run in runs.iter().cycle().take(3) {
        run.run(device, queue, None).map_err(|e| e.to_string())?;
    }
    let mut times = Vec::new();
    for run in runs.iter().cycle().take(sizes.repeats) {
        let seconds = run.run(device, queue, Some(timer));
        times.push(seconds.map_err(|e| e.to_string())?.expect("timed"));
    }
    times.sort_by(f64::total_cmp);
    let bytes = buffer_bytes(&spec, kernel);
    Ok((times[times.len() / 2], bytes))
}

/// Bytes of the GPU buffers of one call: Q, K, V, O, L, and the kernel's own (S for the naive
/// kernels).
fn buffer_bytes(spec: &ProblemSpec, kernel: &dyn AttentionKernel) -> u64 {
    let shape = spec.shape();
    let slices = (shape.batch * shape.heads) as u64;
    let row = shape.head_dim.next_multiple_of(kernel.row_alignment()) as u64;
    let (nq, nkv) = (shape.q_len as u64, shape.kv_len as u64);
    4 * slices * (2 * nq * row + 2 * nkv * row + nq) + kernel.scratch_bytes(&shape)
}

/// The first and last 64 query rows of slice (0, 0) of the GPU's output against the f64
/// oracle on those rows (the whole problem is too large for the oracle at these sizes).
fn check_first_slice(gpu: &Gpu, io: &AttentionBuffers, p: &Problem) -> Result<(), String> {
    let out = io.read_output(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    let one = |x: &ndarray::Array4<f32>| x.slice(s![0..1, 0..1, .., ..]).to_owned();
    let (q, k, v) = (one(&p.q), one(&p.k), one(&p.v));
    let n = q.dim().2;
    for rows in [0..n.min(64), n.saturating_sub(64)..n] {
        let expected = oracle::expected_rows(&q, &k, &v, &p.options, rows.clone())
            .map_err(|e| e.to_string())?;
        let gpu_rows = reference::AttentionOutput {
            o: out.o.slice(s![0..1, 0..1, rows.clone(), ..]).to_owned(),
            lse: out.lse.slice(s![0..1, 0..1, rows.clone()]).to_owned(),
        };
        check_output(&gpu_rows, &expected, Tolerance::F32)
            .map_err(|e| format!("wrong at this size, rows {rows:?}: {e}"))?;
    }
    Ok(())
}

/// One PyTorch measurement: N, causal, backend, median seconds.
type PeerTime = (usize, bool, String, f64);

/// PyTorch's version and times, from the peer script; `None` when it cannot run.
fn pytorch_times(sizes: &Sizes, causal_flags: &[bool]) -> Option<(String, Vec<PeerTime>)> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = [
        "lessons/09_gpu_flash/peer/sdpa_gpu.py",
        concat!(env!("CARGO_MANIFEST_DIR"), "/peer/sdpa_gpu.py"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())?;
    let mut configs = Vec::new();
    for &causal in causal_flags {
        for &n in &sizes.seqs {
            configs.push(format!(
                "{},{},{n},{},{}",
                sizes.batch,
                sizes.heads,
                sizes.head_dim,
                u8::from(causal)
            ));
        }
    }
    let output = Command::new(&python)
        .arg(&script)
        .args(["--repeats", &sizes.repeats.to_string()])
        .args(&configs)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!("PyTorch peer not run: {}", String::from_utf8_lossy(&output.stderr).trim());
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.lines().next()?.trim_start_matches("# ").to_string();
    let rows = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            Some((f[2].parse().ok()?, f[4] == "1", f[5].to_string(), f[6].parse().ok()?))
        })
        .collect();
    Some((version, rows))
}

fn cell(m: &Measurement, flops: f64) -> String {
    match m {
        Ok((t, _)) => format!("{:>8.3} ms {:>6.3}", t * 1e3, flops / t / 1e12),
        Err(e) if e.contains("needs") => "  exceeds a device limit".to_string(),
        Err(_) => "                 failed".to_string(),
    }
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out_dir = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| PathBuf::from("book/src/figures"), PathBuf::from);
    let sizes = if quick { Sizes::quick() } else { Sizes::full() };
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    let date = Command::new("date").arg("+%Y-%m-%d").output().map_or_else(
        |_| "unknown date".to_string(),
        |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
    );
    println!("Device: {}, {date}", gpu.describe());
    println!(
        "Problem: B={} H={} D={} f32, N = Nq = Nkv; GPU time by timestamp queries, median of {}\n",
        sizes.batch, sizes.heads, sizes.head_dim, sizes.repeats
    );

    // 1. Validate every version against the f64 oracle before timing anything.
    let mut kernels = Vec::new();
    for version in registry::gpu_kernels() {
        let kernel = (version.build)(&gpu.device, sizes.head_dim).map_err(|e| e.to_string())?;
        let specs = [
            ProblemSpec::new(1, 2, 333, 333, sizes.head_dim),
            ProblemSpec::new(1, 2, 200, 333, sizes.head_dim).causal(true),
            ProblemSpec::new(2, 1, 333, 77, sizes.head_dim).causal(true).logit_scale(30.0),
        ];
        let result: Result<(), String> =
            specs.iter().try_for_each(|spec| validate(gpu, kernel.as_ref(), spec));
        match result {
            Ok(()) => println!("validated against the f64 oracle: {}", version.about.name),
            Err(e) => return Err(format!("{} is wrong, not timing it:\n{e}", version.about.name)),
        }
        kernels.push((version.about.name, kernel));
    }
    println!();

    // 2. Time every version at every size, each output checked first.
    let causal_flags = [false, true];
    let mut rows = Vec::new(); // (n, causal, version, measurement)
    for &causal in &causal_flags {
        for &n in &sizes.seqs {
            for (name, kernel) in &kernels {
                let m = measure(gpu, &timer, kernel.as_ref(), &sizes, n, causal);
                if let Err(e) = &m {
                    eprintln!("{name}, N={n}, causal={causal}: {e}");
                }
                rows.push((n, causal, *name, m));
            }
        }
    }
    let peer = pytorch_times(&sizes, &causal_flags);

    // 3. Tables, CSV, SVG.
    let mut csv = Vec::new();
    let peer_names = ["math_fp32", "efficient_fp32", "flash_fp16"];
    for &causal in &causal_flags {
        println!("{} — time and TFLOP/s", if causal { "causal" } else { "not causal" });
        print!("{:>6}", "N");
        for (name, _) in &kernels {
            print!(" | {name:>24}");
        }
        if peer.is_some() {
            for p in peer_names {
                print!(" | {:>24}", format!("SDPA {p}"));
            }
        }
        println!();
        for &n in &sizes.seqs {
            let flops = sizes.flops(n, causal);
            print!("{n:>6}");
            for (n2, c2, name, m) in &rows {
                if *n2 == n && *c2 == causal {
                    print!(" | {:>24}", cell(m, flops));
                    let (seconds, bytes) = m.as_ref().map_or((f64::NAN, 0), |&(t, b)| (t, b));
                    csv.push(vec![
                        n.to_string(),
                        causal.to_string(),
                        name.to_string(),
                        seconds.to_string(),
                        (flops / seconds / 1e12).to_string(),
                        bytes.to_string(),
                    ]);
                }
            }
            if let Some((_, peer_rows)) = &peer {
                for p in peer_names {
                    let t = peer_rows
                        .iter()
                        .find(|r| r.0 == n && r.1 == causal && r.2 == p)
                        .map_or(f64::NAN, |r| r.3);
                    let m = if t.is_nan() { Err("no result".to_string()) } else { Ok((t, 0)) };
                    print!(" | {:>24}", cell(&m, flops));
                    csv.push(vec![
                        n.to_string(),
                        causal.to_string(),
                        format!("PyTorch SDPA {p}"),
                        t.to_string(),
                        (flops / t / 1e12).to_string(),
                        String::new(),
                    ]);
                }
            }
            println!();
        }
        println!();
    }
    match &peer {
        Some((version, _)) => {
            println!("PyTorch peer: {version}; math and efficient in fp32, flash in fp16")
        }
        None => println!(
            "PyTorch peer: not run (set PYTHON to a Python that can import torch with CUDA)"
        ),
    }
    println!("\nGPU memory of one call (Q, K, V, O, L; plus S for the naive kernel), not causal:");
    for &n in &sizes.seqs {
        print!("{n:>6}");
        for (n2, c2, name, m) in &rows {
            if *n2 == n && !*c2 {
                let kernel = kernels.iter().find(|k| k.0 == *name).expect("known").1.as_ref();
                let spec = ProblemSpec::new(sizes.batch, sizes.heads, n, n, sizes.head_dim);
                let mib = buffer_bytes(&spec, kernel) as f64 / (1 << 20) as f64;
                let note = if m.is_err() { " (refused)" } else { "" };
                print!(" | {name}: {mib:.1} MiB{note}");
            }
        }
        println!();
    }

    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let stem = if quick { "gpu_benchmark_quick" } else { "gpu_benchmark" };
    write_csv(
        &out_dir.join(format!("{stem}.csv")),
        &["n", "causal", "kernel", "seconds", "tflops", "gpu_bytes"],
        &csv,
    )?;
    let series = |causal: bool| -> Vec<Series> {
        let mut names: Vec<String> = Vec::new();
        for row in &csv {
            if row[1] == causal.to_string() && !names.contains(&row[2]) {
                names.push(row[2].clone());
            }
        }
        names
            .into_iter()
            .map(|name| Series {
                points: csv
                    .iter()
                    .filter(|r| r[1] == causal.to_string() && r[2] == name)
                    .filter_map(|r| {
                        Some((
                            r[0].parse().ok()?,
                            r[4].parse::<f64>().ok().filter(|t| t.is_finite())?,
                        ))
                    })
                    .collect(),
                name,
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    Plot {
        title: format!(
            "Attention forward on {} (B={}, H={}, D={}, not causal)",
            gpu.info.name, sizes.batch, sizes.heads, sizes.head_dim
        ),
        x_label: "sequence length N".to_string(),
        y_label: "TFLOP/s".to_string(),
        log_x: true,
        log_y: true,
        series: series(false),
    }
    .write_svg(&out_dir.join(format!("{stem}.svg")))?;
    println!("\nwrote {}/{stem}.csv and .svg", out_dir.display());
    Ok(())
}
