//! Forward time against sequence length of a model of GPT-2 small's sizes (random weights:
//! time does not depend on them), one batch of one sequence, with each attention backend:
//! lessons 01, 03 and 07 inside the CPU model, every WGSL kernel the adapter runs inside the
//! GPU model, and PyTorch's own GPT-2 forward on the same machine in the same run when torch
//! is importable (`peer/gpt2_forward.py`: on the CPU, and on CUDA with standard attention,
//! the memory-efficient kernel, and FlashAttention-2 in fp16). Prints a table, writes CSV and
//! SVG to book/src/figures/ (or `--out DIR`).
//!
//! ```text
//! cargo run --release -p lab --bin forward_time
//! cargo run --release -p lab --bin forward_time -- --lengths 64,256 --budget 5
//! cargo run --release -p lab --bin forward_time -- --gpu-only
//! ```
//!
//! Time is wall-clock from the call until the device has finished, the logits left where
//! they were computed (for the GPU model: recording the commands, running them, waiting; no
//! download; a call builds a fresh session, so its cache buffers are part of it), the median
//! of 5 calls after a warm-up (3 calls, or 1, for a backend whose warm-up took over 0.5 s or
//! 2 s); PyTorch's, the median of 5 after 2 warm-ups. A backend whose forward passes
//! `--budget` seconds (default 20) is not timed at longer sequences.

use bench::plot::Scale::{Log2, Log10};
use bench::report::{in_workspace, list_arg};
use bench::{Cell, Figures, Machine, Measurements, Peer, PeerProblem, Plot, Repeats, Table};
use lesson12::gpu::GpuGpt2;
use lesson12::{Attention, Config, Gpt2};

type Res = Result<(), Box<dyn std::error::Error>>;

/// One forward pass over the tokens it is given.
type Forward<'a> = Box<dyn Fn(&[u32]) -> Result<(), lesson12::ModelError> + 'a>;

/// A backend: its column name, its legend, and its forward pass.
struct Backend<'a> {
    column: String,
    legend: String,
    forward: Forward<'a>,
}

fn main() -> Res {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let figures = Figures::from_args(&args)?;
    let lengths: Vec<usize> = list_arg(&args, "--lengths", vec![64, 128, 256, 512, 1024])?;
    let budget: f64 = list_arg(&args, "--budget", vec![20.0])?[0];
    let config = Config::gpt2_small();
    if let Some(&n) = lengths.iter().find(|&&n| n == 0 || n > config.n_positions) {
        return Err(format!("--lengths: {n} is not in 1..={}", config.n_positions).into());
    }
    println!("{}", Machine::this().describe());
    let c = &config;
    println!(
        "GPT-2 small's sizes, random weights: {} layers, {} heads of {}, {} tokens; one sequence",
        c.n_layer,
        c.n_head,
        c.head_dim(),
        c.vocab_size
    );
    let model = Gpt2::random(config.clone(), 1);
    let cpu = ["lesson01", "lesson03", "lesson07"].map(registry::first_cpu_forward);
    let cpu: Vec<Attention> =
        cpu.into_iter().map(|v| v.map(Attention::new)).collect::<Result<_, _>>()?;
    let on_gpu = gpu_models(&model);
    let mut backends: Vec<Backend> = Vec::new();
    let gpu_only = args.iter().any(|a| a == "--gpu-only");
    for (attention, lesson) in
        cpu.iter().zip(["lesson01", "lesson03", "lesson07"]).filter(|_| !gpu_only)
    {
        backends.push(Backend {
            column: format!("cpu_{lesson}_ms"),
            legend: format!("CPU model, {}", attention.name()),
            forward: Box::new(|tokens| model.logits(tokens, attention).map(drop)),
        });
    }
    for gpu_model in &on_gpu {
        backends.push(Backend {
            column: format!("gpu_{}_ms", slug(gpu_model.name())),
            legend: format!("GPU model, {}", gpu_model.name()),
            forward: Box::new(|tokens| gpu_model.forward_on_device(tokens)),
        });
    }
    let peers = torch_peers(&config, gpu_only);

    let mut columns: Vec<String> = backends.iter().map(|b| b.column.clone()).collect();
    let mut legends: Vec<String> = backends.iter().map(|b| b.legend.clone()).collect();
    for (_, backends) in &peers {
        for (name, description) in backends {
            columns.push(format!("torch_{name}_ms"));
            legends.push(format!("PyTorch GPT-2, {description}"));
        }
    }
    let column_specs: Vec<(&str, usize)> = columns.iter().map(|c| (c.as_str(), 2)).collect();
    let mut times = Measurements::new("n", &column_specs);
    let mut over_budget = vec![false; backends.len()];
    for &n in &lengths {
        let tokens: Vec<u32> = (0..n).map(|i| ((i * 7919) % config.vocab_size) as u32).collect();
        let mut row = Vec::new();
        for (backend, over) in backends.iter().zip(&mut over_budget) {
            if *over {
                row.push(f64::NAN);
                continue;
            }
            // The first call: errors before timing, and a warm-up that says how many
            // timed calls fit in a few seconds.
            let started = std::time::Instant::now();
            if let Err(e) = (backend.forward)(&tokens) {
                println!("not timed from N = {n}: {}: {e}", backend.legend);
                row.push(f64::NAN);
                *over = true;
                continue;
            }
            let first = started.elapsed().as_secs_f64();
            let timed = if first > 2.0 {
                1
            } else if first > 0.5 {
                3
            } else {
                5
            };
            let timings =
                bench::time_cpu(&[&tokens], Repeats::new(0, timed), |t| (backend.forward)(t));
            *over = timings.median() > budget;
            row.push(timings.median() * 1e3);
        }
        for (peer, backends) in &peers {
            let problem = PeerProblem {
                batch: 1,
                heads: c.n_head,
                seq: n,
                head_dim: c.head_dim(),
                causal: true,
            };
            let report = peer.run(&[problem]).ok();
            for (name, _) in backends {
                let seconds = report.as_ref().and_then(|r| r.seconds(&problem, name));
                row.push(seconds.map_or(f64::NAN, |s| s * 1e3));
            }
        }
        times.push(n, &row);
    }
    // Printed with a row per backend (the CSV has a row per N, for plotting).
    let mut headers = vec!["backend".to_string()];
    headers.extend(lengths.iter().map(|n| format!("N = {n}")));
    let mut table = Table::new(&headers);
    for (column, legend) in columns.iter().zip(&legends) {
        let mut row = vec![Cell::Text(legend.clone())];
        for (_, ms) in times.column(column) {
            row.push(Cell::or_missing(Some(ms).filter(|ms| ms.is_finite()), 2, "-"));
        }
        table.push(row);
    }
    let (c, layers, vocab) =
        (config.n_embd as f64, config.n_layer as f64, config.vocab_size as f64);
    let mut products = vec![Cell::Text("GFLOP, matrix products".to_string())];
    let mut attention = vec![Cell::Text("GFLOP, attention (causal)".to_string())];
    for &n in &lengths {
        let n = n as f64;
        // Multiply-adds per token and layer: c_attn 3C^2, attn.c_proj C^2, c_fc and
        // mlp.c_proj 4C^2 each; then the head, C V; 2 FLOP each. Attention: S and P V take
        // 2 N^2 C multiply-adds per layer for all heads, half of them masked: N^2 C
        // multiply-adds, 2 N^2 C FLOP.
        products.push(Cell::number(2.0 * n * (12.0 * c * c * layers + c * vocab) / 1e9, 1));
        attention.push(Cell::number(2.0 * n * n * c * layers / 1e9, 1));
    }
    table.push(products);
    table.push(attention);
    println!("\nforward milliseconds, median (-: over the budget at a shorter N, or failed)");
    println!("{}", table.to_text());
    // The plot shows six lines (the table has them all): the CPU model with lesson 07's
    // attention, the GPU model with the first and the last kernel, and PyTorch.
    let shown = |column: &str| {
        ["cpu_lesson07_ms", "torch_cpu_fp32_ms", "torch_math_fp32_ms", "torch_flash_fp16_ms"]
            .contains(&column)
            || on_gpu.first().is_some_and(|m| column == format!("gpu_{}_ms", slug(m.name())))
            || on_gpu.last().is_some_and(|m| column == format!("gpu_{}_ms", slug(m.name())))
    };
    let plotted: Vec<usize> = (0..columns.len()).filter(|&i| shown(&columns[i])).collect();
    let legends: Vec<&str> = plotted.iter().map(|&i| legends[i].as_str()).collect();
    let names: Vec<&str> = plotted.iter().map(|&i| columns[i].as_str()).collect();
    let device = gpu::Gpu::shared().map_or("no GPU".to_string(), |gpu| gpu.info.name.clone());
    let title =
        format!("GPT-2 small, one sequence: forward time ({device}, {})", bench::machine::today());
    let plot = Plot::new(&title, "sequence length N", "milliseconds", Log2, Log10);
    figures.write_svg("12_forward_time", &times.plot(plot, &legends, &names))?;
    figures.write_csv("12_forward_time", &times.table())?;
    println!("wrote 12_forward_time.csv and .svg to {}", figures.display());
    Ok(())
}

/// `name` as a CSV column: lower case, runs of other characters as one `_`.
fn slug(name: &str) -> String {
    let lower = name.to_lowercase().replace(|c: char| !c.is_ascii_alphanumeric(), " ");
    lower.split_whitespace().collect::<Vec<_>>().join("_")
}

/// The GPU model with every kernel the adapter runs at GPT-2's head dim; none without an
/// adapter (after saying why).
fn gpu_models(model: &Gpt2) -> Vec<GpuGpt2> {
    let gpu = match gpu::Gpu::shared() {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU model: {e}");
            return Vec::new();
        }
    };
    println!("GPU: {}", gpu.describe());
    let mut models = Vec::new();
    for kernel in registry::gpu_kernels() {
        match GpuGpt2::new(model, &kernel, gpu) {
            Ok(on_gpu) => models.push(on_gpu),
            Err(e) => println!("not timed: {}: {e}", kernel.about.name),
        }
    }
    models
}

/// PyTorch's GPT-2 forward on the CPU and, where CUDA is there, on the GPU: each peer with
/// the backends it reports, named as the script names them and described for the table.
fn torch_peers(config: &Config, gpu_only: bool) -> Vec<(Peer, Vec<(&'static str, &'static str)>)> {
    let Ok(script) = in_workspace("lab/peer/gpt2_forward.py") else {
        return Vec::new();
    };
    let peer = |device: &str| {
        Peer::new(&script)
            .option("device", device)
            .option("layers", config.n_layer)
            .option("vocab", config.vocab_size)
            .option("positions", config.n_positions)
    };
    let mut peers = Vec::new();
    if let Some(cpu) = peer("cpu").if_it_runs(" (CPU)").filter(|_| !gpu_only) {
        peers.push((cpu, vec![("cpu_fp32", "CPU, fp32")]));
    }
    if let Some(cuda) = peer("cuda").if_it_runs(" (CUDA)") {
        let backends = vec![
            ("math_fp32", "CUDA, SDPA math (S in memory), fp32"),
            ("efficient_fp32", "CUDA, SDPA memory-efficient, fp32"),
            ("flash_fp16", "CUDA, SDPA FlashAttention-2, fp16"),
        ];
        peers.push((cuda, backends));
    }
    peers
}
