//! # testkit — what the tests of every stage share (test-only)
//!
//! * [`strategies`]: proptest strategies over attention problems (shapes with `N = 1`,
//!   `Nq != Nkv`, odd sizes, causal or not, logits scaled up, one-hot spikes), and the case
//!   count every property test starts from.
//! * [`checks`]: the test bodies every stage runs with its own forward function (agreement with
//!   the oracle, `L >= row max`, independent heads, bad input rejected with the right error).
//! * [`contract_tests!`]: those bodies as the tests of one stage, written once.
//!
//! Lessons use it as a dev-dependency only, so that their builds never compile proptest; the
//! grader uses it to build its hidden checks.

pub mod checks;
pub mod strategies;

/// Re-exported for [`contract_tests!`], which expands to proptest's macros.
pub use proptest;

// ANCHOR: contract_tests
/// The contract's tests of one forward pass, written once for every stage (as candle's
/// `test_device!` writes a test once for every device): agreement with the f64 oracle on
/// random problems, `L` at least each row's largest score, batches and heads independent, and
/// bad input refused with the right error ([`checks`]). A stage names its forward, its
/// tolerance, its shape limits and the case counts of the three property tests (the third runs
/// two problems per case):
///
/// ```ignore
/// testkit::contract_tests! {
///     forward: lesson01::attention,
///     tolerance: Tolerance::F32,
///     limits: ShapeLimits::CPU,
///     cases: (128, 128, 32),
/// }
/// ```
///
/// A stage with parameters draws them with each case: `forward: |case, tiles| with_tiles(tiles)`
/// with `drawn: tiles()` (a strategy; the failing case names what it drew) and `example:
/// with_tiles(TileSizes::default())` (the forward that the bad-input checks call). `when:
/// gpu::for_tests().is_some()` skips every test where the condition is false.
// ANCHOR_END: contract_tests
#[macro_export]
macro_rules! contract_tests {
    (
        forward: $forward:expr,
        tolerance: $tolerance:expr,
        limits: $limits:expr,
        cases: ($cases:expr, $lse_cases:expr, $independent_cases:expr)
        $(, when: $when:expr)? $(,)?
    ) => {
        $crate::contract_tests! {
            forward: |case, _nothing| $forward,
            drawn: $crate::proptest::strategy::Just(()),
            example: $forward,
            tolerance: $tolerance,
            limits: $limits,
            cases: ($cases, $lse_cases, $independent_cases),
            when: true $(&& $when)?,
        }
    };
    (
        forward: |$case:ident, $param:pat_param| $forward:expr,
        drawn: $drawn:expr,
        example: $example:expr,
        tolerance: $tolerance:expr,
        limits: $limits:expr,
        cases: ($cases:expr, $lse_cases:expr, $independent_cases:expr),
        when: $when:expr $(,)?
    ) => {
        /// What failed, and with what drawn parameters (none: `()`).
        fn contract_failure(
            drawn: &impl ::std::fmt::Debug,
            error: String,
        ) -> $crate::proptest::test_runner::TestCaseError {
            let drawn = format!("{drawn:?}");
            let with = if drawn == "()" { String::new() } else { format!("with {drawn}: ") };
            $crate::proptest::test_runner::TestCaseError::fail(format!("{with}{error}"))
        }

        $crate::proptest::proptest! {
            #![proptest_config($crate::strategies::config($cases))]

            #[test]
            fn matches_the_oracle($case in $crate::strategies::cases($limits), drawn in $drawn) {
                if !$when { return Ok(()); }
                let $param = ::std::clone::Clone::clone(&drawn);
                let forward = $forward;
                $crate::checks::check_against_oracle(&forward, &$case, $tolerance)
                    .map_err(|e| contract_failure(&drawn, e))?;
            }
        }

        $crate::proptest::proptest! {
            #![proptest_config($crate::strategies::config($lse_cases))]

            #[test]
            fn logsumexp_is_at_least_the_row_max(
                $case in $crate::strategies::cases($limits),
                drawn in $drawn,
            ) {
                if !$when { return Ok(()); }
                let $param = ::std::clone::Clone::clone(&drawn);
                let forward = $forward;
                $crate::checks::check_lse_at_least_row_max(&forward, &$case, $tolerance)
                    .map_err(|e| contract_failure(&drawn, e))?;
            }
        }

        $crate::proptest::proptest! {
            #![proptest_config($crate::strategies::config($independent_cases))]

            #[test]
            fn heads_and_batches_are_independent(
                $case in $crate::strategies::cases($crate::strategies::ShapeLimits {
                    seq: 64,
                    ..$limits
                }),
                drawn in $drawn,
            ) {
                if !$when { return Ok(()); }
                let $param = ::std::clone::Clone::clone(&drawn);
                let forward = $forward;
                $crate::checks::check_heads_independent(&forward, &$case)
                    .map_err(|e| contract_failure(&drawn, e))?;
            }
        }

        #[test]
        fn rejects_bad_inputs_with_clear_errors() {
            if !$when {
                return;
            }
            let forward = $example;
            $crate::checks::check_rejects_bad_inputs(&forward).unwrap();
        }

        #[test]
        fn rejects_nan_and_infinities_and_overflowing_logits() {
            if !$when {
                return;
            }
            let forward = $example;
            $crate::checks::check_rejects_non_finite_inputs(&forward).unwrap();
            $crate::checks::check_rejects_overflowing_logits(&forward).unwrap();
        }
    };
}
