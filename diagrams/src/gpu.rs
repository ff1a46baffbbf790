//! Diagrams of the GPU: its memory hierarchy with the rates the course measured, how the
//! kernels of lessons 09 and 10 map a tile onto a workgroup, and the tile pipeline of lesson
//! 10's tensor-core kernel.

use std::path::Path;

use crate::svg::{Svg, Text, colour, legend};

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

/// The head dimension of the tensor-core pipeline's drawing: where version 10 is the lesson's
/// fastest.
const PIPELINE_HEAD_DIM: usize = 128;

/// A box of one memory: its `title` in 13 pixels, `details` below in 11.
fn memory_box(
    svg: &mut Svg,
    (x, y, w, h): (f64, f64, f64, f64),
    fill: &str,
    title: &str,
    details: &[String],
) {
    svg.rect(x, y, w, h, fill);
    let lines = 1.0 + details.len() as f64;
    let first = y + h / 2.0 - (lines - 1.0) * 7.0 + 4.5;
    svg.text(x + w / 2.0, first, title, Text { bold: true, ..Text::CENTRED });
    svg.lines(x + w / 2.0, first + 15.0, details, Text::SMALL);
}

/// A step's number in a small white square centred at `(x, y)`.
fn badge(svg: &mut Svg, (x, y): (f64, f64), step: usize) {
    svg.rect(x - 8.0, y - 8.0, 16.0, 16.0, colour::PLAIN);
    svg.text(x, y + 4.0, &step.to_string(), Text { bold: true, ..Text::SMALL });
}

/// The tile pipeline of lesson 10's tensor-core kernel, version 10 with the tiles it prefers at
/// D = 128 (versions 8 and 9 differ in who takes which rows): where Q, K, V, S, P and O live,
/// the steps that move them, the two phases of one step with their barriers, and how the two
/// subgroups of a pair split the work. Sizes come from the tiles and from the constants of the
/// shader the lesson specialises for them.
pub fn fast_kernel_pipeline() -> Result<String, String> {
    use lesson10::{LeaveOut, TileShape, V8, V10, Version};
    let d = PIPELINE_HEAD_DIM;
    let tiles = V10::preferred(d)[0];
    let source = V10::shader(&tiles, d, LeaveOut::NOTHING).map_err(|e| e.to_string())?;
    let shader = crate::shader::Shader::parse(&source.source)?;
    let count = |name: &str| shader.count(name);
    let (pairs, row_tiles, fragments) = (count("PAIRS")?, count("ROW_TILES")?, count("FRAGMENTS")?);
    let (key_blocks, half_keys) = (count("KEY_BLOCKS")?, count("HALF_KEY_BLOCKS")?);
    let half_fragments = count("HALF_FRAGMENTS")?;
    let (lanes_per_row, lanes) = (count("LANES_PER_ROW")?, count("LANES")?);
    let (q_passes, pass_pairs) = (count("Q_PASSES")?, count("PASS_PAIRS")?);
    let lazy = shader.constant("LAZY_RESCALE")?;
    let (rows, keys) = (tiles.block_q(), tiles.block_kv);
    let pair_rows = 16 * row_tiles;
    let bytes = tiles.workgroup_bytes(d);
    let v8 = V8::preferred(64)[0];

    let mut svg =
        Svg::titled(780.0, 840.0, "The tensor-core kernel's tile pipeline (lesson 10, version 10)");
    svg.text(
        390.0,
        46.0,
        &format!(
            "D = {d}; {} subgroups of {lanes} threads in {pairs} pairs; {rows} query rows and {keys} keys a tile; {:.1} KiB of workgroup memory",
            tiles.subgroups,
            bytes as f64 / 1024.0
        ),
        Text::CENTRED,
    );

    // Three memories, one band each; five columns of data.
    let col = |i: usize| 130.0 + i as f64 * 126.0;
    let w = 116.0;
    let (gpu_y, gpu_h) = (66.0, 44.0);
    let (wg_y, wg_h) = (150.0, 50.0);
    let (reg_y, reg_h) = (246.0, 66.0);
    let bands = [
        (gpu_y, gpu_h, vec!["GPU memory".to_string()]),
        (wg_y, wg_h, vec!["Workgroup".to_string(), "memory".to_string()]),
        (reg_y, reg_h, vec!["Registers".to_string(), "(one subgroup)".to_string()]),
    ];
    for (y, h, label) in &bands {
        let first = y + h / 2.0 - (label.len() as f64 - 1.0) * 8.0 + 4.0;
        svg.lines(20.0, first, label, Text { bold: true, ..Text::LEFT });
    }
    let gpu_box = |i: usize| (col(i), gpu_y, w, gpu_h);
    let wg_box = |i: usize| (col(i), wg_y, w, wg_h);
    let reg_box = |i: usize| (col(i), reg_y, w, reg_h);
    let f16_tile = |n: usize| format!("{n} × {d}, f16");
    memory_box(&mut svg, gpu_box(0), colour::SLOW, "Q_i", &[f16_tile(rows)]);
    memory_box(&mut svg, gpu_box(1), colour::SLOW, "K_t", &[f16_tile(keys)]);
    memory_box(&mut svg, gpu_box(2), colour::SLOW, "O_i (f32), L_i", &["at the end".to_string()]);
    memory_box(&mut svg, gpu_box(4), colour::SLOW, "V_t", &[f16_tile(keys)]);
    let pass_rows = pass_pairs * pair_rows;
    memory_box(
        &mut svg,
        wg_box(0),
        colour::DONE,
        "Q (f16)",
        &["before the loop:".to_string(), format!("{q_passes} passes, ≤ {pass_rows} rows")],
    );
    memory_box(&mut svg, wg_box(1), colour::DONE, "K_t (f16)", &[format!("{keys} × {d}")]);
    memory_box(&mut svg, wg_box(2), colour::DONE, "S (f32)", &[format!("{rows} × {keys}")]);
    memory_box(&mut svg, wg_box(3), colour::DONE, "P (f16)", &[format!("{rows} × {keys}")]);
    memory_box(&mut svg, wg_box(4), colour::DONE, "V_t (f16)", &[format!("{keys} × {d}")]);
    let pair_keys = half_keys * 16;
    memory_box(
        &mut svg,
        reg_box(0),
        colour::CURRENT,
        "Q fragments",
        &[format!("{pair_rows} rows × {d}"), "f16, whole loop".to_string()],
    );
    memory_box(
        &mut svg,
        reg_box(1),
        colour::CURRENT,
        "S = Q K_tᵀ",
        &[format!("{pair_rows} rows × {pair_keys} keys"), "f32 accumulators".to_string()],
    );
    memory_box(
        &mut svg,
        reg_box(2),
        colour::CURRENT,
        "softmax (f32)",
        &[
            format!("{} rows, {lanes_per_row} lanes a row", lanes / lanes_per_row),
            "m, l; P = exp2(S − m)".to_string(),
        ],
    );
    let o_box = (col(3), reg_y, 2.0 * w + 10.0, reg_h);
    memory_box(
        &mut svg,
        o_box,
        colour::CURRENT,
        "O += P V_t",
        &[
            format!("O fragments: {pair_rows} rows × {} columns, f32", half_fragments * 16),
            "rescaled and written out through S (7)".to_string(),
        ],
    );

    // The steps.
    let centre = |i: usize| col(i) + w / 2.0;
    let (gpu_bottom, wg_bottom) = (gpu_y + gpu_h, wg_y + wg_h);
    let down = |svg: &mut Svg, i: usize, from: f64, to: f64, step: usize| {
        svg.arrow((centre(i), from), (centre(i), to));
        badge(svg, (centre(i) + 14.0, (from + to) / 2.0), step);
    };
    down(&mut svg, 0, gpu_bottom, wg_y, 1);
    down(&mut svg, 0, wg_bottom, reg_y, 1);
    down(&mut svg, 1, gpu_bottom, wg_y, 2);
    down(&mut svg, 4, gpu_bottom, wg_y, 2);
    down(&mut svg, 1, wg_bottom, reg_y, 3);
    svg.arrow((col(0) + w, reg_y + reg_h / 2.0), (col(1), reg_y + reg_h / 2.0));
    // The round trip of S: stored, then read back a row at a time.
    svg.arrow((col(1) + w - 10.0, reg_y), (col(2) + 10.0, wg_bottom));
    badge(&mut svg, (col(1) + w + 5.0, (reg_y + wg_bottom) / 2.0), 4);
    svg.arrow((centre(2) + 10.0, wg_bottom), (centre(2) + 10.0, reg_y));
    svg.arrow((col(2) + w - 10.0, reg_y), (col(3) + 10.0, wg_bottom));
    badge(&mut svg, (col(2) + w + 5.0, (reg_y + wg_bottom) / 2.0), 5);
    down(&mut svg, 3, wg_bottom, reg_y, 6);
    svg.arrow((centre(4), wg_bottom), (centre(4), reg_y));
    svg.dashed_arrow((centre(2), wg_y), (centre(2), gpu_bottom));
    badge(&mut svg, (centre(2) + 14.0, (gpu_bottom + wg_y) / 2.0), 7);

    let staged = match tiles.load_at {
        lesson10::LoadAt::Staging => "read from GPU memory where it is staged",
        _ => "read from GPU memory as their phase starts",
    };
    let steps: [(&str, String); 9] = [
        (
            "1",
            format!(
                "Before the loop, Q passes through workgroup memory; each subgroup keeps its pair's {pair_rows} rows in registers."
            ),
        ),
        ("2", format!("Each tile, all the threads stage K_t and V_t, each thread its share, {staged}.")),
        (
            "3",
            format!(
                "S = Q K_tᵀ as 16 × 16 cooperative-matrix products; each fragment of K serves the pair's {row_tiles} row tiles."
            ),
        ),
        (
            "4",
            "The round trip: S goes to workgroup memory and, after a barrier, is read back by rows: a cooperative".to_string(),
        ),
        ("", "matrix has no element access in WGSL.".to_string()),
        (
            "5",
            format!(
                "Online softmax in f32: m and l per row; P = exp2(S − m), rounded to f16. When a row's max grows by more than {lazy:.0}"
            ),
        ),
        (
            "",
            format!("(log2 units: weights stay below 2^{lazy:.0}), a flag is set and O is rescaled through S's memory."),
        ),
        ("6", "O += P V_t on the tensor cores, accumulated in f32.".to_string()),
        ("7", "At the end, O / l goes out through S's memory, with L.".to_string()),
    ];
    for (k, (number, text)) in steps.iter().enumerate() {
        let y = 340.0 + k as f64 * 15.5;
        svg.text(20.0, y, number, Text { size: 12.0, bold: true, ..Text::LEFT });
        svg.text(36.0, y, text, Text { size: 12.0, ..Text::LEFT });
    }

    // One step of the loop: two phases, three barriers.
    let y = 516.0;
    svg.text(
        20.0,
        y - 14.0,
        "One step t of the loop: two phases (as in version 9), and the barriers (red)",
        Text { bold: true, ..Text::LEFT },
    );
    let left = [
        "Version 8 runs both".to_string(),
        "products in one phase,".to_string(),
        "the softmax in the next;".to_string(),
        "versions 9 and 10 put".to_string(),
        "S_t = Q K_tᵀ beside the".to_string(),
        "softmax of tile t − 1.".to_string(),
    ];
    svg.lines(20.0, y + 14.0, &left, Text { size: 12.0, ..Text::LEFT });
    phases(
        &mut svg,
        y,
        84.0,
        &[
            ("S_t = Q K_tᵀ; softmax of t − 1 (S → P); stage V_t−1".to_string(), colour::PLAIN),
            ("read the rescale flag; if set, rescale O through S".to_string(), colour::PLAIN),
            ("store S_t; O += P_t−1 V_t−1; stage K_t+1".to_string(), colour::PLAIN),
        ],
    );

    // A pair's split of the work.
    let y = 660.0;
    svg.text(
        20.0,
        y,
        &format!("A pair (version 10): two subgroups share {pair_rows} query rows; each 16 × 16 square is one fragment"),
        Text { bold: true, ..Text::LEFT },
    );
    let cell = 20.0;
    let fills = [colour::LOADED, colour::FULL];
    // Each grid: its title, its columns of fragments, whether it is split by rows (else by
    // columns), the fragments each subgroup takes along that side, and its caption.
    let grids = [
        (
            "S = Q K_tᵀ",
            key_blocks,
            false,
            half_keys,
            format!("by keys: {pair_keys} of {keys} each"),
        ),
        ("softmax", key_blocks, true, 1, format!("by rows: 16 of {pair_rows} each")),
        (
            "O += P V_t",
            fragments,
            false,
            half_fragments,
            format!("by columns: {} of {d} each", half_fragments * 16),
        ),
    ];
    let mut x = 20.0;
    for (title, columns, by_rows, per_subgroup, caption) in &grids {
        svg.text(x, y + 24.0, title, Text { bold: true, ..Text::LEFT });
        for r in 0..row_tiles {
            for c in 0..*columns {
                let owner = if *by_rows { r } else { c } / per_subgroup;
                let fill = fills[owner % 2];
                svg.rect(x + c as f64 * cell, y + 34.0 + r as f64 * cell, cell, cell, fill);
            }
        }
        svg.text(x, y + 34.0 + row_tiles as f64 * cell + 16.0, caption, Text::SMALL_LEFT);
        x += (*columns as f64 * cell).max(150.0) + 40.0;
    }
    let notes = [
        format!(
            "Each subgroup reads half the fragments of K and of V that it would alone. Versions 8 and 9 (at D = 64: {} subgroups",
            v8.subgroups
        ),
        format!(
            "of {} rows, {} keys a tile) give each subgroup its own rows for all three. Sizes: the lesson's tiles and its shader's constants.",
            16 * v8.row_tiles,
            v8.block_kv
        ),
    ];
    svg.lines(20.0, y + 128.0, &notes, Text { size: 12.0, ..Text::LEFT });
    legend(&mut svg, 20.0, y + 170.0, fills[0], "the pair's first subgroup");
    legend(&mut svg, 230.0, y + 170.0, fills[1], "its second");
    legend(&mut svg, 350.0, y + 170.0, colour::SLOW, "GPU memory");
    legend(&mut svg, 480.0, y + 170.0, colour::DONE, "workgroup memory");
    legend(&mut svg, 640.0, y + 170.0, colour::CURRENT, "registers");
    Ok(svg.finish("The tile pipeline of lesson 10's tensor-core kernel, version 10"))
}
