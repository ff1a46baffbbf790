//! Small, exact demonstrations of what goes wrong when the wrong quantity is kept in 16 bits.

use crate::element::Element;

// ANCHOR: demos
/// The largest `x` for which `e^x` is finite in `T`: `ln(largest finite T)`.
/// About 11.09 for f16, but 88.7 for bf16 and f32.
pub fn exp_overflow_threshold<T: Element>() -> f32 {
    // Bisect on the rounded value: e^x rounded to T is finite below the threshold.
    let (mut lo, mut hi) = (0.0f32, 100.0f32);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if T::from_f32(mid.exp()).to_f32().is_finite() { lo = mid } else { hi = mid }
    }
    lo
}

/// `1 + 1 + ... + 1` (`n` times) with the running sum stored in `T` after every addition, as
/// a softmax denominator `l` kept in `T` would be. In f16 it stops growing at 2048, where the
/// spacing between f16 numbers becomes 2 and `2048 + 1` rounds back to 2048.
pub fn running_sum_of_ones<T: Element>(n: usize) -> f32 {
    (0..n).fold(T::from_f32(0.0), |sum, _| T::from_f32(sum.to_f32() + 1.0)).to_f32()
}

/// LayerNorm statistics (mean and variance) with the sums `sum x` and `sum x^2` kept in `T`,
/// and the variance as `sum x^2 / n - mean^2`. For 1024 activations of about 1000 ± 100 (a
/// large offset, as residual streams have), f16's `sum x` (about 10^6) and `sum x^2` (10^9)
/// both pass 65504, so the mean is already infinite. A bf16 sum stops growing once half the
/// spacing of bf16 numbers above it exceeds every term: `sum x` at 2^19 (spacing 4096, terms
/// about 1000), `sum x^2` at 2^29 (spacing 2^22, terms about 10^6), each about half its true
/// value, so the mean comes out 512 and the variance 2^29 / 1024 - 512^2 = 2^18. f32 keeps
/// both, though `sum x^2 / n - mean^2` still cancels about two of its digits.
pub fn layer_norm_stats<T: Element>(x: &[f32]) -> (f32, f32) {
    let n = x.len() as f32;
    let (sum, sum_sq) = x.iter().fold((T::from_f32(0.0), T::from_f32(0.0)), |(s, s2), &xi| {
        let xi = T::from_f32(xi).to_f32();
        (T::from_f32(s.to_f32() + xi), T::from_f32(s2.to_f32() + xi * xi))
    });
    let mean = sum.to_f32() / n;
    (mean, sum_sq.to_f32() / n - mean * mean)
}

/// LayerNorm statistics as real kernels compute them: Welford's update, `mean += (x - mean)
/// / n` and `m2 += (x - mean_old)(x - mean_new)`, accumulated in f32 whatever the storage
/// format (PyTorch's CUDA `layer_norm` accumulates Welford statistics in f32 for f16 and bf16
/// inputs). It never forms `sum x^2`, so nothing overflows, and it subtracts the running mean
/// before squaring, so the variance does not cancel away.
pub fn layer_norm_stats_welford<T: Element>(x: &[f32]) -> (f32, f32) {
    let (mut mean, mut m2) = (0.0f32, 0.0f32);
    for (i, &xi) in x.iter().enumerate() {
        let xi = T::from_f32(xi).to_f32(); // stored in T, computed in f32
        let delta = xi - mean;
        mean += delta / (i + 1) as f32;
        m2 += delta * (xi - mean);
    }
    (mean, m2 / x.len() as f32)
}

/// Softmax with `e^x` stored in `T`, with or without subtracting the maximum first.
pub fn softmax_in<T: Element>(x: &[f32], subtract_max: bool) -> Vec<f32> {
    let max = if subtract_max { x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) } else { 0.0 };
    let exps: Vec<f32> = x.iter().map(|&xi| T::from_f32((xi - max).exp()).to_f32()).collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}
// ANCHOR_END: demos
