//! The contract every forward implementation in the course follows.
//!
//! * Inputs: `Q [B, H, Nq, D]`, `K [B, H, Nkv, D]`, `V [B, H, Nkv, D]` (row-major
//!   `[batch, heads, seq, head_dim]`), a softmax scale (default `1/sqrt(D)`) and a `causal` flag.
//! * Outputs: `O [B, H, Nq, D]` and the logsumexp `L [B, H, Nq]` (natural log):
//!
//! $$ S = \mathrm{scale}\cdot QK^\top,\qquad
//!    L_i = \log \sum_{j\ \text{visible}} e^{S_{ij}},\qquad
//!    O_i = \sum_{j\ \text{visible}} e^{S_{ij} - L_i}\, V_j . $$
//!
//! * Causal masks are aligned **bottom-right**, as in FlashAttention 2.1 and later: query `i`
//!   sees key `j` iff `j <= i + Nkv - Nq`. When `Nq == Nkv` this is the usual lower triangle;
//!   when `Nq < Nkv` (decoding with a cache) the last query sees every key.
//! * A query row that sees no key (possible when `Nq > Nkv`) gives `O_i = 0` and `L_i = -inf`.
//!   That pair means exactly this and nothing else: bad data never produces it.
//!
//! ## Bad data is an error: the non-finite policy
//!
//! Every stage starts with [`check_inputs`]. NaN or an infinity anywhere in `Q`, `K` or `V` is
//! [`AttentionError::NonFinite`], naming the tensor and its first bad element; the backward
//! pass checks `dO`, `O` and `L` the same way ([`check_finite`], [`check_logsumexp`]). Why an
//! error rather than NaN carried through to the affected rows:
//!
//! * A NaN or an infinity in an input is a bug upstream (an overflow, a division by zero, an
//!   uninitialised buffer). An error that names the tensor and the index points at it; NaN in
//!   the output would surface layers later, far from its cause.
//! * IEEE NaN rules do not survive attention kernels: `max` ignores NaN (Rust's `f32::max`,
//!   WGSL's `max`, CUDA's `fmaxf`) and fast `exp` approximations clamp, so a NaN key silently
//!   drops out of the softmax, or a NaN query turns its row into the "sees no key" marker. To
//!   carry NaN faithfully, every stage would need extra tests in its innermost loop.
//! * The check is one pass over the inputs, `O((Nq + 2 Nkv) D)`, against the `O(Nq Nkv D)` of
//!   attention itself.
//!
//! The same pass refuses inputs whose logits could overflow f32
//! ([`AttentionError::LogitsOverflow`], see [`LARGEST_LOGIT`]), and the 16-bit stages refuse an
//! f32 input too large for their format ([`AttentionError::NotRepresentable`]) instead of
//! storing it as an infinity.

use ndarray::{Array3, Array4, ArrayBase, Data, Dimension, IntoDimension};

use crate::error::AttentionError;
use crate::error::NonFiniteValue;

/// Options shared by every forward implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionOptions {
    /// Softmax scale; `None` means the default `1/sqrt(D)`.
    pub scale: Option<f32>,
    /// Apply the bottom-right aligned causal mask.
    pub causal: bool,
}

impl AttentionOptions {
    /// Non-causal attention with the default scale `1/sqrt(D)`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Causal attention with the default scale.
    pub fn causal() -> Self {
        Self { scale: None, causal: true }
    }

    /// The same options with an explicit softmax scale.
    pub fn with_scale(self, scale: f32) -> Self {
        Self { scale: Some(scale), ..self }
    }

    /// The scale to use for head dimension `head_dim`: the explicit one, or `1/sqrt(D)`.
    pub fn scale_for(&self, head_dim: usize) -> Result<f32, AttentionError> {
        let scale = self.scale.unwrap_or(1.0 / (head_dim as f32).sqrt());
        if scale.is_finite() { Ok(scale) } else { Err(AttentionError::InvalidScale(scale)) }
    }
}

/// The validated sizes of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// `B`
    pub batch: usize,
    /// `H`
    pub heads: usize,
    /// `Nq`, the number of query rows.
    pub q_len: usize,
    /// `Nkv`, the number of keys (and values).
    pub kv_len: usize,
    /// `D`
    pub head_dim: usize,
}

const AXES: [&str; 4] = ["batch", "heads", "seq", "head_dim"];

impl AttentionShape {
    /// Checks that `q [B,H,Nq,D]`, `k [B,H,Nkv,D]` and `v [B,H,Nkv,D]` fit together and that no
    /// dimension is empty. Every stage calls this first.
    pub fn of<T>(q: &Array4<T>, k: &Array4<T>, v: &Array4<T>) -> Result<Self, AttentionError> {
        Self::from_dims(q.dim().into(), k.dim().into(), v.dim().into())
    }

    /// [`AttentionShape::of`] on bare shapes, for callers that hold other tensor types.
    pub fn from_dims(q: [usize; 4], k: [usize; 4], v: [usize; 4]) -> Result<Self, AttentionError> {
        for (tensor, shape) in [("Q", q), ("K", k), ("V", v)] {
            if let Some(axis) = shape.iter().position(|&n| n == 0) {
                return Err(AttentionError::EmptyDimension { tensor, axis: AXES[axis], shape });
            }
        }
        // K must agree with Q on batch, heads and head_dim; V must agree with K everywhere.
        for axis in [0, 1, 3] {
            check_axis("K", k, "Q", q, axis)?;
        }
        for axis in 0..4 {
            check_axis("V", v, "K", k, axis)?;
        }
        Ok(Self { batch: q[0], heads: q[1], q_len: q[2], kv_len: k[2], head_dim: q[3] })
    }

    // ANCHOR: visible_keys
    /// How many keys query row `row` may look at: keys `0..visible_keys(row)`.
    ///
    /// Without a mask that is every key. With the bottom-right causal mask, row `i` sees key `j`
    /// iff `j <= i + Nkv - Nq`, so the visible keys are a prefix of length
    /// `clamp(i + 1 + Nkv - Nq, 0, Nkv)`.
    pub fn visible_keys(&self, row: usize, causal: bool) -> usize {
        if causal {
            (row + 1 + self.kv_len).saturating_sub(self.q_len).min(self.kv_len)
        } else {
            self.kv_len
        }
    }
    // ANCHOR_END: visible_keys

    /// `Q`/`O` shape `[B, H, Nq, D]`.
    pub fn q_dims(&self) -> (usize, usize, usize, usize) {
        (self.batch, self.heads, self.q_len, self.head_dim)
    }

    /// `L` shape `[B, H, Nq]`.
    pub fn lse_dims(&self) -> (usize, usize, usize) {
        (self.batch, self.heads, self.q_len)
    }
}

/// The largest logit size attention in f32 is asked to compute with: a quarter of f32's
/// largest finite value. Kernels subtract the row maximum from a logit (which can double its
/// size) and exp2 kernels multiply it by `log2(e) = 1.44`; a quarter leaves room for both.
pub const LARGEST_LOGIT: f64 = f32::MAX as f64 / 4.0;

/// What every stage knows once its inputs are checked: the shape, the softmax scale, and how
/// large a logit can be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckedInputs {
    /// The validated sizes.
    pub shape: AttentionShape,
    /// The softmax scale: the explicit one, or `1/sqrt(D)`.
    pub scale: f32,
    /// `|scale| max_i |q_i| max_j |k_j|` (in f64): no logit is larger. A stage that stores
    /// logits in a narrower format than f32 checks it against that format's range.
    pub logit_bound: f64,
}

// ANCHOR: check_inputs
/// Everything a forward pass must know before it computes, or the error that says what is
/// wrong: shapes that fit together and are not empty ([`AttentionShape::of`]), a finite scale,
/// `Q`, `K` and `V` free of NaN and infinities, and logits that cannot overflow f32.
///
/// The logit bound uses Cauchy–Schwarz: every partial sum of `q_i . k_j` is at most
/// `|q_i| |k_j|`, so `max(|scale|, 1) * max_i |q_i| * max_j |k_j|` bounds every number a dot
/// product passes through, whether the kernel multiplies by the scale before or after it.
pub fn check_inputs<T: Copy + Into<f64>>(
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
) -> Result<CheckedInputs, AttentionError> {
    let shape = AttentionShape::of(q, k, v)?;
    let scale = options.scale_for(shape.head_dim)?;
    let q_norm = largest_row_norm("Q", q)?;
    let k_norm = largest_row_norm("K", k)?;
    check_finite("V", v)?;
    let bound = f64::from(scale).abs().max(1.0) * q_norm * k_norm;
    if bound > LARGEST_LOGIT {
        return Err(AttentionError::LogitsOverflow { bound, largest: LARGEST_LOGIT });
    }
    let logit_bound = f64::from(scale).abs() * q_norm * k_norm;
    Ok(CheckedInputs { shape, scale, logit_bound })
}
// ANCHOR_END: check_inputs

/// The largest Euclidean norm of a row (the last axis) of `x`, computed in f64 (0 when `x` is
/// empty); an error naming `tensor` if `x` holds NaN or an infinity.
pub fn largest_row_norm<S, T, D>(
    tensor: &'static str,
    x: &ArrayBase<S, D>,
) -> Result<f64, AttentionError>
where
    S: Data<Elem = T>,
    T: Copy + Into<f64>,
    D: Dimension,
{
    check_finite(tensor, x)?;
    let squared = x
        .rows()
        .into_iter()
        .map(|row| row.iter().map(|&a| a.into().powi(2)).sum::<f64>())
        .fold(0.0, f64::max);
    Ok(squared.sqrt())
}

/// [`AttentionError::NonFinite`] naming `tensor` and its first NaN or infinite element (in
/// row-major order), or `Ok` if every element is finite.
pub fn check_finite<S, T, D>(
    tensor: &'static str,
    x: &ArrayBase<S, D>,
) -> Result<(), AttentionError>
where
    S: Data<Elem = T>,
    T: Copy + Into<f64>,
    D: Dimension,
{
    let bad = |a: &T| NonFiniteValue::of((*a).into());
    if !x.iter().any(|a| bad(a).is_some()) {
        return Ok(()); // the common case: one pass, no index bookkeeping
    }
    let (index, value) = x
        .indexed_iter()
        .find_map(|(index, a)| bad(a).map(|value| (index, value)))
        .expect("a non-finite element was seen");
    let index = index.into_dimension().slice().to_vec();
    Err(AttentionError::NonFinite { tensor, index, value })
}

/// Checks a logsumexp given to a backward pass against the mask: no NaN or `+inf`, finite
/// wherever the row sees a key, and `-inf` exactly where it sees none.
pub fn check_logsumexp(
    lse: &Array3<f32>,
    shape: &AttentionShape,
    causal: bool,
) -> Result<(), AttentionError> {
    for ((b, h, i), &value) in lse.indexed_iter() {
        if value.is_nan() || value == f32::INFINITY {
            let value = NonFiniteValue::of(value.into()).expect("NaN or +inf");
            return Err(AttentionError::NonFinite { tensor: "L", index: vec![b, h, i], value });
        }
        let visible_keys = shape.visible_keys(i, causal);
        if (visible_keys == 0) != (value == f32::NEG_INFINITY) {
            return Err(AttentionError::InvalidLogsumexp { index: [b, h, i], value, visible_keys });
        }
    }
    Ok(())
}

/// Everything a backward pass must know before it computes: the forward's checks on `Q`, `K`,
/// `V` and the options ([`check_inputs`]), `O` and `dO` of `Q`'s shape and finite, and `L` of
/// the shape `[B, H, Nq]`, finite exactly where a row sees keys ([`check_logsumexp`]: an `L` of
/// `-inf` there would silently zero the row's gradients).
pub fn check_backward_inputs(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
) -> Result<CheckedInputs, AttentionError> {
    let checked = check_inputs(q, k, v, options)?;
    check_same_shape("dO", d_o, "Q", q)?;
    check_same_shape("O", &forward.o, "Q", q)?;
    check_lse_shape(&forward.lse, q)?;
    check_finite("dO", d_o)?;
    check_finite("O", &forward.o)?;
    check_logsumexp(&forward.lse, &checked.shape, options.causal)?;
    Ok(checked)
}

/// Checks that `tensor` has exactly the shape of `reference` (for example `dO` and `Q`, or
/// `O` and `Q`), naming the first axis that differs.
pub fn check_same_shape<T, U>(
    tensor: &'static str,
    x: &Array4<T>,
    against: &'static str,
    reference: &Array4<U>,
) -> Result<(), AttentionError> {
    check_dims(tensor, x.dim().into(), against, reference.dim().into())
}

/// [`check_same_shape`] on bare shapes: `shape` of `tensor` must be `expected`, the shape of
/// `against`.
pub fn check_dims(
    tensor: &'static str,
    shape: [usize; 4],
    against: &'static str,
    expected: [usize; 4],
) -> Result<(), AttentionError> {
    (0..4).try_for_each(|axis| check_axis(tensor, shape, against, expected, axis))
}

/// Checks that a logsumexp `lse` has the shape `[B, H, Nq]` of `q [B, H, Nq, D]`.
pub fn check_lse_shape<T, U>(lse: &Array3<T>, q: &Array4<U>) -> Result<(), AttentionError> {
    let (l, q): ([usize; 3], [usize; 4]) = (lse.dim().into(), q.dim().into());
    let as_4d = [l[0], l[1], l[2], q[3]]; // L has no head_dim axis to compare
    (0..3).try_for_each(|axis| check_axis("L", as_4d, "Q", q, axis))
}

fn check_axis(
    tensor: &'static str,
    shape: [usize; 4],
    against: &'static str,
    reference: [usize; 4],
    axis: usize,
) -> Result<(), AttentionError> {
    if shape[axis] == reference[axis] {
        Ok(())
    } else {
        Err(AttentionError::ShapeMismatch {
            tensor,
            against,
            axis: AXES[axis],
            expected: reference[axis],
            found: shape[axis],
        })
    }
}

/// What every forward implementation returns: `O [B, H, Nq, D]` and `L [B, H, Nq]`.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionOutput<T> {
    /// The attention output.
    pub o: Array4<T>,
    /// The logsumexp of each query row's visible scores (natural log); `-inf` for a row that
    /// sees no key.
    pub lse: Array3<T>,
}

impl AttentionOutput<f32> {
    /// The output of a call with this shape before any key is seen: `O = 0`, `L = -inf`.
    pub fn empty(shape: &AttentionShape) -> Self {
        Self {
            o: Array4::zeros(shape.q_dims()),
            lse: Array3::from_elem(shape.lse_dims(), f32::NEG_INFINITY),
        }
    }

    /// The same output in f64 (exactly), to compare one f32 result with another as if it were
    /// a reference.
    pub fn to_f64(&self) -> AttentionOutput<f64> {
        AttentionOutput { o: self.o.mapv(f64::from), lse: self.lse.mapv(f64::from) }
    }

    /// Bytes held by `O` and `L`.
    pub fn bytes(&self) -> usize {
        (self.o.len() + self.lse.len()) * size_of::<f32>()
    }
}

/// What a backward pass returns: the gradients of a scalar loss with respect to Q, K and V, given `dO = dLoss/dO`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients<T> {
    /// `dQ [B, H, Nq, D]`
    pub dq: Array4<T>,
    /// `dK [B, H, Nkv, D]`
    pub dk: Array4<T>,
    /// `dV [B, H, Nkv, D]`
    pub dv: Array4<T>,
}

// ANCHOR: forward_trait
/// The signature every forward implementation has: `Q [B,H,Nq,D]`, `K`, `V [B,H,Nkv,D]` and
/// the options in, `O` and `L` out. Extra parameters (tile sizes, a device) are bound by a
/// closure, so that one test body, one registry entry and one benchmark loop serve every stage.
pub trait Forward:
    Fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError>
{
}

impl<F> Forward for F where
    F: Fn(
        &Array4<f32>,
        &Array4<f32>,
        &Array4<f32>,
        &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>
{
}
// ANCHOR_END: forward_trait

/// The signature of a backward pass: the forward's inputs, its output (`O` and `L`, from which
/// `P` is recomputed) and `dO` in; `dQ`, `dK`, `dV` out.
pub trait Backward:
    Fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
    &AttentionOutput<f32>,
    &Array4<f32>,
) -> Result<Gradients<f32>, AttentionError>
{
}

impl<F> Backward for F where
    F: Fn(
        &Array4<f32>,
        &Array4<f32>,
        &Array4<f32>,
        &AttentionOptions,
        &AttentionOutput<f32>,
        &Array4<f32>,
    ) -> Result<Gradients<f32>, AttentionError>
{
}

/// Decoding with a KV cache, in two steps: [`Decoder::fill`] takes the keys and values of each
/// sequence so far, `[Hkv, len, D]` (lengths may differ from sequence to sequence), and returns
/// the filled cache; [`FilledCache::decode`] attends the queries of each sequence's last `Nq`
/// tokens, `q [B, Hq, Nq, D]`, to everything cached: `O [B, Hq, Nq, D]` and `L [B, Hq, Nq]`,
/// with the contract's bottom-right causal mask among them. `Hq` is a multiple of `Hkv`: query
/// head `h` reads K/V head `h / (Hq / Hkv)` (grouped-query attention).
pub trait Decoder {
    /// A cache holding `keys[b]` and `values[b]` for each sequence `b`, or why it cannot.
    fn fill(
        &self,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<Box<dyn FilledCache>, AttentionError>;
}

/// A filled KV cache, ready to decode (see [`Decoder`]).
pub trait FilledCache {
    /// Attention of the queries `q [B, Hq, Nq, D]` over the cache.
    fn decode(
        &self,
        q: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Problem, ProblemSpec};
    use ndarray::Array3;

    #[test]
    fn finite_inputs_pass_and_give_the_shape_and_scale() {
        let p = Problem::random(&ProblemSpec::new(1, 2, 3, 4, 16), 1);
        let checked = check_inputs(&p.q, &p.k, &p.v, &p.options).unwrap();
        assert_eq!((checked.shape.q_len, checked.shape.kv_len, checked.scale), (3, 4, 0.25));
    }

    #[test]
    fn the_first_non_finite_element_is_named() {
        let p = Problem::random(&ProblemSpec::new(1, 2, 3, 4, 5), 1);
        let mut v = p.v.clone();
        v[[0, 1, 3, 0]] = f32::NAN;
        v[[0, 0, 2, 4]] = f32::NEG_INFINITY; // earlier in row-major order
        let err = check_inputs(&p.q, &p.k, &v, &p.options).unwrap_err();
        let expected = vec![0, 0, 2, 4];
        assert_eq!(
            err,
            AttentionError::NonFinite {
                tensor: "V",
                index: expected,
                value: NonFiniteValue::MinusInfinity
            }
        );
        assert!(err.to_string().starts_with("V[0, 0, 2, 4] is -inf; expected finite numbers"));
    }

    #[test]
    fn logits_that_could_overflow_are_refused_and_large_ones_are_not() {
        let p = Problem::random(&ProblemSpec::new(1, 1, 2, 2, 4), 1);
        let absurd = p.options.with_scale(f32::MAX);
        let err = check_inputs(&p.q, &p.k, &p.v, &absurd).unwrap_err();
        assert!(
            matches!(err, AttentionError::LogitsOverflow { bound, .. } if bound > LARGEST_LOGIT)
        );
        // Logits of 1e30 are far from any use, but f32 computes them without overflowing.
        let large = p.options.with_scale(1e30);
        assert!(check_inputs(&p.q, &p.k, &p.v, &large).is_ok());
    }

    #[test]
    fn a_logsumexp_must_agree_with_the_mask() {
        // Nq = 3, Nkv = 1, causal: rows 0 and 1 see no key, row 2 sees one.
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 3, kv_len: 1, head_dim: 2 };
        let inf = f32::NEG_INFINITY;
        let l = |values: [f32; 3]| Array3::from_shape_vec((1, 1, 3), values.to_vec()).unwrap();
        assert!(check_logsumexp(&l([inf, inf, 0.5]), &shape, true).is_ok());
        let all_empty = check_logsumexp(&l([inf, inf, inf]), &shape, true).unwrap_err();
        assert_eq!(
            all_empty,
            AttentionError::InvalidLogsumexp { index: [0, 0, 2], value: inf, visible_keys: 1 }
        );
        assert!(all_empty.to_string().contains("row 2 sees 1 keys; expected the finite logsumexp"));
        let finite_for_empty = check_logsumexp(&l([0.0, inf, 0.5]), &shape, true).unwrap_err();
        assert!(finite_for_empty.to_string().contains("row 0 sees no key; expected -inf"));
        let nan = check_logsumexp(&l([inf, inf, f32::NAN]), &shape, true).unwrap_err();
        assert!(matches!(nan, AttentionError::NonFinite { tensor: "L", .. }));
        // Without the mask every row sees the key, so -inf is wrong everywhere.
        assert!(check_logsumexp(&l([inf, inf, 0.5]), &shape, false).is_err());
    }
}
