//! The scaling study of lesson 07: naive (lesson 01), tiled (lesson 03) and parallel (lesson
//! 07) attention from the course's registry, with PyTorch's CPU `scaled_dot_product_attention`
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
use bench::{Cell, Figures, Machine, Peer, PeerProblem, Plot, Repeats, Table, Timings};
use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::{ForwardVersion, Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const HEADS: usize = 8;
const HEAD_DIM: usize = 64;
/// lesson 01 holds S and P: 2 GiB at N = 4096, 8 GiB at 8192. It stops at 4096.
const NAIVE_MAX_N: usize = 4096;

/// The times of `stage` on two alternating `b x n` problems (fewer runs where one takes
/// seconds), and its peak working memory in MiB (heap beyond its output).
fn measure(stage: &ForwardVersion, b: usize, n: usize) -> (Timings, f64) {
    let inputs = [1, 2].map(|seed| Problem::random(&spec(b, n), seed));
    let run = |p: &Problem| (stage.forward)(&p.q, &p.k, &p.v, &p.options).expect("validated");
    let (out, peak) = peak_bytes_during(|| run(&inputs[0])).expect("the allocator is installed");
    let repeats = Repeats::new(
        1,
        if n <= 1024 {
            9
        } else if n <= 4096 {
            7
        } else {
            5
        },
    );
    (bench::time_cpu(&inputs, repeats, run), (peak - out.bytes()) as f64 / f64::from(1 << 20))
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

fn main() -> Result<(), String> {
    let figures = Figures::from_args(&std::env::args().skip(1).collect::<Vec<_>>())?;
    let threads = rayon::current_num_threads();
    println!("{}; fp32, H = {HEADS}, D = {HEAD_DIM}, not causal", Machine::this().describe());
    // The first registered version of each lesson compared: naive, tiled, parallel.
    let mut registered = registry::cpu_forwards();
    let mut stages: Vec<ForwardVersion> = Vec::new();
    for lesson in ["lesson01", "lesson03", "lesson07"] {
        let first = registered.iter().position(|s| s.about.lesson == lesson);
        stages
            .push(registered.remove(first.ok_or(format!("no version of {lesson} is registered"))?));
    }
    for stage in &stages {
        bench::validate(stage, &[spec(2, 300).causal(true), spec(1, 77)])?;
    }
    let (peak, kind) = bench::machine::fma_peak(threads);
    println!(
        "every stage agrees with the f64 oracle; FMA peak, measured: {peak:.0} GFLOP/s ({threads} threads, {kind})"
    );
    let script = in_workspace("lessons/07_parallel_cpu/peer/sdpa_cpu.py")?;
    let peer = Peer::new(script).option("threads", threads).option("repeats", 7);
    let peer = match peer.version() {
        Ok(version) => {
            println!("PyTorch peer: {version}, fp32\n");
            Some(peer)
        }
        Err(e) => {
            println!("PyTorch peer not run: {e}\n");
            None
        }
    };

    // Seconds of each, lesson 07's rate, and lesson 07's speedup over the others (one run).
    let seconds = ["n", "lesson01_s", "lesson03_s", "lesson07_s", "pytorch_s"];
    let rate = ["lesson07_gflops", "percent_of_fma_peak"];
    let speedups = ["speedup_vs_lesson01", "speedup_vs_lesson03", "speedup_vs_pytorch"];
    let mut times = Table::new(&[&seconds[..], &rate, &speedups].concat());
    let mut memory = Table::new(&["n", "lesson01_mib", "lesson03_mib", "lesson07_mib"]);
    let (mut time_lines, mut memory_lines) = (vec![vec![]; 4], vec![vec![]; 3]);
    for n in [256, 512, 1024, 2048, 4096, 8192] {
        let (mut t, mut mib) = ([f64::NAN; 4], [f64::NAN; 3]);
        for (i, stage) in stages.iter().enumerate().filter(|(i, _)| *i > 0 || n <= NAIVE_MAX_N) {
            let (timings, working) = measure(stage, 1, n);
            (t[i], mib[i]) = (timings.median(), working);
            memory_lines[i].push((n as f64, working.max(1e-6)));
        }
        t[3] = torch_seconds(peer.as_ref(), 1, n);
        time_lines.iter_mut().zip(t).for_each(|(line, t)| line.push((n as f64, t)));
        let gflops = 4.0 * (HEADS * n * n * HEAD_DIM) as f64 / t[2] / 1e9;
        let cells = t
            .map(|s| Cell::number(s, 4))
            .into_iter()
            .chain([gflops, 100.0 * gflops / peak].map(|x| Cell::number(x, 1)))
            .chain([t[0], t[1], t[3]].map(|other| Cell::number(other / t[2], 2)));
        times.push([Cell::int(n)].into_iter().chain(cells).collect());
        memory.push([Cell::int(n)].into_iter().chain(mib.map(|m| Cell::number(m, 2))).collect());
    }
    let slope = |line: &[(f64, f64)]| log_log_slope(&line[2..]);
    println!("seconds against N (median); lesson07's rate and speedups\n{}", times.to_text());
    println!(
        "log-log slope from N = 1024: lesson03 {:.2}, lesson07 {:.2} (2 expected)",
        slope(&time_lines[1]),
        slope(&time_lines[2])
    );
    println!("\npeak working memory, MiB beyond O and L\n{}", memory.to_text());

    let mut batch = Table::new(&[
        "batch",
        "lesson07_tokens_per_s",
        "slowest",
        "fastest",
        "pytorch_tokens_per_s",
    ]);
    let mut batch_lines = vec![vec![]; 2];
    for b in [1, 2, 4, 8, 16] {
        let tokens = |seconds: f64| (b * 1024) as f64 / seconds;
        let (timings, _) = measure(&stages[2], b, 1024);
        let ours = [timings.median(), timings.slowest(), timings.fastest()].map(tokens);
        let torch = tokens(torch_seconds(peer.as_ref(), b, 1024));
        batch.push(
            [Cell::int(b)]
                .into_iter()
                .chain([ours[0], ours[1], ours[2], torch].map(|t| Cell::number(t, 0)))
                .collect(),
        );
        batch_lines[0].push((b as f64, ours[0]));
        batch_lines[1].push((b as f64, torch));
    }
    println!("tokens per second against batch size (N = 1024)\n{}", batch.to_text());

    let names = ["lesson01 naive", "lesson03 tiled", "lesson07 parallel", "PyTorch SDPA"];
    let plot = |title: &str, x: &str, y: &str, lines: Vec<Vec<(f64, f64)>>, names: &[&str]| {
        let plot = Plot::new(title, x, y, Log2, Log10);
        names.iter().zip(lines).fold(plot, |plot, (name, line)| plot.line(name, line))
    };
    figures.write_csv("07_time_vs_n", &times)?;
    figures.write_csv("07_memory_vs_n", &memory)?;
    figures.write_csv("07_batch", &batch)?;
    let time_title = "Time against sequence length (B=1, H=8, D=64, fp32)";
    figures.write_svg(
        "07_time_vs_n",
        &plot(time_title, "sequence length N", "seconds", time_lines, &names),
    )?;
    let memory_title = "Peak working memory against N";
    figures.write_svg(
        "07_memory_vs_n",
        &plot(memory_title, "sequence length N", "MiB beyond O and L", memory_lines, &names),
    )?;
    let batch_title = "Throughput against batch size (N = 1024)";
    figures.write_svg(
        "07_throughput_vs_batch",
        &plot(batch_title, "batch size B", "tokens per second", batch_lines, &names[2..]),
    )?;
    println!("wrote 07_*.csv and 07_*.svg to {}", figures.display());
    Ok(())
}
