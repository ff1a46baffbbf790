//! # grader
//!
//! The hidden checks of the exercises, the planted-bug mutants they must catch, and the
//! `cargo grade` command (`src/bin/grade.rs`; the self-check runs in `src/bin/self_check.rs`).
//!
//! * [`ex01`] to [`ex12`]: one folder per exercise: its adapter trait, its checks and the
//!   lesson's implementation of the trait (the reference solution) in `mod.rs`, its planted
//!   bugs in `mutants.rs`, and `hidden.rs`, the `main` of its hidden test binary, attached to
//!   the exercise crate as its `hidden` test.
//! * [`check`]: a graded check (name, hint, body) and how it is run and reported.
//! * [`forward`]: the checks shared by every exercise that implements the attention contract.
//! * [`mutants`]: what the planted-bug implementations share; `wgsl_mutants`: planting a bug
//!   in a lesson's WGSL kernel.
//! * [`hidden`]: what every hidden test binary's `main` runs.
//! * [`memory`]: the working-memory checks (counting allocator).
//! * [`self_check`]: the lessons pass every check; every mutant is caught.
//!
//! Each exercise crate builds its hidden tests on its own (`cargo test -p ex03 --test hidden`),
//! so one half-finished exercise never stops another from being graded. The GPU exercises
//! (`ex08` to `ex10`) and `wgsl_mutants` need the `gpu` feature, which exercises 08 to 10 turn
//! on.
//!
//! Beside them, the course-wide tests (the top-level `tests` package, `tests/equivalence.rs`)
//! check that every registered version computes the same attention as the oracle and as
//! every other version.

mod adapter;
pub mod check;
pub mod ex01;
pub mod ex02;
pub mod ex03;
pub mod ex04;
pub mod ex05;
pub mod ex06;
pub mod ex07;
#[cfg(feature = "gpu")]
pub mod ex08;
#[cfg(feature = "gpu")]
pub mod ex09;
#[cfg(feature = "gpu")]
pub mod ex10;
pub mod ex11;
pub mod ex12;
pub mod features;
pub mod forward;
pub mod hidden;
pub mod memory;
pub mod mutants;
pub mod self_check;
#[cfg(feature = "gpu")]
pub mod wgsl_mutants;

/// An exercise the grader checks: its package, and what its self-check runs.
pub struct Exercise {
    /// `ex01`, ...
    pub name: &'static str,
    /// Its checks on the lesson, the bug-free control and every planted bug.
    pub self_check: fn() -> self_check::SelfCheck,
}

/// Every exercise the grader checks, in course order (the GPU exercises with the `gpu`
/// feature): what the self-check runs and `cargo grade --self-check` reports, checked against
/// the course manifest's exercises (`course.toml`) by a test.
pub fn exercises() -> Vec<Exercise> {
    let exercise = |name, self_check| Exercise { name, self_check };
    vec![
        exercise("ex01", ex01::self_check),
        exercise("ex02", ex02::self_check),
        exercise("ex03", ex03::self_check),
        exercise("ex04", ex04::self_check),
        exercise("ex05", ex05::self_check),
        exercise("ex06", ex06::self_check),
        exercise("ex07", ex07::self_check),
        #[cfg(feature = "gpu")]
        exercise("ex08", ex08::self_check),
        #[cfg(feature = "gpu")]
        exercise("ex09", ex09::self_check),
        #[cfg(feature = "gpu")]
        exercise("ex10", ex10::self_check),
        exercise("ex11", ex11::self_check),
        exercise("ex12", ex12::self_check),
    ]
}

#[cfg(all(test, feature = "gpu"))]
mod tests {
    /// The exercises the grader checks are the course manifest's, in its order.
    #[test]
    fn the_grader_checks_the_exercises_of_the_manifest() {
        let checked: Vec<&str> = super::exercises().iter().map(|e| e.name).collect();
        let listed: Vec<String> =
            course::lessons().into_iter().filter_map(|l| l.exercise).map(|e| e.package).collect();
        assert_eq!(checked, listed, "grader::exercises() against course.toml");
    }
}
