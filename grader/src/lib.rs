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
//! Beside them, `tests/equivalence.rs` checks that every registered stage computes the same
//! attention as the oracle and as every other stage.

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
