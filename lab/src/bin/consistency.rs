//! Generates text with a GPT-2 checkpoint, then compares every registered attention backend
//! with lesson 01's naive one on the same tokens: each CPU version inside the CPU model, and
//! each WGSL kernel the adapter runs inside the GPU model (everything on the device). The
//! source material's consistency check, done on a model whose numbers PyTorch agrees with
//! (`tests/pytorch.rs`, `tests/gpu.rs`).
//!
//!     cargo run --release -p lab --bin consistency                # the tiny checkpoint
//!     cargo run --release -p lab --bin consistency -- gpt2 "The" 20  # GPT-2 small
//!
//! Arguments: a checkpoint folder (`config.json`, `model.safetensors`, `vocab.json`,
//! `merges.txt`), a prompt, and how many tokens to generate. Chapter 12 says how to download
//! GPT-2 small.

use std::path::PathBuf;

use lesson12::gpu::{GpuGpt2, GpuSession};
use lesson12::model::same_top1;
use lesson12::{Attention, Gpt2, Session, Tokenizer, generate, tiny_checkpoint};
use ndarray::{Array2, Axis};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let folder = args.next().map_or_else(tiny_checkpoint, PathBuf::from);
    let prompt = args.next().unwrap_or_else(|| "FlashAttention keeps a tile".to_string());
    let new_tokens: usize = args.next().map_or(Ok(12), |n| n.parse())?;
    let model = Gpt2::from_folder(&folder)?;
    let tokenizer = Tokenizer::from_folder(&folder)?;
    let c = &model.config;
    println!(
        "GPT-2: {} layers, {} heads of {}, {} channels, {} tokens, {} positions",
        c.n_layer,
        c.n_head,
        c.head_dim(),
        c.n_embd,
        c.vocab_size,
        c.n_positions
    );

    let naive = Attention::naive();
    let prompt_ids = tokenizer.encode(&prompt);
    let generated = generate(&model, &naive, &prompt_ids, new_tokens, true)?;
    println!("prompt: {prompt:?} ({} tokens)", prompt_ids.len());
    println!("greedy, {new_tokens} tokens with the cache: {:?}\n", tokenizer.decode(&generated)?);

    // Every backend on the prompt and the generated tokens, against naive attention.
    let tokens: Vec<u32> = prompt_ids.iter().chain(&generated).copied().collect();
    let baseline = model.trace(&tokens, &naive)?;
    println!(
        "{:<34} {:>11} {:>11} {:>11} {:>11} {:>7} {:>8} {:>11}",
        "backend",
        "hidden max",
        "logits max",
        "logits mean",
        "relative",
        "top-1",
        "greedy",
        "cached"
    );
    let row = |name: &str, trace: &lesson12::Trace, greedy: &[u32], cached: f32| {
        let hidden =
            trace.hidden.iter().zip(&baseline.hidden).map(|(a, b)| largest_difference(a, b));
        let hidden = hidden.fold(0.0, f32::max);
        let logits = largest_difference(&trace.logits, &baseline.logits);
        let mean = (&trace.logits - &baseline.logits).mapv(f32::abs).mean().unwrap_or(0.0);
        let relative = logits / baseline.logits.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let top1 = same_top1(&trace.logits, &baseline.logits);
        let same = greedy.iter().zip(&generated).take_while(|(a, b)| a == b).count();
        println!(
            "{name:<34} {hidden:>11.2e} {logits:>11.2e} {mean:>11.2e} {relative:>11.2e} {:>7} {:>8} {cached:>11.2e}",
            format!("{top1}/{}", tokens.len()),
            format!("{same}/{new_tokens}"),
        );
    };
    for attention in registry::cpu_forwards().into_iter().map(Attention::new) {
        let trace = model.trace(&tokens, &attention)?;
        let greedy = generate(&model, &attention, &prompt_ids, new_tokens, true)?;
        let mut session = Session::new(&model, &attention)?;
        let cached = cached_against_full(|t| session.feed(t), &tokens, &trace.logits)?;
        row(attention.name(), &trace, &greedy, cached);
    }
    match gpu::Gpu::shared() {
        Err(e) => println!("(no GPU rows: {e})"),
        Ok(gpu) => {
            println!("GPU model on {}:", gpu.describe());
            let mut lacking = Vec::new();
            for kernel in registry::gpu_kernels() {
                if kernel.missing_on(&gpu.device).is_some() {
                    lacking.push(kernel.about.name);
                    continue;
                }
                let on_gpu = match GpuGpt2::new(&model, &kernel, gpu) {
                    Ok(on_gpu) => on_gpu,
                    Err(e) => {
                        println!("{:<34} not run: {e}", kernel.about.name);
                        continue;
                    }
                };
                let trace = on_gpu.trace(&tokens)?;
                let greedy = on_gpu.generate(&prompt_ids, new_tokens, true)?;
                let mut session = GpuSession::new(&on_gpu)?;
                let cached = cached_against_full(|t| session.feed(t), &tokens, &trace.logits)?;
                row(&format!("WGSL {}", kernel.about.name), &trace, &greedy, cached);
            }
            if !lacking.is_empty() {
                println!("not run, the adapter has no tensor cores: {}", lacking.join(", "));
            }
        }
    }
    println!(
        "\nhidden max, logits max and mean: largest and mean |difference| from naive attention;\n\
         relative: logits max over the largest |logit|; top-1: positions whose most likely next\n\
         token agrees; greedy: generated tokens equal to naive's before the first difference;\n\
         cached: largest |difference| between the logits of cached decoding (the first half of the\n\
         tokens at once, then one at a time) and those of one pass over the whole sequence."
    );
    Ok(())
}

fn largest_difference(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// The logits of feeding `tokens` to a session (`feed`; the first half as a prompt, then
/// one at a time) against `full`, those of one pass: the largest difference.
fn cached_against_full(
    mut feed: impl FnMut(&[u32]) -> Result<Array2<f32>, lesson12::ModelError>,
    tokens: &[u32],
    full: &Array2<f32>,
) -> Result<f32, lesson12::ModelError> {
    let prompt = tokens.len().div_ceil(2);
    let mut rows = vec![feed(&tokens[..prompt])?];
    for &token in &tokens[prompt..] {
        rows.push(feed(&[token])?);
    }
    let views: Vec<_> = rows.iter().map(|r| r.view()).collect();
    let cached = ndarray::concatenate(Axis(0), &views).expect("rows of V logits");
    Ok(largest_difference(&cached, full))
}
