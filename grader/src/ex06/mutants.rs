//! The planted-bug implementation of exercise 06: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array2, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex06::{self, Fp8};
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
        /// e4m3 decoded with exponent bias 8 instead of 7.
        E4m3BiasEight => ex06::E4M3_DECODE,
        /// e4m3 exponent field 0 decoded as normal, `(1 + m/8) 2^-7`: no subnormals.
        E4m3NoSubnormals => ex06::E4M3_DECODE,
        /// `0x7F` decoded as 480, as if the format had no NaN there.
        E4m3NanAsNumber => ex06::E4M3_DECODE,
        /// f32 rounded toward zero (the mantissa truncated) instead of to the nearest code.
        E4m3Truncates => ex06::E4M3_ENCODE,
        /// Ties rounded away from zero instead of to the even code.
        E4m3TiesAway => ex06::E4M3_ENCODE,
        /// Values beyond 464 saturated to 448 instead of refused.
        E4m3Saturates => ex06::E4M3_ENCODE,
        /// Values below the smallest normal, 2^-6, flushed to zero.
        E4m3FlushesSubnormals => ex06::E4M3_ENCODE,
        /// One descale for the whole tensor instead of one per batch and head.
        DescalePerTensor => ex06::FP8_QUANTIZE,
        /// One descale per head, its amax taken over every batch.
        DescalePerHead => ex06::FP8_QUANTIZE,
        /// The scale `448 / amax` stored where the descale `amax / 448` belongs.
        ScaleStoredAsDescale => ex06::FP8_QUANTIZE,
        /// K's descale left out of the scores.
        KDescaleForgotten => ex06::FP8_ATTENTION,
        /// V's descale left out of the output.
        VDescaleForgotten => ex06::FP8_ATTENTION,
        /// Descales not checked: a negative or zero descale is computed with.
        DescaleNotChecked => ex06::FP8_ERRORS,
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

/// The non-negative finite e4m3 values, codes `0x00..=0x7E`, from the format's definition.
fn e4m3_values(bug: Option<PrecisionBug>) -> Vec<f32> {
    let bias = if bug == Some(PrecisionBug::E4m3BiasEight) { 8 } else { 7 };
    (0u8..=0x7E)
        .map(|code| {
            let (e, m) = (i32::from(code >> 3), f32::from(code & 7) / 8.0);
            match e {
                0 if bug == Some(PrecisionBug::E4m3NoSubnormals) => (1.0 + m) * 2f32.powi(-bias),
                0 => m * 2f32.powi(1 - bias),
                _ => (1.0 + m) * 2f32.powi(e - bias),
            }
        })
        .collect()
}

impl Planted<PrecisionBug> {
    /// The e4m3 code of `x` by search over the values: the nearest, the even one on a tie.
    fn encode(&self, x: f32) -> Option<u8> {
        let values = e4m3_values(None);
        let a = x.abs();
        let limit = if self.has(PrecisionBug::E4m3Saturates) { f32::MAX } else { 464.0 };
        if !x.is_finite() || a > limit {
            return None;
        }
        let code = if self.has(PrecisionBug::E4m3FlushesSubnormals) && a < 2f32.powi(-6) {
            0
        } else if self.has(PrecisionBug::E4m3Truncates) {
            values.iter().rposition(|&v| v <= a).unwrap_or(0)
        } else {
            let distance = |c: usize| (values[c] - a).abs();
            let tie_break = |c: usize| match self.has(PrecisionBug::E4m3TiesAway) {
                true => usize::MAX - c, // the larger magnitude
                false => c % 2,         // the even code
            };
            (0..values.len())
                .min_by(|&c, &d| {
                    distance(c).total_cmp(&distance(d)).then(tie_break(c).cmp(&tie_break(d)))
                })
                .unwrap_or(0)
        };
        Some(if x.is_sign_negative() { 0x80 } else { 0 } | code as u8)
    }

    /// The value of an e4m3 code.
    fn decode(&self, code: u8) -> f32 {
        let magnitude = match code & 0x7F {
            0x7F if self.has(PrecisionBug::E4m3NanAsNumber) => 480.0,
            0x7F => f32::NAN,
            c => e4m3_values(self.bug)[usize::from(c)],
        };
        if code & 0x80 == 0 { magnitude } else { -magnitude }
    }

    /// `x` in e4m3 with one descale per batch and head.
    fn quantize_fp8(&self, x: &Array4<f32>, tensor: &'static str) -> Result<Fp8, AttentionError> {
        reference::check_finite(tensor, x)?;
        let (batch, heads, _, _) = x.dim();
        let largest = |t: ndarray::ArrayViewD<f32>| t.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let whole_tensor = largest(x.view().into_dyn());
        let mut descale = Array2::zeros((batch, heads));
        let mut codes = Array4::zeros(x.dim());
        for b in 0..batch {
            for h in 0..heads {
                let amax = match self.bug {
                    Some(PrecisionBug::DescalePerTensor) => whole_tensor,
                    Some(PrecisionBug::DescalePerHead) => {
                        largest(x.slice(s![.., h, .., ..]).into_dyn())
                    }
                    _ => largest(x.slice(s![b, h, .., ..]).into_dyn()),
                };
                let d = (amax / 448.0).max(f32::MIN_POSITIVE);
                let stored = if self.has(PrecisionBug::ScaleStoredAsDescale) { 1.0 / d } else { d };
                descale[[b, h]] = stored;
                for n in 0..x.dim().2 {
                    for c in 0..x.dim().3 {
                        codes[[b, h, n, c]] =
                            self.encode(x[[b, h, n, c]] / d).ok_or_else(|| {
                                AttentionError::InvalidFeature {
                                    feature: "e4m3",
                                    found: x[[b, h, n, c]].to_string(),
                                    expected: "a value within 464 descales".to_string(),
                                }
                            })?;
                    }
                }
            }
        }
        Ok(Fp8 { codes, descale })
    }

    /// The f32 values `x` stands for, its descales checked unless that check is the bug.
    fn widen_fp8(
        &self,
        x: &Fp8,
        tensor: &'static str,
        use_descale: bool,
    ) -> Result<Array4<f32>, AttentionError> {
        let (batch, heads, _, _) = x.codes.dim();
        let bad = x.descale.iter().any(|d| !(d.is_finite() && *d > 0.0));
        if !self.has(PrecisionBug::DescaleNotChecked) && (x.descale.dim() != (batch, heads) || bad)
        {
            return Err(AttentionError::InvalidFeature {
                feature: super::solution::descale_name(tensor),
                found: format!("{:?}", x.descale),
                expected: "one positive finite number per batch and head".to_string(),
            });
        }
        Ok(Array4::from_shape_fn(x.codes.dim(), |(b, h, n, c)| {
            let d = if use_descale { x.descale.get([b, h]).copied().unwrap_or(1.0) } else { 1.0 };
            d * self.decode(x.codes[[b, h, n, c]])
        }))
    }
}

impl crate::ex06::Exercise06 for Planted<PrecisionBug> {
    fn e4m3_to_f32(&self, code: u8) -> f32 {
        self.decode(code)
    }

    fn f32_to_e4m3(&self, x: f32) -> Option<u8> {
        self.encode(x)
    }

    fn quantize(&self, x: &Array4<f32>, tensor: &'static str) -> Result<Fp8, AttentionError> {
        self.quantize_fp8(x, tensor)
    }

    fn attention_fp8(
        &self,
        q: &Fp8,
        k: &Fp8,
        v: &Fp8,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let q = self.widen_fp8(q, "Q", true)?;
        let k = self.widen_fp8(k, "K", !self.has(PrecisionBug::KDescaleForgotten))?;
        let v = self.widen_fp8(v, "V", !self.has(PrecisionBug::VDescaleForgotten))?;
        let out = precision_online(self.bug, &q, &k, &v, options)?;
        Ok(AttentionOutput { o: out.o, lse: out.lse })
    }

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
