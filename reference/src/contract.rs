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

use ndarray::{Array3, Array4};

use crate::AttentionError;

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

/// Checks that `tensor` has exactly the shape of `reference` (for example `dO` and `Q`, or
/// `O` and `Q`), naming the first axis that differs.
pub fn check_same_shape<T, U>(
    tensor: &'static str,
    x: &Array4<T>,
    against: &'static str,
    reference: &Array4<U>,
) -> Result<(), AttentionError> {
    let (x, r): ([usize; 4], [usize; 4]) = (x.dim().into(), reference.dim().into());
    (0..4).try_for_each(|axis| check_axis(tensor, x, against, r, axis))
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
