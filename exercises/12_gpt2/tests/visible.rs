//! Small examples you can check by hand: `cargo test -p ex12 --test visible`.

use ex12::{Batch, block_forward, layer_norm};
use lesson12::model::LayerNorm;
use lesson12::pytorch::Answers;
use lesson12::{Attention, Gpt2, tiny_checkpoint};
use ndarray::{Array1, Array2, array, s};

fn plain_norm(c: usize) -> LayerNorm {
    LayerNorm { gain: Array1::ones(c), bias: Array1::zeros(c), epsilon: 0.0 }
}

fn largest_difference(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn layer_norm_centres_and_scales_each_row() {
    // Mean 2.5, variance 1.25: (x - 2.5) / 1.118.
    let out = layer_norm(&plain_norm(4), &array![[1.0, 2.0, 3.0, 4.0]]);
    let expected = array![[-1.3416408, -0.4472136, 0.4472136, 1.3416408]];
    assert!(largest_difference(&out, &expected) < 1e-6, "{out}");
}

#[test]
fn layer_norm_of_a_row_far_from_zero() {
    // Mean 10000, variance 1: the one-pass E[x^2] - mean^2 would subtract two numbers near 1e8.
    let out = layer_norm(&plain_norm(2), &array![[10001.0, 9999.0]]);
    assert!(largest_difference(&out, &array![[1.0, -1.0]]) < 1e-3, "{out}");
}

#[test]
fn block_0_of_the_tiny_checkpoint_gives_pytorchs_output() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let answers = Answers::load().unwrap();
    let embeddings = answers.matrix("hidden_states.0").unwrap().mapv(|v| v as f32);
    let naive = registry_naive();
    let out = block_forward(&model, &model.blocks[0], &naive, &embeddings).unwrap();
    let expected = answers.matrix("hidden_states.1").unwrap().mapv(|v| v as f32);
    assert!(largest_difference(&out, &expected) < 1e-4);
}

#[test]
fn a_prompt_then_one_token_gives_the_logits_of_one_pass() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let naive = registry_naive();
    let mut batch = Batch::new(&model, &naive, 1).unwrap();
    let prompt = batch.feed(&[&[10, 20, 30]]).unwrap();
    let next = batch.feed(&[&[40]]).unwrap();
    let full = model.logits(&[10, 20, 30, 40], &Attention::naive()).unwrap();
    assert!(largest_difference(&prompt[0], &full.slice(s![..3, ..]).to_owned()) < 1e-4);
    assert!(largest_difference(&next[0], &full.slice(s![3.., ..]).to_owned()) < 1e-4);
    assert_eq!(batch.len(0), 4);
}

#[test]
fn two_sequences_of_different_lengths_step_together() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let naive = registry_naive();
    let mut batch = Batch::new(&model, &naive, 2).unwrap();
    batch.feed(&[&[1, 2, 3, 4, 5], &[6]]).unwrap();
    let step = batch.feed(&[&[7], &[8]]).unwrap();
    let first = model.logits(&[1, 2, 3, 4, 5, 7], &Attention::naive()).unwrap();
    let second = model.logits(&[6, 8], &Attention::naive()).unwrap();
    assert!(largest_difference(&step[0], &first.slice(s![5.., ..]).to_owned()) < 1e-4);
    assert!(largest_difference(&step[1], &second.slice(s![1.., ..]).to_owned()) < 1e-4);
    assert!(batch.feed(&[&[1], &[9999]]).is_err());
    assert_eq!((batch.len(0), batch.len(1)), (6, 2));
}

/// Lesson 01's naive attention, as the grader passes it.
fn registry_naive() -> reference::ForwardVersion {
    lesson01::versions().into_iter().next().unwrap()
}
