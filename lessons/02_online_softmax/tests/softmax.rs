//! Properties of the softmax family and of the (m, l) merge.

use approx::assert_relative_eq;
use lesson02::{SoftmaxState, naive_softmax, online_softmax, safe_softmax};
use proptest::prelude::*;
use testkit::strategies::config;

/// Scores from ordinary to extreme (|x| up to 1e4), including -inf (masked keys).
fn score() -> impl Strategy<Value = f32> {
    prop_oneof![8 => -10.0f32..10.0, 2 => -1e4f32..1e4, 1 => Just(f32::NEG_INFINITY)]
}

fn scores() -> impl Strategy<Value = Vec<f32>> {
    proptest::collection::vec(score(), 0..200)
}

/// Softmax of `x` in f64, the oracle for this file.
fn softmax_f64(x: &[f32]) -> Vec<f64> {
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &xi| m.max(f64::from(xi)));
    if max == f64::NEG_INFINITY {
        return vec![0.0; x.len()];
    }
    let exps: Vec<f64> = x.iter().map(|&xi| (f64::from(xi) - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

fn assert_matches_f64(got: &[f32], x: &[f32]) -> Result<(), TestCaseError> {
    for (i, (&g, e)) in got.iter().zip(softmax_f64(x)).enumerate() {
        prop_assert!(
            (f64::from(g) - e).abs() <= 1e-6 + 1e-5 * e,
            "entry {i}: got {g}, expected {e}, input {x:?}"
        );
    }
    Ok(())
}

/// The state of `x` computed in f64, for comparing f32 states.
fn state_f64(x: &[f32]) -> (f64, f64) {
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &xi| m.max(f64::from(xi)));
    let sum = if max == f64::NEG_INFINITY {
        0.0
    } else {
        x.iter().map(|&xi| (f64::from(xi) - max).exp()).sum()
    };
    (max, sum)
}

fn assert_state_close(got: SoftmaxState, (max, sum): (f64, f64)) -> Result<(), TestCaseError> {
    prop_assert_eq!(f64::from(got.max), max);
    prop_assert!(
        (f64::from(got.sum) - sum).abs() <= 1e-5 * sum.max(1.0),
        "sum {} vs {}",
        got.sum,
        sum
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn safe_softmax_matches_f64(x in scores()) {
        assert_matches_f64(&safe_softmax(&x), &x)?;
    }

    #[test]
    fn online_softmax_matches_safe_softmax(x in scores()) {
        let (online, safe) = (online_softmax(&x), safe_softmax(&x));
        for (o, s) in online.iter().zip(&safe) {
            prop_assert!((o - s).abs() <= 1e-6 + 1e-5 * s.abs(), "{online:?} vs {safe:?}");
        }
        assert_matches_f64(&online, &x)?;
    }

    #[test]
    fn streaming_state_matches_f64(x in scores()) {
        assert_state_close(SoftmaxState::of(&x), state_f64(&x))?;
    }

    #[test]
    fn merging_two_halves_gives_the_state_of_the_whole(x in scores(), cut in any::<prop::sample::Index>()) {
        let cut = cut.index(x.len() + 1);
        let merged = SoftmaxState::of(&x[..cut]).merge(SoftmaxState::of(&x[cut..]));
        assert_state_close(merged, state_f64(&x))?;
    }

    #[test]
    fn merge_is_associative(a in scores(), b in scores(), c in scores()) {
        let (a, b, c) = (SoftmaxState::of(&a), SoftmaxState::of(&b), SoftmaxState::of(&c));
        let left = a.merge(b).merge(c);
        let right = a.merge(b.merge(c));
        prop_assert_eq!(left.max, right.max);
        prop_assert!((left.sum - right.sum).abs() <= 1e-6 * left.sum.max(1.0), "{left:?} vs {right:?}");
    }

    #[test]
    fn merge_is_commutative_exactly(a in scores(), b in scores()) {
        let (a, b) = (SoftmaxState::of(&a), SoftmaxState::of(&b));
        prop_assert_eq!(a.merge(b), b.merge(a));
    }

    #[test]
    fn empty_is_the_identity_exactly(a in scores()) {
        let a = SoftmaxState::of(&a);
        prop_assert_eq!(a.merge(SoftmaxState::EMPTY), a);
        prop_assert_eq!(SoftmaxState::EMPTY.merge(a), a);
    }

    #[test]
    fn softmax_sums_to_one_unless_everything_is_masked(x in scores()) {
        let sum: f32 = online_softmax(&x).iter().sum();
        if x.iter().all(|&xi| xi == f32::NEG_INFINITY) {
            prop_assert_eq!(sum, 0.0);
        } else {
            prop_assert!((sum - 1.0).abs() < 1e-5, "sum {sum}");
        }
    }

    #[test]
    fn softmax_ignores_a_constant_shift(x in proptest::collection::vec(-10.0f32..10.0, 1..50), shift in -50.0f32..50.0) {
        let shifted: Vec<f32> = x.iter().map(|xi| xi + shift).collect();
        for (a, b) in safe_softmax(&x).iter().zip(safe_softmax(&shifted)) {
            prop_assert!((a - b).abs() < 1e-5);
        }
    }
}

#[test]
fn naive_softmax_overflows_where_safe_softmax_does_not() {
    let x = [1000.0f32, 999.0, 998.0];
    assert!(naive_softmax(&x).iter().all(|p| p.is_nan()), "e^1000 = inf, inf/inf = NaN");
    let safe = safe_softmax(&x);
    assert!(safe.iter().all(|p| p.is_finite()));
    // e^0, e^-1, e^-2 normalised.
    let z = 1.0 + (-1f32).exp() + (-2f32).exp();
    assert_relative_eq!(safe[0], 1.0 / z, max_relative = 1e-6);
    assert_relative_eq!(safe[2], (-2f32).exp() / z, max_relative = 1e-6);
}

#[test]
fn naive_softmax_is_fine_on_small_inputs() {
    let p = naive_softmax(&[0.0, 2f32.ln()]);
    assert_relative_eq!(p[0], 1.0 / 3.0, max_relative = 1e-6);
    assert_relative_eq!(p[1], 2.0 / 3.0, max_relative = 1e-6);
}

#[test]
fn naive_softmax_underflows_to_nan_for_very_negative_inputs() {
    // e^-1000 = 0 for every entry: 0 / 0.
    assert!(naive_softmax(&[-1000.0, -1001.0]).iter().all(|p| p.is_nan()));
    assert!(safe_softmax(&[-1000.0, -1001.0]).iter().all(|p| p.is_finite()));
}

#[test]
fn push_rescales_the_old_sum_when_the_maximum_grows() {
    // After 0: m = 0, l = 1. After 2: m = 2, l = e^(0-2) + e^0.
    let state = SoftmaxState::EMPTY.push(0.0).push(2.0);
    assert_eq!(state.max, 2.0);
    assert_relative_eq!(state.sum, (-2f32).exp() + 1.0, max_relative = 1e-7);
    assert_relative_eq!(state.logsumexp(), (1f32 + 2f32.exp()).ln(), max_relative = 1e-6);
}

#[test]
fn the_empty_state_has_logsumexp_minus_infinity() {
    assert_eq!(SoftmaxState::EMPTY.logsumexp(), f32::NEG_INFINITY);
    assert_eq!(SoftmaxState::of(&[f32::NEG_INFINITY; 3]), SoftmaxState::EMPTY);
}
