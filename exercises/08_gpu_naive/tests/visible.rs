//! Small examples you can check by hand: `cargo test -p ex08 --test visible`. They run on your
//! GPU, or on lavapipe (see the README).

use ex08::{Dropout, attention, attention_dropout};
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

// The main task.

#[test]
fn dropout_with_p_zero_keeps_every_weight() {
    // p = 0: the threshold is 0, every random word passes, and 1 / (1 - p) = 1.
    let q: Array4<f32> = array![[[[1.0, 0.0]]]];
    let k: Array4<f32> = array![[[[0.0, 0.0], [0.0, 0.0]]]];
    let v: Array4<f32> = array![[[[2.0, 4.0], [6.0, 8.0]]]];
    let dropout = Dropout { p: 0.0, seed: 42 };
    let out = attention_dropout(&q, &k, &v, &AttentionOptions::new(), dropout).unwrap();
    assert_eq!(out.o.iter().copied().collect::<Vec<_>>(), [4.0, 6.0]);
}

#[test]
fn the_mask_is_philox_of_j_i_h_b() {
    // Q = 0: both weights are 1/2; V = identity, so O[0, 0, 0, j] is weight j after dropout:
    // 0 if dropped, 1/2 / (1 - p) = 1 if kept (p = 1/2).
    let q = Array4::zeros((1, 1, 1, 2));
    let k = Array4::zeros((1, 1, 2, 2));
    let v: Array4<f32> = array![[[[1.0, 0.0], [0.0, 1.0]]]];
    let dropout = Dropout { p: 0.5, seed: 7 };
    let out = attention_dropout(&q, &k, &v, &AttentionOptions::new(), dropout).unwrap();
    for j in 0..2 {
        let kept = dropout.keeps(0, 0, 0, j);
        assert_eq!(out.o[[0, 0, 0, j]], if kept { 1.0 } else { 0.0 }, "key {j}");
    }
    // L is the logsumexp before dropout: ln(e^0 + e^0).
    assert!((out.lse[[0, 0, 0]] - 2f32.ln()).abs() < 1e-6);
}

#[test]
fn the_counter_holds_batch_head_row_and_key() {
    // Two batches and two heads, a seed with a high word: O[b, h, i, j] > 0 exactly where
    // Philox-4x32-10 of (j, i, h, b), keyed by the seed's two words, keeps weight (i, j).
    let (batch, heads, q_len, kv_len) = (2, 2, 3, 4);
    let q = Array4::zeros((batch, heads, q_len, kv_len));
    let k = Array4::zeros((batch, heads, kv_len, kv_len));
    let v = Array4::from_shape_fn(
        (batch, heads, kv_len, kv_len),
        |(_, _, j, d)| {
            if j == d { 1.0 } else { 0.0 }
        },
    );
    let dropout = Dropout { p: 0.5, seed: 0xDEAD_BEEF_0000_0001 };
    let out = attention_dropout(&q, &k, &v, &AttentionOptions::new(), dropout).unwrap();
    for ((b, h, i, j), &o) in out.o.indexed_iter() {
        assert_eq!(o > 0.0, dropout.keeps(b, h, i, j), "weight (b {b}, h {h}, i {i}, j {j})");
    }
}
