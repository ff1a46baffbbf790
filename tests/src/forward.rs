//! Checks shared by every exercise that implements the attention contract.

use std::rc::Rc;

use ndarray::{Array4, array};
use proptest::strategy::Strategy;
use reference::checks::{
    Forward, check_against_oracle, check_heads_independent, check_rejects_bad_inputs,
};
use reference::strategies::{Case, ShapeLimits, cases};
use reference::{AttentionOptions, AttentionOutput, Tolerance};

use crate::check::{Check, for_all};

/// Random cases per property check: enough to find the classic bugs in well under a second
/// of learner time per check (raise with `PROPTEST_CASES`).
pub const CASES: u32 = 48;

/// Shapes for graded checks: like the lessons' tests, a little smaller so grading is quick.
pub const LIMITS: ShapeLimits = ShapeLimits { batch: 2, heads: 3, seq: 160, head_dim: 96 };

/// A shared handle to the code under test.
pub type SharedForward = Rc<dyn Forward>;

/// Cases with ordinary logits and no spike, masked or not as `causal` says.
fn plain_cases(causal: bool) -> impl Strategy<Value = Case> {
    cases(LIMITS).prop_map(move |mut c| {
        c.spec = c.spec.causal(causal).logit_scale(1.0).spike(false);
        c
    })
}

/// The standard checks of the attention contract for `forward`, within the CPU's f32
/// tolerance.
pub fn forward_checks(forward: SharedForward) -> Vec<Check> {
    forward_checks_within(forward, Tolerance::F32)
}

/// The standard checks of the attention contract for `forward`, within `tolerance` of the
/// oracle (`Tolerance::F32_GPU` for the GPU exercises).
pub fn forward_checks_within(forward: SharedForward, tolerance: Tolerance) -> Vec<Check> {
    let f = forward.clone();
    let one_key = Check::new(
        "one key: O = V and L = the scaled score",
        "With one key its softmax weight is 1, so O must equal V and L the score q.k * scale. \
         Check the scale (1/sqrt(D) unless given) and that L = m + ln(l), not ln(l).",
        move || one_key(&*f),
    );
    let f = forward.clone();
    let two_keys = Check::new(
        "two keys weighted 1/4 and 3/4, default scale 1/sqrt(D)",
        "Scores 0 and ln 3 must give weights 1/4 and 3/4. Divide the scores by sqrt(D) \
         (here D = 4, so by 2) before the softmax.",
        move || two_keys(&*f),
    );
    let f = forward.clone();
    let random = Check::new(
        "random problems without a mask",
        "Compare your S, P and O with the formulas on a small failing shape; a wrong result on \
         Nq = 1 or Nkv = 1 often means a loop bound is off.",
        move || {
            for_all(CASES, plain_cases(false), |case| check_against_oracle(&*f, &case, tolerance))
        },
    );
    let f = forward.clone();
    let causal_square = Check::new(
        "causal mask, Nq = Nkv",
        "Query i sees keys 0..=i. Mask with -inf before the softmax (not after), and check the \
         first and last rows.",
        move || {
            let square = plain_cases(true).prop_map(|mut c| {
                c.spec.kv_len = c.spec.q_len;
                c
            });
            for_all(CASES, square, |case| check_against_oracle(&*f, &case, tolerance))
        },
    );
    let f = forward.clone();
    let causal_rect = Check::new(
        "causal mask, Nq != Nkv (bottom-right aligned)",
        "Query i sees key j iff j <= i + Nkv - Nq: the LAST query sees every key. When Nq > Nkv \
         the first rows see no key at all and must give O = 0, L = -inf (not NaN).",
        move || {
            let rectangular = plain_cases(true).prop_map(|mut c| {
                if c.spec.kv_len == c.spec.q_len {
                    c.spec.kv_len += 1;
                }
                c
            });
            for_all(CASES, rectangular, |case| check_against_oracle(&*f, &case, tolerance))
        },
    );
    let f = forward.clone();
    let large = Check::new(
        "large logits (inputs x100) and one-hot spikes stay finite and correct",
        "e^x overflows f32 above x = 88.7. Subtract each row's maximum before exp, and keep the \
         running maximum when you rescale.",
        move || {
            let extreme = cases(LIMITS).prop_map(|mut c| {
                c.spec = c.spec.logit_scale(100.0);
                c
            });
            for_all(CASES, extreme, |case| check_against_oracle(&*f, &case, tolerance))
        },
    );
    let f = forward.clone();
    let independent = Check::new(
        "every batch and head is computed on its own",
        "Index Q, K and V as [batch, head, seq, dim]. Mixing up the head and seq axes (the \
         [B, N, H, D] layout) or reusing one head's K for another fails here.",
        move || {
            let small = ShapeLimits { seq: 48, ..LIMITS };
            for_all(16, cases(small), |case| check_heads_independent(&*f, &case))
        },
    );
    let f = forward;
    let errors = Check::new(
        "bad input returns the right AttentionError",
        "Call AttentionShape::of(q, k, v)? and options.scale_for(D)? before any work, and \
         return their errors.",
        move || check_rejects_bad_inputs(&*f),
    );
    vec![one_key, two_keys, random, causal_square, causal_rect, large, independent, errors]
}

fn head(rows: ndarray::Array2<f32>) -> Array4<f32> {
    let (n, d) = rows.dim();
    rows.into_shape_with_order((1, 1, n, d)).expect("a contiguous 2-D array")
}

fn call(
    forward: &dyn Forward,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    o: &AttentionOptions,
) -> Result<AttentionOutput<f32>, String> {
    let out = forward(q, k, v, o).map_err(|e| format!("returned an error: {e}"))?;
    if out.o.dim() != q.dim() || out.lse.dim() != (q.dim().0, q.dim().1, q.dim().2) {
        return Err(format!(
            "returned O of shape {:?} and L of shape {:?}, expected {:?} and {:?}",
            out.o.shape(),
            out.lse.shape(),
            q.shape(),
            &q.shape()[..3]
        ));
    }
    Ok(out)
}

fn near(what: &str, got: f32, expected: f32) -> Result<(), String> {
    if (got - expected).abs() <= 1e-5 * (1.0 + expected.abs()) {
        Ok(())
    } else {
        Err(format!("{what} = {got}, expected {expected}"))
    }
}

fn one_key(forward: &dyn Forward) -> Result<(), String> {
    let (q, k, v) = (head(array![[1.0, 2.0]]), head(array![[3.0, -1.0]]), head(array![[5.0, 7.0]]));
    let out = call(forward, &q, &k, &v, &AttentionOptions::new().with_scale(0.5))?;
    near("O[0]", out.o[[0, 0, 0, 0]], 5.0)?;
    near("O[1]", out.o[[0, 0, 0, 1]], 7.0)?;
    // S = 0.5 * (1*3 + 2*(-1)) = 0.5
    near("L", out.lse[[0, 0, 0]], 0.5)
}

fn two_keys(forward: &dyn Forward) -> Result<(), String> {
    let q = head(array![[1.0, 0.0, 0.0, 0.0]]);
    let k = head(array![[0.0, 0.0, 0.0, 0.0], [2.0 * 3f32.ln(), 0.0, 0.0, 0.0]]);
    let v = head(array![[4.0, 0.0, 0.0, 0.0], [8.0, 0.0, 0.0, 0.0]]);
    let out = call(forward, &q, &k, &v, &AttentionOptions::new())?;
    near("O[0] (= 4/4 + 8*3/4)", out.o[[0, 0, 0, 0]], 7.0)?;
    near("L (= ln(1 + 3))", out.lse[[0, 0, 0]], 4f32.ln())
}
