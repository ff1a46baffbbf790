//! The scaling study of lesson 07: naive (lesson 01), tiled (lesson 03) and parallel (lesson
//! 07) attention, each lesson's first version, with PyTorch's CPU `scaled_dot_product_attention`
//! timed in the same run when `torch` is importable. Every stage is checked against the f64
//! oracle before it is timed. Prints tables and writes CSV and SVG to book/src/figures/.
//!
//! ```text
//! cargo run --release -p lesson07 --example scaling
//! PYTHON=/path/to/venv/bin/python cargo run --release -p lesson07 --example scaling
//! ```
//!
//! Timing (`bench::time_cpu`): one warm-up, then the median of several runs, alternating
//! between two input sets. FLOPs: 4 B H N^2 D (two matrix products of 2 N^2 D per head).

use bench::plot::Scale::{Log2, Log10};
use bench::report::{in_workspace, log_log_slope};
use bench::{Figures, Machine, Measurements, Peer, PeerProblem, Plot, Repeats, Timings};
use reference::memory::{CountingAllocator, count_this_thread, peak_bytes_during};
use reference::{ForwardVersion, Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

type Res = Result<(), String>;
const HEADS: usize = 8;
const HEAD_DIM: usize = 64;
/// lesson 01 holds S and P: 2 GiB at N = 4096, 8 GiB at 8192. It stops at 4096.
const NAIVE_MAX_N: usize = 4096;
const NAMES: [&str; 4] = ["lesson01 naive", "lesson03 tiled", "lesson07 parallel", "PyTorch SDPA"];

/// The times of `stage` on two alternating `b x n` problems (fewer runs where one takes
/// seconds), and its peak working memory in MiB (heap beyond its output).
fn measure(stage: &ForwardVersion, b: usize, n: usize) -> (Timings, f64) {
    let inputs = [1, 2].map(|seed| Problem::random(&spec(b, n), seed));
    let run = |p: &Problem| (stage.forward)(&p.q, &p.k, &p.v, &p.options).expect("validated");
    let (out, peak) = peak_bytes_during(|| run(&inputs[0])).expect("the allocator is installed");
    let timed = if n <= 1024 {
        9
    } else if n <= 4096 {
        7
    } else {
        5
    };
    let mib = (peak - out.bytes()) as f64 / f64::from(1 << 20);
    (bench::time_cpu(&inputs, Repeats::new(1, timed), run), mib)
}

fn spec(b: usize, n: usize) -> ProblemSpec {
    ProblemSpec::new(b, HEADS, n, n, HEAD_DIM)
}

/// PyTorch's median seconds on a `b x n` problem, timed right after ours, so that both sides
/// of a ratio see the machine in the same state.
fn torch_seconds(peer: Option<&Peer>, b: usize, n: usize) -> f64 {
    let problem = PeerProblem { batch: b, heads: HEADS, seq: n, head_dim: HEAD_DIM, causal: false };
    let report = peer.and_then(|peer| peer.run(&[problem]).ok());
    report.and_then(|r| r.seconds(&problem, "cpu_fp32")).unwrap_or(f64::NAN)
}

/// Time and peak memory of the three stages (and PyTorch's time) against N, at B = 1.
fn against_n(stages: &[ForwardVersion], peer: Option<&Peer>, peak: f64, out: &Figures) -> Res {
    let seconds = [("lesson01_s", 4), ("lesson03_s", 4), ("lesson07_s", 4), ("pytorch_s", 4)];
    let rate = [("lesson07_gflops", 1), ("percent_of_fma_peak", 1)];
    let speedups = ["speedup_vs_lesson01", "speedup_vs_lesson03", "speedup_vs_pytorch"];
    let mut times =
        Measurements::new("n", &[&seconds[..], &rate, &speedups.map(|s| (s, 2))].concat());
    let mib = ["lesson01_mib", "lesson03_mib", "lesson07_mib"];
    let mut memory = Measurements::new("n", &mib.map(|m| (m, 2)));
    for n in [256, 512, 1024, 2048, 4096, 8192] {
        let (mut t, mut working) = ([f64::NAN; 4], [f64::NAN; 3]);
        for (i, stage) in stages.iter().enumerate().filter(|(i, _)| *i > 0 || n <= NAIVE_MAX_N) {
            let (timings, mib) = measure(stage, 1, n);
            (t[i], working[i]) = (timings.median(), mib);
        }
        t[3] = torch_seconds(peer, 1, n);
        let gflops = 4.0 * (HEADS * n * n * HEAD_DIM) as f64 / t[2] / 1e9;
        let ratios = [t[0], t[1], t[3]].map(|other| other / t[2]);
        times.push(n, &[&t[..], &[gflops, 100.0 * gflops / peak], &ratios].concat());
        memory.push(n, &working);
    }
    println!(
        "seconds against N (median); lesson07's rate and speedups\n{}",
        times.table().to_text()
    );
    let slope = |stage: &str| log_log_slope(&times.column(stage)[2..]);
    let (tiled, parallel) = (slope("lesson03_s"), slope("lesson07_s"));
    println!(
        "log-log slope from N = 1024: lesson03 {tiled:.2}, lesson07 {parallel:.2} (2 expected)"
    );
    println!("\npeak working memory, MiB beyond O and L\n{}", memory.table().to_text());
    let title = "Time against sequence length (B=1, H=8, D=64, fp32)";
    let plot = Plot::new(title, "sequence length N", "seconds", Log2, Log10);
    out.write_svg("07_time_vs_n", &times.plot(plot, &NAMES, &seconds.map(|s| s.0)))?;
    let title = "Peak working memory against N";
    let plot = Plot::new(title, "sequence length N", "MiB beyond O and L", Log2, Log10);
    out.write_svg("07_memory_vs_n", &memory.plot(plot, &NAMES, &mib))?;
    out.write_csv("07_time_vs_n", &times.table())?;
    out.write_csv("07_memory_vs_n", &memory.table()).map(drop)
}

/// Tokens per second of the parallel stage and of PyTorch against the batch size, at N = 1024.
fn against_batch(parallel: &ForwardVersion, peer: Option<&Peer>, out: &Figures) -> Res {
    let columns = ["lesson07_tokens_per_s", "slowest", "fastest", "pytorch_tokens_per_s"];
    let mut rates = Measurements::new("batch", &columns.map(|c| (c, 0)));
    for b in [1, 2, 4, 8, 16] {
        let tokens = |seconds: f64| (b * 1024) as f64 / seconds;
        let (timings, _) = measure(parallel, b, 1024);
        let torch = torch_seconds(peer, b, 1024);
        rates.push(b, &[timings.median(), timings.slowest(), timings.fastest(), torch].map(tokens));
    }
    println!("tokens per second against batch size (N = 1024)\n{}", rates.table().to_text());
    let title = "Throughput against batch size (N = 1024)";
    let plot = Plot::new(title, "batch size B", "tokens per second", Log2, Log10);
    let lines = rates.plot(plot, &NAMES[2..], &[columns[0], columns[3]]);
    out.write_svg("07_throughput_vs_batch", &lines)?;
    out.write_csv("07_batch", &rates.table()).map(drop)
}

fn main() -> Res {
    // Lesson 07's work runs on rayon's workers: their allocations count in its memory too.
    let counted = rayon::ThreadPoolBuilder::new().start_handler(|_| count_this_thread());
    counted.build_global().map_err(|e| e.to_string())?;
    let figures = Figures::from_args(&std::env::args().skip(1).collect::<Vec<_>>())?;
    let threads = rayon::current_num_threads();
    println!("{}; fp32, H = {HEADS}, D = {HEAD_DIM}, not causal", Machine::this().describe());
    // The first version of each lesson compared: naive, tiled, parallel.
    let first = |versions: Vec<ForwardVersion>| versions.into_iter().next().expect("one");
    let stages = [lesson01::versions(), lesson03::versions(), lesson07::versions()].map(first);
    for stage in &stages {
        bench::validate(stage, &[spec(2, 300).causal(true), spec(1, 77)])?;
    }
    let (peak, kind) = bench::machine::fma_peak(threads);
    println!("every stage agrees with the f64 oracle");
    println!("FMA peak, measured: {peak:.0} GFLOP/s ({threads} threads, {kind})");
    let script = in_workspace("lessons/07_parallel_cpu/peer/sdpa_cpu.py")?;
    let peer = Peer::new(script).option("threads", threads).option("repeats", 7);
    let peer = peer.if_it_runs(", fp32\n");
    against_n(&stages, peer.as_ref(), peak, &figures)?;
    against_batch(&stages[2], peer.as_ref(), &figures)?;
    println!("wrote 07_*.csv and 07_*.svg to {}", figures.display());
    Ok(())
}
