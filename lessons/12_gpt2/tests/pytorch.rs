//! The tiny checkpoint against what PyTorch's transformers computed for it in float64
//! (`checkpoint/make_tiny.py`; its output is `checkpoint/tiny/reference.safetensors` and
//! `tokenizer_cases.json`).

use lesson12::pytorch::{Answers, relative_error, tolerance};
use lesson12::{Attention, Gpt2, Session, Tokenizer, generate, tiny_checkpoint};
use reference::Storage;

#[test]
fn every_layer_and_the_logits_match_pytorch_with_every_cpu_backend() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let reference = Answers::load().unwrap();
    let tokens = reference.ids("input_ids").unwrap();
    for attention in Attention::every_cpu() {
        let allowed = tolerance(attention.storage());
        let trace = model.trace(&tokens, &attention).unwrap();
        let named = trace.hidden.iter().enumerate().map(|(i, h)| (format!("hidden_states.{i}"), h));
        for (name, ours) in named.chain([("logits".to_string(), &trace.logits)]) {
            let error = relative_error(ours.view(), reference.matrix(&name).unwrap().view());
            assert!(
                error <= allowed,
                "{}: {name} is {error:.2e} from PyTorch's (relative to its largest value); \
                 at most {allowed:.1e} allowed. Layers before it agree: look there first.",
                attention.name()
            );
        }
    }
}

#[test]
fn tokenizer_gives_transformers_ids() {
    let tokenizer = Tokenizer::from_folder(&tiny_checkpoint()).unwrap();
    let cases = std::fs::read_to_string(tiny_checkpoint().join("tokenizer_cases.json")).unwrap();
    let cases: serde_json::Value = serde_json::from_str(&cases).unwrap();
    for case in cases.as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<u32> =
            case["ids"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap() as u32).collect();
        assert_eq!(tokenizer.encode(text), ids, "{text:?}");
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    }
    let reference = Answers::load().unwrap();
    assert_eq!(
        tokenizer.encode(&reference.text("text").unwrap()),
        reference.ids("input_ids").unwrap()
    );
    assert_eq!(
        tokenizer.encode(&reference.text("prompt").unwrap()),
        reference.ids("prompt_ids").unwrap()
    );
}

#[test]
fn greedy_generation_gives_pytorchs_tokens_with_and_without_the_cache() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let reference = Answers::load().unwrap();
    let (prompt, expected) =
        (reference.ids("prompt_ids").unwrap(), reference.ids("generated").unwrap());
    // f32 storage only: PyTorch's greedy choices win by 0.037 or more, beyond f32's error
    // but not beyond f16 or bf16 rounding of the attention inputs.
    for attention in Attention::every_cpu().iter().filter(|a| a.storage() == Storage::F32) {
        for cached in [true, false] {
            let tokens = generate(&model, attention, &prompt, expected.len(), cached).unwrap();
            assert_eq!(tokens, expected, "{} (cached: {cached})", attention.name());
        }
    }
}

#[test]
fn cached_decoding_equals_recomputing_the_whole_sequence() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let tokens = Answers::load().unwrap().ids("input_ids").unwrap();
    for attention in Attention::every_cpu() {
        let full = model.logits(&tokens, &attention).unwrap();
        let largest = full.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let mut session = Session::new(&model, &attention).unwrap();
        // A prompt of 5 tokens, then one token at a time, then a chunk of 3.
        let mut start = 0;
        for end in [5, 6, 7, 8, 11, tokens.len()] {
            let logits = session.feed(&tokens[start..end]).unwrap();
            let expected = full.slice(ndarray::s![start..end, ..]);
            let worst = logits.iter().zip(expected).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            // Both are f32 computations of the same sums in different orders (measured:
            // 1e-6 of the largest logit at most).
            let allowed = tolerance(attention.storage()) as f32 * largest;
            assert!(
                worst <= allowed,
                "{}: tokens {start}..{end} fed to the cache give logits {worst:.2e} from the \
                 whole sequence's (at most {allowed:.1e})",
                attention.name()
            );
            start = end;
        }
        assert_eq!(session.len(), tokens.len());
    }
}
