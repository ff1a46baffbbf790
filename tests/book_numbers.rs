//! The numbers the book's prose quotes from a measurement are the numbers in that
//! measurement's kept output: each claim below names the words of a page that quote a number,
//! the output under `book/src/generated/` and the table cell (or the ratio of two cells) it
//! comes from, and the test fails if the page no longer says those words, if the number in
//! them is not the cell rounded as quoted, or if the cell is gone. Headline figures and the
//! ratios to the peers are listed here; a page that quotes a new one adds its claim.
//!
//! The outputs' tables are those of the course's benchmarks: a title line, a header of column
//! names separated by two or more spaces, rows whose values end under their column's name.

use std::fs;

/// Where a number comes from: a table cell of a generated output.
#[derive(Clone, Copy, Debug)]
struct Cell {
    /// The output, under `book/src/generated/`, without `.txt`.
    file: &'static str,
    /// A line that starts the part of the output the table is in (`D=64, causal`), or "".
    section: &'static str,
    /// The start of the table's title line, after `section` (`v8 arena, times faster than`).
    table: &'static str,
    /// The row's first column (`16384`).
    row: &'static str,
    /// The column's name in the header.
    column: &'static str,
}

/// What a quoted number is: one cell, or one cell divided by another.
#[derive(Clone, Copy, Debug)]
enum Source {
    Cell(Cell),
    Ratio(Cell, Cell),
}

/// A number the prose quotes: `page` says `says`, which contains `number`, the value of
/// `source` rounded to as many decimals as `number` has.
#[derive(Clone, Copy, Debug)]
struct Claim {
    page: &'static str,
    says: &'static str,
    number: &'static str,
    source: Source,
}

const SIDE_BY_SIDE_H200_D64: &str = "lesson10_side_by_side_h200_d64";
const SIDE_BY_SIDE_H200_D128: &str = "lesson10_side_by_side_h200_d128";

fn at(
    file: &'static str,
    section: &'static str,
    table: &'static str,
) -> impl Fn(&'static str, &'static str) -> Cell {
    move |row, column| Cell { file, section, table, row, column }
}

fn claims() -> Vec<Claim> {
    let chapter = "10_fast_gpu.md";
    let notes = "lab_notes_fast_gpu.md";
    let claim = |page, says, number, source| Claim { page, says, number, source };
    let one = Source::Cell;
    let ratio = Source::Ratio;
    // Chapter 9's kernel and FlashAttention-2 in one run.
    let benchmark = at("gpu_benchmark", "", "not causal");
    // The chapter's run: every version at D = 64 on an H200.
    let d64 = at(SIDE_BY_SIDE_H200_D64, "D=64, not causal", "D=64, not causal: TFLOP/s");
    let v8 = at(SIDE_BY_SIDE_H200_D64, "D=64, not causal", "v8 arena, times faster than");
    let v8_causal = at(SIDE_BY_SIDE_H200_D64, "D=64, causal", "v8 arena, times faster than");
    let v11 = at(SIDE_BY_SIDE_H200_D64, "D=64, not causal", "v11 split f32, times faster than");
    let d128 = at(SIDE_BY_SIDE_H200_D128, "D=128, not causal", "D=128, not causal: TFLOP/s");
    let v10 = at(SIDE_BY_SIDE_H200_D128, "D=128, not causal", "v10 pairs, times faster than");
    let v10_causal = at(SIDE_BY_SIDE_H200_D128, "D=128, causal", "v10 pairs, times faster than");
    let v11_d128 =
        at(SIDE_BY_SIDE_H200_D128, "D=128, not causal", "v11 split f32, times faster than");
    // Chapter 11's run: one decoding step at batch 1 on an H200.
    let decoding = "11_decoding.md";
    let decode = at("lesson11_decode_benchmark", "B = 1", "B = 1");
    let graph = "cudnn_fp16_graph us";
    let n = "16384";
    let (flash, cudnn, efficient) =
        ("vs PyTorch flash_fp16", "vs PyTorch cudnn_fp16", "vs PyTorch efficient_fp32");
    let step = |number, says, faster, slower| {
        claim(chapter, says, number, ratio(d64(n, faster), d64(n, slower)))
    };
    vec![
        claim(
            chapter,
            "3.9 TFLOP/s at D = 64 and N = 16384",
            "3.9",
            one(benchmark(n, "GPU FlashAttention 128x16")),
        ),
        claim(
            chapter,
            "FlashAttention-2 runs at 308 in the same run",
            "308",
            one(benchmark(n, "PyTorch flash_fp16")),
        ),
        claim(chapter, "with f32 inputs at 1.7 to 1.8", "1.7", one(v11("4096", efficient))),
        claim(
            chapter,
            "1.7 to 1.8 times PyTorch's memory-efficient",
            "1.8",
            one(v11(n, efficient)),
        ),
        step("1.23", "It gained only 1.23 times", "v5 pipelined", "v4 specialised"),
        step("1.67", "runs 1.67 times as fast as version 5", "v6 registers", "v5 pipelined"),
        step("9.7", "runs 9.7 times as fast as version 1", "v7 f32 registers", "v1 register tiles"),
        claim(chapter, "version 1, at 19 TFLOP/s", "19", one(d64(n, "v7 f32 registers"))),
        step("0.55", "Version 7 is still 0.55 times", "v7 f32 registers", "PyTorch efficient_fp32"),
        claim(
            chapter,
            "version 8 runs at 1.65 times version 6",
            "1.65",
            one(v8(n, "vs v6 registers")),
        ),
        claim(chapter, "and 3.2 times version 7", "3.2", one(v11(n, "vs v7 f32 registers"))),
        claim(
            chapter,
            "1.76 times PyTorch's fp32 kernel at D = 64 and N = 16384",
            "1.76",
            one(v11(n, efficient)),
        ),
        step("8.9", "the tensor cores 8.9 times", "v2 tensor cores", "v1 register tiles"),
        step("2.1", "no bounds checks 2.1 times", "v3 no bounds checks", "v2 tensor cores"),
        step(
            "1.29",
            "constants, with what they allow, 1.29",
            "v4 specialised",
            "v3 no bounds checks",
        ),
        step("1.23", "two barriers 1.23", "v5 pipelined", "v4 specialised"),
        step("1.67", "registers 1.67", "v6 registers", "v5 pipelined"),
        step("1.65", "the order of the work, 1.65", "v8 arena", "v6 registers"),
        claim(chapter, "to 158.5 TFLOP/s", "158.5", one(d64(n, "v8 arena"))),
        claim(chapter, "0.52 and 0.53 times", "0.52", one(v8("4096", flash))),
        claim(chapter, "0.52 and 0.53 times", "0.53", one(v8(n, flash))),
        claim(chapter, "0.56 and 0.54 with the causal mask", "0.56", one(v8_causal("4096", flash))),
        claim(chapter, "0.56 and 0.54 with the causal mask", "0.54", one(v8_causal(n, flash))),
        claim(chapter, "0.37 times cuDNN", "0.37", one(v8(n, cudnn))),
        claim(chapter, "Version 11 is 1.69 and 1.76 times", "1.69", one(v11("4096", efficient))),
        claim(chapter, "at 0.50 and 0.51 times FlashAttention-2", "0.50", one(v10("4096", flash))),
        claim(chapter, "at 0.50 and 0.51 times FlashAttention-2", "0.51", one(v10(n, flash))),
        claim(chapter, "1.07 times version 8 on the H200", "1.07", one(v10(n, "vs v8 arena"))),
        claim(chapter, "(160.8 against 162.6 TFLOP/s", "160.8", one(d128(n, "v9 overlap"))),
        claim(chapter, "(160.8 against 162.6 TFLOP/s", "162.6", one(d128(n, "v8 arena"))),
        claim(notes, "0.52, 0.50 and 0.51 times FlashAttention-2", "0.52", one(v10("1024", flash))),
        claim(notes, "0.53 and 0.52 with the causal mask", "0.53", one(v10_causal("4096", flash))),
        claim(notes, "0.53 and 0.52 with the causal mask", "0.52", one(v10_causal(n, flash))),
        claim(notes, "Version 11 is 1.33 to 1.35 times", "1.33", one(v11_d128("4096", efficient))),
        claim(notes, "Version 11 is 1.33 to 1.35 times", "1.35", one(v11_d128(n, efficient))),
        claim(decoding, "against our 31.7", "31.7", one(decode("16384", "ours us"))),
        claim(decoding, "23.2 µs at 16K tokens", "23.2", one(decode("16384", graph))),
        claim(decoding, "124 µs at 128K against our 159", "124", one(decode("131072", graph))),
        claim(decoding, "124 µs at 128K against our 159", "159", one(decode("131072", "ours us"))),
        claim(
            decoding,
            "1.28 to 1.37 times our speed at batch 1",
            "1.37",
            ratio(decode("16384", "ours us"), decode("16384", graph)),
        ),
        claim(
            decoding,
            "1.28 to 1.37 times our speed at batch 1",
            "1.28",
            ratio(decode("131072", "ours us"), decode("131072", graph)),
        ),
        claim(decoding, "66 to 85% of the 3.97 TB/s", "85", one(decode("131072", "% of copy"))),
        claim(
            decoding,
            "At 64 MiB (16K tokens at batch 1, 2K at batch 8) it reaches 53%",
            "53",
            one(decode("16384", "% of copy")),
        ),
        claim(
            "when_to_use.md",
            "FlashAttention-2 in fp16 at 213",
            "213",
            one(at("lesson10_side_by_side", "D=64, not causal", "D=64, not causal: TFLOP/s")(
                "1024",
                "PyTorch flash_fp16",
            )),
        ),
    ]
}

/// The value of `cell`, or what is wrong with it.
fn value(cell: &Cell) -> Result<f64, String> {
    let path = tests::root().join(format!("book/src/generated/{}.txt", cell.file));
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let missing = |what: String| format!("{}.txt: {what}", cell.file);
    let section = lines
        .iter()
        .position(|l| l.starts_with(cell.section))
        .ok_or_else(|| missing(format!("no line starting `{}`", cell.section)))?;
    let title = (section..lines.len())
        .find(|&i| lines[i].starts_with(cell.table))
        .ok_or_else(|| missing(format!("no table `{}` after `{}`", cell.table, cell.section)))?;
    let header = lines.get(title + 1).ok_or_else(|| missing("a title without a header".into()))?;
    let (start, end) = column_span(header, cell.column).ok_or_else(|| {
        missing(format!("table `{}` has no column `{}`", cell.table, cell.column))
    })?;
    let row = lines[title + 2..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .find(|l| l.split_whitespace().next() == Some(cell.row))
        .ok_or_else(|| missing(format!("table `{}` has no row `{}`", cell.table, cell.row)))?;
    // The row's label may reach past the header's first name (`16384` under `N`).
    let label_end = row.len() - row.trim_start().len() + cell.row.len();
    let text = row.get(start.max(label_end)..end.min(row.len())).unwrap_or("").trim();
    text.parse().map_err(|_| missing(format!("`{text}` in row {} is not a number", cell.row)))
}

/// Where the values of column `name` lie in the rows under `header`: from the end of the
/// column before to the end of the name (values are right-aligned under their names).
fn column_span(header: &str, name: &str) -> Option<(usize, usize)> {
    let mut previous_end = 0;
    let mut rest = 0;
    while rest < header.len() {
        let start = rest + header[rest..].find(|c: char| c != ' ')?;
        let end = header[start..].find("  ").map_or(header.len(), |at| start + at);
        if header[start..end].trim() == name {
            return Some((previous_end, end));
        }
        previous_end = end;
        rest = end;
    }
    None
}

/// What is wrong with `claim`, if anything.
fn check(claim: &Claim, page_text: &str) -> Option<String> {
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if !flat(page_text).contains(&flat(claim.says)) {
        return Some(format!("{} no longer says \"{}\"", claim.page, claim.says));
    }
    if !claim.says.contains(claim.number) {
        return Some(format!("\"{}\" does not contain {}", claim.says, claim.number));
    }
    let value = match claim.source {
        Source::Cell(cell) => value(&cell),
        Source::Ratio(a, b) => value(&a).and_then(|a| Ok(a / value(&b)?)),
    };
    let value = match value {
        Ok(value) => value,
        Err(e) => return Some(format!("{}: \"{}\": {e}", claim.page, claim.says)),
    };
    let decimals = claim.number.split_once('.').map_or(0, |(_, fraction)| fraction.len());
    let rounded = format!("{value:.decimals$}");
    (rounded != claim.number).then(|| {
        format!(
            "{}: \"{}\" quotes {}, but its output gives {value} ({rounded})",
            claim.page, claim.says, claim.number
        )
    })
}

fn page(name: &str) -> String {
    let path = tests::root().join("book/src").join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_numbers_the_prose_quotes_are_those_of_their_outputs() {
    let problems: Vec<String> =
        claims().iter().filter_map(|claim| check(claim, &page(claim.page))).collect();
    assert!(
        problems.is_empty(),
        "numbers in the book that differ from their outputs:\n{}",
        problems.join("\n")
    );
}

/// The check finds a number that differs from its cell, words a page no longer says, and a
/// cell that is not there; and reads a cell right.
#[test]
fn the_check_finds_a_number_that_drifted() {
    let cell = at(SIDE_BY_SIDE_H200_D64, "D=64, not causal", "v8 arena, times faster than")(
        "16384",
        "vs PyTorch flash_fp16",
    );
    let claim = |says, number, source| Claim { page: "x.md", says, number, source };
    let right = claim("0.53 times", "0.53", Source::Cell(cell));
    assert_eq!(check(&right, "it is 0.53\ntimes as fast"), None);
    let drifted = claim("0.54 times", "0.54", Source::Cell(cell));
    assert!(check(&drifted, "it is 0.54 times").unwrap().contains("gives"));
    assert!(check(&right, "it is 0.5 times").unwrap().contains("no longer says"));
    let gone = Cell { column: "vs PyTorch flash_fp32", ..cell };
    assert!(check(&claim("0.53 times", "0.53", Source::Cell(gone)), "0.53 times").is_some());
    assert_eq!(column_span("N      v1 a  v2 bb", "v2 bb"), Some((11, 18)));
    assert_eq!(column_span("N      v1 a  v2 bb", "v1 a"), Some((1, 11)));
}
