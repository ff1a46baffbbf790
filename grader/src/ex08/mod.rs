//! Exercise 08: naive attention as three WGSL kernels; the main task, the same kernels with
//! dropout whose mask a counter-based random generator draws.

pub mod dropout;
pub mod mutants;

use std::rc::Rc;

use ndarray::Array4;
use reference::features::Dropout;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

use crate::check::{Check, main_task};
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
    /// Attention with dropout on the weights (the main task).
    fn attention_dropout(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        dropout: Dropout,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The graded checks of exercise 08: the contract of every forward stage, within the GPU's
/// f32 tolerance; then the main task's.
pub fn checks(solution: impl Exercise08 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let x = s.clone();
    let mut checks =
        forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
            x.attention(q, k, v, o)
        })));
    checks.extend(main_task(dropout::checks(s)));
    checks
}

/// Naive attention with the WGSL sources `naive` and `dropout`: the reference solutions
/// ([`lesson`]), or a mutant with a changed copy of one of them.
pub struct Shader {
    /// The kernels of the warm-up.
    pub naive: String,
    /// The kernels with dropout of the main task.
    pub dropout: String,
}

impl Exercise08 for Shader {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        lesson08::attention_with_shader(&gpu.device, &gpu.queue, &self.naive, q, k, v, options)
    }

    fn attention_dropout(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        dropout: Dropout,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let gpu = gpu::Gpu::shared()?;
        let (device, queue, source) = (&gpu.device, &gpu.queue, &self.dropout);
        lesson08::dropout::attention_with_dropout_shader(
            device, queue, source, q, k, v, options, dropout,
        )
    }
}

/// The reference solutions: the lesson's kernels for the warm-up, and for the main task the
/// lesson's kernels with dropout ([`dropout::solution`], which lives in the grader: the book
/// explains the idea without printing it).
pub fn lesson() -> Shader {
    Shader { naive: lesson08::SHADER.to_string(), dropout: dropout::solution() }
}

/// The self-check: the lesson's shaders pass every check, and each planted bug, in the
/// warm-up's shader or in the main task's, fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    let lesson = [lesson08::SHADER.to_string(), dropout::solution()];
    let bugs = (&mutants::NAIVE_BUGS[..], &dropout::DROPOUT_BUGS[..]);
    crate::wgsl_mutants::self_check(lesson, bugs, |[naive, dropout]| {
        checks(Shader { naive, dropout })
    })
}
