//! Small examples you can check by hand: `cargo test -p ex08 --test visible`. They run on your
//! GPU, or on lavapipe (see the README).

use ex08::attention;
use ndarray::{Array4, array};
use reference::AttentionOptions;

#[test]
fn one_key_gives_its_value() {
    let q: Array4<f32> = array![[[[1.0, 2.0]]]];
    let k: Array4<f32> = array![[[[3.0, -1.0]]]];
    let v: Array4<f32> = array![[[[5.0, 7.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(0.5)).unwrap();
    assert_eq!(out.o.iter().copied().collect::<Vec<_>>(), [5.0, 7.0]);
    assert!((out.lse[[0, 0, 0]] - 0.5).abs() < 1e-6); // 0.5 * (3 - 2)
}

#[test]
fn two_keys_weighted_a_quarter_and_three_quarters() {
    // Scores 0 and ln 3 (scale 1): weights 1/4 and 3/4.
    let q: Array4<f32> = array![[[[1.0]]]];
    let k: Array4<f32> = array![[[[0.0], [3f32.ln()]]]];
    let v: Array4<f32> = array![[[[4.0], [8.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(1.0)).unwrap();
    assert!((out.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-5);
    assert!((out.lse[[0, 0, 0]] - 4f32.ln()).abs() < 1e-6);
}

#[test]
fn causal_rows_that_see_no_key() {
    // Nq = 3, Nkv = 1: row i sees key 0 iff 0 <= i + 1 - 3, so only the last row sees it.
    let q = Array4::<f32>::ones((1, 1, 3, 2));
    let k = Array4::<f32>::ones((1, 1, 1, 2));
    let v: Array4<f32> = array![[[[2.0, 3.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
    assert_eq!(out.o.iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
    assert_eq!(out.lse[[0, 0, 0]], f32::NEG_INFINITY);
    assert_eq!(out.lse[[0, 0, 1]], f32::NEG_INFINITY);
}
