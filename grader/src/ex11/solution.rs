//! The reference solution of exercise 11: the lesson's paged cache, rebuilt (the warm-up), with
//! prefix sharing (the main task): `fork` gives a sequence another's tokens by sharing its
//! blocks, a count per block says how many tables name it, and a write into a shared block
//! copies it first (copy on write). PagedAttention (vLLM) shares blocks this way for parallel
//! sampling and beam search. No chapter includes this file.

use ndarray::ArrayView3;
use reference::AttentionError;

use lesson11::cache::{cache_error, check_new_tokens, no_such_sequence};
use lesson11::{Blocks, KeyValues};

/// A paged cache whose sequences may share blocks.
#[derive(Clone, Debug)]
pub struct SharedPagedCache {
    pub(crate) keys: Vec<f32>,
    pub(crate) values: Vec<f32>,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) block_size: usize,
    pub(crate) free: Vec<usize>,
    pub(crate) tables: Vec<Vec<usize>>,
    pub(crate) lens: Vec<usize>,
    /// How many block tables name each block (0 for a free block).
    pub(crate) owners: Vec<usize>,
    pub(crate) key_norm: f64,
}

impl SharedPagedCache {
    /// An empty cache of `blocks` blocks of `block_size` tokens for `batch` sequences.
    pub fn new(
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        blocks: usize,
    ) -> Result<Self, AttentionError> {
        let sizes = [batch, kv_heads, head_dim, block_size, blocks];
        let elements = sizes[1..].iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if sizes.contains(&0) || elements.is_none_or(|n| n > isize::MAX as usize / 4) {
            return Err(cache_error(
                "creating a paged cache",
                format!("sizes [batch, kv_heads, head_dim, block_size, blocks] = {sizes:?}"),
                "every size at least 1, and a pool that fits in memory",
            ));
        }
        let pool = vec![0.0; elements.unwrap_or(0)];
        Ok(Self {
            keys: pool.clone(),
            values: pool,
            kv_heads,
            head_dim,
            block_size,
            free: (0..blocks).rev().collect(),
            tables: vec![Vec::new(); batch],
            lens: vec![0; batch],
            owners: vec![0; blocks],
            key_norm: 0.0,
        })
    }

    /// Blocks no sequence holds.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// The blocks of sequence `seq`, in token order.
    pub fn block_table(&self, seq: usize) -> Option<&[usize]> {
        self.tables.get(seq).map(Vec::as_slice)
    }

    /// The length of `seq`, or the error that says there is no such sequence.
    pub(crate) fn len_checked(&self, seq: usize) -> Result<usize, AttentionError> {
        self.lens.get(seq).copied().ok_or_else(|| no_such_sequence(seq, self.lens.len()))
    }

    /// Appends `n` tokens (`[Hkv, n, D]` keys and values) to `seq`. If its last block is
    /// partly filled and shared, the tokens would land in a block another sequence reads: that
    /// block is copied to a free one first. Nothing changes if the pool lacks a block.
    pub fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        let start = self.len_checked(seq)?;
        let (n, key_norm) = check_new_tokens(seq, keys, values, self.kv_heads, self.head_dim)?;
        let copy = self.shared_last_block(seq, start);
        let fresh = (start + n).div_ceil(self.block_size) - self.tables[seq].len();
        let needed = fresh + usize::from(copy.is_some());
        if needed > self.free.len() {
            return Err(cache_error(
                &format!("appending {n} tokens to sequence {seq}"),
                format!("{needed} more blocks needed, {} free", self.free.len()),
                "a pool with enough free blocks",
            ));
        }
        if let Some(at) = copy {
            let shared = self.tables[seq][at];
            let own = self.take_block();
            self.copy_block(shared, own);
            self.owners[shared] -= 1;
            self.tables[seq][at] = own;
        }
        for _ in 0..fresh {
            let block = self.take_block();
            self.tables[seq].push(block);
        }
        self.write_tokens(seq, start, keys, values);
        self.lens[seq] += n;
        self.key_norm = self.key_norm.max(key_norm);
        Ok(())
    }

    /// Writes the tokens `keys` and `values` (`[Hkv, n, D]`) to positions `start ..` of `seq`,
    /// whose table has their blocks.
    pub(crate) fn write_tokens(
        &mut self,
        seq: usize,
        start: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) {
        for t in 0..keys.dim().1 {
            for g in 0..self.kv_heads {
                let at = self.slot(seq, g, start + t);
                for (i, at) in (at..at + self.head_dim).enumerate() {
                    self.keys[at] = keys[[g, t, i]];
                    self.values[at] = values[[g, t, i]];
                }
            }
        }
    }

    /// Where in `seq`'s table the block that new tokens from position `start` would be
    /// written into lies, if that block is shared: a partly filled last block that another
    /// table names too. (A full last block is never written again.)
    pub(crate) fn shared_last_block(&self, seq: usize, start: usize) -> Option<usize> {
        let at = start / self.block_size;
        let partly_filled = !start.is_multiple_of(self.block_size);
        (partly_filled && self.owners[self.tables[seq][at]] > 1).then_some(at)
    }

    /// A free block, now named by one table.
    pub(crate) fn take_block(&mut self) -> usize {
        let block = self.free.pop().expect("counted by the caller");
        self.owners[block] = 1;
        block
    }

    /// Copies every head's keys and values of block `from` into block `to`.
    pub(crate) fn copy_block(&mut self, from: usize, to: usize) {
        let size = self.kv_heads * self.block_size * self.head_dim;
        self.keys.copy_within(from * size..(from + 1) * size, to * size);
        self.values.copy_within(from * size..(from + 1) * size, to * size);
    }

    /// Ends `seq`: each of its blocks loses an owner, and goes back to the pool once it has
    /// none; its table is emptied.
    pub fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        self.len_checked(seq)?;
        for block in std::mem::take(&mut self.tables[seq]).into_iter().rev() {
            self.owners[block] -= 1;
            if self.owners[block] == 0 {
                self.free.push(block);
            }
        }
        self.lens[seq] = 0;
        Ok(())
    }

    /// Gives `child`, which must hold no token, the tokens of `parent` by sharing its blocks:
    /// no block is taken and nothing is copied until one of them writes into a shared block.
    pub fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError> {
        self.len_checked(parent)?;
        let child_len = self.len_checked(child)?;
        if parent == child || child_len > 0 {
            let found = match parent == child {
                true => "a fork into the parent itself".to_string(),
                false => format!("sequence {child} holding {child_len} tokens"),
            };
            return Err(cache_error(
                &format!("forking sequence {parent} into sequence {child}"),
                found,
                "another sequence, holding no token (release it first)",
            ));
        }
        let table = self.tables[parent].clone();
        for &block in &table {
            self.owners[block] += 1;
        }
        self.tables[child] = table;
        self.lens[child] = self.lens[parent];
        Ok(())
    }

    /// Where token `j` of head `kv_head` of `seq` starts in the pool.
    pub(crate) fn slot(&self, seq: usize, kv_head: usize, j: usize) -> usize {
        let block = self.tables[seq][j / self.block_size];
        ((block * self.kv_heads + kv_head) * self.block_size + j % self.block_size) * self.head_dim
    }
}

impl KeyValues for SharedPagedCache {
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
