//! Small examples you can check by hand: `cargo test -p ex05 --test visible`.

use ex05::{backward, backward_with_features};
use lesson03::TileSizes;
use ndarray::{Array3, Array4};
use reference::{AttentionOptions, Features};

#[test]
fn one_key_sends_all_of_do_to_its_value() {
    // One key: P = 1, so dV = dO_0 + dO_1 and dS = 0, hence dQ = dK = 0.
    let q = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 0.0, 0.0, 1.0]).unwrap();
    let k = Array4::from_shape_vec((1, 1, 1, 2), vec![0.5, -0.5]).unwrap();
    let v = Array4::from_shape_vec((1, 1, 1, 2), vec![2.0, 3.0]).unwrap();
    let d_o = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let score = 0.5 / 2f32.sqrt(); // L = the one score, scale * q_i . k
    let forward = reference::AttentionOutput {
        o: Array4::from_shape_vec((1, 1, 2, 2), vec![2.0, 3.0, 2.0, 3.0]).unwrap(),
        lse: Array3::from_shape_vec((1, 1, 2), vec![score, -score]).unwrap(),
    };
    let g = backward(
        &q,
        &k,
        &v,
        &AttentionOptions::new(),
        &forward,
        &d_o,
        TileSizes::new(1, 1).unwrap(),
    )
    .unwrap();
    assert_eq!(g.dv.as_slice().unwrap(), &[4.0, 6.0]);
    assert!(g.dq.iter().chain(g.dk.iter()).all(|x| x.abs() < 1e-6));
}

#[test]
fn a_do_of_the_wrong_shape_is_an_error() {
    let x = Array4::<f32>::zeros((1, 1, 2, 2));
    let forward = reference::AttentionOutput { o: x.clone(), lse: Array3::zeros((1, 1, 2)) };
    let wrong = Array4::<f32>::zeros((1, 1, 3, 2));
    assert!(
        backward(&x, &x, &x, &AttentionOptions::new(), &forward, &wrong, TileSizes::default())
            .is_err()
    );
}

// The main task.

#[test]
fn one_key_dropped_gets_no_gradient() {
    // One query, one key, dropout with p = 0.5 and seed 2, whose mask drops that weight
    // (`Dropout::keeps(0, 0, 0, 0)` is false for this seed): O = 0, and no gradient reaches V.
    let features = Features::default().dropout(0.5, 2);
    assert!(!features.dropout.unwrap().keeps(0, 0, 0, 0), "seed 2 drops weight (0, 0, 0, 0)");
    let x = Array4::from_shape_vec((1, 1, 1, 2), vec![1.0, 2.0]).unwrap();
    let forward = reference::AttentionOutput {
        o: Array4::zeros((1, 1, 1, 2)),
        lse: Array3::from_shape_vec((1, 1, 1), vec![5.0 / 2f32.sqrt()]).unwrap(),
    };
    let options = AttentionOptions::new();
    let tiles = TileSizes::new(1, 1).unwrap();
    let g = backward_with_features(&x, &x, &x, &options, &features, &forward, &x, tiles).unwrap();
    assert_eq!(g.dv.as_slice().unwrap(), &[0.0, 0.0]);
}
