//! Exercise 02: safe and online softmax, the (m, l) state and its merge, online attention.

pub mod mutants;

use std::rc::Rc;

use ndarray::Array4;
use proptest::prelude::*;
use reference::compare::Format;
use reference::{AttentionError, AttentionOptions, AttentionOutput};

use crate::check::{Check, for_all};
use crate::forward::{Contract, forward_checks};

/// A softmax state `(m, l)`: the running maximum and the sum of `e^(x - m)`.
pub type State = (f32, f32);

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const SAFE_SOFTMAX: &str = "safe softmax on ordinary, huge and masked scores";
/// Check name.
pub const SAFE_NEAR_1000: &str = "safe softmax does not overflow near 1000";
/// Check name.
pub const PUSH: &str = "push: the state (m, l) of a stream of scores";
/// Check name.
pub const MERGE: &str = "merge: two halves give the state of the whole";
/// Check name.
pub const MERGE_IDENTITY: &str =
    "merge: the empty state is an identity, and merging is commutative";
/// Check name.
pub const ONLINE_SOFTMAX: &str = "online softmax equals the softmax";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 02 provides (states are passed as `(max, sum)` pairs).
    pub trait Exercise02;
    /// Softmax with the maximum subtracted.
    fn safe_softmax(x: &[f32]) -> Vec<f32>;
    /// The state after one more score.
    fn push(state: State, x: f32) -> State;
    /// The state of two concatenated streams.
    fn merge(a: State, b: State) -> State;
    /// Softmax from a one-pass state, then one normalising pass.
    fn online_softmax(x: &[f32]) -> Vec<f32>;
    /// Online attention, one key at a time, following the course contract.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// Scores from ordinary to extreme, including `-inf` (masked keys).
fn scores() -> impl Strategy<Value = Vec<f32>> {
    let score = prop_oneof![8 => -10.0f32..10.0, 2 => -1e4f32..1e4, 1 => Just(f32::NEG_INFINITY)];
    proptest::collection::vec(score, 0..100)
}

/// Softmax in f64: the oracle of this exercise.
fn softmax_f64(x: &[f32]) -> Vec<f64> {
    let (max, sum) = state_f64(x);
    x.iter().map(|&xi| if sum > 0.0 { (f64::from(xi) - max).exp() / sum } else { 0.0 }).collect()
}

/// `(m, l)` of `x` in f64.
fn state_f64(x: &[f32]) -> (f64, f64) {
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &xi| m.max(f64::from(xi)));
    let sum = if max == f64::NEG_INFINITY {
        0.0
    } else {
        x.iter().map(|&xi| (f64::from(xi) - max).exp()).sum()
    };
    (max, sum)
}

/// The relative error an f32 sum `l` of `n` softmax terms may carry, with a safety factor of
/// 2: each of the `n` pushes (or merges) rounds an `exp` (within 2 units of roundoff), a
/// product and a sum, so `6 n` units bound it whatever the order, and a weight `e^(x - m) / l`
/// adds an `exp` and a division. A bug (no rescale, no maximum) is off by far more.
fn sum_error(n: usize) -> f64 {
    2.0 * Format::F32.unit * (6.0 * n as f64 + 4.0)
}

fn softmax_close(what: &str, got: &[f32], x: &[f32]) -> Result<(), String> {
    if got.len() != x.len() {
        return Err(format!("{what} returned {} weights for {} inputs", got.len(), x.len()));
    }
    for (i, (&g, e)) in got.iter().zip(softmax_f64(x)).enumerate() {
        // Relative to the weight, plus the rounding of x - m (a weight of e^-d is off by at
        // most d u e^-d <= u / e absolutely).
        let allowed = sum_error(x.len()) * e + 2.0 * Format::F32.unit;
        let close = (f64::from(g) - e).abs() <= allowed; // false for NaN
        if !close {
            return Err(format!("{what}: weight {i} is {g}, expected {e}"));
        }
    }
    Ok(())
}

fn state_close(
    what: &str,
    (max, sum): State,
    expected: (f64, f64),
    n: usize,
) -> Result<(), String> {
    let ok = f64::from(max) == expected.0
        && (f64::from(sum) - expected.1).abs() <= sum_error(n) * expected.1.max(1.0);
    if ok {
        Ok(())
    } else {
        Err(format!("{what} = (m {max}, l {sum}), expected (m {}, l {})", expected.0, expected.1))
    }
}

const EMPTY: State = (f32::NEG_INFINITY, 0.0);

/// The graded checks of exercise 02.
pub fn checks(solution: impl Exercise02 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let mut checks = Vec::new();
    let x = s.clone();
    checks.push(Check::new(
        SAFE_SOFTMAX,
        "Subtract the maximum before exp. A row of only -inf has no maximum to subtract: give \
         all-zero weights instead of NaN.",
        move || for_all(128, scores(), |v| softmax_close("safe_softmax", &x.safe_softmax(&v), &v)),
    ));
    let x = s.clone();
    checks.push(Check::new(
        SAFE_NEAR_1000,
        "e^1000 is inf in f32; e^(1000 - 1000) is 1.",
        move || {
            let v = [1000.0, 999.0, 998.0];
            softmax_close("safe_softmax", &x.safe_softmax(&v), &v)
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        PUSH,
        "When x raises the maximum from m to m', the old l was summed against m: multiply it by \
         e^(m - m'). Before any finite score, m = -inf; avoid e^(-inf - -inf) = NaN.",
        move || {
            for_all(128, scores(), |v| {
                let state = v.iter().fold(EMPTY, |st, &xi| x.push(st, xi));
                state_close(&format!("state of {v:?}"), state, state_f64(&v), v.len())
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        MERGE,
        "Rescale BOTH sides to the common maximum m = max(m_a, m_b): l = l_a e^(m_a - m) + l_b e^(m_b - m).",
        move || {
            for_all(128, (scores(), scores()), |(a, b)| {
                let state = |v: &[f32]| v.iter().fold(EMPTY, |st, &xi| x.push(st, xi));
                let whole: Vec<f32> = a.iter().chain(&b).copied().collect();
                state_close(&format!("merge of {a:?} and {b:?}"), x.merge(state(&a), state(&b)), state_f64(&whole), whole.len() + 2)
            })
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        MERGE_IDENTITY,
        "merge((-inf, 0), (-inf, 0)) must be (-inf, 0), not NaN: return early when both maxima \
         are -inf. Write the formula symmetrically.",
        move || {
            for_all(
                128,
                (any::<f32>(), 0.0f32..100.0, any::<f32>(), 0.0f32..100.0),
                |(ma, la, mb, lb)| {
                    let (a, b) = ((ma, la), (mb, lb));
                    if ma.is_nan() || mb.is_nan() || ma.is_infinite() || mb.is_infinite() {
                        return Ok(());
                    }
                    let (e, ab, ba) = (x.merge(EMPTY, EMPTY), x.merge(a, b), x.merge(b, a));
                    if e.0 != f32::NEG_INFINITY || e.1 != 0.0 {
                        return Err(format!("merge(empty, empty) = {e:?}, expected (-inf, 0)"));
                    }
                    if x.merge(a, EMPTY) != a || x.merge(EMPTY, a) != a {
                        return Err(format!("merge with the empty state changed {a:?}"));
                    }
                    if ab != ba {
                        Err(format!("merge(a, b) = {ab:?} but merge(b, a) = {ba:?}"))
                    } else {
                        Ok(())
                    }
                },
            )
        },
    ));
    let x = s.clone();
    checks.push(Check::new(
        ONLINE_SOFTMAX,
        "Pass 1 computes (m, l) with push; pass 2 divides e^(x - m) by l. A row of only -inf \
         gives zeros.",
        move || {
            for_all(128, scores(), |v| softmax_close("online_softmax", &x.online_softmax(&v), &v))
        },
    ));
    let x = s;
    checks.extend(forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
        x.attention(q, k, v, o)
    }))));
    checks
}

/// The lesson's implementation: the reference solution.
pub fn lesson() -> Functions {
    use lesson02::SoftmaxState;
    let state = |(max, sum): State| SoftmaxState { max, sum };
    let pair = |s: SoftmaxState| (s.max, s.sum);
    Functions {
        safe_softmax: Box::new(lesson02::safe_softmax),
        push: Box::new(move |s, x| pair(state(s).push(x))),
        merge: Box::new(move |a, b| pair(state(a).merge(state(b)))),
        online_softmax: Box::new(lesson02::online_softmax),
        attention: Box::new(lesson02::attention),
    }
}
