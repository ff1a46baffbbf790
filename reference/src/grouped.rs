//! The oracle for grouped-query and multi-query attention (GQA, MQA): fewer K/V heads than
//! query heads, each K/V head shared by a group of consecutive query heads.
//!
//! With `Hq` query heads and `Hkv` K/V heads (`Hkv` divides `Hq`), query head `h` reads K/V
//! head
//!
//! $$ g(h) = \left\lfloor \frac{h}{G} \right\rfloor, \qquad G = \frac{H_q}{H_{kv}} , $$
//!
//! so heads `0..G` share K/V head 0, heads `G..2G` K/V head 1, and so on (the layout of
//! PyTorch's `enable_gqa`, Hugging Face's `repeat_kv` and FlashAttention-2). Multi-query
//! attention is `Hkv = 1`; ordinary multi-head attention is `Hkv = Hq`.
//!
//! The oracle is the definition made literal: repeat every K/V head `G` times
//! ([`expand_kv_heads`]) and run the ordinary oracle. Decoding kernels never make that copy
//! (it is the memory GQA exists to save), so this is the answer they are held to.

use ndarray::{Array4, Axis};

use crate::oracle::{self, Expected};
use crate::{AttentionError, AttentionOptions, AttentionOutput};

/// How query heads map onto K/V heads: `Hq` query heads in groups of `G = Hq / Hkv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadGroups {
    q_heads: usize,
    kv_heads: usize,
}

impl HeadGroups {
    /// `q_heads` query heads sharing `kv_heads` K/V heads; an error unless both are at least 1
    /// and `kv_heads` divides `q_heads`.
    pub fn new(q_heads: usize, kv_heads: usize) -> Result<Self, AttentionError> {
        if q_heads == 0 || kv_heads == 0 || !q_heads.is_multiple_of(kv_heads) {
            return Err(AttentionError::InvalidFeature {
                feature: "grouped heads",
                found: format!("{q_heads} query heads and {kv_heads} K/V heads"),
                expected: "at least one K/V head, and a number of K/V heads that divides the \
                           number of query heads"
                    .to_string(),
            });
        }
        Ok(Self { q_heads, kv_heads })
    }

    /// `Hq`
    pub fn q_heads(&self) -> usize {
        self.q_heads
    }

    /// `Hkv`
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// `G = Hq / Hkv`, the query heads that share one K/V head.
    pub fn group_size(&self) -> usize {
        self.q_heads / self.kv_heads
    }

    // ANCHOR: kv_head
    /// The K/V head that query head `q_head` reads: `q_head / G`.
    pub fn kv_head(&self, q_head: usize) -> usize {
        q_head / self.group_size()
    }
    // ANCHOR_END: kv_head
}

/// `kv [B, Hkv, N, D]` with every head repeated `G` times, `[B, Hq, N, D]`: head `h` of the
/// result is head `h / G` of `kv`. An error if `Hkv` does not divide `q_heads`.
pub fn expand_kv_heads(kv: &Array4<f32>, q_heads: usize) -> Result<Array4<f32>, AttentionError> {
    let groups = HeadGroups::new(q_heads, kv.dim().1)?;
    let heads: Vec<_> = (0..q_heads)
        .map(|h| kv.index_axis(Axis(1), groups.kv_head(h)).insert_axis(Axis(1)))
        .collect();
    Ok(ndarray::concatenate(Axis(1), &heads).expect("every head has the same shape"))
}

/// Attention in f64 with grouped heads: `q [B,Hq,Nq,D]`, `k` and `v [B,Hkv,Nkv,D]`. Otherwise
/// the contract of [`crate::contract`] (scale, bottom-right causal mask, `O` and `L`).
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f64>, AttentionError> {
    let (k, v) = expand(q, k, v)?;
    oracle::attention(q, &k, &v, options)
}

/// [`attention`] with the term sizes the error model needs ([`Expected`]).
pub fn expected(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<Expected, AttentionError> {
    let (k, v) = expand(q, k, v)?;
    oracle::expected(q, &k, &v, options)
}

/// K and V expanded to Q's heads, after checking that K and V have the same heads.
fn expand(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
) -> Result<(Array4<f32>, Array4<f32>), AttentionError> {
    crate::contract::check_same_shape("V", v, "K", k)?;
    Ok((expand_kv_heads(k, q.dim().1)?, expand_kv_heads(v, q.dim().1)?))
}

#[cfg(test)]
mod tests {
    use ndarray::s;

    use super::*;
    use crate::{Problem, ProblemSpec};

    #[test]
    fn heads_map_onto_groups_in_order() {
        let groups = HeadGroups::new(8, 2).unwrap();
        let mapped: Vec<usize> = (0..8).map(|h| groups.kv_head(h)).collect();
        assert_eq!(mapped, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(HeadGroups::new(4, 1).unwrap().kv_head(3), 0); // MQA
        assert_eq!(HeadGroups::new(4, 4).unwrap().kv_head(3), 3); // MHA
    }

    #[test]
    fn groups_that_do_not_divide_are_errors() {
        for (q, kv) in [(6, 4), (4, 8), (0, 1), (4, 0)] {
            let err = HeadGroups::new(q, kv).unwrap_err().to_string();
            assert!(err.contains(&format!("{q} query heads and {kv} K/V heads")), "{err}");
        }
    }

    /// By hand: query heads 0 and 1 share K/V head 0, so their answers are the ordinary
    /// oracle's on that one head; query heads 2 and 3 use head 1.
    #[test]
    fn each_query_head_attends_to_its_groups_keys() {
        let p = Problem::random(&ProblemSpec::new(2, 4, 3, 5, 4), 1);
        let k = p.k.slice(s![.., 0..2, .., ..]).to_owned();
        let v = p.v.slice(s![.., 0..2, .., ..]).to_owned();
        let grouped = attention(&p.q, &k, &v, &p.options).unwrap();
        for h in 0..4 {
            let one =
                |x: &Array4<f32>, head: usize| x.slice(s![.., head..head + 1, .., ..]).to_owned();
            let plain =
                oracle::attention(&one(&p.q, h), &one(&k, h / 2), &one(&v, h / 2), &p.options)
                    .unwrap();
            assert_eq!(grouped.o.slice(s![.., h..h + 1, .., ..]), plain.o);
            assert_eq!(grouped.lse.slice(s![.., h..h + 1, ..]), plain.lse);
        }
    }

    #[test]
    fn mismatched_or_indivisible_heads_are_errors() {
        let p = Problem::random(&ProblemSpec::new(1, 6, 2, 3, 4), 2);
        let k = p.k.slice(s![.., 0..4, .., ..]).to_owned();
        let err = attention(&p.q, &k, &k, &p.options).unwrap_err().to_string();
        assert!(err.contains("6 query heads and 4 K/V heads"), "{err}");
        let v = p.v.slice(s![.., 0..3, .., ..]).to_owned();
        let k = p.k.slice(s![.., 0..2, .., ..]).to_owned();
        assert!(matches!(
            attention(&p.q, &k, &v, &p.options),
            Err(AttentionError::ShapeMismatch { .. })
        ));
    }
}
