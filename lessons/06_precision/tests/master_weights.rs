//! Why mixed-precision training keeps an f32 copy of the weights (Micikevicius et al., *Mixed
//! Precision Training*, 2018, for f16; the same holds for bf16): an update of at most half the
//! spacing of a 16-bit format at the weight's size rounds away, every step. The book's chapter "What common material gets
//! wrong" shows this test.

use half::{bf16, f16};

// ANCHOR: master_weights
/// 1000 steps of an optimizer that subtracts 1e-4 from a weight of 1.0 (a learning rate of
/// 1e-4 times a gradient of 1). Below 1.0, f16's numbers lie 2^-11 = 4.9e-4 apart and bf16's
/// 2^-8 = 3.9e-3: 1.0 - 1e-4 rounds back to 1.0 in both, at every step. The same updates on
/// an f32 master copy, rounded to 16 bits only when the model is run, move the weight to 0.9.
#[test]
fn updates_below_half_a_16_bit_step_are_lost_without_f32_master_weights() {
    let (update, steps) = (1e-4f32, 1000);
    let mut weight_f16 = f16::ONE;
    let mut weight_bf16 = bf16::ONE;
    let mut master = 1.0f32;
    for _ in 0..steps {
        weight_f16 = f16::from_f32(weight_f16.to_f32() - update);
        weight_bf16 = bf16::from_f32(weight_bf16.to_f32() - update);
        master -= update;
    }
    assert_eq!(weight_f16, f16::ONE);
    assert_eq!(weight_bf16, bf16::ONE);
    assert!((master - 0.9).abs() < 1e-4, "{master}");
    assert_eq!(f16::from_f32(master).to_f32(), 0.899_902_34); // what the model then computes with
    // An update above half a step does move an f16 weight, by a whole step (2^-11).
    assert_eq!(f16::from_f32(1.0 - 3e-4).to_f32(), 1.0 - 2f32.powi(-11));
}
// ANCHOR_END: master_weights
