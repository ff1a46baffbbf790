//! Hidden checks of exercise 01, run by `cargo grade ex01`.

use grader::ex01::Exercise01;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

/// The learner's code, seen through the exercise's adapter trait.
struct Learner;

impl Exercise01 for Learner {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        ex01::attention(q, k, v, options)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex01", grader::ex01::checks(Learner))
}
