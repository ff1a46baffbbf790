//! Decoding on the CPU against the f64 oracle for grouped heads: any number of splits, the
//! contiguous and the paged cache, prefill then decode against one causal pass, and the errors.

use lesson11::problem::{DecodeProblem, DecodeSpec};
use lesson11::{KeyValues, KvCache, PagedKvCache, cpu_splits, decode};
use ndarray::{Array3, Array4, Axis, concatenate, s};
use proptest::prelude::*;
use reference::{AttentionError, AttentionOptions, Tolerance};
use testkit::strategies::config;

/// Small decoding problems: 1 to 3 sequences of 1 to 300 tokens, grouped heads from MHA to
/// MQA, 1 to 4 query tokens, odd head dims.
fn specs() -> impl Strategy<Value = DecodeSpec> {
    (1usize..=3, 1usize..=3, 1usize..=4, 1usize..=4, 1usize..=40, any::<bool>(), any::<u64>())
        .prop_flat_map(|(batch, kv_heads, group, q_len, head_dim, causal, seed)| {
            let lens = proptest::collection::vec(q_len..=300usize, batch);
            lens.prop_map(move |lens| DecodeSpec {
                q_heads: kv_heads * group,
                kv_heads,
                lens,
                q_len,
                head_dim,
                causal,
                seed,
            })
        })
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn any_number_of_splits_gives_the_oracles_answer(spec in specs(), splits in 1usize..=40) {
        let p = DecodeProblem::random(&spec);
        let out = decode(&p.contiguous(3).unwrap(), &p.q, &p.options(), splits).unwrap();
        p.check(&out, Tolerance::F32).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn the_paged_cache_gives_the_contiguous_caches_bits(spec in specs(), block in 1usize..=20, splits in 1usize..=8) {
        let p = DecodeProblem::random(&spec);
        let contiguous = decode(&p.contiguous(0).unwrap(), &p.q, &p.options(), splits).unwrap();
        let paged = decode(&p.paged(block, 2).unwrap(), &p.q, &p.options(), splits).unwrap();
        prop_assert_eq!(contiguous, paged);
    }
}

/// Runs a prompt through the cache (prefill: its tokens attend causally to each other), then
/// generates `steps` tokens one at a time: the outputs, stacked, are one causal pass over the
/// whole sequence.
#[test]
fn prefill_then_decode_equals_one_causal_pass() {
    let (prompt, steps) = (37, 20);
    let spec = DecodeSpec {
        q_heads: 6,
        kv_heads: 2,
        lens: vec![prompt + steps, prompt + steps],
        q_len: prompt + steps,
        head_dim: 16,
        causal: true,
        seed: 11,
    };
    let whole = DecodeProblem::random(&spec);
    let tokens =
        |x: &Array3<f32>, range: std::ops::Range<usize>| x.slice(s![.., range, ..]).to_owned();
    for mut cache in [
        Cache::Contiguous(KvCache::new(2, 2, 64, 16).unwrap()),
        Cache::Paged(PagedKvCache::new(2, 2, 16, 8, 16).unwrap()),
    ] {
        let mut outputs = Vec::new();
        let mut done = 0;
        for n in std::iter::once(prompt).chain(std::iter::repeat_n(1, steps)) {
            for seq in 0..2 {
                let (k, v) = (
                    tokens(&whole.keys[seq], done..done + n),
                    tokens(&whole.values[seq], done..done + n),
                );
                cache.append(seq, &k, &v);
            }
            let q = whole.q.slice(s![.., .., done..done + n, ..]).to_owned();
            outputs.push(cache.decode(&q, 3));
            done += n;
        }
        let o = concatenate(Axis(2), &outputs.iter().map(|out| out.o.view()).collect::<Vec<_>>())
            .unwrap();
        let lse =
            concatenate(Axis(2), &outputs.iter().map(|out| out.lse.view()).collect::<Vec<_>>())
                .unwrap();
        whole.check(&reference::AttentionOutput { o, lse }, Tolerance::F32).unwrap();
    }
}

/// The two caches behind one interface, for the test above.
enum Cache {
    Contiguous(KvCache),
    Paged(PagedKvCache),
}

impl Cache {
    fn append(&mut self, seq: usize, k: &Array3<f32>, v: &Array3<f32>) {
        match self {
            Cache::Contiguous(c) => c.append(seq, k.view(), v.view()).unwrap(),
            Cache::Paged(c) => c.append(seq, k.view(), v.view()).unwrap(),
        }
    }

    fn decode(&self, q: &Array4<f32>, splits: usize) -> reference::AttentionOutput<f32> {
        let options = AttentionOptions::causal();
        match self {
            Cache::Contiguous(c) => decode(c, q, &options, splits).unwrap(),
            Cache::Paged(c) => decode(c, q, &options, splits).unwrap(),
        }
    }
}

/// A finished sequence gives its blocks back; a new one reuses them, and the sequences that
/// kept theirs still give the same answers.
#[test]
fn released_blocks_are_reused_without_touching_other_sequences() {
    let spec = DecodeSpec {
        q_heads: 4,
        kv_heads: 2,
        lens: vec![30, 45],
        q_len: 1,
        head_dim: 8,
        causal: false,
        seed: 5,
    };
    let p = DecodeProblem::random(&spec);
    let mut cache = p.paged(4, 0).unwrap();
    let before = decode(&cache, &p.q, &p.options(), 2).unwrap();
    assert_eq!(cache.free_blocks(), 0);
    cache.release(0).unwrap();
    assert_eq!((cache.len(0), cache.block_table(0).unwrap().len(), cache.free_blocks()), (0, 0, 8));
    let other = DecodeProblem::random(&DecodeSpec { lens: vec![30, 45], seed: 6, ..spec });
    cache.append(0, other.keys[0].view(), other.values[0].view()).unwrap();
    let after = decode(&cache, &p.q, &p.options(), 2).unwrap();
    assert_eq!(after.o.slice(s![1, .., .., ..]), before.o.slice(s![1, .., .., ..]));
    let expected = decode(&other.contiguous(0).unwrap(), &p.q, &p.options(), 2).unwrap();
    assert_eq!(after.o.slice(s![0, .., .., ..]), expected.o.slice(s![0, .., .., ..]));
}

#[test]
fn the_cpu_splits_fill_the_threads_but_keep_chunks_long() {
    assert_eq!(cpu_splits(1, 8, 100_000, 16), 4); // 8 groups, 32 tasks wanted
    assert_eq!(cpu_splits(4, 8, 100_000, 16), 1); // 32 groups already
    assert_eq!(cpu_splits(1, 1, 1000, 16), 3); // 32 wanted, but chunks of 256 keys or more
    assert_eq!(cpu_splits(1, 1, 1024, 16), 4);
    assert_eq!(cpu_splits(1, 1, 10, 16), 1);
}

fn error_text<T: std::fmt::Debug>(result: Result<T, AttentionError>) -> String {
    result.unwrap_err().to_string()
}

/// Every refusal leaves the cache as it was.
#[test]
fn bad_appends_are_errors_and_write_nothing() {
    let mut cache = KvCache::new(2, 2, 10, 4).unwrap();
    let tokens = |n: usize| Array3::<f32>::ones((2, n, 4));
    cache.append(0, tokens(8).view(), tokens(8).view()).unwrap();
    let before = cache.clone();
    let err = error_text(cache.append(0, tokens(3).view(), tokens(3).view()));
    assert!(err.contains("positions 8..11") && err.contains("capacity, 10"), "{err}");
    let err = error_text(cache.append(2, tokens(1).view(), tokens(1).view()));
    assert!(err.contains("sequence 2") && err.contains("below 2"), "{err}");
    let err = error_text(cache.append(1, tokens(0).view(), tokens(0).view()));
    assert!(err.contains("n >= 1"), "{err}");
    let err = error_text(cache.append(1, Array3::ones((1, 2, 4)).view(), tokens(2).view()));
    assert!(err.contains("keys of shape [1, 2, 4]"), "{err}");
    let mut bad = tokens(1);
    bad[[1, 0, 2]] = f32::NAN;
    assert!(matches!(
        cache.append(1, tokens(1).view(), bad.view()),
        Err(AttentionError::NonFinite { tensor: "V", .. })
    ));
    assert_eq!(cache.blocks().keys, before.blocks().keys);
    assert_eq!(cache.blocks().values, before.blocks().values);
    assert_eq!((cache.len(0), cache.len(1)), (8, 0));
    assert!(error_text(KvCache::new(2, 0, 10, 4)).contains("every size at least 1"));
    assert!(error_text(KvCache::new(1 << 20, 1 << 20, 1 << 20, 4)).contains("address space"));
    assert!(
        error_text(PagedKvCache::new(1, 1 << 20, 1 << 20, 1 << 20, 4)).contains("address space")
    );
    assert_eq!(cache.len(1), 0);
}

#[test]
fn a_full_pool_is_an_error_and_takes_no_block() {
    let mut cache = PagedKvCache::new(2, 1, 4, 4, 3).unwrap();
    let tokens = |n: usize| Array3::<f32>::ones((1, n, 4));
    cache.append(0, tokens(9).view(), tokens(9).view()).unwrap(); // 3 blocks
    let err = error_text(cache.append(1, tokens(1).view(), tokens(1).view()));
    assert!(err.contains("1 more blocks needed, 0 free"), "{err}");
    assert_eq!((cache.free_blocks(), cache.len(1), cache.block_table(1).unwrap().len()), (0, 0, 0));
    cache.append(0, tokens(3).view(), tokens(3).view()).unwrap(); // fills the last block
    assert!(error_text(cache.release(2)).contains("sequence 2"));
}

#[test]
fn bad_decodes_are_errors() {
    let spec = DecodeSpec {
        q_heads: 4,
        kv_heads: 2,
        lens: vec![5, 9],
        q_len: 1,
        head_dim: 8,
        causal: true,
        seed: 1,
    };
    let p = DecodeProblem::random(&spec);
    let cache = p.contiguous(4).unwrap();
    let options = p.options();
    assert!(error_text(decode(&cache, &p.q, &options, 0)).contains("at least 1 split"));
    let three_heads = p.q.slice(s![.., 0..3, .., ..]).to_owned();
    assert!(
        error_text(decode(&cache, &three_heads, &options, 1))
            .contains("3 query heads and 2 K/V heads")
    );
    let one_sequence = p.q.slice(s![0..1, .., .., ..]).to_owned();
    assert!(error_text(decode(&cache, &one_sequence, &options, 1)).contains("the cache's batch"));
    let six_tokens = Array4::<f32>::zeros((2, 4, 6, 8));
    assert!(
        error_text(decode(&cache, &six_tokens, &options, 1)).contains("sequence 0 holds 5 tokens")
    );
    let mut empty = KvCache::new(2, 2, 4, 8).unwrap();
    empty
        .append(1, p.keys[1].slice(s![.., 0..2, ..]), p.values[1].slice(s![.., 0..2, ..]))
        .unwrap();
    assert!(error_text(decode(&empty, &p.q, &options, 1)).contains("sequence 0 holds 0 tokens"));
    let mut infinite = p.q.clone();
    infinite[[1, 2, 0, 3]] = f32::INFINITY;
    assert!(matches!(
        decode(&cache, &infinite, &options, 1),
        Err(AttentionError::NonFinite { tensor: "Q", .. })
    ));
    let huge = p.q.mapv(|x| x * 1e37);
    assert!(matches!(
        decode(&cache, &huge, &options, 1),
        Err(AttentionError::LogitsOverflow { .. })
    ));
}

/// A table that names a block past the pool, or too few blocks for its tokens, is refused
/// before any kernel follows it.
#[test]
fn broken_block_tables_are_errors() {
    let spec = DecodeSpec {
        q_heads: 2,
        kv_heads: 1,
        lens: vec![5, 9],
        q_len: 1,
        head_dim: 8,
        causal: false,
        seed: 2,
    };
    let cache = DecodeProblem::random(&spec).paged(4, 0).unwrap();
    assert_eq!(cache.blocks().check(1, 8), Ok(()));
    let mut missing = cache.blocks();
    missing.tables[1][2] = 5;
    let err = error_text(missing.check(1, 8));
    assert!(
        err.contains("sequence 1")
            && err.contains("block 5, which is not in the pool")
            && err.contains("below 5"),
        "{err}"
    );
    let mut short = cache.blocks();
    short.tables[0].pop();
    assert!(error_text(short.check(1, 8)).contains("1 blocks for 5 tokens"));
    let mut fewer = cache.blocks();
    fewer.lens.pop();
    assert!(error_text(fewer.check(1, 8)).contains("2 block tables for 1 sequences"));
}
