//! The counting allocator counts the measured call's own threads and nothing else, so that a
//! memory check never depends on what another thread of the process does at the same moment.

use std::sync::mpsc;
use std::thread;

use reference::memory::{CountingAllocator, count_this_thread, peak_bytes_during};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn a_call_s_own_allocations_are_counted() {
    let (bytes, peak) = peak_bytes_during(|| vec![1u8; 64 * KIB].len()).unwrap();
    assert_eq!(bytes, 64 * KIB);
    assert!((64 * KIB..65 * KIB).contains(&peak), "peak {peak}");
}

#[test]
fn another_thread_allocating_meanwhile_is_not_counted() {
    // The other thread allocates 8 MiB while the measured call runs (the call waits until it
    // has), as a test harness's thread or a second test might.
    let (start, started) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<usize>();
    let other = thread::spawn(move || {
        started.recv().unwrap();
        let held = vec![1u8; 8 * MIB];
        done.send(held.len()).unwrap();
        held
    });
    let (_, peak) = peak_bytes_during(|| {
        start.send(()).unwrap();
        let allocated = finished.recv().unwrap();
        let own = vec![2u8; 16 * KIB];
        (allocated, own)
    })
    .unwrap();
    assert_eq!(other.join().unwrap().len(), 8 * MIB);
    assert!(peak < MIB, "another thread's 8 MiB counted: peak {peak} bytes");
}

#[test]
fn a_worker_that_counts_itself_is_counted() {
    // The threads a measured call runs its work on say so, as a pool's workers would in their
    // start handler.
    let (_, peak) = peak_bytes_during(|| {
        thread::scope(|scope| {
            let worker = scope.spawn(|| {
                count_this_thread();
                vec![3u8; 2 * MIB].len()
            });
            worker.join().unwrap()
        })
    })
    .unwrap();
    assert!(peak >= 2 * MIB, "the worker's 2 MiB not counted: peak {peak} bytes");
}

#[test]
fn a_measurement_that_panics_leaves_its_thread_uncounted() {
    // A check catches a learner's panic and goes on; the thread's allocations must not count
    // in a later measurement made by another thread.
    let caught = std::panic::catch_unwind(|| peak_bytes_during(|| panic!("a learner's bug")));
    assert!(caught.is_err());
    let (start, started) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<()>();
    let measuring = thread::spawn(move || {
        peak_bytes_during(|| {
            start.send(()).unwrap();
            finished.recv().unwrap();
        })
        .unwrap()
        .1
    });
    started.recv().unwrap();
    let held = vec![4u8; 8 * MIB];
    done.send(()).unwrap();
    let peak = measuring.join().unwrap();
    assert_eq!(held.len(), 8 * MIB);
    assert!(peak < MIB, "the thread that panicked still counted: peak {peak} bytes");
}
