//! The parallel forward needs one tile's buffers per running task: its working memory does not
//! grow with N, and it never holds a second copy of the output.

use reference::memory::{CountingAllocator, peak_bytes_during};
use reference::{Problem, ProblemSpec};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn working_memory_is_one_tile_per_task_whatever_n_is() {
    let tiles = lesson07::default_tiles();
    let (br, bc, d) = (tiles.query_rows(), tiles.key_cols(), 64);
    // Measured on one thread, where the peak is the same on every run: with several threads it
    // depends on how many tasks happen to hold their buffers at the same moment, and on which
    // threads have already made the gemm crate's packing workspace (one per thread, a few MiB
    // made on its first call). Neither depends on N; the thread count only multiplies a
    // constant, so one thread tests the claim without the chance.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let working = pool.install(|| {
        let warm = Problem::random(&ProblemSpec::new(1, 4, 512, 512, 64), 2);
        lesson07::attention(&warm.q, &warm.k, &warm.v, &warm.options, tiles).unwrap();
        [1024, 8192].map(|n| {
            let p = Problem::random(&ProblemSpec::new(1, 1, n, n, 64), 1);
            let run = || lesson07::attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap();
            let (out, peak) = peak_bytes_during(run).unwrap();
            peak - out.bytes()
        })
    });
    // One task at a time: the score tile (Br x Bc), the accumulator (Br x D) and the row
    // statistics, in f32, plus gemm's small per-call buffers; allow as much again.
    let per_task = (br * bc + br * d + 2 * br) * 4;
    assert!(working[0] < 2 * per_task, "{working:?} bytes, one task needs {per_task}");
    // The task list grows by one small entry per query tile (32 at N = 8192): a few KiB.
    // Anything that grows with N is far beyond that: a copy of O is 2 MiB at N = 8192, a row
    // block of S 8 MiB.
    assert!(working[1] <= working[0] + 16 * 1024, "working memory grew with N: {working:?}");
}
