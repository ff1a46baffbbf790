//! The WGSL primer's kernel: right on any matrix, clear errors on bad ones, and the barrier
//! mistake the primer warns about refused by the course's uniformity check.

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

/// The largest number of each row, on the CPU.
fn cpu_maxima(m: &Array2<f32>) -> Vec<f32> {
    m.rows().into_iter().map(|r| r.iter().copied().fold(f32::NEG_INFINITY, f32::max)).collect()
}

/// The GPU's answers row by row against the CPU's, naming the first row that differs.
fn check(m: &Array2<f32>) -> Result<(), String> {
    let gpu = gpu::for_tests().expect("checked by the caller");
    let got = row_maxima(gpu, m).map_err(|e| e.to_string())?;
    for (row, (g, e)) in got.iter().zip(cpu_maxima(m)).enumerate() {
        if *g != e {
            return Err(format!("row {row} of a {:?} matrix: got {g}, expected {e}", m.dim()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Rows shorter and longer than the workgroup's 64 invocations, one row or many: the
    /// kernel's maximum is the CPU's, exactly (max does not round).
    #[test]
    fn each_row_maximum_is_the_cpus(rows in 1usize..40, cols in 1usize..300, seed in any::<u64>()) {
        if gpu::for_tests().is_none() { return Ok(()) }
        check(&matrix(rows, cols, seed)).map_err(TestCaseError::fail)?;
    }
}

/// The edges of the kernel's loops: one column, a row just shorter, as long as or just longer
/// than the workgroup, the maximum in the last column, rows of negative numbers only.
#[test]
fn edge_sizes_last_columns_and_negative_rows() {
    if gpu::for_tests().is_none() {
        return;
    }
    for cols in [1, 2, 63, 64, 65, 128, 129] {
        let mut m = matrix(3, cols, cols as u64).mapv(|x| -x.abs() - 1.0);
        m[[1, cols - 1]] = 5.0;
        check(&m).unwrap();
    }
}

#[test]
fn empty_matrices_and_non_finite_numbers_are_errors() {
    let Some(gpu) = gpu::for_tests() else { return };
    for (rows, cols) in [(0, 3), (3, 0)] {
        let message = row_maxima(gpu, &Array2::zeros((rows, cols))).unwrap_err().to_string();
        assert!(message.contains("expected at least one row and one column"), "{message}");
    }
    for (bad, shown) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (f32::NEG_INFINITY, "-inf")] {
        let mut m = matrix(2, 5, 1);
        m[[1, 3]] = bad;
        let message = row_maxima(gpu, &m).unwrap_err().to_string();
        assert!(message.contains(&format!("got {shown} at [1, 3]")), "{message}");
    }
}

#[test]
fn more_rows_than_one_dispatch_launches_is_an_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let limit = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
    let message = row_maxima(gpu, &Array2::zeros((limit + 1, 1))).unwrap_err().to_string();
    assert!(message.contains("max_compute_workgroups_per_dimension"), "{message}");
}

/// Rows so long that one invocation's scan passes lavapipe's loop limit: refused there (the
/// kernel would stop early and answer wrong, without an error), computed anywhere else.
#[test]
fn rows_beyond_lavapipes_loop_limit_are_refused_there() {
    let Some(gpu) = gpu::for_tests() else { return };
    let cols = 64 * gpu::kernel::LAVAPIPE_LOOP_LIMIT as usize;
    let mut m = Array2::zeros((1, cols));
    m[[0, cols - 1]] = 1.0;
    if gpu.info.name.contains("llvmpipe") {
        let message = row_maxima(gpu, &m).unwrap_err().to_string();
        assert!(message.contains("LP_MAX_TGSI_LOOP_ITERATIONS"), "{message}");
    } else {
        check(&m).unwrap();
    }
}

/// The host's workgroup size is the shader's (the host counts loop iterations with it).
#[test]
fn the_host_and_the_shader_agree_on_the_workgroup_size() {
    assert!(PRIMER.contains("const THREADS: u32 = 64u;"));
}

/// Every barrier of the kernel as written is reached by every invocation of a workgroup.
#[test]
fn the_kernels_barriers_are_in_uniform_control_flow() {
    if let Err(e) = gpu::uniformity::check_barriers(PRIMER) {
        panic!("primer.wgsl: {e}");
    }
}

// ANCHOR: barrier_inside_if
/// The primer's kernel with its tree's barrier moved inside the `if`: only the invocations
/// with `thread < stride` would reach it. The course's uniformity check refuses it, naming
/// the barrier's line and the condition's.
#[test]
fn a_barrier_inside_the_if_is_refused() {
    let correct = "        }\n        workgroupBarrier(); // outside the `if`";
    let broken = "            workgroupBarrier(); // inside the `if`\n        }\n        //";
    assert!(PRIMER.contains(correct), "primer.wgsl no longer has its barrier after the `if`");
    let kernel = PRIMER.replace(correct, broken);
    let error = gpu::uniformity::check_barriers(&kernel).unwrap_err();
    let line_of = |text: &str| 1 + kernel.lines().position(|l| l.contains(text)).unwrap();
    let barrier = line_of("workgroupBarrier(); // inside the `if`");
    let condition = line_of("if thread < stride {");
    assert!(error.contains(&format!("line {barrier}: ")), "{error}");
    assert!(error.contains(&format!("the condition at line {condition}")), "{error}");
}
// ANCHOR_END: barrier_inside_if
