//! The tiled backward pass against the f64 oracle's gradients (which are themselves checked
//! against central finite differences in the reference crate).

use lesson03::TileSizes;
use ndarray::Array4;
use proptest::prelude::*;
use reference::checks::{Backward, check_backward_against_oracle, random_d_o};
use reference::strategies::{ShapeLimits, cases, config, tile_size};
use reference::{AttentionError, AttentionOptions, AttentionOutput, Tolerance, oracle};

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
        check_backward_against_oracle(&with_tiles(tiles), &case, Tolerance::F32_CPU_GRADIENTS)
            .map_err(|e| TestCaseError::fail(format!("{tiles:?}: {e}")))?;
    }

    #[test]
    fn gradients_do_not_depend_on_tile_sizes(case in cases(ShapeLimits { seq: 100, ..ShapeLimits::CPU }), a in tiles(), b in tiles()) {
        let p = case.problem();
        let d_o = random_d_o(&case);
        let fwd = lesson03::attention(&p.q, &p.k, &p.v, &p.options, TileSizes::default()).unwrap();
        let ga = lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, a).unwrap();
        let gb = lesson05::backward(&p.q, &p.k, &p.v, &p.options, &fwd, &d_o, b).unwrap();
        let tol = Tolerance::F32_CPU_GRADIENTS.for_logits(2.0 * reference::checks::logit_bound(&p));
        for (name, x, y) in [("dQ", &ga.dq, &gb.dq), ("dK", &ga.dk, &gb.dk), ("dV", &ga.dv, &gb.dv)] {
            let c = reference::compare(name, x, &y.mapv(f64::from), tol).unwrap();
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
