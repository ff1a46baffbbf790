//! The GPU model with lesson 09's attention kernel on the test adapter (lavapipe in CI): the
//! tiny checkpoint against PyTorch's answers, random models at head dims 64, 128 and 10
//! against the CPU model, generation with the device's cache, the linear kernel alone, and the
//! errors. The course-wide tests (`tests/model.rs`) run the same checks with every registered
//! kernel version.

use gpu::Gpu;
use gpu::attention::KernelVersion;
use lesson12::checks::{on_gpu, random_model};
use lesson12::gpu::{GpuGpt2, GpuSession};
use lesson12::{Gpt2, ModelError, tiny_checkpoint};
use ndarray::Array2;

/// Lesson 09's kernel (it takes every head dim) with the shared device.
fn runnable() -> Option<(&'static Gpu, KernelVersion)> {
    Some((gpu::for_tests()?, lesson09::versions().remove(0)))
}

#[test]
fn the_tiny_checkpoint_matches_pytorch() {
    let Some((gpu, kernel)) = runnable() else { return };
    assert!(on_gpu::matches_pytorch(&kernel, gpu).unwrap(), "lesson 09 takes D = 16");
}

#[test]
fn random_models_at_head_dims_10_64_and_128_match_the_cpu_model() {
    let Some((gpu, kernel)) = runnable() else { return };
    // And 3 heads of 10: 30 channels and an MLP of 120, sizes no tile of the linear layers
    // divides.
    for sizes in [(2, 64), (1, 128), (3, 10)] {
        assert!(on_gpu::matches_the_cpu_model(&kernel, gpu, sizes).unwrap(), "{sizes:?}");
    }
}

#[test]
fn greedy_generation_gives_pytorchs_tokens_with_and_without_the_devices_cache() {
    let Some((gpu, kernel)) = runnable() else { return };
    on_gpu::greedy_matches_pytorch(&kernel, gpu).unwrap();
}

#[test]
fn feeding_the_devices_cache_in_pieces_equals_one_pass_over_the_sequence() {
    let Some((gpu, kernel)) = runnable() else { return };
    on_gpu::cache_equals_whole_sequence(&kernel, gpu).unwrap();
}

#[test]
fn bad_tokens_are_refused_before_anything_is_cached() {
    let Some((gpu, kernel)) = runnable() else { return };
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let on_gpu = GpuGpt2::new(&model, &kernel, gpu).unwrap();
    let mut session = GpuSession::new(&on_gpu).unwrap();
    let expect_input_error = |result: Result<Array2<f32>, ModelError>, says: &str| {
        let message = result.unwrap_err().to_string();
        assert!(message.contains(says), "{message}");
    };
    expect_input_error(session.feed(&[]), "at least one token");
    expect_input_error(session.feed(&[3, 502]), "token id 502");
    expect_input_error(session.feed(&[1; 65]), "n_positions = 64");
    assert_eq!(session.len(), 0);
    // The session still works, and gives what a fresh one gives.
    let logits = session.feed(&[3, 4, 5]).unwrap();
    assert_eq!(logits, on_gpu.logits(&[3, 4, 5]).unwrap());
    expect_input_error(session.feed(&[1; 62]), "positions 3..65");
}

#[test]
fn a_model_in_a_16_bit_precision_strategy_is_refused() {
    let Some((gpu, kernel)) = runnable() else { return };
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let mixed = model.with_precision(lesson12::Precision::ALL[1]);
    let message = GpuGpt2::new(&mixed, &kernel, gpu).err().expect("refused").to_string();
    assert!(message.contains("an f32 model"), "{message}");
}

#[test]
fn token_embeddings_larger_than_a_buffer_binding_are_refused_with_the_limit() {
    let Some((gpu, kernel)) = runnable() else { return };
    let (limit, _) = gpu::buffers::largest_binding(&gpu.device);
    if limit > 256 << 20 {
        return; // a large GPU: too much memory to fill for this check (lavapipe: 128 MiB)
    }
    let mut config = random_model(1, 64).config;
    config.vocab_size = (limit / (4 * 64)) as usize + 1;
    let model = Gpt2::random(config, 1);
    let message = GpuGpt2::new(&model, &kernel, gpu).err().expect("refused").to_string();
    assert!(
        message.contains("token embeddings") && message.contains(&limit.to_string()),
        "{message}"
    );
}

/// The linear kernel with each tile height (1, 2 and 4 row blocks of 16), both weight layouts
/// and every epilogue, on sizes no tile divides, against ndarray: within the rounding of a sum
/// of `in` products in f32 (`in u` times the sum of their magnitudes, doubled for margin).
#[test]
fn the_linear_kernel_with_every_tile_height_layout_and_epilogue() {
    use lesson12::gpu::{Epilogue, linear_on};
    use lesson12::model::gelu;
    use reference::problem::SplitMix64;
    let Some(gpu) = gpu::for_tests() else { return };
    let mut rng = SplitMix64::new(12);
    let mut random = |rows, cols| Array2::from_shape_simple_fn((rows, cols), || rng.normal());
    let (rows, inner, cols) = (70, 37, 131);
    let (x, w, y) = (random(rows, inner), random(inner, cols), random(rows, cols));
    let bias = random(1, cols).remove_axis(ndarray::Axis(0));
    let exact = x.dot(&w) + &bias;
    let magnitude = x.mapv(f32::abs).dot(&w.mapv(f32::abs)) + &bias.mapv(f32::abs);
    let u = f32::EPSILON / 2.0;
    for blocks in [1, 2, 4] {
        for transposed in [false, true] {
            let stored =
                if transposed { w.t().as_standard_layout().into_owned() } else { w.clone() };
            for epilogue in [Epilogue::Store, Epilogue::Gelu, Epilogue::Add] {
                let out =
                    linear_on(gpu, &x, &stored, &bias, &y, transposed, epilogue, blocks).unwrap();
                let expected = match epilogue {
                    Epilogue::Store => exact.clone(),
                    Epilogue::Gelu => exact.mapv(gelu),
                    Epilogue::Add => &y + &exact,
                };
                for ((i, j), &got) in out.indexed_iter() {
                    // GELU's slope is below 1.13; the residual add rounds once more.
                    let allowed = 2.0 * (inner as f32 * u * magnitude[[i, j]] * 1.13)
                        + 4.0 * u * (expected[[i, j]].abs() + y[[i, j]].abs());
                    assert!(
                        (got - expected[[i, j]]).abs() <= allowed,
                        "{blocks} row blocks, transposed {transposed}, {epilogue:?}: y[{i}, {j}] = \
                         {got}, expected {} within {allowed:.1e}",
                        expected[[i, j]]
                    );
                }
            }
        }
    }
}

#[test]
fn the_linear_kernel_refuses_a_tile_height_or_shapes_it_cannot_take() {
    use lesson12::gpu::{Epilogue, linear_on};
    let Some(gpu) = gpu::for_tests() else { return };
    let (x, w, y) = (Array2::zeros((3, 4)), Array2::zeros((4, 5)), Array2::zeros((3, 5)));
    let bias = ndarray::Array1::zeros(5);
    let call = |w: &Array2<f32>, y: &Array2<f32>, blocks| {
        linear_on(gpu, &x, w, &bias, y, false, Epilogue::Store, blocks).unwrap_err().to_string()
    };
    assert!(call(&w, &y, 3).contains("expected 1, 2 or 4"));
    assert!(call(&w, &y, 0).contains("expected 1, 2 or 4"));
    assert!(call(&Array2::zeros((5, 5)), &y, 1).contains("expected x [rows, in]"));
    assert!(call(&w, &Array2::zeros((3, 4)), 1).contains("expected x [rows, in]"));
}
