//! Lesson 09 against the f64 oracle and the shared contract, on the GPU (lavapipe in CI), over
//! random shapes and random tile sizes. The test bodies are the ones every CPU stage runs
//! (`testkit::checks`): only the forward function handed to them differs.

use gpu::GpuError;
use gpu::attention::Prepared;
use lesson09::{
    FlashAttention, MAX_BLOCK_KV, TileSizes, attention_on, largest_key_tile, workgroup_bytes,
};
use ndarray::Array4;
use proptest::prelude::*;
use reference::Forward;
use reference::{
    AttentionError, AttentionOptions, Problem, ProblemSpec, Tolerance, check_agreement,
    check_output, oracle,
};
use testkit::checks::{
    check_against_oracle, check_rejects_bad_inputs, check_rejects_non_finite_inputs, run,
};
use testkit::strategies::{Case, ShapeLimits, cases, config};

/// Lesson 09 with fixed tiles on the test device, in the shape every stage shares.
fn on_gpu(tiles: TileSizes) -> impl Forward {
    let gpu = gpu::for_tests().expect("checked by the test before");
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        attention_on(&gpu.device, &gpu.queue, q, k, v, o, tiles)
    }
}

/// Random tiles that the kernel accepts for this case's head dim on this device: `Br` up to
/// 256 threads, `Bc` up to 64 keys and as many as fit in workgroup memory.
fn tiles_for(case: &Case, br: usize, bc: usize) -> TileSizes {
    let gpu = gpu::for_tests().expect("checked by the test before");
    let bc = bc.min(largest_key_tile(&gpu.device, case.spec.head_dim));
    TileSizes::new(br.min(256), bc).unwrap()
}

/// Tile sizes before [`tiles_for`] fits them: 1 sometimes, often small (several tiles and a
/// tail at N <= 200), up to 256 query rows and 64 keys. (One-thread workgroups are slow on
/// lavapipe, so 1 is drawn less often than on the CPU.)
fn raw_tiles() -> impl Strategy<Value = (usize, usize)> {
    let size = |max: usize| prop_oneof![1 => Just(1), 3 => 2..=16usize, 4 => 2..=max];
    (size(256), size(MAX_BLOCK_KV))
}

/// The f32 error model: the same for the GPU as for the CPU (measured on both, see
/// `reference::compare::SAFETY_FACTOR`).
const TOLERANCE: Tolerance = Tolerance::F32;

testkit::contract_tests! {
    forward: |case, (br, bc)| on_gpu(tiles_for(&case, br, bc)),
    drawn: raw_tiles(),
    example: on_gpu(lesson09::default_tiles()),
    tolerance: TOLERANCE,
    limits: ShapeLimits::GPU,
    cases: (48, 16, 8),
    when: gpu::for_tests().is_some(),
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn agrees_with_the_cpu_lesson_03_on_the_same_tiles(case in cases(ShapeLimits::GPU), (br, bc) in raw_tiles()) {
        if gpu::for_tests().is_none() { return Ok(()); }
        let tiles = tiles_for(&case, br, bc);
        let p = case.problem();
        let cpu = lesson03::attention(&p.q, &p.k, &p.v, &p.options, tiles).unwrap();
        let gpu = run(&on_gpu(tiles), &p).unwrap();
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        check_agreement(&gpu, &cpu, &expected, TOLERANCE).map_err(|e| TestCaseError::fail(format!("{tiles:?}\n{e}")))?;
    }

    #[test]
    fn output_does_not_depend_on_tile_sizes(case in cases(ShapeLimits::GPU), a in raw_tiles(), b in raw_tiles()) {
        if gpu::for_tests().is_none() { return Ok(()); }
        let (a, b) = (tiles_for(&case, a.0, a.1), tiles_for(&case, b.0, b.1));
        let p = case.problem();
        let (out_a, out_b) = (run(&on_gpu(a), &p).unwrap(), run(&on_gpu(b), &p).unwrap());
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        check_agreement(&out_a, &out_b, &expected, TOLERANCE).map_err(|e| TestCaseError::fail(format!("{a:?} vs {b:?}\n{e}")))?;
    }

}

/// The cases a wrong tail bound or causal offset would get wrong, every run: `Nq` and `Nkv`
/// one past a tile, causal with `Nq > Nkv` (rows that see nothing) and `Nq < Nkv`.
#[test]
fn tail_tiles_and_causal_offsets() {
    if gpu::for_tests().is_none() {
        return;
    }
    let tiles = TileSizes::new(16, 8).unwrap();
    for (q_len, kv_len) in [(17, 9), (9, 17), (16, 8), (1, 33), (33, 1)] {
        for causal in [false, true] {
            let case =
                Case { spec: ProblemSpec::new(1, 2, q_len, kv_len, 5).causal(causal), seed: 3 };
            check_against_oracle(&on_gpu(tiles), &case, TOLERANCE)
                .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        }
    }
}

#[test]
fn rejects_what_the_kernel_or_the_device_cannot_run() {
    let Some(gpu) = gpu::for_tests() else { return };
    let device = &gpu.device;
    let err = |tiles: TileSizes, d: usize| match FlashAttention::new(device, tiles, d) {
        Ok(_) => panic!("{tiles:?} with D = {d} was accepted"),
        Err(e) => e,
    };
    let tiles = |br, bc| TileSizes::new(br, bc).unwrap();

    assert_eq!(
        err(tiles(64, 32), 129),
        AttentionError::UnsupportedHeadDim { head_dim: 129, max: 128 }
    );
    assert_eq!(
        err(tiles(64, 65), 8).to_string(),
        "tile size for key columns (Bc) is 65; expected at most 64 for this kernel"
    );
    // 64 keys x 128 dims x 4 bytes x (K and V) = 64 KiB: more than any device of the course has.
    let available = device.limits().max_compute_workgroup_storage_size as usize;
    assert_eq!(
        err(tiles(64, 64), 128),
        AttentionError::TilesDoNotFit { needed: workgroup_bytes(tiles(64, 64), 128), available }
    );
    let too_many_threads = device.limits().max_compute_invocations_per_workgroup as usize + 1;
    assert!(matches!(
        GpuError::of(&err(tiles(too_many_threads, 8), 8)),
        Some(GpuError::ExceedsDeviceLimit {
            limit_name: "max_compute_invocations_per_workgroup",
            ..
        })
    ));
}

#[test]
fn more_slices_than_one_dispatch_may_launch_is_an_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let limit = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
    let p = Problem::random(&ProblemSpec::new(limit + 1, 1, 1, 1, 1), 0);
    let err = run(&on_gpu(lesson09::default_tiles()), &p).unwrap_err();
    assert!(
        matches!(
            GpuError::of(&err),
            Some(GpuError::ExceedsDeviceLimit {
                limit_name: "max_compute_workgroups_per_dimension",
                ..
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("workgroups"), "{err}");
}

/// Lavapipe silently cuts off any shader invocation after 65535 loop iterations. The host
/// counts the kernel's iterations and refuses a problem beyond the limit; at the limit the
/// answer is still right. `Br = Bc = 1` and `D = 128` is the most iterations per key (38).
#[test]
fn lavapipe_loop_limit_is_refused_not_silently_wrong() {
    let Some(gpu) = gpu::for_tests() else { return };
    if !gpu.info.name.contains("llvmpipe") {
        return; // real GPUs have no such limit
    }
    let tiles = TileSizes::new(1, 1).unwrap();
    let limit = gpu::kernel::LAVAPIPE_LOOP_LIMIT;
    let largest = (1..4000)
        .take_while(|&n| {
            let shape = ProblemSpec::new(1, 1, 1, n, 128).shape();
            lesson09::loop_iterations(tiles, &shape) <= limit
        })
        .last()
        .unwrap();
    let at_limit = Case { spec: ProblemSpec::new(1, 1, 1, largest, 128), seed: 1 };
    check_against_oracle(&on_gpu(tiles), &at_limit, TOLERANCE).unwrap();
    let beyond = ProblemSpec::new(1, 1, 1, largest + 1, 128);
    let err = run(&on_gpu(tiles), &Problem::random(&beyond, 1)).unwrap_err();
    assert!(err.to_string().contains("LP_MAX_TGSI_LOOP_ITERATIONS"), "{err}");
}

#[test]
fn a_kernel_compiled_for_another_head_dim_is_an_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let kernel = FlashAttention::new(&gpu.device, lesson09::default_tiles(), 8).unwrap();
    let p = Problem::random(&ProblemSpec::new(1, 1, 3, 3, 16), 0);
    let err = gpu::attention::attention_on(
        &gpu.device,
        &gpu.queue,
        &kernel,
        &p.q,
        &p.k,
        &p.v,
        &p.options,
    )
    .unwrap_err();
    assert!(err.to_string().contains("compiled for head_dim = 8"), "{err}");
}

/// The kernel loads exactly the tiles of keys some row of its workgroup sees: all of them
/// without the mask, a staircase with it (counted by the shader itself).
#[test]
fn causal_tiles_right_of_the_diagonal_are_never_loaded() {
    let Some(gpu) = gpu::for_tests() else { return };
    let tiles = TileSizes::new(16, 8).unwrap();
    for (q_len, kv_len, causal) in [(40, 40, true), (40, 70, true), (70, 40, true), (40, 70, false)]
    {
        let p = Problem::random(&ProblemSpec::new(1, 2, q_len, kv_len, 8).causal(causal), 1);
        let (out, loaded) = lesson09::tiles_loaded_with_shader(
            &gpu.device,
            &gpu.queue,
            lesson09::SHADER,
            &p.q,
            &p.k,
            &p.v,
            &p.options,
            tiles,
        )
        .unwrap();
        let shape = ProblemSpec::new(1, 2, q_len, kv_len, 8).shape();
        for ((_, query_tile), &count) in loaded.indexed_iter() {
            let last_row = ((query_tile + 1) * 16).min(q_len) - 1;
            let expected = shape.visible_keys(last_row, causal).div_ceil(8);
            assert_eq!(
                count as usize, expected,
                "Nq={q_len} Nkv={kv_len} causal={causal}, query tile {query_tile}"
            );
        }
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        reference::assert_close(&out, &expected, TOLERANCE);
    }
}

/// A kernel that does not write the tile counts would leave binding 6 out of its layout; the
/// host says what is missing instead of failing to bind.
#[test]
fn a_kernel_without_the_tile_counts_is_a_clear_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let write = "        tiles_loaded[slice * grid.x + tile.x] = my_tiles_loaded;\n";
    assert!(lesson09::SHADER.contains(write));
    let without = lesson09::SHADER.replace(write, "");
    let err = FlashAttention::from_source(&gpu.device, &without, lesson09::default_tiles(), 8)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("never writes tiles_loaded (@binding(6))"), "{err}");
}

#[test]
fn a_prepared_kernel_runs_many_times_on_buffers_uploaded_once() {
    let Some(gpu) = gpu::for_tests() else { return };
    let (device, queue) = (&gpu.device, &gpu.queue);
    let p = Problem::random(&ProblemSpec::new(2, 2, 70, 45, 24).causal(true), 11);
    let kernel = FlashAttention::new(device, lesson09::default_tiles(), 24).unwrap();
    let prepared = Prepared::new(device, &kernel, &p.q, &p.k, &p.v, &p.options).unwrap();
    let mut outputs = Vec::new();
    for _ in 0..3 {
        prepared.run(device, queue, None).unwrap();
        outputs.push(prepared.read_output(device, queue).unwrap());
    }
    let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
    check_output(&outputs[0], &expected, TOLERANCE).unwrap();
    assert!(outputs.iter().all(|out| *out == outputs[0]), "a second run changed O or L");
}

#[test]
fn every_registered_version_rejects_bad_input() {
    let Some(gpu) = gpu::for_tests() else { return };
    for version in lesson09::versions() {
        let forward = version.forward_on(gpu);
        check_rejects_bad_inputs(&forward).unwrap();
        check_rejects_non_finite_inputs(&forward).unwrap();
    }
}

#[test]
fn every_barrier_is_in_uniform_control_flow() {
    // A barrier that only some threads of a workgroup reach is undefined behaviour in WGSL;
    // naga 30 accepts it and lavapipe may run it "correctly", so it is checked statically.
    gpu::uniformity::check_barriers(lesson09::SHADER).unwrap();
}
