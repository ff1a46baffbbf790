//! Diagrams of the GPU: its memory hierarchy with the rates the course measured, and how the
//! kernels of lessons 09 and 10 map a tile onto a workgroup.

use std::path::Path;

use crate::svg::{Svg, Text, colour};

/// A benchmark output's device and date, from its `Device: NAME (...); DATE` line.
fn device_and_date(text: &str, file: &str) -> Result<(String, String), String> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Device: "))
        .ok_or_else(|| format!("{file}: no `Device: ` line"))?;
    let (described, date) = line
        .rsplit_once("; ")
        .ok_or_else(|| format!("{file}: `Device: {line}` has no `; DATE` at its end"))?;
    let name = described.split(" (").next().unwrap_or(described).to_string();
    Ok((name, date.to_string()))
}

/// The numbers of a table row: every whitespace-separated word that parses as a number.
fn numbers(line: &str) -> Vec<f64> {
    line.split_whitespace().filter_map(|w| w.parse().ok()).filter(|x: &f64| x.is_finite()).collect()
}

/// What `lab/src/bin/primitives.rs` measured: the best cooperative-matrix TFLOP/s
/// (registers only) and the fastest rate of fragment loads from workgroup memory (TB/s).
fn primitives(text: &str) -> Result<(f64, f64), String> {
    let file = "lesson10_primitives.txt";
    // Each row ends with three numbers: products per step, TFLOP/s, fragments loaded in TB/s.
    let rows = |label: &str| -> Vec<Vec<f64>> {
        text.lines().filter(|l| l.contains(label)).map(numbers).filter(|n| n.len() == 3).collect()
    };
    let best = |rows: Vec<Vec<f64>>, column: usize| rows.iter().map(|r| r[column]).reduce(f64::max);
    let tflops = best(rows("registers only"), 1);
    let loads = best(rows(" loaded"), 2);
    match (tflops, loads) {
        (Some(tflops), Some(loads)) => Ok((tflops, loads)),
        _ => Err(format!(
            "{file}: expected `registers only` rows and rows of fragments loaded, each ending in \
             (products, TFLOP/s, TB/s)"
        )),
    }
}

/// What lesson 11's decode benchmark measured: a WGSL copy's bandwidth and reading alone, GB/s.
fn copy_bandwidth(text: &str) -> Result<(f64, f64), String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("Copy bandwidth"))
        .ok_or("lesson11_decode_benchmark.txt: no `Copy bandwidth` line")?;
    let rates: Vec<f64> = line
        .split(' ')
        .zip(line.split(' ').skip(1))
        .filter(|(_, unit)| unit.starts_with("GB/s"))
        .filter_map(|(number, _)| number.parse().ok())
        .collect();
    match rates[..] {
        [copy, read] => Ok((copy, read)),
        _ => Err(format!("lesson11_decode_benchmark.txt: expected two GB/s rates in `{line}`")),
    }
}

fn read(generated: &Path, file: &str) -> Result<String, String> {
    let path = generated.join(file);
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The memory hierarchy of the course's GPUs (an H100 or an H200, of the same design):
/// capacities from NVIDIA's data sheets, rates measured by the course (lesson 10's primitives,
/// lesson 11's copy), each with its GPU and date.
pub fn memory_hierarchy(generated: &Path) -> Result<String, String> {
    let primitives_text = read(generated, "lesson10_primitives.txt")?;
    let (tensor_tflops, fragment_rate) = primitives(&primitives_text)?;
    let (p_device, p_date) = device_and_date(&primitives_text, "lesson10_primitives.txt")?;
    let decode_text = read(generated, "lesson11_decode_benchmark.txt")?;
    let (copy, read_alone) = copy_bandwidth(&decode_text)?;
    let (c_device, c_date) = device_and_date(&decode_text, "lesson11_decode_benchmark.txt")?;

    let mut svg = Svg::titled(
        780.0,
        440.0,
        "Where the data lives on an H100 or H200, fastest and smallest first",
    );
    let levels = [
        (
            "Registers",
            "256 KB per multiprocessor (132 of them)",
            "each thread's m, l, O and fragments of Q",
        ),
        (
            "Workgroup (shared) memory",
            "up to 228 KB per multiprocessor; 48 KB per workgroup through Vulkan",
            "tiles of K and V, S and P",
        ),
        ("L2 cache", "50 MB for the whole GPU", "K and V, read again by every workgroup of a head"),
        (
            "GPU memory (HBM)",
            "H100: 80 GB, 3.35 TB/s; H200: 141 GB, 4.8 TB/s (data sheets)",
            "Q, K, V and O; standard attention's S and P",
        ),
    ];
    let measured = [
        format!(
            "the tensor cores, working from registers: {tensor_tflops:.0} TFLOP/s ({p_device}, {p_date})"
        ),
        format!(
            "fragments loaded for the tensor cores: up to {fragment_rate:.1} TB/s ({p_device}, {p_date})"
        ),
        "not measured by the course".to_string(),
        format!(
            "WGSL copy {:.2} TB/s, reading alone {:.2} ({c_device}, {c_date})",
            copy / 1000.0,
            read_alone / 1000.0
        ),
    ];
    for (k, ((name, size, holds), rate)) in levels.iter().zip(&measured).enumerate() {
        let inset = (3 - k) as f64 * 20.0;
        let y = 50.0 + k as f64 * 82.0;
        let fill = [colour::CURRENT, colour::DONE, colour::LOADED, colour::SLOW][k];
        svg.rect(20.0 + inset, y, 740.0 - 2.0 * inset, 72.0, fill);
        svg.text(390.0, y + 20.0, name, Text { bold: true, ..Text::CENTRED });
        svg.text(390.0, y + 38.0, size, Text::CENTRED);
        svg.text(390.0, y + 55.0, &format!("holds: {holds}"), Text::SMALL);
        svg.text(390.0, y + 68.0, &format!("measured: {rate}"), Text::SMALL);
    }
    let (b, h, n) = (4.0, 16.0, 16384.0);
    let s_bytes = b * h * n * n * 4.0;
    let notes = [
        format!(
            "Standard attention's S for B = 4, H = 16, N = 16384 in f32: {:.1} GB, {:.0} times the L2 cache. FlashAttention",
            s_bytes / 1e9,
            s_bytes / 50e6
        ),
        "never writes it: its tiles live in the top two levels, and only Q, K, V, O and L cross the bottom one.".to_string(),
    ];
    svg.lines(20.0, 405.0, &notes, Text { size: 12.0, ..Text::LEFT });
    Ok(svg.finish("The GPU memory hierarchy with the course's measured rates"))
}

/// A workgroup of lesson 09's kernel (one thread per query row) and of lesson 10's version 8
/// (subgroups of 16 rows on the tensor cores), with the barriers of one tile of keys, at the
/// tiles each lesson chooses.
pub fn workgroup_mapping() -> String {
    let tiles09 = lesson09::default_tiles();
    let v8 = <lesson10::V8 as lesson10::Version>::preferred(64)[0];
    let mut svg = Svg::titled(
        780.0,
        520.0,
        "One workgroup, one tile of keys: who computes what, and where the barriers are",
    );

    // Lesson 09: one thread per row.
    let (rows, keys) = (tiles09.query_rows(), tiles09.key_cols());
    svg.text(
        20.0,
        58.0,
        &format!("Lesson 09: {rows} threads, one per query row; {keys} keys per tile"),
        Text { bold: true, ..Text::LEFT },
    );
    // The rows in at most 8 bands of threads, the last band taking what is left.
    let per_band = rows.div_ceil(8);
    let bands = rows.div_ceil(per_band);
    for band in 0..bands {
        let y = 70.0 + band as f64 * 16.0;
        svg.rect(20.0, y, 175.0, 16.0, colour::LOADED);
        let (first, last) = (band * per_band, ((band + 1) * per_band).min(rows) - 1);
        svg.text(
            107.5,
            y + 12.0,
            &format!("threads {first}–{last}: rows {first}–{last}"),
            Text::SMALL,
        );
    }
    phases(
        &mut svg,
        70.0,
        128.0,
        &[
            (
                format!(
                    "every thread copies its share of K_j, V_j ({keys} keys) to workgroup memory"
                ),
                colour::SLOW,
            ),
            ("each thread: its row's scores, max, sum, O".to_string(), colour::LOADED),
        ],
    );

    // Lesson 10, version 8: subgroups of 16 rows.
    let rows_per_subgroup = 16 * v8.row_tiles;
    svg.text(
        20.0,
        258.0,
        &format!(
            "Lesson 10, version 8 (D = 64): {} subgroups of 32 threads, {} rows each; {} keys per tile",
            v8.subgroups,
            rows_per_subgroup,
            v8.block_kv
        ),
        Text { bold: true, ..Text::LEFT },
    );
    for s in 0..v8.subgroups {
        let y = 270.0 + s as f64 * 16.0;
        svg.rect(20.0, y, 175.0, 16.0, colour::DONE);
        let first = s * rows_per_subgroup;
        svg.text(
            107.5,
            y + 12.0,
            &format!("subgroup {s}: rows {}–{}", first, first + rows_per_subgroup - 1),
            Text::SMALL,
        );
    }
    phases(
        &mut svg,
        270.0,
        128.0,
        &[
            (
                "tensor cores: S = Q K_jᵀ and O += P V (previous tile); S to memory".to_string(),
                colour::CURRENT,
            ),
            ("softmax of its rows, P to memory; stage K_j+1, V_j".to_string(), colour::DONE),
            ("read the rescale flag".to_string(), colour::PLAIN),
        ],
    );
    let notes = [
        "Red lines: workgroup barriers, which every thread of the workgroup must reach before any goes on.".to_string(),
        "The K and V tiles are shared by the whole workgroup; rows, and their softmax, belong to one thread".to_string(),
        "(lesson 09) or one subgroup (lesson 10): split-Q, as in FlashAttention-2. Tiles as the lessons choose them.".to_string(),
    ];
    svg.lines(20.0, 460.0, &notes, Text { size: 12.0, ..Text::LEFT });
    svg.finish("How lessons 09 and 10 map a tile onto a workgroup, with its barriers")
}

/// One tile's phases as a row of boxes from `x = 210`, `height` tall from `y`, each followed
/// by a barrier, then "next tile".
fn phases(svg: &mut Svg, y: f64, height: f64, phases: &[(String, &str)]) {
    let width = 530.0 / phases.len() as f64 - 12.0;
    let mut x = 210.0;
    for (text, fill) in phases {
        let words: Vec<&str> = text.split(' ').collect();
        let mut lines = vec![String::new()];
        for word in words {
            let line = lines.last_mut().expect("one line at least");
            if !line.is_empty() && (line.len() + word.len()) as f64 * 7.0 > width - 10.0 {
                lines.push(word.to_string());
            } else {
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(word);
            }
        }
        svg.labelled_box(x, y, width, height, fill, &lines);
        x += width + 6.0;
        svg.line((x, y - 6.0), (x, y + height + 6.0), colour::BARRIER, 3.0, false);
        x += 6.0;
    }
    svg.text(x - 6.0, y + height + 22.0, "→ next tile", Text { anchor: "end", ..Text::CENTRED });
}
