//! The precision strategies of `lesson12::precision` on a GPT-2 checkpoint, each against f32,
//! then the monitor on a model whose activations grow too large for f16.
//!
//!     cargo run --release -p lesson12 --example precision              # the tiny checkpoint
//!     cargo run --release -p lesson12 --example precision -- gpt2      # GPT-2 small
//!
//! The second part multiplies the last block's MLP output weights by 1000, then by 20000
//! (activations of thousands occur in real models: a few channels of large LLMs reach them),
//! and runs the monitor under each strategy.

use std::path::PathBuf;

use lesson12::model::same_top1;
use lesson12::precision::{Dtype, Monitor, Precision, logit_errors, table};
use lesson12::{Attention, Gpt2, Tokenizer, generate, tiny_checkpoint};

/// How much the last block's MLP output is scaled in the overflow demonstrations.
const BLOW_UPS: [f32; 2] = [1000.0, 20000.0];

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let folder = std::env::args().nth(1).map_or_else(tiny_checkpoint, PathBuf::from);
    let model = Gpt2::from_folder(&folder)?;
    let tokenizer = Tokenizer::from_folder(&folder)?;
    let naive = Attention::naive();
    let text =
        "A model that reads 64 tokens: FlashAttention keeps a tile of the scores on the chip.";
    let tokens = tokenizer.encode(text);
    let prompt = &tokens[..4];
    let new_tokens = 12;

    let reference = model.logits(&tokens, &naive)?;
    let reference_greedy = generate(&model, &naive, prompt, new_tokens, true)?;
    println!(
        "{} tokens; logits against f32's; greedy: {new_tokens} tokens after 4\n",
        tokens.len()
    );
    println!(
        "{:<16} {:>11} {:>11} {:>11} {:>7} {:>8}",
        "strategy", "MSE", "max error", "relative", "top-1", "greedy"
    );
    for precision in Precision::ALL {
        let rounded = model.with_precision(precision);
        let logits = rounded.logits(&tokens, &naive)?;
        let (mse, max, relative) = logit_errors(&logits, &reference);
        let greedy = generate(&rounded, &naive, prompt, new_tokens, true)?;
        let same = greedy.iter().zip(&reference_greedy).take_while(|(a, b)| a == b).count();
        println!(
            "{:<16} {mse:>11.2e} {max:>11.2e} {relative:>11.2e} {:>7} {:>8}",
            precision.name(),
            format!("{}/{}", same_top1(&logits, &reference), tokens.len()),
            format!("{same}/{new_tokens}")
        );
    }

    for blow_up in BLOW_UPS {
        let large = blown_up(&model, blow_up);
        let reference = large.logits(&tokens, &naive)?;
        println!("\nThe last block's MLP output weights times {blow_up}:");
        for precision in Precision::ALL {
            let mut monitor = Monitor::default();
            let rounded = large.with_precision(precision);
            let result = rounded.trace_monitored(&tokens, &naive, &mut monitor);
            let verdict = match (monitor.first_non_finite(), result) {
                (Some(stats), _) => {
                    format!(
                        "first NaN or inf: {} ({} NaN, {} inf)",
                        stats.layer, stats.nan, stats.inf
                    )
                }
                (None, Err(error)) => format!("error: {error}"),
                (None, Ok(trace)) => {
                    let (_, _, relative) = logit_errors(&trace.logits, &reference);
                    format!("every layer finite; logits {relative:.2e} from f32's (relative)")
                }
            };
            println!("{:<16} {verdict}", precision.name());
        }
        let mut monitor = Monitor::default();
        let aggressive = large.with_precision(Precision::Aggressive(Dtype::F16));
        let _ = aggressive.trace_monitored(&tokens, &naive, &mut monitor);
        println!("\nThe monitor of aggressive f16, every layer:\n{}", table(&monitor));
    }
    Ok(())
}

/// The model with its last block's MLP output (weights and bias) multiplied by `factor`.
fn blown_up(model: &Gpt2, factor: f32) -> Gpt2 {
    let mut large = model.clone();
    let last = large.blocks.last_mut().expect("at least one block");
    last.mlp_out.weight *= factor;
    last.mlp_out.bias *= factor;
    large
}
