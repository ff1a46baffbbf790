//! Small examples you can check by hand: `cargo test -p ex03 --test visible`.

use ex03::{TileSizes, attention, attention_window};
use ndarray::{Array4, array};
use reference::{AttentionOptions, Window};

fn tiles(br: usize, bc: usize) -> TileSizes {
    TileSizes::new(br, bc).unwrap()
}

#[test]
fn a_later_larger_score_rescales_the_earlier_tile() {
    // One query, two keys in two tiles of one key: scores 0 then 2 (scale 1).
    let q: Array4<f32> = array![[[[1.0]]]];
    let k: Array4<f32> = array![[[[0.0], [2.0]]]];
    let v: Array4<f32> = array![[[[1.0], [3.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::new().with_scale(1.0), tiles(1, 1)).unwrap();
    let (w0, w1) = (1.0 / (1.0 + 2f32.exp()), 2f32.exp() / (1.0 + 2f32.exp()));
    assert!((out.o[[0, 0, 0, 0]] - (w0 + 3.0 * w1)).abs() < 1e-6);
    assert!((out.lse[[0, 0, 0]] - (1.0 + 2f32.exp()).ln()).abs() < 1e-6);
}

#[test]
fn tile_sizes_do_not_change_the_result() {
    let q =
        Array4::from_shape_fn((1, 2, 5, 3), |(_, h, i, d)| ((h + 2 * i + 3 * d) % 7) as f32 * 0.3);
    let k = Array4::from_shape_fn((1, 2, 7, 3), |(_, h, j, d)| ((3 * h + j + d) % 5) as f32 * 0.4);
    let v = Array4::from_shape_fn((1, 2, 7, 3), |(_, h, j, d)| (h + j) as f32 - d as f32);
    let options = AttentionOptions::causal();
    let a = attention(&q, &k, &v, &options, tiles(2, 3)).unwrap();
    let b = attention(&q, &k, &v, &options, tiles(5, 7)).unwrap();
    for (x, y) in a.o.iter().zip(b.o.iter()) {
        assert!((x - y).abs() < 1e-5, "{x} vs {y}");
    }
}

#[test]
fn zero_tile_size_is_an_error() {
    assert!(TileSizes::new(0, 4).is_err());
}

// The main task.

#[test]
fn a_window_of_zero_keys_each_side_sees_only_the_diagonal() {
    // Nq = Nkv = 3: row i's diagonal is key i, so with window (0, 0) each row's O is V_i.
    let q = Array4::from_shape_vec((1, 1, 3, 1), vec![1.0, 2.0, 3.0]).unwrap();
    let v = Array4::from_shape_vec((1, 1, 3, 1), vec![10.0, 20.0, 30.0]).unwrap();
    let window = Window::new(Some(0), Some(0));
    let out = attention_window(&q, &q, &v, &AttentionOptions::new(), window, tiles(2, 2)).unwrap();
    assert_eq!(out.o.as_slice().unwrap(), &[10.0, 20.0, 30.0]);
}
