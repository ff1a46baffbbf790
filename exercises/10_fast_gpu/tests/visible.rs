//! Small examples you can check by hand: `cargo test -p ex10 --test visible`. They run on your
//! GPU, or on lavapipe (see the README).

use ex10::{F32Tiles, Features, attention, attention_features};
use ndarray::{Array4, array};
use reference::{AttentionOptions, Problem, ProblemSpec, Tolerance, check_output, oracle};

/// `row_groups` groups of 8 threads with `rows` query rows each, `keys` keys per thread of
/// every tile. Eight groups (64 threads) are whole subgroups on every GPU the course names
/// (lavapipe's 8, NVIDIA's 32, AMD's 64).
fn tiles(row_groups: usize, rows: usize, keys: usize) -> F32Tiles {
    F32Tiles { row_groups, rows_per_thread: rows, keys_per_thread: keys, prefetch: true }
}

#[test]
fn two_keys_weighted_by_their_scores() {
    // One query, two keys: scores 0 and 2 (scale 1), so weights 1 : e^2.
    let q: Array4<f32> = array![[[[1.0]]]];
    let k: Array4<f32> = array![[[[0.0], [2.0]]]];
    let v: Array4<f32> = array![[[[1.0], [3.0]]]];
    let options = AttentionOptions::new().with_scale(1.0);
    let out = attention(&q, &k, &v, &options, tiles(8, 4, 1)).unwrap();
    let (w0, w1) = (1.0 / (1.0 + 2f32.exp()), 2f32.exp() / (1.0 + 2f32.exp()));
    assert!((out.o[[0, 0, 0, 0]] - (w0 + 3.0 * w1)).abs() < 1e-6);
    assert!((out.lse[[0, 0, 0]] - (1.0 + 2f32.exp()).ln()).abs() < 1e-6);
}

#[test]
fn every_row_key_and_chunk_of_a_thread() {
    // 40 rows, 70 keys, D = 40 (10 chunks: two O chunks per thread, the second one past D for
    // most threads): every thread's rows, keys and chunks are used.
    let p = Problem::random(&ProblemSpec::new(1, 2, 40, 70, 40).causal(true), 1);
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    for shape in [tiles(8, 4, 1), tiles(8, 4, 2), tiles(8, 8, 4)] {
        let out = attention(&p.q, &p.k, &p.v, &p.options, shape).unwrap();
        check_output(&out, &expected, Tolerance::F32).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
    }
}

#[test]
fn causal_rows_that_see_no_key() {
    // Nq = 3, Nkv = 1: only the last row sees the key.
    let q = Array4::<f32>::ones((1, 1, 3, 2));
    let k = Array4::<f32>::ones((1, 1, 1, 2));
    let v: Array4<f32> = array![[[[2.0, 3.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::causal(), tiles(8, 4, 1)).unwrap();
    assert_eq!(out.o.iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
    assert_eq!(out.lse[[0, 0, 0]], f32::NEG_INFINITY);
}

// The main task.

#[test]
fn a_softcap_of_one_bounds_every_score_by_one() {
    // One query, two keys with scores 0 and 10 (scale 1); capped at 1 they become 0 and
    // tanh(10), so the weights are 1 : e^tanh(10) (not 1 : e^10).
    let q: Array4<f32> = array![[[[1.0]]]];
    let k: Array4<f32> = array![[[[0.0], [10.0]]]];
    let v: Array4<f32> = array![[[[1.0], [3.0]]]];
    let options = AttentionOptions::new().with_scale(1.0);
    let features = Features { softcap: Some(1.0), ..Features::default() };
    let out = attention_features(&q, &k, &v, &options, &features, tiles(8, 4, 1)).unwrap();
    let e = 10f32.tanh().exp();
    assert!((out.o[[0, 0, 0, 0]] - (1.0 + 3.0 * e) / (1.0 + e)).abs() < 1e-5);
    assert!((out.lse[[0, 0, 0]] - (1.0 + e).ln()).abs() < 1e-5);
}

#[test]
fn alibi_favours_the_nearest_keys() {
    // Equal scores, slope 1: one query (Nq = 1) against three keys, its diagonal key is the
    // last one (Nkv - Nq = 2): biases -2, -1, 0.
    let q: Array4<f32> = array![[[[0.0]]]];
    let k: Array4<f32> = array![[[[1.0], [1.0], [1.0]]]];
    let v: Array4<f32> = array![[[[1.0], [2.0], [4.0]]]];
    let features = Features::default().alibi(vec![1.0]);
    let out = attention_features(&q, &k, &v, &AttentionOptions::new(), &features, tiles(8, 4, 1))
        .unwrap();
    let w: Vec<f32> = [-2f32, -1.0, 0.0].iter().map(|b| b.exp()).collect();
    let expected = (w[0] + 2.0 * w[1] + 4.0 * w[2]) / (w[0] + w[1] + w[2]);
    assert!((out.o[[0, 0, 0, 0]] - expected).abs() < 1e-5);
}
