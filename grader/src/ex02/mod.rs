//! Exercise 02: safe and online softmax, the (m, l) state and its merge, online attention (the
//! warm-up); attention over a range of keys and the merge of such partial results (the main
//! task, flash-decoding's combine step).

pub mod mutants;
mod solution;

use std::ops::Range;
use std::rc::Rc;

use ndarray::{Array3, Array4, array};
use proptest::prelude::*;
use reference::compare::Format;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Features, Tolerance, check_output, features,
    oracle,
};
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all, main_task};
use crate::forward::{CASES, Contract, LIMITS, forward_checks};

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
/// Check name.
pub const MERGE_PARTS_BY_HAND: &str = "merge by hand: parts with L = 0 and ln 3 weigh 1/4 and 3/4";
/// Check name.
pub const MERGE_EMPTY_PARTS: &str =
    "merge: a part that saw no key weighs 0; a row no part saw stays O = 0, L = -inf";
/// Check name.
pub const MERGE_LARGE_L: &str = "merge: parts whose L is near 1000, or far apart, stay finite";
/// Check name.
pub const PARTIAL: &str = "partial attention over a random range of keys, causal or not";
/// Check name.
pub const SPLIT_AND_MERGE: &str = "any split of the keys, merged, gives attention over all of them";
/// Check name.
pub const SPLIT_ERRORS: &str =
    "a range outside the keys, nothing to merge, parts of different shapes: errors";

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
    /// Attention over the keys `keys` only: `O` normalised over them and their logsumexp.
    fn partial_attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        keys: Range<usize>,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
    /// The result over all the keys of the parts, from their partial results.
    fn merge_partials(parts: &[AttentionOutput<f32>]) -> Result<AttentionOutput<f32>, AttentionError>;
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
    let x = s.clone();
    checks.extend(forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
        x.attention(q, k, v, o)
    }))));
    checks.extend(main_task(split_checks(s)));
    checks
}

/// The main task's checks: partial attention over a range of keys, and the merge.
fn split_checks(s: Rc<impl Exercise02 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let by_hand = Check::new(
        MERGE_PARTS_BY_HAND,
        "Each part's O is normalised over its own keys, and e^L is its total weight: \
         L = ln(e^L_a + e^L_b) and O = e^(L_a - L) O_a + e^(L_b - L) O_b. Adding or averaging \
         the O's ignores how much weight each part saw.",
        move || merge_by_hand(&*x),
    );
    let x = s.clone();
    let empty = Check::new(
        MERGE_EMPTY_PARTS,
        "A part with L = -inf saw no key: its weight e^(L_s - L) is 0, whatever its O. When every \
         part has L = -inf there is no maximum to subtract: leave O = 0 and L = -inf instead of \
         computing e^(-inf - -inf) = NaN.",
        move || merge_empty_parts(&*x),
    );
    let x = s.clone();
    let large = Check::new(
        MERGE_LARGE_L,
        "e^1000 overflows f32. Subtract the largest L first: L = m + ln(sum e^(L_s - m)), and the \
         weights e^(L_s - L) are then at most 1.",
        move || merge_large(&*x),
    );
    let x = s.clone();
    let partial = Check::new(
        PARTIAL,
        "Keep every key of the whole problem where it is: key j of the range is still key j, so \
         the causal mask (j <= i + Nkv - Nq) and everything else use the whole Nkv. A row that \
         sees none of the range's keys gives O = 0 and L = -inf.",
        move || {
            let strategy = cases(LIMITS).prop_flat_map(|c| (Just(c), key_range(&c)));
            for_all(CASES, strategy, |(case, keys)| check_partial(&*x, &case, keys))
        },
    );
    let x = s.clone();
    let split = Check::new(
        SPLIT_AND_MERGE,
        "Cut 0..Nkv into consecutive ranges (some may be empty), compute each part with \
         partial_attention and merge them: the result must be attention over every key. If \
         PARTIAL passes, the merge is what is off.",
        move || {
            let strategy = cases(LIMITS).prop_flat_map(|c| (Just(c), cut_points(&c)));
            for_all(CASES, strategy, |(case, cuts)| check_split(&*x, &case, &cuts))
        },
    );
    let x = s;
    let errors = Check::new(
        SPLIT_ERRORS,
        "Call check_inputs then check_key_range(&shape, &keys)? in partial_attention, and \
         check_parts(parts)? in merge_partials: they return the errors, and nothing panics.",
        move || split_errors(&*x),
    );
    vec![by_hand, large, empty, partial, split, errors]
}

/// A range of the case's keys: often the whole, a prefix, a suffix or a middle; sometimes
/// empty.
fn key_range(case: &Case) -> impl Strategy<Value = Range<usize>> + use<> {
    let n = case.spec.kv_len;
    (0..=n, 0..=n).prop_map(|(a, b)| a.min(b)..a.max(b))
}

/// Up to 5 cut points within `0..=Nkv`, sorted (repeats give empty parts).
fn cut_points(case: &Case) -> impl Strategy<Value = Vec<usize>> + use<> {
    proptest::collection::vec(0..=case.spec.kv_len, 0..5).prop_map(|mut cuts| {
        cuts.sort_unstable();
        cuts
    })
}

fn head_output(o: ndarray::Array2<f32>, lse: Vec<f32>) -> AttentionOutput<f32> {
    let (n, d) = o.dim();
    let o = o.into_shape_with_order((1, 1, n, d)).expect("contiguous");
    let lse = Array3::from_shape_vec((1, 1, n), lse).expect("one L per row");
    AttentionOutput { o, lse }
}

fn merged(
    s: &impl Exercise02,
    parts: &[AttentionOutput<f32>],
) -> Result<AttentionOutput<f32>, String> {
    s.merge_partials(parts).map_err(|e| format!("merge_partials returned an error: {e}"))
}

/// `got` within a few f32 roundings of `expected` (hand examples: a few operations each).
fn near(what: &str, got: f32, expected: f64) -> Result<(), String> {
    let close = if expected == f64::NEG_INFINITY {
        got == f32::NEG_INFINITY
    } else {
        (f64::from(got) - expected).abs() <= 1e-5 * (1.0 + expected.abs())
    };
    if close { Ok(()) } else { Err(format!("{what} = {got}, expected {expected}")) }
}

fn merge_by_hand(s: &impl Exercise02) -> Result<(), String> {
    // Part a saw total weight e^0 = 1, part b e^(ln 3) = 3: O = (1 O_a + 3 O_b) / 4.
    let a = head_output(array![[2.0, 0.0]], vec![0.0]);
    let b = head_output(array![[6.0, 4.0]], vec![3f32.ln()]);
    let out = merged(s, &[a, b])?;
    near("O[0] (= 2/4 + 6 * 3/4)", out.o[[0, 0, 0, 0]], 5.0)?;
    near("O[1] (= 0/4 + 4 * 3/4)", out.o[[0, 0, 0, 1]], 3.0)?;
    near("L (= ln(1 + 3))", out.lse[[0, 0, 0]], 4f64.ln())
}

fn merge_empty_parts(s: &impl Exercise02) -> Result<(), String> {
    let inf = f32::NEG_INFINITY;
    // Row 0: only part b saw keys. Row 1: no part did (an empty part's O is 0 by contract;
    // part a's row 0 holds garbage to show that its weight, not its O, must make it vanish).
    let a = head_output(array![[7.0], [0.0]], vec![inf, inf]);
    let b = head_output(array![[3.0], [0.0]], vec![1.5, inf]);
    for (order, parts) in [("a, b", [a.clone(), b.clone()]), ("b, a", [b, a])] {
        let out = merged(s, &parts)?;
        near(&format!("merging {order}: O of row 0"), out.o[[0, 0, 0, 0]], 3.0)?;
        near(&format!("merging {order}: L of row 0"), out.lse[[0, 0, 0]], 1.5)?;
        near(&format!("merging {order}: O of the row no part saw"), out.o[[0, 0, 1, 0]], 0.0)?;
        near(
            &format!("merging {order}: L of the row no part saw"),
            out.lse[[0, 0, 1]],
            f64::NEG_INFINITY,
        )?;
    }
    Ok(())
}

fn merge_large(s: &impl Exercise02) -> Result<(), String> {
    // L near 1000: weights 1/4 and 3/4 as by hand. An f32 L near 1000 carries a rounding error
    // of up to 1000 u, which a weight e^(L_s - L) turns into a relative error of that size:
    // allow 4 such errors on the larger value, 6 (a correct merge is off by about 1e-4 here;
    // one that overflows gives inf or NaN).
    let a = head_output(array![[2.0]], vec![1000.0]);
    let b = head_output(array![[6.0]], vec![1000.0 + 3f32.ln()]);
    let out = merged(s, &[a, b])?;
    let allowed = 4.0 * Format::F32.unit * 1000.0 * 6.0;
    let o = out.o[[0, 0, 0, 0]];
    let close = (f64::from(o) - 5.0).abs() <= allowed; // false for NaN
    if !close {
        return Err(format!(
            "O of parts with L = 1000 and 1000 + ln 3 = {o}, expected 5 (within {allowed:.1e})"
        ));
    }
    near("L of parts with L = 1000 and 1000 + ln 3", out.lse[[0, 0, 0]], 1000.0 + 4f64.ln())?;
    // Far apart: the part with L = -1000 weighs e^-2000 = 0.
    let a = head_output(array![[2.0]], vec![-1000.0]);
    let b = head_output(array![[6.0]], vec![1000.0]);
    let out = merged(s, &[a, b])?;
    near("O of parts with L = -1000 and 1000", out.o[[0, 0, 0, 0]], 6.0)?;
    near("L of parts with L = -1000 and 1000", out.lse[[0, 0, 0]], 1000.0)
}

fn check_partial(s: &impl Exercise02, case: &Case, keys: Range<usize>) -> Result<(), String> {
    let p = case.problem();
    let none = Features::default();
    let expected = features::expected_partial(&p.q, &p.k, &p.v, &p.options, &none, keys.clone())
        .map_err(|e| e.to_string())?;
    let actual = s
        .partial_attention(&p.q, &p.k, &p.v, &p.options, keys.clone())
        .map_err(|e| format!("keys {keys:?}: returned an error: {e}"))?;
    check_output(&actual, &expected, Tolerance::F32)
        .map(|_| ())
        .map_err(|e| format!("keys {keys:?}: {e}"))
}

fn check_split(s: &impl Exercise02, case: &Case, cuts: &[usize]) -> Result<(), String> {
    let p = case.problem();
    let bounds: Vec<usize> =
        std::iter::once(0).chain(cuts.iter().copied()).chain([p.k.dim().2]).collect();
    let ranges: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let parts = ranges
        .iter()
        .map(|keys| s.partial_attention(&p.q, &p.k, &p.v, &p.options, keys.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("partial_attention returned an error: {e}"))?;
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let out = merged(s, &parts)?;
    check_output(&out, &expected, Tolerance::F32)
        .map(|_| ())
        .map_err(|e| format!("keys split as {ranges:?}: {e}"))
}

fn split_errors(s: &impl Exercise02) -> Result<(), String> {
    let p = Case { spec: reference::ProblemSpec::new(1, 2, 3, 4, 2), seed: 1 }.problem();
    #[allow(clippy::reversed_empty_ranges)]
    for keys in [0..5, 3..9, 3..2] {
        match s.partial_attention(&p.q, &p.k, &p.v, &p.options, keys.clone()) {
            Err(AttentionError::InvalidFeature { feature: "split keys", .. }) => {}
            Err(other) => {
                return Err(format!(
                    "keys {keys:?} of 4 gave \"{other}\", expected an error about the split keys"
                ));
            }
            Ok(_) => return Err(format!("keys {keys:?} of 4 gave a result, expected an error")),
        }
    }
    let short_k = Array4::zeros((1, 2, 4, 3));
    if !matches!(
        s.partial_attention(&p.q, &short_k, &p.v, &p.options, 0..4),
        Err(AttentionError::ShapeMismatch { .. })
    ) {
        return Err("K with head dim 3 against Q's 2 did not give a ShapeMismatch".into());
    }
    match s.merge_partials(&[]) {
        Err(AttentionError::InvalidFeature { feature: "merge", .. }) => {}
        other => {
            return Err(format!(
                "merging no parts gave {other:?}, expected an error about the merge"
            ));
        }
    }
    let whole = oracle::attention(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?;
    let two_rows = |x: &Array4<f64>| x.slice(ndarray::s![.., .., ..2, ..]).mapv(|v| v as f32);
    let small = AttentionOutput {
        o: two_rows(&whole.o),
        lse: whole.lse.slice(ndarray::s![.., .., ..2]).mapv(|v| v as f32),
    };
    let full = AttentionOutput { o: whole.o.mapv(|v| v as f32), lse: whole.lse.mapv(|v| v as f32) };
    match s.merge_partials(&[full.clone(), small]) {
        Err(AttentionError::ShapeMismatch { .. }) => {}
        Err(other) => {
            return Err(format!(
                "parts of 3 and 2 rows gave \"{other}\", expected a ShapeMismatch"
            ));
        }
        Ok(_) => return Err("parts of 3 and 2 rows were merged, expected a ShapeMismatch".into()),
    }
    let wrong_lse = AttentionOutput { o: full.o.clone(), lse: Array3::zeros((1, 2, 2)) };
    match s.merge_partials(&[full, wrong_lse]) {
        Err(AttentionError::ShapeMismatch { .. }) => Ok(()),
        Err(other) => Err(format!(
            "a part whose L has 2 rows for 3 rows of O gave \"{other}\", expected a ShapeMismatch"
        )),
        Ok(_) => {
            Err("a part whose L has 2 rows for 3 rows of O was merged, expected a ShapeMismatch"
                .into())
        }
    }
}

/// The reference solutions: the lesson's functions for the warm-up, and the main task's, which
/// live in the grader (the book explains the idea without printing it).
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
        partial_attention: Box::new(solution::partial_attention),
        merge_partials: Box::new(solution::merge_partials),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::OnlineBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::OnlineBug>(checks(lesson()), checks)
}
