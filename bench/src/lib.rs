//! # bench — what every benchmark of the course shares
//!
//! The Rust counterpart of llm.c's `dev/cuda/common.h`: a benchmark validates each kernel
//! against the oracle, then times it, and publishes numbers that name their machine and date.
//!
//! * [`timing`]: the median of several runs after warm-ups, alternating input sets; wall clock
//!   on the CPU, timestamp queries on the GPU (feature `gpu`).
//! * [`machine`]: the CPU, its threads, the date, the measured FMA peak.
//! * [`peer`]: PyTorch timed by a script in the same run, its output parsed once into typed rows.
//! * [`report`]: tables of typed cells printed as text and written as CSV from the same rows,
//!   measurements against one variable that give a table and plotted lines, and the one
//!   folder figures go to.
//! * [`plot`]: SVG line plots with axes that fit the data.
//! * [`sweep`]: kernels and peers timed over sequence lengths, and the tables, CSV and plot
//!   made from the measurements.

pub mod machine;
pub mod peer;
pub mod plot;
pub mod report;
pub mod sweep;
pub mod timing;

pub use machine::Machine;
pub use peer::{Peer, PeerError, PeerProblem, PeerReport};
pub use plot::{Plot, Series};
pub use report::{Cell, Figures, Measurements, Table};
pub use sweep::{Sizes, Sweep};
pub use timing::{Repeats, Timings, time_cpu};

use ndarray::s;
use reference::{
    AttentionOutput, ForwardVersion, Problem, ProblemSpec, Tolerance, check_output, oracle,
};

// ANCHOR: validate
/// Checks `version` against the f64 oracle on a problem of each spec (seeded): a benchmark
/// validates every version before it times any, as llm.c's `dev/cuda` does.
pub fn validate(version: &ForwardVersion, specs: &[ProblemSpec]) -> Result<(), String> {
    for (seed, spec) in specs.iter().enumerate() {
        let p = Problem::random(spec, seed as u64);
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
        let wrong =
            |e: String| format!("{} is wrong on {spec:?}, not timing it: {e}", version.about.name);
        let out =
            (version.forward)(&p.q, &p.k, &p.v, &p.options).map_err(|e| wrong(e.to_string()))?;
        check_output(&out, &expected, version.about.tolerance).map_err(wrong)?;
    }
    Ok(())
}
// ANCHOR_END: validate

/// Checks the first and last 64 query rows of slice (0, 0) of `out` against the f64 oracle on
/// those rows: at the sizes a benchmark times, the whole problem is too large for the oracle,
/// but a wrong result at this size still shows (the tail tile and the causal diagonal are in
/// the last rows).
pub fn validate_rows(
    out: &AttentionOutput<f32>,
    p: &Problem,
    tolerance: Tolerance,
) -> Result<(), String> {
    let one = |x: &ndarray::Array4<f32>| x.slice(s![0..1, 0..1, .., ..]).to_owned();
    let (q, k, v) = (one(&p.q), one(&p.k), one(&p.v));
    let n = q.dim().2;
    for rows in [0..n.min(64), n.saturating_sub(64)..n] {
        let expected = oracle::expected_rows(&q, &k, &v, &p.options, rows.clone())
            .map_err(|e| e.to_string())?;
        let ours = AttentionOutput {
            o: out.o.slice(s![0..1, 0..1, rows.clone(), ..]).to_owned(),
            lse: out.lse.slice(s![0..1, 0..1, rows.clone()]).to_owned(),
        };
        check_output(&ours, &expected, tolerance)
            .map_err(|e| format!("wrong at this size, rows {rows:?}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use reference::{About, AttentionOutput, Device};

    use super::*;

    #[test]
    fn a_wrong_version_is_not_validated() {
        let about = About::forward("zeros", "none", Device::Cpu, "returns O = 0");
        let zeros = ForwardVersion::new(about, |q: &_, k: &_, v: &_, o: &_| {
            let shape = reference::check_inputs(q, k, v, o)?.shape;
            let mut out = AttentionOutput::empty(&shape);
            out.lse.fill(0.0);
            Ok(out)
        });
        let err = validate(&zeros, &[ProblemSpec::new(1, 1, 5, 5, 4)]).unwrap_err();
        assert!(err.contains("zeros is wrong"), "{err}");
        let naive = oracle_in_f32();
        assert_eq!(validate(&naive, &[ProblemSpec::new(1, 2, 7, 9, 4).causal(true)]), Ok(()));
    }

    #[test]
    fn rows_are_checked_at_both_ends() {
        let p = Problem::random(&ProblemSpec::new(1, 2, 200, 150, 8).causal(true), 3);
        let mut out = (oracle_in_f32().forward)(&p.q, &p.k, &p.v, &p.options).unwrap();
        assert_eq!(validate_rows(&out, &p, Tolerance::F32), Ok(()));
        out.o[[0, 0, 199, 3]] += 0.5; // the last row
        let err = validate_rows(&out, &p, Tolerance::F32).unwrap_err();
        assert!(err.contains("rows 136..200"), "{err}");
    }

    /// The oracle itself, rounded to f32, as a version that must pass.
    fn oracle_in_f32() -> ForwardVersion {
        let about = About::forward("oracle in f32", "none", Device::Cpu, "the oracle");
        ForwardVersion::new(about, |q: &_, k: &_, v: &_, o: &_| {
            let out = oracle::attention(q, k, v, o)?;
            Ok(AttentionOutput { o: out.o.mapv(|x| x as f32), lse: out.lse.mapv(|x| x as f32) })
        })
    }
}
