//! The CPU decode benchmark: one generation step (one new query per sequence over its whole
//! KV cache, f32) with `lesson11::decode`, in one pass per (sequence, K/V head) and with the
//! keys split as `cpu_splits` chooses, beside PyTorch's CPU attention with one query in the
//! same run, and against the bandwidth of a parallel copy on the same machine.
//!
//! ```text
//! cargo run --release -p lesson11 --example decode_cpu             # Hq=32 Hkv=8 D=128
//! cargo run --release -p lesson11 --example decode_cpu -- --quick  # small sizes
//! ```
//!
//! Every configuration is first checked against the f64 oracle for grouped heads, then timed
//! (wall clock, median of 7 after 2 warm-ups). Writes `decode_cpu_b<B>.csv` and `decode_cpu.svg`
//! to `--out` (default `book/src/figures`).

use bench::plot::Scale;
use bench::report::{in_workspace, list_arg};
use bench::{Figures, Machine, Measurements, Peer, PeerProblem, Plot, Repeats, time_cpu};
use lesson11::problem::{DecodeProblem, DecodeSpec};
use lesson11::{KeyValues, cpu_splits, decode};
use rayon::prelude::*;
use reference::Tolerance;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let figures = Figures::from_args(&args)?;
    let (q_heads, kv_heads, head_dim) = if quick { (4, 2, 64) } else { (32, 8, 128) };
    let mut runs: Vec<(usize, Vec<usize>)> = match quick {
        true => vec![(1, vec![256, 1024, 4096])],
        false => vec![
            (1, (10..=16).map(|e| 1 << e).collect()), // 1K ... 64K tokens
            (8, (10..=13).map(|e| 1 << e).collect()), // 1K ... 8K tokens each
        ],
    };
    let batches = list_arg(&args, "--batches", runs.iter().map(|(b, _)| *b).collect())?;
    runs.retain(|(b, _)| batches.contains(b));
    let machine = Machine::this();
    let threads = rayon::current_num_threads();
    println!("CPU: {}; {threads} threads; {}", machine.cpu, machine.date);
    println!(
        "One decoding step: Hq={q_heads} query heads sharing Hkv={kv_heads} K/V heads, D={head_dim}, \
         f32 cache, one query per sequence; wall time per step, median of 7"
    );
    let copy_bytes = if quick { 32 << 20 } else { 512 << 20 };
    let copy = copy_bandwidth(copy_bytes);
    println!("Parallel copy ({} MiB read and written): {:.1} GB/s", copy_bytes >> 20, copy / 1e9);

    let problems: Vec<PeerProblem> = runs
        .iter()
        .flat_map(|(batch, lens)| lens.iter().map(move |&seq| (*batch, seq)))
        .map(|(batch, seq)| PeerProblem { batch, heads: q_heads, seq, head_dim, causal: false })
        .collect();
    let script = in_workspace("lessons/11_decoding/peer/sdpa_decode.py")?;
    let peer = Peer::new(script)
        .option("kv-heads", kv_heads)
        .option("device", "cpu")
        .option("repeats", 7)
        .if_it_runs(" (timed in this run)");
    let report = match &peer {
        Some(peer) => Some(peer.run(&problems).map_err(|e| e.to_string())?),
        None => None,
    };
    let torch = |problem: &PeerProblem, backend: &str| {
        report.as_ref().and_then(|r| r.seconds(problem, backend)).unwrap_or(f64::NAN)
    };

    let title = format!("CPU decoding step, batch 1 ({}, {})", machine.cpu, machine.date);
    let mut plot =
        Plot::new(&title, "cache length (tokens)", "microseconds", Scale::Log2, Scale::Log10);
    for (batch, lens) in &runs {
        let columns = [
            ("splits", 0),
            ("ours 1 split us", 1),
            ("ours us", 1),
            ("ours GB/s", 1),
            ("% of copy", 0),
            ("torch cpu_fp32 us", 1),
            ("torch / ours", 2),
        ];
        let mut table = Measurements::new("tokens", &columns);
        let mut expanded = false;
        for &len in lens {
            let spec = DecodeSpec {
                q_heads,
                kv_heads,
                lens: vec![len; *batch],
                q_len: 1,
                head_dim,
                causal: false,
                seed: len as u64,
            };
            let p = DecodeProblem::random(&spec);
            let cache = p.contiguous(0).map_err(|e| e.to_string())?;
            let expected = p.expected_with(&p.keys, &p.values)?;
            let splits = cpu_splits(*batch, kv_heads, len, threads);
            let mut ours = Vec::new();
            for s in [1, splits] {
                let out = decode(&cache, &p.q, &p.options(), s).map_err(|e| e.to_string())?;
                p.check_against(&out, Tolerance::F32, &expected).map_err(|e| {
                    format!("{spec:?} with {s} splits is wrong, not timing it: {e}")
                })?;
                let timings =
                    time_cpu(&[()], Repeats::new(2, 7), |_| decode(&cache, &p.q, &p.options(), s));
                ours.push(timings.median());
            }
            let bytes =
                (0..*batch).map(|seq| cache.len(seq)).sum::<usize>() * 2 * kv_heads * head_dim * 4;
            let rate = bytes as f64 / ours[1];
            let problem =
                PeerProblem { batch: *batch, heads: q_heads, seq: len, head_dim, causal: false };
            let mut theirs = torch(&problem, "cpu_fp32");
            if theirs.is_nan() {
                theirs = torch(&problem, "cpu_fp32_expanded_kv");
                expanded |= theirs.is_finite();
            }
            table.push(
                len,
                &[
                    splits as f64,
                    ours[0] * 1e6,
                    ours[1] * 1e6,
                    rate / 1e9,
                    100.0 * rate / copy,
                    theirs * 1e6,
                    theirs / ours[1],
                ],
            );
        }
        println!("\nB = {batch}\n{}", table.table().to_text());
        if expanded {
            println!(
                "(PyTorch's CPU attention refused grouped heads: K and V were repeated to the {q_heads} \
                 query heads before it was timed, so it read {} times the bytes)",
                q_heads / kv_heads
            );
        }
        figures.write_csv(&format!("decode_cpu_b{batch}"), &table.table())?;
        if *batch == 1 {
            let torch_legend =
                if expanded { "PyTorch CPU fp32, K and V repeated" } else { "PyTorch CPU fp32" };
            let legends = ["split keys", "one pass per K/V head", torch_legend];
            plot = table.plot(plot, &legends, &["ours us", "ours 1 split us", "torch cpu_fp32 us"]);
        }
    }
    figures.write_svg("decode_cpu", &plot)?;
    println!("\nWrote decode_cpu_b*.csv and decode_cpu.svg to {}", figures.display());
    Ok(())
}

/// Bytes per second a parallel copy of `bytes` moves on this machine (read and write counted):
/// the memory bandwidth the decoding is compared with.
fn copy_bandwidth(bytes: usize) -> f64 {
    let source = vec![1.0f32; bytes / 4];
    let mut target = vec![0.0f32; bytes / 4];
    let chunk = (bytes / 4).div_ceil(4 * rayon::current_num_threads());
    let timings = time_cpu(&[()], Repeats::new(2, 7), |_| {
        target
            .par_chunks_mut(chunk)
            .zip(source.par_chunks(chunk))
            .for_each(|(t, s)| t.copy_from_slice(s));
    });
    2.0 * bytes as f64 / timings.median()
}
