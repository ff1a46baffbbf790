//! Hidden checks of exercise 05, run by `cargo grade ex05`.

use grader::ex05::Exercise05;
use lesson03::TileSizes;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput, Gradients};

// The memory check measures the learner's working memory with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

/// The learner's code, seen through the exercise's adapter trait.
struct Learner;

impl Exercise05 for Learner {
    fn backward(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<Gradients<f32>, AttentionError> {
        ex05::backward(q, k, v, options, forward, d_o, TileSizes::new(query_rows, key_cols)?)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex05", grader::ex05::checks(Learner))
}
