//! The one error type every stage returns for bad input.

use std::fmt;

/// What was wrong with the inputs of an attention call, and what was expected instead.
///
/// Every stage of the course validates its inputs through [`crate::AttentionShape::of`] and
/// returns this error instead of panicking or computing a silent wrong answer.
#[derive(Clone, Debug, PartialEq)]
pub enum AttentionError {
    /// A tensor has a dimension of size zero.
    EmptyDimension {
        /// `"Q"`, `"K"` or `"V"`.
        tensor: &'static str,
        /// The axis name, e.g. `"seq"`.
        axis: &'static str,
        /// The tensor's full shape.
        shape: [usize; 4],
    },
    /// Two tensors disagree on an axis that must match.
    ShapeMismatch {
        /// The tensor whose axis is wrong (`"K"` or `"V"`).
        tensor: &'static str,
        /// The tensor it is compared with (`"Q"` or `"K"`).
        against: &'static str,
        /// The axis name, e.g. `"head_dim"`.
        axis: &'static str,
        /// The size the axis must have.
        expected: usize,
        /// The size it has.
        found: usize,
    },
    /// The softmax scale is NaN or infinite.
    InvalidScale(f32),
    /// The tiles' working set does not fit in the fast memory it must live in.
    TilesDoNotFit {
        /// Bytes the tiles need.
        needed: usize,
        /// Bytes of fast memory available.
        available: usize,
    },
    /// Q, K and V are stored in different number formats.
    MixedDtypes {
        /// Q's format, e.g. `"f16"`.
        q: &'static str,
        /// K's format.
        k: &'static str,
        /// V's format.
        v: &'static str,
    },
    /// A tile size is zero.
    InvalidTileSize {
        /// Which tile size, e.g. `"query rows (Br)"`.
        which: &'static str,
        /// The value given.
        value: usize,
    },
    /// A tile size is larger than a kernel was written for.
    TileTooLarge {
        /// Which tile size, e.g. `"key columns (Bc)"`.
        which: &'static str,
        /// The value given.
        value: usize,
        /// The largest value the kernel supports.
        max: usize,
    },
    /// The head dimension is larger than a kernel was written for.
    UnsupportedHeadDim {
        /// The head dimension given.
        head_dim: usize,
        /// The largest one the kernel supports.
        max: usize,
    },
    /// The problem needs more of a device resource than the device offers (a buffer larger
    /// than its largest binding, more workgroups than one dispatch may launch, ...).
    ExceedsDeviceLimit {
        /// What is too large, e.g. `"the score matrix S"`.
        what: String,
        /// How much of it the problem needs.
        needed: u64,
        /// How much the device allows, and the name of the limit.
        limit: u64,
        /// The `wgpu::Limits` field (or feature) that sets the limit.
        limit_name: &'static str,
    },
    /// The GPU could not be used: no adapter, a lost device, a shader the driver rejected.
    Gpu(String),
}

impl fmt::Display for AttentionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyDimension { tensor, axis, shape } => write!(
                f,
                "{tensor} has an empty `{axis}` axis (shape {shape:?}); every dimension of \
                 [batch, heads, seq, head_dim] must be at least 1"
            ),
            Self::ShapeMismatch { tensor, against, axis, expected, found } => write!(
                f,
                "{tensor} has {axis} = {found} but {against} has {axis} = {expected}; expected \
                 Q [B, H, Nq, D], K [B, H, Nkv, D] and V [B, H, Nkv, D] with the same B, H and D \
                 and K, V of the same length Nkv"
            ),
            Self::InvalidScale(scale) => {
                write!(
                    f,
                    "the softmax scale is {scale}; expected a finite number such as 1/sqrt(D)"
                )
            }
            Self::TilesDoNotFit { needed, available } => write!(
                f,
                "the tiles need {needed} bytes of fast memory but only {available} are available; \
                 expected smaller tiles or more fast memory"
            ),
            Self::MixedDtypes { q, k, v } => write!(
                f,
                "Q is {q}, K is {k} and V is {v}; expected all three in the same format (convert \
                 them first, for example with attention_in_precision)"
            ),
            Self::InvalidTileSize { which, value } => {
                write!(f, "tile size for {which} is {value}; expected at least 1")
            }
            Self::TileTooLarge { which, value, max } => {
                write!(
                    f,
                    "tile size for {which} is {value}; expected at most {max} for this kernel"
                )
            }
            Self::UnsupportedHeadDim { head_dim, max } => write!(
                f,
                "head_dim = {head_dim} is larger than this kernel supports; expected at most {max}"
            ),
            Self::ExceedsDeviceLimit { what, needed, limit, limit_name } => write!(
                f,
                "{what} needs {needed} but the device allows at most {limit} ({limit_name}); \
                 expected a smaller problem (fewer heads, shorter sequences) or a larger device"
            ),
            Self::Gpu(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for AttentionError {}
