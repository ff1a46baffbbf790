//! Checks shared by every exercise that implements the attention contract.

use std::rc::Rc;

use ndarray::{Array4, array};
use proptest::strategy::{BoxedStrategy, Strategy};
use reference::Forward;
use reference::{AttentionOptions, AttentionOutput, Tolerance};
use testkit::checks::{
    check_against_oracle, check_heads_independent, check_rejects_bad_inputs,
    check_rejects_non_finite_inputs, check_rejects_overflowing_logits,
};
use testkit::strategies::{Case, ShapeLimits, cases};

use crate::check::{Check, for_all};

/// Random cases per property check: enough to find the classic bugs in well under a second
/// of learner time per check (raise with `PROPTEST_CASES`).
pub const CASES: u32 = 48;

/// Shapes for graded checks: like the lessons' tests, a little smaller so grading is quick.
pub const LIMITS: ShapeLimits = ShapeLimits { batch: 2, heads: 3, seq: 160, head_dim: 96 };

/// A shared handle to the code under test.
pub type SharedForward = Rc<dyn Forward>;

// The names of the shared checks: the planted-bug mutants name the check meant to catch them.
/// Hand example: one key.
pub const ONE_KEY: &str = "one key: O = V and L = the scaled score";
/// Hand example: two keys and the default scale.
pub const TWO_KEYS: &str = "two keys weighted 1/4 and 3/4, default scale 1/sqrt(D)";
/// Random problems, no mask.
pub const RANDOM: &str = "random problems without a mask";
/// Causal, square.
pub const CAUSAL_SQUARE: &str = "causal mask, Nq = Nkv";
/// Causal, rectangular.
pub const CAUSAL_RECTANGULAR: &str = "causal mask, Nq != Nkv (bottom-right aligned)";
/// Logits x100 and spikes.
pub const LARGE_LOGITS: &str =
    "large logits (inputs x100) and one-hot spikes stay finite and correct";
/// Batches and heads independent.
pub const INDEPENDENT: &str = "every batch and head is computed on its own";
/// Bad shapes and scales.
pub const BAD_INPUT: &str = "bad shapes and scales return the right AttentionError";
/// NaN, infinities, overflowing logits.
pub const NON_FINITE: &str = "NaN, infinities and overflowing logits are errors, not outputs";

/// How an exercise's forward function is checked against the contract.
pub struct Contract {
    /// The code under test, as it runs the random cases.
    pub forward: SharedForward,
    /// The code under test with tiles that hold an `Nq x Nkv` example whole, for the hand
    /// examples (a tail tile there would make a tail bug look like a scale bug).
    pub whole_tiles: Rc<dyn Fn(usize, usize) -> SharedForward>,
    /// What the failures should say about the setup, e.g. `tiles Br = 7, Bc = 5`.
    pub setup: String,
    /// The error model's tolerance.
    pub tolerance: Tolerance,
}

impl Contract {
    /// An untiled forward function in f32.
    pub fn untiled(forward: SharedForward) -> Self {
        let whole = forward.clone();
        Self {
            forward,
            whole_tiles: Rc::new(move |_, _| whole.clone()),
            setup: String::new(),
            tolerance: Tolerance::F32,
        }
    }

    /// A tiled forward function: `with_tiles(br, bc)` runs the code with tiles `Br x Bc`; the
    /// random cases use `tiles`.
    pub fn tiled(
        tiles: (usize, usize),
        with_tiles: impl Fn(usize, usize) -> SharedForward + 'static,
    ) -> Self {
        let with_tiles = Rc::new(with_tiles);
        let forward = with_tiles(tiles.0, tiles.1);
        Self {
            forward,
            whole_tiles: with_tiles,
            setup: format!("tiles Br = {}, Bc = {}", tiles.0, tiles.1),
            tolerance: Tolerance::F32,
        }
    }

    /// `failure`, prefixed with the setup.
    fn says(&self, failure: String) -> String {
        if self.setup.is_empty() { failure } else { format!("with {}: {failure}", self.setup) }
    }
}

/// Cases with ordinary logits and no spike, masked or not as `causal` says.
fn plain_cases(causal: bool) -> impl Strategy<Value = Case> {
    cases(LIMITS).prop_map(move |mut c| {
        c.spec = c.spec.causal(causal).logit_scale(1.0).spike(false);
        c
    })
}

/// A check of the code under test against the oracle on cases drawn by `strategy`.
fn oracle_check(
    contract: &Rc<Contract>,
    name: &'static str,
    hint: &'static str,
    strategy: impl Fn() -> BoxedStrategy<Case> + 'static,
) -> Check {
    let c = contract.clone();
    Check::new(name, hint, move || {
        for_all(CASES, strategy(), |case| {
            check_against_oracle(&*c.forward, &case, c.tolerance).map_err(|e| c.says(e))
        })
    })
}

/// The standard checks of the attention contract.
pub fn forward_checks(contract: Contract) -> Vec<Check> {
    let contract = Rc::new(contract);
    let c = contract.clone();
    let one_key = Check::new(
        ONE_KEY,
        "With one key its softmax weight is 1, so O must equal V and L the score q.k * scale. \
         Check the scale (1/sqrt(D) unless given) and that L = m + ln(l), not ln(l).",
        move || one_key(&*(c.whole_tiles)(1, 1)),
    );
    let c = contract.clone();
    let two_keys = Check::new(
        TWO_KEYS,
        "Scores 0 and ln 3 must give weights 1/4 and 3/4. Divide the scores by sqrt(D) \
         (here D = 4, so by 2) before the softmax.",
        move || two_keys(&*(c.whole_tiles)(1, 2)),
    );
    let random = oracle_check(
        &contract,
        RANDOM,
        "Compare your S, P and O with the formulas on a small failing shape; a wrong result on \
         Nq = 1 or Nkv = 1 often means a loop bound is off, and one that needs several tiles \
         often means the running state is not carried (rescaled) from tile to tile.",
        || plain_cases(false).boxed(),
    );
    let causal_square = oracle_check(
        &contract,
        CAUSAL_SQUARE,
        "Query i sees keys 0..=i. Mask with -inf before the softmax (not after), and check the \
         first and last rows.",
        || {
            let square = |mut c: Case| {
                c.spec.kv_len = c.spec.q_len;
                c
            };
            plain_cases(true).prop_map(square).boxed()
        },
    );
    let causal_rectangular = oracle_check(
        &contract,
        CAUSAL_RECTANGULAR,
        "Query i sees key j iff j <= i + Nkv - Nq: the LAST query sees every key. When Nq > Nkv \
         the first rows see no key at all and must give O = 0, L = -inf (not NaN).",
        || {
            let rectangular = |mut c: Case| {
                if c.spec.kv_len == c.spec.q_len {
                    c.spec.kv_len += 1;
                }
                c
            };
            plain_cases(true).prop_map(rectangular).boxed()
        },
    );
    let large = oracle_check(
        &contract,
        LARGE_LOGITS,
        "e^x overflows f32 above x = 88.7. Subtract each row's maximum before exp, and keep the \
         running maximum when you rescale.",
        || {
            let extreme = |mut c: Case| {
                c.spec = c.spec.logit_scale(100.0);
                c
            };
            cases(LIMITS).prop_map(extreme).boxed()
        },
    );
    let c = contract.clone();
    let independent = Check::new(
        INDEPENDENT,
        "Index Q, K and V as [batch, head, seq, dim]. Mixing up the head and seq axes (the \
         [B, N, H, D] layout) or reusing one head's K for another fails here.",
        move || {
            let small = ShapeLimits { seq: 48, ..LIMITS };
            for_all(16, cases(small), |case| {
                check_heads_independent(&*c.forward, &case).map_err(|e| c.says(e))
            })
        },
    );
    let c = contract.clone();
    let bad_input = Check::new(
        BAD_INPUT,
        "Call check_inputs(q, k, v, options)? before any work (it checks the shapes and the \
         scale), and return its error.",
        move || check_rejects_bad_inputs(&*c.forward).map_err(|e| c.says(e)),
    );
    let c = contract;
    let non_finite = Check::new(
        NON_FINITE,
        "check_inputs(q, k, v, options)? also rejects NaN and infinities (naming the tensor and \
         the first bad element) and logits that would overflow f32. Computing with them instead \
         turns bad data into NaN or, worse, into an empty row (O = 0, L = -inf).",
        move || {
            check_rejects_non_finite_inputs(&*c.forward)
                .and_then(|()| check_rejects_overflowing_logits(&*c.forward))
                .map_err(|e| c.says(e))
        },
    );
    vec![
        one_key,
        two_keys,
        random,
        causal_square,
        causal_rectangular,
        large,
        independent,
        bad_input,
        non_finite,
    ]
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

/// `got` within f32's rounding of a hand-computed `expected` (both sides of these examples are
/// a few operations, so a few units of roundoff; NaN fails).
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
