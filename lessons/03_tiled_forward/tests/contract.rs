//! Lesson 03 against the f64 oracle and the shared contract, over random shapes *and* random
//! tile sizes (1, sizes that do not divide N, and tiles larger than N).

use lesson03::{TileSizes, attention, tiles_computed, tiles_to_compute};
use ndarray::Array4;
use proptest::prelude::*;
use reference::Forward;
use reference::{AttentionOptions, Problem, ProblemSpec, Tolerance, check_agreement, oracle};
use testkit::checks::{check_rejects_bad_inputs, check_rejects_overflowing_logits, run};
use testkit::strategies::{ShapeLimits, cases, config, tile_size};

/// Lesson 03 with fixed tiles, in the shape every stage shares.
fn with_tiles(tiles: TileSizes) -> impl Forward {
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        attention(q, k, v, o, tiles)
    }
}

fn tiles() -> impl Strategy<Value = TileSizes> {
    (tile_size(300), tile_size(300)).prop_map(|(br, bc)| TileSizes::new(br, bc).unwrap())
}

testkit::contract_tests! {
    forward: |case, tiles| with_tiles(tiles),
    drawn: tiles(),
    example: with_tiles(TileSizes::new(2, 3).unwrap()),
    tolerance: Tolerance::F32,
    limits: ShapeLimits::CPU,
    cases: (256, 128, 32),
    when: true,
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn output_does_not_depend_on_tile_sizes(case in cases(ShapeLimits::CPU), a in tiles(), b in tiles()) {
        let p = case.problem();
        let (out_a, out_b) = (run(&with_tiles(a), &p).unwrap(), run(&with_tiles(b), &p).unwrap());
        // Tiles change only the order of f32 sums, so the two agree far more closely than
        // either agrees with an implementation that is wrong.
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        check_agreement(&out_a, &out_b, &expected, Tolerance::F32).map_err(|e| TestCaseError::fail(format!("{case:?} {a:?} vs {b:?}\n{e}")))?;
    }

}

proptest! {
    #![proptest_config(config(64))]

    /// Causal tiles right of the diagonal are skipped, not computed and masked: the tile
    /// counter of `tile_scores` sees exactly the pairs with a visible key.
    #[test]
    fn only_tiles_with_a_visible_key_are_computed(case in cases(ShapeLimits::CPU), tiles in tiles()) {
        let p = case.problem();
        let before = tiles_computed();
        run(&with_tiles(tiles), &p).unwrap();
        let shape = case.spec.shape();
        let per_head = tiles_to_compute(&shape, case.spec.causal, tiles);
        prop_assert_eq!(tiles_computed() - before, per_head * shape.batch * shape.heads);
    }
}

/// Validation comes before tiling: default tiles and tiles of one row refuse bad input too.
#[test]
fn rejects_bad_inputs_with_any_tiles() {
    check_rejects_bad_inputs(&with_tiles(TileSizes::default())).unwrap();
    check_rejects_bad_inputs(&with_tiles(TileSizes::new(1, 3).unwrap())).unwrap();
    check_rejects_overflowing_logits(&with_tiles(TileSizes::default())).unwrap();
}

#[test]
fn tiles_far_larger_than_the_problem_are_clamped_not_allocated() {
    let p = Problem::random(&ProblemSpec::new(1, 2, 8, 8, 4).causal(true), 1);
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    for tiles in [(64, 1 << 40), (1 << 40, 64), (usize::MAX, usize::MAX)] {
        let tiles = TileSizes::new(tiles.0, tiles.1).unwrap();
        let out = attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap();
        reference::assert_close(&out, &expected, Tolerance::F32);
    }
}

#[test]
fn error_messages_say_what_was_expected() {
    let err = TileSizes::new(0, 8).unwrap_err().to_string();
    assert_eq!(err, "tile size for query rows (Br) is 0; expected at least 1");
    let q = Array4::<f32>::zeros((1, 2, 3, 4));
    let k = Array4::<f32>::zeros((1, 2, 5, 8));
    let err = attention(&q, &k, &k, &AttentionOptions::new(), TileSizes::default())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("K has head_dim = 8 but Q has head_dim = 4"), "{err}");
}
