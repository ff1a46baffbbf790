//! What the checks of the exercises' main tasks share: FlashAttention's features
//! ([`reference::features`]) drawn at random, and the comparison of an implementation with the
//! extended oracle.

use std::rc::Rc;

use ndarray::Array4;
use proptest::prelude::*;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, Features, Tolerance, check_output, features,
};
use testkit::strategies::Case;

/// Attention with features: `q, k, v, options, features -> O, L`.
pub type FeatureForward = Rc<
    dyn Fn(
        &Array4<f32>,
        &Array4<f32>,
        &Array4<f32>,
        &AttentionOptions,
        &Features,
    ) -> Result<AttentionOutput<f32>, AttentionError>,
>;

/// `forward` with `features` agrees with the extended f64 oracle on the case's problem, every
/// element of `O` and `L` within its bound of the error model.
pub fn against_oracle(
    forward: &FeatureForward,
    case: &Case,
    features: &Features,
    tolerance: Tolerance,
) -> Result<(), String> {
    let p = case.problem();
    let expected =
        features::expected(&p.q, &p.k, &p.v, &p.options, features).map_err(|e| e.to_string())?;
    let actual = forward(&p.q, &p.k, &p.v, &p.options, features)
        .map_err(|e| format!("returned an error: {e}"))?;
    if actual.o.dim() != p.q.dim() || actual.lse.dim() != expected.output.lse.dim() {
        return Err(format!(
            "returned O of shape {:?} and L of shape {:?}, expected {:?} and {:?}",
            actual.o.shape(),
            actual.lse.shape(),
            p.q.shape(),
            expected.output.lse.shape()
        ));
    }
    check_output(&actual, &expected, tolerance).map(|_| ())
}

/// An ALiBi slope: often the geometric slopes of the ALiBi paper's heads (`2^-1` to `2^-8`),
/// sometimes 0 (no bias), larger, or negative (allowed: the contract takes any finite slope
/// whose bias fits in f32).
pub fn slope() -> impl Strategy<Value = f32> {
    let geometric = (1..=8i32).prop_map(|k| 2f32.powi(-k));
    prop_oneof![4 => geometric, 1 => Just(0.0f32), 2 => 0.0f32..2.0, 1 => -1.0f32..0.0]
}

/// One slope per head of `case`.
pub fn slopes(case: &Case) -> impl Strategy<Value = Vec<f32>> + use<> {
    proptest::collection::vec(slope(), case.spec.heads)
}

/// A softcap: small enough to bend ordinary logits (Gemma 2 uses 50 on logits of a trained
/// model; random logits here are a few units, so smaller caps are needed to matter), or huge
/// (no visible effect).
pub fn softcap() -> impl Strategy<Value = f32> {
    prop_oneof![4 => 0.25f32..5.0, 2 => 5.0f32..50.0, 1 => Just(1e4f32)]
}
