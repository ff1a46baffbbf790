//! Small examples you can check by hand: `cargo test -p ex04 --test visible`.

use ex04::{attention, classify_tile, window_traffic};
use lesson03::{TileKind, TileSizes};
use ndarray::{Array4, array};
use reference::{AttentionOptions, AttentionShape, Window};

#[test]
fn tiles_of_a_square_causal_problem() {
    // Nq = Nkv = 4, tiles of 2: row i sees keys 0..=i.
    let shape = AttentionShape { batch: 1, heads: 1, q_len: 4, kv_len: 4, head_dim: 1 };
    assert_eq!(classify_tile(&shape, true, 0..2, 0..2), TileKind::Masked);
    assert_eq!(classify_tile(&shape, true, 0..2, 2..4), TileKind::Skipped);
    assert_eq!(classify_tile(&shape, true, 2..4, 0..2), TileKind::Full);
    assert_eq!(classify_tile(&shape, false, 0..2, 2..4), TileKind::Full);
}

#[test]
fn one_query_one_key_moves_exactly_what_the_formula_says() {
    // D = 2, one tile pair: read K, V (2 + 2), Q, O (2 + 2), m, l (1 + 1), then m, l again
    // (1 + 1) = 12 floats; write O, m, l (2 + 1 + 1) and L (1) = 5 floats.
    let x: Array4<f32> = array![[[[1.0, 2.0]]]];
    let run =
        attention(&x, &x, &x, &AttentionOptions::new(), TileSizes::new(1, 1).unwrap(), 1 << 20)
            .unwrap();
    assert_eq!(run.output.o, x);
    assert_eq!((run.traffic.bytes_read, run.traffic.bytes_written), (48, 20));
}

// The main task.

#[test]
fn a_diagonal_window_loads_one_key_tile_per_query_tile() {
    // Nq = Nkv = 4, D = 1, tiles of 2, window (0, 0): rows 0 and 1 see keys 0 and 1 only, rows
    // 2 and 3 keys 2 and 3. Read: Q (4 numbers), then K and V of one 2-key tile per query tile
    // (2 x 2 x 2 = 8); written: O (4) and L (4). 4 bytes each.
    let shape = AttentionShape { batch: 1, heads: 1, q_len: 4, kv_len: 4, head_dim: 1 };
    let window = Window::new(Some(0), Some(0));
    let traffic = window_traffic(&shape, false, window, TileSizes::new(2, 2).unwrap());
    assert_eq!(traffic.bytes_read, 4 * (4 + 8));
    assert_eq!(traffic.bytes_written, 4 * (4 + 4));
}
