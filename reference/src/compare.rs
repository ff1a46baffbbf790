//! The error model: how far a stage's result may be from the f64 oracle, element by element.
//!
//! Every element may differ from the oracle by a bound that scales with **the size of the terms
//! that produce it**, not with its own size. An output that is small because large terms
//! cancel (a gradient that is exactly zero because one visible key makes `dS = 0`, an `O_id`
//! whose values have both signs) is judged by the size of those terms. A wrong implementation
//! (a missing rescale, scale or mask) is off by many orders of magnitude more; a correct one
//! stays inside by a wide margin (see [`SAFETY_FACTOR`]).
//!
//! For the forward pass ([`Expected`] holds the term sizes), with `u` the unit roundoff of the
//! arithmetic (`2^-24` for f32), `Λ_i` the size of row `i`'s logit terms and `M_id` the size of
//! the terms of `O_id`:
//!
//! $$ |O_{id} - O^{*}_{id}| \le c\, M_{id} \big( u\,[(\sqrt{D} + 2)\Lambda_i + \sqrt{N_{kv}} + 2] +
//!    u_s (2\Lambda_i + 2) + \varepsilon + u_p + u_o \big), $$
//! $$ |L_i - L^{*}_i| \le c \big( u\,[(\sqrt{D} + 2)\Lambda_i + |L^{*}_i| + \sqrt{N_{kv}} + 2] +
//!    u_s (2\Lambda_i + |L^{*}_i| + 2) + \varepsilon \big) . $$
//!
//! Where each part comes from: a logit is a dot product of `D` terms, whose rounding error
//! grows like `sqrt(D)` times the size of its terms if, as the model *assumes*, the rounding
//! errors are independent and unbiased (an assumption, not a fact of floating-point
//! arithmetic). Under it they add like a random walk: Higham and Mary, *A New Approach to
//! Probabilistic Rounding Error Analysis*, 2019, prove that a dot product of `n` terms is off
//! by more than about `λ sqrt(n) u` times the size of its terms with probability at most
//! `2n exp(-λ² (1 - u)² / 2)`, a union bound over its `n` roundings. With `c = 8` the
//! dot-product part alone has `λ >= 8`: at most `2 · 256 · e^-32`, about `6.5e-12`, per logit
//! at the largest head dim the tests use (`D = 256`), less at smaller ones. The measured
//! worst errors ([`SAFETY_FACTOR`]) are the evidence that the assumption holds well enough.
//! The worst case, every rounding in the same direction, grows like `D` instead and is never
//! approached in practice. `exp` turns an absolute error `e` in a logit into a relative error
//! `e` in its weight; `exp`, `log` and the subtraction of the maximum add about
//! `2 Λ_i`; the sum over keys adds about `sqrt(Nkv)`. `u_s` is the unit roundoff of a 16-bit
//! format the inputs or `S` and `P` are stored in (each logit then moves by up to `2 u_s Λ_i`),
//! `u_p` that of the format `P` is rounded to before the product `P V` (as FlashAttention
//! kernels on tensor cores do), `u_o` that of the format `O` is stored in, and `ε` an absolute
//! error a logit may carry beyond the arithmetic's (0 but for a GPU's softcap, whose `tanh` is
//! only as accurate as Vulkan requires). The backward pass has the same structure
//! ([`ExpectedGradients`]).
//!
//! Numbers below a format's normal range lose their relative precision, so each visible
//! weight may also be off by the format's absolute underflow error ([`Format::underflow`],
//! times [`Expected::visible_values`]), each of the `Nkv` products `P V` by the arithmetic's,
//! and `O` by its output format's; those terms only matter for an output made of such tiny
//! numbers alone.
//!
//! The safety factor `c` is [`SAFETY_FACTOR`]; see it for how it was measured. Infinite
//! expected values (`L = -inf` for a row that sees no key) must be matched exactly, and NaN
//! never passes.

use std::fmt;

use ndarray::{ArrayBase, Data, Dimension, IntoDimension, Zip};

use crate::oracle::{Expected, ExpectedGradients};
use crate::{AttentionOutput, Gradients};

/// A number format as the error model sees it: how much one rounding to it may cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Format {
    /// The unit roundoff: the largest relative error of rounding a number in the format's
    /// normal range to it.
    pub unit: f64,
    /// The largest absolute error of rounding a number below the normal range, where the
    /// format has lost its relative precision.
    pub underflow: f64,
}

impl Format {
    /// A step that rounds nothing.
    pub const EXACT: Self = Self { unit: 0.0, underflow: 0.0 };
    /// f32: unit roundoff `2^-24`; below `2^-126` a GPU may flush a number to zero, so the
    /// smallest normal number is the absolute error there.
    pub const F32: Self =
        Self { unit: 1.0 / (1u64 << 24) as f64, underflow: f32::MIN_POSITIVE as f64 };
    /// f16: unit roundoff `2^-11` (10 stored mantissa bits); below `2^-14` it keeps subnormals
    /// `2^-24` apart, so rounding there is off by up to `2^-25`.
    pub const F16: Self =
        Self { unit: 1.0 / (1u64 << 11) as f64, underflow: 1.0 / (1u64 << 25) as f64 };
    /// bf16: unit roundoff `2^-8` (7 stored mantissa bits), f32's range.
    pub const BF16: Self =
        Self { unit: 1.0 / (1u64 << 8) as f64, underflow: f32::MIN_POSITIVE as f64 };
    /// An f32 held as two f16s, `hi` (x truncated to f16's bits) and `lo = f16((x - hi) 2^10)`
    /// (lesson 10's version 11): within `2^-21 |x|`, and a product of two such pairs that
    /// drops `lo lo` within `2^-19 |q k|`, counted as `2^-20` for each of its two numbers.
    /// Where `lo` falls below f16's normal range (`|x| < 2^-13`) the pair is within `2^-34`.
    pub const F16_PAIR: Self =
        Self { unit: 1.0 / (1u64 << 20) as f64, underflow: 1.0 / (1u64 << 34) as f64 };
}

// ANCHOR: safety_factor
/// `c`: how many times its modelled rounding error an element may be off.
///
/// The model's terms already grow like the random-walk estimate of each sum, so a correct
/// implementation's error is a fraction of the model. Measured with `cargo run --release -p
/// lab --bin error_model` on 2026-11-22 (worst element over every problem, as a fraction
/// of the model with `c = 1`): 3000 random problems per CPU stage on a 2-core Xeon, f32 at
/// most 0.81 (lesson 02, one key at a time); 300 per GPU stage on lavapipe, at most 0.73; 1000
/// per GPU stage on an NVIDIA H100 through Vulkan (driver 580.159.04), at most 0.87 (lesson 09,
/// whose `exp` is the GPU's approximation). Stages that round `O` to f16 or bf16 reach 0.99,
/// and no more: rounding to nearest costs at most `u_o |O|`, and `|O| <= M`. A factor of 8
/// leaves a margin of 8 over everything seen; the maintainers' `cargo grade --stress` runs
/// every graded check with 20 times its cases from fresh seeds, and every planted bug of the
/// course stays caught (`cargo grade --self-check`).
pub const SAFETY_FACTOR: f64 = 8.0;
// ANCHOR_END: safety_factor

/// Which roundings a result went through, for the error model above.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// The arithmetic (`u`): [`Format::F32`] for every stage of the course.
    pub arithmetic: Format,
    /// The format the inputs, `S` or `P` were stored in (`u_s`); [`Format::EXACT`] when they
    /// never left the arithmetic's format.
    pub storage: Format,
    /// The format `P` was rounded to before `P V` (`u_p`).
    pub weights: Format,
    /// The format `O` was stored in (`u_o`).
    pub output: Format,
    /// The safety factor `c`.
    pub factor: f64,
    /// An absolute error each logit may carry beyond the arithmetic's, in natural units
    /// (`ε`): 0 for every stage of the course; a GPU kernel's softcap adds the error of the
    /// driver's `tanh` ([`Tolerance::with_logit_error`]).
    pub logit_error: f64,
}

impl Tolerance {
    // ANCHOR: tolerance
    /// f32 arithmetic and storage, on the CPU or a GPU.
    pub const F32: Self = Self {
        arithmetic: Format::F32,
        storage: Format::EXACT,
        weights: Format::EXACT,
        output: Format::EXACT,
        factor: SAFETY_FACTOR,
        logit_error: 0.0,
    };

    /// f16 inputs computed in f32, `O` rounded to f16 once (FlashAttention on f16 storage),
    /// against the oracle on the same f16 inputs.
    pub const F16_OUTPUT: Self = Self { output: Format::F16, ..Self::F32 };

    /// bf16 inputs computed in f32, `O` rounded to bf16 once.
    pub const BF16_OUTPUT: Self = Self { output: Format::BF16, ..Self::F32 };

    /// f16 inputs, `P` rounded to f16 before `P V` and `O` rounded to f16 (FlashAttention as
    /// tensor-core kernels run it), against the oracle on the same f16 inputs.
    pub const F16_WEIGHTS: Self = Self { weights: Format::F16, output: Format::F16, ..Self::F32 };

    /// As [`Tolerance::F16_WEIGHTS`], in bf16.
    pub const BF16_WEIGHTS: Self =
        Self { weights: Format::BF16, output: Format::BF16, ..Self::F32 };

    /// f32 inputs rounded to f16, or `S` and `P` stored in f16 (naive attention on f16
    /// storage), and `O` rounded to f16, against the oracle on the unrounded inputs.
    pub const F16_STORAGE: Self = Self { storage: Format::F16, output: Format::F16, ..Self::F32 };

    /// As [`Tolerance::F16_STORAGE`], in bf16.
    pub const BF16_STORAGE: Self =
        Self { storage: Format::BF16, output: Format::BF16, ..Self::F32 };

    /// f32 inputs rounded to f16, `P` rounded to f16 before `P V`, sums in f32 and `O` kept
    /// in f32 (tensor-core FlashAttention that returns f32), against the oracle on the
    /// unrounded inputs.
    pub const F16_STORAGE_AND_WEIGHTS: Self =
        Self { storage: Format::F16, weights: Format::F16, ..Self::F32 };
    // ANCHOR_END: tolerance

    /// f32 inputs and `P` each split into two f16s for the tensor cores ([`Format::F16_PAIR`]),
    /// sums and `O` in f32, against the oracle on the unrounded inputs.
    pub const F16_PAIRS: Self =
        Self { storage: Format::F16_PAIR, weights: Format::F16_PAIR, ..Self::F32 };

    /// The same tolerance with an absolute error `error` allowed in every logit, in natural
    /// units, beyond the arithmetic's: what a GPU's `tanh` in a softcap adds (Vulkan requires
    /// it to be as accurate as the exponentials it can be computed from, not to the last bit).
    /// A weight then carries a relative error of `error`.
    pub const fn with_logit_error(self, error: f64) -> Self {
        Self { logit_error: error, ..self }
    }

    /// The error each element of `O` and `L` may carry, by the model in the module docs.
    pub fn allowed(&self, expected: &Expected) -> AttentionOutput<f64> {
        let (u, u_s, c) = (self.arithmetic.unit, self.storage.unit, self.factor);
        let dot_growth = (expected.head_dim as f64).sqrt() + 2.0;
        let sum_growth = (expected.kv_len as f64).sqrt() + 2.0;
        let per_row = |terms: f64| {
            u * (dot_growth * terms + sum_growth) + u_s * (2.0 * terms + 2.0) + self.logit_error
        };
        // Below the normal range a weight keeps only an absolute precision, whichever of the
        // formats it passed through loses the most.
        let weight_underflow = [self.arithmetic, self.storage, self.weights]
            .iter()
            .map(|f| f.underflow)
            .fold(0.0, f64::max);
        // Each product P_ij V_jd may underflow too, and O itself when stored.
        let absolute =
            self.arithmetic.underflow * (expected.kv_len as f64 + 1.0) + self.output.underflow;
        let mut o = expected.value_terms.clone();
        let rows = o.rows_mut().into_iter().zip(expected.visible_values.rows());
        for ((mut row, visible), &terms) in rows.zip(expected.logit_terms.iter()) {
            let rate = per_row(terms) + self.weights.unit + self.output.unit;
            Zip::from(&mut row).and(&visible).for_each(|m, &sum| {
                *m = c * (*m * rate + sum * weight_underflow + absolute);
            });
        }
        let mut lse = expected.logit_terms.clone();
        Zip::from(&mut lse).and(&expected.output.lse).for_each(|bound, &l| {
            let size = if l.is_finite() { l.abs() } else { 0.0 };
            *bound = c * (per_row(*bound) + (u + u_s) * size);
        });
        AttentionOutput { o, lse }
    }

    // ANCHOR: gradient_tolerance
    /// The error each gradient element may carry: `c (u E + f F + f n)`, with `E` the error
    /// terms and `F` the visible terms of [`ExpectedGradients`], `f` the arithmetic's underflow
    /// error, and `n = Nq + Nkv + D` for the products of a gradient's sums that may underflow.
    /// The course's backward pass is f32 throughout: only `arithmetic` and `factor` are used.
    pub fn allowed_gradients(&self, expected: &ExpectedGradients) -> Gradients<f64> {
        let (c, u, f) = (self.factor, self.arithmetic.unit, self.arithmetic.underflow);
        let (_, _, q_len, head_dim) = expected.gradients.dq.dim();
        let kv_len = expected.gradients.dk.dim().2;
        let products = f * (q_len + kv_len + head_dim) as f64;
        let (e, v) = (&expected.error_terms, &expected.visible_terms);
        let bound = |e: &ndarray::Array4<f64>, v: &ndarray::Array4<f64>| {
            (e * u + v * f).mapv(|x| c * (x + products))
        };
        Gradients { dq: bound(&e.dq, &v.dq), dk: bound(&e.dk, &v.dk), dv: bound(&e.dv, &v.dv) }
    }
    // ANCHOR_END: gradient_tolerance
}

/// One element of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    /// Its index, e.g. `[b, h, i, d]`.
    pub index: Vec<usize>,
    /// The stage's value.
    pub actual: f64,
    /// The oracle's value.
    pub expected: f64,
    /// The error it may carry.
    pub allowed: f64,
}

impl Element {
    /// `|actual - expected|`.
    pub fn error(&self) -> f64 {
        (self.actual - self.expected).abs()
    }
}

/// The result of comparing one tensor with the oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// What was compared, e.g. `"O"`.
    pub name: String,
    /// How many elements were compared.
    pub elements: usize,
    /// How many broke their bound (a non-finite mismatch counts).
    pub failures: usize,
    /// The finite element whose error is the largest fraction of its bound.
    pub worst: Option<Element>,
    /// `error / allowed` of that element (0 if every error is 0).
    pub worst_ratio: f64,
    /// The first element where the stage and the oracle disagree on a non-finite value (NaN
    /// anywhere, or an infinity on one side only).
    pub non_finite: Option<Element>,
    /// `||actual - expected|| / ||expected||` over the finite elements: a summary for tables.
    pub rel_frobenius_error: f64,
    /// `max |actual - expected|` over the finite elements.
    pub max_abs_error: f64,
}

impl Comparison {
    /// Whether every element is within its bound.
    pub fn passed(&self) -> bool {
        self.failures == 0
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            return write!(
                f,
                "{}: every element within its bound (the worst at {:.2} of it)",
                self.name, self.worst_ratio
            );
        }
        write!(
            f,
            "{}: {} of {} elements outside their bound",
            self.name, self.failures, self.elements
        )?;
        // Values are shown to f32's precision (its shortest exact form); the error is exact.
        let value = |x: f64| x as f32;
        if let Some(e) = &self.non_finite {
            let (name, index) = (&self.name, &e.index);
            write!(f, "; {name}{index:?} is {}, expected {}", value(e.actual), value(e.expected))?;
        }
        if let Some(e) = self.worst.as_ref().filter(|_| self.worst_ratio > 1.0) {
            write!(
                f,
                "; worst at {:?}: got {}, expected {} (error {:.2e}, allowed {:.2e})",
                e.index,
                value(e.actual),
                value(e.expected),
                e.error(),
                e.allowed
            )?;
        }
        Ok(())
    }
}

/// Compares `actual` (any float type that widens to f64) with `expected`, each element against
/// its own bound in `allowed`. `Err` if the shapes differ.
pub fn compare<A, E, W, X, D>(
    name: &str,
    actual: &ArrayBase<A, D>,
    expected: &ArrayBase<E, D>,
    allowed: &ArrayBase<W, D>,
) -> Result<Comparison, String>
where
    A: Data<Elem = X>,
    E: Data<Elem = f64>,
    W: Data<Elem = f64>,
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
    assert_eq!(expected.shape(), allowed.shape(), "one bound per expected element");
    let mut c = Comparison {
        name: name.to_string(),
        elements: actual.len(),
        failures: 0,
        worst: None,
        worst_ratio: 0.0,
        non_finite: None,
        rel_frobenius_error: 0.0,
        max_abs_error: 0.0,
    };
    let (mut diff_sq, mut ref_sq) = (0.0, 0.0);
    for (((index, &x), &r), &bound) in actual.indexed_iter().zip(expected).zip(allowed) {
        let x: f64 = x.into();
        let element = || Element {
            index: index.clone().into_dimension().slice().to_vec(),
            actual: x,
            expected: r,
            allowed: bound,
        };
        if !(x.is_finite() && r.is_finite()) {
            if x != r {
                // NaN != NaN, so NaN never passes; infinities must match exactly.
                c.failures += 1;
                c.non_finite.get_or_insert_with(element);
            }
            continue;
        }
        let error = (x - r).abs();
        diff_sq += error * error;
        ref_sq += r * r;
        c.max_abs_error = c.max_abs_error.max(error);
        if error > bound {
            c.failures += 1;
        }
        let ratio = if error == 0.0 { 0.0 } else { error / bound }; // error / 0 is inf
        if ratio > c.worst_ratio || c.worst.is_none() {
            c.worst_ratio = ratio.max(c.worst_ratio);
            c.worst = Some(element());
        }
    }
    c.rel_frobenius_error = if ref_sq > 0.0 { (diff_sq / ref_sq).sqrt() } else { diff_sq.sqrt() };
    Ok(c)
}

/// Compares both outputs of an attention call with the oracle's, within `tolerance`; `Err`
/// describes every failure.
pub fn check_output<X: Copy + Into<f64>>(
    actual: &AttentionOutput<X>,
    expected: &Expected,
    tolerance: Tolerance,
) -> Result<[Comparison; 2], String> {
    check_within(actual, &expected.output, &tolerance.allowed(expected))
}

/// Two results of the same problem agree: each may be off the oracle by its bound, in opposite
/// directions, so they may differ by twice the bound. For "the output does not depend on the
/// tile sizes" and "every stage computes the same attention".
pub fn check_agreement(
    a: &AttentionOutput<f32>,
    b: &AttentionOutput<f32>,
    expected: &Expected,
    tolerance: Tolerance,
) -> Result<[Comparison; 2], String> {
    let twice = Tolerance { factor: 2.0 * tolerance.factor, ..tolerance };
    check_within(a, &b.to_f64(), &twice.allowed(expected))
}

fn check_within<X: Copy + Into<f64>>(
    actual: &AttentionOutput<X>,
    expected: &AttentionOutput<f64>,
    allowed: &AttentionOutput<f64>,
) -> Result<[Comparison; 2], String> {
    let o = compare("O", &actual.o, &expected.o, &allowed.o)?;
    let lse = compare("L", &actual.lse, &expected.lse, &allowed.lse)?;
    match (o.passed(), lse.passed()) {
        (true, true) => Ok([o, lse]),
        (true, false) => Err(lse.to_string()),
        (false, true) => Err(o.to_string()),
        (false, false) => Err(format!("{o}\n{lse}")),
    }
}

/// Compares gradients with the oracle's, each element against its bound.
pub fn check_gradients(
    actual: &Gradients<f32>,
    expected: &ExpectedGradients,
    tolerance: Tolerance,
) -> Result<[Comparison; 3], String> {
    gradients_within(actual, &expected.gradients, &tolerance.allowed_gradients(expected))
}

/// Two versions' gradients of the same problem agree: each may be off the oracle by its bound,
/// in opposite directions, so they may differ by twice the bound (as [`check_agreement`]).
pub fn check_gradient_agreement(
    a: &Gradients<f32>,
    b: &Gradients<f32>,
    expected: &ExpectedGradients,
    tolerance: Tolerance,
) -> Result<[Comparison; 3], String> {
    let twice = Tolerance { factor: 2.0 * tolerance.factor, ..tolerance };
    let b =
        Gradients { dq: b.dq.mapv(f64::from), dk: b.dk.mapv(f64::from), dv: b.dv.mapv(f64::from) };
    gradients_within(a, &b, &twice.allowed_gradients(expected))
}

fn gradients_within(
    actual: &Gradients<f32>,
    exact: &Gradients<f64>,
    allowed: &Gradients<f64>,
) -> Result<[Comparison; 3], String> {
    let dq = compare("dQ", &actual.dq, &exact.dq, &allowed.dq)?;
    let dk = compare("dK", &actual.dk, &exact.dk, &allowed.dk)?;
    let dv = compare("dV", &actual.dv, &exact.dv, &allowed.dv)?;
    let failed: Vec<String> =
        [&dq, &dk, &dv].into_iter().filter(|c| !c.passed()).map(|c| c.to_string()).collect();
    if failed.is_empty() { Ok([dq, dk, dv]) } else { Err(failed.join("\n")) }
}

/// Panics with [`check_output`]'s report unless `actual` is within `tolerance` of the oracle's
/// `expected`. For plain `#[test]`s; inside `proptest!` use [`check_output`] and return its
/// error.
#[track_caller]
pub fn assert_close<X: Copy + Into<f64>>(
    actual: &AttentionOutput<X>,
    expected: &Expected,
    tolerance: Tolerance,
) {
    if let Err(report) = check_output(actual, expected, tolerance) {
        panic!("attention output differs from the oracle:\n{report}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttentionOptions, Problem, ProblemSpec, oracle};
    use ndarray::array;

    #[test]
    fn equal_arrays_pass_with_zero_error() {
        let bound = array![1e-9, 1e-9];
        let c = compare("x", &array![1.0f32, -2.0], &array![1.0, -2.0], &bound).unwrap();
        assert!(c.passed());
        assert_eq!((c.worst_ratio, c.max_abs_error), (0.0, 0.0));
    }

    #[test]
    fn each_element_is_judged_by_its_own_bound() {
        let (actual, expected) =
            (array![[1.0f32, 2.0], [3.5, 4.0]], array![[1.0, 2.0], [3.0, 4.0]]);
        // 0.5 off at [1, 0]: within a bound of 1, outside a bound of 0.1.
        assert!(
            compare("x", &actual, &expected, &array![[0.0, 0.0], [1.0, 0.0]]).unwrap().passed()
        );
        let c = compare("x", &actual, &expected, &array![[1.0, 1.0], [0.1, 1.0]]).unwrap();
        assert_eq!((c.failures, c.worst.as_ref().unwrap().index.clone()), (1, vec![1, 0]));
        assert!((c.worst_ratio - 5.0).abs() < 1e-12);
        let text = c.to_string();
        assert!(text.contains("1 of 4 elements outside their bound"), "{text}");
        assert!(
            text.contains("worst at [1, 0]: got 3.5, expected 3 (error 5.00e-1, allowed 1.00e-1)"),
            "{text}"
        );
    }

    #[test]
    fn a_zero_bound_demands_an_exact_answer() {
        let bound = array![0.0, 0.0];
        assert!(compare("x", &array![0.0f32, 2.0], &array![0.0, 2.0], &bound).unwrap().passed());
        assert!(!compare("x", &array![1e-30f32, 2.0], &array![0.0, 2.0], &bound).unwrap().passed());
    }

    #[test]
    fn nan_never_passes_and_infinities_must_match() {
        let big = array![1e9];
        assert!(!compare("x", &array![f32::NAN], &array![1.0], &big).unwrap().passed());
        assert!(!compare("x", &array![f32::NAN], &array![f64::NAN], &big).unwrap().passed());
        let minus_inf = array![f64::NEG_INFINITY];
        assert!(compare("x", &array![f32::NEG_INFINITY], &minus_inf, &big).unwrap().passed());
        assert!(!compare("x", &array![0.0f32], &minus_inf, &big).unwrap().passed());
        assert!(!compare("x", &array![f32::INFINITY], &array![1.0], &big).unwrap().passed());
    }

    #[test]
    fn a_non_finite_mismatch_is_reported_as_such() {
        let c =
            compare("L", &array![0.5f32, f32::NAN], &array![0.5, 0.25], &array![1.0, 1.0]).unwrap();
        assert_eq!(
            c.to_string(),
            "L: 1 of 2 elements outside their bound; L[1] is NaN, expected 0.25"
        );
        let c = compare("L", &array![f32::NEG_INFINITY], &array![0.5], &array![1.0]).unwrap();
        assert_eq!(
            c.to_string(),
            "L: 1 of 1 elements outside their bound; L[0] is -inf, expected 0.5"
        );
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let err = compare("O", &array![1.0f32, 2.0], &array![1.0], &array![1.0]).unwrap_err();
        assert!(err.contains("O has shape [2], expected [1]"), "{err}");
    }

    #[test]
    fn an_output_that_cancels_is_judged_by_the_size_of_its_terms() {
        // Two keys with equal scores and values +1, -1 in one column: O = 0 by cancellation.
        let q = array![[[[0.0f32, 0.0]]]];
        let k = array![[[[1.0f32, 0.0], [1.0, 0.0]]]];
        let v = array![[[[1.0f32, 5.0], [-1.0, 5.0]]]];
        let e = oracle::expected(&q, &k, &v, &AttentionOptions::new()).unwrap();
        assert_eq!(e.output.o[[0, 0, 0, 0]], 0.0);
        assert!((e.value_terms[[0, 0, 0, 0]] - 1.0).abs() < 1e-12); // 1/2 |1| + 1/2 |-1|
        let allowed = Tolerance::F32.allowed(&e);
        assert!(allowed.o[[0, 0, 0, 0]] > 8.0 * Format::F32.unit);
        // An f32 rounding error passes; a bug's error does not.
        let mut out = AttentionOutput {
            o: e.output.o.mapv(|x| x as f32),
            lse: e.output.lse.mapv(|x| x as f32),
        };
        out.o[[0, 0, 0, 0]] = 3e-8;
        assert!(check_output(&out, &e, Tolerance::F32).is_ok());
        out.o[[0, 0, 0, 0]] = 1e-3;
        assert!(check_output(&out, &e, Tolerance::F32).is_err());
    }

    #[test]
    fn bounds_grow_with_the_logits_and_the_storage_format() {
        let p = Problem::random(&ProblemSpec::new(1, 1, 4, 6, 8), 3);
        let big = Problem::random(&ProblemSpec::new(1, 1, 4, 6, 8).logit_scale(100.0), 3);
        let allowed = |p: &Problem, t: Tolerance| {
            let e = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
            t.allowed(&e).lse[[0, 0, 0]]
        };
        assert!(allowed(&big, Tolerance::F32) > 50.0 * allowed(&p, Tolerance::F32));
        assert!(allowed(&p, Tolerance::F16_STORAGE) > 100.0 * allowed(&p, Tolerance::F32));
        assert!(allowed(&p, Tolerance::BF16_STORAGE) > 7.0 * allowed(&p, Tolerance::F16_STORAGE));
    }

    #[test]
    fn assert_close_passes_close_outputs_and_reports_far_ones() {
        let p = Problem::random(&ProblemSpec::new(1, 1, 2, 3, 2), 1);
        let e = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        let close = AttentionOutput {
            o: e.output.o.mapv(|x| x as f32),
            lse: e.output.lse.mapv(|x| x as f32),
        };
        assert_close(&close, &e, Tolerance::F32);
        let mut far = close.clone();
        far.o[[0, 0, 1, 1]] += 0.5;
        let report =
            std::panic::catch_unwind(|| assert_close(&far, &e, Tolerance::F32)).unwrap_err();
        let report = report.downcast_ref::<String>().unwrap();
        assert!(
            report.contains("O: 1 of 4 elements outside their bound; worst at [0, 0, 1, 1]"),
            "{report}"
        );
    }
}
