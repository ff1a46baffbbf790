//! A paged KV cache: PagedAttention's layout (vLLM), the tokens of every sequence in
//! fixed-size blocks taken from one shared pool.
//!
//! A contiguous cache reserves `capacity` slots per sequence up front; most sequences end far
//! shorter, and the reserve is wasted. Here a sequence takes one block of `block_size` tokens
//! at a time, as it grows, and gives them back when it ends; a *block table* per sequence lists
//! its blocks in token order. Token `j` of a sequence lives in block `table[j / block_size]`
//! at slot `j % block_size`: one more indirection per block, in exchange for wasting at most
//! `block_size - 1` slots per sequence.
//!
//! ```text
//!   pool:    [blk 0][blk 1][blk 2][blk 3][blk 4][blk 5] ...
//!   seq 0:   table [0, 3, 4]   tokens 0..4 in blk 0, 4..8 in blk 3, 8..10 in blk 4
//!   seq 1:   table [1, 2]      tokens 0..4 in blk 1, 4..7 in blk 2
//! ```

use ndarray::{ArrayView1, ArrayView3, s};
use reference::AttentionError;

use crate::cache::{Blocks, KeyValues, cache_error, check_new_tokens, no_such_sequence};

/// `B` sequences sharing a pool of blocks of `block_size` tokens; each block holds every K/V
/// head, `[Hkv, block_size, D]`, for keys and for values.
#[derive(Clone, Debug)]
pub struct PagedKvCache {
    keys: Vec<f32>,
    values: Vec<f32>,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    /// Blocks no sequence holds, taken from the end.
    free: Vec<usize>,
    tables: Vec<Vec<usize>>,
    lens: Vec<usize>,
    key_norm: f64,
}

impl PagedKvCache {
    /// An empty cache of `blocks` blocks of `block_size` tokens shared by `batch` sequences;
    /// an error if any size is 0.
    pub fn new(
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        blocks: usize,
    ) -> Result<Self, AttentionError> {
        let sizes = [batch, kv_heads, head_dim, block_size, blocks];
        if sizes.contains(&0) {
            return Err(cache_error(
                "creating a paged cache",
                format!("sizes [batch, kv_heads, head_dim, block_size, blocks] = {sizes:?}"),
                "every size at least 1",
            ));
        }
        let elements = sizes[1..].iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let Some(elements) = elements.filter(|&n| n <= isize::MAX as usize / size_of::<f32>())
        else {
            return Err(cache_error(
                "creating a paged cache",
                format!("a pool of {blocks} blocks of {kv_heads} x {block_size} x {head_dim}"),
                "a pool whose size in bytes fits in memory's address space",
            ));
        };
        let pool = vec![0.0; elements];
        Ok(Self {
            keys: pool.clone(),
            values: pool,
            kv_heads,
            head_dim,
            block_size,
            free: (0..blocks).rev().collect(), // so that blocks are taken in order 0, 1, 2, ...
            tables: vec![Vec::new(); batch],
            lens: vec![0; batch],
            key_norm: 0.0,
        })
    }

    /// Blocks no sequence holds.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// The block table of sequence `seq`: its blocks, in token order; `None` if the cache
    /// holds no such sequence.
    pub fn block_table(&self, seq: usize) -> Option<&[usize]> {
        self.tables.get(seq).map(Vec::as_slice)
    }

    /// Appends the keys and values of `n` new tokens, `[Hkv, n, D]` each, to sequence `seq`,
    /// taking blocks from the pool as the sequence needs them. An error, with nothing written
    /// and no block taken, if `seq` is not a sequence of the cache, the shapes do not fit, `n`
    /// is 0, a value is not finite, or the pool has too few free blocks.
    pub fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        let start = *self.lens.get(seq).ok_or_else(|| no_such_sequence(seq, self.lens.len()))?;
        let (n, key_norm) = check_new_tokens(seq, keys, values, self.kv_heads, self.head_dim)?;
        let needed = (start + n).div_ceil(self.block_size) - self.tables[seq].len();
        if needed > self.free.len() {
            return Err(cache_error(
                &format!("appending {n} tokens to sequence {seq}"),
                format!("{needed} more blocks needed, {} free", self.free.len()),
                "a pool with enough free blocks (release finished sequences, or make more blocks)",
            ));
        }
        for _ in 0..needed {
            let block = self.free.pop().expect("counted above");
            self.tables[seq].push(block);
        }
        for t in 0..n {
            for g in 0..self.kv_heads {
                let at = self.slot(seq, g, start + t);
                let row = at..at + self.head_dim;
                copy_row(&mut self.keys[row.clone()], keys.slice(s![g, t, ..]));
                copy_row(&mut self.values[row], values.slice(s![g, t, ..]));
            }
        }
        self.lens[seq] += n;
        self.key_norm = self.key_norm.max(key_norm);
        Ok(())
    }

    /// Ends sequence `seq`: its blocks go back to the pool and it holds no token. Its block
    /// table is emptied too; a table that kept the old blocks would read tokens that another
    /// sequence may have written since (a *stale* block table).
    pub fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        let table =
            self.tables.get_mut(seq).ok_or_else(|| no_such_sequence(seq, self.lens.len()))?;
        self.free.extend(table.drain(..).rev());
        self.lens[seq] = 0;
        Ok(())
    }

    // ANCHOR: slot
    /// Where token `j` of head `kv_head` of sequence `seq` starts in the pool: block
    /// `table[j / block_size]`, slot `j % block_size`, in a block laid out `[Hkv, block_size, D]`.
    fn slot(&self, seq: usize, kv_head: usize, j: usize) -> usize {
        let block = self.tables[seq][j / self.block_size];
        ((block * self.kv_heads + kv_head) * self.block_size + j % self.block_size) * self.head_dim
    }
    // ANCHOR_END: slot
}

fn copy_row(to: &mut [f32], from: ArrayView1<f32>) {
    to.iter_mut().zip(from).for_each(|(to, &from)| *to = from);
}

impl KeyValues for PagedKvCache {
    fn batch(&self) -> usize {
        self.lens.len()
    }
    fn kv_heads(&self) -> usize {
        self.kv_heads
    }
    fn head_dim(&self) -> usize {
        self.head_dim
    }
    fn len(&self, seq: usize) -> usize {
        self.lens[seq]
    }
    fn key(&self, seq: usize, kv_head: usize, j: usize) -> &[f32] {
        let at = self.slot(seq, kv_head, j);
        &self.keys[at..at + self.head_dim]
    }
    fn value(&self, seq: usize, kv_head: usize, j: usize) -> &[f32] {
        let at = self.slot(seq, kv_head, j);
        &self.values[at..at + self.head_dim]
    }
    fn largest_key_norm(&self) -> f64 {
        self.key_norm
    }
    fn blocks(&self) -> Blocks<'_> {
        Blocks {
            keys: &self.keys,
            values: &self.values,
            block_size: self.block_size,
            tables: self.tables.clone(),
            lens: self.lens.clone(),
        }
    }
}
