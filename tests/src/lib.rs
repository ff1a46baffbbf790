//! # grader
//!
//! The hidden tests of the exercises, the planted-bug mutants they must catch, and the
//! `cargo grade` command (`src/bin/grade.rs`).
//!
//! * [`check`]: a graded check (name, hint, body) and how it is run and reported.
//! * [`forward`]: the checks shared by every exercise that implements the attention contract.
//! * [`ex01`] to [`ex09`]: each exercise's adapter trait, its checks, and the lesson's
//!   implementation of the trait (the reference solution).
//! * [`mutants`]: planted-bug implementations of each trait of exercises 01 to 07;
//!   [`wgsl_mutants`]: planted bugs in the lessons' WGSL kernels (exercises 08 and 09).
//! * [`hidden`]: the `main` of the hidden test binaries in `tests/hidden/`.
//! * [`memory`]: the working-memory checks (counting allocator).
//! * [`self_check`]: the lessons pass every check; every mutant is caught.
//!
//! Each exercise crate builds its hidden tests on its own (`cargo test -p ex03 --test hidden`),
//! so one half-finished exercise never stops another from being graded.
//!
//! Beside them, `tests/equivalence.rs` checks that every stage of the tour computes the same
//! attention as the oracle and as every other stage.

pub mod check;
pub mod ex01;
pub mod ex02;
pub mod ex03;
pub mod ex04;
pub mod ex05;
pub mod ex06;
pub mod ex07;
pub mod ex08;
pub mod ex09;
pub mod forward;
pub mod hidden;
pub mod memory;
pub mod mutants;
pub mod self_check;
pub mod wgsl_mutants;
