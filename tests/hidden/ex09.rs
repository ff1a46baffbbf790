//! Hidden checks of exercise 09, run by `cargo grade ex09`.

use ex09::TileSizes;
use grader::ex09::Exercise09;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

/// The learner's kernel, seen through the exercise's adapter trait.
struct Learner;

impl Exercise09 for Learner {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        ex09::attention(q, k, v, options, TileSizes::new(query_rows, key_cols)?)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::run("ex09", "FlashAttention forward in WGSL", grader::ex09::checks(Learner))
}
