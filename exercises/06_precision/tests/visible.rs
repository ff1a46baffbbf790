//! Small examples you can check by hand: `cargo test -p ex06 --test visible`.

use ex06::{attention, dispatch};
use half::f16;
use lesson06::policy::Tensor;
use lesson06::round_to;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions};

#[test]
fn equal_scores_average_the_values_in_f16() {
    let q = Array4::from_elem((1, 1, 1, 2), f16::from_f32(0.0));
    let k = Array4::from_elem((1, 1, 4, 2), f16::from_f32(1.0));
    let v = Array4::from_shape_fn((1, 1, 4, 2), |(_, _, j, _)| f16::from_f32(j as f32)); // 0, 1, 2, 3
    let out = attention(&q, &k, &v, &AttentionOptions::new()).unwrap();
    assert_eq!(out.o[[0, 0, 0, 0]].to_f32(), 1.5);
    assert!((out.lse[[0, 0, 0]] - 4f32.ln()).abs() < 1e-6, "L stays f32: {}", out.lse[[0, 0, 0]]);
}

#[test]
fn mixing_formats_is_an_error() {
    let z = Array4::<f32>::zeros((1, 1, 2, 2));
    let err = dispatch(
        &Tensor::F32(z.clone()),
        &Tensor::F16(round_to(&z)),
        &Tensor::F32(z),
        &AttentionOptions::new(),
    )
    .unwrap_err();
    assert_eq!(err, AttentionError::MixedDtypes { q: "f32", k: "f16", v: "f32" });
}
