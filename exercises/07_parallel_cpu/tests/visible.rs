//! Small examples you can check by hand: `cargo test -p ex07 --test visible`.

use ex07::{attention, exp2};
use lesson03::TileSizes;
use ndarray::Array4;
use reference::AttentionOptions;

#[test]
fn exp2_of_simple_values() {
    assert_eq!(exp2(0.0), 1.0);
    assert_eq!(exp2(-3.0), 0.125);
    assert!((exp2(-0.5) - 0.5f32.sqrt()).abs() < 1e-7);
    assert_eq!(exp2(f32::NEG_INFINITY), 0.0);
}

#[test]
fn equal_scores_average_the_values_on_every_tiling() {
    let q = Array4::<f32>::zeros((1, 2, 5, 3));
    let k = Array4::<f32>::zeros((1, 2, 4, 3));
    let v = Array4::from_shape_fn((1, 2, 4, 3), |(_, h, j, _)| (h * 10 + j) as f32); // mean 1.5 or 11.5
    for (br, bc) in [(1, 1), (2, 3), (8, 8)] {
        let out = attention(&q, &k, &v, &AttentionOptions::new(), TileSizes::new(br, bc).unwrap())
            .unwrap();
        assert!(
            (out.o[[0, 0, 4, 0]] - 1.5).abs() < 1e-6 && (out.o[[0, 1, 0, 2]] - 11.5).abs() < 1e-5
        );
        assert!((out.lse[[0, 1, 3]] - 4f32.ln()).abs() < 1e-6);
    }
}
