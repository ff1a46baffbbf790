//! Exercise 12: GPT-2's LayerNorm and one transformer block on a whole sequence (the
//! warm-up), then a batch of sequences of different lengths decoding together, each at its
//! own positions and with its own cached keys (the main task).

pub mod mutants;
mod solution;

use std::rc::Rc;

use ndarray::{Array2, Array3, Axis, s};
use proptest::prelude::*;

use lesson12::model::{Block, LayerNorm};
use lesson12::pytorch::{Answers, relative_error, tolerance};
use lesson12::{Attention, Config, Gpt2, ModelError, Monitor};
use reference::problem::SplitMix64;
use reference::{AttentionOptions, ForwardVersion, Storage};

use crate::check::{Check, for_all, main_task};
use crate::forward::CASES;

pub use solution::BatchSession;

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const LAYER_NORM: &str =
    "LayerNorm in f32, mean then variance: rows of large values and large offsets";
/// Check name.
pub const BLOCK: &str =
    "one block over a whole sequence: PyTorch's output for the tiny checkpoint, and random models";
/// Check name.
pub const BATCH_ONE: &str =
    "one sequence, a prompt then a token at a time: the logits of one pass over it";
/// Check name.
pub const BATCH_RAGGED: &str = "sequences of different lengths fed together in chunks, some \
     idle: each gets the logits of one pass over its own tokens";
/// Check name.
pub const BATCH_ERRORS: &str = "a token outside the vocabulary, too many positions, the wrong \
     number of sequences: an error, and no sequence advanced";

/// What a batch did at one step: each sequence's logits `[n_b, V]` (or the error), and every
/// sequence's length after the step.
#[derive(Clone, Debug)]
pub struct Step {
    /// The logits of each sequence's new tokens, or the error's message.
    pub logits: Result<Vec<Array2<f32>>, String>,
    /// Every sequence's length after the step.
    pub lens: Vec<usize>,
}

/// Feeds each step of `steps` (the new tokens of each sequence) to a batch of `sequences`
/// sequences with `feed`, recording what [`Step`] holds: how `hidden.rs` runs the learner's
/// `Batch`.
pub fn drive<B>(
    mut batch: B,
    mut feed: impl FnMut(&mut B, &[&[u32]]) -> Result<Vec<Array2<f32>>, ModelError>,
    len: impl Fn(&B, usize) -> usize,
    sequences: usize,
    steps: &[Vec<Vec<u32>>],
) -> Vec<Step> {
    let mut done = Vec::new();
    for step in steps {
        let tokens: Vec<&[u32]> = step.iter().map(Vec::as_slice).collect();
        let logits = feed(&mut batch, &tokens).map_err(|e| e.to_string());
        done.push(Step { logits, lens: (0..sequences).map(|b| len(&batch, b)).collect() });
    }
    done
}

crate::adapter::exercise_trait! {
    /// What a solution of exercise 12 provides.
    pub trait Exercise12;
    /// LayerNorm of each row of `x [N, C]`.
    fn layer_norm(norm: &LayerNorm, x: &Array2<f32>) -> Array2<f32>;
    /// One block of `model` over a whole sequence `x [N, C]`, attention by `attention`.
    fn block_forward(
        model: &Gpt2,
        block: &Block,
        attention: &ForwardVersion,
        x: &Array2<f32>,
    ) -> Result<Array2<f32>, ModelError>;
    /// A batch of `sequences` sequences fed `steps` in turn (see [`drive`]); an error if the
    /// batch cannot be made.
    fn run_batch(
        model: &Gpt2,
        attention: &ForwardVersion,
        sequences: usize,
        steps: &[Vec<Vec<u32>>],
    ) -> Result<Vec<Step>, ModelError>;
}

/// The lesson's implementation: its LayerNorm and block, and [`BatchSession`].
pub fn lesson() -> Functions {
    Functions {
        layer_norm: Box::new(|norm, x| norm.forward(x, lesson06::Dtype::F32)),
        block_forward: Box::new(|model, block, attention, x| {
            let (q, k, v) = model.queries_keys_values(block, x);
            let heads = attend(attention, q, k, v, true)?;
            let mut x = x.clone();
            model.finish_block(block, 0, &mut x, heads, &mut Monitor::default());
            Ok(x)
        }),
        run_batch: Box::new(|model, attention, sequences, steps| {
            let batch = BatchSession::new(model, attention, sequences)?;
            Ok(drive(batch, BatchSession::feed, BatchSession::len, sequences, steps))
        }),
    }
}

/// `attention`'s output for one sequence's heads, `q [H, n, D]` over `k`, `v [H, len, D]`,
/// with the bottom-right causal mask or none.
pub(crate) fn attend(
    attention: &ForwardVersion,
    q: Array3<f32>,
    k: Array3<f32>,
    v: Array3<f32>,
    causal: bool,
) -> Result<Array3<f32>, ModelError> {
    let [q, k, v] = [q, k, v].map(|x| x.insert_axis(Axis(0)));
    let options = if causal { AttentionOptions::causal() } else { AttentionOptions::default() };
    let out = (attention.forward)(&q, &k, &v, &options)?;
    Ok(out.o.index_axis_move(Axis(0), 0))
}

/// Every check of exercise 12, in the order `cargo grade ex12` runs them.
pub fn checks(solution: impl Exercise12 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let x = s.clone();
    let layer_norm = Check::new(
        LAYER_NORM,
        "Keep the statistics in f32 and take two passes: the mean, then the mean of (x - mean)^2. \
         One pass, E[x^2] - mean^2, loses every digit when the mean is large against the spread; \
         sums in f16 overflow past 65504.",
        move || for_all(CASES, layer_norm_cases(), |case| check_layer_norm(x.as_ref(), &case)),
    );
    let x = s.clone();
    let block = Check::new(
        BLOCK,
        "ln_1, then c_attn (x W + b with W stored [in, out]: no transpose, also for the square \
         c_proj), Q, K and V split into heads, causal attention, the heads side by side, c_proj, \
         the residual add; then ln_2, c_fc, GELU (tanh form), c_proj and the residual add.",
        move || {
            tiny_block(x.as_ref())?;
            for_all(CASES, model_cases(), |case| random_block(x.as_ref(), &case))
        },
    );
    let x = s.clone();
    let one = Check::new(
        BATCH_ONE,
        "Each fed token sits at the position after the sequence's cached ones: embed it at \
         len(seq) + i. Append the new keys and values to the cache first, then let the new \
         queries attend over everything cached, themselves included.",
        move || {
            let cases = (model_cases(), 1usize..=8, 0usize..=8);
            for_all(CASES, cases, |(model, prompt, singles)| {
                let chunks = vec![std::iter::once(prompt).chain(vec![1; singles]).collect()];
                check_schedule(x.as_ref(), &model, &chunks, &[0])
            })
        },
    );
    let x = s.clone();
    let ragged = Check::new(
        BATCH_RAGGED,
        "Each sequence has its own length: its tokens start at its own position, its queries \
         see only its own cached keys, and a chunk of several tokens needs the causal mask even \
         after a prompt (query i of n sees keys 0 ..= len - n + i).",
        move || {
            let chunks =
                proptest::collection::vec(proptest::collection::vec(1usize..=4, 1..=4), 2..=3);
            let delays = proptest::collection::vec(0usize..=2, 3);
            for_all(CASES, (model_cases(), chunks, delays), |(model, chunks, delays)| {
                check_schedule(x.as_ref(), &model, &chunks, &delays)
            })
        },
    );
    let x = s;
    let errors = Check::new(
        BATCH_ERRORS,
        "Check every sequence's tokens (ids below vocab_size, positions below n_positions) and \
         the number of sequences before changing anything: a bad token in sequence 1 must not \
         leave sequence 0's tokens in its cache.",
        move || bad_batches(x.as_ref()),
    );
    let mut checks = vec![layer_norm, block];
    checks.extend(main_task(vec![one, ragged, errors]));
    checks
}

/// A LayerNorm case: `rows` rows of `channels` values `offset + scale * normal`.
#[derive(Clone, Debug)]
struct NormCase {
    rows: usize,
    channels: usize,
    scale: f32,
    offset: f32,
    seed: u64,
}

fn layer_norm_cases() -> impl Strategy<Value = NormCase> {
    let scales = prop_oneof![Just(1.0f32), Just(40.0), Just(3e4)];
    let offsets = prop_oneof![Just(0.0f32), Just(1e3), Just(1e4)];
    (1usize..=3, 2usize..=80, scales, offsets, any::<u64>()).prop_map(
        |(rows, channels, scale, offset, seed)| NormCase { rows, channels, scale, offset, seed },
    )
}

/// The learner's LayerNorm against one in f64, within the rounding of an f32 two-pass one:
/// a mean off by up to `C u max|x|` (summing `C` values), and the rest off by `(C + 6) u`
/// relative, doubled for margin (`u = 2^-24`).
fn check_layer_norm(x: &impl Exercise12, case: &NormCase) -> Result<(), String> {
    let mut rng = SplitMix64::new(case.seed);
    let c = case.channels;
    let input =
        Array2::from_shape_simple_fn((case.rows, c), || case.offset + case.scale * rng.normal());
    let gain = ndarray::Array1::from_shape_simple_fn(c, || 1.0 + 0.1 * rng.normal());
    let bias = ndarray::Array1::from_shape_simple_fn(c, || 0.1 * rng.normal());
    let norm = LayerNorm { gain, bias, epsilon: 1e-5 };
    let ours = x.layer_norm(&norm, &input);
    if ours.dim() != input.dim() {
        return Err(format!("output shape {:?}; expected {:?}", ours.dim(), input.dim()));
    }
    let u = f64::from(f32::EPSILON) / 2.0;
    for (i, row) in input.rows().into_iter().enumerate() {
        let values: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        let mean = values.iter().sum::<f64>() / c as f64;
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
        let sigma = (variance + 1e-5).sqrt();
        let largest = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for j in 0..c {
            let normalised = (values[j] - mean) / sigma;
            let (g, b) = (f64::from(norm.gain[j]), f64::from(norm.bias[j]));
            let expected = normalised * g + b;
            let allowed = 2.0
                * (g.abs()
                    * (c as f64 * u * largest / sigma + (c + 6) as f64 * u * normalised.abs())
                    + 2.0 * u * (expected.abs() + b.abs()));
            let got = f64::from(ours[[i, j]]);
            let within = (got - expected).abs() <= allowed; // false for NaN
            if !within {
                return Err(format!(
                    "row {i}, channel {j}: {got} where {expected:.7} (f64) was expected, at most \
                     {allowed:.1e} away; the row's mean is {mean:.3}, its standard deviation \
                     {sigma:.3}"
                ));
            }
        }
    }
    Ok(())
}

/// A small random model and tokens for it.
#[derive(Clone, Debug)]
struct ModelCase {
    heads: usize,
    head_dim: usize,
    tokens: usize,
    seed: u64,
}

impl ModelCase {
    fn model(&self) -> Gpt2 {
        let c = self.heads * self.head_dim;
        let config = Config {
            vocab_size: 61,
            n_positions: 40,
            n_embd: c,
            n_layer: 2,
            n_head: self.heads,
            n_inner: 4 * c,
            layer_norm_epsilon: 1e-5,
        };
        Gpt2::random(config, self.seed)
    }
}

/// Models of 1 to 3 heads of 16 to 24 channels. Not fewer: a LayerNorm over a handful of
/// channels divides by the spread of a few numbers, which is now and then near 0, and the
/// rounding of two correct computations then differs by far more than f32's error elsewhere
/// (measured: 2.7e-4 of the largest logit with 2 channels, in 1 case of about 2000).
fn model_cases() -> impl Strategy<Value = ModelCase> {
    (1usize..=3, 16usize..=24, 1usize..=20, any::<u64>())
        .prop_map(|(heads, head_dim, tokens, seed)| ModelCase { heads, head_dim, tokens, seed })
}

/// `n` token ids below `vocab`, from `seed`.
fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(vocab) as u32).collect()
}

/// Lesson 01's attention, the one the checks hand the learner's code.
fn naive() -> ForwardVersion {
    lesson01::versions().into_iter().next().expect("lesson 01 registers its attention")
}

/// `ours` against `expected` within [`tolerance`] of f32 relative to `expected`'s largest
/// value, or a message naming `what`.
fn close(ours: &Array2<f32>, expected: &Array2<f32>, what: &str) -> Result<(), String> {
    if ours.dim() != expected.dim() {
        return Err(format!("{what}: shape {:?}; expected {:?}", ours.dim(), expected.dim()));
    }
    if expected.is_empty() {
        return Ok(());
    }
    let error = relative_error(ours.view(), expected.mapv(f64::from).view());
    let allowed = tolerance(Storage::F32);
    let within = error <= allowed; // false for NaN
    if !within {
        return Err(format!(
            "{what}: {error:.2e} from the expected, relative to its largest value (at most \
             {allowed:.0e})"
        ));
    }
    Ok(())
}

/// Block 0 of the tiny checkpoint on PyTorch's embeddings gives PyTorch's output.
fn tiny_block(x: &impl Exercise12) -> Result<(), String> {
    let text = |e: ModelError| e.to_string();
    let model = Gpt2::from_folder(&lesson12::tiny_checkpoint()).map_err(text)?;
    let answers = Answers::load().map_err(text)?;
    let embeddings = answers.matrix("hidden_states.0").map_err(text)?.mapv(|v| v as f32);
    let ours = x.block_forward(&model, &model.blocks[0], &naive(), &embeddings).map_err(text)?;
    let expected = answers.matrix("hidden_states.1").map_err(text)?.mapv(|v| v as f32);
    close(&ours, &expected, "the tiny checkpoint's block 0 on PyTorch's embeddings (37 tokens)")
}

/// Each block of a random model on its embeddings, against the lesson's.
fn random_block(x: &impl Exercise12, case: &ModelCase) -> Result<(), String> {
    let model = case.model();
    let tokens = random_tokens(case.tokens, model.config.vocab_size, case.seed);
    let embeddings = model.embed(&tokens, 0).map_err(|e| e.to_string())?;
    for (layer, block) in model.blocks.iter().enumerate() {
        let ours =
            x.block_forward(&model, block, &naive(), &embeddings).map_err(|e| e.to_string())?;
        let expected =
            lesson().block_forward(&model, block, &naive(), &embeddings).expect("lesson");
        close(&ours, &expected, &format!("block {layer} on {} tokens", tokens.len()))?;
    }
    Ok(())
}

/// Runs a schedule: sequence `b` is fed chunks of `chunks[b]` tokens in turn, after
/// `delays[b]` idle steps; each step's logits must be the rows of one pass over that
/// sequence's tokens so far, and the lengths must follow.
fn check_schedule(
    x: &impl Exercise12,
    case: &ModelCase,
    chunks: &[Vec<usize>],
    delays: &[usize],
) -> Result<(), String> {
    let model = case.model();
    let sequences = chunks.len();
    let totals: Vec<usize> = chunks.iter().map(|c| c.iter().sum()).collect();
    let tokens: Vec<Vec<u32>> = (0..sequences)
        .map(|b| random_tokens(totals[b], model.config.vocab_size, case.seed ^ b as u64))
        .collect();
    let steps_needed = (0..sequences).map(|b| delays[b] + chunks[b].len()).max().unwrap_or(0);
    let mut steps = vec![vec![Vec::new(); sequences]; steps_needed];
    let mut spans = vec![vec![0..0; sequences]; steps_needed];
    for b in 0..sequences {
        let mut start = 0;
        for (i, &n) in chunks[b].iter().enumerate() {
            steps[delays[b] + i][b] = tokens[b][start..start + n].to_vec();
            spans[delays[b] + i][b] = start..start + n;
            start += n;
        }
    }
    let naive_attention = naive();
    let done =
        x.run_batch(&model, &naive_attention, sequences, &steps).map_err(|e| e.to_string())?;
    if done.len() != steps.len() {
        return Err(format!("{} steps recorded; expected {}", done.len(), steps.len()));
    }
    let attention = Attention::naive();
    let full: Vec<Array2<f32>> =
        tokens.iter().map(|t| model.logits(t, &attention).expect("the lesson's model")).collect();
    for (s, (step, spans)) in done.iter().zip(&spans).enumerate() {
        let logits = step.logits.as_ref().map_err(|e| format!("step {s}: {e}"))?;
        if logits.len() != sequences {
            return Err(format!(
                "step {s}: logits of {} sequences; expected {sequences}",
                logits.len()
            ));
        }
        for (b, span) in spans.iter().enumerate() {
            let what = format!(
                "step {s}, sequence {b}: tokens {}..{} after chunks {:?} (delay {})",
                span.start, span.end, chunks[b], delays[b]
            );
            close(&logits[b], &full[b].slice(s![span.clone(), ..]).to_owned(), &what)?;
        }
        let expected_lens: Vec<usize> = (0..sequences).map(|b| prefix_len(&steps, s, b)).collect();
        if step.lens != expected_lens {
            return Err(format!(
                "after step {s}: lengths {:?}; expected {expected_lens:?}",
                step.lens
            ));
        }
    }
    Ok(())
}

/// Tokens fed to sequence `b` in steps `0..=s`.
fn prefix_len(steps: &[Vec<Vec<u32>>], s: usize, b: usize) -> usize {
    steps[..=s].iter().map(|step| step[b].len()).sum()
}

/// Bad steps on the tiny checkpoint, between good ones: each an error that changes nothing.
fn bad_batches(x: &impl Exercise12) -> Result<(), String> {
    let model = Gpt2::from_folder(&lesson12::tiny_checkpoint()).map_err(|e| e.to_string())?;
    let v = model.config.vocab_size as u32;
    let steps = vec![
        vec![vec![1, 2, 3], vec![4]],
        vec![vec![5], vec![v]],    // a token outside the vocabulary
        vec![vec![5]],             // one sequence's tokens for two sequences
        vec![vec![7; 62], vec![]], // positions 3..65 of 64
        vec![vec![6], vec![7]],
    ];
    let done = x.run_batch(&model, &naive(), 2, &steps).map_err(|e| e.to_string())?;
    let expect_error = |s: usize, says: &str| -> Result<(), String> {
        match &done[s].logits {
            Ok(_) => Err(format!("step {s} ({:?}) returned logits; expected an error", steps[s])),
            Err(message) if !message.contains(says) => {
                Err(format!("step {s}: the error {message:?} does not say {says:?}"))
            }
            Err(_) if done[s].lens != [3, 1] => Err(format!(
                "after the error of step {s} the lengths are {:?}; expected [3, 1], as before",
                done[s].lens
            )),
            Err(_) => Ok(()),
        }
    };
    if done.len() != steps.len() {
        return Err(format!("{} steps recorded; expected {}", done.len(), steps.len()));
    }
    done[0].logits.as_ref().map_err(|e| format!("step 0: {e}"))?;
    expect_error(1, &v.to_string())?;
    expect_error(2, "2")?;
    expect_error(3, "64")?;
    let last = done[4].logits.as_ref().map_err(|e| format!("step 4, after the errors: {e}"))?;
    let attention = Attention::naive();
    for (b, all) in [vec![1, 2, 3, 6], vec![4, 7]].iter().enumerate() {
        let full = model.logits(all, &attention).map_err(|e| e.to_string())?;
        let what = format!("step 4, sequence {b} (tokens {all:?}), after the refused steps");
        close(&last[b], &full.slice(s![all.len() - 1.., ..]).to_owned(), &what)?;
    }
    Ok(())
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::ModelBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::ModelBug>(checks(lesson()), checks)
}
