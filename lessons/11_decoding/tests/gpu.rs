//! The WGSL decode kernels (lavapipe in CI) against the f64 oracle for grouped heads on the
//! f16-rounded cache: any number of splits, tiles within a chunk, the paged cache, repeated
//! runs, and the errors.

use lesson11::gpu_decode::{
    DecodeCall, GpuCache, KernelShape, MAX_HEAD_DIM, MAX_SPLITS, SHADER, check_kernels, decode_on,
    gpu_splits, kernel_source, kernel_source_with, round_to_f16, rows_per_workgroup,
};
use lesson11::problem::{DecodeProblem, DecodeSpec};
use lesson11::{KvCache, PagedKvCache};
use ndarray::{Array3, Array4};
use proptest::prelude::*;
use reference::{AttentionError, AttentionOptions, Tolerance};
use testkit::strategies::config;

/// The GPU's answer for `p` with `splits` (or the kernel's choice), from a contiguous cache
/// or a paged one with blocks of `block` tokens; checked against the oracle on f16 keys and
/// values (the kernel's arithmetic is f32).
fn check_on_gpu(
    p: &DecodeProblem,
    splits: Option<usize>,
    block: Option<usize>,
) -> Result<(), String> {
    let Some(gpu) = gpu::for_tests() else { return Ok(()) };
    let cache = match block {
        None => GpuCache::upload(&gpu.device, &p.contiguous(2).unwrap()),
        Some(block) => GpuCache::upload(&gpu.device, &p.paged(block, 1).unwrap()),
    }
    .map_err(|e| e.to_string())?;
    let out = decode_on(&gpu.device, &gpu.queue, &cache, &p.q, &p.options(), splits)
        .map_err(|e| e.to_string())?;
    let keys: Vec<Array3<f32>> = p.keys.iter().map(round_to_f16).collect();
    let values: Vec<Array3<f32>> = p.values.iter().map(round_to_f16).collect();
    p.check_with(&out, Tolerance::F32, &keys, &values)
}

/// One new token per sequence: 1 to 3 sequences of 1 to 300 tokens, grouped heads from MHA
/// to MQA (up to 8 query heads per K/V head), head dims that need padding.
fn specs() -> impl Strategy<Value = DecodeSpec> {
    (
        1usize..=3,
        1usize..=2,
        prop::sample::select(vec![1usize, 2, 3, 4, 6, 8]),
        1usize..=72,
        any::<u64>(),
    )
        .prop_flat_map(|(batch, kv_heads, group, head_dim, seed)| {
            proptest::collection::vec(1usize..=300, batch).prop_map(move |lens| DecodeSpec {
                q_heads: kv_heads * group,
                kv_heads,
                lens,
                q_len: 1,
                head_dim,
                causal: true,
                seed,
            })
        })
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn on_the_gpu_any_number_of_splits_gives_the_oracles_answer(spec in specs(), splits in prop::option::of(1usize..=24)) {
        let p = DecodeProblem::random(&spec);
        check_on_gpu(&p, splits, None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn a_paged_cache_gives_the_oracles_answer(spec in specs(), block in 1usize..=40, splits in prop::option::of(1usize..=8)) {
        let p = DecodeProblem::random(&spec);
        check_on_gpu(&p, splits, Some(block)).map_err(TestCaseError::fail)?;
    }
}

/// Longer caches in a paged cache, so that chunks span several tiles: eight query heads per
/// workgroup (tiles of 512 keys), logits scaled by 10 (a spread of about 100), and an explicit
/// scale of either sign.
#[test]
fn long_paged_chunks_large_logits_and_explicit_scales() {
    for (seed, scale) in [(1, None), (2, Some(-0.3)), (3, Some(0.05))] {
        let spec = DecodeSpec {
            q_heads: 8,
            kv_heads: 1,
            lens: vec![1300, 517],
            q_len: 1,
            head_dim: 16,
            causal: true,
            seed,
        };
        let mut p = DecodeProblem::random(&spec);
        p.q.mapv_inplace(|x| 10.0 * x);
        p.scale = scale;
        for splits in [Some(1), Some(2), None] {
            check_on_gpu(&p, splits, Some(24)).unwrap();
        }
    }
}

/// Other layouts of the split kernel that fit lavapipe's workgroup memory give the oracle's
/// answer (larger ones are translated below).
#[test]
fn other_kernel_layouts_give_the_oracles_answer() {
    let shapes = [[64, 1, 4, 4096], [64, 2, 8, 512], [128, 1, 8, 4096], [32, 1, 1, 64]];
    let kernels: Vec<_> = shapes.map(|shape| ("decode.wgsl", SHADER, shape.into())).into();
    let Some(gpu) = gpu::for_tests() else { return };
    check_kernels(gpu, 4, 8, &kernels).unwrap();
}

/// Eight query heads per workgroup make tiles of 512 keys: one chunk of 1500 keys takes three
/// tiles, the online softmax rescaling between them. Logits x 8 make the maximum move.
#[test]
fn tiles_within_a_chunk_rescale_correctly() {
    let spec = DecodeSpec {
        q_heads: 8,
        kv_heads: 1,
        lens: vec![1500, 700],
        q_len: 1,
        head_dim: 64,
        causal: false,
        seed: 3,
    };
    let mut p = DecodeProblem::random(&spec);
    // Keys grow along the sequence, so later tiles hold larger scores than earlier ones.
    for keys in &mut p.keys {
        let n = keys.dim().1;
        for (j, mut key) in keys.axis_iter_mut(ndarray::Axis(1)).enumerate() {
            key *= 1.0 + 3.0 * j as f32 / n as f32;
        }
    }
    assert_eq!(rows_per_workgroup(8, 64), 8);
    for splits in [1, 2, 3] {
        check_on_gpu(&p, Some(splits), None).unwrap();
    }
}

#[test]
fn head_dims_64_128_256_and_mqa() {
    for (head_dim, q_heads, kv_heads) in [(64, 8, 2), (128, 4, 4), (256, 8, 1), (80, 6, 3)] {
        let spec = DecodeSpec {
            q_heads,
            kv_heads,
            lens: vec![333, 64],
            q_len: 1,
            head_dim,
            causal: true,
            seed: 9,
        };
        check_on_gpu(&DecodeProblem::random(&spec), None, Some(16)).unwrap();
    }
}

/// Two runs give the same bits: no race between the phases of a workgroup.
#[test]
fn two_runs_give_identical_bits() {
    let Some(gpu) = gpu::for_tests() else { return };
    let spec = DecodeSpec {
        q_heads: 8,
        kv_heads: 2,
        lens: vec![900, 1300],
        q_len: 1,
        head_dim: 64,
        causal: true,
        seed: 4,
    };
    let p = DecodeProblem::random(&spec);
    let cache = GpuCache::upload(&gpu.device, &p.paged(16, 0).unwrap()).unwrap();
    let call = DecodeCall::new(&gpu.device, &cache, &p.q, &p.options(), Some(5)).unwrap();
    call.run(&gpu.device, &gpu.queue, None, 1).unwrap();
    let first = call.read(&gpu.device, &gpu.queue).unwrap();
    call.run(&gpu.device, &gpu.queue, None, 3).unwrap();
    assert_eq!(first, call.read(&gpu.device, &gpu.queue).unwrap());
}

#[test]
fn splits_follow_the_device_and_the_problem() {
    assert_eq!(gpu_splits(8, 16384), 64); // one sequence, 8 K/V heads: 512 workgroups
    assert_eq!(gpu_splits(8, 1000), 15); // but no chunk under 64 keys
    assert_eq!(gpu_splits(8, 40), 1);
    assert_eq!(gpu_splits(1024, 16384), 1); // enough workgroups already
    assert_eq!(rows_per_workgroup(4, 128), 4);
    assert_eq!(rows_per_workgroup(6, 128), 6);
    assert_eq!(rows_per_workgroup(12, 256), 6);
    assert_eq!(rows_per_workgroup(16, 64), 8);
}

fn error_text<T>(result: Result<T, AttentionError>) -> String {
    result.err().expect("an error").to_string()
}

#[test]
fn bad_calls_are_errors() {
    let Some(gpu) = gpu::for_tests() else { return };
    let spec = DecodeSpec {
        q_heads: 4,
        kv_heads: 2,
        lens: vec![5, 9],
        q_len: 2,
        head_dim: 8,
        causal: true,
        seed: 1,
    };
    let p = DecodeProblem::random(&spec);
    let cache = GpuCache::upload(&gpu.device, &p.contiguous(0).unwrap()).unwrap();
    let err = error_text(decode_on(&gpu.device, &gpu.queue, &cache, &p.q, &p.options(), None));
    assert!(
        err.contains("2 new tokens per sequence") && err.contains("one (a generation step)"),
        "{err}"
    );
    let one = p.q.slice(ndarray::s![.., .., 0..1, ..]).to_owned();
    let err = error_text(decode_on(&gpu.device, &gpu.queue, &cache, &one, &p.options(), Some(0)));
    assert!(err.contains("at least 1 split"), "{err}");
    let err = error_text(decode_on(
        &gpu.device,
        &gpu.queue,
        &cache,
        &one,
        &p.options(),
        Some(MAX_SPLITS + 1),
    ));
    assert!(err.contains("1025 splits") && err.contains("at most 1024"), "{err}");
    let three_heads = one.slice(ndarray::s![.., 0..3, .., ..]).to_owned();
    assert!(
        error_text(decode_on(&gpu.device, &gpu.queue, &cache, &three_heads, &p.options(), None))
            .contains("3 query heads and 2 K/V heads")
    );
    let wide = KvCache::new(1, 1, 4, MAX_HEAD_DIM + 8).unwrap();
    assert!(matches!(
        GpuCache::upload(&gpu.device, &wide),
        Err(AttentionError::UnsupportedHeadDim { .. })
    ));
    let empty = KvCache::new(2, 2, 4, 8).unwrap();
    let cache = GpuCache::upload(&gpu.device, &empty).unwrap();
    let q = Array4::<f32>::zeros((2, 4, 1, 8));
    assert!(
        error_text(decode_on(&gpu.device, &gpu.queue, &cache, &q, &p.options(), None))
            .contains("sequence 0 holds 0 tokens")
    );
    // Finite in f32, infinite in f16: refused, not stored as an infinity.
    let mut large = KvCache::new(2, 2, 4, 8).unwrap();
    let mut values = Array3::<f32>::zeros((2, 3, 8));
    values[[1, 2, 5]] = 70000.0;
    large.append(1, values.view(), values.view()).unwrap();
    let err = GpuCache::upload(&gpu.device, &large).err().expect("an error");
    let index_is = |index: &[usize]| index == [1, 1, 2, 5];
    assert!(
        matches!(&err, AttentionError::NotRepresentable { tensor: "K", index, .. } if index_is(index)),
        "{err}"
    );
}

/// The kernels as written, and as specialised and unrolled for every head dim and row count
/// the host can choose, translate to SPIR-V, their barriers in uniform control flow.
#[test]
fn both_kernels_translate_and_their_barriers_are_uniform() {
    let mut sources = vec![SHADER.to_string()];
    // The first tuned layout: 34 KiB of workgroup memory, more than lavapipe has.
    let large = KernelShape { threads: 256, key_steps: 2, pv_steps: 8, scores: 4096 };
    for padded_dim in [8, 64, 128, 256] {
        for rows in 1..=8 {
            if rows_per_workgroup(rows, padded_dim) == rows {
                sources.push(kernel_source(padded_dim, rows).unwrap());
                sources.push(kernel_source_with(padded_dim, rows, large).unwrap());
            }
        }
    }
    for source in &sources {
        gpu::uniformity::check_barriers(source).unwrap();
        for entry in ["split_partials", "merge_splits"] {
            gpu::kernel::spirv(source, entry, &[], gpu::kernel::Checks::On).unwrap();
        }
    }
}

/// A generation loop: the prompt uploaded once, then each step appends one token per sequence
/// on the host and syncs only that token to the GPU; every step's answer is the oracle's over
/// the tokens so far (on the f16-rounded values, which the host is given, so that the oracle
/// and the GPU see the same numbers). A released and refilled sequence is copied whole.
#[test]
fn a_generation_loop_appends_on_the_host_and_syncs_the_gpu() {
    let Some(gpu) = gpu::for_tests() else { return };
    let (prompt, steps) = (37, 12);
    let spec = DecodeSpec {
        q_heads: 4,
        kv_heads: 2,
        lens: vec![prompt + steps; 2],
        q_len: steps,
        head_dim: 16,
        causal: false,
        seed: 12,
    };
    let mut p = DecodeProblem::random(&spec);
    for x in p.keys.iter_mut().chain(p.values.iter_mut()) {
        *x = round_to_f16(x);
    }
    let tokens = |x: &Array3<f32>, range: std::ops::Range<usize>| {
        x.slice(ndarray::s![.., range, ..]).to_owned()
    };
    let mut host = PagedKvCache::new(2, 2, 16, 8, 20).unwrap();
    for seq in 0..2 {
        host.append(
            seq,
            tokens(&p.keys[seq], 0..prompt).view(),
            tokens(&p.values[seq], 0..prompt).view(),
        )
        .unwrap();
    }
    let mut device = GpuCache::upload(&gpu.device, &host).unwrap();
    for t in 0..steps {
        let now = prompt + t + 1;
        for seq in 0..2 {
            let new = now - 1..now;
            host.append(
                seq,
                tokens(&p.keys[seq], new.clone()).view(),
                tokens(&p.values[seq], new).view(),
            )
            .unwrap();
            device.sync(&gpu.queue, &host, seq).unwrap();
        }
        let q = p.q.slice(ndarray::s![.., .., t..t + 1, ..]).to_owned();
        let out = decode_on(&gpu.device, &gpu.queue, &device, &q, &AttentionOptions::new(), None)
            .unwrap();
        for seq in 0..2 {
            let one = |x: &Array3<f32>| tokens(x, 0..now).insert_axis(ndarray::Axis(0));
            let q_seq = q.slice(ndarray::s![seq..seq + 1, .., .., ..]).to_owned();
            let expected = reference::grouped::expected(
                &q_seq,
                &one(&p.keys[seq]),
                &one(&p.values[seq]),
                &AttentionOptions::new(),
            )
            .unwrap();
            let ours = reference::AttentionOutput {
                o: out.o.slice(ndarray::s![seq..seq + 1, .., .., ..]).to_owned(),
                lse: out.lse.slice(ndarray::s![seq..seq + 1, .., ..]).to_owned(),
            };
            reference::check_output(&ours, &expected, Tolerance::F32)
                .map_err(|e| format!("step {t}, sequence {seq}: {e}"))
                .unwrap();
        }
    }
    // Sequence 0 ends; a new one takes its blocks and is synced whole.
    host.release(0).unwrap();
    host.append(0, tokens(&p.keys[1], 0..20).view(), tokens(&p.values[1], 0..20).view()).unwrap();
    device.sync(&gpu.queue, &host, 0).unwrap();
    let q = p.q.slice(ndarray::s![.., .., 0..1, ..]).to_owned();
    let out =
        decode_on(&gpu.device, &gpu.queue, &device, &q, &AttentionOptions::new(), None).unwrap();
    let fresh = decode_on(
        &gpu.device,
        &gpu.queue,
        &GpuCache::upload(&gpu.device, &host).unwrap(),
        &q,
        &AttentionOptions::new(),
        None,
    )
    .unwrap();
    assert_eq!(out, fresh);
    // Another host cache is refused.
    let other = PagedKvCache::new(2, 2, 16, 8, 21).unwrap();
    let err = device.sync(&gpu.queue, &other, 0).expect_err("an error").to_string();
    assert!(err.contains("another shape"), "{err}");
    assert!(
        device.sync(&gpu.queue, &host, 2).expect_err("an error").to_string().contains("sequence 2")
    );
}
