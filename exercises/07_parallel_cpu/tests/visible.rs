//! Small examples you can check by hand: `cargo test -p ex07 --test visible`.

use ex07::{attention, attention_split_keys, exp2};
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

// The main task.

#[test]
fn two_keys_in_two_chunks_merge_into_their_weights() {
    // One query, two keys scoring 0 and ln 3 (scale 1): weights 1/4 and 3/4, whether the two
    // keys share a chunk or not.
    let q = Array4::from_shape_vec((1, 1, 1, 1), vec![1.0]).unwrap();
    let k = Array4::from_shape_vec((1, 1, 2, 1), vec![0.0, 3f32.ln()]).unwrap();
    let v = Array4::from_shape_vec((1, 1, 2, 1), vec![4.0, 8.0]).unwrap();
    let options = AttentionOptions::new().with_scale(1.0);
    for splits in [1, 2, 3] {
        let out = attention_split_keys(&q, &k, &v, &options, splits).unwrap();
        assert!((out.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-5, "{splits} splits"); // 4/4 + 8 * 3/4
    }
}
