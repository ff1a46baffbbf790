//! Lesson 01 against the f64 oracle and the shared contract.

use reference::Tolerance;
use testkit::strategies::ShapeLimits;

testkit::contract_tests! {
    forward: lesson01::attention,
    tolerance: Tolerance::F32,
    limits: ShapeLimits::CPU,
    cases: (128, 128, 32),
}
