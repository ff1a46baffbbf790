//! The scaling study of lesson 07: naive (lesson 01), tiled (lesson 03) and parallel
//! (lesson 07) attention, with PyTorch's CPU `scaled_dot_product_attention` timed in the same
//! run when `torch` is importable. Every kernel is checked against the f64 oracle before it is
//! timed. Prints tables and writes CSV and SVG to book/src/figures/.
//!
//! ```text
//! cargo run --release -p lesson07 --example scaling
//! PYTHON=/path/to/venv/bin/python cargo run --release -p lesson07 --example scaling
//! ```
//!
//! Timing: one warm-up, then the median of several runs, alternating between two input sets.
//! FLOPs: 4 B H N^2 D (two matrix products of 2 N^2 D per head).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::plot::{Plot, Series, write_csv};
use reference::{AttentionOutput, Problem, ProblemSpec, Tolerance, check_output, oracle};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const HEADS: usize = 8;
const HEAD_DIM: usize = 64;
/// lesson 01 holds S and P: 2 GiB at N = 4096, 8 GiB at 8192. It stops at 4096.
const NAIVE_MAX_N: usize = 4096;

type Kernel = fn(&Problem) -> AttentionOutput<f32>;

const KERNELS: [(&str, Kernel); 3] = [
    ("lesson01", |p| lesson01::attention(&p.q, &p.k, &p.v, &p.options).expect("valid shapes")),
    ("lesson03", |p| {
        lesson03::attention(&p.q, &p.k, &p.v, &p.options, lesson03::TileSizes::default())
            .expect("valid shapes")
    }),
    ("lesson07", |p| {
        lesson07::attention(&p.q, &p.k, &p.v, &p.options, lesson07::default_tiles())
            .expect("valid shapes")
    }),
];

fn flops(b: usize, n: usize) -> f64 {
    4.0 * (b * HEADS) as f64 * (n as f64).powi(2) * HEAD_DIM as f64
}

/// Runs per measurement: enough for a stable median on a shared machine, fewer where one run
/// takes seconds.
fn repeats(n: usize) -> usize {
    if n <= 1024 {
        9
    } else if n <= 4096 {
        7
    } else {
        5
    }
}

/// Median seconds of `kernel` on two alternating problems of this shape, and the peak working
/// memory of one run (heap bytes beyond its output).
fn time_kernel(kernel: Kernel, b: usize, n: usize) -> (f64, usize) {
    let (times, working) = timed_runs(kernel, b, n);
    (times[times.len() / 2], working)
}

/// The sorted seconds of every timed run of `kernel` on `b x n` problems, and its working
/// memory.
fn timed_runs(kernel: Kernel, b: usize, n: usize) -> (Vec<f64>, usize) {
    let problems =
        [1, 2].map(|seed| Problem::random(&ProblemSpec::new(b, HEADS, n, n, HEAD_DIM), seed));
    let (out, peak) =
        peak_bytes_during(|| kernel(&problems[0])).expect("the counting allocator is installed");
    let working = peak - out.bytes();
    let mut times: Vec<f64> = (0..repeats(n))
        .map(|r| {
            let start = Instant::now();
            std::hint::black_box(kernel(&problems[r % 2]));
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times, working)
}

/// PyTorch's version and its median seconds for each `(batch, seq)`, or `None` if Python or
/// torch is missing.
fn pytorch_times(configs: &[(usize, usize)], threads: usize) -> Option<(String, Vec<f64>)> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peer/sdpa_cpu.py");
    let args: Vec<String> =
        configs.iter().map(|(b, n)| format!("{b},{HEADS},{n},{HEAD_DIM},0")).collect();
    let output = Command::new(&python)
        .arg(&script)
        .args(["--threads", &threads.to_string(), "--repeats", "7"])
        .args(&args)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!("PyTorch peer not run: {}", String::from_utf8_lossy(&output.stderr).trim());
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.lines().find_map(|line| line.strip_prefix("# "))?.to_string();
    let times = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.rsplit(',').next()?.parse::<f64>().ok())
        .collect::<Option<Vec<f64>>>()?;
    Some((version, times))
}

/// Measured FMA peak of this machine in GFLOP/s: every thread runs independent fused
/// multiply-adds on the widest vectors the CPU has; the best of seven runs.
fn fma_peak(threads: usize) -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        let iters = 5_000_000;
        let (lanes, kind): (usize, &str) = if std::arch::is_x86_feature_detected!("avx512f") {
            (16, "AVX-512")
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            (8, "AVX2+FMA")
        } else {
            return (f64::NAN, "no FMA");
        };
        // The best of several short runs: a peak is the fastest the machine can go, and on a
        // shared machine some runs are slowed by other work.
        let seconds = (0..7)
            .map(|_| {
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(move || {
                            // SAFETY: the feature was detected above.
                            std::hint::black_box(unsafe {
                                if lanes == 16 {
                                    fma_loop::<16>(iters)
                                } else {
                                    fma_loop_avx2::<8>(iters)
                                }
                            })
                        });
                    }
                });
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        (threads as f64 * iters as f64 * (ACCUMULATORS * lanes * 2) as f64 / seconds / 1e9, kind)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (f64::NAN, "not measured on this architecture")
    }
}

/// Independent accumulators, enough to hide the latency of the FMA units.
const ACCUMULATORS: usize = 12;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn fma_loop<const LANES: usize>(iters: usize) -> f32 {
    fma_body::<LANES>(iters)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop_avx2<const LANES: usize>(iters: usize) -> f32 {
    fma_body::<LANES>(iters)
}

#[inline(always)]
fn fma_body<const LANES: usize>(iters: usize) -> f32 {
    // ACCUMULATORS vectors on the stack, walked as one flat, contiguous array, so that each
    // vector is one register.
    let mut acc = [[1.0f32; LANES]; ACCUMULATORS];
    let (a, b) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
    for _ in 0..iters {
        for x in acc.as_flattened_mut() {
            *x = x.mul_add(a, b);
        }
    }
    acc.as_flattened().iter().sum()
}

/// Least-squares slope of ln(y) against ln(x).
fn log_log_slope(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points.iter().map(|(x, y)| (x.ln(), y.ln())).collect();
    let n = logs.len() as f64;
    let (mx, my) =
        (logs.iter().map(|p| p.0).sum::<f64>() / n, logs.iter().map(|p| p.1).sum::<f64>() / n);
    let cov: f64 = logs.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = logs.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    cov / var
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".to_string())
}

fn main() -> Result<(), String> {
    let threads = rayon::current_num_threads();
    let figures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src/figures");
    println!("{}, {threads} threads; fp32, H = {HEADS}, D = {HEAD_DIM}, not causal", cpu_name());

    // Every kernel agrees with the oracle before anything is timed.
    let check = Problem::random(&ProblemSpec::new(2, HEADS, 300, 300, HEAD_DIM).causal(true), 9);
    let expected = oracle::expected(&check.q, &check.k, &check.v, &check.options)
        .map_err(|e| e.to_string())?;
    for (name, kernel) in KERNELS {
        check_output(&kernel(&check), &expected, Tolerance::F32)
            .map_err(|e| format!("{name} disagrees with the oracle: {e}"))?;
    }
    println!("all kernels agree with the f64 oracle\n");

    let (peak, peak_kind) = fma_peak(threads);
    println!(
        "FMA peak, measured: {peak:.0} GFLOP/s ({threads} threads x {peak_kind} fused multiply-adds)\n"
    );

    // Time and memory against N.
    let seqs = [256, 512, 1024, 2048, 4096, 8192];
    // PyTorch is timed right after lesson 07 for each size, so that both sides of a ratio see
    // the machine in the same state.
    let torch_version = pytorch_times(&[(1, 64)], threads).map(|(version, _)| version);
    let torch_seconds = |b: usize, n: usize| match torch_version {
        Some(_) => pytorch_times(&[(b, n)], threads).map_or(f64::NAN, |(_, t)| t[0]),
        None => f64::NAN,
    };
    match &torch_version {
        Some(version) => {
            println!("PyTorch peer: {version}, scaled_dot_product_attention on the CPU, fp32\n")
        }
        None => println!("PyTorch peer: not run (set PYTHON to a Python that can import torch)\n"),
    }
    println!(
        "{:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>8} {:>8} {:>8}",
        "N",
        "lesson01",
        "lesson03",
        "lesson07",
        "PyTorch",
        "GFLOP/s",
        "% peak",
        "vs l01",
        "vs l03",
        "vs torch"
    );
    let mut time_rows = Vec::new();
    let mut memory_rows = Vec::new();
    let mut time_series: [Vec<(f64, f64)>; 4] = Default::default();
    let mut memory_series: [Vec<(f64, f64)>; 3] = Default::default();
    for &n in &seqs {
        let mut t = [f64::NAN; 3];
        let mut mem = [f64::NAN; 3];
        for (slot, (_, kernel)) in KERNELS.iter().enumerate() {
            if slot == 0 && n > NAIVE_MAX_N {
                continue;
            }
            let (seconds, working) = time_kernel(*kernel, 1, n);
            (t[slot], mem[slot]) = (seconds, working as f64);
            time_series[slot].push((n as f64, seconds));
            memory_series[slot].push((n as f64, (working as f64).max(1.0)));
        }
        let torch_t = torch_seconds(1, n);
        if torch_t.is_finite() {
            time_series[3].push((n as f64, torch_t));
        }
        let gflops = flops(1, n) / t[2] / 1e9;
        let show = |x: f64| if x.is_finite() { format!("{:.4}", x) } else { "-".to_string() };
        let ratio =
            |x: f64| if x.is_finite() { format!("{:.2}x", x / t[2]) } else { "-".to_string() };
        println!(
            "{n:>5} {:>10} {:>10} {:>10} {:>10} {gflops:>9.1} {:>6.0}% {:>8} {:>8} {:>8}",
            show(t[0]),
            show(t[1]),
            show(t[2]),
            show(torch_t),
            100.0 * gflops / peak,
            ratio(t[0]),
            ratio(t[1]),
            ratio(torch_t)
        );
        time_rows.push(vec![
            n.to_string(),
            show(t[0]),
            show(t[1]),
            show(t[2]),
            show(torch_t),
            format!("{gflops:.1}"),
        ]);
        memory_rows.push(vec![
            n.to_string(),
            format!("{}", mem[0]),
            format!("{}", mem[1]),
            format!("{}", mem[2]),
        ]);
    }
    println!(
        "(seconds, median; speedups are lesson07 against each; % peak is lesson07 against the measured FMA peak)"
    );
    let fit = |s: &[(f64, f64)]| {
        log_log_slope(&s.iter().copied().filter(|(n, _)| *n >= 1024.0).collect::<Vec<_>>())
    };
    println!(
        "log-log slope of time against N (N >= 1024): lesson03 {:.2}, lesson07 {:.2} (2 expected)",
        fit(&time_series[1]),
        fit(&time_series[2])
    );

    println!("\npeak working memory (heap bytes beyond O and L), against N:");
    println!("{:>5} {:>14} {:>14} {:>14}", "N", "lesson01", "lesson03", "lesson07");
    for row in &memory_rows {
        let mib = |s: &str| {
            s.parse::<f64>().map_or("-".to_string(), |b| {
                if b.is_finite() {
                    format!("{:.2} MiB", b / (1 << 20) as f64)
                } else {
                    "-".to_string()
                }
            })
        };
        println!("{:>5} {:>14} {:>14} {:>14}", row[0], mib(&row[1]), mib(&row[2]), mib(&row[3]));
    }

    // Throughput against batch size.
    let n = 1024;
    let batches = [1, 2, 4, 8, 16];
    println!("\nthroughput against batch size (N = {n}): tokens per second (B x N / time)");
    println!(
        "{:>5} {:>12} {:>25} {:>12}",
        "B", "lesson07", "its slowest .. fastest run", "PyTorch"
    );
    let mut batch_rows = Vec::new();
    let mut batch_series: [Vec<(f64, f64)>; 2] = Default::default();
    for &b in &batches {
        let (times, _) = timed_runs(KERNELS[2].1, b, n);
        let tokens = |seconds: f64| (b * n) as f64 / seconds;
        let ours = tokens(times[times.len() / 2]);
        let spread = format!("{:.0} .. {:.0}", tokens(times[times.len() - 1]), tokens(times[0]));
        let theirs = (b * n) as f64 / torch_seconds(b, n);
        println!(
            "{b:>5} {ours:>12.0} {spread:>25} {:>12}",
            if theirs.is_finite() { format!("{theirs:.0}") } else { "-".to_string() }
        );
        batch_series[0].push((b as f64, ours));
        if theirs.is_finite() {
            batch_series[1].push((b as f64, theirs));
        }
        batch_rows.push(vec![b.to_string(), format!("{ours:.0}"), format!("{theirs:.0}")]);
    }

    write_csv(
        &figures.join("07_time_vs_n.csv"),
        &["n", "lesson01_s", "lesson03_s", "lesson07_s", "pytorch_s", "lesson07_gflops"],
        &time_rows,
    )?;
    write_csv(
        &figures.join("07_memory_vs_n.csv"),
        &["n", "lesson01_bytes", "lesson03_bytes", "lesson07_bytes"],
        &memory_rows,
    )?;
    write_csv(
        &figures.join("07_batch.csv"),
        &["batch", "lesson07_tokens_per_s", "pytorch_tokens_per_s"],
        &batch_rows,
    )?;
    let names = ["lesson01 naive", "lesson03 tiled", "lesson07 parallel", "PyTorch SDPA"];
    let series = |names: &[&str], points: Vec<Vec<(f64, f64)>>| -> Vec<Series> {
        names
            .iter()
            .zip(points)
            .filter(|(_, p)| !p.is_empty())
            .map(|(n, points)| Series { name: n.to_string(), points })
            .collect()
    };
    let plot = |title: &str, x: &str, y: &str, series: Vec<Series>, path: PathBuf| {
        Plot {
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            log_x: true,
            log_y: true,
            series,
        }
        .write_svg(&path)
    };
    plot(
        "Time against sequence length (B=1, H=8, D=64, fp32)",
        "sequence length N",
        "seconds (log scale)",
        series(&names, time_series.to_vec()),
        figures.join("07_time_vs_n.svg"),
    )?;
    plot(
        "Peak working memory against N",
        "sequence length N",
        "bytes beyond O and L (log scale)",
        series(&names[..3], memory_series.to_vec()),
        figures.join("07_memory_vs_n.svg"),
    )?;
    plot(
        "Throughput against batch size (N = 1024)",
        "batch size B",
        "tokens per second (log scale)",
        series(&[names[2], names[3]], batch_series.to_vec()),
        figures.join("07_throughput_vs_batch.svg"),
    )?;
    println!("\nwrote book/src/figures/07_*.csv and 07_*.svg");
    Ok(())
}
