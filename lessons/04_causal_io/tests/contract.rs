//! Naive, FlashAttention-1 and FlashAttention-2 on the two-level memory all compute the same
//! attention as the f64 oracle, for random shapes and random tiles.

use lesson03::TileSizes;
use lesson04::{Run, flash1, flash2, naive};
use ndarray::Array4;
use proptest::prelude::*;
use reference::Forward;
use reference::{AttentionError, AttentionOptions, Tolerance};
use testkit::checks::{
    check_against_oracle, check_heads_independent, check_rejects_bad_inputs,
    check_rejects_non_finite_inputs, check_rejects_overflowing_logits,
};
use testkit::strategies::{ShapeLimits, cases, config, tile_size};

/// Fast memory large enough for any tile the tests draw.
const AMPLE: usize = 1 << 30;

type Algorithm = fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
    TileSizes,
    usize,
) -> Result<Run, AttentionError>;

const ALGORITHMS: [(&str, Algorithm); 3] =
    [("naive", naive::attention), ("flash1", flash1::attention), ("flash2", flash2::attention)];

fn forward(algorithm: Algorithm, tiles: TileSizes) -> impl Forward {
    move |q: &_, k: &_, v: &_, o: &_| algorithm(q, k, v, o, tiles, AMPLE).map(|run| run.output)
}

fn tiles() -> impl Strategy<Value = TileSizes> {
    (tile_size(200), tile_size(200)).prop_map(|(br, bc)| TileSizes::new(br, bc).unwrap())
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn every_algorithm_matches_the_oracle(case in cases(ShapeLimits { seq: 200, ..ShapeLimits::CPU }), tiles in tiles()) {
        for (name, algorithm) in ALGORITHMS {
            check_against_oracle(&forward(algorithm, tiles), &case, Tolerance::F32)
                .map_err(|e| TestCaseError::fail(format!("{name} with {tiles:?}: {e}")))?;
        }
    }
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn heads_and_batches_are_independent(case in cases(ShapeLimits { seq: 48, ..ShapeLimits::CPU }), tiles in tiles()) {
        for (name, algorithm) in ALGORITHMS {
            check_heads_independent(&forward(algorithm, tiles), &case).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        }
    }
}

#[test]
fn bad_inputs_are_rejected() {
    for (_, algorithm) in ALGORITHMS {
        let f = forward(algorithm, TileSizes::new(3, 2).unwrap());
        check_rejects_bad_inputs(&f).unwrap();
        check_rejects_non_finite_inputs(&f).unwrap();
        check_rejects_overflowing_logits(&f).unwrap();
    }
}

#[test]
fn tiles_far_larger_than_the_problem_are_clamped_to_it() {
    let x = Array4::<f32>::ones((1, 1, 8, 4));
    for (name, algorithm) in ALGORITHMS {
        let huge = TileSizes::new(64, 1 << 40).unwrap();
        let run = algorithm(&x, &x, &x, &AttentionOptions::new(), huge, usize::MAX).unwrap();
        let exact = algorithm(
            &x,
            &x,
            &x,
            &AttentionOptions::new(),
            TileSizes::new(8, 8).unwrap(),
            usize::MAX,
        )
        .unwrap();
        assert_eq!(run, exact, "{name}");
    }
}

#[test]
fn tiles_that_do_not_fit_in_fast_memory_are_an_error() {
    let x = Array4::<f32>::zeros((1, 1, 8, 4));
    let tiles = TileSizes::new(4, 4).unwrap();
    // (2*4*4 + 2*4*4 + 4*4 + 2*4) * 4 = 352 bytes needed.
    for (name, algorithm) in ALGORITHMS {
        let err = algorithm(&x, &x, &x, &AttentionOptions::new(), tiles, 351).unwrap_err();
        assert_eq!(err, AttentionError::TilesDoNotFit { needed: 352, available: 351 }, "{name}");
        assert!(algorithm(&x, &x, &x, &AttentionOptions::new(), tiles, 352).is_ok(), "{name}");
    }
}
