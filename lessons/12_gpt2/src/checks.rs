//! The model's checks for one attention backend, each an `Err` that says what differs: against
//! PyTorch's answers for the tiny checkpoint, greedy generation, and the cache against whole
//! sequences. This lesson's tests run them with lesson 01's attention (and a GPU kernel of
//! lesson 09); the course-wide tests (`tests/model.rs`) run them with every version the
//! registry lists.

use ndarray::{Array2, s};
use reference::Storage;

use crate::pytorch::{Answers, relative_error, tolerance};
use crate::{Attention, Config, Gpt2, ModelError, Session, Trace, generate, tiny_checkpoint};

/// The tiny checkpoint, read from its files.
pub fn tiny_model() -> Result<Gpt2, String> {
    Gpt2::from_folder(&tiny_checkpoint()).map_err(text)
}

fn text(error: ModelError) -> String {
    error.to_string()
}

/// PyTorch's hidden states and logits for the tiny checkpoint, named as transformers names
/// them, in the order a [`Trace`] holds them.
pub fn pytorch_trace(
    answers: &Answers,
    layers: usize,
) -> Result<Vec<(String, Array2<f64>)>, String> {
    let names = (0..=layers).map(|i| format!("hidden_states.{i}")).chain(["logits".to_string()]);
    names.map(|name| Ok((name.clone(), answers.matrix(&name).map_err(text)?))).collect()
}

/// A model's trace in f64, named as [`pytorch_trace`] names PyTorch's.
pub fn as_expected(trace: &Trace) -> Vec<(String, Array2<f64>)> {
    let named = trace.hidden.iter().enumerate().map(|(i, h)| (format!("hidden_states.{i}"), h));
    named
        .chain([("logits".to_string(), &trace.logits)])
        .map(|(n, x)| (n, x.mapv(f64::from)))
        .collect()
}

/// `ours` against `expected` (each layer's residual stream, then the logits), or a message
/// naming the first that is further than `allowed`, relative to its largest value: the layers
/// before it agree, so look there first.
pub fn compare_traces(
    ours: &Trace,
    expected: &[(String, Array2<f64>)],
    allowed: f64,
) -> Result<(), String> {
    let named = ours.hidden.iter().chain([&ours.logits]);
    for ((name, expected), ours) in expected.iter().zip(named) {
        let error = relative_error(ours.view(), expected.view());
        if error > allowed {
            return Err(format!(
                "{name} is {error:.2e} from the expected (relative to its largest value); at \
                 most {allowed:.1e} allowed. Layers before it agree: look there first."
            ));
        }
    }
    Ok(())
}

/// Every layer and the logits of the tiny checkpoint with `attention`, against PyTorch's.
pub fn matches_pytorch(attention: &Attention) -> Result<(), String> {
    let model = tiny_model()?;
    let answers = Answers::load().map_err(text)?;
    let tokens = answers.ids("input_ids").map_err(text)?;
    let trace = model.trace(&tokens, attention).map_err(text)?;
    let expected = pytorch_trace(&answers, model.config.n_layer)?;
    compare_traces(&trace, &expected, tolerance(attention.storage()))
}

/// Greedy generation from the tiny checkpoint's prompt with `attention`, with and without the
/// cache, gives PyTorch's tokens. Only with f32 storage: PyTorch's greedy choices win by 0.037
/// or more, beyond f32's error but not beyond f16 or bf16 rounding of the attention inputs
/// (`Ok` without checking for those).
pub fn greedy_matches_pytorch(attention: &Attention) -> Result<(), String> {
    if attention.storage() != Storage::F32 {
        return Ok(());
    }
    let model = tiny_model()?;
    let answers = Answers::load().map_err(text)?;
    let (prompt, expected) =
        (answers.ids("prompt_ids").map_err(text)?, answers.ids("generated").map_err(text)?);
    for cached in [true, false] {
        let tokens = generate(&model, attention, &prompt, expected.len(), cached).map_err(text)?;
        if tokens != expected {
            return Err(format!("cached: {cached}: {tokens:?}, PyTorch's {expected:?}"));
        }
    }
    Ok(())
}

/// Feeding the tiny checkpoint's tokens to a [`Session`] in pieces (a prompt of 5, one token at
/// a time, a chunk) gives the logits of one pass over the whole sequence: both are f32 sums of
/// the same terms in different orders (measured: 1e-6 of the largest logit at most).
pub fn cache_equals_whole_sequence(attention: &Attention) -> Result<(), String> {
    let model = tiny_model()?;
    let tokens = Answers::load().map_err(text)?.ids("input_ids").map_err(text)?;
    let full = model.logits(&tokens, attention).map_err(text)?;
    let mut session = Session::new(&model, attention).map_err(text)?;
    let mut feed = |piece: &[u32]| session.feed(piece).map_err(text);
    pieces_equal_whole(&full, &tokens, &[5, 6, 7, 8, 11], attention.storage(), &mut feed)?;
    holds_every_token(session.len(), tokens.len())
}

/// `Err` unless a session holds every token fed to it.
fn holds_every_token(held: usize, fed: usize) -> Result<(), String> {
    if held == fed { Ok(()) } else { Err(format!("the session holds {held} of {fed} tokens")) }
}

/// Feeds tokens to a session's cache and returns their logits.
pub type Feed<'a> = dyn FnMut(&[u32]) -> Result<Array2<f32>, String> + 'a;

/// The logits of `tokens` fed in pieces ending at each of `ends` (then the rest), each against
/// the rows of `full` for the same tokens, within the error model of `storage`.
pub fn pieces_equal_whole(
    full: &Array2<f32>,
    tokens: &[u32],
    ends: &[usize],
    storage: Storage,
    feed: &mut Feed,
) -> Result<(), String> {
    let largest = full.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let allowed = tolerance(storage) as f32 * largest;
    let mut start = 0;
    for &end in ends.iter().chain([&tokens.len()]) {
        let logits = feed(&tokens[start..end])?;
        let expected = full.slice(s![start..end, ..]);
        let worst = logits.iter().zip(expected).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        if worst > allowed {
            return Err(format!(
                "tokens {start}..{end} fed to the cache give logits {worst:.2e} from the whole \
                 sequence's (at most {allowed:.1e})"
            ));
        }
        start = end;
    }
    Ok(())
}

/// A random model of `heads` heads of `head_dim` channels, 2 layers, 300 tokens, 48
/// positions.
pub fn random_model(heads: usize, head_dim: usize) -> Gpt2 {
    let config = Config {
        vocab_size: 300,
        n_positions: 48,
        n_embd: heads * head_dim,
        n_layer: 2,
        n_head: heads,
        n_inner: 4 * heads * head_dim,
        layer_norm_epsilon: 1e-5,
    };
    Gpt2::random(config, 7)
}

/// `n` token ids below `vocab`, spread over it.
pub fn some_tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 97 + 13) % vocab) as u32).collect()
}

/// The checks of the GPU model ([`crate::gpu::GpuGpt2`]) for one attention kernel.
#[cfg(feature = "gpu")]
pub mod on_gpu {
    use gpu::Gpu;
    use gpu::attention::KernelVersion;
    use reference::Storage;

    use super::*;
    use crate::gpu::{GpuGpt2, GpuSession};

    /// The tiny checkpoint on the GPU with `kernel`, every layer and the logits against
    /// PyTorch's: `Ok(false)` where the kernel does not take the checkpoint's head dim (16).
    pub fn matches_pytorch(kernel: &KernelVersion, gpu: &'static Gpu) -> Result<bool, String> {
        let model = tiny_model()?;
        let Ok(on_gpu) = GpuGpt2::new(&model, kernel, gpu) else { return Ok(false) };
        let answers = Answers::load().map_err(text)?;
        let tokens = answers.ids("input_ids").map_err(text)?;
        let expected = pytorch_trace(&answers, model.config.n_layer)?;
        let trace = on_gpu.trace(&tokens).map_err(text)?;
        compare_traces(&trace, &expected, tolerance(on_gpu.storage()))?;
        Ok(true)
    }

    /// A random model of `heads` heads of `head_dim` on the GPU with `kernel`, against the CPU
    /// model with lesson 01's attention: `Ok(false)` where the kernel does not take the head
    /// dim (said on stderr).
    pub fn matches_the_cpu_model(
        kernel: &KernelVersion,
        gpu: &'static Gpu,
        (heads, head_dim): (usize, usize),
    ) -> Result<bool, String> {
        let model = random_model(heads, head_dim);
        let tokens = some_tokens(37, model.config.vocab_size);
        let expected = as_expected(&model.trace(&tokens, &Attention::naive()).map_err(text)?);
        let on_gpu = match GpuGpt2::new(&model, kernel, gpu) {
            Ok(on_gpu) => on_gpu,
            Err(e) => {
                eprintln!("{} at D = {head_dim}: {e}", kernel.about.name);
                return Ok(false);
            }
        };
        let trace = on_gpu.trace(&tokens).map_err(text)?;
        compare_traces(&trace, &expected, tolerance(on_gpu.storage()))?;
        Ok(true)
    }

    /// Greedy generation on the GPU with `kernel`, with and without the device's cache, gives
    /// PyTorch's tokens (f32 storage only, as on the CPU; `Ok` without checking otherwise, or
    /// where the kernel does not take the checkpoint's head dim).
    pub fn greedy_matches_pytorch(kernel: &KernelVersion, gpu: &'static Gpu) -> Result<(), String> {
        let model = tiny_model()?;
        let Ok(on_gpu) = GpuGpt2::new(&model, kernel, gpu) else { return Ok(()) };
        if on_gpu.storage() != Storage::F32 {
            return Ok(());
        }
        let answers = Answers::load().map_err(text)?;
        let (prompt, expected) =
            (answers.ids("prompt_ids").map_err(text)?, answers.ids("generated").map_err(text)?);
        for cached in [true, false] {
            let tokens = on_gpu.generate(&prompt, expected.len(), cached).map_err(text)?;
            if tokens != expected {
                return Err(format!("cached: {cached}: {tokens:?}, PyTorch's {expected:?}"));
            }
        }
        Ok(())
    }

    /// Feeding the device's cache in pieces (a prompt, single tokens with `Nq = 1 < Nkv`, then
    /// chunks) equals one pass over the sequence, for a random model with `kernel` (`Ok` where
    /// the kernel does not take its head dim, 64).
    pub fn cache_equals_whole_sequence(
        kernel: &KernelVersion,
        gpu: &'static Gpu,
    ) -> Result<(), String> {
        let model = random_model(2, 64);
        let tokens = some_tokens(30, model.config.vocab_size);
        let Ok(on_gpu) = GpuGpt2::new(&model, kernel, gpu) else { return Ok(()) };
        let full = on_gpu.logits(&tokens).map_err(text)?;
        let mut session = GpuSession::new(&on_gpu).map_err(text)?;
        let mut feed = |piece: &[u32]| session.feed(piece).map_err(text);
        pieces_equal_whole(&full, &tokens, &[5, 6, 7, 19], on_gpu.storage(), &mut feed)?;
        holds_every_token(session.len(), tokens.len())
    }
}
