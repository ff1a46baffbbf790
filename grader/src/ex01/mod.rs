//! Exercise 01: naive attention (the warm-up), then ALiBi and a logit softcap in it (the main
//! task).

pub mod mutants;
mod solution;

use std::rc::Rc;

use ndarray::{Array4, array};
use proptest::prelude::*;
use reference::{AttentionError, AttentionOptions, AttentionOutput, Feature, Features, Tolerance};
use testkit::strategies::{Case, cases};

use crate::check::{Check, for_all, main_task};
use crate::features::{FeatureForward, against_oracle, slopes, softcap};
use crate::forward::{CASES, Contract, LIMITS, forward_checks};

// The names of the main task's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const ALIBI_BY_HAND: &str = "ALiBi by hand: one query, three keys, slope ln 2";
/// Check name.
pub const SOFTCAP_BY_HAND: &str = "softcap by hand: c tanh(scale q.k / c)";
/// Check name.
pub const ALIBI_RANDOM: &str = "ALiBi on random problems: a slope per head, causal or not";
/// Check name.
pub const SOFTCAP_RANDOM: &str = "softcap on random problems, large logits included";
/// Check name.
pub const ALIBI_AND_SOFTCAP: &str = "ALiBi and softcap together: the cap first, then the bias";
/// Check name.
pub const FEATURE_ERRORS: &str =
    "bad features are errors: slopes per head, softcap, features not computed here";

crate::adapter::exercise_trait! {
    /// What a solution of exercise 01 provides. The hidden test binary implements it with the
    /// learner's `ex01::attention`; the self-check with `lesson01` and with planted-bug mutants.
    pub trait Exercise01;
    /// Naive attention following the course contract.
    fn attention(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
    /// Naive attention with ALiBi slopes and a logit softcap (the main task).
    fn attention_with_features(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &Features,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The graded checks of exercise 01: the warm-up's (the attention contract), then the main
/// task's.
pub fn checks(solution: impl Exercise01 + 'static) -> Vec<Check> {
    let solution = Rc::new(solution);
    let s = solution.clone();
    let mut checks =
        forward_checks(Contract::untiled(Rc::new(move |q: &_, k: &_, v: &_, o: &_| {
            s.attention(q, k, v, o)
        })));
    let s = solution;
    checks.extend(main_task(feature_checks(Rc::new(move |q: &_, k: &_, v: &_, o: &_, f: &_| {
        s.attention_with_features(q, k, v, o, f)
    }))));
    checks
}

/// The main task's checks.
fn feature_checks(forward: FeatureForward) -> Vec<Check> {
    let f = forward.clone();
    let alibi_by_hand = Check::new(
        ALIBI_BY_HAND,
        "The bias is -slope * |i + Nkv - Nq - j|: 0 on the row's diagonal (key i + Nkv - Nq, the \
         bottom-right alignment of the causal mask), more negative the farther the key. Here the \
         one query's diagonal is the LAST key, so the keys weigh 1/7, 2/7 and 4/7.",
        move || alibi_by_hand(&f),
    );
    let f = forward.clone();
    let softcap_by_hand = Check::new(
        SOFTCAP_BY_HAND,
        "Cap the scaled score: s = scale * q.k first, then c * tanh(s / c). Capping q.k before \
         the scale, or scaling after the cap, gives another number whenever scale != 1.",
        move || softcap_by_hand(&f),
    );
    let f = forward.clone();
    let alibi_random = Check::new(
        ALIBI_RANDOM,
        "Head h uses slopes[h], in every batch. Mask first (a masked key stays -inf whatever its \
         bias), and keep the row maximum of the biased scores for the softmax.",
        move || {
            let case_and_slopes = cases(LIMITS).prop_flat_map(|c| (Just(c), slopes(&c)));
            for_all(CASES, case_and_slopes, |(case, slopes)| {
                against_oracle(&f, &case, &Features::default().alibi(slopes), Tolerance::F32)
            })
        },
    );
    let f = forward.clone();
    let softcap_random = Check::new(
        SOFTCAP_RANDOM,
        "c * tanh(s / c) for every visible score, before the softmax; L is the logsumexp of the \
         capped scores. With logits x100 every capped score lies within (-c, c).",
        move || {
            for_all(CASES, (cases(LIMITS), softcap()), |(case, c)| {
                against_oracle(&f, &case, &Features::default().softcap(c), Tolerance::F32)
            })
        },
    );
    let f = forward.clone();
    let both = Check::new(
        ALIBI_AND_SOFTCAP,
        "FlashAttention-2's order: scale, then the softcap, then the ALiBi bias. Capping the \
         biased score would squeeze the bias into (-c, c) too.",
        move || {
            let case_and_slopes = cases(LIMITS).prop_flat_map(|c| (Just(c), slopes(&c)));
            for_all(CASES, (case_and_slopes, softcap()), |((case, slopes), c)| {
                let features = Features::default().alibi(slopes).softcap(c);
                against_oracle(&f, &case, &features, Tolerance::F32)
            })
        },
    );
    let f = forward;
    let errors = Check::new(
        FEATURE_ERRORS,
        "Call features.check_supported(&shape, &[Feature::Alibi, Feature::Softcap])? after \
         check_inputs: it refuses a wrong number of slopes, a softcap that is not a positive \
         number, and the features this exercise does not compute (a window, dropout).",
        move || feature_errors(&f),
    );
    vec![alibi_by_hand, softcap_by_hand, alibi_random, softcap_random, both, errors]
}

fn head(rows: ndarray::Array2<f32>) -> Array4<f32> {
    let (n, d) = rows.dim();
    rows.into_shape_with_order((1, 1, n, d)).expect("a contiguous 2-D array")
}

/// `got` within f32's rounding of a hand-computed `expected`.
fn near(what: &str, got: f32, expected: f64) -> Result<(), String> {
    if (f64::from(got) - expected).abs() <= 1e-5 * (1.0 + expected.abs()) {
        Ok(())
    } else {
        Err(format!("{what} = {got}, expected {expected}"))
    }
}

fn alibi_by_hand(forward: &FeatureForward) -> Result<(), String> {
    // Every q.k is 0, so the scores are the biases: -2 ln 2, -ln 2, 0 for keys 0, 1, 2 (the
    // one query's diagonal is key 2), weights 1/4 : 1/2 : 1 = 1/7, 2/7, 4/7.
    let (q, k) = (head(array![[0.0]]), head(array![[0.0], [0.0], [0.0]]));
    let v = head(array![[7.0], [14.0], [28.0]]);
    let features = Features::default().alibi(vec![std::f32::consts::LN_2]);
    let out = forward(&q, &k, &v, &AttentionOptions::new(), &features)
        .map_err(|e| format!("returned an error: {e}"))?;
    near("O (= 7/7 + 14 * 2/7 + 28 * 4/7)", out.o[[0, 0, 0, 0]], 21.0)?;
    near("L (= ln(1/4 + 1/2 + 1))", out.lse[[0, 0, 0]], 1.75f64.ln())
}

fn softcap_by_hand(forward: &FeatureForward) -> Result<(), String> {
    // Scale 1/2, cap 2. Key 1: q.k = 4 atanh(1/2), so s = 2 atanh(1/2) and the capped score is
    // 2 tanh(atanh(1/2)) = 1. Key 0 scores 0. Weights 1 : e.
    let x = 4.0 * 0.5f64.atanh();
    let (q, k) = (head(array![[1.0]]), head(array![[0.0], [x as f32]]));
    let v = head(array![[0.0], [3.0]]);
    let options = AttentionOptions::new().with_scale(0.5);
    let out = forward(&q, &k, &v, &options, &Features::default().softcap(2.0))
        .map_err(|e| format!("returned an error: {e}"))?;
    let e = std::f64::consts::E;
    near("O (= 3 e / (1 + e))", out.o[[0, 0, 0, 0]], 3.0 * e / (1.0 + e))?;
    near("L (= ln(1 + e))", out.lse[[0, 0, 0]], (1.0 + e).ln())
}

fn feature_errors(forward: &FeatureForward) -> Result<(), String> {
    let case = Case { spec: reference::ProblemSpec::new(1, 2, 3, 4, 2), seed: 1 };
    let p = case.problem();
    let refuses = |features: Features, feature: &str| -> Result<(), String> {
        match forward(&p.q, &p.k, &p.v, &p.options, &features) {
            Err(AttentionError::InvalidFeature { feature: f, .. }) if f == feature => Ok(()),
            Err(other) => Err(format!(
                "{features:?} gave the error \"{other}\", expected one about the {feature}"
            )),
            Ok(_) => Err(format!(
                "{features:?} on 2 heads returned a result, expected an error about the {feature}"
            )),
        }
    };
    refuses(Features::default().alibi(vec![0.5]), Feature::Alibi.name())?;
    refuses(Features::default().alibi(vec![0.5, 0.25, 0.125]), Feature::Alibi.name())?;
    refuses(Features::default().alibi(vec![0.5, f32::NAN]), Feature::Alibi.name())?;
    for c in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        refuses(Features::default().softcap(c), Feature::Softcap.name())?;
    }
    refuses(Features::default().window(Some(1), None), Feature::Window.name())?;
    refuses(Features::default().softcap(5.0).dropout(0.1, 7), Feature::Dropout.name())?;
    // The inputs are still checked first.
    let short_k = Array4::zeros((1, 2, 4, 3));
    match forward(&p.q, &short_k, &p.v, &p.options, &Features::default().softcap(5.0)) {
        Err(AttentionError::ShapeMismatch { .. }) => Ok(()),
        other => {
            Err(format!("K with head dim 3 against Q's 2 gave {other:?}, expected a ShapeMismatch"))
        }
    }
}

/// The reference solutions: the lesson's `attention` for the warm-up, and the main task's,
/// which lives in the grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        attention: Box::new(lesson01::attention),
        attention_with_features: Box::new(solution::attention_with_features),
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::NaiveBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::NaiveBug>(checks(lesson()), checks)
}
