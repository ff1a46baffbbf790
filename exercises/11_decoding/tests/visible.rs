//! Small examples you can check by hand: `cargo test -p ex11 --test visible`.

use ex11::{PagedCache, decode};
use lesson11::KeyValues;
use ndarray::{Array3, Array4};
use reference::AttentionOptions;

/// `[Hkv, n, D]` tokens whose every number is `first + t` for token `t`.
fn tokens(kv_heads: usize, n: usize, d: usize, first: f32) -> Array3<f32> {
    Array3::from_shape_fn((kv_heads, n, d), |(_, t, _)| first + t as f32)
}

#[test]
fn tokens_land_in_blocks_taken_in_order() {
    // Blocks of 2 tokens: sequence 0's 3 tokens take blocks 0 and 1, sequence 1's take 2.
    let mut cache = PagedCache::new(2, 1, 4, 2, 4).unwrap();
    cache.append(0, tokens(1, 3, 4, 10.0).view(), tokens(1, 3, 4, 20.0).view()).unwrap();
    cache.append(1, tokens(1, 1, 4, 30.0).view(), tokens(1, 1, 4, 40.0).view()).unwrap();
    cache.append(0, tokens(1, 1, 4, 13.0).view(), tokens(1, 1, 4, 23.0).view()).unwrap();
    assert_eq!(cache.block_table(0), Some(&[0, 1][..]));
    assert_eq!(cache.block_table(1), Some(&[2][..]));
    assert_eq!(cache.free_blocks(), 1);
    assert_eq!((cache.len(0), cache.key(0, 0, 3)), (4, &[13.0; 4][..]));
    assert_eq!(cache.value(1, 0, 0), &[40.0; 4]);
}

#[test]
fn release_gives_the_blocks_back() {
    let mut cache = PagedCache::new(2, 1, 4, 2, 3).unwrap();
    cache.append(0, tokens(1, 3, 4, 0.0).view(), tokens(1, 3, 4, 0.0).view()).unwrap();
    cache.release(0).unwrap();
    assert_eq!((cache.len(0), cache.block_table(0), cache.free_blocks()), (0, Some(&[][..]), 3));
    assert!(cache.release(2).is_err());
}

#[test]
fn equal_scores_average_the_values_of_the_shared_head() {
    // Keys all 0: every score is 0, each query head gets the mean of its K/V head's values.
    // Query heads 0 and 1 share K/V head 0 (values 0, 1, 2); heads 2 and 3 K/V head 1 (7).
    let mut cache = PagedCache::new(1, 2, 4, 2, 2).unwrap();
    let values = Array3::from_shape_fn((2, 3, 4), |(g, t, _)| if g == 0 { t as f32 } else { 7.0 });
    cache.append(0, Array3::zeros((2, 3, 4)).view(), values.view()).unwrap();
    let q = Array4::ones((1, 4, 1, 4));
    for splits in [1, 2, 5] {
        let out = decode(&cache, &q, &AttentionOptions::new(), splits).unwrap();
        assert_eq!(out.o[[0, 1, 0, 0]], 1.0);
        assert_eq!(out.o[[0, 2, 0, 3]], 7.0);
        assert!((out.lse[[0, 0, 0]] - 3f32.ln()).abs() < 1e-6);
    }
}

#[test]
fn a_fork_shares_then_copies_the_block_it_writes() {
    // Main task. Sequence 0 holds 3 tokens in blocks of 2: blocks 0 (full) and 1 (half).
    let mut cache = PagedCache::new(2, 1, 4, 2, 4).unwrap();
    cache.append(0, tokens(1, 3, 4, 0.0).view(), tokens(1, 3, 4, 0.0).view()).unwrap();
    cache.fork(0, 1).unwrap();
    assert_eq!(cache.block_table(1), Some(&[0, 1][..]));
    assert_eq!(cache.free_blocks(), 2);
    // Sequence 1 writes into the half-filled block 1: it gets a copy (block 2) first.
    cache.append(1, tokens(1, 1, 4, 50.0).view(), tokens(1, 1, 4, 50.0).view()).unwrap();
    assert_eq!(cache.block_table(1), Some(&[0, 2][..]));
    assert_eq!((cache.key(1, 0, 2), cache.key(1, 0, 3)), (&[2.0; 4][..], &[50.0; 4][..]));
    assert_eq!(cache.len(0), 3);
}
