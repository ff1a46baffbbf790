//! Lesson 02 against the f64 oracle and the shared contract.

use proptest::prelude::*;
use reference::Tolerance;
use testkit::checks::{
    check_against_oracle, check_heads_independent, check_lse_at_least_row_max,
    check_rejects_bad_inputs, check_rejects_non_finite_inputs, check_rejects_overflowing_logits,
};
use testkit::strategies::{ShapeLimits, cases, config};

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn matches_the_oracle(case in cases(ShapeLimits::CPU)) {
        check_against_oracle(&lesson02::attention, &case, Tolerance::F32).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn logsumexp_is_at_least_the_row_max(case in cases(ShapeLimits::CPU)) {
        check_lse_at_least_row_max(&lesson02::attention, &case, Tolerance::F32).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn heads_and_batches_are_independent(case in cases(ShapeLimits { seq: 64, ..ShapeLimits::CPU })) {
        check_heads_independent(&lesson02::attention, &case).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn rejects_bad_inputs_with_clear_errors() {
    check_rejects_bad_inputs(&lesson02::attention).unwrap();
}

#[test]
fn rejects_nan_and_infinities_and_overflowing_logits() {
    check_rejects_non_finite_inputs(&lesson02::attention).unwrap();
    check_rejects_overflowing_logits(&lesson02::attention).unwrap();
}
