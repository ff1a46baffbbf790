//! Comparing a stage's f32 output with the f64 oracle.
//!
//! Two measures, both reported on failure:
//! * the relative Frobenius error $\lVert x - r\rVert_F / \lVert r\rVert_F$ over all entries;
//! * an element-wise bound $|x_i - r_i| \le \mathrm{abs} + \mathrm{rel}\cdot|r_i|$, which
//!   catches a single wrong row that the Frobenius norm would average away.
//!
//! Infinite expected values (a logsumexp of `-inf` for a row that sees no key) must be matched
//! exactly, and a NaN never passes.

use std::fmt;

use ndarray::{ArrayBase, Data, Dimension};

use crate::AttentionOutput;

/// How close a result must be to the oracle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Largest allowed relative Frobenius error.
    pub rel_frobenius: f64,
    /// Absolute part of the element-wise bound.
    pub abs: f64,
    /// Relative part of the element-wise bound.
    pub rel: f64,
}

impl Tolerance {
    // ANCHOR: tolerance
    /// f32 arithmetic on the CPU, before growing with the logits ([`Tolerance::for_logits`]).
    ///
    /// Measured on 600 random property-test problems (lessons 01–03, 2026-11-21): the relative
    /// Frobenius error of `O` stayed below `1.6e-7 * bound` and that of `L` below
    /// `3.8e-7 * bound`, and every element within `1.3e-7 * bound * (1 + |ref|)`, where `bound`
    /// is the problem's logit bound (at least 1). So `1e-6` leaves a margin of 2.6 or more,
    /// while any real bug (a missing rescale, scale or mask) is off by `1e-2` or more.
    pub const F32_CPU: Self = Self { rel_frobenius: 1e-6, abs: 1e-6, rel: 1e-6 };

    /// Gradients from an f32 backward pass on the CPU, before growing with the logits.
    ///
    /// Measured on 500 random problems with random tiles (lesson 05, 2026-11-21): the better of
    /// the relative Frobenius and root-mean-square errors stayed below `2.3e-7 * bound`, but
    /// single elements reached `1.4e-6 * bound * (1 + |ref|)`, beyond the forward pass's
    /// `1e-6`: the difference `dP - D` cancels, and `dQ`, `dK` pick up another factor of `K`,
    /// `Q`. `4e-6` per element leaves a margin of about 3.
    pub const F32_CPU_GRADIENTS: Self = Self { rel_frobenius: 1e-6, abs: 4e-6, rel: 4e-6 };

    /// f32 arithmetic on a GPU, before growing with the logits. GPUs evaluate `exp` and `log`
    /// with their own approximations and sum in their own order, so this is measured apart
    /// from the CPU's: over random problems (lessons 08 and 09, `cargo run --release -p
    /// lesson09 --example measure_error`, 2026-11-22) the relative Frobenius error stayed below
    /// `3.5e-7 * bound` on lavapipe (400 problems) and `1.2e-7 * bound` on an NVIDIA H200 (300),
    /// and every element within `1.1e-7 * bound * (1 + |ref|)`. `2e-6` leaves a margin of 5.
    pub const F32_GPU: Self = Self { rel_frobenius: 2e-6, abs: 2e-6, rel: 2e-6 };

    /// Outputs stored in f16 from f32 arithmetic, against the oracle on the same (rounded)
    /// inputs. Measured on 300 random problems (lesson 06, 2026-11-21): FlashAttention's `O`,
    /// rounded once, is within `3.3e-4 * (1 + |ref|)` (f16's half-spacing is `4.9e-4`), and the
    /// relative error below `2.1e-4`; naive attention, which also stores `S` and `P` in f16,
    /// reaches `3.1e-4 * bound` and so needs [`Tolerance::for_logits`].
    pub const F16: Self = Self { rel_frobenius: 1e-3, abs: 1e-3, rel: 1e-3 };

    /// Outputs stored in bf16 from f32 arithmetic. Measured as [`Tolerance::F16`]: `2.9e-3 *
    /// (1 + |ref|)` per element and `1.5e-3` relative for FlashAttention (bf16 keeps 8 bits
    /// where f16 keeps 11), `3.4e-3 * bound` for naive attention.
    pub const BF16: Self = Self { rel_frobenius: 1e-2, abs: 1e-2, rel: 1e-2 };

    /// This tolerance grown for a problem whose logits are bounded by `logit_bound`
    /// (see [`crate::checks::logit_bound`]); bounds below 1 leave it unchanged.
    ///
    /// Why it grows: f32 computes each logit `s = scale * q.k` with an absolute error of about
    /// `eps * scale * sum_d |q_d k_d|`, and `exp` turns an absolute error `e` in a logit into a
    /// relative error `e` in its softmax weight. Inputs scaled by 100 make logits of about
    /// 1000, whose rounding errors (about `1000 * 6e-8`) reach the output of every correct f32
    /// implementation.
    pub fn for_logits(self, logit_bound: f64) -> Self {
        let growth = logit_bound.max(1.0);
        Self {
            rel_frobenius: self.rel_frobenius * growth,
            abs: self.abs * growth,
            rel: self.rel * growth,
        }
    }
    // ANCHOR_END: tolerance
}

/// The first entry that broke the element-wise bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Index of the entry, e.g. `[b, h, i, d]`.
    pub index: Vec<usize>,
    /// The stage's value.
    pub actual: f64,
    /// The oracle's value.
    pub expected: f64,
}

/// The result of comparing one tensor with the oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// What was compared, e.g. `"O"`.
    pub name: String,
    /// `||actual - expected|| / ||expected||` over the finite entries.
    pub rel_frobenius_error: f64,
    /// `||actual - expected|| / sqrt(n)` over the `n` finite entries: the root-mean-square error.
    pub rms_error: f64,
    /// `max |actual - expected|` over the finite entries.
    pub max_abs_error: f64,
    /// How many entries broke the element-wise bound.
    pub mismatches: usize,
    /// The first of them.
    pub first_mismatch: Option<Mismatch>,
    /// The tolerance that was applied.
    pub tolerance: Tolerance,
}

impl Comparison {
    /// Whether the result is within tolerance: every element within its bound, and the whole
    /// within the relative Frobenius tolerance. A reference whose norm is (nearly) zero, such as
    /// a gradient of 1e-96 where the softmax is one-hot, has no meaningful relative error; there
    /// the root-mean-square error within the absolute tolerance is accepted instead.
    pub fn passed(&self) -> bool {
        let whole = self.rel_frobenius_error <= self.tolerance.rel_frobenius
            || self.rms_error <= self.tolerance.abs;
        self.mismatches == 0 && whole
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: relative Frobenius error {:.3e} (allowed {:.1e}), max abs error {:.3e}, {} \
             entries outside {:.1e} + {:.1e}*|ref|",
            self.name,
            self.rel_frobenius_error,
            self.tolerance.rel_frobenius,
            self.max_abs_error,
            self.mismatches,
            self.tolerance.abs,
            self.tolerance.rel,
        )?;
        if let Some(m) = &self.first_mismatch {
            write!(f, "; first at {:?}: got {}, expected {}", m.index, m.actual, m.expected)?;
        }
        Ok(())
    }
}

/// Compares `actual` (any float type that widens to f64) with the oracle's `expected`.
///
/// Returns `Err` with a message if the shapes differ.
pub fn compare<A, E, X, D>(
    name: &str,
    actual: &ArrayBase<A, D>,
    expected: &ArrayBase<E, D>,
    tolerance: Tolerance,
) -> Result<Comparison, String>
where
    A: Data<Elem = X>,
    E: Data<Elem = f64>,
    X: Copy + Into<f64>,
    D: Dimension,
{
    if actual.shape() != expected.shape() {
        return Err(format!(
            "{name} has shape {:?}, expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let (mut diff_sq, mut ref_sq, mut max_abs, mut mismatches, mut finite) =
        (0.0, 0.0, 0.0f64, 0, 0);
    let mut first_mismatch = None;
    for ((index, &x), &r) in actual.indexed_iter().zip(expected.iter()) {
        let x: f64 = x.into();
        let ok = if r.is_finite() && x.is_finite() {
            let err = (x - r).abs();
            diff_sq += err * err;
            ref_sq += r * r;
            max_abs = max_abs.max(err);
            finite += 1;
            err <= tolerance.abs + tolerance.rel * r.abs()
        } else {
            x == r // infinities must match exactly; NaN != NaN, so NaN never passes
        };
        if !ok {
            mismatches += 1;
            if first_mismatch.is_none() {
                let index = index.into_pattern_vec();
                first_mismatch = Some(Mismatch { index, actual: x, expected: r });
            }
        }
    }
    let rel_frobenius_error = if ref_sq > 0.0 { (diff_sq / ref_sq).sqrt() } else { diff_sq.sqrt() };
    Ok(Comparison {
        name: name.to_string(),
        rel_frobenius_error,
        rms_error: if finite > 0 { (diff_sq / f64::from(finite)).sqrt() } else { 0.0 },
        max_abs_error: max_abs,
        mismatches,
        first_mismatch,
        tolerance,
    })
}

/// Compares both outputs of an attention call with the oracle's; `Err` describes every failure.
pub fn check_output<X: Copy + Into<f64>>(
    actual: &AttentionOutput<X>,
    expected: &AttentionOutput<f64>,
    tolerance: Tolerance,
) -> Result<[Comparison; 2], String> {
    let o = compare("O", &actual.o, &expected.o, tolerance)?;
    let lse = compare("L (logsumexp)", &actual.lse, &expected.lse, tolerance)?;
    match (o.passed(), lse.passed()) {
        (true, true) => Ok([o, lse]),
        (true, false) => Err(lse.to_string()),
        (false, true) => Err(o.to_string()),
        (false, false) => Err(format!("{o}\n{lse}")),
    }
}

/// Panics with [`check_output`]'s report (relative Frobenius error, max abs error, first
/// mismatching index of `O` and of `L`) unless `actual` is within `tolerance` of the oracle.
/// For plain `#[test]`s; inside `proptest!` use [`check_output`] and return its error.
#[track_caller]
pub fn assert_close<X: Copy + Into<f64>>(
    actual: &AttentionOutput<X>,
    expected: &AttentionOutput<f64>,
    tolerance: Tolerance,
) {
    if let Err(report) = check_output(actual, expected, tolerance) {
        panic!("attention output differs from the oracle:\n{report}");
    }
}

/// An index pattern as a plain list of indices.
trait IntoPatternVec {
    fn into_pattern_vec(self) -> Vec<usize>;
}

impl<P: ndarray::IntoDimension> IntoPatternVec for P {
    fn into_pattern_vec(self) -> Vec<usize> {
        self.into_dimension().slice().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    const TOL: Tolerance = Tolerance { rel_frobenius: 1e-3, abs: 1e-3, rel: 0.0 };

    #[test]
    fn equal_arrays_pass_with_zero_error() {
        let c = compare("x", &array![1.0f32, -2.0], &array![1.0, -2.0], TOL).unwrap();
        assert!(c.passed());
        assert_eq!((c.rel_frobenius_error, c.max_abs_error), (0.0, 0.0));
    }

    #[test]
    fn reports_the_first_mismatch_and_the_errors() {
        let c =
            compare("x", &array![[1.0f32, 2.0], [3.5, 4.0]], &array![[1.0, 2.0], [3.0, 4.0]], TOL)
                .unwrap();
        assert!(!c.passed());
        assert_eq!(c.mismatches, 1);
        assert_eq!(c.first_mismatch.as_ref().unwrap().index, vec![1, 0]);
        assert_eq!(c.max_abs_error, 0.5);
        assert!((c.rel_frobenius_error - 0.5 / 30f64.sqrt()).abs() < 1e-12);
        assert!(c.to_string().contains("first at [1, 0]: got 3.5, expected 3"));
    }

    #[test]
    fn nan_never_passes_and_infinities_must_match() {
        assert!(!compare("x", &array![f32::NAN], &array![1.0], TOL).unwrap().passed());
        assert!(!compare("x", &array![f32::NAN], &array![f64::NAN], TOL).unwrap().passed());
        let minus_inf = array![f64::NEG_INFINITY];
        assert!(compare("x", &array![f32::NEG_INFINITY], &minus_inf, TOL).unwrap().passed());
        assert!(!compare("x", &array![0.0f32], &minus_inf, TOL).unwrap().passed());
        assert!(!compare("x", &array![f32::INFINITY], &array![1.0], TOL).unwrap().passed());
    }

    #[test]
    fn frobenius_error_alone_can_fail() {
        // Every entry within the element-wise bound, but the whole is too far off, both
        // relatively and in root-mean-square.
        let tol = Tolerance { rel_frobenius: 1e-4, abs: 1e-2, rel: 0.0 };
        let c = compare(
            "x",
            &array![1.005f32, 1.005],
            &array![1.0, 1.0],
            Tolerance { abs: 4e-3, rel: 1e-2, ..tol },
        )
        .unwrap();
        assert_eq!(c.mismatches, 0);
        assert!(!c.passed());
    }

    #[test]
    fn a_reference_of_nearly_zero_norm_is_judged_by_its_absolute_error() {
        // A gradient of 1e-96 computed as 0: relative error 1, absolute error negligible.
        let tol = Tolerance { rel_frobenius: 1e-6, abs: 1e-6, rel: 1e-6 };
        let c = compare("dQ", &array![0.0f32, 0.0], &array![1e-96, -2e-96], tol).unwrap();
        assert_eq!(c.rel_frobenius_error, 1.0);
        assert!(c.passed());
        // The absolute route still fails a real error.
        assert!(!compare("dQ", &array![1e-3f32, 0.0], &array![1e-96, 0.0], tol).unwrap().passed());
    }

    #[test]
    fn assert_close_passes_close_outputs_and_reports_far_ones() {
        let expected = AttentionOutput { o: array![[[[1.0, 2.0]]]], lse: array![[[0.5]]] };
        let close = AttentionOutput { o: array![[[[1.0f32, 2.0]]]], lse: array![[[0.5f32]]] };
        assert_close(&close, &expected, TOL);
        let far = AttentionOutput { o: array![[[[1.0f32, 2.5]]]], lse: array![[[0.5f32]]] };
        let report = std::panic::catch_unwind(|| assert_close(&far, &expected, TOL)).unwrap_err();
        let report = report.downcast_ref::<String>().unwrap();
        assert!(report.contains("O: relative Frobenius error"), "{report}");
        assert!(report.contains("first at [0, 0, 0, 1]: got 2.5, expected 2"), "{report}");
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let err = compare("O", &array![1.0f32, 2.0], &array![1.0], TOL).unwrap_err();
        assert!(err.contains("O has shape [2], expected [1]"), "{err}");
    }

    #[test]
    fn tolerance_grows_with_the_logits_but_never_shrinks() {
        let t = Tolerance::F32_CPU.for_logits(1000.0);
        assert_eq!(t.rel_frobenius, Tolerance::F32_CPU.rel_frobenius * 1000.0);
        assert_eq!(Tolerance::F32_CPU.for_logits(0.1), Tolerance::F32_CPU);
    }
}
