//! The backward pass's working memory grows as N (the vector D), never as N².

use lesson03::TileSizes;
use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::{Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn working_memory_is_linear_in_n_not_quadratic() {
    let tiles = TileSizes::new(32, 32).unwrap();
    let d = 32;
    let mut working = Vec::new();
    for n in [256, 1024] {
        let p = Problem::random(&ProblemSpec::new(1, 1, n, n, d).causal(true), 1);
        let fwd = lesson03::attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap();
        let d_o = p.q.clone();
        let (grads, peak) = peak_bytes_during(|| {
            lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, tiles).unwrap()
        })
        .unwrap();
        let outputs = (grads.dq.len() + grads.dk.len() + grads.dv.len()) * 4;
        working.push(peak - outputs);
    }
    // Tiles: P and dP (32 x 32 each), dK_j and dV_j (32 x D each), plus D (N floats).
    let tile_bytes = (2 * 32 * 32 + 2 * 32 * d) * 4;
    assert!(working[0] <= 2 * tile_bytes + 4 * 256, "N = 256: {} bytes", working[0]);
    assert!(working[1] <= 2 * tile_bytes + 4 * 1024, "N = 1024: {} bytes", working[1]);
    // A materialised P alone would be N² floats: 4 MiB at N = 1024.
    assert!(working[1] < 1024 * 1024 * 4 / 32, "{working:?}");
}
