//! The book's diagrams, drawn from the lessons' own code so that they cannot drift from it:
//! the causal tiles come from lesson 03's `classify_tile`, the window's from the reference's
//! `visible_band`, the rescale and the split-KV merge show numbers computed by lesson 02's
//! `SoftmaxState` and lesson 11's `chunk`, the workgroups have the tiles lessons 09 and 10
//! choose, and the memory hierarchy shows the rates the course measured (read from the
//! benchmark outputs under `book/src/generated/`), and the course map has the lessons, their
//! prerequisites and exercise times of course.toml.
//!
//! `cargo run -p diagrams` writes them to `book/src/figures/diagrams/` (book/generate.sh runs
//! it); a test fails when a committed drawing differs from what the code draws now.

pub mod svg;

mod algorithm;
mod gpu;
mod map;

use std::path::Path;

/// One diagram: its file name (without `.svg`) and its SVG text.
pub struct Diagram {
    /// The file name, without `.svg`.
    pub name: &'static str,
    /// The drawing.
    pub svg: String,
}

/// Every diagram of the book. `generated` is `book/src/generated/`, whose benchmark outputs
/// give the memory hierarchy its measured rates.
pub fn all(generated: &Path) -> Result<Vec<Diagram>, String> {
    Ok(vec![
        Diagram { name: "course_map", svg: map::course_map() },
        Diagram { name: "memory_hierarchy", svg: gpu::memory_hierarchy(generated)? },
        Diagram { name: "tiles_one_step", svg: algorithm::tiles_one_step() },
        Diagram { name: "online_rescale", svg: algorithm::online_rescale() },
        Diagram { name: "loop_order", svg: algorithm::loop_order() },
        Diagram { name: "mask_tiles", svg: algorithm::mask_tiles() },
        Diagram { name: "backward_flow", svg: algorithm::backward_flow() },
        Diagram { name: "workgroup_mapping", svg: gpu::workgroup_mapping() },
        Diagram { name: "split_kv_merge", svg: algorithm::split_kv_merge() },
    ])
}

/// Where the book keeps the drawings, relative to the workspace root.
pub const FOLDER: &str = "book/src/figures/diagrams";

/// The workspace root (this crate's parent folder).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate lies inside the workspace")
}
