//! This lesson's decoding versions for the course's registry: each fills its cache with the
//! keys and values of every sequence ([`reference::Decoder`]), then decodes from it.

use ndarray::{Array3, Array4};
use reference::{
    About, AttentionError, AttentionOptions, AttentionOutput, DecodeVersion, Decoder, Device,
    FilledCache,
};

use crate::cache::cache_error;
use crate::{KeyValues, KvCache, PagedKvCache, cpu_splits, decode};

/// Tokens per block of the paged version's cache.
pub const BLOCK_SIZE: usize = 16;

/// The decoding versions on the CPU, in course order.
pub fn versions() -> Vec<DecodeVersion> {
    let lesson = env!("CARGO_PKG_NAME");
    let split = About::decode(
        "decode, CPU, split keys",
        lesson,
        Device::Cpu,
        "one query per sequence over a contiguous cache, the keys split into chunks that merge",
    );
    let paged = About::decode(
        "decode, CPU, paged cache",
        lesson,
        Device::Cpu,
        "the same over PagedAttention's cache: blocks of 16 tokens from a shared pool",
    );
    vec![DecodeVersion::new(split, Contiguous), DecodeVersion::new(paged, Paged)]
}

/// Decoding from a contiguous cache ([`KvCache`]).
struct Contiguous;

/// Decoding from a paged cache ([`PagedKvCache`], blocks of [`BLOCK_SIZE`] tokens).
struct Paged;

impl Decoder for Contiguous {
    fn fill(
        &self,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<Box<dyn FilledCache>, AttentionError> {
        Ok(Box::new(SplitKeys(contiguous_cache(keys, values)?)))
    }
}

impl Decoder for Paged {
    fn fill(
        &self,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<Box<dyn FilledCache>, AttentionError> {
        let (kv_heads, _, head_dim) = cache_sizes(keys, values)?;
        let blocks = keys.iter().map(|k| k.dim().1.div_ceil(BLOCK_SIZE)).sum();
        let mut cache = PagedKvCache::new(keys.len(), kv_heads, head_dim, BLOCK_SIZE, blocks)?;
        for (seq, (k, v)) in keys.iter().zip(values).enumerate() {
            cache.append(seq, k.view(), v.view())?;
        }
        Ok(Box::new(SplitKeys(cache)))
    }
}

/// A contiguous cache holding `keys[b]` and `values[b]` for each sequence `b`.
pub fn contiguous_cache(
    keys: &[Array3<f32>],
    values: &[Array3<f32>],
) -> Result<KvCache, AttentionError> {
    let (kv_heads, longest, head_dim) = cache_sizes(keys, values)?;
    let mut cache = KvCache::new(keys.len(), kv_heads, longest, head_dim)?;
    for (seq, (k, v)) in keys.iter().zip(values).enumerate() {
        cache.append(seq, k.view(), v.view())?;
    }
    Ok(cache)
}

/// `(Hkv, longest sequence, D)` of the sequences' keys, or an error if there are none or
/// keys and values are given for different numbers of sequences (the caches check the rest as
/// they append).
fn cache_sizes(
    keys: &[Array3<f32>],
    values: &[Array3<f32>],
) -> Result<(usize, usize, usize), AttentionError> {
    let Some(first) = keys.first() else {
        return Err(cache_error("filling a cache", "no sequence".into(), "at least one"));
    };
    if keys.len() != values.len() {
        let found = format!("keys of {} sequences, values of {}", keys.len(), values.len());
        return Err(cache_error("filling a cache", found, "keys and values of each sequence"));
    }
    let longest = keys.iter().map(|k| k.dim().1).max().unwrap_or(0);
    Ok((first.dim().0, longest, first.dim().2))
}

/// A filled cache that decodes with the keys split as [`cpu_splits`] chooses for this
/// machine's threads.
struct SplitKeys<C>(C);

impl<C: KeyValues> FilledCache for SplitKeys<C> {
    fn decode(
        &self,
        q: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let cache = &self.0;
        let longest = cache.shape().lens.into_iter().max().unwrap_or(1);
        let threads = rayon::current_num_threads();
        decode(cache, q, options, cpu_splits(cache.batch(), cache.kv_heads(), longest, threads))
    }
}
