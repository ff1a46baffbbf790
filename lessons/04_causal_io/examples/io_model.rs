//! Bytes moved between slow and fast memory by naive attention, FlashAttention-1 and
//! FlashAttention-2, measured by running them on the simulated two-level memory: against the
//! sequence length N (fixed fast memory M) and against M (fixed N). Prints two tables and
//! writes CSV and SVG to book/src/figures/.
//!
//! `cargo run --release -p lesson04 --example io_model`

use bench::plot::Scale;
use bench::{Cell, Figures, Plot, Series, Table};
use lesson04::{Run, flash1, flash2, naive, tiles_for_fast_memory};
use reference::{AttentionError, Problem, ProblemSpec};

const HEAD_DIM: usize = 64;
/// Fast memory for the table against N: 64 KiB, in the range of one GPU core's shared memory.
const FAST_BYTES: usize = 64 << 10;
/// Sequence length for the table against M.
const SEQ: usize = 2048;

type Algorithm = fn(
    &ndarray::Array4<f32>,
    &ndarray::Array4<f32>,
    &ndarray::Array4<f32>,
    &reference::AttentionOptions,
    lesson03::TileSizes,
    usize,
) -> Result<Run, AttentionError>;

const ALGORITHMS: [(&str, Algorithm); 3] = [
    ("naive", naive::attention),
    ("FlashAttention-1", flash1::attention),
    ("FlashAttention-2", flash2::attention),
];

/// MiB moved by each algorithm on one head of length `n` with `fast_bytes` of fast memory.
fn measure(n: usize, fast_bytes: usize) -> Result<(usize, [f64; 3]), AttentionError> {
    let tiles = tiles_for_fast_memory(fast_bytes, HEAD_DIM)?;
    let p = Problem::random(&ProblemSpec::new(1, 1, n, n, HEAD_DIM), 1);
    let mut mib = [0.0; 3];
    for (slot, (_, algorithm)) in mib.iter_mut().zip(ALGORITHMS) {
        let run = algorithm(&p.q, &p.k, &p.v, &p.options, tiles, fast_bytes)?;
        *slot = run.traffic.total() as f64 / (1 << 20) as f64;
    }
    Ok((tiles.query_rows(), mib))
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let figures = Figures::from_args(&args)?;
    let fail = |e: AttentionError| e.to_string();

    println!(
        "one head, D = {HEAD_DIM}, fast memory M = {} KiB; MiB moved between slow and fast memory",
        FAST_BYTES >> 10
    );
    println!(
        "{:>6} {:>6} {:>10} {:>10} {:>10} {:>12}",
        "N", "tile", "naive", "FA-1", "FA-2", "naive/FA-2"
    );
    let mut rows = Table::new(&["n", "tile", "naive_mib", "flash1_mib", "flash2_mib"]);
    let mut by_n: [Vec<(f64, f64)>; 3] = Default::default();
    for n in [256, 512, 1024, 2048, 4096] {
        let (tile, mib) = measure(n, FAST_BYTES).map_err(fail)?;
        println!(
            "{n:>6} {tile:>6} {:>10.2} {:>10.2} {:>10.2} {:>12.1}",
            mib[0],
            mib[1],
            mib[2],
            mib[0] / mib[2]
        );
        rows.push(
            [Cell::int(n), Cell::int(tile)]
                .into_iter()
                .chain(mib.map(|m| Cell::number(m, 4)))
                .collect(),
        );
        for (series, &m) in by_n.iter_mut().zip(&mib) {
            series.push((n as f64, m));
        }
    }
    figures.write_csv("04_io_vs_n", &rows)?;
    let title = "Bytes moved against sequence length (D = 64, M = 64 KiB)";
    figures.write_svg("04_io_vs_n", &plot(title, "sequence length N", by_n))?;

    println!("\none head, N = {SEQ}, D = {HEAD_DIM}; MiB moved against the fast memory M");
    println!("{:>8} {:>6} {:>10} {:>10} {:>10}", "M (KiB)", "tile", "naive", "FA-1", "FA-2");
    let mut rows = Table::new(&["fast_kib", "tile", "naive_mib", "flash1_mib", "flash2_mib"]);
    let mut by_m: [Vec<(f64, f64)>; 3] = Default::default();
    for kib in [16, 32, 64, 128, 256, 512] {
        let (tile, mib) = measure(SEQ, kib << 10).map_err(fail)?;
        println!("{kib:>8} {tile:>6} {:>10.2} {:>10.2} {:>10.2}", mib[0], mib[1], mib[2]);
        rows.push(
            [Cell::int(kib), Cell::int(tile)]
                .into_iter()
                .chain(mib.map(|m| Cell::number(m, 4)))
                .collect(),
        );
        for (series, &m) in by_m.iter_mut().zip(&mib) {
            series.push((kib as f64, m));
        }
    }
    figures.write_csv("04_io_vs_m", &rows)?;
    let title = "Bytes moved against fast memory (N = 2048, D = 64)";
    figures.write_svg("04_io_vs_m", &plot(title, "fast memory M (KiB)", by_m))?;
    println!("\nwrote book/src/figures/04_io_vs_n.{{csv,svg}} and 04_io_vs_m.{{csv,svg}}");
    Ok(())
}

fn plot(title: &str, x_label: &str, series: [Vec<(f64, f64)>; 3]) -> Plot {
    Plot {
        title: title.into(),
        x_label: x_label.into(),
        y_label: "MiB moved (log scale)".into(),
        x_scale: Scale::Log2,
        y_scale: Scale::Log10,
        series: ALGORITHMS
            .iter()
            .zip(series)
            .map(|((name, _), points)| Series { name: name.to_string(), points })
            .collect(),
    }
}
