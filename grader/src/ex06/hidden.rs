//! Hidden checks of exercise 06, run by `cargo grade ex06`.

use grader::ex06::Exercise06;
use half::{bf16, f16};
use lesson06::Output;
use lesson06::policy::Tensor;
use ndarray::{Array3, Array4};
use reference::{AttentionError, AttentionOptions};

/// The learner's code, seen through the exercise's adapter trait.
struct Learner;

impl Exercise06 for Learner {
    fn attention_f16(
        &self,
        q: &Array4<f16>,
        k: &Array4<f16>,
        v: &Array4<f16>,
        options: &AttentionOptions,
    ) -> Result<Output<f16>, AttentionError> {
        ex06::attention(q, k, v, options)
    }
    fn attention_bf16(
        &self,
        q: &Array4<bf16>,
        k: &Array4<bf16>,
        v: &Array4<bf16>,
        options: &AttentionOptions,
    ) -> Result<Output<bf16>, AttentionError> {
        ex06::attention(q, k, v, options)
    }
    fn dispatch(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        options: &AttentionOptions,
    ) -> Result<(Tensor, Array3<f32>), AttentionError> {
        ex06::dispatch(q, k, v, options)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex06", grader::ex06::checks(Learner))
}
