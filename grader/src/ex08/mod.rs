//! Exercise 08: naive attention as three WGSL kernels.

pub mod mutants;

use std::rc::Rc;

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

use crate::check::Check;
use crate::forward::{Contract, forward_checks};

crate::adapter::exercise_trait! {
    /// What a solution of exercise 08 provides: naive attention computed by its WGSL kernels, on
    /// the shared GPU.
    pub trait Exercise08;
    /// Attention following the course contract.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The graded checks of exercise 08: the contract of every forward stage, within the GPU's
/// f32 tolerance.
pub fn checks(solution: impl Exercise08 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
        s.attention(q, k, v, o)
    })))
}

/// Naive attention with the WGSL source `shader` in place of lesson 08's: the lesson itself
/// (the reference solution) with [`lesson08::SHADER`], a mutant with a changed copy.
pub struct Shader(pub String);

impl Exercise08 for Shader {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        lesson08::attention_with_shader(&gpu.device, &gpu.queue, &self.0, q, k, v, options)
    }
}

/// The lesson's kernels: the reference solution.
pub fn lesson() -> Shader {
    Shader(lesson08::SHADER.to_string())
}
