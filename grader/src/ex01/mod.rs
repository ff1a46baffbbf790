//! Exercise 01: naive attention.

pub mod mutants;

use std::rc::Rc;

use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

use crate::check::Check;
use crate::forward::{Contract, forward_checks};

crate::adapter::exercise_trait! {
    /// What a solution of exercise 01 provides. The hidden test binary implements it with the
    /// learner's `ex01::attention`; the self-check with `lesson01` and with planted-bug mutants.
    pub trait Exercise01;
    /// Naive attention following the course contract.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The graded checks of exercise 01.
pub fn checks(solution: impl Exercise01 + 'static) -> Vec<Check> {
    forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
        solution.attention(q, k, v, o)
    })))
}

/// The lesson's implementation: the reference solution.
pub fn lesson() -> Functions {
    Functions { attention: Box::new(lesson01::attention) }
}
