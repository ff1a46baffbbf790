//! # testkit — what the tests of every stage share (test-only)
//!
//! * [`strategies`]: proptest strategies over attention problems (shapes with `N = 1`,
//!   `Nq != Nkv`, odd sizes, causal or not, logits scaled up, one-hot spikes), and the case
//!   count every property test starts from.
//! * [`checks`]: the test bodies every stage runs with its own forward function (agreement with
//!   the oracle, `L >= row max`, independent heads, bad input rejected with the right error).
//!
//! Lessons use it as a dev-dependency only, so that their builds never compile proptest; the
//! grader uses it to build its hidden checks.

pub mod checks;
pub mod strategies;
