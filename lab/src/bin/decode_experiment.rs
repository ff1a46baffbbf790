//! Writes one of lesson 11's experiments (`lab/decode_experiments/`) as a shader, for lesson
//! 11's decode benchmark to time (`--shader FILE`) or the lab's `shader_stats` to weigh.
//!
//! ```text
//! cargo run -p lab --bin decode_experiment                         # the experiments
//! cargo run -p lab --bin decode_experiment -- keys_in_halves k.wgsl
//! cargo run --release -p lesson11 --example decode_benchmark -- --tune --batches 1 \
//!     --shader k.wgsl --layout 128,1,8,512
//! ```

use lab::decode_experiments::experiments;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = experiments();
    let [name, file] = &args[..] else {
        println!("usage: decode_experiment NAME FILE; the experiments and their layouts:");
        for e in &all {
            let l = e.layout;
            let layout = [l.threads, l.key_steps, l.pv_steps, l.scores];
            println!("  {:<24} {}", e.name, layout.map(|n| n.to_string()).join(","));
        }
        return if args.is_empty() { Ok(()) } else { Err("expected NAME and FILE".into()) };
    };
    let names: Vec<&str> = all.iter().map(|e| e.name).collect();
    let experiment = all
        .iter()
        .find(|e| e.name == name)
        .ok_or(format!("no experiment {name}; expected one of {}", names.join(", ")))?;
    std::fs::write(file, experiment.source()?).map_err(|e| format!("{file}: {e}"))?;
    println!("wrote {name} to {file}");
    Ok(())
}
