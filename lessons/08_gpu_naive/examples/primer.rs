//! The WGSL primer's example: the largest number of each row of a small matrix, computed by
//! one workgroup per row on whatever adapter wgpu finds, beside the same on the CPU.
//!
//! ```text
//! cargo run -p lesson08 --example primer
//! ```

use lesson08::primer::row_maxima;
use ndarray::Array2;

fn main() -> Result<(), String> {
    let gpu = gpu::Gpu::shared().map_err(|e| e.to_string())?;
    // 3 rows of 100 numbers; the largest of row r is at column 17 * (r + 1).
    let matrix = Array2::from_shape_fn((3, 100), |(r, c)| {
        if c == 17 * (r + 1) { 1000.0 + r as f32 } else { ((r * 100 + c) % 37) as f32 }
    });
    let on_gpu = row_maxima(gpu, &matrix).map_err(|e| e.to_string())?;
    println!("row  largest (GPU)  largest (CPU)");
    for (r, row) in matrix.rows().into_iter().enumerate() {
        let on_cpu = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        println!("{r:3}  {:13}  {on_cpu:13}", on_gpu[r]);
    }
    Ok(())
}
