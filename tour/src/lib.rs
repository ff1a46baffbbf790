//! # The tour: every version of the course, side by side
//!
//! The tour binary (`cargo run --release` at the workspace root) runs every version the
//! course's `registry` lists, by operation, on one problem: the forward passes (on the CPU,
//! and on the GPU when the machine has an adapter, lavapipe included), one decoding step, the
//! backward passes, and GPT-2 with the course's attention. It checks each against the f64
//! oracle and prints error, time and working memory. The course-wide tests run the same lists
//! on random problems.

use std::time::{Duration, Instant};

use ndarray::{Array3, Array4, s};
use reference::memory::{NotInstalled, peak_bytes_during};
use reference::{
    AttentionError, AttentionOutput, BackwardVersion, Comparison, DecodeVersion, Expected,
    ExpectedGradients, ForwardVersion, Problem, Tolerance, check_gradients, check_output,
};

/// What the tour measured for one version.
pub struct Measurement {
    /// The version's name.
    pub name: &'static str,
    /// The version's package.
    pub package: &'static str,
    /// `O` and `L` compared with the oracle, or why they failed (or could not be compared).
    pub comparisons: Result<[Comparison; 2], String>,
    /// Wall time of the call.
    pub time: Duration,
    /// Peak heap bytes allocated during the call, minus the output `O` and `L` it returned:
    /// the memory the algorithm needs on top of its inputs and outputs.
    pub working_bytes: usize,
}

impl Measurement {
    /// Whether the stage agreed with the oracle.
    pub fn passed(&self) -> bool {
        self.comparisons.is_ok()
    }
}

/// Runs one stage on `problem`, timing it, measuring its peak memory (the counting allocator
/// must be the binary's global allocator) and comparing its output with the oracle's.
pub fn measure(
    stage: &ForwardVersion,
    problem: &Problem,
    expected: &Expected,
) -> Result<Measurement, NotInstalled> {
    let (name, package) = (stage.about.name, stage.about.lesson);
    measure_call((name, package), stage.about.tolerance, expected, || {
        (stage.forward)(&problem.q, &problem.k, &problem.v, &problem.options)
    })
}

/// Runs `run` (named `name` of `package`), timing it, measuring its peak memory beyond the
/// output it returns, and comparing that output with `expected` under `tolerance`.
fn measure_call(
    (name, package): (&'static str, &'static str),
    tolerance: Tolerance,
    expected: &Expected,
    run: impl FnOnce() -> Result<AttentionOutput<f32>, AttentionError>,
) -> Result<Measurement, NotInstalled> {
    let start = Instant::now();
    let (output, peak_bytes) = peak_bytes_during(run)?;
    let time = start.elapsed();
    let working_bytes = peak_bytes.saturating_sub(output.as_ref().map_or(0, |out| out.bytes()));
    let comparisons = output
        .map_err(|e| format!("returned an error: {e}"))
        .and_then(|out| check_output(&out, expected, tolerance));
    Ok(Measurement { name, package, comparisons, time, working_bytes })
}

/// What the tour measured for the backward pass.
pub struct BackwardMeasurement {
    /// The version's name.
    pub name: &'static str,
    /// The version's package.
    pub package: &'static str,
    /// `dQ`, `dK`, `dV` compared with the oracle's gradients, or why they failed.
    pub comparisons: Result<[Comparison; 3], String>,
    /// Wall time of the call.
    pub time: Duration,
    /// Peak heap bytes during the call beyond the gradients it returned.
    pub working_bytes: usize,
}

/// Runs a backward version on `problem` with `dO = d_o`, from the forward output of lesson 03,
/// and compares the gradients with the oracle's `expected`.
pub fn measure_backward(
    version: &BackwardVersion,
    problem: &Problem,
    d_o: &Array4<f32>,
    expected: &ExpectedGradients,
) -> Result<BackwardMeasurement, NotInstalled> {
    let (q, k, v, options) = (&problem.q, &problem.k, &problem.v, &problem.options);
    let tiles = lesson03::TileSizes::default();
    let forward = lesson03::attention(q, k, v, options, tiles);
    let start = Instant::now();
    let (grads, peak) = peak_bytes_during(|| {
        let forward = forward.as_ref().map_err(|e| e.to_string())?;
        (version.backward)(q, k, v, options, forward, d_o).map_err(|e| e.to_string())
    })?;
    let time = start.elapsed();
    let gradient_bytes =
        grads.as_ref().map_or(0, |g| (g.dq.len() + g.dk.len() + g.dv.len()) * size_of::<f32>());
    let comparisons = grads.and_then(|g| check_gradients(&g, expected, version.about.tolerance));
    Ok(BackwardMeasurement {
        name: version.about.name,
        package: version.about.lesson,
        comparisons,
        time,
        working_bytes: peak.saturating_sub(gradient_bytes),
    })
}

/// The tour's table of backward passes: one row per measurement.
pub fn backward_table(measurements: &[BackwardMeasurement]) -> String {
    let mut out = format!(
        "{:<10} {:<27} {:>10} {:>10} {:>10} {:>9} {:>10} {:>12}  {}\n",
        "package",
        "backward",
        "rel err dQ",
        "rel err dK",
        "rel err dV",
        "of bound",
        "time",
        "working mem",
        "check"
    );
    for m in measurements {
        out += &backward_row(m);
    }
    out
}

/// One row of [`backward_table`].
fn backward_row(m: &BackwardMeasurement) -> String {
    let (errors, verdict) = match &m.comparisons {
        Ok(c) => (
            format!(
                "{:>10.2e} {:>10.2e} {:>10.2e} {:>9.3}",
                c[0].rel_frobenius_error,
                c[1].rel_frobenius_error,
                c[2].rel_frobenius_error,
                c.iter().map(|c| c.worst_ratio).fold(0.0, f64::max)
            ),
            "ok".to_string(),
        ),
        Err(why) => (format!("{:>42}", "-"), format!("FAILED: {}", why.replace('\n', "; "))),
    };
    format!(
        "{:<10} {:<27} {errors} {:>10} {:>12}  {verdict}\n",
        m.package,
        m.name,
        format_duration(m.time),
        format_bytes(m.working_bytes)
    )
}

/// The tour's table: one row per measurement. "of bound" is the worst element's error as a
/// fraction of what the error model allows it (below 1 passes).
pub fn table(measurements: &[Measurement]) -> String {
    let mut out = table_header();
    for m in measurements {
        out += &row_start(m.package, m.name);
        out += &row_end(m);
    }
    out
}

/// The header line of [`table`].
pub fn table_header() -> String {
    format!(
        "{:<10} {:<27} {:>10} {:>10} {:>9} {:>10} {:>12}  {}\n",
        "package", "stage", "rel err O", "rel err L", "of bound", "time", "working mem", "check"
    )
}

/// The start of a row of [`table`]: the stage's package and name, printed before it runs so
/// that a slow stage shows which one it is.
pub fn row_start(package: &str, name: &str) -> String {
    format!("{package:<10} {name:<27} ")
}

/// The rest of a row of [`table`], after [`row_start`]: what the stage measured.
pub fn row_end(m: &Measurement) -> String {
    let (errors, verdict) = match &m.comparisons {
        Ok([o, lse]) => (
            format!(
                "{:>10.2e} {:>10.2e} {:>9.3}",
                o.rel_frobenius_error,
                lse.rel_frobenius_error,
                o.worst_ratio.max(lse.worst_ratio)
            ),
            "ok".to_string(),
        ),
        Err(why) => (format!("{:>31}", "-"), format!("FAILED: {}", why.replace('\n', "; "))),
    };
    format!(
        "{} {:>10} {:>12}  {}\n",
        errors,
        format_duration(m.time),
        format_bytes(m.working_bytes),
        verdict
    )
}

/// The versions that cannot run on this machine, in one line per reason: `versions (why)`.
/// A reason that names its version (`..., which v2 tensor cores needs`) is said once for all
/// the versions it holds for.
pub fn cannot_run(cannot: &[(reference::About, AttentionError)]) -> Vec<String> {
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for (about, why) in cannot {
        let why =
            why.to_string().replace(&format!("which {} needs", about.name), "which they need");
        match reasons.iter_mut().find(|(reason, _)| *reason == why) {
            Some((_, names)) => names.push(about.name),
            None => reasons.push((why, vec![about.name])),
        }
    }
    reasons.into_iter().map(|(why, names)| format!("{} ({why})", names.join(", "))).collect()
}

/// The longest sequence the GPU rows take on a software adapter unless `--gpu-seq` says
/// otherwise: lavapipe runs lesson 8's kernels at N = 2048 for half a minute each.
pub const SOFTWARE_ADAPTER_SEQ: usize = 512;

/// The problem of the GPU rows: `spec`, with its sequences cut to `gpu_seq` if given, or to
/// [`SOFTWARE_ADAPTER_SEQ`] on a software adapter.
pub fn gpu_problem(
    spec: &reference::ProblemSpec,
    gpu_seq: Option<usize>,
    software: bool,
) -> reference::ProblemSpec {
    let longest = gpu_seq.or(software.then_some(SOFTWARE_ADAPTER_SEQ));
    let mut cut = *spec;
    if let Some(longest) = longest {
        cut.q_len = cut.q_len.min(longest);
        cut.kv_len = cut.kv_len.min(longest);
    }
    cut
}

/// `1.23 s`, `45.6 ms`, `789 µs`.
pub fn format_duration(t: Duration) -> String {
    let s = t.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// `1.5 GiB`, `12.0 MiB`, `3.2 KiB`, `17 B`.
pub fn format_bytes(bytes: usize) -> String {
    let b = bytes as f64;
    match bytes {
        n if n >= 1 << 30 => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", b / 1024.0),
        n => format!("{n} B"),
    }
}

/// One decoding step on the tour's problem with each of `decoders`: its last query row, one
/// new token per sequence, against a cache that holds every key and value of the problem,
/// compared with the oracle's answer for that row. The cache is filled before the timing
/// starts (on the GPU, uploaded), so each row times the decoding call alone.
pub fn decode_measurements(
    problem: &Problem,
    decoders: &[DecodeVersion],
) -> Result<Vec<Measurement>, String> {
    let q_len = problem.q.dim().2;
    let rows = q_len - 1..q_len;
    let (q, options) = (problem.q.slice(s![.., .., rows.clone(), ..]).to_owned(), &problem.options);
    let expected =
        reference::oracle::expected_rows(&problem.q, &problem.k, &problem.v, options, rows)
            .map_err(|e| e.to_string())?;
    let (keys, values) = (per_sequence(&problem.k), per_sequence(&problem.v));
    let mut out = Vec::new();
    for version in decoders {
        let (name, package) = (version.about.name, version.about.lesson);
        let measured = match version.decoder.fill(&keys, &values) {
            Ok(cache) => measure_call((name, package), version.about.tolerance, &expected, || {
                cache.decode(&q, options)
            }),
            // A cache the version cannot hold is reported in the table as its error.
            Err(e) => measure_call((name, package), version.about.tolerance, &expected, || Err(e)),
        };
        out.push(measured.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// `x [B, H, N, D]` as one `[H, N, D]` per sequence, as a KV cache is filled.
fn per_sequence(x: &Array4<f32>) -> Vec<Array3<f32>> {
    x.outer_iter().map(|sequence| sequence.to_owned()).collect()
}

/// One row of the tour's model table: GPT-2 read from the tiny checkpoint's files, its
/// attention through one backend, against what PyTorch computed for the same weights.
pub struct ModelRow {
    /// `CPU model, <version>` or `GPU model, <kernel>`.
    pub name: String,
    /// The logits' largest difference from PyTorch's float64 ones, relative to the largest
    /// logit.
    pub error: f64,
    /// What the error model allows ([`lesson12::pytorch::tolerance`]).
    pub allowed: f64,
    /// Greedy tokens after the prompt equal to PyTorch's, before the first difference, of
    /// how many.
    pub greedy: (usize, usize),
    /// Whether the greedy tokens must all agree: with f32 attention inputs (PyTorch's choices
    /// win by 0.037 or more, beyond f32's error but not 16-bit rounding's).
    pub greedy_checked: bool,
    /// One forward pass over the 37 tokens.
    pub time: Duration,
}

impl ModelRow {
    /// Within the error model, and the checked greedy tokens all PyTorch's.
    pub fn passed(&self) -> bool {
        self.error <= self.allowed && (!self.greedy_checked || self.greedy.0 == self.greedy.1)
    }
}

/// The model with lesson 01's naive attention and lesson 07's parallel one, and on `gpu` the
/// course's last kernel that runs there (its best version the adapter has).
pub fn model_rows(gpu: Option<&'static gpu::Gpu>) -> Result<Vec<ModelRow>, String> {
    use lesson12::gpu::GpuGpt2;
    use lesson12::pytorch::{Answers, relative_error, tolerance};
    use lesson12::{Attention, Gpt2, ModelError};
    let text = |e: ModelError| e.to_string();
    let model = Gpt2::from_folder(&lesson12::tiny_checkpoint()).map_err(text)?;
    let answers = Answers::load().map_err(text)?;
    let (tokens, logits) =
        (answers.ids("input_ids").map_err(text)?, answers.matrix("logits").map_err(text)?);
    let (prompt, generated) =
        (answers.ids("prompt_ids").map_err(text)?, answers.ids("generated").map_err(text)?);
    let row = |name: String,
               storage,
               forward: &dyn Fn() -> Result<ndarray::Array2<f32>, ModelError>,
               greedy: &dyn Fn() -> Result<Vec<u32>, ModelError>| {
        let start = Instant::now();
        let ours = forward().map_err(text)?;
        let time = start.elapsed();
        let tokens = greedy().map_err(text)?;
        let same = tokens.iter().zip(&generated).take_while(|(a, b)| a == b).count();
        Ok::<_, String>(ModelRow {
            name,
            error: relative_error(ours.view(), logits.view()),
            allowed: tolerance(storage),
            greedy: (same, generated.len()),
            greedy_checked: storage == reference::Storage::F32,
            time,
        })
    };
    let mut rows = Vec::new();
    for lesson in ["lesson01", "lesson07"] {
        let attention = Attention::new(registry::first_cpu_forward(lesson)?);
        rows.push(row(
            format!("CPU model, {}", attention.name()),
            attention.storage(),
            &|| model.logits(&tokens, &attention),
            &|| lesson12::generate(&model, &attention, &prompt, generated.len(), true),
        )?);
    }
    if let Some(gpu) = gpu {
        let kernels = registry::gpu_kernels();
        let best = kernels.iter().rev().find_map(|k| GpuGpt2::new(&model, k, gpu).ok());
        if let Some(on_gpu) = best {
            rows.push(row(
                format!("GPU model, {}", on_gpu.name()),
                on_gpu.storage(),
                &|| on_gpu.logits(&tokens),
                &|| on_gpu.generate(&prompt, generated.len(), true),
            )?);
        }
    }
    Ok(rows)
}

/// The model rows as a table.
pub fn model_table(rows: &[ModelRow]) -> String {
    let mut out = format!(
        "{:<40} {:>12} {:>9} {:>14} {:>10}  {}\n",
        "backend", "logits error", "of bound", "greedy tokens", "time", "check"
    );
    for r in rows {
        let verdict = if r.passed() { "ok" } else { "FAILED" };
        let greedy =
            format!("{}/{}{}", r.greedy.0, r.greedy.1, if r.greedy_checked { "" } else { "*" });
        out += &format!(
            "{:<40} {:>12.2e} {:>9.3} {:>14} {:>10}  {verdict}\n",
            r.name,
            r.error,
            r.error / r.allowed,
            greedy,
            format_duration(r.time)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_human_units() {
        assert_eq!(format_bytes(17), "17 B");
        assert_eq!(format_bytes(3 << 10), "3.0 KiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_duration(Duration::from_micros(789)), "789 µs");
        assert_eq!(format_duration(Duration::from_millis(45)), "45.0 ms");
        assert_eq!(format_duration(Duration::from_millis(1234)), "1.23 s");
    }

    #[test]
    fn a_software_adapter_takes_a_shorter_problem() {
        let spec = reference::ProblemSpec::new(1, 8, 2048, 1024, 64);
        assert_eq!(gpu_problem(&spec, None, false), spec);
        let cut = gpu_problem(&spec, None, true);
        assert_eq!((cut.q_len, cut.kv_len), (SOFTWARE_ADAPTER_SEQ, SOFTWARE_ADAPTER_SEQ));
        assert_eq!((cut.batch, cut.heads, cut.head_dim), (1, 8, 64));
        let asked = gpu_problem(&spec, Some(1536), true);
        assert_eq!((asked.q_len, asked.kv_len), (1536, 1024));
        assert_eq!(gpu_problem(&spec, Some(4096), false), spec);
    }

    #[test]
    fn versions_that_cannot_run_for_one_reason_share_a_line() {
        let about = |name| reference::About { name, ..registry::forwards()[0].about };
        let missing = |name: &str| AttentionError::InvalidFeature {
            feature: "tensor cores",
            found: format!("none, which {name} needs"),
            expected: "an adapter that has them".into(),
        };
        let lines = cannot_run(&[
            (about("v2 a"), missing("v2 a")),
            (about("v3 b"), missing("v3 b")),
            (about("v4 c"), AttentionError::InvalidScale(0.0)),
        ]);
        let shared = missing("v2 a").to_string().replace("which v2 a needs", "which they need");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], format!("v2 a, v3 b ({shared})"));
        assert_eq!(lines[1], format!("v4 c ({})", AttentionError::InvalidScale(0.0)));
    }
}
