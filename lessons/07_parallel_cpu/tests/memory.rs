//! The parallel forward needs one tile's buffers per running task: its working memory does not
//! grow with N, and it never holds a second copy of the output.
//! One test in this binary: the counting allocator's counters are global.

use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::{Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn working_memory_is_a_few_tiles_per_thread_whatever_n_is() {
    let tiles = lesson07::default_tiles();
    let (br, bc, d) = (tiles.query_rows(), tiles.key_cols(), 64);
    let threads = rayon::current_num_threads();
    // The gemm crate keeps a packing workspace per thread (a few MiB, whatever N is), made on
    // its first call and reused after: warm it up so that the measurement sees the steady state.
    let warm = Problem::random(&ProblemSpec::new(1, 4, 512, 512, 64), 2);
    lesson07::attention(&warm.q, &warm.k, &warm.v, &warm.options, tiles).unwrap();
    let working = [1024, 8192].map(|n| {
        let p = Problem::random(&ProblemSpec::new(1, 1, n, n, 64), 1);
        let (out, peak) =
            peak_bytes_during(|| lesson07::attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap())
                .unwrap();
        peak - out.bytes()
    });
    // Per running task: the score tile (Br x Bc), the accumulator (Br x D) and the row
    // statistics, in f32. Measured on top of that: gemm's per-call buffers and the task list,
    // about 66 KiB on 2 threads (2026-11-21); allow as much again as the tiles themselves.
    let per_task = (br * bc + br * d + 2 * br) * 4;
    // How many tasks hold their buffers at the moment of the peak depends on how the threads
    // happened to interleave (a CI run measured 725 KB at N = 1024 and 793 KB at N = 8192 on
    // 2 threads), so the two sizes may differ by one task's buffers; anything that grows with
    // N (a copy of O: 2 MiB at N = 8192, a row block of S: 8 MiB) is far beyond that.
    assert!(working[1] <= working[0] + per_task, "working memory grew with N: {working:?}");
    assert!(working[1] < 2 * threads * per_task, "{working:?} bytes on {threads} threads");
    // At N = 8192 the output O alone is 2 MiB: no second copy of it may be held.
    assert!(working[1] < (8192 * 64 * 4) / 2, "{working:?}");
}
