//! The tiled backward pass against the f64 oracle's gradients (which are themselves checked
//! against central finite differences in the reference crate).

use lesson03::TileSizes;
use ndarray::Array4;
use proptest::prelude::*;
use reference::Backward;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, NonFiniteValue, Problem, ProblemSpec,
    Tolerance, compare, oracle,
};
use testkit::checks::{check_backward_against_oracle, oracle_forward_in_f32, random_d_o};
use testkit::strategies::{Case, ShapeLimits, cases, config, tile_size};

fn with_tiles(tiles: TileSizes) -> impl Backward {
    move |q: &_, k: &_, v: &_, o: &_, fwd: &_, d_o: &_| {
        lesson05::backward(q, k, v, o, fwd, d_o, tiles)
    }
}

fn tiles() -> impl Strategy<Value = TileSizes> {
    (tile_size(200), tile_size(200)).prop_map(|(br, bc)| TileSizes::new(br, bc).unwrap())
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn gradients_match_the_oracle(case in cases(ShapeLimits { seq: 200, ..ShapeLimits::CPU }), tiles in tiles()) {
        check_backward_against_oracle(&with_tiles(tiles), &case, Tolerance::F32)
            .map_err(|e| TestCaseError::fail(format!("{tiles:?}: {e}")))?;
    }

    #[test]
    fn gradients_do_not_depend_on_tile_sizes(case in cases(ShapeLimits { seq: 100, ..ShapeLimits::CPU }), a in tiles(), b in tiles()) {
        let p = case.problem();
        let d_o = random_d_o(&case);
        let fwd = lesson03::attention(&p.q, &p.k, &p.v, &p.options, TileSizes::default()).unwrap();
        let ga = lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, a).unwrap();
        let gb = lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, b).unwrap();
        // Each may be off the oracle by its bound in opposite directions: twice the bound.
        let expected = oracle::expected_gradients(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
        let twice = Tolerance { factor: 2.0 * Tolerance::F32.factor, ..Tolerance::F32 };
        let allowed = twice.allowed_gradients(&expected);
        for (name, x, y, bound) in [("dQ", &ga.dq, &gb.dq, &allowed.dq), ("dK", &ga.dk, &gb.dk, &allowed.dk), ("dV", &ga.dv, &gb.dv, &allowed.dv)] {
            let c = compare(name, x, &y.mapv(f64::from), bound).unwrap();
            prop_assert!(c.passed(), "{:?} vs {:?}: {}", a, b, c);
        }
    }
}

#[test]
fn a_single_key_gets_all_the_value_gradient() {
    // One key: P = 1, so dV = sum of dO over the queries and dS = P (dP - D) = 0.
    let q = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 0.0, 0.0, 1.0]).unwrap();
    let k = Array4::from_shape_vec((1, 1, 1, 2), vec![0.5, -0.5]).unwrap();
    let v = Array4::from_shape_vec((1, 1, 1, 2), vec![2.0, 3.0]).unwrap();
    let d_o = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let opts = AttentionOptions::new();
    let fwd = lesson03::attention(&q, &k, &v, &opts, TileSizes::default()).unwrap();
    let g =
        lesson05::backward(&q, &k, &v, &opts, &fwd, &d_o, TileSizes::new(1, 1).unwrap()).unwrap();
    assert_eq!(g.dv.as_slice().unwrap(), &[4.0, 6.0]);
    assert!(g.dq.iter().chain(g.dk.iter()).all(|x| x.abs() < 1e-6));
}

#[test]
fn rows_that_see_no_key_get_no_gradient_and_no_nan() {
    // Nq = 3 > Nkv = 1, causal: rows 0 and 1 see nothing.
    let p = reference::Problem::random(&reference::ProblemSpec::new(1, 1, 3, 1, 2).causal(true), 4);
    let d_o = Array4::from_elem((1, 1, 3, 2), 1.0);
    let fwd = lesson03::attention(&p.q, &p.k, &p.v, &p.options, TileSizes::default()).unwrap();
    let g =
        lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, TileSizes::new(2, 1).unwrap())
            .unwrap();
    assert!(g.dq.iter().chain(&g.dk).chain(&g.dv).all(|x| x.is_finite()));
    assert_eq!(g.dq.slice(ndarray::s![0, 0, ..2, ..]).sum(), 0.0);
    let expected = oracle::attention_backward(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
    assert!((f64::from(g.dv[[0, 0, 0, 0]]) - expected.dv[[0, 0, 0, 0]]).abs() < 1e-6);
}

#[test]
fn bad_shapes_are_errors() {
    let x = Array4::<f32>::zeros((1, 2, 3, 4));
    let fwd = AttentionOutput::empty(
        &AttentionOptions::new()
            .scale_for(4)
            .map(|_| reference::AttentionShape::of(&x, &x, &x).unwrap())
            .unwrap(),
    );
    let opts = AttentionOptions::new();
    let tiles = TileSizes::default();
    let wrong_d_o = Array4::<f32>::zeros((1, 2, 3, 5));
    let err = lesson05::backward(&x, &x, &x, &opts, &fwd, &wrong_d_o, tiles).unwrap_err();
    assert!(
        matches!(err, AttentionError::ShapeMismatch { tensor: "dO", axis: "head_dim", .. }),
        "{err}"
    );
    let short_lse = AttentionOutput { o: fwd.o.clone(), lse: ndarray::Array3::zeros((1, 2, 2)) };
    let err = lesson05::backward(&x, &x, &x, &opts, &short_lse, &x, tiles).unwrap_err();
    assert_eq!(err.to_string().split(';').next().unwrap(), "L has seq = 2 but Q has seq = 3");
    let k = Array4::<f32>::zeros((1, 2, 3, 8));
    let err = lesson05::backward(&x, &k, &k, &opts, &fwd, &x, tiles).unwrap_err();
    assert!(
        matches!(err, AttentionError::ShapeMismatch { tensor: "K", axis: "head_dim", .. }),
        "{err}"
    );
}

#[test]
fn a_zero_gradient_from_cancellation_is_judged_by_the_size_of_its_terms() {
    // The case a fixed absolute bound failed (found by the grader on 2026-11-22): the one
    // visible key makes dS exactly 0, so dQ is 0 in exact arithmetic, and f32 leaves a
    // cancellation residue of about 1e-5 that the error model must accept.
    let spec = ProblemSpec::new(2, 2, 112, 1, 64).causal(true).logit_scale(0.01).spike(true);
    let case = Case { spec, seed: 7024244593342052581 };
    let backward = |q: &_, k: &_, v: &_, o: &_, fwd: &_, d_o: &_| {
        lesson05::backward(q, k, v, o, fwd, d_o, TileSizes::new(7, 5).unwrap())
    };
    check_backward_against_oracle(&backward, &case, Tolerance::F32).unwrap();
}

#[test]
fn bad_values_of_do_o_and_l_are_errors() {
    let p = Problem::random(&ProblemSpec::new(1, 2, 3, 2, 4).causal(true), 9);
    let forward = oracle_forward_in_f32(&p).unwrap();
    let d_o = Array4::<f32>::ones((1, 2, 3, 4));
    let tiles = TileSizes::new(2, 2).unwrap();
    let run = |fwd: &AttentionOutput<f32>, d_o: &Array4<f32>| {
        lesson05::backward(&p.q, &p.k, &p.v, &p.options, fwd, d_o, tiles).unwrap_err()
    };
    // Row 0 sees no key (Nq = 3 > Nkv = 2): its L is -inf; rows 1 and 2 see keys.
    let mut all_empty = forward.clone();
    all_empty.lse.fill(f32::NEG_INFINITY);
    assert_eq!(
        run(&all_empty, &d_o),
        AttentionError::InvalidLogsumexp {
            index: [0, 0, 1],
            value: f32::NEG_INFINITY,
            visible_keys: 1
        }
    );
    let mut nan_o = forward.clone();
    nan_o.o[[0, 1, 2, 3]] = f32::NAN;
    let value = NonFiniteValue::NaN;
    assert_eq!(
        run(&nan_o, &d_o),
        AttentionError::NonFinite { tensor: "O", index: vec![0, 1, 2, 3], value }
    );
    let mut inf_d_o = d_o.clone();
    inf_d_o[[0, 0, 1, 0]] = f32::INFINITY;
    let value = NonFiniteValue::PlusInfinity;
    assert_eq!(
        run(&forward, &inf_d_o),
        AttentionError::NonFinite { tensor: "dO", index: vec![0, 0, 1, 0], value }
    );
    let mut nan_k = p.clone();
    nan_k.k[[0, 0, 1, 1]] = f32::NAN;
    let err = lesson05::backward(&nan_k.q, &nan_k.k, &nan_k.v, &p.options, &forward, &d_o, tiles);
    assert!(matches!(err, Err(AttentionError::NonFinite { tensor: "K", .. })), "{err:?}");
}

#[test]
fn tiles_far_larger_than_the_problem_are_clamped_to_it() {
    let p = Problem::random(&ProblemSpec::new(1, 1, 6, 5, 3).causal(true), 2);
    let forward = oracle_forward_in_f32(&p).unwrap();
    let d_o = Array4::<f32>::ones((1, 1, 6, 3));
    let exact = TileSizes::new(6, 5).unwrap();
    let huge = TileSizes::new(64, usize::MAX).unwrap();
    let backward =
        |tiles| lesson05::backward(&p.q, &p.k, &p.v, &p.options, &forward, &d_o, tiles).unwrap();
    assert_eq!(backward(huge), backward(exact));
}
