//! A simulated two-level memory: a slow memory (HBM) that counts every byte read from it or
//! written to it, and a fast memory (on-chip SRAM) of `M` bytes that must hold every buffer an
//! algorithm computes in.
//!
//! The algorithms of this lesson compute real attention; they only touch slow-memory data
//! through [`TwoLevelMemory::load`] and [`TwoLevelMemory::store`], so the counts are the IO
//! they really perform.

use ndarray::{ArrayView, ArrayViewMut, Dimension};
use reference::AttentionError;

/// Bytes that crossed between slow and fast memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes copied from slow memory into fast memory.
    pub bytes_read: usize,
    /// Bytes copied from fast memory back to slow memory.
    pub bytes_written: usize,
}

impl Traffic {
    /// Read and written together.
    pub fn total(&self) -> usize {
        self.bytes_read + self.bytes_written
    }
}

// ANCHOR: memory
/// Slow memory with a byte counter, and fast memory with a capacity.
pub struct TwoLevelMemory {
    fast_capacity: usize,
    fast_reserved: usize,
    traffic: Traffic,
}

impl TwoLevelMemory {
    /// A fast memory of `fast_bytes` bytes, nothing reserved, nothing moved yet.
    pub fn new(fast_bytes: usize) -> Self {
        Self { fast_capacity: fast_bytes, fast_reserved: 0, traffic: Traffic::default() }
    }

    /// Reserves `bytes` of fast memory for a buffer the algorithm keeps there; fails if the
    /// fast memory is full.
    pub fn reserve(&mut self, bytes: usize) -> Result<(), AttentionError> {
        let needed = self.fast_reserved + bytes;
        if needed > self.fast_capacity {
            return Err(AttentionError::TilesDoNotFit { needed, available: self.fast_capacity });
        }
        self.fast_reserved = needed;
        Ok(())
    }

    /// Copies `src` from slow memory into the fast buffer `dst`, counting the bytes.
    pub fn load<D: Dimension>(&mut self, src: ArrayView<f32, D>, mut dst: ArrayViewMut<f32, D>) {
        dst.assign(&src);
        self.traffic.bytes_read += src.len() * size_of::<f32>();
    }

    /// Copies the fast buffer `src` back to slow memory at `dst`, counting the bytes.
    pub fn store<D: Dimension>(&mut self, src: ArrayView<f32, D>, mut dst: ArrayViewMut<f32, D>) {
        dst.assign(&src);
        self.traffic.bytes_written += src.len() * size_of::<f32>();
    }

    /// The bytes moved so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }
}
// ANCHOR_END: memory

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, array};

    #[test]
    fn counts_bytes_in_both_directions() {
        let mut mem = TwoLevelMemory::new(1024);
        let slow = array![1.0f32, 2.0, 3.0];
        let mut fast = Array1::zeros(3);
        mem.load(slow.view(), fast.view_mut());
        let mut back = Array1::zeros(3);
        mem.store(fast.view(), back.view_mut());
        assert_eq!(back, slow);
        assert_eq!(mem.traffic(), Traffic { bytes_read: 12, bytes_written: 12 });
    }

    #[test]
    fn fast_memory_has_a_capacity() {
        let mut mem = TwoLevelMemory::new(100);
        mem.reserve(60).unwrap();
        assert_eq!(
            mem.reserve(41),
            Err(AttentionError::TilesDoNotFit { needed: 101, available: 100 })
        );
        mem.reserve(40).unwrap();
    }
}
