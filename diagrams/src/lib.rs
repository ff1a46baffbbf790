//! The book's diagrams, drawn from the lessons' own code so that they cannot drift from it:
//! the causal tiles come from lesson 03's `classify_tile`, the window's from the reference's
//! `visible_band`, the rescale and the split-KV merge show numbers computed by lesson 02's
//! `SoftmaxState` and lesson 11's `chunk`, the workgroups have the tiles lessons 09 and 10
//! choose, and the memory hierarchy shows the rates the course measured (read from the
//! benchmark outputs under `book/src/generated/`), and the course map has the lessons, their
//! prerequisites and exercise times of course.toml. The tensor-core pipeline has the tiles
//! lesson 10's version 10 prefers and the constants of the shader it specialises for them; the
//! grid's schedule is what version 10's own WGSL computes (its `kv_tile`, `rotation` and
//! `assignment`, run on the CPU by [`shader`]); the GPT-2 block has lesson 12's precision
//! strategies with the formats each stores, and lesson 11's paged cache as its code fills it.
//!
//! `cargo run -p diagrams` writes them to `book/src/figures/diagrams/` (book/generate.sh runs
//! it); a test fails when a committed drawing differs from what the code draws now.

pub mod schedule;
pub mod shader;
pub mod svg;

mod algorithm;
mod gpu;
mod map;
mod model;

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
        Diagram { name: "fast_kernel_pipeline", svg: gpu::fast_kernel_pipeline()? },
        Diagram { name: "split_kv_merge", svg: algorithm::split_kv_merge() },
        Diagram { name: "grid_schedule", svg: schedule::grid_schedule()? },
        Diagram { name: "gpt2_block", svg: model::gpt2_block()? },
    ])
}

/// Where the book keeps the drawings, relative to the workspace root.
pub const FOLDER: &str = "book/src/figures/diagrams";

/// The workspace root (this crate's parent folder).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate lies inside the workspace")
}
