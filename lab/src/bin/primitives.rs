//! How fast the WGSL primitives of a tensor-core FlashAttention run on this GPU: independent
//! 16x16x16 multiply-adds with every operand in registers, and with an operand loaded from
//! workgroup memory before each step (column-major, row-major, as A or as B, shared by 1 to 4
//! products), and an f32 accumulator stored to workgroup memory and loaded back (what a kernel
//! does with S). `primitives.wgsl` says what each mode does.
//!
//! These rates bound what any kernel built from the primitives can reach: a FlashAttention
//! step loads every K and V fragment from workgroup memory and feeds it to one or two products.
//!
//! It needs an adapter with cooperative matrices (16x16x16 f16 tiles, f32 accumulators), such
//! as an NVIDIA GPU with tensor cores; on any other (lavapipe) it says so and measures nothing.
//!
//! ```text
//! cargo run --release -p lab --bin primitives
//! ```

use bench::report::{Cell, Table};
use gpu::kernel::{Checks, Dispatch, bind, compile_with_checks, launch_repeated};
use gpu::{Gpu, GpuTimer};

const SOURCE: &str = include_str!("primitives.wgsl");
const WORKGROUPS: u32 = 4096;
const SUBGROUPS: u32 = 4;
const ITERATIONS: u32 = 512;

/// Median seconds of one launch of `mode` with `products` accumulators per subgroup.
fn seconds(gpu: &Gpu, timer: &GpuTimer, mode: u32, products: u32) -> Result<f64, String> {
    let constants = [
        ("MODE", mode as usize),
        ("PRODUCTS", products as usize),
        ("ITERATIONS", ITERATIONS as usize),
        ("SUBGROUPS", SUBGROUPS as usize),
    ];
    let source = gpu::wgsl::specialise(SOURCE, &constants).map_err(|e| e.to_string())?;
    let device = &gpu.device;
    let pipeline =
        compile_with_checks(device, "primitives.wgsl", &source, "main", &[], Checks::Off)
            .map_err(|e| e.to_string())?;
    let out = gpu::buffers::storage::<f32>(device, "out", (WORKGROUPS * SUBGROUPS * 32) as usize)
        .map_err(|e| e.to_string())?;
    let bind_group = bind(device, &pipeline, &[(0, &out)]).map_err(|e| e.to_string())?;
    let dispatch =
        [Dispatch { label: "primitives", pipeline, bind_group, workgroups: [WORKGROUPS, 1, 1] }];
    let run = |times| {
        launch_repeated(device, &gpu.queue, &dispatch, Some(timer), times)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no time".to_string())
    };
    let mut busy = 0.0;
    while busy < 0.2 {
        busy += run(1)?;
    }
    let mut samples = (0..7).map(|_| run(10).map(|t| t / 10.0)).collect::<Result<Vec<_>, _>>()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn main() -> Result<(), String> {
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    println!("Device: {}; {}", gpu.describe(), bench::Machine::this().date);
    if !gpu.has_tensor_cores() {
        println!("no cooperative matrices on this adapter: nothing to measure");
        return Ok(());
    }
    let timer = GpuTimer::new(&gpu.device, &gpu.queue).map_err(|e| e.to_string())?;
    let modes = [
        (0, "registers only"),
        (1, "B loaded, column-major"),
        (2, "B loaded, row-major"),
        (3, "A loaded, row-major"),
        (4, "one B loaded per product"),
        (5, "C stored and loaded back"),
        (6, "B loaded, column-major, f16 array"),
        (7, "A loaded, row-major, f16 array"),
    ];
    let mut table = Table::new(&["each step", "products", "TFLOP/s", "fragments loaded, TB/s"]);
    for (mode, what) in modes {
        for products in [1, 2, 4] {
            let t = seconds(gpu, &timer, mode, products)?;
            let steps = f64::from(WORKGROUPS * SUBGROUPS * ITERATIONS);
            let flops = steps * f64::from(products) * 2.0 * 16.0 * 16.0 * 16.0;
            let loads = match mode {
                0 => 0.0,
                4 => f64::from(products),
                5 => 2.0,
                _ => 1.0,
            };
            let bytes = steps * loads * 16.0 * 16.0 * if mode == 5 { 4.0 } else { 2.0 };
            table.push(vec![
                Cell::Text(what.into()),
                Cell::number(f64::from(products), 0),
                Cell::number(flops / t / 1e12, 0),
                Cell::number(bytes / t / 1e12, 1),
            ]);
        }
    }
    println!("\n{}", table.to_text());
    Ok(())
}
