//! The one error type every stage returns for bad input.

use std::fmt;
use std::sync::Arc;

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
    /// An input holds NaN or an infinity (the contract's non-finite policy: bad data is an
    /// error, never a silent answer; see [`crate::contract`]).
    NonFinite {
        /// `"Q"`, `"K"`, `"V"`, `"dO"`, `"O"` or `"L"`.
        tensor: &'static str,
        /// The first bad element, in row-major order.
        index: Vec<usize>,
        /// What it holds.
        value: NonFiniteValue,
    },
    /// A finite f32 input is too large for the 16-bit format it must be stored in.
    NotRepresentable {
        /// `"Q"`, `"K"` or `"V"`.
        tensor: &'static str,
        /// The first element that does not fit.
        index: Vec<usize>,
        /// Its value.
        value: f32,
        /// The format, e.g. `"f16"`.
        format: &'static str,
        /// The format's largest finite value.
        largest: f32,
    },
    /// The scale and the inputs allow logits beyond what f32 can hold.
    LogitsOverflow {
        /// A bound on every number the logits' dot products pass through (in f64).
        bound: f64,
        /// The largest the computation can hold: [`crate::contract::LARGEST_LOGIT`] for f32
        /// arithmetic, a 16-bit format's largest value where logits are stored in it.
        largest: f64,
    },
    /// The logsumexp given to a backward pass disagrees with the mask: `-inf` for a row that
    /// sees keys, or finite for a row that sees none.
    InvalidLogsumexp {
        /// `[b, h, i]`
        index: [usize; 3],
        /// The value given.
        value: f32,
        /// How many keys the row sees.
        visible_keys: usize,
    },
    /// An option of FlashAttention's features ([`crate::features`]) is out of its range: ALiBi
    /// slopes that are not one finite number per head, a softcap that is not a positive finite
    /// number, a dropout probability outside `[0, 1)`.
    InvalidFeature {
        /// Which feature, e.g. `"ALiBi slopes"`.
        feature: &'static str,
        /// What was given.
        found: String,
        /// What is expected instead.
        expected: String,
    },
    /// A key/value cache was asked for something it cannot do (lesson 11): a position beyond
    /// its capacity, a sequence it does not hold, a block table that names a missing block, an
    /// empty sequence. Nothing was written to the cache.
    Cache {
        /// What was asked, e.g. `"appending to sequence 3"`.
        what: String,
        /// What was found.
        found: String,
        /// What is expected instead.
        expected: String,
    },
    /// The device a stage runs on failed or refused the problem: no adapter, a limit the
    /// problem exceeds, a shader the driver rejected. The cause keeps its own type (the `gpu`
    /// crate's `GpuError`), so this crate stays free of any device API.
    Device(DeviceError),
}

/// A device's own error, carried inside [`AttentionError::Device`] with its type kept.
///
/// The device crate defines the error and converts it with `From`; a caller that needs the
/// details gets them back with [`DeviceError::downcast_ref`]. Two device errors are equal when
/// they say the same thing.
#[derive(Clone, Debug)]
pub struct DeviceError(Arc<dyn std::error::Error + Send + Sync>);

impl DeviceError {
    /// Wraps a device crate's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The device crate's error, if it is of type `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl PartialEq for DeviceError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The non-finite value an input held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonFiniteValue {
    /// Not a number.
    NaN,
    /// `+inf`
    PlusInfinity,
    /// `-inf`
    MinusInfinity,
}

impl NonFiniteValue {
    /// What `x` is, or `None` if it is finite.
    pub fn of(x: f64) -> Option<Self> {
        if x.is_nan() {
            Some(Self::NaN)
        } else if x == f64::INFINITY {
            Some(Self::PlusInfinity)
        } else if x == f64::NEG_INFINITY {
            Some(Self::MinusInfinity)
        } else {
            None
        }
    }
}

impl fmt::Display for NonFiniteValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NaN => "NaN",
            Self::PlusInfinity => "+inf",
            Self::MinusInfinity => "-inf",
        })
    }
}

/// `[0, 1, 5, 3]` as `0, 1, 5, 3`, for messages like `Q[0, 1, 5, 3]`.
fn indices(index: &[usize]) -> String {
    index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
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
            Self::NonFinite { tensor, index, value } => write!(
                f,
                "{tensor}[{}] is {value}; expected finite numbers (NaN and infinities are \
                 rejected, not computed with: look for an overflow or a division by zero where \
                 {tensor} was made)",
                indices(index)
            ),
            Self::NotRepresentable { tensor, index, value, format, largest } => write!(
                f,
                "{tensor}[{}] = {value} is too large for {format} (largest finite {largest}); \
                 expected values within the format's range: scale the inputs down, or use bf16, \
                 which has f32's range",
                indices(index)
            ),
            Self::LogitsOverflow { bound, largest } => write!(
                f,
                "the logits can reach {bound:.3e} (from the largest |q|, the largest |k| and the \
                 scale), more than the {largest:.3e} this computation can hold; expected a \
                 smaller scale (usually 1/sqrt(D)) or smaller inputs"
            ),
            Self::InvalidLogsumexp { index: [b, h, i], value, visible_keys } => {
                if *visible_keys == 0 {
                    write!(
                        f,
                        "L[{b}, {h}, {i}] = {value} but row {i} sees no key; expected -inf, \
                         as the forward pass returns for a row that sees no key"
                    )
                } else {
                    write!(
                        f,
                        "L[{b}, {h}, {i}] = {value} but row {i} sees {visible_keys} keys; \
                         expected the finite logsumexp the forward pass returned for it"
                    )
                }
            }
            Self::InvalidFeature { feature, found, expected } => {
                write!(f, "{feature}: {found}; expected {expected}")
            }
            Self::Cache { what, found, expected } => {
                write!(f, "KV cache, {what}: {found}; expected {expected}")
            }
            Self::Device(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for AttentionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Device(error) => Some(&*error.0),
            _ => None,
        }
    }
}
