//! The committed drawings are what the code draws now, and the numbers in them come from
//! where the crate says they do.

use std::fs;
use std::path::{Path, PathBuf};

fn generated() -> PathBuf {
    diagrams::workspace_root().join("book/src/generated")
}

fn folder() -> PathBuf {
    diagrams::workspace_root().join(diagrams::FOLDER)
}

#[test]
fn every_committed_diagram_is_what_the_code_draws() {
    for diagram in diagrams::all(&generated()).unwrap() {
        let path = folder().join(format!("{}.svg", diagram.name));
        let committed = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `cargo run -p diagrams`", path.display()));
        assert!(
            committed == diagram.svg,
            "{} differs from what the code draws: run `cargo run -p diagrams`",
            path.display()
        );
    }
}

#[test]
fn no_drawing_is_left_over_from_an_old_name() {
    let names: Vec<String> =
        diagrams::all(&generated()).unwrap().iter().map(|d| format!("{}.svg", d.name)).collect();
    for entry in fs::read_dir(folder()).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(names.contains(&file), "{file} is not drawn by the diagrams crate: delete it");
    }
}

/// A copy of the two benchmark outputs the memory hierarchy reads, edited by `edit`, in a
/// folder of its own for the test `test` (tests run in parallel).
fn edited_outputs(test: &str, edit: impl Fn(&str, String) -> String) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("diagrams-{test}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let mut changed = false;
    for file in ["lesson10_primitives.txt", "lesson11_decode_benchmark.txt"] {
        let text = fs::read_to_string(generated().join(file)).unwrap();
        let edited = edit(file, text.clone());
        changed |= edited != text;
        fs::write(dir.join(file), edited).unwrap();
    }
    assert!(changed, "the test's edit no longer matches the outputs it edits: update the test");
    dir
}

/// `line` with the `column`-th of its last three words (a table row's numbers) set to `value`.
fn set_column(line: &str, column: usize, value: &str) -> String {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let at = words.len() - 3 + column;
    words[at] = value;
    words.join(" ")
}

fn memory_hierarchy(generated: &Path) -> Result<String, String> {
    let all = diagrams::all(generated)?;
    Ok(all.into_iter().find(|d| d.name == "memory_hierarchy").unwrap().svg)
}

#[test]
fn the_memory_hierarchy_shows_the_measured_rates() {
    let dir = edited_outputs("rates", |file, text| match file {
        "lesson10_primitives.txt" => {
            text.lines()
                .map(|l| {
                    if l.starts_with("registers only") { set_column(l, 1, "777") } else { l.into() }
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
        _ => text
            .lines()
            .map(|l| match l.split_once(": ") {
                // "Copy bandwidth (...): COPY GB/s; reading alone: READ GB/s"
                Some((head, rates)) if l.starts_with("Copy bandwidth") => {
                    let rest = rates.split_once(' ').map_or("", |(_, rest)| rest);
                    format!("{head}: 1234 {rest}")
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    });
    let svg = memory_hierarchy(&dir).unwrap();
    assert!(svg.contains("777 TFLOP/s"), "the tensor-core rate is not the measured one");
    assert!(svg.contains("WGSL copy 1.23 TB/s"), "the copy rate is not the measured one");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_measurement_is_an_error_naming_its_file() {
    let dir = edited_outputs("missing", |file, text| match file {
        "lesson11_decode_benchmark.txt" => text.replace("Copy bandwidth", "Bandwidth"),
        _ => text,
    });
    let err = memory_hierarchy(&dir).unwrap_err();
    assert!(
        err.contains("lesson11_decode_benchmark.txt") && err.contains("Copy bandwidth"),
        "{err}"
    );
    fs::remove_dir_all(&dir).unwrap();
    let err = memory_hierarchy(Path::new("/no/such/folder")).unwrap_err();
    assert!(err.contains("lesson10_primitives.txt"), "{err}");
}
