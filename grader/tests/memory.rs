//! The working-memory checks of exercises 03 and 05 see what a solution allocates on rayon's
//! threads, once the hidden test has made them counted.

use grader::memory::{count_rayon_workers, working_bytes};

#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

#[test]
fn a_solution_s_allocations_on_rayon_s_threads_are_measured() {
    count_rayon_workers();
    const SCORES: usize = 4 << 20;
    // Called from outside the pool, `join` runs both halves on the pool's threads.
    let on_workers = || Ok(rayon::join(|| vec![1u8; SCORES].len(), || vec![2u8; 16].len()));
    let bytes = working_bytes(on_workers, |_| 0).unwrap();
    assert!(bytes >= SCORES, "{bytes} bytes measured, where a worker held {SCORES}");
}
