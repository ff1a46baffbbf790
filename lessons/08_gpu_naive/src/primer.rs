//! The kernel of the book's WGSL primer ("WGSL in one kernel"): the largest number of each row
//! of a matrix, one workgroup per row, with workgroup memory, a barrier and a tree reduction.
//! Small enough to read whole before the attention kernels of this lesson.

use gpu::Gpu;
use gpu::buffers;
use gpu::kernel::{Dispatch, bind, check_workgroups, compile, launch, workgroup_count};
use ndarray::Array2;
use reference::AttentionError;

/// The WGSL source of the primer's kernel.
pub const PRIMER: &str = include_str!("primer.wgsl");

/// The primer's uniform (`Sizes` in `primer.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Sizes {
    rows: u32,
    cols: u32,
}

// ANCHOR: row_maxima
/// The largest number of each row of `matrix` `[rows, cols]`, computed by [`PRIMER`] on `gpu`.
/// Errors: a matrix without rows or columns, a number that is NaN (WGSL's `max` would drop it
/// or keep it depending on the GPU), more rows than the device launches workgroups, a matrix
/// beyond the device's buffer limits.
pub fn row_maxima(gpu: &Gpu, matrix: &Array2<f32>) -> Result<Vec<f32>, AttentionError> {
    let (rows, cols) = matrix.dim();
    check_matrix(matrix)?;
    let device = &gpu.device;
    // Buffers: the sizes as a uniform, the matrix uploaded, room for the answers.
    let sizes = Sizes { rows: rows as u32, cols: cols as u32 };
    let sizes = buffers::uniform(device, "sizes", &sizes);
    let numbers: Vec<f32> = matrix.iter().copied().collect(); // row-major order
    let input = buffers::upload(device, "matrix", &numbers)?;
    let output = buffers::storage::<f32>(device, "row maxima", rows)?;
    // The kernel, compiled, with each buffer bound to its `@binding` slot.
    let pipeline = compile(device, "primer.wgsl", PRIMER, "row_max", &[])?;
    let bind_group = bind(device, &pipeline, &[(0, &sizes), (1, &input), (2, &output)])?;
    // One workgroup per row, then read the answers back.
    let workgroups = [workgroup_count(rows), 1, 1];
    check_workgroups(device, "row_max", workgroups)?;
    let dispatch = Dispatch { label: "row_max", pipeline, bind_group, workgroups };
    launch(device, &gpu.queue, &[dispatch], None)?;
    buffers::download(device, &gpu.queue, &output)
}
// ANCHOR_END: row_maxima

/// An error unless `matrix` has rows and columns, sizes that fit the kernel's `u32`, and no NaN.
fn check_matrix(matrix: &Array2<f32>) -> Result<(), AttentionError> {
    let (rows, cols) = matrix.dim();
    if rows == 0 || cols == 0 || u32::try_from(rows * cols).is_err() {
        return Err(gpu::GpuError::KernelMisuse(format!(
            "row_max got a {rows} x {cols} matrix; expected at least one row and one column, \
             and fewer than 2^32 numbers"
        ))
        .into());
    }
    if let Some(((row, col), _)) = matrix.indexed_iter().find(|(_, x)| x.is_nan()) {
        return Err(gpu::GpuError::KernelMisuse(format!(
            "row_max got NaN at [{row}, {col}]; expected numbers (WGSL's max of NaN depends on \
             the GPU)"
        ))
        .into());
    }
    Ok(())
}
