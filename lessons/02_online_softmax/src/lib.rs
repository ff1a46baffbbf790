//! # Lesson 02 — from softmax to online softmax
//!
//! Four ways to compute $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$:
//!
//! 1. [`naive_softmax`]: the formula as written. `e^x` overflows f32 once `x > 88.7`, and the
//!    result is `inf / inf = NaN`.
//! 2. [`safe_softmax`]: subtract the maximum `m` first. Three passes over `x`: max, sum,
//!    normalise.
//! 3. [`online_softmax`]: the max and the sum in **one** pass, by rescaling the running sum
//!    whenever the maximum grows ([`SoftmaxState::push`]), then normalise: two passes.
//! 4. [`SoftmaxState::merge`]: two partial states `(m, l)` of two halves of `x` combine into
//!    the state of all of `x`. The merge is associative and commutative with an identity, so
//!    the halves can be computed in any order, in tiles, in parallel: FlashAttention's core.
//!
//! [`attention`] applies the online idea to attention: every query row streams over the keys
//! once, keeping only `(m, l)` and an unnormalised output row, never a row of `S` or `P`.

use ndarray::{Array1, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

// ANCHOR: naive
/// `e^x_i / sum_j e^x_j` exactly as written. Overflows to `NaN` for inputs above about 88.
pub fn naive_softmax(x: &[f32]) -> Vec<f32> {
    let exps: Vec<f32> = x.iter().map(|&xi| xi.exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|&e| e / sum).collect()
}
// ANCHOR_END: naive

// ANCHOR: safe
/// Softmax with the maximum subtracted first: `e^(x_i - m) / sum_j e^(x_j - m)`.
/// Every exponent is `<= 0`, so nothing overflows. Three passes over `x`.
pub fn safe_softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &xi| m.max(xi)); // pass 1
    if max == f32::NEG_INFINITY {
        return vec![0.0; x.len()]; // nothing to attend to: every weight is zero
    }
    let sum: f32 = x.iter().map(|&xi| (xi - max).exp()).sum(); // pass 2
    x.iter().map(|&xi| (xi - max).exp() / sum).collect() // pass 3
}
// ANCHOR_END: safe

// ANCHOR: state
/// The running statistics of a softmax over a stream of scores:
/// the maximum `m` seen so far and `l = sum_j e^(x_j - m)`.
///
/// `logsumexp(x) = m + ln(l)`. The empty stream is `m = -inf, l = 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxState {
    /// `m`, the largest score seen so far (`-inf` if none).
    pub max: f32,
    /// `l`, the sum of `e^(x - m)` over the scores seen so far.
    pub sum: f32,
}

impl SoftmaxState {
    /// The state of no scores at all: the identity of [`SoftmaxState::merge`].
    pub const EMPTY: Self = Self { max: f32::NEG_INFINITY, sum: 0.0 };

    /// The state after one more score `x`.
    ///
    /// If `x` raises the maximum from `m` to `m'`, every term already in `l` was computed
    /// against the old maximum and is multiplied by `e^(m - m')` to bring it up to date.
    pub fn push(self, x: f32) -> Self {
        let max = self.max.max(x);
        if max == f32::NEG_INFINITY {
            return self; // only -inf so far; e^(-inf - (-inf)) would be NaN
        }
        Self { max, sum: self.sum * (self.max - max).exp() + (x - max).exp() }
    }

    /// The state of the concatenation of the streams behind `self` and `other`:
    ///
    /// $$ m = \max(m_a, m_b),\qquad l = l_a e^{m_a - m} + l_b e^{m_b - m} . $$
    pub fn merge(self, other: Self) -> Self {
        let max = self.max.max(other.max);
        if max == f32::NEG_INFINITY {
            return Self::EMPTY;
        }
        Self { max, sum: self.sum * (self.max - max).exp() + other.sum * (other.max - max).exp() }
    }

    /// The state of a whole slice, one [`push`](Self::push) at a time.
    pub fn of(x: &[f32]) -> Self {
        x.iter().fold(Self::EMPTY, |state, &xi| state.push(xi))
    }

    /// `ln sum_j e^(x_j) = m + ln(l)`; `-inf` for the empty stream.
    pub fn logsumexp(&self) -> f32 {
        self.max + self.sum.ln()
    }
}
// ANCHOR_END: state

// ANCHOR: online
/// Online softmax: the max and the sum in one pass ([`SoftmaxState::of`]), then normalise.
pub fn online_softmax(x: &[f32]) -> Vec<f32> {
    let state = SoftmaxState::of(x); // pass 1: m and l together
    if state.max == f32::NEG_INFINITY {
        return vec![0.0; x.len()];
    }
    x.iter().map(|&xi| (xi - state.max).exp() / state.sum).collect() // pass 2
}
// ANCHOR_END: online

// ANCHOR: attention
/// Online attention: each query row streams over its visible keys once, keeping the softmax
/// state `(m, l)` and the unnormalised output `acc = sum_j e^(s_j - m) v_j`, rescaled by
/// `e^(m_old - m_new)` whenever the maximum grows; `O = acc / l` at the end.
///
/// Memory per row: `D + 2` numbers, whatever `Nkv` is. It is FlashAttention with tiles of one
/// query and one key (lesson 03 makes the tiles bigger).
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    let mut out = AttentionOutput::empty(&shape);

    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for i in 0..shape.q_len {
                let query = q.slice(s![b, h, i, ..]);
                let mut state = SoftmaxState::EMPTY;
                let mut acc = Array1::<f32>::zeros(shape.head_dim);
                for j in 0..shape.visible_keys(i, options.causal) {
                    let score = scale * query.dot(&k.slice(s![b, h, j, ..]));
                    let new = state.push(score);
                    acc *= (state.max - new.max).exp(); // rescale to the new maximum
                    acc.scaled_add((score - new.max).exp(), &v.slice(s![b, h, j, ..]));
                    state = new;
                }
                if state.sum > 0.0 {
                    out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / state.sum));
                    out.lse[[b, h, i]] = state.logsumexp();
                }
            }
        }
    }
    Ok(out)
}
// ANCHOR_END: attention

/// This lesson's implementation, for the course's registry.
pub fn versions() -> Vec<reference::ForwardVersion> {
    use reference::{About, Device, ForwardVersion};
    let about = About::forward(
        "online, one key at a time",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "no S or P in memory: each row keeps a running max and sum, rescaled as keys arrive",
    );
    vec![ForwardVersion::new(about, attention)]
}
