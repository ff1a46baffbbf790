//! The reference solution of exercise 12's main task: a batch of sequences of different
//! lengths decoding together. Every sequence's new tokens go through the linear layers as one
//! matrix (the rows of all of them stacked, as a serving system's continuous batching does),
//! each embedded at its own positions; attention runs per sequence, its new queries over its
//! own cached keys. No chapter includes this file.

use ndarray::{Array2, Array3, Axis, concatenate, s};

use lesson11::KvCache;
use lesson12::model::cached;
use lesson12::{Gpt2, ModelError, Monitor};
use reference::ForwardVersion;

use super::attend;

/// `B` sequences decoding together, one lesson 11 cache of `B` sequences per layer.
pub struct BatchSession<'a> {
    model: &'a Gpt2,
    attention: &'a ForwardVersion,
    caches: Vec<KvCache>,
    lens: Vec<usize>,
}

impl<'a> BatchSession<'a> {
    /// `sequences` empty sequences, room for `n_positions` tokens each.
    pub fn new(
        model: &'a Gpt2,
        attention: &'a ForwardVersion,
        sequences: usize,
    ) -> Result<Self, ModelError> {
        let caches = model.empty_caches(sequences)?;
        Ok(Self { model, attention, caches, lens: vec![0; sequences] })
    }

    /// Tokens sequence `seq` holds (0 for no such sequence).
    pub fn len(&self, seq: usize) -> usize {
        self.lens.get(seq).copied().unwrap_or(0)
    }

    /// Feeds `tokens[b]` to sequence `b` (none for an empty slice) and returns each
    /// sequence's logits `[n_b, V]`. Everything is checked before anything changes.
    pub fn feed(&mut self, tokens: &[&[u32]]) -> Result<Vec<Array2<f32>>, ModelError> {
        let model = self.model;
        check_one_slice_per_sequence(tokens.len(), self.lens.len())?;
        let fed: Vec<usize> = (0..tokens.len()).filter(|&b| !tokens[b].is_empty()).collect();
        for &b in &fed {
            model.config.check_tokens(tokens[b], self.lens[b])?;
        }
        // The new tokens of every fed sequence, one after another: rows[i] of x.
        let (mut rows, mut embedded, mut next) = (Vec::new(), Vec::new(), 0);
        for &b in &fed {
            rows.push(next..next + tokens[b].len());
            next += tokens[b].len();
            embedded.push(model.embed(tokens[b], self.lens[b])?);
        }
        if fed.is_empty() {
            return Ok(tokens
                .iter()
                .map(|_| Array2::zeros((0, model.config.vocab_size)))
                .collect());
        }
        let views: Vec<_> = embedded.iter().map(|e| e.view()).collect();
        let mut x = concatenate(Axis(0), &views).expect("rows of C channels");
        for (layer, (block, cache)) in model.blocks.iter().zip(&mut self.caches).enumerate() {
            let (q, k, v) = model.queries_keys_values(block, &x);
            let mut heads = Array3::zeros(q.dim());
            for (&b, span) in fed.iter().zip(&rows) {
                let part = s![.., span.clone(), ..];
                cache.append(b, k.slice(part), v.slice(part))?;
                let (keys, values) = cached(cache, b);
                let out = attend(self.attention, q.slice(part).to_owned(), keys, values, true)?;
                heads.slice_mut(part).assign(&out);
            }
            model.finish_block(block, layer, &mut x, heads, &mut Monitor::default());
        }
        let logits = model.head(&x).1;
        let mut out: Vec<Array2<f32>> =
            tokens.iter().map(|_| Array2::zeros((0, model.config.vocab_size))).collect();
        for (&b, span) in fed.iter().zip(&rows) {
            out[b] = logits.slice(s![span.clone(), ..]).to_owned();
            self.lens[b] += tokens[b].len();
        }
        Ok(out)
    }
}

/// An error unless a batch step brings one slice of tokens (maybe empty) for each of the
/// batch's `sequences`.
pub(super) fn check_one_slice_per_sequence(
    slices: usize,
    sequences: usize,
) -> Result<(), ModelError> {
    if slices == sequences {
        return Ok(());
    }
    Err(ModelError::input(
        "a batch step",
        format!("tokens for {slices} sequences"),
        format!("tokens for each of the batch's {sequences} sequences"),
    ))
}
