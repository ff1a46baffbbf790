//! Small examples you can check by hand: `cargo test -p ex02 --test visible`.

use ex02::{
    SoftmaxState, attention, merge_partials, naive_softmax, online_softmax, partial_attention,
    safe_softmax,
};
use ndarray::{Array4, array};
use reference::AttentionOptions;

#[test]
fn naive_softmax_overflows_and_safe_softmax_does_not() {
    let x = [1000.0, 999.0];
    assert!(naive_softmax(&x)[0].is_nan());
    let p = safe_softmax(&x);
    assert!((p[0] - 1.0 / (1.0 + (-1f32).exp())).abs() < 1e-6);
}

#[test]
fn push_rescales_when_the_maximum_grows() {
    let s = SoftmaxState::EMPTY.push(0.0).push(2.0);
    assert_eq!(s.max, 2.0);
    assert!((s.sum - ((-2f32).exp() + 1.0)).abs() < 1e-6);
}

#[test]
fn merging_halves_gives_the_whole() {
    let x = [1.0, 3.0, 2.0, 5.0];
    let merged = SoftmaxState::of(&x[..2]).merge(SoftmaxState::of(&x[2..]));
    let whole = SoftmaxState::of(&x);
    assert_eq!(merged.max, whole.max);
    assert!((merged.sum - whole.sum).abs() < 1e-6);
    assert_eq!(SoftmaxState::EMPTY.merge(SoftmaxState::EMPTY), SoftmaxState::EMPTY);
}

#[test]
fn online_softmax_of_equal_scores_is_uniform() {
    assert_eq!(online_softmax(&[3.0, 3.0]), vec![0.5, 0.5]);
    assert_eq!(online_softmax(&[f32::NEG_INFINITY]), vec![0.0]);
}

#[test]
fn online_attention_of_two_equal_keys_averages_the_values() {
    let q: Array4<f32> = array![[[[1.0]]]];
    let k: Array4<f32> = array![[[[2.0], [2.0]]]];
    let v: Array4<f32> = array![[[[1.0], [3.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::new()).unwrap();
    assert!((out.o[[0, 0, 0, 0]] - 2.0).abs() < 1e-6);
}

// The main task.

#[test]
fn two_halves_of_the_keys_merge_into_the_whole() {
    // One query, two keys scoring 0 and ln 3 (scale 1): weights 1/4 and 3/4.
    let q = Array4::from_shape_vec((1, 1, 1, 1), vec![1.0]).unwrap();
    let k = Array4::from_shape_vec((1, 1, 2, 1), vec![0.0, 3f32.ln()]).unwrap();
    let v = Array4::from_shape_vec((1, 1, 2, 1), vec![4.0, 8.0]).unwrap();
    let options = AttentionOptions::new().with_scale(1.0);
    let first = partial_attention(&q, &k, &v, &options, 0..1).unwrap();
    let second = partial_attention(&q, &k, &v, &options, 1..2).unwrap();
    assert_eq!(first.o[[0, 0, 0, 0]], 4.0); // one key each: O = its value, L = its score
    assert!((second.lse[[0, 0, 0]] - 3f32.ln()).abs() < 1e-6);
    let whole = merge_partials(&[first, second]).unwrap();
    assert!((whole.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-5); // 4/4 + 8 * 3/4
    assert!((whole.lse[[0, 0, 0]] - 4f32.ln()).abs() < 1e-6);
}
