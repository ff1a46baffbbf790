//! Which (query tile, key tile) pairs the causal tiled forward computes, masks or skips,
//! drawn from the same `classify_tile` the kernel uses.
//!
//! `cargo run -p lesson03 --example tile_schedule`

use lesson03::{TileKind, classify_tile};
use reference::AttentionShape;

fn main() {
    draw(12, 12, 3, 3);
    draw(5, 12, 2, 4);
    draw(12, 5, 4, 2);
    println!("# = computed, no mask   M = computed, masked   . = skipped (never loaded)");
}

fn draw(q_len: usize, kv_len: usize, br: usize, bc: usize) {
    let shape = AttentionShape { batch: 1, heads: 1, q_len, kv_len, head_dim: 1 };
    let (mut computed, mut skipped) = (0, 0);
    println!("causal, Nq = {q_len}, Nkv = {kv_len}, Br = {br}, Bc = {bc}:");
    println!("  elements (query i sees key j?)     tiles");
    let tile_rows: Vec<String> = (0..q_len)
        .step_by(br)
        .map(|r0| {
            (0..kv_len)
                .step_by(bc)
                .map(|c0| {
                    let rows = r0..(r0 + br).min(q_len);
                    match classify_tile(&shape, true, rows, c0..(c0 + bc).min(kv_len)) {
                        TileKind::Full => (computed += 1, '#').1,
                        TileKind::Masked => (computed += 1, 'M').1,
                        TileKind::Skipped => (skipped += 1, '.').1,
                    }
                })
                .collect()
        })
        .collect();
    for i in 0..q_len {
        let row: String =
            (0..kv_len).map(|j| if j < shape.visible_keys(i, true) { 'x' } else { '.' }).collect();
        let tiles = if i % br == 0 { tile_rows[i / br].as_str() } else { "" };
        println!("{}", format!("  {row:<33}  {tiles}").trim_end());
    }
    println!("  {computed} tiles computed, {skipped} skipped\n");
}
