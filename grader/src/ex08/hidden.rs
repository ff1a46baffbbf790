//! Hidden checks of exercise 08, run by `cargo grade ex08`.

use grader::ex08::Exercise08;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

/// The learner's kernels, seen through the exercise's adapter trait.
struct Learner;

impl Exercise08 for Learner {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        ex08::attention(q, k, v, options)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex08", grader::ex08::checks(Learner))
}
