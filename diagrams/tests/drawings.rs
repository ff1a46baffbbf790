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

fn drawing(name: &str) -> String {
    let all = diagrams::all(&generated()).unwrap();
    all.into_iter().find(|d| d.name == name).unwrap_or_else(|| panic!("no diagram {name}")).svg
}

/// What the lesson's documentation says the orders are (`KeyOrder::Rotated`,
/// `QueryOrder::LongestFirst`), for the example the schedule draws: 8 query tiles of as many
/// rows as a key tile has keys, 4 slices, groups of 16 workgroups.
mod expected {
    use diagrams::schedule::{QUERY_TILES, SLICES};

    /// Workgroup x starts at tile x T / 8 of its T tiles (all 8, or x + 1 with the mask) and
    /// wraps around.
    pub fn key_tiles(causal: bool) -> Vec<Vec<usize>> {
        let q = QUERY_TILES;
        let tiles = |x: usize| if causal { x + 1 } else { q };
        (0..q).map(|x| (0..tiles(x)).map(|u| (u + x * tiles(x) / q) % tiles(x)).collect()).collect()
    }

    /// As launched: slice y's tile x is the (8 y + x)-th workgroup launched.
    pub fn as_launched() -> Vec<Vec<usize>> {
        (0..SLICES).map(|y| (0..QUERY_TILES).map(|x| y * QUERY_TILES + x).collect()).collect()
    }

    /// Longest first in groups of 16 workgroups, 2 slices: in each group the query tiles from
    /// the last down, each for the group's 2 slices in turn.
    pub fn longest_first() -> Vec<Vec<usize>> {
        let group = 2;
        (0..SLICES)
            .map(|y| {
                let first = (y / group) * group * QUERY_TILES;
                (0..QUERY_TILES)
                    .map(|x| first + (QUERY_TILES - 1 - x) * group + y % group)
                    .collect()
            })
            .collect()
    }
}

fn schedule_source(group: usize) -> (String, usize) {
    let tiles = diagrams::schedule::example_tiles(group).unwrap();
    (diagrams::schedule::source(&tiles).unwrap(), lesson10::TileShape::block_q(&tiles))
}

#[test]
fn the_schedule_is_the_order_version_10_s_shader_computes() {
    use diagrams::schedule::{key_tiles, launch_order};
    let (wgsl, block_q) = schedule_source(16);
    assert_eq!(key_tiles(&wgsl, block_q, false).unwrap(), expected::key_tiles(false));
    assert_eq!(key_tiles(&wgsl, block_q, true).unwrap(), expected::key_tiles(true));
    assert_eq!(launch_order(&wgsl, block_q).unwrap(), expected::longest_first());
    let as_launched = lesson10::PairTiles {
        query_order: lesson10::QueryOrder::AsLaunched,
        ..diagrams::schedule::example_tiles(16).unwrap()
    };
    let wgsl = diagrams::schedule::source(&as_launched).unwrap();
    assert_eq!(launch_order(&wgsl, block_q).unwrap(), expected::as_launched());
    // The drawing shows the last workgroup of the order in groups where the shader puts it.
    let svg = drawing("grid_schedule");
    assert!(svg.contains("longest first in groups of 16 workgroups"), "{svg}");
}

/// Planted bugs in the shader's orders (the rotation left out, the wrap-around left out, the
/// query tiles taken shortest first) change what the schedule computes: the drawing follows
/// the WGSL, not a copy of it.
#[test]
fn a_change_to_the_shader_s_orders_changes_the_schedule() {
    use diagrams::schedule::{key_tiles, launch_order};
    let (wgsl, block_q) = schedule_source(16);
    let planted = |from: &str, to: &str| {
        assert!(wgsl.contains(from), "the shader no longer has `{from}`: update the test");
        wgsl.replace(from, to)
    };
    let no_rotation = planted("(work.x * spread) / query_tiles", "0u");
    assert_ne!(key_tiles(&no_rotation, block_q, false).unwrap(), expected::key_tiles(false));
    let no_wrap = planted("% max(tiles, 1u)", "% max(tiles + 1u, 1u)");
    assert_ne!(key_tiles(&no_wrap, block_q, true).unwrap(), expected::key_tiles(true));
    let shortest_first = planted("query_tiles - 1u - within / group", "within / group");
    assert_ne!(launch_order(&shortest_first, block_q).unwrap(), expected::longest_first());
}

#[test]
fn the_pipeline_has_the_tiles_version_10_prefers() {
    use lesson10::{TileShape, V10, Version};
    let tiles = V10::preferred(128)[0];
    let svg = drawing("fast_kernel_pipeline");
    let sizes = format!(
        "{} subgroups of 32 threads in {} pairs; {} query rows and {} keys a tile; {:.1} KiB",
        tiles.subgroups,
        tiles.subgroups / 2,
        tiles.block_q(),
        tiles.block_kv,
        tiles.workgroup_bytes(128) as f64 / 1024.0
    );
    assert!(svg.contains(&sizes), "expected `{sizes}` in the drawing");
    // A pair splits S by keys and O by columns: half of each.
    assert!(svg.contains(&format!("by keys: {} of {} each", tiles.block_kv / 2, tiles.block_kv)));
    assert!(svg.contains("by columns: 64 of 128 each"));
}

#[test]
fn the_gpt2_block_shows_every_precision_strategy_with_its_formats() {
    use lesson12::Precision;
    let svg = drawing("gpt2_block");
    for precision in Precision::ALL {
        let row = format!(">{}<", precision.name());
        assert!(svg.contains(&row), "no row for {row}");
    }
}

/// The tags of the GPT-2 block say what lesson 12's model stores in 16 bits: Q, K and V (the
/// cache's keys and values) are activations, in the strategy's storage format; the residual
/// stream after a block is in the stream's format, which stays f32 in the mixed strategies.
#[test]
fn the_model_rounds_where_the_gpt2_block_says() {
    use lesson12::precision::{Dtype, round};
    use lesson12::{Config, Gpt2, Precision};
    let config = Config {
        vocab_size: 64,
        n_positions: 16,
        n_embd: 32,
        n_layer: 1,
        n_head: 4,
        n_inner: 128,
        layer_norm_epsilon: 1e-5,
    };
    let model = Gpt2::random(config, 7);
    fn exact<'a>(values: impl IntoIterator<Item = &'a f32>, dtype: Dtype) -> bool {
        values.into_iter().all(|&v| round(v, dtype) == v)
    }
    for precision in Precision::ALL {
        let model = model.with_precision(precision);
        let block = &model.blocks[0];
        let mut x = model.embed(&[1, 5, 9, 3, 7], 0).unwrap();
        let (q, k, v) = model.queries_keys_values(block, &x);
        for (name, t) in [("Q", &q), ("K", &k), ("V", &v)] {
            assert!(exact(t, precision.storage()), "{}: {name}", precision.name());
        }
        let heads = lesson12::Attention::naive().attend(q, k, v).unwrap();
        model.finish_block(block, 0, &mut x, heads, &mut Default::default());
        assert!(exact(&x, precision.stream()), "{}: the stream", precision.name());
        if precision.stream() == Dtype::F32 && precision.storage() != Dtype::F32 {
            let dtype = precision.storage();
            assert!(!exact(&x, dtype), "{}: the stream is 16-bit", precision.name());
        }
    }
}
