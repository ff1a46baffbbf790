//! A fast `2^x` for `x <= 0` that the compiler can vectorise.
//!
//! `f32::exp` is a call into the C library per element: it cannot be vectorised, and with a
//! head dimension of 64 one such call costs about as much as the 256 FLOPs of matrix work done
//! per score. Splitting `x = n + f` with an integer `n` and `|f| <= 1/2` gives
//! `2^x = 2^n * 2^f`: `2^n` is built directly from the bits of an f32, and `2^f` is a
//! polynomial. Every step is plain arithmetic, so a loop over a row compiles to SIMD code.

// ANCHOR: exp2
/// `2^x` for `x <= 0` (and `-inf`), with a relative error below `2e-7`; 0 below `2^-126`.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    // Below -126, 2^x is not a normal f32: clamp so that 2^n below is exactly 0 there.
    let x = x.max(-127.0);
    // n = round(x), by the magic-number trick: adding 1.5 * 2^23 pushes the fraction out of
    // the mantissa (rounding to nearest), and the low bits of the sum then hold n itself.
    const ROUND: f32 = 12_582_912.0;
    let shifted = x + ROUND;
    let n = shifted - ROUND;
    let f = x - n; // in [-1/2, 1/2]
    // 2^n from its bits: exponent field n + 127, mantissa 0 (n = -127 gives +0.0). The integer
    // n comes from the bits of `shifted`, not from a float-to-int conversion, which in Rust
    // saturates and would cost extra instructions in the vector loop.
    let n_plus_bias = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    let two_to_n = f32::from_bits(n_plus_bias << 23);
    two_to_the_fraction(f) * two_to_n
}

/// `2^f` for `|f| <= 1/2`: `e^(f ln 2)` by its Taylor series to degree 7, whose error there is
/// at most `(ln 2 / 2)^8 / 8! = 5e-9`.
#[inline(always)]
pub fn two_to_the_fraction(f: f32) -> f32 {
    let t = f * std::f32::consts::LN_2;
    1.0 + t
        * (1.0
            + t * (0.5
                + t * (1.0 / 6.0
                    + t * (1.0 / 24.0
                        + t * (1.0 / 120.0 + t * (1.0 / 720.0 + t * (1.0 / 5040.0)))))))
}
// ANCHOR_END: exp2

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_library_exp2_to_two_parts_in_ten_million() {
        let mut worst = 0.0f64;
        for i in 0..=1_260_000 {
            let x = -(i as f32) * 1e-4;
            let (got, expected) = (f64::from(exp2(x)), f64::from(x).exp2());
            worst = worst.max((got - expected).abs() / expected);
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
    }

    #[test]
    fn edges() {
        assert_eq!(exp2(0.0), 1.0);
        assert_eq!(exp2(-1.0), 0.5);
        assert_eq!(exp2(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp2(-200.0), 0.0);
        assert!(exp2(-126.0) > 0.0);
    }
}
