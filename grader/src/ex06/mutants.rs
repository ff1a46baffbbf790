//! The planted-bug implementation of exercise 06: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, CheckedInputs, check_inputs};

use crate::ex06;
use crate::mutants::{Planted, planted_bugs, rows};

planted_bugs! {
    /// Classic mistakes in half-precision attention (exercise 06).
    pub enum PrecisionBug {
        /// The softmax sum `l` kept in the storage format.
        SumInStorageFormat => ex06::LONG_ROW,
        /// The output accumulator rounded to the storage format at every key.
        AccumulatorInStorageFormat => ex06::LONG_ROW,
        /// `e^s` without subtracting the running maximum.
        MaxNotSubtracted => ex06::LARGE_LOGITS,
        /// `L` rounded to the storage format.
        LseRounded => ex06::F16,
        /// Mixed formats silently widened to f32 instead of rejected.
        MixedFormatsConverted => ex06::MIXED_FORMATS,
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => ex06::F16,
    }
}

/// Online attention, one key at a time, on `T` storage, with `bug`.
fn precision_online<T: lesson06::Element>(
    bug: Option<PrecisionBug>,
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
) -> Result<lesson06::Output<T>, AttentionError> {
    let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
    if bug == Some(PrecisionBug::NoScale) {
        scale = 1.0;
    }
    let keep = |x: f32, rounded: bool| if rounded { T::from_f32(x).to_f32() } else { x };
    let mut o = Array4::from_elem(q.dim(), T::from_f32(0.0));
    let mut lse = ndarray::Array3::from_elem(shape.lse_dims(), f32::NEG_INFINITY);
    for (b, h, i) in rows(&shape) {
        let (mut m, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, vec![0.0f32; shape.head_dim]);
        for j in 0..shape.visible_keys(i, options.causal) {
            let s: f32 = scale
                * (0..shape.head_dim)
                    .map(|c| q[[b, h, i, c]].to_f32() * k[[b, h, j, c]].to_f32())
                    .sum::<f32>();
            let new_m = if bug == Some(PrecisionBug::MaxNotSubtracted) { 0.0 } else { m.max(s) };
            let correction = if m == f32::NEG_INFINITY { 0.0 } else { (m - new_m).exp() };
            let p = (s - new_m).exp();
            l = keep(l * correction + p, bug == Some(PrecisionBug::SumInStorageFormat));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = keep(
                    *a * correction + p * v[[b, h, j, c]].to_f32(),
                    bug == Some(PrecisionBug::AccumulatorInStorageFormat),
                );
            }
            m = new_m;
        }
        if l > 0.0 {
            for (c, a) in acc.iter().enumerate() {
                o[[b, h, i, c]] = T::from_f32(a / l);
            }
            lse[[b, h, i]] = keep(m + l.ln(), bug == Some(PrecisionBug::LseRounded));
        }
    }
    Ok(lesson06::Output { o, lse })
}

impl crate::ex06::Exercise06 for Planted<PrecisionBug> {
    fn attention_f16(
        &self,
        q: &Array4<half::f16>,
        k: &Array4<half::f16>,
        v: &Array4<half::f16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::f16>, AttentionError> {
        precision_online(self.bug, q, k, v, options)
    }

    fn attention_bf16(
        &self,
        q: &Array4<half::bf16>,
        k: &Array4<half::bf16>,
        v: &Array4<half::bf16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::bf16>, AttentionError> {
        precision_online(self.bug, q, k, v, options)
    }

    fn dispatch(
        &self,
        q: &lesson06::policy::Tensor,
        k: &lesson06::policy::Tensor,
        v: &lesson06::policy::Tensor,
        options: &AttentionOptions,
    ) -> Result<(lesson06::policy::Tensor, ndarray::Array3<f32>), AttentionError> {
        use lesson06::policy::Tensor;
        match (q, k, v) {
            (Tensor::F16(q), Tensor::F16(k), Tensor::F16(v)) => {
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::F16(out.o), out.lse))
            }
            (Tensor::BF16(q), Tensor::BF16(k), Tensor::BF16(v)) => {
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::BF16(out.o), out.lse))
            }
            (Tensor::F32(q), Tensor::F32(k), Tensor::F32(v)) => {
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::F32(out.o), out.lse))
            }
            _ if self.has(PrecisionBug::MixedFormatsConverted) => {
                precision_online(self.bug, &q.to_f32(), &k.to_f32(), &v.to_f32(), options)
                    .map(|out| (Tensor::F32(out.o), out.lse))
            }
            _ => Err(AttentionError::MixedDtypes {
                q: q.dtype().name(),
                k: k.dtype().name(),
                v: v.dtype().name(),
            }),
        }
    }
}
