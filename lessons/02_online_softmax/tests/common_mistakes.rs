//! Two mistakes that common material about FlashAttention makes, each as a test that states
//! what really happens. The book's chapter "What common material gets wrong" shows them.

use lesson02::{attention, naive_softmax, safe_softmax};
use ndarray::Array4;
use reference::AttentionOptions;

// ANCHOR: blocks_without_rescale
/// One query's attention over scores cut into blocks, each block's softmax-weighted values
/// added as they are: what a tiled pseudo-code that forgets the rescale computes.
fn blocks_added_without_rescale(scores: &[f32], values: &[f32], block: usize) -> f32 {
    let per_block = scores.chunks(block).zip(values.chunks(block));
    per_block.map(|(s, v)| safe_softmax(s).iter().zip(v).map(|(p, v)| p * v).sum::<f32>()).sum()
}

/// Each block's weights add up to 1, so the weights over all keys add up to the number of
/// blocks, not to 1: with every value 1 the answer is the number of blocks.
#[test]
fn per_block_softmaxes_added_without_rescale_count_every_block_as_a_whole() {
    let scores = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
    let all_ones = blocks_added_without_rescale(&scores, &[1.0; 8], 4);
    assert!((all_ones - 2.0).abs() < 1e-6, "{all_ones}");
    // Divided by the number of blocks it still weighs a block by 1/2, not by its share of
    // the sum: keys 0..4 get 1/2 of the weight where the softmax gives them 1.8%.
    let first_half = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let wrong = blocks_added_without_rescale(&scores, &first_half, 4) / 2.0;
    let right: f32 = safe_softmax(&scores)[..4].iter().sum();
    assert!((wrong - 0.5).abs() < 1e-6, "{wrong}");
    assert!((right - 0.0180).abs() < 1e-4, "{right}");
}
// ANCHOR_END: blocks_without_rescale

// ANCHOR: minus_1e9
/// A row whose every key is masked by adding -1e9 to its scores. In f32, scores below 32 in
/// size vanish under 1e9 (f32's numbers there lie 64 apart), the row's scores are then all
/// equal, and softmax spreads its weight evenly: the row's output is the mean of the values,
/// a plausible row that no check flags.
#[test]
fn a_fully_masked_row_with_minus_1e9_averages_the_values() {
    let scores = [2.0f32, -1.0, 0.5].map(|s| s - 1e9);
    assert_eq!(scores, [-1e9; 3]);
    assert_eq!(safe_softmax(&scores), vec![1.0 / 3.0; 3]);
}

/// In f16, -1e9 is -infinity (f16's largest finite value is 65504). A softmax without a
/// guard for rows that see no key then divides 0 by 0: the formula as written gives
/// `0 / 0`, and with the maximum subtracted `exp(-inf - (-inf)) = exp(NaN)`. (The course's
/// `safe_softmax` has the guard and returns zeros.)
#[test]
fn in_f16_minus_1e9_is_minus_infinity_and_a_masked_row_is_nan() {
    let masked = half::f16::from_f32(-1e9).to_f32();
    assert_eq!(masked, f32::NEG_INFINITY);
    let row = [masked; 3];
    assert!(naive_softmax(&row).iter().all(|p| p.is_nan()));
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert!(row.iter().all(|&s| (s - max).exp().is_nan()));
    assert_eq!(safe_softmax(&row), vec![0.0; 3]);
}

/// The course's contract says what a row that sees no key gives: O = 0 and L = -inf, from
/// a mask that leaves keys out rather than a large negative number. With the bottom-right
/// causal mask, 3 queries over 1 key: rows 0 and 1 see no key, row 2 sees key 0.
#[test]
fn in_the_contract_a_row_that_sees_no_key_gives_zero_and_minus_infinity() {
    let q = Array4::from_elem((1, 1, 3, 4), 1.0f32);
    let k = Array4::from_elem((1, 1, 1, 4), 1.0f32);
    let v = Array4::from_elem((1, 1, 1, 4), 5.0f32);
    let out = attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
    for row in 0..2 {
        assert!(out.o.slice(ndarray::s![0, 0, row, ..]).iter().all(|&x| x == 0.0));
        assert_eq!(out.lse[[0, 0, row]], f32::NEG_INFINITY);
    }
    assert!(out.o.slice(ndarray::s![0, 0, 2, ..]).iter().all(|&x| x == 5.0));
}
// ANCHOR_END: minus_1e9
