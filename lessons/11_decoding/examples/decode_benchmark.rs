//! The decode benchmark: one generation step (one new query per sequence over its whole KV
//! cache) with the WGSL kernels of `gpu_decode`, without splits and with the splits
//! `gpu_splits` chooses, beside PyTorch in the same run, and against the memory bandwidth the
//! same GPU reaches copying a buffer.
//!
//! ```text
//! cargo run --release -p lesson11 --example decode_benchmark             # Hq=32 Hkv=8 D=128
//! cargo run --release -p lesson11 --example decode_benchmark -- --quick  # small (lavapipe)
//! cargo run --release -p lesson11 --example decode_benchmark -- --batches 1  # batch 1 only
//! cargo run --release -p lesson11 --example decode_benchmark -- --tune     # layouts, splits
//! cargo run --release -p lesson11 --example decode_benchmark -- --anatomy  # loads taken out
//! cargo run --release -p lesson11 --example decode_benchmark -- --tune --shader my.wgsl
//! cargo run --release -p lesson11 --example decode_benchmark -- --tune --layout 128,1,8,512
//! cargo run --release -p lesson11 --example decode_benchmark -- --write-shader out.wgsl
//! ```
//!
//! `--shader` tunes (or dissects) an edited copy of `decode.wgsl` instead of the lesson's: a
//! way to try a change to the kernel (the lab keeps six restructurings to try:
//! `cargo run -p lab --bin decode_experiment` writes one). `--tune` checks each layout's
//! answer against the oracle once per cache length, at its first number of splits. `--layout
//! threads,key_steps,pv_steps,scores` tunes that layout alone. `--write-shader` writes the
//! kernels with the layout's constants set and loops unrolled, as the driver gets them, for
//! lesson 10's `shader_stats --wgsl` to report their registers.
//!
//! Every configuration is first checked against the f64 oracle (grouped heads, on the
//! f16-rounded cache), then timed: GPU time from timestamp queries, calls back to back (a model
//! decodes step after step), median of several samples. The peer script times PyTorch the
//! same way (CUDA events around calls back to back): SDPA's backends given the grouped heads
//! as they are (and the memory-efficient one, which refuses them, on K and V repeated to the
//! query heads: `*_expanded_kv`, left out of `best SDPA`), flash-attn's
//! `flash_attn_with_kvcache` where installed, and a copy of the cache's size. Achieved
//! bandwidth is the cache's bytes over the time of one step (the partial results, written and
//! read back, add 12% to the bytes at 1K tokens and batch 1, under 1% from 64K tokens). The
//! peer's times include the host's launch time wherever the GPU runs out of work between calls
//! (short caches): its flat times there are that, not bandwidth. Writes
//! `decode_gpu_b<B>.csv` and `decode_gpu.svg`, `decode_bandwidth.svg` to `--out` (default
//! `book/src/figures`).

use bench::plot::Scale;
use bench::report::{in_workspace, list_arg};
use bench::{Figures, Machine, Measurements, Peer, PeerProblem, Plot};
use gpu::kernel::{Dispatch, bind, compile, launch_repeated};
use gpu::{Gpu, GpuTimer, buffers};
use lesson11::gpu_decode::{
    DecodeCall, GpuCache, KernelShape, kernel_source_of, padded, round_to_f16, rows_per_workgroup,
};
use lesson11::problem::{DecodeProblem, DecodeSpec};
use reference::{AttentionError, Expected, Tolerance};

/// The problems: `(batch, cache lengths)`, and the heads.
struct Sizes {
    runs: Vec<(usize, Vec<usize>)>,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    copy_bytes: usize,
}

fn sizes(quick: bool) -> Sizes {
    match quick {
        true => Sizes {
            runs: vec![(1, vec![256, 1024, 4096]), (2, vec![512])],
            q_heads: 4,
            kv_heads: 2,
            head_dim: 64,
            copy_bytes: 16 << 20,
        },
        // A Llama-like attention layer: 32 query heads sharing 8 K/V heads of 128.
        false => Sizes {
            runs: vec![
                (1, (10..=17).map(|e| 1 << e).collect()), // 1K ... 128K tokens
                (8, (10..=14).map(|e| 1 << e).collect()), // 1K ... 16K tokens each
            ],
            q_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            copy_bytes: 1 << 30,
        },
    }
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut sizes = sizes(args.iter().any(|a| a == "--quick"));
    let batches: Vec<usize> = sizes.runs.iter().map(|(b, _)| *b).collect();
    let batches = list_arg(&args, "--batches", batches)?;
    sizes.runs.retain(|(b, _)| batches.contains(b));
    let figures = Figures::from_args(&args)?;
    let shader = match args.iter().position(|a| a == "--shader") {
        Some(i) => {
            let path = args.get(i + 1).ok_or("--shader needs the path of a WGSL file")?;
            std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?
        }
        None => lesson11::gpu_decode::SHADER.to_string(),
    };
    let layout = layout_arg(&args)?;
    if let Some(i) = args.iter().position(|a| a == "--write-shader") {
        let path = args.get(i + 1).ok_or("--write-shader needs the path of the file to write")?;
        return write_shader(&sizes, &shader, layout.unwrap_or_default(), path);
    }
    if layout.is_some() && !args.iter().any(|a| a == "--tune") {
        return Err("--layout is for --tune and --write-shader".into());
    }
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    let Sizes { q_heads, kv_heads, head_dim, .. } = sizes;
    println!("Device: {}; {}", gpu.describe(), Machine::this().date);
    println!(
        "One decoding step: Hq={q_heads} query heads sharing Hkv={kv_heads} K/V heads, D={head_dim}, \
         f16 cache, one query per sequence; GPU time per step, median"
    );
    if args.iter().any(|a| a == "--tune") {
        return tune(gpu, &timer, &sizes, &shader, layout);
    }
    // The copy also warms the GPU up before anything else is timed: a GPU that idled starts
    // at a low clock, and the first kernel timed would pay for it.
    let (copy, read) = copy_bandwidth(gpu, &timer, sizes.copy_bytes).map_err(|e| e.to_string())?;
    println!(
        "Copy bandwidth (WGSL, {} MiB read and written): {:.0} GB/s; reading alone: {:.0} GB/s",
        sizes.copy_bytes >> 20,
        copy / 1e9,
        read / 1e9
    );
    if args.iter().any(|a| a == "--anatomy") {
        return anatomy(gpu, &timer, &sizes, &shader);
    }

    let problems: Vec<PeerProblem> = sizes
        .runs
        .iter()
        .flat_map(|(batch, lens)| lens.iter().map(move |&seq| (*batch, seq)))
        .map(|(batch, seq)| PeerProblem { batch, heads: q_heads, seq, head_dim, causal: false })
        .collect();
    let script = in_workspace("lessons/11_decoding/peer/sdpa_decode.py")?;
    let peer = Peer::new(script).option("kv-heads", kv_heads).if_it_runs(" (timed in this run)");
    let report = match &peer {
        Some(peer) => Some(peer.run(&problems).map_err(|e| e.to_string())?),
        None => None,
    };
    let backends: Vec<String> =
        report.iter().flat_map(|r| r.backends()).map(str::to_string).collect();

    let date = Machine::this().date;
    let on = format!("{}, {date}", gpu.info.name);
    let mut latency = Plot::new(
        &format!("One decoding step, batch 1 ({on})"),
        "cache length (tokens)",
        "microseconds",
        Scale::Log2,
        Scale::Log10,
    );
    let mut bandwidth = Plot::new(
        &format!("Cache read rate, batch 1 ({on})"),
        "cache length (tokens)",
        "GB/s",
        Scale::Log2,
        Scale::Linear,
    );
    for (batch, lens) in &sizes.runs {
        let mut columns = vec![
            ("splits", 0),
            ("ours 1 split us", 1),
            ("ours us", 1),
            ("of which merge us", 1),
            ("ours GB/s", 1),
            ("% of copy", 0),
            ("% of read", 0),
        ];
        let peer_columns: Vec<String> = backends.iter().map(|b| format!("{b} us")).collect();
        columns.extend(peer_columns.iter().map(|c| (c.as_str(), 1)));
        columns.push(("best SDPA / ours", 2));
        let mut table = Measurements::new("tokens", &columns);
        for &len in lens {
            let (p, cache) = problem_on_gpu(gpu, &sizes, *batch, len, len as u64)?;
            let expected = expected_f16(&p)?;
            let mut ours = Vec::new();
            let mut chosen = 0;
            let mut partials = 0.0;
            for splits in [Some(1), None] {
                let call = DecodeCall::new(&gpu.device, &cache, &p.q, &p.options(), splits)
                    .map_err(|e| e.to_string())?;
                validate(gpu, &timer, &call, &p, &expected)?;
                chosen = call.splits();
                ours.push(
                    time(|n| call.run(&gpu.device, &gpu.queue, Some(&timer), n))
                        .map_err(|e| e.to_string())?,
                );
                let only_partials =
                    |n| call.run_partials_only(&gpu.device, &gpu.queue, Some(&timer), n);
                partials = time(only_partials).map_err(|e| e.to_string())?;
            }
            let merge = (ours[1] - partials).max(0.0);
            let rate = cache.bytes_per_step() as f64 / ours[1];
            let problem =
                PeerProblem { batch: *batch, heads: q_heads, seq: len, head_dim, causal: false };
            let peer_seconds: Vec<f64> = backends
                .iter()
                .map(|b| report.as_ref().and_then(|r| r.seconds(&problem, b)).unwrap_or(f64::NAN))
                .collect();
            let best_sdpa = backends
                .iter()
                .zip(&peer_seconds)
                // A copy, or attention on K and V repeated to the query heads, is another
                // problem than the grouped step.
                .filter(|(b, s)| {
                    !b.starts_with("copy") && !b.ends_with("_expanded_kv") && s.is_finite()
                })
                .map(|(_, s)| *s)
                .fold(f64::INFINITY, f64::min);
            let mut row = vec![
                chosen as f64,
                ours[0] * 1e6,
                ours[1] * 1e6,
                merge * 1e6,
                rate / 1e9,
                100.0 * rate / copy,
                100.0 * rate / read,
            ];
            row.extend(peer_seconds.iter().map(|s| s * 1e6));
            row.push(best_sdpa / ours[1]);
            table.push(len, &row);
        }
        println!("\nB = {batch}\n{}", table.table().to_text());
        figures.write_csv(&format!("decode_gpu_b{batch}"), &table.table())?;
        if *batch == 1 {
            let mut lines =
                vec![("WGSL, chosen splits", "ours us"), ("WGSL, 1 split", "ours 1 split us")];
            for (b, column) in backends.iter().zip(&peer_columns) {
                if !b.starts_with("copy") && !b.starts_with("math") && !b.ends_with("_expanded_kv")
                {
                    lines.push((b.as_str(), column.as_str()));
                }
            }
            let (legends, names): (Vec<&str>, Vec<&str>) = lines.into_iter().unzip();
            latency = table.plot(latency, &legends, &names);
            bandwidth = table.plot(bandwidth, &["WGSL, chosen splits"], &["ours GB/s"]);
            let copy_line = table.column("ours GB/s").into_iter().map(|(x, _)| (x, copy / 1e9));
            bandwidth = bandwidth.line("WGSL copy (read + write)", copy_line);
            let read_line = table.column("ours GB/s").into_iter().map(|(x, _)| (x, read / 1e9));
            bandwidth = bandwidth.line("WGSL read alone", read_line);
        }
    }
    for (stem, plot) in [("decode_gpu", &latency), ("decode_bandwidth", &bandwidth)] {
        figures.write_svg(stem, plot)?;
    }
    println!(
        "\nWrote decode_gpu_b*.csv, decode_gpu.svg and decode_bandwidth.svg to {}",
        figures.display()
    );
    Ok(())
}

/// Times layouts of the split kernel and numbers of splits at batch 1 on three cache lengths
/// (16K, 32K and the longest; the longest alone with `--quick`), each layout checked against
/// the oracle first: what the defaults were chosen from, and how a step's time splits into a
/// fixed part and a part that grows with the cache.
fn tune(
    gpu: &Gpu,
    timer: &GpuTimer,
    sizes: &Sizes,
    shader: &str,
    layout: Option<KernelShape>,
) -> Result<(), String> {
    let longest = sizes.runs.iter().flat_map(|(_, lens)| lens.iter().copied()).max().unwrap_or(1);
    let lens = if longest > 1 << 15 { vec![1 << 14, 1 << 15, longest] } else { vec![longest] };
    // (threads, keys and values loaded at once, scores held): the layout tuned on an H100 in
    // 2026-11, then smaller and larger score tiles (less or more workgroup memory, shorter or
    // longer tiles), fewer or more loads in flight (fewer or more registers), more threads.
    let shapes = [
        [128, 1, 8, 1024],
        [128, 1, 8, 512],
        [128, 1, 16, 512],
        [128, 1, 4, 512],
        [128, 2, 8, 512],
        [128, 1, 8, 256],
        [64, 1, 8, 256],
        [256, 1, 8, 1024],
        [256, 1, 16, 1024],
        [256, 1, 16, 2048],
    ];
    let shapes: Vec<KernelShape> = match layout {
        Some(layout) => vec![layout],
        None => shapes.into_iter().map(KernelShape::from).collect(),
    };
    for len in lens {
        let (p, cache) = problem_on_gpu(gpu, sizes, 1, len, 1)?;
        let expected = expected_f16(&p)?;
        let mb = cache.bytes_per_step() / 1_000_000;
        println!("\nTuning at B = 1, {len} tokens ({mb} MB of cache):");
        println!("threads  key steps  value steps  scores  splits       us  partials us    GB/s");
        for &shape in &shapes {
            let KernelShape { threads, key_steps, pv_steps, scores } = shape;
            for (i, splits) in [16, 32, 64, 128, 256].into_iter().enumerate() {
                let call = DecodeCall::with_shader(
                    &gpu.device,
                    &cache,
                    &p.q,
                    &p.options(),
                    Some(splits),
                    shape,
                    shader,
                );
                let layout =
                    format!("{threads:7}  {key_steps:9}  {pv_steps:11}  {scores:6}  {splits:6}");
                let call = match call {
                    Ok(call) => call,
                    Err(e) => {
                        println!("{layout}  not run: {e}");
                        continue;
                    }
                };
                if i == 0 {
                    validate(gpu, timer, &call, &p, &expected)?;
                }
                let seconds = time(|n| call.run(&gpu.device, &gpu.queue, Some(timer), n))
                    .map_err(|e| e.to_string())?;
                let partials =
                    time(|n| call.run_partials_only(&gpu.device, &gpu.queue, Some(timer), n))
                        .map_err(|e| e.to_string())?;
                let rate = cache.bytes_per_step() as f64 / seconds / 1e9;
                println!("{layout}  {:7.1}  {:11.1}  {rate:6.0}", seconds * 1e6, partials * 1e6);
            }
        }
    }
    Ok(())
}

/// The loads of `decode.wgsl` that `--anatomy` takes out, each replaced by its address (so
/// that the address arithmetic and the block table reads stay): a key's 16 bytes in the score
/// phase, a value's in the weighted sum. The `select` of a load it never takes keeps the
/// buffer bound (a kernel that names no element of a buffer loses its binding), and the
/// driver drops the load.
const KEY_LOAD: (&str, &str) = (
    "let k8 = k_pool[keys[u].key + p * params.block_size];",
    "let k8 = select(k_pool[0], vec4<u32>(keys[u].key + p * params.block_size), true);",
);
const VALUE_LOAD: (&str, &str) = (
    "values[u] = v_pool[value_at[min(t0 + u * LANES, n - 1u)] + pack];",
    "values[u] = select(v_pool[0], vec4<u32>(value_at[min(t0 + u * LANES, n - 1u)] + pack), true);",
);
/// The widening of f16 to f32 taken out: each pack's bits read as f32 as they are.
const UNPACKING: [(&str, &str); 2] = [
    (
        "return vec4<f32>(unpack2x16float(pack.x), unpack2x16float(pack.y));",
        "return bitcast<vec4<f32>>(pack);",
    ),
    (
        "return vec4<f32>(unpack2x16float(pack.z), unpack2x16float(pack.w));",
        "return bitcast<vec4<f32>>(pack.yxwz);",
    ),
];

/// Most of the arithmetic taken out, the loads kept: the two dot products of each pack of a
/// key (8 multiply-adds per query head) become two additions, 32 per key and query head
/// instead of 128 multiply-adds; each pack of a weighted value takes one multiply-add and one
/// addition per query head instead of 8 multiply-adds.
const ARITHMETIC: [(&str, &str); 3] = [
    (
        "dots[u * MAX_ROWS + r] += dot(q_rows[at], lo) + dot(q_rows[at + 1u], hi);",
        "dots[u * MAX_ROWS + r] += lo.x + hi.y;",
    ),
    ("acc[2u * r] += p * lo;", "acc[2u * r].x += p * lo.x;"),
    ("acc[2u * r + 1u] += p * hi;", "acc[2u * r + 1u].x += hi.x;"),
];
/// The tree that finds each row's maximum over a tile taken out (its loop runs no step, so
/// its barriers go too): every thread then takes thread 0's maximum over its own keys.
const MAX_TREE: (&str, &str) = (
    "for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
            if tid < stride {
                // unroll
                for (var r = 0u; r < ROWS; r++) {
                    let i = r * THREADS + tid;
                    reduce[i] = max(",
    "for (var stride = 0u; stride > 0u; stride /= 2u) {
            if tid < stride {
                // unroll
                for (var r = 0u; r < ROWS; r++) {
                    let i = r * THREADS + tid;
                    reduce[i] = max(",
);

/// What a step's time is made of, at batch 1 on 16K tokens and the longest cache, with the
/// default layout and splits: the kernels as written, the split kernel alone (no merge), and
/// the kernel with its key loads, its value loads, or both taken out, with its f16 read as f32
/// without widening, with most of its arithmetic or its per-tile reduction taken out (their
/// answers are then wrong, and not checked: only the times mean something).
fn anatomy(gpu: &Gpu, timer: &GpuTimer, sizes: &Sizes, shader: &str) -> Result<(), String> {
    let longest = sizes.runs.iter().flat_map(|(_, lens)| lens.iter().copied()).max().unwrap_or(1);
    let lens = if longest > 1 << 14 { vec![1 << 14, longest] } else { vec![longest] };
    let edit = |edits: &[(&str, &str)]| -> Result<String, String> {
        let mut shader = shader.to_string();
        for (from, to) in edits {
            if !shader.contains(from) {
                return Err(format!("decode.wgsl no longer contains `{from}`"));
            }
            shader = shader.replace(from, to);
        }
        Ok(shader)
    };
    let variants = [
        ("as written", edit(&[])?),
        ("keys not read", edit(&[KEY_LOAD])?),
        ("values not read", edit(&[VALUE_LOAD])?),
        ("neither read", edit(&[KEY_LOAD, VALUE_LOAD])?),
        ("f16 not widened", edit(&UNPACKING)?),
        ("little arithmetic", edit(&ARITHMETIC)?),
        ("no max tree", edit(&[MAX_TREE])?),
    ];
    for len in lens {
        let (p, cache) = problem_on_gpu(gpu, sizes, 1, len, 1)?;
        let bytes = cache.bytes_per_step() as f64;
        println!(
            "\nB = 1, {len} tokens ({} MB of cache), the default layout:",
            bytes as u64 / 1_000_000
        );
        println!("{:<18} {:>9} {:>12} {:>12}", "kernel", "step us", "partials us", "GB/s read");
        for (name, shader) in &variants {
            let shape = KernelShape::default();
            let call = DecodeCall::with_shader(
                &gpu.device,
                &cache,
                &p.q,
                &p.options(),
                None,
                shape,
                shader,
            )
            .map_err(|e| e.to_string())?;
            if *name == "as written" {
                validate(gpu, timer, &call, &p, &expected_f16(&p)?)?;
            }
            let step = time(|n| call.run(&gpu.device, &gpu.queue, Some(timer), n))
                .map_err(|e| e.to_string())?;
            let partials =
                time(|n| call.run_partials_only(&gpu.device, &gpu.queue, Some(timer), n))
                    .map_err(|e| e.to_string())?;
            let read = match *name {
                "keys not read" | "values not read" => bytes / 2.0,
                "neither read" => 0.0,
                _ => bytes,
            };
            println!(
                "{name:<18} {:>9.1} {:>12.1} {:>12.0}",
                step * 1e6,
                partials * 1e6,
                read / step / 1e9
            );
        }
    }
    Ok(())
}

/// `--layout threads,key_steps,pv_steps,scores`, if given: one layout of the split kernel.
fn layout_arg(args: &[String]) -> Result<Option<KernelShape>, String> {
    if !args.iter().any(|a| a == "--layout") {
        return Ok(None);
    }
    let numbers: Vec<usize> = list_arg(args, "--layout", Vec::new())?;
    let layout: [usize; 4] = numbers
        .try_into()
        .map_err(|_| "--layout needs 4 numbers: threads,key_steps,pv_steps,scores")?;
    Ok(Some(KernelShape::from(layout)))
}

/// Writes the kernels as the driver gets them, for `sizes`' heads and `kernel`'s layout:
/// constants set, loops unrolled. Lesson 10's `shader_stats --wgsl` then reports what the
/// driver's compiler made of them (registers, spills).
fn write_shader(
    sizes: &Sizes,
    shader: &str,
    kernel: KernelShape,
    path: &str,
) -> Result<(), String> {
    let padded_dim = padded(sizes.head_dim);
    let rows = rows_per_workgroup(sizes.q_heads / sizes.kv_heads, padded_dim);
    kernel.check(padded_dim, rows).map_err(|e| e.to_string())?;
    let source = kernel_source_of(shader, padded_dim, rows, kernel).map_err(|e| e.to_string())?;
    std::fs::write(path, source).map_err(|e| format!("writing {path}: {e}"))?;
    println!("Wrote {path}: {kernel:?}, D = {padded_dim}, {rows} query heads per workgroup");
    Ok(())
}

/// One decoding step's problem for `sizes`' heads: `batch` sequences of `len` tokens each,
/// values drawn from `seed`, and its cache uploaded to the GPU.
fn problem_on_gpu(
    gpu: &Gpu,
    sizes: &Sizes,
    batch: usize,
    len: usize,
    seed: u64,
) -> Result<(DecodeProblem, GpuCache), String> {
    let spec = DecodeSpec {
        q_heads: sizes.q_heads,
        kv_heads: sizes.kv_heads,
        lens: vec![len; batch],
        q_len: 1,
        head_dim: sizes.head_dim,
        causal: false,
        seed,
    };
    let p = DecodeProblem::random(&spec);
    let cache = GpuCache::upload(&gpu.device, &p.contiguous(0).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok((p, cache))
}

/// The oracle's answer for `p` on its f16-rounded cache, what the kernels compute with.
fn expected_f16(p: &DecodeProblem) -> Result<Vec<Expected>, String> {
    let keys: Vec<_> = p.keys.iter().map(round_to_f16).collect();
    let values: Vec<_> = p.values.iter().map(round_to_f16).collect();
    p.expected_with(&keys, &values)
}

/// Checks one call's answer against the f64 oracle on the f16-rounded cache, before timing it,
/// then brings the GPU back to speed.
fn validate(
    gpu: &Gpu,
    timer: &GpuTimer,
    call: &DecodeCall,
    p: &DecodeProblem,
    expected: &[Expected],
) -> Result<(), String> {
    call.run(&gpu.device, &gpu.queue, None, 1).map_err(|e| e.to_string())?;
    let out = call.read(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    p.check_against(&out, Tolerance::F32, expected).map_err(|e| {
        format!("{:?} with {} splits is wrong, not timing it: {e}", p.spec, call.splits())
    })?;
    // One timing thrown away, although `time` warms up first: the GPU idled while the host
    // computed the oracle's answer, and no kept timing should start on a GPU coming back
    // from idle.
    time(|n| call.run(&gpu.device, &gpu.queue, Some(timer), n)).map_err(|e| e.to_string())?;
    Ok(())
}

/// Median GPU seconds of one call: `run(n)` runs it `n` times back to back and returns their
/// GPU time. Warm-up for a fifth of a second, then 9 samples of at least 5 ms each. How many
/// calls make 5 ms is measured after the warm-up: a first call on a GPU that idled (while the
/// host checked the previous answer) runs at a low clock, and samples sized from it would be
/// so short that the GPU idles between them again.
fn time(
    mut run: impl FnMut(usize) -> Result<Option<f64>, AttentionError>,
) -> Result<f64, AttentionError> {
    let no_time = || AttentionError::from(gpu::GpuError::Lost("no GPU time".into()));
    let calls_for = |seconds: f64| (5e-3 / seconds.max(1e-9)).ceil().clamp(1.0, 1000.0) as usize;
    let mut n = calls_for(run(1)?.ok_or_else(no_time)?);
    let mut busy = 0.0;
    while busy < 0.2 {
        busy += run(n)?.ok_or_else(no_time)?;
    }
    n = calls_for(run(n)?.ok_or_else(no_time)? / n as f64);
    let mut samples = Vec::new();
    for _ in 0..9 {
        samples.push(run(n)?.ok_or_else(no_time)? / n as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// Bytes per second WGSL kernels move over `bytes` of a buffer, measured in the same run: a
/// copy to another buffer (read and write counted), the bandwidth this GPU gives a shader, and
/// a kernel that only reads, as decoding does.
fn copy_bandwidth(gpu: &Gpu, timer: &GpuTimer, bytes: usize) -> Result<(f64, f64), AttentionError> {
    let source = buffers::storage::<u32>(&gpu.device, "copy source", bytes / 4)?;
    let destination = buffers::storage::<u32>(&gpu.device, "copy destination", bytes / 4)?;
    let mut rates = Vec::new();
    for (entry, moved) in [("copy", 2 * bytes), ("read_only", bytes)] {
        let pipeline = compile(&gpu.device, "copy.wgsl", include_str!("copy.wgsl"), entry, &[])?;
        let bind_group = bind(&gpu.device, &pipeline, &[(0, &source), (1, &destination)])?;
        let kernel = [Dispatch { label: entry, pipeline, bind_group, workgroups: [4096, 1, 1] }];
        let seconds = time(|n| launch_repeated(&gpu.device, &gpu.queue, &kernel, Some(timer), n))?;
        rates.push(moved as f64 / seconds);
    }
    Ok((rates[0], rates[1]))
}
