//! The number formats of this lesson: f32, and the two 16-bit formats of GPUs.
//!
//! | format | bits: sign, exponent, mantissa | largest finite | spacing at 1 |
//! |---|---|---|---|
//! | f32  | 1, 8, 23 | 3.4e38 | 1.2e-7 |
//! | f16  | 1, 5, 10 | 65504  | 9.8e-4 |
//! | bf16 | 1, 8, 7  | 3.4e38 | 7.8e-3 |
//!
//! f16 keeps more digits but overflows early; bf16 has f32's range but fewer digits.

use half::{bf16, f16};
use ndarray::Array4;
use reference::{AttentionError, check_finite};

/// A number format, as a value (for error messages and dynamic dispatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
}

impl Dtype {
    /// `"f32"`, `"f16"` or `"bf16"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        }
    }
}

/// A storage format: converts to f32 for arithmetic and back for storage.
pub trait Element: Copy + Send + Sync + std::fmt::Debug + Into<f64> + 'static {
    /// Which format this is.
    const DTYPE: Dtype;
    /// The largest finite value of the format.
    const LARGEST: f32;
    /// The nearest value of this format (rounding to nearest, ties to even).
    fn from_f32(x: f32) -> Self;
    /// The exact f32 value (every f16 and bf16 value is an f32 value).
    fn to_f32(self) -> f32;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    const LARGEST: f32 = f32::MAX;
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
    const LARGEST: f32 = 65504.0;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl Element for bf16 {
    const DTYPE: Dtype = Dtype::BF16;
    const LARGEST: f32 = bf16::MAX.to_f32_const();
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

/// `x` rounded to the format `T`.
pub fn round_to<T: Element>(x: &Array4<f32>) -> Array4<T> {
    x.mapv(T::from_f32)
}

// ANCHOR: round_checked
/// `x` rounded to the format `T`, or [`AttentionError::NotRepresentable`] naming `tensor` and
/// the first element too large for `T`. Rounding 1e5 to f16 gives `inf`, and an infinity in
/// attention's inputs turns whole rows into NaN or, worse, into "sees no key": a model that
/// stores its tensors in f16 must keep them in range, and this says where they are not.
pub fn round_checked<T: Element>(
    tensor: &'static str,
    x: &Array4<f32>,
) -> Result<Array4<T>, AttentionError> {
    check_finite(tensor, x)?; // NaN and infinities are reported as what they are
    let rounded = round_to::<T>(x);
    let overflow = x.indexed_iter().zip(&rounded).find(|(_, y)| !y.to_f32().is_finite());
    match overflow {
        None => Ok(rounded),
        Some((((b, h, n, d), _), _)) => Err(AttentionError::NotRepresentable {
            tensor,
            index: vec![b, h, n, d],
            value: x[[b, h, n, d]],
            format: T::DTYPE.name(),
            largest: T::LARGEST,
        }),
    }
}
// ANCHOR_END: round_checked

/// `x` widened to f32 (exact).
pub fn widen<T: Element>(x: &Array4<T>) -> Array4<f32> {
    x.mapv(T::to_f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_as_documented() {
        // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: ties go to even (1).
        assert_eq!(f16::from_f32(1.0 + 2f32.powi(-11)).to_f32(), 1.0);
        assert_eq!(f16::from_f32(1.0 + 2f32.powi(-10)).to_f32(), 1.0 + 2f32.powi(-10));
        assert_eq!(bf16::from_f32(1.0 + 2f32.powi(-8)).to_f32(), 1.0);
        assert_eq!(f16::from_f32(65504.0).to_f32(), 65504.0);
        assert!(f16::from_f32(65520.0).to_f32().is_infinite());
        assert!(bf16::from_f32(1e38).to_f32().is_finite());
        assert_eq!(f16::from_f32(f16::LARGEST).to_f32(), f16::LARGEST);
        assert_eq!(bf16::from_f32(bf16::LARGEST).to_f32(), bf16::LARGEST);
    }

    #[test]
    fn rounding_refuses_values_the_format_cannot_hold() {
        let mut x = Array4::<f32>::from_elem((1, 1, 2, 2), 1.0);
        x[[0, 0, 1, 0]] = 1e5;
        let err = round_checked::<f16>("K", &x).unwrap_err();
        assert_eq!(
            err,
            AttentionError::NotRepresentable {
                tensor: "K",
                index: vec![0, 0, 1, 0],
                value: 1e5,
                format: "f16",
                largest: 65504.0
            }
        );
        assert!(err.to_string().starts_with("K[0, 0, 1, 0] = 100000 is too large for f16"));
        assert!(round_checked::<bf16>("K", &x).is_ok()); // bf16 has f32's range
    }
}
