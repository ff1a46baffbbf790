//! Attention of new tokens over a cache, on the CPU: one pass, or split keys (flash-decoding).
//!
//! The queries `q [B, Hq, Nq, D]` are the last `Nq` tokens of each sequence, already appended
//! to the cache (`Nq = 1` when generating, the prompt's length when prefilling). Sequence `b`
//! holds `len(b)` tokens, so with the causal mask its query row `i` sees keys
//! `0..=i + len(b) - Nq`: the contract's bottom-right mask with `Nkv = len(b)`. Query head `h`
//! reads K/V head `h / G` ([`HeadGroups`]).
//!
//! One query row has `len(b)` keys to read and little else to do. With few sequences and
//! heads there are fewer (sequence, head) tasks than threads, and the threads left over idle
//! while the cache is read by the others. Splitting each sequence's keys into chunks gives
//! each chunk its own task, and the partial results merge exactly (lesson 02).

use ndarray::{Array3, Array4};
use rayon::prelude::*;
use reference::contract::{LARGEST_LOGIT, largest_row_norm};
use reference::{AttentionError, AttentionOptions, AttentionOutput, HeadGroups};

use crate::cache::{CacheShape, KeyValues, cache_error};

/// The checked sizes of a decoding call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    /// `B`
    pub batch: usize,
    /// Query heads and K/V heads.
    pub groups: HeadGroups,
    /// `Nq`, the new tokens of each sequence.
    pub q_len: usize,
    /// `D`
    pub head_dim: usize,
}

/// Checks `q [B, Hq, Nq, D]` against `cache`, and the options, and returns the sizes and the
/// scale. Errors: a batch or head dimension that disagrees with the cache, query heads that the
/// K/V heads do not divide, a sequence that holds no token or fewer than `Nq`, a non-finite
/// query or scale, logits that could overflow f32.
pub fn check_decode(
    cache: &CacheShape,
    q: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<(DecodeShape, f32), AttentionError> {
    let (batch, q_heads, q_len, head_dim) = q.dim();
    if batch != cache.lens.len() || head_dim != cache.head_dim || q_len == 0 {
        let found = format!("queries of shape [{batch}, {q_heads}, {q_len}, {head_dim}]");
        let expected = format!(
            "[{}, Hq, Nq, {}] (the cache's batch and head dim), Nq >= 1",
            cache.lens.len(),
            cache.head_dim
        );
        return Err(cache_error("decoding", found, &expected));
    }
    let groups = HeadGroups::new(q_heads, cache.kv_heads)?;
    for (seq, &len) in cache.lens.iter().enumerate() {
        if len < q_len {
            let found = format!("sequence {seq} holds {len} tokens");
            let expected = format!("at least the {q_len} query tokens, already appended");
            return Err(cache_error("decoding", found, &expected));
        }
    }
    let q_norm = largest_row_norm("Q", q)?;
    let scale = options.scale_for(head_dim)?;
    let bound = f64::from(scale).abs().max(1.0) * q_norm * cache.largest_key_norm;
    if bound > LARGEST_LOGIT {
        return Err(AttentionError::LogitsOverflow { bound, largest: LARGEST_LOGIT });
    }
    Ok((DecodeShape { batch, groups, q_len, head_dim }, scale))
}

/// The keys of chunk `split` of `splits` over `len` keys: chunks of `ceil(len / splits)` keys
/// in order, the last ones shorter or empty. The GPU kernel cuts the same way.
pub fn chunk(len: usize, splits: usize, split: usize) -> std::ops::Range<usize> {
    let size = len.div_ceil(splits);
    (split * size).min(len)..((split + 1) * size).min(len)
}

/// The running softmax state of one query row over some keys (lesson 02), and its partial
/// result once finished: `O` normalised over those keys and their logsumexp `L`.
#[derive(Clone, Debug)]
struct RowState {
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl RowState {
    fn new(head_dim: usize) -> Self {
        Self { max: f32::NEG_INFINITY, sum: 0.0, acc: vec![0.0; head_dim] }
    }

    fn push(&mut self, score: f32, value: &[f32]) {
        if score > self.max {
            // A new maximum: rescale what was summed under the old one (exp(-inf) = 0 for the
            // first key), and the new key weighs e^0 = 1.
            let rescale = (self.max - score).exp();
            self.sum = self.sum * rescale + 1.0;
            for (a, &v) in self.acc.iter_mut().zip(value) {
                *a = *a * rescale + v;
            }
            self.max = score;
        } else {
            let weight = (score - self.max).exp();
            self.sum += weight;
            for (a, &v) in self.acc.iter_mut().zip(value) {
                *a += weight * v;
            }
        }
    }

    /// `(O, L)` over the keys pushed; `O = 0`, `L = -inf` if there were none.
    fn finish(mut self) -> (Vec<f32>, f32) {
        if self.sum == 0.0 {
            return (self.acc, f32::NEG_INFINITY);
        }
        self.acc.iter_mut().for_each(|a| *a /= self.sum);
        (self.acc, self.max + self.sum.ln())
    }
}

/// The partial results of one task: every query head of K/V group `group` of sequence `seq`,
/// every query row, over the keys of one chunk. Each key and value is read once for the whole
/// group: the bandwidth grouped heads save.
fn group_partial(
    cache: &(impl KeyValues + ?Sized),
    q: &Array4<f32>,
    shape: &DecodeShape,
    scale: f32,
    causal: bool,
    (seq, group, keys): (usize, usize, std::ops::Range<usize>),
) -> Vec<(Vec<f32>, f32)> {
    let heads = shape.groups.group_size();
    let len = cache.len(seq);
    // Each state's query row, scaled, and how many keys it sees (its causal limit).
    let rows: Vec<(Vec<f32>, usize)> = (0..heads * shape.q_len)
        .map(|index| {
            let (head, row) = (group * heads + index / shape.q_len, index % shape.q_len);
            let query =
                q.slice(ndarray::s![seq, head, row, ..]).iter().map(|&x| scale * x).collect();
            (query, if causal { row + 1 + len - shape.q_len } else { len })
        })
        .collect();
    let mut states = vec![RowState::new(shape.head_dim); rows.len()];
    for j in keys {
        let (key, value) = (cache.key(seq, group, j), cache.value(seq, group, j));
        for ((query, visible), state) in rows.iter().zip(&mut states) {
            if j < *visible {
                let score = dot(query, key);
                state.push(score, value);
            }
        }
    }
    states.into_iter().map(RowState::finish).collect()
}

/// `a . b` in eight running sums, which the compiler keeps in one vector register (a single
/// running sum must add the products in order, one at a time).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(&x, &y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Combines partial results `(O_s, L_s)` of one query row over disjoint keys:
/// `L = log sum_s e^{L_s}`, `O = sum_s e^{L_s - L} O_s`. Parts that saw no key (`L_s = -inf`)
/// weigh 0; if none saw a key the row is `O = 0`, `L = -inf`.
fn merge(parts: &[&(Vec<f32>, f32)], head_dim: usize) -> (Vec<f32>, f32) {
    let max = parts.iter().map(|p| p.1).fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return (vec![0.0; head_dim], max);
    }
    let weights: Vec<f32> = parts.iter().map(|p| (p.1 - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    let mut o = vec![0.0; head_dim];
    for (part, w) in parts.iter().zip(&weights) {
        o.iter_mut().zip(&part.0).for_each(|(o, &x)| *o += w / total * x);
    }
    (o, max + total.ln())
}

/// Attention of the queries `q [B, Hq, Nq, D]` (the last `Nq` tokens of each sequence) over
/// `cache`, each sequence's keys split into `splits` chunks computed in parallel and merged:
/// `O [B, Hq, Nq, D]` and `L [B, Hq, Nq]`. `splits = 1` is one pass per sequence and group.
/// Errors: those of [`check_decode`], and `splits = 0`.
pub fn decode(
    cache: &(impl KeyValues + ?Sized),
    q: &Array4<f32>,
    options: &AttentionOptions,
    splits: usize,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let cache_shape = cache.shape();
    let (shape, scale) = check_decode(&cache_shape, q, options)?;
    if splits == 0 {
        return Err(cache_error("decoding", "0 splits".into(), "at least 1 split of the keys"));
    }
    // More splits than the longest sequence has keys would only add empty chunks.
    let splits = splits.min(cache_shape.lens.into_iter().max().unwrap_or(1));
    let kv_heads = shape.groups.kv_heads();
    let tasks: Vec<_> = (0..shape.batch)
        .flat_map(|seq| (0..kv_heads).map(move |group| (seq, group)))
        .flat_map(|(seq, group)| {
            (0..splits).map(move |s| (seq, group, chunk(cache.len(seq), splits, s)))
        })
        .collect();
    let partials: Vec<Vec<(Vec<f32>, f32)>> = tasks
        .into_par_iter()
        .map(|task| group_partial(cache, q, &shape, scale, options.causal, task))
        .collect();
    // Partials are in task order: sequence, group, split; within a task, head then row.
    let (batch, q_heads, q_len, d) = q.dim();
    let mut out = AttentionOutput {
        o: Array4::zeros((batch, q_heads, q_len, d)),
        lse: Array3::zeros((batch, q_heads, q_len)),
    };
    let per_group = shape.groups.group_size() * q_len;
    for (task, first) in (0..batch * kv_heads).zip((0..).step_by(splits)) {
        let (seq, group) = (task / kv_heads, task % kv_heads);
        for index in 0..per_group {
            let parts: Vec<_> = partials[first..first + splits].iter().map(|p| &p[index]).collect();
            let (o, lse) = merge(&parts, d);
            let (head, row) = (group * shape.groups.group_size() + index / q_len, index % q_len);
            out.o.slice_mut(ndarray::s![seq, head, row, ..]).assign(&ndarray::ArrayView1::from(&o));
            out.lse[[seq, head, row]] = lse;
        }
    }
    Ok(out)
}

/// The fewest keys worth a chunk of their own on the CPU: a chunk also costs a partial `O`
/// to write and merge, `D` numbers, against `2 D` numbers read per key.
pub const MIN_CPU_CHUNK: usize = 256;

/// Splits per sequence for the CPU: enough `(sequence, K/V head, chunk)` tasks to give each of
/// `threads` threads two (so that one slow task does not leave the others waiting), and no
/// chunk of the longest sequence shorter than [`MIN_CPU_CHUNK`] keys (one chunk if the
/// sequence itself is shorter). With twice as many groups as threads already, no split.
pub fn cpu_splits(batch: usize, kv_heads: usize, longest: usize, threads: usize) -> usize {
    let tasks = (batch * kv_heads).max(1);
    let wanted = (2 * threads).div_ceil(tasks);
    wanted.min(longest / MIN_CPU_CHUNK).max(1)
}
