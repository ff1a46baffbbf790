//! The N x N memory table: bytes naive attention holds in S and P for one head.
//!
//! `cargo run -p lesson01 --example memory_table`

use lesson01::memory_table;

fn main() {
    let seq_lens: Vec<usize> = (10..=14).map(|p| 1 << p).collect(); // 1024 ... 16384
    println!("{:>6} {:>12} {:>12} {:>12}", "N", "S (f32)", "S+P (f32)", "S+P (f16)");
    for row in memory_table(&seq_lens) {
        println!(
            "{:>6} {:>12} {:>12} {:>12}",
            row.seq_len,
            mib(row.s_f32),
            mib(row.s_and_p_f32),
            mib(row.s_and_p_f16)
        );
    }
    println!("\nper head and per batch element; multiply by B x H for a whole layer.");
}

fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes >> 20)
}
