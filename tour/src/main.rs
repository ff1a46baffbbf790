//! `cargo run --release`: every stage of the course on one problem, checked against the f64
//! oracle, with error, time and peak memory. `--help` lists the options.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use reference::memory::{CountingAllocator, count_this_thread};
use reference::{AttentionOutput, Device, Expected, ForwardVersion, Problem, ProblemSpec, oracle};
use tour::{
    Measurement, backward_table, cannot_run, decode_measurements, format_bytes, format_duration,
    gpu_problem, measure, measure_backward, model_rows, model_table, row_end, row_start, table,
    table_header,
};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const USAGE: &str = "\
usage: cargo run --release -- [--batch B] [--heads H] [--seq N] [--kv-seq NKV] [--head-dim D] [--causal] [--seed S] [--gpu-seq N]

Runs every stage of the course on one random problem (default B=1 H=8 N=2048 D=64, not causal),
checks each against the f64 oracle and prints relative and max errors, time and peak memory.
On a software adapter (lavapipe), which runs the GPU's kernels on the CPU, the GPU rows take
at most N=512 (both Nq and Nkv), or --gpu-seq N; on a GPU, the whole problem.";

/// Runs each of `versions` on `problem`, printing its row as it goes (its name first, so a
/// slow stage shows which it is), or `None` after printing why the memory count failed.
fn run_rows(
    versions: &[&ForwardVersion],
    problem: &Problem,
    expected: &Expected,
) -> Option<Vec<Measurement>> {
    let mut rows = Vec::new();
    for version in versions {
        print!("{}", row_start(version.about.lesson, version.about.name));
        let _ = std::io::stdout().flush();
        match measure(version, problem, expected) {
            Ok(m) => {
                print!("{}", row_end(&m));
                rows.push(m);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return None;
            }
        }
    }
    Some(rows)
}

fn main() -> ExitCode {
    // The parallel stages run on rayon's workers: their allocations count in the working
    // memory too (the counting allocator counts only the threads that do measured work).
    let counted = rayon::ThreadPoolBuilder::new().start_handler(|_| count_this_thread());
    counted.build_global().expect("the tour builds rayon's pool before anything uses it");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (spec, seed, gpu_seq) = match parse_args(&args) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let problem = Problem::random(&spec, seed);
    println!(
        "problem: B={} H={} Nq={} Nkv={} D={} causal={} (seed {seed}); {} thread(s){}",
        spec.batch,
        spec.heads,
        spec.q_len,
        spec.kv_len,
        spec.head_dim,
        spec.causal,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        bench::machine::cpu_name().map(|name| format!(", {name}")).unwrap_or_default(),
    );

    let start = Instant::now();
    let expected = match oracle::expected(&problem.q, &problem.k, &problem.v, &problem.options) {
        Ok(expected) => expected,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("f64 oracle: {}\n", format_duration(start.elapsed()));

    let forwards = registry::runnable_forwards();
    let (on_cpu, on_gpu): (Vec<_>, Vec<_>) =
        forwards.runs.iter().partition(|version| version.about.device == Device::Cpu);
    print!("{}", table_header());
    let Some(mut measurements) = run_rows(&on_cpu, &problem, &expected) else {
        return ExitCode::FAILURE;
    };
    match gpu::Gpu::shared() {
        Ok(gpu) => {
            println!("\nGPU: {}", gpu.describe());
            for line in cannot_run(&forwards.cannot) {
                println!("not run on this GPU: {line}");
            }
            let gpu_spec = gpu_problem(&spec, gpu_seq, gpu.runs_on_the_cpu());
            let smaller = (gpu_spec != spec).then(|| Problem::random(&gpu_spec, seed));
            let small_expected;
            let (gpu_problem, gpu_expected) = match &smaller {
                None => (&problem, &expected),
                Some(small) => {
                    let start = Instant::now();
                    let Ok(expected) =
                        oracle::expected(&small.q, &small.k, &small.v, &small.options)
                    else {
                        eprintln!("error: the f64 oracle refused the GPU rows' problem");
                        return ExitCode::from(2);
                    };
                    println!(
                        "a software adapter, which runs the kernels on the CPU: the rows below take \
                         Nq={} Nkv={} (--gpu-seq N sets it), against their own f64 oracle ({})",
                        gpu_spec.q_len,
                        gpu_spec.kv_len,
                        format_duration(start.elapsed())
                    );
                    small_expected = expected;
                    (small, &small_expected)
                }
            };
            print!("{}", table_header());
            let Some(rows) = run_rows(&on_gpu, gpu_problem, gpu_expected) else {
                return ExitCode::FAILURE;
            };
            measurements.extend(rows);
        }
        Err(e) => println!("\nGPU versions left out: {e}"),
    }
    // One decoding step of each decoding version: the last query row against a cache of every
    // key.
    let decoding = match decode_measurements(&problem, &registry::runnable_decodes().runs) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "\ndecoding: the last query row of each (batch, head) against a KV cache of all {} keys",
        spec.kv_len
    );
    print!("{}", table(&decoding));
    // Lesson 12: the attention inside GPT-2, against PyTorch's answers for the same weights.
    let model = match model_rows(gpu::Gpu::shared().ok()) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "\nmodel: GPT-2 from the tiny checkpoint's files (2 layers, 4 heads of 16; random weights),\n\
         37 tokens, against PyTorch's float64 logits and its 12 greedy tokens"
    );
    print!("{}", model_table(&model));
    let d_o = Problem::random(
        &ProblemSpec::new(spec.batch, spec.heads, spec.q_len, spec.q_len, spec.head_dim),
        seed + 1,
    )
    .q;
    let start = Instant::now();
    let expected_grads = match oracle::expected_gradients(
        &problem.q,
        &problem.k,
        &problem.v,
        &problem.options,
        &d_o,
    ) {
        Ok(grads) => grads,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("\nf64 oracle gradients (dO random): {}\n", format_duration(start.elapsed()));
    let mut backwards = Vec::new();
    for version in &registry::runnable_backwards().runs {
        match measure_backward(version, &problem, &d_o, &expected_grads) {
            Ok(m) => backwards.push(m),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{}", backward_table(&backwards));
    let backward_ok = backwards
        .iter()
        .all(|m| m.comparisons.as_ref().is_ok_and(|c| c.iter().all(|c| c.passed())));

    let output = AttentionOutput::empty(&spec.shape()).bytes();
    println!(
        "\nof bound: the worst element's error as a fraction of what the error model allows it\n\
         (below 1 passes). working mem: peak heap bytes during the call beyond its output (O and\n\
         L: {}; for the backward pass, dQ, dK and dV). The f16 and bf16 rows hold rounded copies\n\
         of Q, K and V and their f32 widening ({}), where a GPU kernel widens a tile at a time.\n\
         GPU versions: time includes compiling the shader (once per process), uploading Q, K,\n\
         V and downloading O, L; their working memory is on the host (padded copies, staging),\n\
         while S and the tiles live in GPU memory (chapters 8 and 9). Decoding: time is the\n\
         decoding call alone, its cache filled (and uploaded) before. Model: logits error is\n\
         relative to the largest logit; greedy tokens agree with PyTorch's before the first\n\
         difference (* not checked: 16-bit attention inputs); time is one forward pass, the GPU's\n\
         including the compiling of its shaders.",
        format_bytes(output),
        format_bytes(6 * problem.q.len() + 12 * problem.k.len()),
    );
    let model_ok = model.iter().all(|row| row.passed());
    if measurements.iter().chain(&decoding).all(|m| m.passed()) && backward_ok && model_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `Ok(None)` for `--help`; an error message for anything not understood.
fn parse_args(args: &[String]) -> Result<Option<(ProblemSpec, u64, Option<usize>)>, String> {
    let mut spec = ProblemSpec::new(1, 8, 2048, 2048, 64);
    let mut kv_len = None;
    let mut seed = 0;
    let mut gpu_seq = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || -> Result<usize, String> {
            let text = it.next().ok_or(format!("{flag} needs a value"))?;
            match text.parse::<usize>() {
                Ok(n) if n >= 1 || flag == "--seed" => Ok(n),
                _ => Err(format!("{flag} expects a whole number of at least 1, got `{text}`")),
            }
        };
        match flag.as_str() {
            "--batch" => spec.batch = value()?,
            "--heads" => spec.heads = value()?,
            "--seq" => spec.q_len = value()?,
            "--kv-seq" => kv_len = Some(value()?),
            "--head-dim" => spec.head_dim = value()?,
            "--seed" => seed = value()? as u64,
            "--gpu-seq" => gpu_seq = Some(value()?),
            "--causal" => spec.causal = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    spec.kv_len = kv_len.unwrap_or(spec.q_len);
    Ok(Some((spec, seed, gpu_seq)))
}
