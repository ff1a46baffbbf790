//! Proptest strategies shared by every stage's property tests.
//!
//! A generated [`Case`] is a small [`ProblemSpec`] plus a seed, so a failing case prints (and
//! shrinks) as a shape, not as thousands of numbers; [`Case::problem`] builds the tensors.

use proptest::prelude::*;
use proptest::test_runner::Config;

use reference::{Problem, ProblemSpec};

/// Upper bounds for generated shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeLimits {
    /// Largest `B`.
    pub batch: usize,
    /// Largest `H`.
    pub heads: usize,
    /// Largest `Nq` and `Nkv` (drawn independently).
    pub seq: usize,
    /// Largest `D`.
    pub head_dim: usize,
}

impl ShapeLimits {
    /// Shapes for the CPU stages: B up to 3, H up to 4, N up to 300, D up to 128.
    pub const CPU: Self = Self { batch: 3, heads: 4, seq: 300, head_dim: 128 };
    /// Shapes for the GPU stages: sized for lavapipe, the software GPU of CI (Mesa's Vulkan
    /// driver on the CPU), which must also compile a pipeline for every new head dim and tile
    /// size. N up to 200 still crosses several tiles of every size the kernels use.
    pub const GPU: Self = Self { batch: 2, heads: 3, seq: 200, head_dim: 128 };
}

/// One generated test case: the shape and flavour of a problem, and the seed of its values.
///
/// Its `Debug` form is one short line, `B=1 H=2 Nq=3 Nkv=5 D=4 causal logits x100 seed=7`,
/// because proptest prints it for every failing case.
#[derive(Clone, Copy, PartialEq)]
pub struct Case {
    /// Shape, mask, logit scale, spike.
    pub spec: ProblemSpec,
    /// Seed for [`Problem::random`].
    pub seed: u64,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.spec;
        write!(f, "B={} H={} Nq={} Nkv={} D={}", s.batch, s.heads, s.q_len, s.kv_len, s.head_dim)?;
        write!(f, "{}", if s.causal { " causal" } else { " not causal" })?;
        if s.logit_scale != 1.0 {
            write!(f, " logits x{}", s.logit_scale)?;
        }
        if s.spike {
            write!(f, " spike")?;
        }
        write!(f, " seed={}", self.seed)
    }
}

impl Case {
    /// The tensors of this case.
    pub fn problem(&self) -> Problem {
        Problem::random(&self.spec, self.seed)
    }
}

/// A sequence length: often tiny (1 and other edge sizes), sometimes up to `max`.
pub fn seq_len(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(1), 4 => 1..=17usize.min(max), 4 => 1..=max]
}

/// A head dimension: odd and tiny ones, the common 64 and 128, anything up to `max`.
pub fn head_dim(max: usize) -> impl Strategy<Value = usize> {
    let common: Vec<usize> = [64, 128].into_iter().filter(|&d| d <= max).collect();
    let common = if common.is_empty() { vec![max] } else { common };
    prop_oneof![3 => 1..=9usize.min(max), 2 => proptest::sample::select(common), 3 => 1..=max]
}

/// A logit scale: mostly ordinary (1), sometimes small, large, or the extreme x100.
pub fn logit_scale() -> impl Strategy<Value = f32> {
    prop_oneof![6 => Just(1.0f32), 1 => 0.01f32..1.0, 2 => 1.0f32..100.0, 2 => Just(100.0f32)]
}

// ANCHOR: cases
/// Random problems within `limits`: any `Nq` and `Nkv`, causal or not, scaled logits, spikes.
pub fn cases(limits: ShapeLimits) -> impl Strategy<Value = Case> {
    let shape = (
        1..=limits.batch,
        1..=limits.heads,
        seq_len(limits.seq),
        seq_len(limits.seq),
        head_dim(limits.head_dim),
    );
    let flavour = (any::<bool>(), logit_scale(), proptest::bool::weighted(0.2));
    (shape, flavour, any::<u64>()).prop_map(
        |((batch, heads, q_len, kv_len, head_dim), (causal, logit_scale, spike), seed)| Case {
            spec: ProblemSpec::new(batch, heads, q_len, kv_len, head_dim)
                .causal(causal)
                .logit_scale(logit_scale)
                .spike(spike),
            seed,
        },
    )
}
// ANCHOR_END: cases

/// A tile size: 1, small, anything up to `max`, or larger than any sequence here.
pub fn tile_size(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(1), 3 => 1..=16usize, 3 => 1..=max, 1 => max..=2 * max]
}

/// The proptest configuration for the course: `cases` cases unless the `PROPTEST_CASES`
/// environment variable asks for another number, and no regression files written into the
/// source tree (a failing case is printed, shrunk, with its seed). Shrinking may take up to
/// 4096 steps (proptest stops at 64 by default), so failures are reported at their smallest.
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(cases);
    Config { cases, failure_persistence: None, max_shrink_iters: 4096, ..Config::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_prints_as_one_short_line() {
        let spec = ProblemSpec::new(1, 2, 3, 5, 4).causal(true).logit_scale(100.0).spike(true);
        let case = Case { spec, seed: 7 };
        assert_eq!(format!("{case:?}"), "B=1 H=2 Nq=3 Nkv=5 D=4 causal logits x100 spike seed=7");
        let plain = Case { spec: ProblemSpec::new(1, 1, 1, 1, 1), seed: 0 };
        assert_eq!(format!("{plain:?}"), "B=1 H=1 Nq=1 Nkv=1 D=1 not causal seed=0");
    }
}
