//! The KV cache: the keys and values of every token seen so far, kept so that each new token
//! computes only its own.
//!
//! A model that generates text computes attention for one new token at a time. Its query is
//! new, but the keys and values of the tokens before it were computed at earlier steps and do
//! not change: keep them, and a step costs `O(N D)` reads instead of recomputing `N` tokens.
//!
//! [`KvCache`] is the contiguous layout: `K` and `V` as `[B, Hkv, capacity, D]`, each sequence
//! owning `capacity` slots of which the first `len(seq)` are filled. [`crate::paged`] stores
//! the same tokens in fixed-size blocks. Both implement [`KeyValues`], which is all decoding
//! reads.

use ndarray::{Array4, ArrayView3, s};
use reference::contract::largest_row_norm;
use reference::{AttentionError, check_finite};

/// Read access to a cache: what decoding needs, whatever the layout.
///
/// These are the accessors of decoding's inner loop, so they do not check their arguments:
/// `seq` must be below `batch()`, `kv_head` below `kv_heads()` and `j` below `len(seq)` (they
/// panic or read another row otherwise). `decode` checks every call's shapes first.
pub trait KeyValues: Sync {
    /// `B`, the number of sequences.
    fn batch(&self) -> usize;
    /// `Hkv`, the number of K/V heads.
    fn kv_heads(&self) -> usize;
    /// `D`
    fn head_dim(&self) -> usize;
    /// How many tokens sequence `seq` holds.
    fn len(&self, seq: usize) -> usize;
    /// Key `j` of K/V head `kv_head` of sequence `seq`: `D` values (`j < len(seq)`).
    fn key(&self, seq: usize, kv_head: usize, j: usize) -> &[f32];
    /// Value `j` of K/V head `kv_head` of sequence `seq`: `D` values.
    fn value(&self, seq: usize, kv_head: usize, j: usize) -> &[f32];
    /// The largest Euclidean norm of any key the cache holds (0 when empty): with the query's,
    /// it bounds every logit, as the contract's overflow check needs.
    fn largest_key_norm(&self) -> f64;
    /// The same tokens as blocks and block tables ([`Blocks`]): how the GPU reads any cache.
    fn blocks(&self) -> Blocks<'_>;

    /// The sizes and lengths a decoding call is checked against.
    fn shape(&self) -> CacheShape {
        CacheShape {
            kv_heads: self.kv_heads(),
            head_dim: self.head_dim(),
            lens: (0..self.batch()).map(|seq| self.len(seq)).collect(),
            largest_key_norm: self.largest_key_norm(),
        }
    }
}

/// What a decoding call is checked against: a cache's sizes, the tokens of each sequence, and
/// its largest key (for the logit overflow check), whichever device holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheShape {
    /// `Hkv`
    pub kv_heads: usize,
    /// `D`
    pub head_dim: usize,
    /// The tokens of each sequence; `B = lens.len()`.
    pub lens: Vec<usize>,
    /// See [`KeyValues::largest_key_norm`].
    pub largest_key_norm: f64,
}

/// A cache seen as a pool of blocks, the layout the GPU kernel reads (PagedAttention's): block
/// `n` of the pool holds `block_size` tokens of every K/V head, `[Hkv, block_size, D]`, and token
/// `j` of sequence `seq` lives in block `tables[seq][j / block_size]` at slot `j % block_size`.
/// A contiguous cache is the special case of one block of `capacity` tokens per sequence.
#[derive(Clone, Debug)]
pub struct Blocks<'a> {
    /// `[blocks, Hkv, block_size, D]`, row-major.
    pub keys: &'a [f32],
    /// `[blocks, Hkv, block_size, D]`, row-major.
    pub values: &'a [f32],
    /// Tokens per block.
    pub block_size: usize,
    /// The blocks of each sequence, in token order.
    pub tables: Vec<Vec<usize>>,
    /// The tokens each sequence holds.
    pub lens: Vec<usize>,
}

impl Blocks<'_> {
    /// Blocks in the pool.
    pub fn pool_blocks(&self, kv_heads: usize, head_dim: usize) -> usize {
        self.keys.len() / (kv_heads * self.block_size * head_dim).max(1)
    }

    /// Whether the tables can be followed: one table per sequence, every table long enough for
    /// its sequence's tokens, every block it names in the pool, and a pool of whole blocks for
    /// keys and values alike. Otherwise the error that names the first problem: a kernel that
    /// followed such a table would read another sequence's tokens, or memory past the pool.
    pub fn check(&self, kv_heads: usize, head_dim: usize) -> Result<(), AttentionError> {
        let block = kv_heads * self.block_size * head_dim;
        if block == 0
            || !self.keys.len().is_multiple_of(block)
            || self.values.len() != self.keys.len()
        {
            return Err(cache_error(
                "reading the pool",
                format!("{} key and {} value elements", self.keys.len(), self.values.len()),
                &format!(
                    "the same whole number of blocks of {kv_heads} x {} x {head_dim}",
                    self.block_size
                ),
            ));
        }
        let pool = self.pool_blocks(kv_heads, head_dim);
        if self.tables.len() != self.lens.len() {
            let found =
                format!("{} block tables for {} sequences", self.tables.len(), self.lens.len());
            return Err(cache_error("reading the block tables", found, "one table per sequence"));
        }
        for (seq, (table, &len)) in self.tables.iter().zip(&self.lens).enumerate() {
            let what = format!("the block table of sequence {seq}");
            if table.len() < len.div_ceil(self.block_size) {
                let found = format!("{} blocks for {len} tokens", table.len());
                return Err(cache_error(
                    &what,
                    found,
                    &format!("one block per {} tokens", self.block_size),
                ));
            }
            if let Some(&missing) = table.iter().find(|&&block| block >= pool) {
                let found = format!("block {missing}, which is not in the pool");
                return Err(cache_error(&what, found, &format!("blocks below {pool}")));
            }
        }
        Ok(())
    }
}

/// The K and V of `B` sequences, `[B, Hkv, capacity, D]` each, and how many tokens each
/// sequence holds. Sequences grow independently, one token (or a prompt) at a time.
#[derive(Clone, Debug)]
pub struct KvCache {
    keys: Array4<f32>,
    values: Array4<f32>,
    lens: Vec<usize>,
    key_norm: f64,
}

impl KvCache {
    /// An empty cache for `batch` sequences of at most `capacity` tokens each, with
    /// `kv_heads` heads of `head_dim` values; an error if any size is 0.
    pub fn new(
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
    ) -> Result<Self, AttentionError> {
        let dims = [batch, kv_heads, capacity, head_dim];
        let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if elements.is_none_or(|n| n > isize::MAX as usize / size_of::<f32>()) {
            return Err(cache_error(
                "creating a cache",
                format!("sizes [batch, kv_heads, capacity, head_dim] = {dims:?}"),
                "a cache whose size in bytes fits in memory's address space",
            ));
        }
        if dims.contains(&0) {
            return Err(cache_error(
                "creating a cache",
                format!("sizes [batch, kv_heads, capacity, head_dim] = {dims:?}"),
                "every size at least 1",
            ));
        }
        let keys = Array4::zeros(dims);
        Ok(Self { values: keys.clone(), keys, lens: vec![0; batch], key_norm: 0.0 })
    }

    /// The most tokens one sequence can hold.
    pub fn capacity(&self) -> usize {
        self.keys.dim().2
    }

    // ANCHOR: append
    /// Appends the keys and values of `n` new tokens, `[Hkv, n, D]` each, to sequence `seq`.
    /// An error, with nothing written, if `seq` is not a sequence of the cache, the shapes do
    /// not fit, `n` is 0, a value is not finite, or the tokens would pass the capacity.
    pub fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        let start = self.len_checked(seq)?;
        let (n, key_norm) = check_new_tokens(seq, keys, values, self.kv_heads(), self.head_dim())?;
        if start + n > self.capacity() {
            return Err(cache_error(
                &format!("appending to sequence {seq}"),
                format!("{n} new tokens after {start} (positions {start}..{})", start + n),
                &format!("positions below the capacity, {}", self.capacity()),
            ));
        }
        self.keys.slice_mut(s![seq, .., start..start + n, ..]).assign(&keys);
        self.values.slice_mut(s![seq, .., start..start + n, ..]).assign(&values);
        self.lens[seq] += n;
        self.key_norm = self.key_norm.max(key_norm);
        Ok(())
    }
    // ANCHOR_END: append

    /// The length of `seq`, or the error that says the cache has no such sequence.
    fn len_checked(&self, seq: usize) -> Result<usize, AttentionError> {
        self.lens.get(seq).copied().ok_or_else(|| no_such_sequence(seq, self.lens.len()))
    }
}

impl KeyValues for KvCache {
    fn batch(&self) -> usize {
        self.lens.len()
    }
    fn kv_heads(&self) -> usize {
        self.keys.dim().1
    }
    fn head_dim(&self) -> usize {
        self.keys.dim().3
    }
    fn len(&self, seq: usize) -> usize {
        self.lens[seq]
    }
    fn key(&self, seq: usize, kv_head: usize, j: usize) -> &[f32] {
        row(&self.keys, seq, kv_head, j)
    }
    fn value(&self, seq: usize, kv_head: usize, j: usize) -> &[f32] {
        row(&self.values, seq, kv_head, j)
    }
    fn largest_key_norm(&self) -> f64 {
        self.key_norm
    }
    fn blocks(&self) -> Blocks<'_> {
        Blocks {
            keys: self.keys.as_slice().expect("the cache is standard layout"),
            values: self.values.as_slice().expect("the cache is standard layout"),
            block_size: self.capacity(),
            tables: (0..self.batch()).map(|seq| vec![seq]).collect(),
            lens: self.lens.clone(),
        }
    }
}

/// Row `j` of head `kv_head` of sequence `seq` of a `[B, Hkv, N, D]` array, as a slice.
fn row(x: &Array4<f32>, seq: usize, kv_head: usize, j: usize) -> &[f32] {
    let d = x.dim().3;
    let start = ((seq * x.dim().1 + kv_head) * x.dim().2 + j) * d;
    &x.as_slice().expect("the cache is standard layout")[start..start + d]
}

/// Checks new tokens' keys and values (`[Hkv, n, D]` each, finite, `n >= 1`) and returns `n`
/// and the largest norm of the new keys (for the cache's logit bound).
pub fn check_new_tokens(
    seq: usize,
    keys: ArrayView3<f32>,
    values: ArrayView3<f32>,
    kv_heads: usize,
    head_dim: usize,
) -> Result<(usize, f64), AttentionError> {
    let what = format!("appending to sequence {seq}");
    let n = keys.dim().1;
    for (name, x) in [("keys", keys), ("values", values)] {
        let (h, len, d) = x.dim();
        if h != kv_heads || d != head_dim || len != n || n == 0 {
            return Err(cache_error(
                &what,
                format!("{name} of shape [{h}, {len}, {d}] (keys have {n} tokens)"),
                &format!(
                    "keys and values of shape [{kv_heads}, n, {head_dim}], n >= 1 the same for both"
                ),
            ));
        }
    }
    let key_norm = largest_row_norm("K", &keys)?;
    check_finite("V", &values)?;
    Ok((n, key_norm))
}

/// The error for a sequence index the cache does not hold.
pub fn no_such_sequence(seq: usize, batch: usize) -> AttentionError {
    cache_error(
        &format!("sequence {seq}"),
        "no such sequence".into(),
        &format!("a sequence below {batch}"),
    )
}

/// [`AttentionError::Cache`].
pub fn cache_error(what: &str, found: String, expected: &str) -> AttentionError {
    AttentionError::Cache { what: what.to_string(), found, expected: expected.to_string() }
}
