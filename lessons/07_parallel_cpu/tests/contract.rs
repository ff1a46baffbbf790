//! The parallel forward against the f64 oracle and the shared contract, over random shapes and
//! random tiles; and its result does not depend on the number of threads.

use lesson03::TileSizes;
use ndarray::Array4;
use proptest::prelude::*;
use reference::Forward;
use reference::{AttentionOptions, Tolerance};
use testkit::checks::run;
use testkit::strategies::{ShapeLimits, cases, config, tile_size};

fn with_tiles(tiles: TileSizes) -> impl Forward {
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        lesson07::attention(q, k, v, o, tiles)
    }
}

fn tiles() -> impl Strategy<Value = TileSizes> {
    (tile_size(300), tile_size(300)).prop_map(|(br, bc)| TileSizes::new(br, bc).unwrap())
}

testkit::contract_tests! {
    forward: |case, tiles| with_tiles(tiles),
    drawn: tiles(),
    // A NaN in K once dropped its key silently: exp2 clamps NaN to a weight of 0. Tiles of 2
    // and 3 give tails on both sides.
    example: with_tiles(TileSizes::new(2, 3).unwrap()),
    tolerance: Tolerance::F32,
    limits: ShapeLimits::CPU,
    cases: (192, 192, 32),
    when: true,
}

proptest! {
    #![proptest_config(config(32))]

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
fn tiles_far_larger_than_the_problem_are_clamped_to_it() {
    let p = reference::Problem::random(&reference::ProblemSpec::new(1, 2, 8, 8, 4).causal(true), 1);
    let huge = TileSizes::new(64, 1 << 40).unwrap();
    let exact = TileSizes::new(8, 8).unwrap();
    assert_eq!(run(&with_tiles(huge), &p).unwrap(), run(&with_tiles(exact), &p).unwrap());
}
