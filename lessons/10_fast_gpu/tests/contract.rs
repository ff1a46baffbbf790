//! Lesson 10's versions against the f64 oracle and the shared contract, on the test device
//! (lavapipe in CI; the tensor-core versions only where the device has tensor cores). The
//! bodies are the shared ones of `testkit::checks`; only the forward function differs.

use gpu::attention::{KernelVersion, Prepared, attention_on};
use lesson10::{
    ArenaTiles, F32Tiles, Kernel, LeaveOut, PairTiles, QueryOrder, RegisterTiles, TENSOR_CORES,
    TileShape, V1, V7, V8, V9, V10, V11, Variant, Version,
};
use ndarray::Array4;
use proptest::prelude::*;
use reference::{AttentionOptions, Forward, Problem, ProblemSpec, check_output, oracle};
use testkit::checks::{
    check_against_oracle, check_heads_independent, check_rejects_bad_inputs,
    check_rejects_non_finite_inputs, check_rejects_overflowing_logits, run,
};
use testkit::strategies::{Case, ShapeLimits, cases, config};

/// Every version of the lesson that the test device can run, with a note on stderr for each
/// one it cannot (the tensor-core versions on lavapipe).
fn runnable() -> Vec<KernelVersion> {
    let Some(gpu) = gpu::for_tests() else { return Vec::new() };
    let (runs, cannot): (Vec<_>, Vec<_>) =
        lesson10::versions().into_iter().partition(|v| v.missing_on(&gpu.device).is_none());
    for version in cannot {
        eprintln!("not run here: {}", version.missing_on(&gpu.device).expect("partitioned"));
    }
    runs
}

/// Version 1 with given tiles, on the test device.
fn with_tiles(tiles: RegisterTiles) -> impl Forward {
    let gpu = gpu::for_tests().expect("checked by the test before");
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        let kernel = Kernel::<V1>::with(&gpu.device, q.dim().3, tiles)?;
        attention_on(&gpu.device, &gpu.queue, &kernel, q, k, v, o)
    }
}

/// Tiles version 1 accepts on the test device at this head dim: `row_groups` in 1..=16 and
/// 2 or 4 keys per thread, shrunk until they fit.
fn tiles_for(case: &Case, row_groups: usize, four_keys: bool) -> RegisterTiles {
    let gpu = gpu::for_tests().expect("checked by the test before");
    let available = gpu.device.limits().max_compute_workgroup_storage_size as usize;
    let mut tiles = RegisterTiles { row_groups, keys_per_thread: if four_keys { 4 } else { 2 } };
    while tiles.workgroup_bytes(case.spec.head_dim) > available && tiles.row_groups > 1 {
        tiles.row_groups /= 2;
    }
    if tiles.workgroup_bytes(case.spec.head_dim) > available {
        tiles.keys_per_thread = 2;
    }
    tiles
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn every_version_matches_the_oracle(case in cases(ShapeLimits::GPU)) {
        let Some(gpu) = gpu::for_tests() else { return Ok(()) };
        for version in runnable() {
            let fail = |e: String| TestCaseError::fail(format!("{}: {e}", version.about.name));
            let forward = version.forward_on(gpu);
            check_against_oracle(&forward, &case, version.about.tolerance).map_err(fail)?;
        }
    }

    #[test]
    fn register_tiles_match_the_oracle_for_any_tile_size(
        case in cases(ShapeLimits::GPU), row_groups in prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(16)], four_keys: bool,
    ) {
        if gpu::for_tests().is_none() { return Ok(()); }
        let tiles = tiles_for(&case, row_groups, four_keys);
        let tolerance = V1::about().tolerance;
        check_against_oracle(&with_tiles(tiles), &case, tolerance)
            .map_err(|e| TestCaseError::fail(format!("{tiles:?}: {e}")))?;
        check_heads_independent(&with_tiles(tiles), &case).map_err(TestCaseError::fail)?;
    }
}

/// Every tile shape of version 7 at `head_dim` that fits the test device (its workgroup
/// memory and its subgroups).
fn f32_shapes(head_dim: usize) -> Vec<F32Tiles> {
    let Some(gpu) = gpu::for_tests() else { return Vec::new() };
    let available = gpu.device.limits().max_compute_workgroup_storage_size as usize;
    let mut shapes = V7::tried(head_dim);
    shapes.retain(|t| {
        t.workgroup_bytes(head_dim) <= available && t.check_subgroups(&gpu.device).is_ok()
    });
    shapes
}

/// Version 7 with given tiles, on the test device.
fn with_f32_tiles(tiles: F32Tiles) -> impl Forward {
    compiled(Variant::of::<V7>(tiles))
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn f32_registers_match_the_oracle_for_any_tile_size(case in cases(ShapeLimits::GPU), pick: usize) {
        let shapes = f32_shapes(case.spec.head_dim);
        if shapes.is_empty() { return Ok(()); }
        let tiles = shapes[pick % shapes.len()];
        let tolerance = V7::about().tolerance;
        check_against_oracle(&with_f32_tiles(tiles), &case, tolerance)
            .map_err(|e| TestCaseError::fail(format!("{tiles:?}: {e}")))?;
        check_heads_independent(&with_f32_tiles(tiles), &case).map_err(TestCaseError::fail)?;
    }
}

/// Every tile shape of version 7 on the tails and causal offsets of
/// `head_dims_64_128_256_tails_and_causal_offsets`, at D = 64 and 128.
#[test]
fn every_f32_tile_shape_on_tails_and_causal_offsets() {
    let tolerance = V7::about().tolerance;
    for head_dim in [64, 128] {
        for tiles in f32_shapes(head_dim) {
            let forward = with_f32_tiles(tiles);
            for (q_len, kv_len) in [(65, 33), (33, 65), (1, 97), (97, 1)] {
                for causal in [false, true] {
                    let spec = ProblemSpec::new(1, 2, q_len, kv_len, head_dim).causal(causal);
                    let case = Case { spec, seed: 4 };
                    check_against_oracle(&forward, &case, tolerance)
                        .unwrap_or_else(|e| panic!("{tiles:?}, {case:?}: {e}"));
                }
            }
        }
    }
}

/// `variant`, compiled for the problem's head dimension, on the test device.
fn compiled(variant: Variant) -> impl Forward {
    let gpu = gpu::for_tests().expect("checked by the test before");
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        let kernel = variant.build(&gpu.device, q.dim().3)?;
        attention_on(&gpu.device, &gpu.queue, kernel.as_ref(), q, k, v, o)
    }
}

/// Every tile shape of the tensor-core versions at `head_dim` that fits the test device, if it
/// has tensor cores (none on lavapipe).
fn tensor_core_shapes(head_dim: usize) -> Vec<Variant> {
    let Some(gpu) = gpu::for_tests().filter(|gpu| gpu.has_tensor_cores()) else {
        return Vec::new();
    };
    let mut shapes = lesson10::every_variant(head_dim);
    shapes.retain(|v| v.requires.contains(TENSOR_CORES) && v.fits(&gpu.device, head_dim));
    shapes
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn tensor_core_tiles_match_the_oracle_for_any_tiles(case in cases(ShapeLimits::GPU), pick: usize) {
        let shapes = tensor_core_shapes(case.spec.head_dim);
        if shapes.is_empty() { return Ok(()); }
        let variant = shapes[pick % shapes.len()].clone();
        let tolerance = variant.about.tolerance;
        check_against_oracle(&compiled(variant.clone()), &case, tolerance)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", variant.describe())))?;
    }
}

/// Every tile shape of the tensor-core versions on keys whose scores grow along the sequence
/// and on one late jump (the lazy rescale runs), at the head dimensions FlashAttention-2
/// supports and at 96, where version 10's halves of O are 3 fragments: its rounds through
/// workgroup memory take one fragment each.
#[test]
fn tensor_core_tiles_rescale_correctly() {
    for head_dim in [64, 96, 128, 256] {
        for p in [growing_scores(head_dim), one_late_jump(head_dim)] {
            let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
            for variant in tensor_core_shapes(head_dim) {
                let out = run(&compiled(variant.clone()), &p).unwrap();
                check_output(&out, &expected, variant.about.tolerance)
                    .unwrap_or_else(|e| panic!("{}, D={head_dim}: {e}", variant.describe()));
            }
        }
    }
}

/// The head dimensions FlashAttention-2 supports, with tails of both tiles and the causal
/// mask with `Nq != Nkv` (rows that see no key when `Nq > Nkv`), every run.
#[test]
fn head_dims_64_128_256_tails_and_causal_offsets() {
    let Some(gpu) = gpu::for_tests() else { return };
    for version in runnable() {
        let forward = version.forward_on(gpu);
        for head_dim in [64, 128, 256] {
            for (q_len, kv_len) in [(65, 33), (33, 65), (1, 97), (97, 1), (64, 64)] {
                for causal in [false, true] {
                    let spec = ProblemSpec::new(1, 2, q_len, kv_len, head_dim).causal(causal);
                    let case = Case { spec, seed: 3 };
                    check_against_oracle(&forward, &case, version.about.tolerance)
                        .unwrap_or_else(|e| panic!("{}, {case:?}: {e}", version.about.name));
                }
            }
        }
    }
}

/// Every tile shape of versions 4 to 11, not only the ones each version picks, on the tails
/// and causal offsets above (a random case per shape is too few to be sure of every edge).
#[test]
fn every_tensor_core_tile_shape_on_tails_and_causal_offsets() {
    for head_dim in [64, 128] {
        for variant in tensor_core_shapes(head_dim) {
            let forward = compiled(variant.clone());
            for (q_len, kv_len) in [(65, 33), (33, 65), (1, 97), (97, 1)] {
                for causal in [false, true] {
                    let spec = ProblemSpec::new(1, 2, q_len, kv_len, head_dim).causal(causal);
                    let case = Case { spec, seed: 4 };
                    check_against_oracle(&forward, &case, variant.about.tolerance)
                        .unwrap_or_else(|e| panic!("{}, {case:?}: {e}", variant.describe()));
                }
            }
        }
    }
}

/// Versions 8 to 10, with the tiles each takes on the test device, on problems where their
/// orders of work change which workgroup does what. In the tests above, groups of 256 or 512
/// workgroups hold the whole grid, and K and V never reach 4 MiB. Here:
/// - with the causal mask, 5 slices of 5 query tiles taken longest first in groups of 10
///   workgroups: 2 slices a group and a last group of one, with `Nkv` above and below `Nq`;
/// - without it at D = 256, K and V over 4 MiB, so that the rotation's spread is capped
///   (`SPREAD_TILES` in the shaders: 4 MiB of K and V in f16, in tiles).
#[test]
fn orders_of_work_over_several_query_tiles_and_slices() {
    let Some(gpu) = gpu::for_tests().filter(|gpu| gpu.has_tensor_cores()) else { return };
    // The tiles each version takes on this device, in `query_order`, with their keys per tile.
    let tiles_at = |head_dim: usize, query_order: QueryOrder| {
        let arena = Kernel::<V8>::choose(&gpu.device, head_dim).unwrap();
        let pairs = Kernel::<V10>::choose(&gpu.device, head_dim).unwrap();
        let arena = ArenaTiles { query_order, ..arena };
        let pairs = PairTiles { query_order, ..pairs };
        [
            (Variant::of::<V8>(arena), arena.block_kv),
            (Variant::of::<V9>(arena), arena.block_kv),
            (Variant::of::<V10>(pairs), pairs.block_kv),
        ]
    };
    let grouped = QueryOrder::LongestFirst { workgroups: 10 };
    for (variant, _) in tiles_at(64, grouped) {
        let q_len = 4 * variant.block_q() + 9; // 5 query tiles, so 2 slices a group of 10
        for kv_len in [q_len + 40, q_len - 200] {
            let spec = ProblemSpec::new(1, 5, q_len, kv_len, 64).causal(true);
            let case = Case { spec, seed: 5 };
            check_against_oracle(&compiled(variant.clone()), &case, variant.about.tolerance)
                .unwrap_or_else(|e| panic!("{}, {case:?}: {e}", variant.describe()));
        }
    }
    let (head_dim, kv_len): (usize, usize) = (256, 4096 + 48);
    for (variant, keys) in tiles_at(head_dim, QueryOrder::AsLaunched) {
        let spread_tiles = (4 << 20) / (4 * keys * head_dim);
        assert!(kv_len.div_ceil(keys) > spread_tiles, "{}: the cap must bind", variant.describe());
        let spec = ProblemSpec::new(1, 2, 3 * variant.block_q() + 5, kv_len, head_dim);
        let case = Case { spec, seed: 6 };
        check_against_oracle(&compiled(variant.clone()), &case, variant.about.tolerance)
            .unwrap_or_else(|e| panic!("{}, {case:?}: {e}", variant.describe()));
    }
}

/// Every runnable version on one hand-made problem, against the oracle.
fn every_version_matches_the_oracle_on(gpu: &'static gpu::Gpu, p: &Problem) {
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    for version in runnable() {
        let out = run(&version.forward_on(gpu), p).unwrap();
        check_output(&out, &expected, version.about.tolerance)
            .unwrap_or_else(|e| panic!("{}: {e}", version.about.name));
    }
}

/// Keys whose scores grow along the sequence, so that every tile raises every row's max:
/// the online-softmax rescale runs on every tile (random inputs rarely exercise it).
#[test]
fn scores_that_grow_along_the_keys() {
    let Some(gpu) = gpu::for_tests() else { return };
    every_version_matches_the_oracle_on(gpu, &growing_scores(64));
}

/// Queries all 0.05 and keys that grow with their position, so that every score is 0.12 times
/// its key's index: over 200 keys a row's max rises by 24 (35 in log2 units), more than the
/// tensor-core versions' lazy-rescale threshold (8) every 46 keys. A version that skipped
/// that rescale would overflow P's f16.
fn growing_scores(head_dim: usize) -> Problem {
    let spec = ProblemSpec::new(1, 2, 40, 200, head_dim);
    let mut p = Problem::random(&spec, 5);
    p.q.fill(0.05);
    let slope = 0.3 * (64.0 / head_dim as f32).sqrt();
    for ((_, _, key, _), x) in p.k.indexed_iter_mut() {
        *x = slope * key as f32;
    }
    p
}

/// Every runnable version on one late jump of the scores (below): a rescale of O that moved
/// or mis-scaled its fragments shows in the output.
#[test]
fn a_late_jump_in_the_scores() {
    let Some(gpu) = gpu::for_tests() else { return };
    every_version_matches_the_oracle_on(gpu, &one_late_jump(64));
}

/// Scores of 0 for the first 1024 keys, then 5.8 (8.4 in log2 units, just over the
/// tensor-core versions' lazy-rescale threshold) for the last 16, and values that differ from
/// column to column and between the two groups of keys. After the one rescale the first keys
/// still carry a sixth of each row's weight (1024 against 16 e^5.8), so a rescale that scaled
/// or moved O's fragments wrongly changes the output by about a tenth. Where the scores keep
/// growing (`growing_scores`), the weight of the keys before each rescale is too small for
/// that: a planted bug that gave each subgroup of version 10's pairs the other's fragments
/// after a rescale passed both tests on it.
fn one_late_jump(head_dim: usize) -> Problem {
    let (old_keys, new_keys) = (1024, 16);
    let spec = ProblemSpec::new(1, 2, 40, old_keys + new_keys, head_dim);
    let mut p = Problem::random(&spec, 6);
    p.q.fill(0.05);
    // Each score is 0.05 * k * D / sqrt(D) with every number of a key equal to k.
    let jump = 5.8 / (0.05 * (head_dim as f32).sqrt());
    for ((_, _, key, _), x) in p.k.indexed_iter_mut() {
        *x = if key < old_keys { 0.0 } else { jump };
    }
    for ((_, _, key, d), x) in p.v.indexed_iter_mut() {
        let column = d as f32 / head_dim as f32;
        *x = if key < old_keys { column } else { 1.0 - column };
    }
    p
}

/// With Q = 0 every score is 0 and every weight equal: O is the mean of the values each row
/// sees. Separates the softmax and P V from the scores.
#[test]
fn zero_queries_average_the_values() {
    let Some(gpu) = gpu::for_tests() else { return };
    let mut p = Problem::random(&ProblemSpec::new(1, 1, 70, 90, 64), 9);
    p.q.fill(0.0);
    every_version_matches_the_oracle_on(gpu, &p);
}

/// The same inputs twice give the same bits: a race between threads (a missing barrier)
/// shows up as results that differ from run to run.
#[test]
fn two_runs_give_identical_bits() {
    let Some(gpu) = gpu::for_tests() else { return };
    let (device, queue) = (&gpu.device, &gpu.queue);
    let p = Problem::random(&ProblemSpec::new(2, 2, 150, 170, 64).causal(true), 17);
    for version in runnable() {
        let kernel = (version.build)(device, 64).unwrap();
        let prepared =
            Prepared::new(device, kernel.as_ref(), &p.q, &p.k, &p.v, &p.options).unwrap();
        let mut outputs = Vec::new();
        for _ in 0..3 {
            prepared.run(device, queue, None).unwrap();
            outputs.push(prepared.read_output(device, queue).unwrap());
        }
        assert!(outputs.iter().all(|o| *o == outputs[0]), "{}: runs differ", version.about.name);
    }
}

#[test]
fn every_version_rejects_bad_input() {
    let Some(gpu) = gpu::for_tests() else { return };
    for version in runnable() {
        let forward = version.forward_on(gpu);
        check_rejects_bad_inputs(&forward).unwrap();
        check_rejects_non_finite_inputs(&forward).unwrap();
        check_rejects_overflowing_logits(&forward).unwrap();
    }
}

#[test]
fn what_a_kernel_cannot_run_is_an_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let device = &gpu.device;
    let err = Kernel::<V1>::new(device, 257).err().expect("D = 257 is refused");
    assert_eq!(err, reference::AttentionError::UnsupportedHeadDim { head_dim: 257, max: 256 });
    let huge = RegisterTiles { row_groups: 64, keys_per_thread: 4 };
    let err = Kernel::<V1>::with(device, 256, huge).err().expect("too large");
    assert!(matches!(err, reference::AttentionError::TilesDoNotFit { .. }), "{err}");
    // A version without bounds checks runs only the shapes its tests try: 4 row groups of 8
    // rows with 1 key per thread are valid by its rules, but not among them.
    let untried =
        F32Tiles { row_groups: 4, rows_per_thread: 8, keys_per_thread: 1, prefetch: false };
    assert!(untried.check().is_ok() && !V7::tried(32).contains(&untried));
    if untried.check_subgroups(device).is_ok() {
        // (where the device runs version 7 at all)
        let err = Kernel::<V7>::with(device, 32, untried).err().expect("a shape never tried");
        assert!(err.to_string().contains("only on the tile shapes its tests try"), "{err}");
    }
    let kernel = Kernel::<V1>::new(device, 32).unwrap();
    let p = Problem::random(&ProblemSpec::new(1, 1, 3, 3, 16), 0);
    let err = attention_on(device, &gpu.queue, &kernel, &p.q, &p.k, &p.v, &p.options).unwrap_err();
    assert!(err.to_string().contains("compiled for head_dim = 32"), "{err}");
}

/// Lavapipe silently cuts off a shader invocation after 65535 loop iterations. The host's
/// count is an upper bound: at the largest `Nkv` it allows the answer is right, one more key
/// is refused.
#[test]
fn lavapipe_loop_limit_is_refused_not_silently_wrong() {
    let Some(gpu) = gpu::for_tests() else { return };
    if !gpu.info.name.contains("llvmpipe") {
        return; // real GPUs have no such limit
    }
    let tiles = RegisterTiles { row_groups: 1, keys_per_thread: 2 };
    let limit = gpu::kernel::LAVAPIPE_LOOP_LIMIT;
    let fits =
        |n: usize| tiles.loop_iterations(&ProblemSpec::new(1, 1, 1, n, 128).shape()) <= limit;
    let largest = (1..100_000).take_while(|&n| fits(n)).last().unwrap();
    let at_limit = Case { spec: ProblemSpec::new(1, 1, 1, largest, 128), seed: 1 };
    check_against_oracle(&with_tiles(tiles), &at_limit, reference::Tolerance::F32).unwrap();
    let beyond = ProblemSpec::new(1, 1, 1, largest + 1, 128);
    let err = run(&with_tiles(tiles), &Problem::random(&beyond, 1)).unwrap_err();
    assert!(err.to_string().contains("LP_MAX_TGSI_LOOP_ITERATIONS"), "{err}");
}

/// The same for version 7, whose unrolled loops leave fewer loops to count.
#[test]
fn lavapipe_loop_limit_is_refused_for_f32_registers_too() {
    let Some(gpu) = gpu::for_tests() else { return };
    if !gpu.info.name.contains("llvmpipe") {
        return;
    }
    let tiles = F32Tiles { row_groups: 1, rows_per_thread: 4, keys_per_thread: 1, prefetch: false };
    let limit = gpu::kernel::LAVAPIPE_LOOP_LIMIT;
    let fits =
        |n: usize| tiles.loop_iterations(&ProblemSpec::new(1, 1, 1, n, 128).shape()) <= limit;
    let largest = (1..100_000).take_while(|&n| fits(n)).last().unwrap();
    let at_limit = Case { spec: ProblemSpec::new(1, 1, 1, largest, 128), seed: 1 };
    check_against_oracle(&with_f32_tiles(tiles), &at_limit, reference::Tolerance::F32).unwrap();
    let beyond = ProblemSpec::new(1, 1, 1, largest + 1, 128);
    let err = run(&with_f32_tiles(tiles), &Problem::random(&beyond, 1)).unwrap_err();
    assert!(err.to_string().contains("LP_MAX_TGSI_LOOP_ITERATIONS"), "{err}");
}

#[test]
fn every_barrier_is_in_uniform_control_flow() {
    gpu::uniformity::check_barriers(lesson10::v1_register_tiles::SOURCE).unwrap();
    for tiles in V7::tried(64) {
        let source = V7::shader(&tiles, 64, LeaveOut::NOTHING).unwrap().source;
        gpu::uniformity::check_barriers(&source).unwrap_or_else(|e| panic!("{tiles:?}: {e}"));
    }
}

/// Version 7's row exchanges need subgroups that tile the workgroup in whole groups of 8.
#[test]
fn f32_registers_refuse_subgroups_that_would_mix_rows() {
    // 32 threads: whole subgroups of 8 or 32, not of 64.
    let tiles = F32Tiles { row_groups: 4, rows_per_thread: 4, keys_per_thread: 4, prefetch: true };
    assert!(tiles.fits_subgroups(8, 8).is_ok());
    assert!(tiles.fits_subgroups(32, 32).is_ok());
    for (smallest, largest) in [(4, 4), (64, 64), (8, 64), (12, 12)] {
        let err = tiles.fits_subgroups(smallest, largest).unwrap_err().to_string();
        assert!(err.contains("expected subgroups of at least 8 threads"), "{err}");
    }
    for odd in [F32Tiles { row_groups: 3, ..tiles }, F32Tiles { rows_per_thread: 6, ..tiles }] {
        assert!(odd.check().unwrap_err().to_string().contains("row groups"));
    }
}

/// Version 11 splits each f32 input into two f16s on the GPU: an input that f16 cannot hold is
/// an error on upload that names it, never an infinity in the output; f16's largest number
/// is accepted and comes out as f32 would have it.
#[test]
fn version_11_refuses_an_input_that_f16_cannot_hold() {
    let Some(gpu) = gpu::for_tests().filter(|gpu| gpu.has_tensor_cores()) else { return };
    let p = Problem::random(&ProblemSpec::new(1, 1, 17, 17, 64), 5);
    let kernel = Kernel::<V11>::new(&gpu.device, 64).unwrap();
    let mut v = p.v.clone();
    v[[0, 0, 3, 5]] = 70000.0;
    let err = attention_on(&gpu.device, &gpu.queue, &kernel, &p.q, &p.k, &v, &p.options)
        .expect_err("70000 is beyond f16");
    let text = err.to_string();
    assert!(text.contains("V[0, 0, 3, 5] = 70000") && text.contains("f16"), "{text}");
    v[[0, 0, 3, 5]] = 65504.0;
    let expected = oracle::expected(&p.q, &p.k, &v, &p.options).unwrap();
    let out = attention_on(&gpu.device, &gpu.queue, &kernel, &p.q, &p.k, &v, &p.options).unwrap();
    check_output(&out, &expected, V11::about().tolerance).unwrap();
}

/// Version 11 on values below f16's smallest normal number (2^-14, here about 1e-5) and equal
/// weights (Q = 0): its error model holds each number's pair to 2^-34 there, so the split
/// must keep the bits f16's subnormals lose (a `hi` of 0 below 2^-14 kept only 11 of them).
#[test]
fn version_11_keeps_values_below_f16s_normal_range() {
    let Some(gpu) = gpu::for_tests().filter(|gpu| gpu.has_tensor_cores()) else { return };
    let mut p = Problem::random(&ProblemSpec::new(1, 2, 70, 90, 64), 9);
    p.q.fill(0.0);
    p.v.mapv_inplace(|x| x * 1e-5);
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    let kernel = Kernel::<V11>::new(&gpu.device, 64).unwrap();
    let out = attention_on(&gpu.device, &gpu.queue, &kernel, &p.q, &p.k, &p.v, &p.options).unwrap();
    check_output(&out, &expected, V11::about().tolerance).unwrap();
}
