//! The kernel of the book's WGSL primer ("WGSL in one kernel"): the largest number of each row
//! of a matrix, one workgroup per row, with workgroup memory, a barrier and a tree reduction.
//! Small enough to read whole before the attention kernels of this lesson.

use gpu::Gpu;
use gpu::buffers;
use gpu::kernel::{
    Dispatch, bind, check_loop_iterations, check_workgroups, compile, launch, workgroup_count,
};
use ndarray::Array2;
use reference::AttentionError;

/// The WGSL source of the primer's kernel.
pub const PRIMER: &str = include_str!("primer.wgsl");

/// The primer's uniform (`Sizes` in `primer.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Sizes {
    /// Not read by the kernel (the grid gives it one workgroup per row), kept for whoever
    /// extends it.
    rows: u32,
    cols: u32,
}

/// Invocations per workgroup (`THREADS` in `primer.wgsl`).
const THREADS: usize = 64;

/// Loop iterations one invocation runs, for lavapipe's limit: the scan of its columns, then
/// the tree's steps (each counted with one more for the loop's last test).
fn loop_iterations(cols: usize) -> u64 {
    (cols.div_ceil(THREADS) + 1 + THREADS.ilog2() as usize + 1) as u64
}

// ANCHOR: row_maxima
/// The largest number of each row of `matrix` `[rows, cols]`, computed by [`PRIMER`] on `gpu`.
/// Errors: a matrix without rows or columns, a NaN or an infinity (WGSL lets a GPU assume
/// there are none), more rows than one dispatch launches workgroups along x
/// (`max_compute_workgroups_per_dimension`, 65535 on most devices), rows too long for
/// lavapipe's loop limit, a matrix beyond the device's buffer limits.
pub fn row_maxima(gpu: &Gpu, matrix: &Array2<f32>) -> Result<Vec<f32>, AttentionError> {
    let (rows, cols) = matrix.dim();
    let device = &gpu.device;
    // Everything that can be refused is refused before anything is copied to the GPU.
    check_matrix(matrix)?;
    let workgroups = [workgroup_count(rows), 1, 1]; // one workgroup per row, along x
    check_workgroups(device, "row_max", workgroups)?;
    check_loop_iterations(device, "row_max", loop_iterations(cols))?;
    // Buffers: the sizes as a uniform, the matrix uploaded, room for the answers.
    let sizes = buffers::uniform(device, "sizes", &Sizes { rows: rows as u32, cols: cols as u32 });
    let numbers: Vec<f32> = matrix.iter().copied().collect(); // row-major order
    let input = buffers::upload(device, "matrix", &numbers)?;
    let output = buffers::storage::<f32>(device, "row maxima", rows)?;
    // The kernel, compiled, with each buffer bound to its `@binding` slot.
    let pipeline = compile(device, "primer.wgsl", PRIMER, "row_max", &[])?;
    let bind_group = bind(device, &pipeline, &[(0, &sizes), (1, &input), (2, &output)])?;
    // The dispatch, then the answers read back.
    let dispatch = Dispatch { label: "row_max", pipeline, bind_group, workgroups };
    launch(device, &gpu.queue, &[dispatch], None)?;
    buffers::download(device, &gpu.queue, &output)
}
// ANCHOR_END: row_maxima

/// An error unless `matrix` has rows and columns, sizes that fit the kernel's `u32`, and only
/// finite numbers.
fn check_matrix(matrix: &Array2<f32>) -> Result<(), AttentionError> {
    let (rows, cols) = matrix.dim();
    if rows == 0 || cols == 0 || u32::try_from(rows * cols).is_err() {
        return Err(gpu::GpuError::KernelMisuse(format!(
            "row_max got a {rows} x {cols} matrix; expected at least one row and one column, \
             and fewer than 2^32 numbers"
        ))
        .into());
    }
    if let Some(((row, col), x)) = matrix.indexed_iter().find(|(_, x)| !x.is_finite()) {
        return Err(gpu::GpuError::KernelMisuse(format!(
            "row_max got {x} at [{row}, {col}]; expected finite numbers (WGSL lets a GPU assume \
             that no value is NaN or infinite, so max would give whatever that GPU gives)"
        ))
        .into());
    }
    Ok(())
}
