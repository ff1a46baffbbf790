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
//! once while a closure ran, above what was live when it started. The counters are global, so
//! measure in a process (or test binary) where nothing else allocates at the same time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, plus counters of live and peak heap bytes.
pub struct CountingAllocator;

impl CountingAllocator {
    fn grew(size: usize) {
        let live = LIVE.fetch_add(size, Relaxed) + size;
        PEAK.fetch_max(live, Relaxed);
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
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with this layout.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
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
/// while it ran (its result included, if the result lives on the heap).
pub fn peak_bytes_during<R>(f: impl FnOnce() -> R) -> Result<(R, usize), NotInstalled> {
    drop(std::hint::black_box(Box::new(0u8))); // any allocation marks the allocator installed
    if !INSTALLED.load(Relaxed) {
        return Err(NotInstalled);
    }
    let baseline = LIVE.load(Relaxed);
    PEAK.store(baseline, Relaxed);
    let result = f();
    Ok((result, PEAK.load(Relaxed).saturating_sub(baseline)))
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
