//! Hidden checks of exercise 03, run by `cargo grade ex03`.

use grader::ex03::Exercise03;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

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
}

fn main() -> std::process::ExitCode {
    grader::hidden::run("ex03", "tiled FlashAttention forward", grader::ex03::checks(Learner))
}
