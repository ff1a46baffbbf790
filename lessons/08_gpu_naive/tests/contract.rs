//! Lesson 08 against the f64 oracle and the shared contract, on the GPU (lavapipe in CI). The
//! test bodies are the ones every CPU stage runs (`testkit::checks`).

use lesson08::{NaiveAttention, attention_on, score_bytes};
use ndarray::Array4;
use reference::Forward;
use reference::{AttentionOptions, Problem, ProblemSpec, Tolerance};
use testkit::checks::{check_against_oracle, run};
use testkit::strategies::{Case, ShapeLimits};

/// Lesson 08 on the test device, in the shape every stage shares.
fn on_gpu() -> impl Forward {
    let gpu = gpu::for_tests().expect("checked by the test before");
    move |q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>, o: &AttentionOptions| {
        attention_on(&gpu.device, &gpu.queue, q, k, v, o)
    }
}

testkit::contract_tests! {
    forward: on_gpu(),
    tolerance: Tolerance::F32,
    limits: ShapeLimits::GPU,
    cases: (48, 48, 8),
    when: gpu::for_tests().is_some(),
}

/// A causal mask shifted by one, or a row bound that ignores the last key, changes these.
#[test]
fn edge_shapes_and_causal_offsets() {
    if gpu::for_tests().is_none() {
        return;
    }
    for (q_len, kv_len) in [(17, 9), (9, 17), (1, 33), (33, 1), (16, 16)] {
        for causal in [false, true] {
            let case =
                Case { spec: ProblemSpec::new(1, 2, q_len, kv_len, 5).causal(causal), seed: 3 };
            check_against_oracle(&on_gpu(), &case, Tolerance::F32)
                .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        }
    }
}

/// The score matrix must fit in one storage buffer binding: a problem whose `S` is one row too
/// large for this device is refused before anything is allocated. With `D = 1` the inputs stay
/// tiny while `S` (N x N floats) outgrows the limit.
#[test]
fn a_score_matrix_larger_than_a_buffer_binding_is_an_error() {
    let Some(gpu) = gpu::for_tests() else { return };
    let (limit, _) = gpu::buffers::largest_binding(&gpu.device);
    // The smallest square N whose N x N floats exceed the limit.
    let n = ((limit / 4) as f64).sqrt() as usize + 1;
    let spec = ProblemSpec::new(1, 1, n, n, 1);
    assert!(score_bytes(&spec.shape()) > limit);
    let err = run(&on_gpu(), &Problem::random(&spec, 0)).unwrap_err();
    match gpu::GpuError::of(&err) {
        Some(gpu::GpuError::ExceedsDeviceLimit { what, needed, limit: l, .. }) => {
            assert!(what.contains("score matrix S"), "{err}");
            assert_eq!((*needed, *l), (score_bytes(&spec.shape()), limit));
        }
        _ => panic!("expected GpuError::ExceedsDeviceLimit, got {err}"),
    }
}

#[test]
fn the_three_kernels_compile_and_name_their_buffers() {
    let Some(gpu) = gpu::for_tests() else { return };
    assert!(NaiveAttention::new(&gpu.device).is_ok());
    assert_eq!(score_bytes(&ProblemSpec::new(2, 3, 5, 7, 64).shape()), 4 * 2 * 3 * 5 * 7);
}
