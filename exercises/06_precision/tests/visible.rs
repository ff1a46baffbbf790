//! Small examples you can check by hand: `cargo test -p ex06 --test visible`.

use ex06::{attention, dispatch, e4m3_to_f32, f32_to_e4m3, quantize};
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

// The main task.

#[test]
fn one_and_448_in_e4m3() {
    // 1 = 0 0111 000 (exponent 7 - bias 7 = 0); 448 = 0 1111 110 = 1.75 * 2^8.
    assert_eq!(e4m3_to_f32(0x38), 1.0);
    assert_eq!(e4m3_to_f32(0x7E), 448.0);
    assert_eq!(f32_to_e4m3(1.0), Some(0x38));
    assert_eq!(f32_to_e4m3(-448.0), Some(0xFE));
    // 1.0625 is halfway between 1 (mantissa 000) and 1.125 (001): ties go to the even one.
    assert_eq!(f32_to_e4m3(1.0625), Some(0x38));
    assert_eq!(f32_to_e4m3(500.0), None);
}

#[test]
fn each_head_gets_its_own_descale() {
    // Head 0's largest |x| is 896, head 1's is 0.5: descales 2 and 0.5 / 448.
    let x = Array4::from_shape_vec((1, 2, 1, 2), vec![896.0, -2.0, 0.5, 0.25]).unwrap();
    let fp8 = quantize(&x, "Q").unwrap();
    assert_eq!(fp8.descale[[0, 0]], 2.0);
    assert_eq!(fp8.descale[[0, 1]], 0.5 / 448.0);
    assert_eq!(fp8.codes[[0, 0, 0, 0]], 0x7E); // 896 / 2 = 448
    assert_eq!(fp8.codes[[0, 0, 0, 1]], 0xB8); // -2 / 2 = -1
    assert_eq!(fp8.codes[[0, 1, 0, 0]], 0x7E); // 0.5 / (0.5 / 448) = 448
}
