//! The parallel forward against the f64 oracle and the shared contract, over random shapes and
//! random tiles; and its result does not depend on the number of threads.

use lesson03::TileSizes;
use ndarray::Array4;
use proptest::prelude::*;
use reference::Forward;
use reference::{AttentionOptions, Tolerance};
use testkit::checks::{
    check_against_oracle, check_heads_independent, check_lse_at_least_row_max,
    check_rejects_bad_inputs, check_rejects_non_finite_inputs, check_rejects_overflowing_logits,
    run,
};
use testkit::strategies::{ShapeLimits, cases, config, tile_size};

fn with_tiles(tiles: TileSizes) -> impl Forward {
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        lesson07::attention(q, k, v, o, tiles)
    }
}

fn tiles() -> impl Strategy<Value = TileSizes> {
    (tile_size(300), tile_size(300)).prop_map(|(br, bc)| TileSizes::new(br, bc).unwrap())
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn matches_the_oracle_for_any_tile_sizes(case in cases(ShapeLimits::CPU), tiles in tiles()) {
        check_against_oracle(&with_tiles(tiles), &case, Tolerance::F32).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn logsumexp_is_at_least_the_row_max(case in cases(ShapeLimits::CPU), tiles in tiles()) {
        check_lse_at_least_row_max(&with_tiles(tiles), &case, Tolerance::F32).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn heads_and_batches_are_independent(case in cases(ShapeLimits { seq: 64, ..ShapeLimits::CPU }), tiles in tiles()) {
        check_heads_independent(&with_tiles(tiles), &case).map_err(TestCaseError::fail)?;
    }

    /// Each task computes its tile alone, so one thread or many give identical bits.
    #[test]
    fn the_thread_count_does_not_change_a_single_bit(case in cases(ShapeLimits { seq: 128, ..ShapeLimits::CPU }), tiles in tiles()) {
        let p = case.problem();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let alone = one.install(|| run(&with_tiles(tiles), &p)).unwrap();
        let four = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let shared = four.install(|| run(&with_tiles(tiles), &p)).unwrap();
        prop_assert_eq!(alone, shared);
    }
}

#[test]
fn rejects_bad_inputs_with_clear_errors() {
    check_rejects_bad_inputs(&with_tiles(lesson07::default_tiles())).unwrap();
}

#[test]
fn rejects_nan_and_infinities_and_overflowing_logits() {
    // A NaN in K once dropped its key silently: exp2 clamps NaN to a weight of 0.
    check_rejects_non_finite_inputs(&with_tiles(TileSizes::new(2, 3).unwrap())).unwrap();
    check_rejects_overflowing_logits(&with_tiles(lesson07::default_tiles())).unwrap();
}

#[test]
fn tiles_far_larger_than_the_problem_are_clamped_to_it() {
    let p = reference::Problem::random(&reference::ProblemSpec::new(1, 2, 8, 8, 4).causal(true), 1);
    let huge = TileSizes::new(64, 1 << 40).unwrap();
    let exact = TileSizes::new(8, 8).unwrap();
    assert_eq!(run(&with_tiles(huge), &p).unwrap(), run(&with_tiles(exact), &p).unwrap());
}
