//! # The tour: every stage of the course, side by side
//!
//! [`stages`] lists every CPU forward implementation that exists so far, in course order, and
//! [`gpu_stages`] the GPU ones when the machine has a GPU adapter (or lavapipe). The
//! tour binary (`cargo run --release` at the workspace root) runs them all on one problem,
//! checks each against the f64 oracle, and prints error, time and peak memory; the grader's
//! cross-stage equivalence test runs the same list on random problems.

use std::time::{Duration, Instant};

use lesson06::Dtype;
use lesson06::policy::attention_in_precision;
use ndarray::Array4;
use reference::checks::{Forward, run};
use reference::memory::{NotInstalled, peak_bytes_during};
use reference::{
    AttentionError, Comparison, Expected, ExpectedGradients, Problem, Tolerance, check_gradients,
    check_output,
};

/// One stage of the course.
pub struct Stage {
    /// Short name shown in the table.
    pub name: &'static str,
    /// The package that implements it.
    pub package: &'static str,
    /// The forward function, in the shape every stage shares.
    pub forward: Box<dyn Forward>,
    /// How close to the oracle it must be: the f32 error model, or for a stage that rounds its
    /// inputs to 16 bits that format's.
    pub tolerance: Tolerance,
}

// ANCHOR: stages
/// Every stage that exists so far, in course order.
pub fn stages() -> Vec<Stage> {
    let tiled = lesson03::TileSizes::default();
    vec![
        Stage {
            name: "naive (S and P in memory)",
            package: "lesson01",
            forward: Box::new(lesson01::attention),
            tolerance: Tolerance::F32,
        },
        Stage {
            name: "online, one key at a time",
            package: "lesson02",
            forward: Box::new(lesson02::attention),
            tolerance: Tolerance::F32,
        },
        Stage {
            name: "tiled FlashAttention-2",
            package: "lesson03",
            forward: Box::new(move |q: &_, k: &_, v: &_, o: &_| {
                lesson03::attention(q, k, v, o, tiled)
            }),
            tolerance: Tolerance::F32,
        },
        Stage {
            name: "FlashAttention-1 loop order",
            package: "lesson04",
            forward: Box::new(move |q: &_, k: &_, v: &_, o: &_| {
                // Fast memory is no limit here: the tour compares results, not traffic.
                lesson04::flash1::attention(q, k, v, o, tiled, usize::MAX).map(|run| run.output)
            }),
            tolerance: Tolerance::F32,
        },
        Stage {
            name: "f16 storage, f32 math",
            package: "lesson06",
            forward: Box::new(|q: &_, k: &_, v: &_, o: &_| {
                attention_in_precision(q, k, v, o, Dtype::F16)
            }),
            tolerance: Tolerance::F16_STORAGE,
        },
        Stage {
            name: "bf16 storage, f32 math",
            package: "lesson06",
            forward: Box::new(|q: &_, k: &_, v: &_, o: &_| {
                attention_in_precision(q, k, v, o, Dtype::BF16)
            }),
            tolerance: Tolerance::BF16_STORAGE,
        },
        Stage {
            name: "parallel, vectorised exp2",
            package: "lesson07",
            forward: Box::new(|q: &_, k: &_, v: &_, o: &_| {
                lesson07::attention(q, k, v, o, lesson07::default_tiles())
            }),
            tolerance: Tolerance::F32,
        },
    ]
}

/// The GPU stages (lessons 08 and 09, f32) on the process's shared device, or the error that
/// says why there is no GPU adapter (and how to install lavapipe).
pub fn gpu_stages() -> Result<Vec<Stage>, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    let (device, queue) = (&gpu.device, &gpu.queue);
    Ok(vec![
        Stage {
            name: "GPU naive, 3 WGSL kernels",
            package: "lesson08",
            forward: Box::new(move |q: &_, k: &_, v: &_, o: &_| {
                lesson08::attention_on(device, queue, q, k, v, o)
            }),
            tolerance: Tolerance::F32,
        },
        Stage {
            name: "GPU FlashAttention, WGSL",
            package: "lesson09",
            forward: Box::new(move |q: &_, k: &_, v: &_, o: &_| {
                lesson09::attention_on(device, queue, q, k, v, o, lesson09::default_tiles())
            }),
            tolerance: Tolerance::F32,
        },
    ])
}
// ANCHOR_END: stages

/// What the tour measured for one stage.
pub struct Measurement {
    /// The stage's name.
    pub name: &'static str,
    /// The stage's package.
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
    stage: &Stage,
    problem: &Problem,
    expected: &Expected,
) -> Result<Measurement, NotInstalled> {
    let start = Instant::now();
    let (output, peak_bytes) = peak_bytes_during(|| run(&stage.forward, problem))?;
    let time = start.elapsed();
    let working_bytes = peak_bytes.saturating_sub(output.as_ref().map_or(0, |out| out.bytes()));
    let comparisons = output
        .map_err(|e| format!("returned an error: {e}"))
        .and_then(|out| check_output(&out, expected, stage.tolerance));
    Ok(Measurement { name: stage.name, package: stage.package, comparisons, time, working_bytes })
}

/// What the tour measured for the backward pass.
pub struct BackwardMeasurement {
    /// `dQ`, `dK`, `dV` compared with the oracle's gradients, or why they failed.
    pub comparisons: Result<[Comparison; 3], String>,
    /// Wall time of the call.
    pub time: Duration,
    /// Peak heap bytes during the call beyond the gradients it returned.
    pub working_bytes: usize,
}

// ANCHOR: backward
/// Runs lesson 05's tiled backward pass on `problem` with `dO = d_o`, from the forward output
/// of lesson 03, and compares the gradients with the oracle's `expected`.
pub fn measure_backward(
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
        lesson05::backward(q, k, v, options, forward, d_o, tiles).map_err(|e| e.to_string())
    })?;
    let time = start.elapsed();
    let gradient_bytes =
        grads.as_ref().map_or(0, |g| (g.dq.len() + g.dk.len() + g.dv.len()) * size_of::<f32>());
    let comparisons = grads.and_then(|g| check_gradients(&g, expected, Tolerance::F32));
    Ok(BackwardMeasurement {
        comparisons,
        time,
        working_bytes: peak.saturating_sub(gradient_bytes),
    })
}
// ANCHOR_END: backward

/// The backward pass's line of the tour.
pub fn backward_table(m: &BackwardMeasurement) -> String {
    let header = format!(
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
    let row = format!(
        "{:<10} {:<27} {errors} {:>10} {:>12}  {verdict}\n",
        "lesson05",
        "tiled, recomputes P from L",
        format_duration(m.time),
        format_bytes(m.working_bytes)
    );
    header + &row
}

/// The tour's table: one row per measurement. "of bound" is the worst element's error as a
/// fraction of what the error model allows it (below 1 passes).
pub fn table(measurements: &[Measurement]) -> String {
    let mut out = format!(
        "{:<10} {:<27} {:>10} {:>10} {:>9} {:>10} {:>12}  {}\n",
        "package", "stage", "rel err O", "rel err L", "of bound", "time", "working mem", "check"
    );
    for m in measurements {
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
        out += &format!(
            "{:<10} {:<27} {} {:>10} {:>12}  {}\n",
            m.package,
            m.name,
            errors,
            format_duration(m.time),
            format_bytes(m.working_bytes),
            verdict
        );
    }
    out
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
    fn stages_are_listed_in_course_order() {
        let packages: Vec<_> = stages().iter().map(|s| s.package).collect();
        let mut sorted = packages.clone();
        sorted.sort();
        assert_eq!(packages, sorted);
    }
}
