//! Small examples you can check by hand: `cargo test -p ex09 --test visible`. They run on your
//! GPU, or on lavapipe (see the README).

use ex09::{TileSizes, Window, attention, attention_window};
use ndarray::{Array4, array};
use reference::AttentionOptions;

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
fn causal_rows_that_see_no_key() {
    // Nq = 3, Nkv = 1: only the last row sees the key.
    let q = Array4::<f32>::ones((1, 1, 3, 2));
    let k = Array4::<f32>::ones((1, 1, 1, 2));
    let v: Array4<f32> = array![[[[2.0, 3.0]]]];
    let out = attention(&q, &k, &v, &AttentionOptions::causal(), tiles(2, 2)).unwrap();
    assert_eq!(out.o.iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
    assert_eq!(out.lse[[0, 0, 0]], f32::NEG_INFINITY);
}

// The main task.

#[test]
fn a_diagonal_window_sees_one_key_per_row() {
    // Window (0, 0): row i sees only key i (Nq = Nkv), so O = V row by row, and each workgroup
    // of 2 rows loads one tile of 2 keys.
    let q = Array4::from_shape_fn((1, 1, 6, 2), |(_, _, i, d)| (i + d) as f32 * 0.5);
    let k = Array4::from_shape_fn((1, 1, 6, 2), |(_, _, j, d)| (j * d) as f32 * 0.25);
    let v = Array4::from_shape_fn((1, 1, 6, 2), |(_, _, j, d)| (10 * j + d) as f32);
    let window = Window::new(Some(0), Some(0));
    let (out, loaded) =
        attention_window(&q, &k, &v, &AttentionOptions::new(), window, tiles(2, 2)).unwrap();
    assert_eq!(out.o, v);
    assert_eq!(loaded.into_raw_vec_and_offset().0, vec![1, 1, 1]);
}
