//! # Exercise 11: a paged KV cache and grouped decoding, then prefix sharing
//!
//! Warm-up: lesson 11's paged cache (a pool of blocks, a block table per sequence) and the
//! decoding of new tokens over any cache, with grouped heads and split keys.
//! Main task: `fork`, which gives a sequence the tokens of another by sharing its blocks, and
//! copies a block only when a sequence writes into one that is shared (copy on write). The
//! tasks, the contract and hints are in this folder's README.md; the book's chapter 11 explains
//! the ideas.
//!
//! Check your work with `cargo test -p ex11 --test visible` and `cargo grade ex11`.

// The stub does not use its inputs yet; delete this line once it does.
#![allow(unused_variables, unused_imports, dead_code)]

use lesson11::cache::{cache_error, check_new_tokens, no_such_sequence};
use lesson11::decode::{check_decode, chunk};
use lesson11::{Blocks, KeyValues};
use ndarray::{Array3, Array4, ArrayView3, s};
use rayon::prelude::*;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

/// `B` sequences sharing a pool of blocks of `block_size` tokens; each block holds every K/V
/// head, `[Hkv, block_size, D]`, for keys and for values (the lesson's layout).
#[derive(Clone, Debug)]
pub struct PagedCache {
    /// `[blocks, Hkv, block_size, D]`, row-major.
    keys: Vec<f32>,
    /// `[blocks, Hkv, block_size, D]`, row-major.
    values: Vec<f32>,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    /// Blocks no sequence holds; taken from the end.
    free: Vec<usize>,
    /// Each sequence's blocks, in token order.
    tables: Vec<Vec<usize>>,
    /// The tokens each sequence holds.
    lens: Vec<usize>,
    /// The largest norm of any key appended (for decoding's overflow check).
    key_norm: f64,
    // TODO (main task): what `fork` and copy on write need to know about each block.
}

impl PagedCache {
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
        let elements = sizes[1..].iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let Some(elements) =
            elements.filter(|&n| n <= isize::MAX as usize / 4 && !sizes.contains(&0))
        else {
            return Err(cache_error(
                "creating a paged cache",
                format!("sizes [batch, kv_heads, head_dim, block_size, blocks] = {sizes:?}"),
                "every size at least 1, and a pool that fits in memory",
            ));
        };
        Ok(Self {
            keys: vec![0.0; elements],
            values: vec![0.0; elements],
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

    /// The blocks of sequence `seq`, in token order; `None` if the cache holds no such
    /// sequence.
    pub fn block_table(&self, seq: usize) -> Option<&[usize]> {
        self.tables.get(seq).map(Vec::as_slice)
    }

    /// Where token `j` of head `kv_head` of sequence `seq` starts in `keys` (and `values`).
    fn slot(&self, seq: usize, kv_head: usize, j: usize) -> usize {
        // TODO: the block is the sequence's table entry for token j; inside the block, the
        //       head, then the slot of the token, then D values each.
        todo!("exercise 11: slot")
    }

    /// Appends `n` new tokens, `[Hkv, n, D]` keys and values, to sequence `seq`, taking blocks
    /// from the pool as it needs them. An error, with nothing changed, if there is no such
    /// sequence, the shapes or values are bad (`n >= 1`, finite), or the pool has too few free
    /// blocks. Main task: a sequence never writes into a block another sequence reads.
    pub fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        // TODO 1: the sequence's length (or no_such_sequence), and check_new_tokens, which
        //         gives n and the new keys' largest norm.
        // TODO 2: how many blocks the sequence needs for its new length, beyond those it has;
        //         an error if the pool has fewer free ones.
        // TODO 3: take them, write every token of every head at its slot, grow the length and
        //         the largest key norm.
        todo!("exercise 11: append")
    }

    /// Ends sequence `seq`: it holds no token and its blocks go back to the pool. An error if
    /// there is no such sequence.
    pub fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        todo!("exercise 11: release")
    }

    /// Main task: gives `child`, which holds no token, the tokens of `parent`, sharing its
    /// blocks: no block is taken and nothing is copied. From then on each grows on its own.
    /// An error, with nothing changed, if either sequence does not exist, `child == parent`,
    /// or `child` holds tokens.
    pub fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError> {
        todo!("exercise 11, main task: fork")
    }
}

impl KeyValues for PagedCache {
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

/// Attention of the queries `q [B, Hq, Nq, D]` (the last `Nq` tokens of each sequence, already
/// appended) over `cache`, any layout: `O [B, Hq, Nq, D]` and `L [B, Hq, Nq]`. Query head `h`
/// reads K/V head `h / G`; with the causal mask, query row `i` of sequence `b` sees keys
/// `0 ..= i + len(b) - Nq`. Each sequence's keys are cut into `splits` chunks (`chunk`)
/// computed in parallel and merged. Errors: those of `check_decode`, and `splits = 0`.
pub fn decode(
    cache: &dyn KeyValues,
    q: &Array4<f32>,
    options: &AttentionOptions,
    splits: usize,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // TODO 1: refuse 0 splits; check_decode(&cache.shape(), q, options) gives the sizes (with
    //         the head groups) and the scale.
    // TODO 2: every (sequence, query head, query row, chunk): the online softmax over the
    //         chunk's keys that the row sees, from K/V head h / G.
    // TODO 3: each row's chunks merged, in chunk order, into O and L.
    todo!("exercise 11: decode")
}
