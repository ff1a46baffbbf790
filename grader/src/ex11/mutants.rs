//! The planted-bug implementation of exercise 11: one classic mistake per switch (see
//! [`crate::mutants`]), in the cache, in decoding, and in prefix sharing.

use ndarray::{Array3, Array4, ArrayView3};
use reference::{AttentionError, AttentionOptions, AttentionOutput};

use lesson11::KeyValues;
use lesson11::cache::{cache_error, check_new_tokens};
use lesson11::decode::{check_decode, chunk};

use super::{NewCache, SharedCache, SharedPagedCache};
use crate::ex11;
use crate::mutants::{Planted, planted_bugs};

planted_bugs! {
    /// Classic mistakes in a paged cache, grouped decoding and copy on write (exercise 11).
    pub enum DecodingBug {
        /// New tokens written from position `len + 1`: the cache position off by one.
        PositionOffByOne => ex11::APPEND_READ,
        /// `floor((len + n) / block_size)` blocks: the last, partly filled one never taken.
        TooFewBlocks => ex11::APPEND_READ,
        /// `release` gives the blocks back but keeps the table: a stale block table.
        StaleBlockTable => ex11::RELEASE,
        /// `release` empties the table but never gives the blocks back.
        ReleaseKeepsBlocks => ex11::RELEASE,
        /// A pool too small is found out after taking the blocks there were.
        FullPoolTakesBlocks => ex11::CACHE_ERRORS,
        /// Query head `h` reads K/V head `h % Hkv` instead of `h / G`.
        WrongHeadMapping => ex11::HEAD_MAPPING,
        /// The causal limit one key short: row `i` sees keys `j < i + len - Nq`.
        CausalOffByOne => ex11::CAUSAL_PREFILL,
        /// The chunks' sums added without rescaling each to the largest maximum.
        MergeWithoutRescale => ex11::SPLITS,
        /// Zero splits not refused: a division by zero panics.
        ZeroSplitsNotRefused => ex11::DECODE_ERRORS,
        /// `fork` copies every block of the parent instead of sharing them.
        ForkCopiesEveryBlock => ex11::FORK_SHARES,
        /// No copy on write: a sequence writes into a block another sequence reads.
        WriteIntoSharedBlock => ex11::FORK_DIVERGE,
        /// The copy takes a block but copies none of the tokens already in it.
        CopyLosesTokens => ex11::FORK_DIVERGE,
        /// Copy on write when ONE or more tables name the last block (the owner test `> 0`):
        /// every append into a partly filled block copies it, forked or not. The warm-up's
        /// append check is the first to see it, so its hint names the owner test.
        CopyWhenOwnedAlone => ex11::APPEND_READ,
        /// `fork` shares the blocks without counting the child as an owner.
        ForkWithoutSharedCount => ex11::FORK_RELEASE,
        /// The copy leaves the old block's count as it was: it is never freed.
        CopyLeaksOldBlock => ex11::FORK_RELEASE,
        /// `fork` into a sequence that holds tokens replaces its table.
        ForkIntoBusySequence => ex11::FORK_ERRORS,
        /// With no free block for the copy, the tokens are written into the shared block.
        FullPoolWritesSharedBlock => ex11::FORK_ERRORS,
    }
}

/// The reference cache with one planted bug (or none): the storage and the reads are the
/// solution's, the calls are written again here with the switches.
struct PlantedCache {
    bug: Option<DecodingBug>,
    inner: SharedPagedCache,
}

impl PlantedCache {
    fn has(&self, bug: DecodingBug) -> bool {
        self.bug == Some(bug)
    }
}

impl SharedCache for PlantedCache {
    fn reads(&self) -> &dyn KeyValues {
        &self.inner
    }
    fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        use DecodingBug::*;
        let start = self.inner.len_checked(seq)?;
        let c = &self.inner;
        let (n, key_norm) = check_new_tokens(seq, keys, values, c.kv_heads, c.head_dim)?;
        let first = if self.has(PositionOffByOne) { start + 1 } else { start };
        let mut copy = if self.has(WriteIntoSharedBlock) {
            None
        } else if self.has(CopyWhenOwnedAlone) {
            let at = start / c.block_size;
            let partly_filled = !start.is_multiple_of(c.block_size);
            (partly_filled && c.owners[c.tables[seq][at]] > 0).then_some(at)
        } else {
            c.shared_last_block(seq, start)
        };
        let blocks = if self.has(TooFewBlocks) {
            (first + n) / c.block_size
        } else {
            (first + n).div_ceil(c.block_size)
        };
        let fresh = blocks.saturating_sub(c.tables[seq].len());
        let needed = fresh + usize::from(copy.is_some());
        if needed > c.free.len() {
            if self.has(FullPoolWritesSharedBlock) && fresh <= c.free.len() {
                copy = None;
            } else {
                if self.has(FullPoolTakesBlocks) {
                    while !self.inner.free.is_empty() {
                        let block = self.inner.take_block();
                        self.inner.tables[seq].push(block);
                    }
                }
                return Err(cache_error("appending", "too few free blocks".into(), "more"));
            }
        }
        let c = &mut self.inner;
        if let Some(at) = copy {
            let shared = c.tables[seq][at];
            let own = c.take_block();
            if self.bug != Some(CopyLosesTokens) {
                c.copy_block(shared, own);
            }
            if self.bug != Some(CopyLeaksOldBlock) {
                c.owners[shared] -= 1;
            }
            c.tables[seq][at] = own;
        }
        for _ in 0..fresh {
            let block = c.take_block();
            c.tables[seq].push(block);
        }
        c.write_tokens(seq, first, keys, values);
        c.lens[seq] += n;
        c.key_norm = c.key_norm.max(key_norm);
        Ok(())
    }

    fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        self.inner.len_checked(seq)?;
        let c = &mut self.inner;
        let table = if self.bug == Some(DecodingBug::StaleBlockTable) {
            c.tables[seq].clone()
        } else {
            std::mem::take(&mut c.tables[seq])
        };
        for block in table.into_iter().rev() {
            c.owners[block] = c.owners[block].saturating_sub(1);
            if c.owners[block] == 0 && self.bug != Some(DecodingBug::ReleaseKeepsBlocks) {
                c.free.push(block);
            }
        }
        c.lens[seq] = 0;
        Ok(())
    }

    fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError> {
        use DecodingBug::*;
        self.inner.len_checked(parent)?;
        let child_len = self.inner.len_checked(child)?;
        if parent == child || (child_len > 0 && !self.has(ForkIntoBusySequence)) {
            return Err(cache_error("forking", "a busy child".into(), "an empty one"));
        }
        let c = &mut self.inner;
        let mut table = c.tables[parent].clone();
        if self.bug == Some(ForkCopiesEveryBlock) {
            if table.len() > c.free.len() {
                return Err(cache_error("forking", "too few free blocks".into(), "more"));
            }
            for block in &mut table {
                let own = c.take_block();
                c.copy_block(*block, own);
                *block = own;
            }
        } else if self.bug != Some(ForkWithoutSharedCount) {
            table.iter().for_each(|&block| c.owners[block] += 1);
        }
        c.tables[child] = table;
        c.lens[child] = c.lens[parent];
        Ok(())
    }

    fn free_blocks(&self) -> usize {
        self.inner.free_blocks()
    }

    fn block_table(&self, seq: usize) -> Option<&[usize]> {
        self.inner.block_table(seq)
    }
}

/// One query row's online softmax over some keys: its maximum, sum and unnormalised output.
struct Partial {
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl Planted<DecodingBug> {
    /// The partial result of row `q_row` over keys `keys` of K/V head `kv` of `seq`.
    fn partial(
        cache: &dyn KeyValues,
        (seq, kv): (usize, usize),
        q_row: &[f32],
        keys: std::ops::Range<usize>,
    ) -> Partial {
        let mut p = Partial { max: f32::NEG_INFINITY, sum: 0.0, acc: vec![0.0; q_row.len()] };
        for j in keys {
            let s: f32 = q_row.iter().zip(cache.key(seq, kv, j)).map(|(a, b)| a * b).sum();
            let max = p.max.max(s);
            let (rescale, weight) = ((p.max - max).exp(), (s - max).exp());
            p.sum = p.sum * rescale + weight;
            for (a, &v) in p.acc.iter_mut().zip(cache.value(seq, kv, j)) {
                *a = *a * rescale + weight * v;
            }
            p.max = max;
        }
        p
    }

    /// `(O, L)` of one row from its chunks' partials.
    fn merge(&self, parts: &[Partial], d: usize) -> (Vec<f32>, f32) {
        let max = parts.iter().map(|p| p.max).fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return (vec![0.0; d], max);
        }
        let (mut acc, mut sum) = (vec![0.0; d], 0.0);
        for p in parts.iter().filter(|p| p.max > f32::NEG_INFINITY) {
            let w =
                if self.has(DecodingBug::MergeWithoutRescale) { 1.0 } else { (p.max - max).exp() };
            sum += w * p.sum;
            acc.iter_mut().zip(&p.acc).for_each(|(a, &x)| *a += w * x);
        }
        (acc.iter().map(|a| a / sum).collect(), max + sum.ln())
    }
}

impl ex11::Exercise11 for Planted<DecodingBug> {
    fn new_cache(
        &self,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        blocks: usize,
    ) -> NewCache {
        let inner = SharedPagedCache::new(batch, kv_heads, head_dim, block_size, blocks)?;
        Ok(Box::new(PlantedCache { bug: self.bug, inner }))
    }

    fn decode(
        &self,
        cache: &dyn KeyValues,
        q: &Array4<f32>,
        options: &AttentionOptions,
        splits: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        use DecodingBug::*;
        if splits == 0 && !self.has(ZeroSplitsNotRefused) {
            return Err(cache_error("decoding", "0 splits".into(), "at least 1"));
        }
        let (shape, scale) = check_decode(&cache.shape(), q, options)?;
        let (batch, q_heads, q_len, d) = q.dim();
        let (kv_heads, group) = (shape.groups.kv_heads(), shape.groups.group_size());
        let mut out = AttentionOutput {
            o: Array4::zeros(q.dim()),
            lse: Array3::zeros((batch, q_heads, q_len)),
        };
        for ((seq, h, i), lse) in out.lse.indexed_iter_mut() {
            let kv = if self.has(WrongHeadMapping) { h % kv_heads } else { h / group };
            let len = cache.len(seq);
            let visible = match options.causal {
                true if self.has(CausalOffByOne) => (i + len).saturating_sub(q_len),
                true => i + 1 + len - q_len,
                false => len,
            };
            let row: Vec<f32> = (0..d).map(|x| scale * q[[seq, h, i, x]]).collect();
            let parts: Vec<Partial> = (0..splits)
                .map(|s| {
                    let keys = chunk(len, splits, s);
                    Self::partial(cache, (seq, kv), &row, keys.start..keys.end.min(visible))
                })
                .collect();
            let (o, l) = self.merge(&parts, d);
            out.o.slice_mut(ndarray::s![seq, h, i, ..]).assign(&ndarray::ArrayView1::from(&o));
            *lse = l;
        }
        Ok(out)
    }
}
