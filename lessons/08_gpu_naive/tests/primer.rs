//! The WGSL primer's kernel: right on any matrix, clear errors on bad ones, and the barrier
//! mistake the primer warns about caught before the kernel runs.

use lesson08::primer::{PRIMER, row_maxima};
use ndarray::Array2;
use proptest::prelude::*;

/// A `rows x cols` matrix of numbers from -100 to 100 drawn from `seed`.
fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let mut state = seed | 1;
    Array2::from_shape_fn((rows, cols), |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 20_001) as f32 / 100.0 - 100.0
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Rows shorter and longer than the workgroup's 64 invocations, one row or many: the
    /// kernel's maximum is the CPU's, exactly (max does not round).
    #[test]
    fn each_row_maximum_is_the_cpus(rows in 1usize..40, cols in 1usize..300, seed in any::<u64>()) {
        let Some(gpu) = gpu::for_tests() else { return Ok(()) };
        let m = matrix(rows, cols, seed);
        let expected: Vec<f32> =
            m.rows().into_iter().map(|r| r.iter().copied().fold(f32::MIN, f32::max)).collect();
        prop_assert_eq!(row_maxima(gpu, &m).unwrap(), expected);
    }
}

#[test]
fn empty_matrices_and_nan_are_errors() {
    let Some(gpu) = gpu::for_tests() else { return };
    for (rows, cols) in [(0, 3), (3, 0)] {
        let message = row_maxima(gpu, &Array2::zeros((rows, cols))).unwrap_err().to_string();
        assert!(message.contains("expected at least one row and one column"), "{message}");
    }
    let mut m = matrix(2, 5, 1);
    m[[1, 3]] = f32::NAN;
    let message = row_maxima(gpu, &m).unwrap_err().to_string();
    assert!(message.contains("NaN at [1, 3]"), "{message}");
}

// ANCHOR: barrier_inside_if
/// The primer's kernel with its tree's barrier moved inside the `if`: only the invocations
/// with `thread < stride` would reach it. The course's uniformity check refuses it, naming
/// the barrier's line and the condition's.
#[test]
fn a_barrier_inside_the_if_is_refused() {
    let correct = "        }\n        workgroupBarrier(); // outside the `if`";
    let broken = "            workgroupBarrier();\n        }\n        // outside the `if`";
    assert!(PRIMER.contains(correct));
    gpu::uniformity::check_barriers(PRIMER).unwrap();
    let error = gpu::uniformity::check_barriers(&PRIMER.replace(correct, broken)).unwrap_err();
    assert!(error.contains("in non-uniform control flow"), "{error}");
}
// ANCHOR_END: barrier_inside_if
