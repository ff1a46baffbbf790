//! The two measurements behind chapter 7's choices of kernels, on this machine, on one thread:
//!
//! 1. Tile products on the shapes of lesson 07's tiles (256 x 256, D = 64): ndarray's
//!    `general_mat_mul` (the matrixmultiply crate, AVX2 at most) against
//!    `lesson07::kernels::matmul` (the gemm crate, AVX-512 where the CPU has it), in GFLOP/s.
//! 2. `2^x` over a row of scores, compiled for the widest vectors the CPU has: lesson 07's
//!    `exp2`, which takes `2^n` from the bits of the rounding sum, against the same function
//!    with `n as i32`, a float-to-int conversion that Rust defines to saturate.
//!
//! Each time is the median of 31 runs after a warm-up, with the fastest and slowest beside it.
//!
//! ```text
//! cargo run --release -p lesson07 --example kernels
//! ```

use lesson07::exp2::{exp2, two_to_the_fraction};
use lesson07::kernels::matmul;
use ndarray::Array2;
use ndarray::linalg::general_mat_mul;

/// Seconds of `run`: (fastest, median, slowest) of 31 runs after 3 warm-up runs.
fn time(mut run: impl FnMut()) -> (f64, f64, f64) {
    let t = bench::time_cpu(&[()], bench::Repeats::new(3, 31), |_| run());
    (t.fastest(), t.median(), t.slowest())
}

/// `2^x` as lesson 07 computes it, except that `2^n` is built from `n as i32`.
#[inline(always)]
fn exp2_with_cast(x: f32) -> f32 {
    let x = x.max(-127.0);
    const ROUND: f32 = 12_582_912.0;
    let n = (x + ROUND) - ROUND;
    two_to_the_fraction(x - n) * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `row[i] = f(row[i])`, compiled for the widest vectors this CPU has.
fn apply(row: &mut [f32], f: impl Fn(f32) -> f32) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn avx512(row: &mut [f32], f: impl Fn(f32) -> f32) {
            row.iter_mut().for_each(|x| *x = f(*x));
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &mut [f32], f: impl Fn(f32) -> f32) {
            row.iter_mut().for_each(|x| *x = f(*x));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { avx512(row, f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return unsafe { avx2(row, f) };
        }
    }
    row.iter_mut().for_each(|x| *x = f(*x));
}

/// Times 1000 rows of `2^x` with `f` (generic, so that `f` is inlined into the vector loop).
fn rows_of(row: &[f32], scratch: &mut [f32], f: impl Fn(f32) -> f32 + Copy) -> (f64, f64, f64) {
    time(|| {
        for _ in 0..1000 {
            scratch.copy_from_slice(row);
            apply(scratch, f);
            std::hint::black_box(&scratch);
        }
    })
}

fn main() {
    let cpu = bench::machine::cpu_name().unwrap_or_else(|| "an unknown CPU".to_string());
    println!("{cpu}, one thread; fastest / median / slowest of 31 runs\n");

    println!("tile products, GFLOP/s (higher is better)");
    println!("{:<28} {:>24} {:>24}", "shape", "general_mat_mul", "gemm (lesson 07)");
    let filled = |rows, cols, seed: f32| {
        Array2::from_shape_fn((rows, cols), |(i, j)| ((i * 7 + j * 3) as f32 * seed).sin())
    };
    for (name, m, k, n) in
        [("S = Q Kᵀ: 256x64 by 64x256", 256, 64, 256), ("P V: 256x256 by 256x64", 256, 256, 64)]
    {
        let (a, b) = (filled(m, k, 0.1), filled(k, n, 0.2));
        let mut c = Array2::<f32>::zeros((m, n));
        let flop = 2.0 * (m * k * n) as f64;
        let rate = |(fast, median, slow): (f64, f64, f64)| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                flop / fast / 1e9,
                flop / median / 1e9,
                flop / slow / 1e9
            )
        };
        let ndarray = time(|| general_mat_mul(1.0, &a, &b, 0.0, &mut c));
        let gemm = time(|| matmul(1.0, a.view(), b.view(), false, &mut c.view_mut()));
        println!("{name:<28} {:>24} {:>24}", rate(ndarray), rate(gemm));
    }

    println!("\n2^x over rows of 256 scores, nanoseconds per element (lower is better)");
    let row: Vec<f32> = (0..256).map(|i| -((i * 37 % 256) as f32) * 0.25).collect();
    let mut scratch = row.clone();
    let per_element = |(fast, median, slow): (f64, f64, f64)| {
        let ns = |s: f64| s * 1e9 / (1000.0 * row.len() as f64);
        format!("{:.2} / {:.2} / {:.2}", ns(fast), ns(median), ns(slow))
    };
    let bits = rows_of(&row, &mut scratch, exp2);
    let cast = rows_of(&row, &mut scratch, exp2_with_cast);
    println!("  2^n from the bits (lesson 07)   {:>24}", per_element(bits));
    println!("  2^n from `n as i32`             {:>24}", per_element(cast));
    println!("  the cast is {:.1} times slower (medians)", cast.1 / bits.1);
}
