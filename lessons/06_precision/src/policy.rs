//! A precision policy: tensors carry their format, mixing formats is an error, and a "safe"
//! wrapper runs attention in a 16-bit format for f32 callers.

use half::{bf16, f16};
use ndarray::{Array3, Array4};
use reference::{AttentionError, AttentionOptions, AttentionOutput, check_inputs};

use crate::attention::{Output, flash, naive};
use crate::element::{Dtype, Element, round_checked, widen};

/// A `[B, H, N, D]` tensor in one of the course's formats.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    /// f32 storage.
    F32(Array4<f32>),
    /// f16 storage.
    F16(Array4<f16>),
    /// bf16 storage.
    BF16(Array4<bf16>),
}

impl Tensor {
    /// The tensor's format.
    pub fn dtype(&self) -> Dtype {
        match self {
            Self::F32(_) => Dtype::F32,
            Self::F16(_) => Dtype::F16,
            Self::BF16(_) => Dtype::BF16,
        }
    }

    /// The values, widened to f32.
    pub fn to_f32(&self) -> Array4<f32> {
        match self {
            Self::F32(x) => x.clone(),
            Self::F16(x) => widen(x),
            Self::BF16(x) => widen(x),
        }
    }
}

/// Which algorithm to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// [`crate::naive`]: `S` and `P` stored in the tensors' format.
    Naive,
    /// [`crate::flash`]: f32 tiles, `O` rounded once.
    Flash,
}

// ANCHOR: dispatch
/// Attention on tensors of any one format. Q, K and V must share it: mixing formats is an
/// [`AttentionError::MixedDtypes`], never a silent conversion. Returns `O` in that format and
/// `L` in f32.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    options: &AttentionOptions,
    algorithm: Algorithm,
) -> Result<(Tensor, Array3<f32>), AttentionError> {
    fn run<T: Element>(
        q: &Array4<T>,
        k: &Array4<T>,
        v: &Array4<T>,
        options: &AttentionOptions,
        algorithm: Algorithm,
    ) -> Result<Output<T>, AttentionError> {
        match algorithm {
            Algorithm::Naive => naive(q, k, v, options),
            Algorithm::Flash => flash(q, k, v, options, lesson03::TileSizes::default()),
        }
    }
    match (q, k, v) {
        (Tensor::F32(q), Tensor::F32(k), Tensor::F32(v)) => {
            run(q, k, v, options, algorithm).map(|out| (Tensor::F32(out.o), out.lse))
        }
        (Tensor::F16(q), Tensor::F16(k), Tensor::F16(v)) => {
            run(q, k, v, options, algorithm).map(|out| (Tensor::F16(out.o), out.lse))
        }
        (Tensor::BF16(q), Tensor::BF16(k), Tensor::BF16(v)) => {
            run(q, k, v, options, algorithm).map(|out| (Tensor::BF16(out.o), out.lse))
        }
        _ => Err(AttentionError::MixedDtypes {
            q: q.dtype().name(),
            k: k.dtype().name(),
            v: v.dtype().name(),
        }),
    }
}
// ANCHOR_END: dispatch

// ANCHOR: safe
/// The "safe" wrapper: f32 in, f32 out, computed in `dtype`. The inputs are rounded to
/// `dtype` (as a model running in that format would hold them; a value the format cannot hold
/// is an [`AttentionError::NotRepresentable`]), the flash kernel runs with f32 statistics and
/// accumulation, and `O` is widened back to f32.
pub fn attention_in_precision(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    dtype: Dtype,
) -> Result<AttentionOutput<f32>, AttentionError> {
    fn run<T: Element>(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        // Shapes, NaN and the scale are checked on the f32 inputs; then every value must fit
        // the format (an f32 1e5 has no f16 value: an error, not an infinity).
        check_inputs(q, k, v, options)?;
        let (q, k, v) = (round_checked("Q", q)?, round_checked("K", k)?, round_checked("V", v)?);
        let out = flash::<T>(&q, &k, &v, options, lesson03::TileSizes::default())?;
        Ok(AttentionOutput { o: widen(&out.o), lse: out.lse })
    }
    match dtype {
        Dtype::F32 => run::<f32>(q, k, v, options),
        Dtype::F16 => run::<f16>(q, k, v, options),
        Dtype::BF16 => run::<bf16>(q, k, v, options),
    }
}
// ANCHOR_END: safe
