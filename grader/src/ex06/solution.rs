//! The reference solution of exercise 06's main task: attention on FP8 inputs (e4m3, the
//! format of FlashAttention-3's FP8 path) with one descale per batch and head. It lives here,
//! not in a lesson, because the book only explains the idea: the learner writes this part.
//!
//! An e4m3 code is the byte `s eeee mmm`: sign, 4 exponent bits with bias 7, 3 mantissa bits.
//! Exponent field 0 holds the subnormals `m/8 * 2^-6`; the others `(1 + m/8) * 2^(e - 7)`, up
//! to `1.75 * 2^8 = 448`; `s 1111 111` is NaN and there are no infinities.

use ndarray::{Array2, Array4, ArrayView2, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, check_finite};

use super::Fp8;

/// The largest finite e4m3 value, `1.75 * 2^8`.
pub const E4M3_LARGEST: f32 = 448.0;

/// The smallest normal e4m3 value, `2^-6`; below it the codes are evenly spaced by `2^-9`.
const SMALLEST_NORMAL: f32 = 1.0 / 64.0;

/// The value of an e4m3 code: `±(1 + m/8) 2^(e-7)`, `±(m/8) 2^-6` for `e = 0`, NaN for
/// `0x7F` and `0xFF`.
pub fn e4m3_to_f32(code: u8) -> f32 {
    let sign = if code & 0x80 == 0 { 1.0 } else { -1.0 };
    let exponent = i32::from((code >> 3) & 0x0F);
    let mantissa = f32::from(code & 0x07) / 8.0;
    let magnitude = match exponent {
        15 if code & 0x07 == 0x07 => return f32::NAN,
        0 => mantissa * SMALLEST_NORMAL,
        e => (1.0 + mantissa) * 2f32.powi(e - 7),
    };
    sign * magnitude
}

/// The e4m3 code nearest to `x`, ties to the code with an even mantissa; `None` for NaN, the
/// infinities and values that round beyond 448 (`|x| > 464`; 464 itself is a tie between 448
/// and the 480 the format lacks, and goes to 448's even mantissa).
pub fn f32_to_e4m3(x: f32) -> Option<u8> {
    if !x.is_finite() {
        return None;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0x00 };
    let magnitude = x.abs();
    // Codes are evenly spaced within a binade [2^e, 2^(e+1)): 8 steps of 2^(e-3). Below the
    // smallest normal the subnormals continue the spacing of the first binade, 2^-9.
    let step = 2f32.powi(binade(magnitude.max(SMALLEST_NORMAL)) - 3);
    // Dividing by a power of two is exact, so this rounds once, as the format does.
    let rounded = (magnitude / step).round_ties_even() * step;
    if rounded > E4M3_LARGEST {
        return None;
    }
    Some(sign | code_of_magnitude(rounded))
}

/// The code of a non-negative e4m3 value (after rounding, which may have carried it into the
/// next binade).
fn code_of_magnitude(value: f32) -> u8 {
    if value < SMALLEST_NORMAL {
        return (value / (SMALLEST_NORMAL / 8.0)) as u8; // subnormal: the mantissa field alone
    }
    let e = binade(value);
    let mantissa = (value / 2f32.powi(e) - 1.0) * 8.0;
    (((e + 7) as u8) << 3) | mantissa as u8
}

/// `floor(log2(x))` of a positive normal f32, read from its exponent bits.
fn binade(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xFF) as i32 - 127
}

/// `x [B, H, N, D]` quantized to e4m3 with one descale per `(batch, head)`:
/// `max(amax / 448, f32::MIN_POSITIVE)`, where amax is the slice's largest `|x|`, so that the
/// largest element becomes 448 and a slice of zeros still has a positive descale.
pub fn quantize(x: &Array4<f32>, tensor: &'static str) -> Result<Fp8, AttentionError> {
    check_finite(tensor, x)?;
    let (batch, heads, _, _) = x.dim();
    let mut codes = Array4::zeros(x.dim());
    let mut descale = Array2::zeros((batch, heads));
    for ((b, h), d) in descale.indexed_iter_mut() {
        let slice = x.slice(s![b, h, .., ..]);
        let amax = slice.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        *d = (amax / E4M3_LARGEST).max(f32::MIN_POSITIVE);
        for ((n, c), &value) in slice.indexed_iter() {
            // |value / d| <= 448 (up to one rounding of the division): always a code.
            codes[[b, h, n, c]] =
                f32_to_e4m3(value / *d).ok_or_else(|| AttentionError::NotRepresentable {
                    tensor,
                    index: vec![b, h, n, c],
                    value,
                    format: "e4m3",
                    largest: E4M3_LARGEST,
                })?;
        }
    }
    Ok(Fp8 { codes, descale })
}

/// Attention on FP8 inputs, computed in f32 (exactly as the warm-up's, on the values the codes
/// stand for): `O [B, H, Nq, D]` and `L [B, H, Nq]` in f32.
///
/// Here each input is widened to f32 first, `descale * value(code)`, which is what the f64
/// oracle is given too. A GPU kernel keeps the codes for its FP8 tensor cores and folds the
/// descales in instead: `S = (scale d_q d_k) Q8 K8^T`, `O = d_v (P V8) / l`.
pub fn attention_fp8(
    q: &Fp8,
    k: &Fp8,
    v: &Fp8,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let q = dequantize(q, "Q")?;
    let k = dequantize(k, "K")?;
    let v = dequantize(v, "V")?;
    // check_inputs (inside) finds bad shapes, NaN codes (NaN after widening) and logits that
    // would overflow with these descales.
    let out = lesson06::flash(&q, &k, &v, options, lesson03::TileSizes::default())?;
    Ok(AttentionOutput { o: out.o, lse: out.lse })
}

/// The f32 values `descale[b, h] * value(code)` of `x`, after checking that its descales are
/// one positive finite number per batch and head.
pub fn dequantize(x: &Fp8, tensor: &'static str) -> Result<Array4<f32>, AttentionError> {
    check_descale(x.descale.view(), x.codes.dim(), tensor)?;
    Ok(Array4::from_shape_fn(x.codes.dim(), |(b, h, n, c)| {
        x.descale[[b, h]] * e4m3_to_f32(x.codes[[b, h, n, c]])
    }))
}

/// [`AttentionError::InvalidFeature`] naming `"<tensor> descale"` unless `descale` is `[B, H]`
/// of `codes_dim` and holds positive finite numbers.
fn check_descale(
    descale: ArrayView2<f32>,
    codes_dim: (usize, usize, usize, usize),
    tensor: &'static str,
) -> Result<(), AttentionError> {
    let feature = descale_name(tensor);
    let (batch, heads, _, _) = codes_dim;
    if descale.dim() != (batch, heads) {
        return Err(AttentionError::InvalidFeature {
            feature,
            found: format!("shape {:?}", descale.shape()),
            expected: format!("shape [{batch}, {heads}], one per batch and head of {tensor}"),
        });
    }
    match descale.indexed_iter().find(|(_, d)| !(d.is_finite() && **d > 0.0)) {
        None => Ok(()),
        Some(((b, h), d)) => Err(AttentionError::InvalidFeature {
            feature,
            found: format!("{d} at [{b}, {h}]"),
            expected: "a positive finite number per batch and head".to_string(),
        }),
    }
}

/// `"Q descale"`, `"K descale"` or `"V descale"`: the feature named by a bad descale's error.
pub fn descale_name(tensor: &str) -> &'static str {
    match tensor {
        "Q" => "Q descale",
        "K" => "K descale",
        _ => "V descale",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decode_to_the_values_worked_by_hand() {
        // s eeee mmm: 0 0111 000 = 1, 0 1111 110 = 1.75 * 2^8, 0 0000 001 = 2^-9 (subnormal).
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0xB8), -1.0);
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0x77), 240.0);
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
    }

    #[test]
    fn values_round_to_the_nearest_code_ties_to_even() {
        assert_eq!(f32_to_e4m3(1.0), Some(0x38));
        assert_eq!(f32_to_e4m3(1.0625), Some(0x38)); // halfway to 1.125 (odd): stays at 1
        assert_eq!(f32_to_e4m3(1.1875), Some(0x3A)); // halfway 1.125 - 1.25: to 1.25 (even)
        assert_eq!(f32_to_e4m3(1.97), Some(0x40)); // carries into the next binade: 2
        assert_eq!(f32_to_e4m3(2f32.powi(-10)), Some(0x00)); // halfway 0 - 2^-9: to 0
        assert_eq!(f32_to_e4m3(2f32.powi(-10).next_up()), Some(0x01));
        assert_eq!(f32_to_e4m3(15.5 / 1024.0), Some(0x08)); // subnormal rounds up to 2^-6
        assert_eq!(f32_to_e4m3(464.0), Some(0x7E));
        assert_eq!(f32_to_e4m3(464f32.next_up()), None);
        assert_eq!(f32_to_e4m3(-0.3), Some(0x80 | 0x2A)); // -0.3 -> -0.3125 = -1.25 * 2^-2
        assert_eq!(f32_to_e4m3(f32::NAN), None);
    }

    #[test]
    fn quantize_maps_each_heads_largest_value_to_448() {
        let x = Array4::from_shape_vec((1, 2, 1, 2), vec![448.0, -1.0, 0.0, 0.0]).unwrap();
        let fp8 = quantize(&x, "Q").unwrap();
        assert_eq!(fp8.codes.into_raw_vec_and_offset().0, vec![0x7E, 0xB8, 0x00, 0x00]);
        assert_eq!(fp8.descale[[0, 0]], 1.0);
        assert_eq!(fp8.descale[[0, 1]], f32::MIN_POSITIVE); // a head of zeros
    }
}
