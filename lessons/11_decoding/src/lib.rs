//! # Lesson 11 — decoding with a KV cache
//!
//! A language model generates one token at a time. Each step appends the new token's key and
//! value to a cache and runs attention for one query per sequence over everything cached: a
//! few FLOPs per byte of cache read, so decoding is bound by memory bandwidth, and its speed
//! limit is how fast the cache can be read.
//!
//! * [`cache`]: the contiguous cache `[B, Hkv, capacity, D]`, growing a token (or a prompt)
//!   at a time per sequence; the [`KeyValues`] view decoding reads.
//! * [`paged`]: PagedAttention's cache, fixed-size blocks from a shared pool and a block table
//!   per sequence; the same answers as the contiguous one.
//! * Grouped-query and multi-query attention: fewer K/V heads than query heads, query head `h`
//!   reading K/V head `h / G` ([`reference::HeadGroups`]); the cache shrinks by `G`.
//! * [`decode`](mod@decode): attention of the new tokens over the cache on the CPU, in one
//!   pass or with the keys split into chunks (flash-decoding) whose partial results merge
//!   exactly.
//! * `gpu_decode` (feature `gpu`, on by default): the same in WGSL over an f16 cache: a
//!   kernel that computes each chunk's partial result for a group of query heads, and one that
//!   merges them.
//! * [`versions`](mod@versions): the decoding versions for the course's registry.

pub mod cache;
pub mod decode;
#[cfg(feature = "gpu")]
pub mod gpu_decode;
pub mod paged;
pub mod problem;
pub mod versions;

pub use cache::{Blocks, KeyValues, KvCache};
pub use decode::{cpu_splits, decode};
pub use paged::PagedKvCache;
pub use versions::versions;

/// Bytes of cache one token takes: a key and a value for each of `kv_heads` heads of
/// `head_dim` numbers of `bytes` bytes. Grouped heads divide it by `G = Hq / Hkv`.
pub fn cache_bytes_per_token(kv_heads: usize, head_dim: usize, bytes: usize) -> usize {
    2 * kv_heads * head_dim * bytes
}
