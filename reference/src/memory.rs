//! Measuring memory instead of estimating it: a counting global allocator.
//!
//! A binary or test opts in with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;
//! ```
//!
//! and then [`peak_bytes_during`] reports the largest number of heap bytes that were live at
//! once while a closure ran, above what was live when it started.
//!
//! Only the threads that do the measured work are counted: the thread that calls
//! [`peak_bytes_during`], while the closure runs, and the threads that said so with
//! [`count_this_thread`] (the workers of a thread pool that a measured call runs on). Another
//! thread of the same process allocating at the same moment (a test harness's own thread, a
//! second test) changes nothing, so a measurement never depends on what else happens to run.
//! Measurements take turns: one that starts while another runs waits for it to end.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

/// Heap bytes live in the counted threads: allocated by one of them and not yet freed by one
/// of them. Signed, because a counted thread may free what an uncounted one allocated.
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Held for the whole of a measurement: the counters serve one at a time.
static MEASURING: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread's allocations are counted. A `const` thread-local without a
    /// destructor: the allocator can read it at any time, even while the thread exits.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is inside [`peak_bytes_during`].
    static MEASURING_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Makes the calling thread's allocations count in every measurement from now on: call it at
/// the start of each worker thread that measured work runs on, for example in rayon's
/// `ThreadPoolBuilder::start_handler`. (The thread that calls [`peak_bytes_during`] is counted
/// while it measures without this.)
pub fn count_this_thread() {
    COUNTED.set(true);
}

/// The system allocator, plus counters of live and peak heap bytes.
pub struct CountingAllocator;

impl CountingAllocator {
    fn grew(size: usize) {
        if COUNTED.get() {
            let size = size as isize;
            let live = LIVE.fetch_add(size, Relaxed) + size;
            PEAK.fetch_max(live, Relaxed);
        }
    }

    fn shrank(size: usize) {
        if COUNTED.get() {
            LIVE.fetch_sub(size as isize, Relaxed);
        }
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Relaxed);
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Relaxed);
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        Self::shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with this layout.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            Self::shrank(layout.size());
            Self::grew(new_size);
        }
        new
    }
}

/// The counting allocator is not this program's global allocator, so nothing can be measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotInstalled;

impl std::fmt::Display for NotInstalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "memory cannot be measured: declare `#[global_allocator] static ALLOC: \
             reference::memory::CountingAllocator = reference::memory::CountingAllocator;` \
             in the binary or test"
        )
    }
}

impl std::error::Error for NotInstalled {}

/// Runs `f` and returns its result with the peak heap bytes allocated above the starting level
/// while it ran (its result included, if the result lives on the heap), counting the calling
/// thread and the threads marked with [`count_this_thread`], never any other.
pub fn peak_bytes_during<R>(f: impl FnOnce() -> R) -> Result<(R, usize), NotInstalled> {
    drop(std::hint::black_box(Box::new(0u8))); // any allocation marks the allocator installed
    if !INSTALLED.load(Relaxed) {
        return Err(NotInstalled);
    }
    assert!(
        !MEASURING_HERE.get(),
        "peak_bytes_during was called inside peak_bytes_during on one thread: measurements take \
         turns, so the inner one would wait for the outer one forever"
    );
    // A measurement that panicked released the lock as it unwound; its counters are reset
    // below, so the poison can be ignored.
    let _turn = MEASURING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _counting = CountingHere::start();
    let baseline = LIVE.load(Relaxed);
    PEAK.store(baseline, Relaxed);
    let result = f();
    let peak = PEAK.load(Relaxed);
    Ok((result, usize::try_from(peak - baseline).unwrap_or(0)))
}

/// The calling thread counted while a measurement runs, and as it was before when the
/// measurement ends, even by a panic (a check that catches the panic goes on with the
/// thread as it was).
struct CountingHere {
    counted_before: bool,
}

impl CountingHere {
    fn start() -> Self {
        MEASURING_HERE.set(true);
        Self { counted_before: COUNTED.replace(true) }
    }
}

impl Drop for CountingHere {
    fn drop(&mut self) {
        COUNTED.set(self.counted_before);
        MEASURING_HERE.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_counting_allocator_measuring_is_an_error() {
        // The reference crate's unit-test binary uses the system allocator.
        assert_eq!(peak_bytes_during(|| vec![0u8; 10]).unwrap_err(), NotInstalled);
        assert!(NotInstalled.to_string().contains("#[global_allocator]"));
    }
}
