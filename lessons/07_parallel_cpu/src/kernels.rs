//! The two hot spots of the tile loop, each written once and compiled for the CPU it runs on.
//!
//! * [`matmul`]: tile products through the `gemm` crate, whose micro-kernels use AVX-512 when
//!   the CPU has it (matrixmultiply, used by the earlier lessons, stops at AVX2: half the
//!   arithmetic per instruction).
//! * [`softmax_row`]: the row maximum, `2^(s - m)` and the row sum. A program built for the
//!   default x86-64 target may only assume SSE2 (4 floats per instruction); the same Rust code
//!   compiled with AVX-512 enabled handles 16. `softmax_row` picks the widest version the CPU
//!   supports, once per call.

use ndarray::{ArrayView2, ArrayViewMut2};

use crate::exp2::exp2;

// ANCHOR: matmul
/// `c = alpha * a b + (c if accumulate, else 0)`, for `a [m, k]`, `b [k, n]`, `c [m, n]` of
/// any strides.
pub fn matmul(
    alpha: f32,
    a: ArrayView2<f32>,
    b: ArrayView2<f32>,
    accumulate: bool,
    c: &mut ArrayViewMut2<f32>,
) {
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    assert!(
        k == k2 && c.dim() == (m, n),
        "matmul of {:?} by {:?} into {:?}",
        a.dim(),
        b.dim(),
        c.dim()
    );
    let (cs, rs) = (c.strides()[1], c.strides()[0]);
    // SAFETY: the three pointers and their strides describe the arrays `a`, `b`, `c`, whose
    // shapes were checked above; `c` is borrowed mutably and cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            cs,
            rs,
            accumulate,
            a.as_ptr(),
            a.strides()[1],
            a.strides()[0],
            b.as_ptr(),
            b.strides()[1],
            b.strides()[0],
            1.0,   // gemm's alpha scales the old c
            alpha, // gemm's beta scales a b
            false,
            false,
            false,
            gemm::Parallelism::None, // rayon already runs one tile per core
        );
    }
}
// ANCHOR_END: matmul

// ANCHOR: softmax_row
/// One row of a score tile, in base-2 units: with `m' = max(old_max, max(row))`, overwrites
/// the row with `P = 2^(row - m')` and returns `(m', rowsum(P))`; `None` if the row (and
/// everything before it) is `-inf`.
pub fn softmax_row(row: &mut [f32], old_max: f32) -> Option<(f32, f32)> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { softmax_row_avx512(row, old_max) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return unsafe { softmax_row_avx2(row, old_max) };
        }
    }
    softmax_row_portable(row, old_max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn softmax_row_avx512(row: &mut [f32], old_max: f32) -> Option<(f32, f32)> {
    softmax_row_portable(row, old_max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_row_avx2(row: &mut [f32], old_max: f32) -> Option<(f32, f32)> {
    softmax_row_portable(row, old_max)
}

/// The code all three versions share. Sixteen partial maxima and sums let the compiler keep
/// them in one vector register (it may not reorder a single f32 sum by itself).
#[inline(always)]
fn softmax_row_portable(row: &mut [f32], old_max: f32) -> Option<(f32, f32)> {
    const LANES: usize = 16;
    // Whole chunks of 16 have a fixed trip count, which the compiler turns into vector
    // instructions; the few elements left over go through the same code one by one.
    let mut maxima = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &x) in maxima.iter_mut().zip(chunk) {
            *m = m.max(x);
        }
    }
    let tail_max = chunks.remainder().iter().fold(old_max, |a, &b| a.max(b));
    let new_max = maxima.iter().fold(tail_max, |a, &b| a.max(b));
    if new_max == f32::NEG_INFINITY {
        row.fill(0.0);
        return None;
    }
    let mut sums = [0.0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (s, x) in sums.iter_mut().zip(chunk) {
            *x = exp2(*x - new_max);
            *s += *x;
        }
    }
    let mut tail_sum = 0.0;
    for x in chunks.into_remainder() {
        *x = exp2(*x - new_max);
        tail_sum += *x;
    }
    Some((new_max, sums.iter().sum::<f32>() + tail_sum))
}
// ANCHOR_END: softmax_row

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, array};

    #[test]
    fn matmul_handles_transposed_views_and_accumulation() {
        let a = array![[1.0f32, 2.0], [3.0, 4.0]];
        let b_t = array![[5.0f32, 7.0], [6.0, 8.0]]; // b = [[5, 6], [7, 8]], given transposed
        let mut c = Array2::from_elem((2, 2), 1.0f32);
        matmul(2.0, a.view(), b_t.t(), true, &mut c.view_mut());
        // 2 * [[19, 22], [43, 50]] + 1
        assert_eq!(c, array![[39.0, 45.0], [87.0, 101.0]]);
        matmul(1.0, a.view(), b_t.t(), false, &mut c.view_mut());
        assert_eq!(c, array![[19.0, 22.0], [43.0, 50.0]]);
    }

    #[test]
    fn softmax_row_matches_its_definition_for_any_length() {
        for n in [1, 5, 16, 17, 40] {
            let row: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 * 0.7 - 3.0).collect();
            for old_max in [f32::NEG_INFINITY, 1.0, 9.0] {
                let mut p = row.clone();
                let (m, l) = softmax_row(&mut p, old_max).unwrap();
                let expected_max = row.iter().fold(old_max, |a, &b| a.max(b));
                assert_eq!(m, expected_max);
                for (x, &s) in p.iter().zip(&row) {
                    assert!((x - (s - m).exp2()).abs() <= 2e-7 * (s - m).exp2());
                }
                let sum: f32 = row.iter().map(|s| (s - m).exp2()).sum();
                assert!((l - sum).abs() < 1e-5 * sum);
            }
        }
        let mut masked = vec![f32::NEG_INFINITY; 3];
        assert_eq!(softmax_row(&mut masked, f32::NEG_INFINITY), None);
        assert_eq!(masked, vec![0.0; 3]);
    }
}
