//! # grader
//!
//! Tests that span the whole course rather than one lesson:
//!
//! * `tests/equivalence.rs`: every stage listed by [`tour::stages`] computes the same
//!   attention as the f64 oracle *and* as every other stage, on the same random problems.
