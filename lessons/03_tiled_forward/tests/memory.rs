//! Working memory, measured with a counting allocator: lesson 01 holds `S` and `P`, which grow
//! as N², while lesson 03 holds one tile pair, which does not grow with N at all.

use lesson03::TileSizes;
use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::{AttentionOutput, Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Peak heap bytes during the call, minus the output `O` and `L` it returns.
fn working_bytes(f: impl FnOnce() -> AttentionOutput<f32>) -> usize {
    let (out, peak) = peak_bytes_during(f).unwrap();
    peak - out.bytes()
}

#[test]
fn tiled_working_memory_stays_constant_while_naive_grows_quadratically() {
    let tiles = TileSizes::new(32, 32).unwrap();
    let (d, heads) = (32, 2);
    let mut naive = Vec::new();
    let mut tiled = Vec::new();
    for n in [128, 256, 512, 1024] {
        let p = Problem::random(&ProblemSpec::new(1, heads, n, n, d).causal(true), 1);
        naive.push(working_bytes(|| lesson01::attention(&p.q, &p.k, &p.v, &p.options).unwrap()));
        tiled.push(working_bytes(|| {
            lesson03::attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap()
        }));
    }
    // Naive: S and P, 2 * H * N^2 * 4 bytes, at least.
    for (i, n) in [128usize, 256, 512, 1024].into_iter().enumerate() {
        assert!(naive[i] >= 2 * heads * n * n * 4, "naive at N = {n}: {} bytes", naive[i]);
    }
    // Tiled: S/P tile (Br x Bc) + acc (Br x D) + m and l (Br each), in f32, whatever N is.
    let tile_bytes = (32 * 32 + 32 * d + 2 * 32) * 4;
    for (i, n) in [128, 256, 512, 1024].into_iter().enumerate() {
        assert!(
            tiled[i] <= 2 * tile_bytes,
            "tiled at N = {n}: {} bytes > 2 x {tile_bytes}",
            tiled[i]
        );
    }
    assert_eq!(tiled[0], tiled[3], "tiled working memory changed with N: {tiled:?}");
    assert!(naive[3] > 50 * naive[0], "naive should grow ~64x from N=128 to N=1024: {naive:?}");
}
