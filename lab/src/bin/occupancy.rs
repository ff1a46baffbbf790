//! How many workgroups this GPU's driver keeps resident at once, by threads per workgroup and
//! bytes of workgroup memory: the probe in `occupancy.wgsl` counts the workgroups that are
//! running at the same moment. Registers are the other limit (65536 per multiprocessor on an
//! H100, allotted 8 per thread at a time); `shader_stats` gives each kernel's count.
//!
//! A kernel that needs two workgroups on a multiprocessor to overlap one's products with the
//! other's softmax gets them only if the driver leaves room for both: this says when it does.
//! It runs on any adapter, lavapipe included, but its counts describe a GPU's multiprocessors
//! only on a GPU (the book's are an H100's).
//!
//! ```text
//! cargo run --release -p lab --bin occupancy
//! ```

use bench::report::{Cell, Table};
use gpu::Gpu;
use gpu::kernel::{Checks, Dispatch, bind, compile_with_checks, launch};

const SOURCE: &str = include_str!("occupancy.wgsl");
/// Far more workgroups than any GPU holds at once (32 per multiprocessor on 132 of them).
const WORKGROUPS: u32 = 16 * 1024;
const SPIN: usize = 100_000;

/// The most workgroups of `threads` threads and `bytes` of workgroup memory seen running at
/// the same moment.
fn resident(gpu: &Gpu, threads: usize, bytes: usize) -> Result<u32, String> {
    let constants = [("THREADS", threads), ("WORKGROUP_VEC4S", bytes / 16), ("SPIN", SPIN)];
    let source = gpu::wgsl::specialise(SOURCE, &constants).map_err(|e| e.to_string())?;
    let device = &gpu.device;
    let pipeline = compile_with_checks(device, "occupancy.wgsl", &source, "main", &[], Checks::Off)
        .map_err(|e| e.to_string())?;
    let counters =
        gpu::buffers::storage::<u32>(device, "counters", 2).map_err(|e| e.to_string())?;
    let out = gpu::buffers::storage::<f32>(device, "out", WORKGROUPS as usize * threads)
        .map_err(|e| e.to_string())?;
    let bind_group =
        bind(device, &pipeline, &[(0, &counters), (1, &out)]).map_err(|e| e.to_string())?;
    let dispatch =
        [Dispatch { label: "occupancy", pipeline, bind_group, workgroups: [WORKGROUPS, 1, 1] }];
    launch(device, &gpu.queue, &dispatch, None).map_err(|e| e.to_string())?;
    let [live, peak] = gpu::buffers::download::<u32>(device, &gpu.queue, &counters)
        .map_err(|e| e.to_string())?[..]
    else {
        return Err("the counters buffer holds two numbers".into());
    };
    if live != 0 {
        return Err(format!("{live} workgroups never counted themselves out"));
    }
    Ok(peak)
}

fn main() -> Result<(), String> {
    let gpu = Gpu::shared().map_err(|e| e.to_string())?;
    println!("Device: {}; {}", gpu.describe(), bench::Machine::this().date);
    let most = gpu.device.limits().max_compute_workgroup_storage_size as usize;
    let thread_counts = [64, 128, 256];
    let mut header = vec!["workgroup memory, KiB".to_string()];
    header.extend(thread_counts.iter().map(|t| format!("{t} threads")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    for kib in [1u32, 8, 12, 16, 18, 20, 22, 24, 25, 26, 27, 28, 32, 40, 48]
        .into_iter()
        .filter(|&k| k as usize * 1024 <= most)
    {
        let mut row = vec![Cell::number(f64::from(kib), 0)];
        for threads in thread_counts {
            let peak = resident(gpu, threads, kib as usize * 1024)?;
            row.push(Cell::number(f64::from(peak), 0));
        }
        table.push(row);
    }
    println!("\nWorkgroups resident at once, whole GPU\n{}", table.to_text());
    Ok(())
}
