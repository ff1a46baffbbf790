//! How the tensor-core versions were tuned, and where their time goes.
//!
//! 1. Every tile shape of versions 4 to 11 (`lesson10::every_variant`, with version 8's and
//!    9's other times to load K and V, `lesson10::tuning::load_choices`), each validated
//!    against the f64 oracle, then timed at large N with and without the causal mask,
//!    versions 3 and 1 beside them as the baselines. The fastest per head dimension is what
//!    each version's `Version::preferred` tries first.
//! 2. Version 6, or with `--ablate v10` version 10, with parts of its work left out
//!    (`LeaveOut`): the time each part costs is the difference from the whole. Those outputs
//!    are wrong and not validated; they are measurements, never kernels.
//!
//! The tensor-core versions (all but 1 and 7, the f32 ones, which run on any adapter) need an
//! adapter with cooperative matrices, such as an NVIDIA GPU with tensor cores (elsewhere each
//! says what the adapter lacks); `--peer` needs PyTorch with CUDA.
//!
//! ```text
//! cargo run --release -p lab --bin tune                        # D = 64 and 128
//! cargo run --release -p lab --bin tune -- --head-dims 64 --seqs 4096
//! cargo run --release -p lab --bin tune -- --only v3,v6      # names starting so
//! cargo run --release -p lab --bin tune -- --only v1,v7      # the f32 versions
//! cargo run --release -p lab --bin tune -- --ablate 4x1x64   # parts left out of these
//! cargo run --release -p lab --bin tune -- --ablate none     # no parts left out
//! cargo run --release -p lab --bin tune -- --ablate v10 --only "v10 4 pairs"
//!                         # version 10's 4-pair shapes, and its chosen tiles with parts left out
//! cargo run --release -p lab --bin tune -- --only v8 --causal no  # no causal column
//! cargo run --release -p lab --bin tune -- --only v8 --keep-going  # time wrong ones too
//! cargo run --release -p lab --bin tune -- --only "v8 8x1x16 rows, 16 keys;v10"  # ; splits
//! cargo run --release -p lab --bin tune -- --batch 16   # B = 16 (default 4), H = 16
//! cargo run --release -p lab --bin tune -- --only v10 --peer
//!                                # PyTorch's SDPA backends timed after the kernels, same sizes
//! cargo run --release -p lab --bin tune -- --seqs 4096 --kv-lens 4096,16384 --causal no
//!                                                          # Nq = 4096 against Nkv = 4096, 16384
//! cargo run --release -p lab --bin tune -- --query-groups 0,256,512 --only "v8;v10" --causal yes
//!               # versions 8 to 10 with the tiles they choose, the query tiles longest first in
//!               # groups of each number of workgroups (0: as launched), and nothing else
//! ```

use std::sync::Arc;

use bench::report::{Cell, Table, in_workspace};
use bench::{Peer, PeerProblem, Repeats};
use gpu::attention::{AttentionBuffers, AttentionKernel, Prepared, attention_on};
use gpu::{Gpu, GpuTimer};
use lesson10::tuning::load_choices;
use lesson10::{
    ArenaTiles, Compiled, Kernel, LeaveOut, PairTiles, PipelinedTiles, QueryOrder, V1, V3, V6, V8,
    V9, V10, Variant, Version,
};
use reference::Storage;
use reference::{About, AttentionError, ForwardVersion, Problem, ProblemSpec, Tolerance};

type Build =
    Arc<dyn Fn(&wgpu::Device, usize) -> Result<Box<dyn Compiled>, AttentionError> + Send + Sync>;

/// A kernel to time: its name, how to build it, whether its output must be right, and the
/// card of the version it is a shape of (which sets the format and the tolerance).
struct Candidate {
    name: String,
    build: Build,
    validated: bool,
    about: About,
}

impl Candidate {
    /// Version `V` with the tiles it prefers on the device, as registered.
    fn registered<V: Version>() -> Self {
        let build: Build = Arc::new(|device, d| Ok(Box::new(Kernel::<V>::new(device, d)?)));
        Candidate { name: V::about().name.into(), build, validated: true, about: V::about() }
    }

    /// `variant`, named `name`; its output is checked unless parts of its work are left out.
    fn of(variant: Variant, name: String) -> Self {
        let (about, validated) = (variant.about, !variant.leaves_out_work());
        let build: Build = Arc::new(move |device, d| variant.build(device, d));
        Candidate { name, build, validated, about }
    }
}

/// Which kernel the parts are left out of (`--ablate`).
#[derive(Clone, Copy)]
enum Ablate {
    /// The tiles version 6 chooses on the device (no `--ablate`).
    Chosen,
    /// These tiles of version 6 where they fit, else the chosen ones (`--ablate 4x2x32`).
    Tiles(PipelinedTiles),
    /// The tiles version 10 chooses on the device (`--ablate v10`).
    Pairs,
    /// None at all (`--ablate none`).
    Nothing,
}

/// Versions 3 and 1, every tile shape of versions 4 to 11 that runs on `device` (with
/// version 8's and 9's other times to load K and V), and version 6 or 10 with parts left out
/// (see [`Ablate`]).
fn candidates(device: &wgpu::Device, head_dim: usize, ablate: Ablate) -> Vec<Candidate> {
    let mut all = vec![Candidate::registered::<V3>(), Candidate::registered::<V1>()];
    let shapes = lesson10::every_variant(head_dim).into_iter().filter(|v| v.number >= 4);
    for variant in shapes.chain(load_choices(head_dim)) {
        if variant.runs_on(device, head_dim) {
            all.push(Candidate::of(variant.clone(), variant.describe()));
        }
    }
    let best = match ablate {
        Ablate::Nothing => return all,
        Ablate::Pairs => {
            all.extend(pairs_left_out(device, head_dim));
            return all;
        }
        Ablate::Tiles(tiles) if Variant::of::<V6>(tiles).runs_on(device, head_dim) => tiles,
        Ablate::Tiles(_) | Ablate::Chosen => match Kernel::<V6>::choose(device, head_dim) {
            Ok(tiles) => tiles,
            Err(_) => return all,
        },
    };
    let parts = [
        ("softmax", LeaveOut::SOFTMAX),
        ("QK^T", LeaveOut::SCORES),
        ("PV", LeaveOut::VALUES),
        ("S store", LeaveOut::STORE_S),
        ("K/V staging", LeaveOut::STAGING),
        ("K/V loads", LeaveOut::LOADS),
        ("K/V stores", LeaveOut::STASH),
        ("softmax, S store", LeaveOut::SOFTMAX.and(LeaveOut::STORE_S)),
        ("QK^T, PV", LeaveOut::SCORES.and(LeaveOut::VALUES)),
        ("all but the products", LeaveOut::SOFTMAX.and(LeaveOut::STORE_S).and(LeaveOut::STAGING)),
    ];
    all.extend(left_out(Variant::of::<V6>(best), &parts));
    all
}

/// Versions 8, 9 and 10 with the tiles each chooses on `device`, their query tiles taken in
/// each order of `groups`: longest first in groups of that many workgroups, 0 as launched
/// ([`QueryOrder`]).
fn query_groups(device: &wgpu::Device, head_dim: usize, groups: &[usize]) -> Vec<Candidate> {
    let order = |w: usize| match w {
        0 => QueryOrder::AsLaunched,
        workgroups => QueryOrder::LongestFirst { workgroups },
    };
    let mut all = Vec::new();
    for &w in groups {
        let query_order = order(w);
        if let Ok(t) = Kernel::<V8>::choose(device, head_dim) {
            let t = ArenaTiles { query_order, ..t };
            all.extend([Variant::of::<V8>(t), Variant::of::<V9>(t)]);
        }
        if let Ok(t) = Kernel::<V10>::choose(device, head_dim) {
            all.push(Variant::of::<V10>(PairTiles { query_order, ..t }));
        }
    }
    all.into_iter().map(|variant| Candidate::of(variant.clone(), variant.describe())).collect()
}

/// `variant` with each of `parts` left out, named `... without PART`.
fn left_out(variant: Variant, parts: &[(&str, LeaveOut)]) -> Vec<Candidate> {
    let name = variant.describe();
    let with = |&(what, leave_out): &(&str, LeaveOut)| {
        Candidate::of(variant.clone().leaving_out(leave_out), format!("{name} without {what}"))
    };
    parts.iter().map(with).collect()
}

/// Version 10's chosen tiles with each part [`LeaveOut::IN_VERSION_10`] offers left out, two
/// pairs of them, and the softmax, the store of S and the loads together (what is left: the
/// products, the barriers, the fragments read from workgroup memory and the staging stores);
/// none if version 10 does not fit `device`.
fn pairs_left_out(device: &wgpu::Device, head_dim: usize) -> Vec<Candidate> {
    let Ok(tiles) = Kernel::<V10>::choose(device, head_dim) else {
        return Vec::new();
    };
    let parts = [
        ("softmax", LeaveOut::SOFTMAX),
        ("QK^T", LeaveOut::SCORES),
        ("PV", LeaveOut::VALUES),
        ("S store", LeaveOut::STORE_S),
        ("K/V loads", LeaveOut::LOADS),
        ("softmax, S store", LeaveOut::SOFTMAX.and(LeaveOut::STORE_S)),
        ("QK^T, PV", LeaveOut::SCORES.and(LeaveOut::VALUES)),
        ("all but the products", LeaveOut::SOFTMAX.and(LeaveOut::STORE_S).and(LeaveOut::LOADS)),
    ];
    left_out(Variant::of::<V10>(tiles), &parts)
}

/// Median GPU seconds of `kernel` on the uploaded problem `io`; with `tolerance`, its output's
/// first and last rows checked against the oracle first.
fn time(
    gpu: &Gpu,
    timer: &GpuTimer,
    kernel: &dyn AttentionKernel,
    (problem, io): (&Problem, &AttentionBuffers),
    tolerance: Option<Tolerance>,
    repeats: Repeats,
) -> Result<f64, String> {
    let (device, queue) = (&gpu.device, &gpu.queue);
    let prepared = Prepared::reusing(device, kernel, io).map_err(|e| e.to_string())?;
    io.poison_output(queue);
    prepared.run(device, queue, None).map_err(|e| e.to_string())?;
    if let Some(tolerance) = tolerance {
        let out = prepared.read_output(device, queue).map_err(|e| e.to_string())?;
        bench::validate_rows(&out, problem, tolerance)?;
    }
    let timings =
        bench::timing::time_gpu(gpu, timer, &[prepared], repeats).map_err(|e| e.to_string())?;
    Ok(timings.median())
}

/// FLOPs of one column's problem, `(Nq, Nkv, causal)`: `4 B H Nq Nkv D`, half with the mask
/// (the count every table of the course uses).
fn column_flops(
    (batch, heads, head_dim): (usize, usize, usize),
    column: (usize, usize, bool),
) -> f64 {
    let (n, kv, causal) = column;
    4.0 * (batch * heads * n * kv * head_dim) as f64 / (1.0 + causal as u8 as f64)
}

/// PyTorch's SDPA backends (lesson 9's peer script) on the problems of `columns` (Nq = Nkv),
/// timed now, after the kernels: each backend's TFLOP/s per column. Empty if the peer cannot
/// run (no torch, no CUDA), which is printed.
fn peer_tflops(
    columns: &[(usize, usize, bool)],
    sizes: (usize, usize, usize),
) -> Vec<(String, Vec<Option<f64>>)> {
    let (batch, heads, head_dim) = sizes;
    let problems: Vec<PeerProblem> = columns
        .iter()
        .map(|&(seq, _, causal)| PeerProblem { batch, heads, seq, head_dim, causal })
        .collect();
    let report = in_workspace("lab/peer/sdpa_gpu.py")
        .and_then(|script| Peer::new(script).run(&problems).map_err(|e| e.to_string()));
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            println!("PyTorch peer not run: {e}");
            return Vec::new();
        }
    };
    println!("PyTorch peer: {}", report.version);
    let tflops = |backend: &str| {
        let per_column = problems.iter().zip(columns).map(|(p, &column)| {
            report.seconds(p, backend).map(|s| column_flops(sizes, column) / s / 1e12)
        });
        per_column.collect()
    };
    report.backends().into_iter().map(|b| (b.to_string(), tflops(b))).collect()
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = |flag: &str, default: Vec<usize>| bench::report::list_arg(&args, flag, default);
    let head_dims = list("--head-dims", vec![64, 128])?;
    let only = bench::report::names_arg(&args, "--only")?;
    let seqs = list("--seqs", vec![4096, 16384])?;
    // Nkv for every Nq in --seqs; without it, Nkv = Nq.
    let kv_lens = list("--kv-lens", Vec::new())?;
    let keep_going = args.iter().any(|a| a == "--keep-going");
    let with_peer = args.iter().any(|a| a == "--peer");
    if with_peer && !kv_lens.is_empty() {
        return Err("--peer with --kv-lens: the PyTorch peer times Nq = Nkv only".into());
    }
    let batch = match list("--batch", vec![4])?[..] {
        [b] if b > 0 => b,
        ref given => {
            return Err(format!("--batch {given:?}: expected one batch size of 1 or more"));
        }
    };
    let heads = 16;
    let masks: Vec<bool> = match args.iter().position(|a| a == "--causal") {
        None => vec![false, true],
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some("no") => vec![false],
            Some("yes") => vec![true],
            Some("both") => vec![false, true],
            other => return Err(format!("--causal {other:?}: expected no, yes or both")),
        },
    };
    let columns = bench::report::problem_columns(&seqs, &kv_lens, &masks)?;
    let groups = list("--query-groups", Vec::new())?;
    let ablate = match args.iter().position(|a| a == "--ablate") {
        Some(i) if args.get(i + 1).map(String::as_str) == Some("none") => Ablate::Nothing,
        Some(i) if args.get(i + 1).map(String::as_str) == Some("v10") => Ablate::Pairs,
        Some(i) => {
            let shape =
                args.get(i + 1).ok_or("--ablate needs none, v10 or tiles such as 4x2x32")?;
            let numbers: Vec<usize> = shape.split('x').filter_map(|x| x.parse().ok()).collect();
            let [subgroups, row_tiles, block_kv] = numbers[..] else {
                return Err(format!(
                    "--ablate {shape}: expected none, v10 or version 6's tiles as \
                     SUBGROUPSxROW_TILESxKEYS, e.g. 4x2x32"
                ));
            };
            Ablate::Tiles(PipelinedTiles { subgroups, row_tiles, block_kv, transpose_v: false })
        }
        None => Ablate::Chosen,
    };
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    println!("Device: {}; {}", gpu.describe(), bench::Machine::this().date);

    for head_dim in head_dims {
        // 1. Every candidate that must be right is checked on small problems first.
        let specs = [
            ProblemSpec::new(1, 2, 333, 333, head_dim),
            ProblemSpec::new(1, 2, 200, 333, head_dim).causal(true),
        ];
        let mut built: Vec<(String, Box<dyn Compiled>, Option<Tolerance>)> = Vec::new();
        let mut chosen = if groups.is_empty() {
            candidates(&gpu.device, head_dim, ablate)
        } else {
            query_groups(&gpu.device, head_dim, &groups)
        };
        chosen.retain(|c| lesson10::selected_by_any(&c.name, &only));
        for candidate in chosen {
            let Candidate { name, build, validated, about } = candidate;
            let checked = if validated {
                let name: &'static str = Box::leak(name.clone().into_boxed_str());
                let build = Arc::clone(&build);
                let forward = ForwardVersion {
                    about: About { name, ..about },
                    forward: Box::new(move |q, k, v, o| {
                        let kernel = build(&gpu.device, q.dim().3)?;
                        attention_on(&gpu.device, &gpu.queue, kernel.as_ref(), q, k, v, o)
                    }),
                };
                bench::validate(&forward, &specs)
            } else {
                Ok(())
            };
            // With --keep-going a kernel whose output is wrong is timed too (marked so), for
            // exploration: its time says what the shape would cost if it were fixed.
            let (name, checked) = match checked {
                Err(e) if keep_going => {
                    println!("{name}: {e}");
                    (format!("{name} (WRONG)"), Ok(()))
                }
                other => (name, other),
            };
            let tolerance = (validated && !name.ends_with("(WRONG)")).then_some(about.tolerance);
            match checked.and_then(|()| build(&gpu.device, head_dim).map_err(|e| e.to_string())) {
                Ok(kernel) => built.push((name, kernel, tolerance)),
                Err(e) => println!("{name}: {e}"),
            }
        }
        // 2. One problem per size for every kernel: making it takes longer than timing them.
        let mut tflops = vec![Vec::new(); built.len()];
        for &(n, kv, causal) in &columns {
            let spec = ProblemSpec::new(batch, heads, n, kv, head_dim).causal(causal);
            let problem = Problem::random(&spec, 1);
            // The inputs as each kernel reads them (f16 or f32, rows padded to 16 or 4), uploaded
            // once per format.
            let mut uploads: Vec<((Storage, usize), AttentionBuffers)> = Vec::new();
            let flops = column_flops((batch, heads, head_dim), (n, kv, causal));
            for ((name, kernel, tolerance), row) in built.iter().zip(&mut tflops) {
                let format = (kernel.storage(), kernel.row_alignment());
                if !uploads.iter().any(|(f, _)| *f == format) {
                    let p = &problem;
                    let io = AttentionBuffers::upload(
                        &gpu.device,
                        kernel.as_ref(),
                        &p.q,
                        &p.k,
                        &p.v,
                        &p.options,
                    )
                    .map_err(|e| e.to_string())?;
                    uploads.push((format, io));
                }
                let io = &uploads.iter().find(|(f, _)| *f == format).expect("uploaded").1;
                let repeats = Repeats::new(3, 10);
                let kernel: &dyn AttentionKernel = kernel.as_ref();
                let result = time(gpu, &timer, kernel, (&problem, io), *tolerance, repeats);
                if let Err(e) = &result {
                    println!("{name}, N={n}, Nkv={kv}, causal={causal}: {e}");
                }
                row.push(result.ok().map(|s| flops / s / 1e12));
            }
        }
        let mut header = vec![if batch == 4 {
            format!("D={head_dim}, TFLOP/s")
        } else {
            format!("D={head_dim}, B={batch}, TFLOP/s")
        }];
        header.extend(columns.iter().map(|&(n, kv, c)| {
            let kv = if kv_lens.is_empty() { String::new() } else { format!(" Nkv={kv}") };
            format!("N={n}{kv}{}", if c { " causal" } else { "" })
        }));
        let mut table = Table::new(&header);
        for ((name, ..), row) in built.iter().zip(&tflops) {
            let mut cells = vec![Cell::Text(name.clone())];
            cells.extend(row.iter().map(|t| Cell::or_missing(*t, 1, "failed")));
            table.push(cells);
        }
        if with_peer {
            for (backend, row) in peer_tflops(&columns, (batch, heads, head_dim)) {
                let mut cells = vec![Cell::Text(format!("PyTorch {backend}"))];
                cells.extend(row.iter().map(|t| Cell::or_missing(*t, 1, "failed")));
                table.push(cells);
            }
        }
        println!("\n{}", table.to_text());
    }
    Ok(())
}
