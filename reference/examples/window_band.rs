//! A sliding window drawn on the score matrix: which keys each query row sees
//! (`reference::features::visible_band`, the oracle's definition), and which tiles of a tiled
//! forward hold a key that some row sees (those it computes) against those it can skip.
//!
//! `cargo run -p reference --example window_band`

use reference::AttentionShape;
use reference::features::{Window, visible_band};

fn main() {
    draw(12, 12, false, Window::new(Some(3), Some(1)), 3, 3);
    draw(12, 12, true, Window::new(Some(3), None), 3, 3);
    draw(6, 12, false, Window::new(Some(2), Some(2)), 2, 4);
    println!("# = every row sees every key   M = computed, masked   . = skipped (never loaded)");
}

fn draw(q_len: usize, kv_len: usize, causal: bool, window: Window, br: usize, bc: usize) {
    let shape = AttentionShape { batch: 1, heads: 1, q_len, kv_len, head_dim: 1 };
    let band = |i| visible_band(&shape, i, causal, window);
    let side = |s: Option<usize>| s.map_or("none".to_string(), |n| n.to_string());
    let mask = if causal { "causal" } else { "not causal" };
    println!(
        "window left {}, right {}, {mask}, Nq = {q_len}, Nkv = {kv_len}, Br = {br}, Bc = {bc}:",
        side(window.left),
        side(window.right)
    );
    println!("  elements (query i sees key j?)     tiles");
    let (mut computed, mut skipped) = (0, 0);
    let tile_rows: Vec<String> = (0..q_len)
        .step_by(br)
        .map(|r0| {
            let rows = r0..(r0 + br).min(q_len);
            (0..kv_len)
                .step_by(bc)
                .map(|c0| {
                    let keys = c0..(c0 + bc).min(kv_len);
                    let sees = |i: usize, j: usize| band(i).contains(&j);
                    let pairs = || rows.clone().flat_map(|i| keys.clone().map(move |j| (i, j)));
                    if pairs().all(|(i, j)| sees(i, j)) {
                        (computed += 1, '#').1
                    } else if pairs().any(|(i, j)| sees(i, j)) {
                        (computed += 1, 'M').1
                    } else {
                        (skipped += 1, '.').1
                    }
                })
                .collect()
        })
        .collect();
    for i in 0..q_len {
        let row: String =
            (0..kv_len).map(|j| if band(i).contains(&j) { 'x' } else { '.' }).collect();
        let tiles = if i % br == 0 { tile_rows[i / br].as_str() } else { "" };
        println!("{}", format!("  {row:<33}  {tiles}").trim_end());
    }
    println!("  {computed} tiles computed, {skipped} skipped\n");
}
