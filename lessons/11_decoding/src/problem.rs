//! Seeded decoding problems, their caches, and the oracle's answer for them: what the tests,
//! the benchmark and the tour share.

use ndarray::{Array3, Array4, Axis, s};
use reference::problem::SplitMix64;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Expected, Tolerance, check_output,
};

use crate::{KvCache, PagedKvCache};

/// The shape of a decoding problem: `B` sequences of their own lengths, `Hq` query heads
/// sharing `Hkv` K/V heads, the last `Nq` tokens of each sequence as queries.
///
/// Its `Debug` form is one line, `B=2 Hq=4 Hkv=2 lens=[5, 9] Nq=1 D=8 causal seed=3`, as
/// proptest prints a failing case.
#[derive(Clone, PartialEq)]
pub struct DecodeSpec {
    /// Query heads `Hq`.
    pub q_heads: usize,
    /// K/V heads `Hkv` (divides `Hq`).
    pub kv_heads: usize,
    /// The tokens of each sequence: `B = lens.len()`.
    pub lens: Vec<usize>,
    /// `Nq`, the new tokens of each sequence (at most its length).
    pub q_len: usize,
    /// `D`
    pub head_dim: usize,
    /// The bottom-right causal mask among the new tokens.
    pub causal: bool,
    /// The seed of the values.
    pub seed: u64,
}

impl std::fmt::Debug for DecodeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self { q_heads, kv_heads, lens, q_len, head_dim, causal, seed } = self;
        let mask = if *causal { "causal" } else { "not causal" };
        write!(
            f,
            "B={} Hq={q_heads} Hkv={kv_heads} lens={lens:?} Nq={q_len} D={head_dim} {mask} seed={seed}",
            lens.len()
        )
    }
}

/// A decoding problem's values: the queries, and the keys and values of each sequence.
#[derive(Clone, Debug)]
pub struct DecodeProblem {
    /// What it is.
    pub spec: DecodeSpec,
    /// `[B, Hq, Nq, D]`
    pub q: Array4<f32>,
    /// Per sequence, `[Hkv, len, D]`.
    pub keys: Vec<Array3<f32>>,
    /// Per sequence, `[Hkv, len, D]`.
    pub values: Vec<Array3<f32>>,
    /// The softmax scale; `None` (as drawn) for the default `1/sqrt(D)`.
    pub scale: Option<f32>,
}

impl DecodeProblem {
    /// Standard normal values drawn from `spec.seed`.
    pub fn random(spec: &DecodeSpec) -> Self {
        let mut rng = SplitMix64::new(spec.seed);
        let mut normal =
            |dims: (usize, usize, usize)| Array3::from_shape_simple_fn(dims, || rng.normal());
        let (kv, d) = (spec.kv_heads, spec.head_dim);
        let keys: Vec<_> = spec.lens.iter().map(|&n| normal((kv, n, d))).collect();
        let values: Vec<_> = spec.lens.iter().map(|&n| normal((kv, n, d))).collect();
        let dims = (spec.lens.len(), spec.q_heads, spec.q_len, d);
        let q = Array4::from_shape_simple_fn(dims, || rng.normal());
        Self { spec: spec.clone(), q, keys, values, scale: None }
    }

    /// The options: the problem's scale, the spec's mask.
    pub fn options(&self) -> AttentionOptions {
        AttentionOptions { scale: self.scale, causal: self.spec.causal }
    }

    /// A contiguous cache holding every sequence, with `spare` slots left over in each.
    pub fn contiguous(&self, spare: usize) -> Result<KvCache, AttentionError> {
        let longest = self.spec.lens.iter().copied().max().unwrap_or(0);
        let mut cache = KvCache::new(
            self.spec.lens.len(),
            self.spec.kv_heads,
            longest + spare,
            self.spec.head_dim,
        )?;
        for (seq, (k, v)) in self.keys.iter().zip(&self.values).enumerate() {
            cache.append(seq, k.view(), v.view())?;
        }
        Ok(cache)
    }

    /// A paged cache with blocks of `block_size` tokens, filled by appending pieces of 1 to
    /// `2 * block_size` tokens to the sequences in turn, so that their blocks interleave in
    /// the pool. Every block of the pool is used or free: `spare` blocks are left over.
    pub fn paged(&self, block_size: usize, spare: usize) -> Result<PagedKvCache, AttentionError> {
        let blocks: usize = self.spec.lens.iter().map(|n| n.div_ceil(block_size)).sum();
        let (batch, kv, d) = (self.spec.lens.len(), self.spec.kv_heads, self.spec.head_dim);
        let mut cache = PagedKvCache::new(batch, kv, d, block_size, blocks + spare)?;
        let mut rng = SplitMix64::new(self.spec.seed ^ 0x5eed);
        let mut done = vec![0; batch];
        while done.iter().zip(&self.spec.lens).any(|(a, b)| a < b) {
            for (seq, done) in done.iter_mut().enumerate() {
                let left = self.spec.lens[seq] - *done;
                if left == 0 {
                    continue;
                }
                let n = (1 + rng.below(2 * block_size)).min(left);
                let piece = |x: &Array3<f32>| x.slice(s![.., *done..*done + n, ..]).to_owned();
                cache.append(
                    seq,
                    piece(&self.keys[seq]).view(),
                    piece(&self.values[seq]).view(),
                )?;
                *done += n;
            }
        }
        Ok(cache)
    }

    /// Checks `out` (`O [B, Hq, Nq, D]`, `L [B, Hq, Nq]`) against the f64 oracle for grouped
    /// heads, sequence by sequence (each has its own `Nkv`), with `tolerance`'s error model;
    /// `keys` and `values` may be given rounded (the storage format a kernel reads).
    pub fn check(&self, out: &AttentionOutput<f32>, tolerance: Tolerance) -> Result<(), String> {
        self.check_with(out, tolerance, &self.keys, &self.values)
    }

    /// [`DecodeProblem::check`] against the oracle on other keys and values (the same ones
    /// rounded to a kernel's storage format).
    pub fn check_with(
        &self,
        out: &AttentionOutput<f32>,
        tolerance: Tolerance,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<(), String> {
        self.check_against(out, tolerance, &self.expected_with(keys, values)?)
    }

    /// The oracle's answer for each sequence on `keys` and `values`, computed once for several
    /// checks ([`DecodeProblem::check_against`]).
    pub fn expected_with(
        &self,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<Vec<Expected>, String> {
        let one = |x: &Array3<f32>| x.view().insert_axis(Axis(0)).to_owned();
        (0..self.spec.lens.len())
            .map(|seq| {
                let q = self.q.slice(s![seq..seq + 1, .., .., ..]).to_owned();
                reference::grouped::expected(
                    &q,
                    &one(&keys[seq]),
                    &one(&values[seq]),
                    &self.options(),
                )
                .map_err(|e| e.to_string())
            })
            .collect()
    }

    /// Checks `out` against the oracle's answers `expected` (one per sequence).
    pub fn check_against(
        &self,
        out: &AttentionOutput<f32>,
        tolerance: Tolerance,
        expected: &[Expected],
    ) -> Result<(), String> {
        for (seq, expected) in expected.iter().enumerate() {
            let ours = AttentionOutput {
                o: out.o.slice(s![seq..seq + 1, .., .., ..]).to_owned(),
                lse: out.lse.slice(s![seq..seq + 1, .., ..]).to_owned(),
            };
            check_output(&ours, expected, tolerance).map_err(|e| format!("sequence {seq}: {e}"))?;
        }
        Ok(())
    }
}
