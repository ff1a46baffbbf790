//! Hidden checks of exercise 03, run by `cargo grade ex03`.

use grader::ex03::Exercise03;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

// The memory check measures the learner's working memory with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

/// The learner's code, seen through the exercise's adapter trait.
struct Learner;

impl Exercise03 for Learner {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        ex03::attention(q, k, v, options, ex03::TileSizes::new(query_rows, key_cols)?)
    }

    fn tiles_computed(&self) -> usize {
        ex03::tiles_computed()
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex03", grader::ex03::checks(Learner))
}
