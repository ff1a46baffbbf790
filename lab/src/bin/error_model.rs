//! Measures every stage's error against the f64 oracle as a fraction of the error model's
//! bound with a safety factor of 1 (`reference::compare`): the numbers behind
//! `reference::compare::SAFETY_FACTOR`. A stage whose worst fraction stays well below the
//! safety factor can never be failed by its rounding.
//!
//! ```text
//! cargo run --release -p lab --bin error_model                  # 2000 CPU, 200 GPU problems
//! cargo run --release -p lab --bin error_model -- 20000 1000    # CPU and GPU counts
//! ```
//!
//! Problems are drawn like the property tests' (`testkit::strategies::cases`, shapes up to
//! the CPU and GPU limits, causal or not, logits up to x100, spikes), with random tile sizes
//! for the tiled stages, from a fixed seed: the run is repeatable.

use std::collections::BTreeMap;

use half::{bf16, f16};
use lesson03::TileSizes;
use lesson06::{Element, round_to, widen};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestRunner};
use reference::{AttentionError, AttentionOutput, Expected, Tolerance, oracle};
use testkit::checks::{oracle_forward_in_f32, random_d_o};
use testkit::strategies::{Case, ShapeLimits, cases, tile_size};

/// The worst `error / bound` seen per stage, and over how many problems.
#[derive(Default)]
struct Worst(BTreeMap<String, (f64, usize)>);

impl Worst {
    fn record(&mut self, stage: &str, ratio: f64) {
        let entry = self.0.entry(stage.to_string()).or_insert((0.0, 0));
        *entry = (entry.0.max(ratio), entry.1 + 1);
    }
}

/// `tolerance` with a safety factor of 1: the model's bound itself.
fn unit(tolerance: Tolerance) -> Tolerance {
    Tolerance { factor: 1.0, ..tolerance }
}

/// The largest `error / bound` over `O` and `L`; infinite for a non-finite mismatch.
fn forward_ratio(
    out: Result<AttentionOutput<f32>, AttentionError>,
    expected: &Expected,
    tolerance: Tolerance,
) -> f64 {
    let out = out.expect("every stage runs on these problems");
    match reference::check_output(&out, expected, unit(tolerance)) {
        Ok([o, lse]) => o.worst_ratio.max(lse.worst_ratio),
        Err(_) => {
            let allowed = unit(tolerance).allowed(expected);
            let o = reference::compare("O", &out.o, &expected.output.o, &allowed.o).unwrap();
            let l = reference::compare("L", &out.lse, &expected.output.lse, &allowed.lse).unwrap();
            if o.non_finite.is_some() || l.non_finite.is_some() {
                f64::INFINITY
            } else {
                o.worst_ratio.max(l.worst_ratio)
            }
        }
    }
}

/// The 16-bit kernels of lesson 06 on the case's inputs rounded to `T`, against the oracle on
/// the rounded inputs.
fn precision_stages<T: Element>(case: &Case, tiles: TileSizes, worst: &mut Worst) {
    let p = case.problem();
    let (q, k, v) = (round_to::<T>(&p.q), round_to::<T>(&p.k), round_to::<T>(&p.v));
    let expected = oracle::expected(&widen(&q), &widen(&k), &widen(&v), &p.options).unwrap();
    let (output, weights, storage) = match T::DTYPE {
        lesson06::Dtype::F16 => {
            (Tolerance::F16_OUTPUT, Tolerance::F16_WEIGHTS, Tolerance::F16_STORAGE)
        }
        lesson06::Dtype::BF16 => {
            (Tolerance::BF16_OUTPUT, Tolerance::BF16_WEIGHTS, Tolerance::BF16_STORAGE)
        }
        lesson06::Dtype::F32 => (Tolerance::F32, Tolerance::F32, Tolerance::F32),
    };
    let widened = |out: Result<lesson06::Output<T>, AttentionError>| {
        out.map(|out| AttentionOutput { o: widen(&out.o), lse: out.lse })
    };
    let name = T::DTYPE.name();
    let runs = [
        ("flash", lesson06::flash(&q, &k, &v, &p.options, tiles), output),
        (
            "flash, P rounded",
            lesson06::flash_rounding_weights(&q, &k, &v, &p.options, tiles),
            weights,
        ),
        ("naive, S and P stored", lesson06::naive(&q, &k, &v, &p.options), storage),
    ];
    for (kernel, out, tolerance) in runs {
        worst.record(
            &format!("lesson06 {name} {kernel}"),
            forward_ratio(widened(out), &expected, tolerance),
        );
    }
}

/// A contiguous cache holding every key and value of `p`, one sequence per batch entry.
fn cache_of(p: &reference::Problem) -> lesson11::KvCache {
    let (batch, heads, kv_len, head_dim) = p.k.dim();
    let mut cache = lesson11::KvCache::new(batch, heads, kv_len, head_dim).unwrap();
    for b in 0..batch {
        let (k, v) = (p.k.slice(ndarray::s![b, .., .., ..]), p.v.slice(ndarray::s![b, .., .., ..]));
        cache.append(b, k, v).unwrap();
    }
    cache
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a count"));
    let (cpu_cases, gpu_cases) = (args.next().unwrap_or(2000), args.next().unwrap_or(200));
    let config = Config { rng_seed: RngSeed::Fixed(20261122), ..Config::default() };
    let mut runner = TestRunner::new(config);
    let mut worst = Worst::default();

    for _ in 0..cpu_cases {
        let (case, (br, bc)) = (cases(ShapeLimits::CPU), (tile_size(300), tile_size(300)))
            .new_tree(&mut runner)
            .expect("a case")
            .current();
        let tiles = TileSizes::new(br, bc).unwrap();
        let p = case.problem();
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        let (q, k, v, o) = (&p.q, &p.k, &p.v, &p.options);
        let f32_runs = [
            ("lesson01 naive", lesson01::attention(q, k, v, o)),
            ("lesson02 online", lesson02::attention(q, k, v, o)),
            ("lesson03 tiled", lesson03::attention(q, k, v, o, tiles)),
            (
                "lesson04 flash1",
                lesson04::flash1::attention(q, k, v, o, tiles, usize::MAX).map(|r| r.output),
            ),
            (
                "lesson04 flash2",
                lesson04::flash2::attention(q, k, v, o, tiles, usize::MAX).map(|r| r.output),
            ),
            (
                "lesson04 naive",
                lesson04::naive::attention(q, k, v, o, tiles, usize::MAX).map(|r| r.output),
            ),
            ("lesson07 parallel", lesson07::attention(q, k, v, o, tiles)),
        ];
        for (stage, out) in f32_runs {
            worst.record(stage, forward_ratio(out, &expected, Tolerance::F32));
        }
        // Lesson 11's decode is the contract's attention when the queries are the last Nq of
        // the Nkv tokens in the cache (Nq <= Nkv): any number of splits.
        if case.spec.q_len <= case.spec.kv_len {
            let cache = cache_of(&p);
            let out = lesson11::decode(&cache, q, o, 1 + br % 24);
            worst.record("lesson11 CPU decode", forward_ratio(out, &expected, Tolerance::F32));
        }
        for (dtype, tolerance) in [
            (lesson06::Dtype::F16, Tolerance::F16_STORAGE),
            (lesson06::Dtype::BF16, Tolerance::BF16_STORAGE),
        ] {
            let out = lesson06::policy::attention_in_precision(q, k, v, o, dtype);
            let stage = format!("lesson06 {} end to end", dtype.name());
            worst.record(&stage, forward_ratio(out, &expected, tolerance));
        }
        precision_stages::<f16>(&case, tiles, &mut worst);
        precision_stages::<bf16>(&case, tiles, &mut worst);

        let d_o = random_d_o(&case);
        let forward = oracle_forward_in_f32(&p).unwrap();
        let grads = lesson05::backward(q, k, v, o, &forward, &d_o, tiles).unwrap();
        let expected = oracle::expected_gradients(q, k, v, o, &d_o).unwrap();
        let ratio = match reference::check_gradients(&grads, &expected, unit(Tolerance::F32)) {
            Ok(c) => c.iter().map(|c| c.worst_ratio).fold(0.0, f64::max),
            Err(e) => {
                eprintln!("lesson05 beyond the unit bound: {case:?} {tiles:?}\n{e}");
                let allowed = unit(Tolerance::F32).allowed_gradients(&expected);
                let g = &expected.gradients;
                [
                    (&grads.dq, &g.dq, &allowed.dq),
                    (&grads.dk, &g.dk, &allowed.dk),
                    (&grads.dv, &g.dv, &allowed.dv),
                ]
                .into_iter()
                .map(|(a, e, b)| reference::compare("", a, e, b).unwrap().worst_ratio)
                .fold(0.0, f64::max)
            }
        };
        worst.record("lesson05 backward", ratio);
    }

    match gpu::Gpu::shared() {
        Ok(gpu) => {
            println!("GPU: {}", gpu.describe());
            let raw = (1..=256usize, 1..=lesson09::MAX_BLOCK_KV);
            for _ in 0..gpu_cases {
                let (case, (br, bc)) = (cases(ShapeLimits::GPU), raw.clone())
                    .new_tree(&mut runner)
                    .expect("a case")
                    .current();
                let bc = bc.min(lesson09::largest_key_tile(&gpu.device, case.spec.head_dim));
                let tiles = TileSizes::new(br, bc).unwrap();
                let p = case.problem();
                let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
                let (d, queue) = (&gpu.device, &gpu.queue);
                let run8 = lesson08::attention_on(d, queue, &p.q, &p.k, &p.v, &p.options);
                let run9 = lesson09::attention_on(d, queue, &p.q, &p.k, &p.v, &p.options, tiles);
                worst.record("lesson08 GPU naive", forward_ratio(run8, &expected, Tolerance::F32));
                worst.record("lesson09 GPU flash", forward_ratio(run9, &expected, Tolerance::F32));
                // Lesson 11's GPU decode: the last query row against the f16-rounded cache.
                let last = p.q.dim().2 - 1..p.q.dim().2;
                let q_last = p.q.slice(ndarray::s![.., .., last.clone(), ..]).to_owned();
                let cache = lesson11::gpu_decode::GpuCache::upload(d, &cache_of(&p)).unwrap();
                let splits = Some(1 + br % 24);
                let run11 =
                    lesson11::gpu_decode::decode_on(d, queue, &cache, &q_last, &p.options, splits);
                let round = |x: &ndarray::Array4<f32>| x.mapv(|v| f16::from_f32(v).to_f32());
                let expected =
                    oracle::expected_rows(&p.q, &round(&p.k), &round(&p.v), &p.options, last)
                        .unwrap();
                worst
                    .record("lesson11 GPU decode", forward_ratio(run11, &expected, Tolerance::F32));
            }
        }
        Err(e) => println!("GPU stages skipped: {e}"),
    }

    println!("worst error as a fraction of the error model's bound (safety factor 1):");
    println!("{:<36} {:>9} {:>12}", "stage", "problems", "worst");
    for (stage, (ratio, count)) in &worst.0 {
        println!("{stage:<36} {count:>9} {ratio:>12.4}");
    }
    let all = worst.0.values().map(|(r, _)| *r).fold(0.0, f64::max);
    println!(
        "\nworst of all: {all:.4}; the tests allow {} (reference::compare::SAFETY_FACTOR)",
        reference::compare::SAFETY_FACTOR
    );
}
