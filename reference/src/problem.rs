//! Seeded random attention problems, so that every stage and every test can be handed the
//! same inputs.

use ndarray::{Array4, s};

use crate::{AttentionOptions, AttentionShape};

/// The sizes and flavour of a random attention problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProblemSpec {
    /// `B`
    pub batch: usize,
    /// `H`
    pub heads: usize,
    /// `Nq`
    pub q_len: usize,
    /// `Nkv`
    pub kv_len: usize,
    /// `D`
    pub head_dim: usize,
    /// Apply the causal mask.
    pub causal: bool,
    /// Q is multiplied by this, so every logit is too (1 = ordinary, 100 = nearly one-hot rows).
    pub logit_scale: f32,
    /// Plant one key per head that repeats a query, 8 times longer: that query's softmax row
    /// becomes (nearly) one-hot.
    pub spike: bool,
}

impl ProblemSpec {
    /// An ordinary, non-causal problem of this shape with unit-scale logits.
    pub fn new(batch: usize, heads: usize, q_len: usize, kv_len: usize, head_dim: usize) -> Self {
        Self {
            batch,
            heads,
            q_len,
            kv_len,
            head_dim,
            causal: false,
            logit_scale: 1.0,
            spike: false,
        }
    }

    /// The same problem with the causal mask switched on or off.
    pub fn causal(self, causal: bool) -> Self {
        Self { causal, ..self }
    }

    /// The same problem with every logit multiplied by `logit_scale`.
    pub fn logit_scale(self, logit_scale: f32) -> Self {
        Self { logit_scale, ..self }
    }

    /// The same problem with one one-hot spike per head.
    pub fn spike(self, spike: bool) -> Self {
        Self { spike, ..self }
    }

    /// The shape of the problem.
    pub fn shape(&self) -> AttentionShape {
        AttentionShape {
            batch: self.batch,
            heads: self.heads,
            q_len: self.q_len,
            kv_len: self.kv_len,
            head_dim: self.head_dim,
        }
    }
}

/// Inputs for one attention call.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// `[B, H, Nq, D]`
    pub q: Array4<f32>,
    /// `[B, H, Nkv, D]`
    pub k: Array4<f32>,
    /// `[B, H, Nkv, D]`
    pub v: Array4<f32>,
    /// Scale and mask.
    pub options: AttentionOptions,
}

impl Problem {
    /// Standard-normal Q, K and V drawn from `seed`, shaped and flavoured by `spec`.
    /// The same spec and seed always give the same problem.
    pub fn random(spec: &ProblemSpec, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let (b, h, nq, nkv, d) = (spec.batch, spec.heads, spec.q_len, spec.kv_len, spec.head_dim);
        let mut q = Array4::from_shape_simple_fn((b, h, nq, d), || rng.normal());
        let mut k = Array4::from_shape_simple_fn((b, h, nkv, d), || rng.normal());
        let v = Array4::from_shape_simple_fn((b, h, nkv, d), || rng.normal());
        if spec.spike && nq > 0 && nkv > 0 {
            for bi in 0..b {
                for hi in 0..h {
                    let (query, key) = (rng.below(nq), rng.below(nkv));
                    let spike = q.slice(s![bi, hi, query, ..]).mapv(|x| 8.0 * x);
                    k.slice_mut(s![bi, hi, key, ..]).assign(&spike);
                }
            }
        }
        q.mapv_inplace(|x| x * spec.logit_scale);
        let options = AttentionOptions { scale: None, causal: spec.causal };
        Self { q, k, v, options }
    }
}

/// A tiny, seedable pseudo-random generator (SplitMix64): enough for test inputs, and the same
/// sequence on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n >= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f64) as usize).min(n - 1)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // in (0, 1], so the log is finite
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_problem_other_seed_other_problem() {
        let spec = ProblemSpec::new(2, 3, 5, 7, 4);
        assert_eq!(Problem::random(&spec, 1), Problem::random(&spec, 1));
        assert_ne!(Problem::random(&spec, 1).q, Problem::random(&spec, 2).q);
    }

    #[test]
    fn shapes_follow_the_spec() {
        let p = Problem::random(&ProblemSpec::new(2, 3, 5, 7, 4).causal(true), 0);
        assert_eq!(p.q.dim(), (2, 3, 5, 4));
        assert_eq!(p.k.dim(), (2, 3, 7, 4));
        assert_eq!(p.v.dim(), (2, 3, 7, 4));
        assert!(p.options.causal);
    }

    #[test]
    fn normal_samples_have_unit_variance() {
        let mut rng = SplitMix64::new(7);
        let xs: Vec<f64> = (0..20_000).map(|_| f64::from(rng.normal())).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean}, var {var}");
    }

    #[test]
    fn logit_scale_multiplies_q_only() {
        let spec = ProblemSpec::new(1, 1, 3, 3, 2);
        let (a, b) = (Problem::random(&spec, 5), Problem::random(&spec.logit_scale(100.0), 5));
        assert_eq!(b.q, a.q.mapv(|x| x * 100.0));
        assert_eq!((b.k, b.v), (a.k, a.v));
    }

    #[test]
    fn empty_shapes_give_empty_tensors_not_a_panic() {
        let p = Problem::random(&ProblemSpec::new(1, 1, 0, 0, 4).spike(true), 3);
        assert_eq!((p.q.len(), p.k.len()), (0, 0));
    }

    #[test]
    fn spike_plants_a_scaled_copy_of_a_query_among_the_keys() {
        let p = Problem::random(&ProblemSpec::new(1, 1, 4, 6, 3).spike(true), 9);
        let found = (0..6)
            .any(|j| (0..4).any(|i| (0..3).all(|c| p.k[[0, 0, j, c]] == 8.0 * p.q[[0, 0, i, c]])));
        assert!(found);
    }
}
