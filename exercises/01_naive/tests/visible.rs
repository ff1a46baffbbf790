//! Small examples you can check by hand: `cargo test -p ex01 --test visible`.
//! The hidden checks (`cargo grade ex01`) go much further: random shapes, masks, large logits.

use ex01::{attention, attention_with_features};
use ndarray::{Array2, Array4, array};
use reference::{AttentionError, AttentionOptions, Features};

fn head(rows: Array2<f32>) -> Array4<f32> {
    let (n, d) = rows.dim();
    rows.into_shape_with_order((1, 1, n, d)).unwrap()
}

#[test]
fn one_key_gives_its_value_and_its_score() {
    let (q, k, v) = (head(array![[1.0, 2.0]]), head(array![[3.0, -1.0]]), head(array![[5.0, 7.0]]));
    let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(0.5)).unwrap();
    assert_eq!(out.o.as_slice().unwrap(), &[5.0, 7.0]); // one key: weight 1
    assert_eq!(out.lse[[0, 0, 0]], 0.5); // L = S = 0.5 * (1*3 + 2*(-1))
}

#[test]
fn equal_scores_average_the_values() {
    let q = head(array![[1.0]]);
    let k = head(array![[2.0], [2.0]]);
    let v = head(array![[1.0], [3.0]]);
    let out = attention(&q, &k, &v, &AttentionOptions::new()).unwrap();
    assert!((out.o[[0, 0, 0, 0]] - 2.0).abs() < 1e-6);
    assert!((out.lse[[0, 0, 0]] - (2.0 + 2f32.ln())).abs() < 1e-6); // two scores of 2
}

#[test]
fn causal_first_row_sees_only_the_first_key() {
    let q = Array4::zeros((1, 1, 2, 1));
    let k = Array4::zeros((1, 1, 2, 1));
    let v = head(array![[1.0], [3.0]]);
    let out = attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
    assert_eq!(out.o[[0, 0, 0, 0]], 1.0);
    assert!((out.o[[0, 0, 1, 0]] - 2.0).abs() < 1e-6);
}

#[test]
fn mismatched_head_dims_are_an_error() {
    let q = Array4::zeros((1, 1, 2, 4));
    let k = Array4::zeros((1, 1, 2, 3));
    let err = attention(&q, &k, &k, &AttentionOptions::new()).unwrap_err();
    assert!(matches!(err, AttentionError::ShapeMismatch { axis: "head_dim", .. }), "{err}");
}

// The main task.

#[test]
fn alibi_weighs_a_key_one_step_from_the_diagonal_down_by_the_slope() {
    // Every q.k is 0. The one query's diagonal is the last key (key 1); key 0 is one step
    // away, so with slope ln 3 its score is -ln 3: weights 1/4 and 3/4.
    let q = head(array![[0.0]]);
    let k = head(array![[0.0], [0.0]]);
    let v = head(array![[4.0], [8.0]]);
    let features = Features::default().alibi(vec![3f32.ln()]);
    let out = attention_with_features(&q, &k, &v, &AttentionOptions::new(), &features).unwrap();
    assert!((out.o[[0, 0, 0, 0]] - 7.0).abs() < 1e-5); // 4/4 + 8 * 3/4
}

#[test]
fn a_softcap_keeps_every_score_below_it() {
    // One key scoring 1000 against one scoring 0: capped at 1, the weights are 1 : e.
    let q = head(array![[1.0]]);
    let k = head(array![[0.0], [1000.0]]);
    let v = head(array![[0.0], [1.0]]);
    let options = AttentionOptions::new().with_scale(1.0);
    let out =
        attention_with_features(&q, &k, &v, &options, &Features::default().softcap(1.0)).unwrap();
    let e = std::f32::consts::E;
    assert!((out.o[[0, 0, 0, 0]] - e / (1.0 + e)).abs() < 1e-5);
}
