//! The tiny checkpoint against what PyTorch's transformers computed for it in float64
//! (`checkpoint/make_tiny.py`; its output is `checkpoint/tiny/reference.safetensors` and
//! `tokenizer_cases.json`), with lesson 01's attention (the course-wide tests in
//! `tests/model.rs` run the same checks with every registered version).

use lesson12::pytorch::Answers;
use lesson12::{Attention, Tokenizer, checks, tiny_checkpoint};

#[test]
fn every_layer_and_the_logits_match_pytorch() {
    checks::matches_pytorch(&Attention::naive()).unwrap();
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
    checks::greedy_matches_pytorch(&Attention::naive()).unwrap();
}

#[test]
fn cached_decoding_equals_recomputing_the_whole_sequence() {
    checks::cache_equals_whole_sequence(&Attention::naive()).unwrap();
}
