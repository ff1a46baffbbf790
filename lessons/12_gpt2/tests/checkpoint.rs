//! Checkpoints as they come (with or without transformers' prefix, in f16) and as they
//! should not: each refused with the tensor or key at fault and what was expected.

use std::collections::HashMap;

use lesson12::{Attention, Config, Gpt2, ModelError, generate, tiny_checkpoint};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// The tiny checkpoint's config and tensors, to edit: name to (dtype, shape, bytes).
struct Checkpoint {
    config: String,
    tensors: HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>,
}

impl Checkpoint {
    fn tiny() -> Self {
        let folder = tiny_checkpoint();
        let config = std::fs::read_to_string(folder.join("config.json")).unwrap();
        let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let tensors = file
            .tensors()
            .into_iter()
            .map(|(name, t)| (name, (t.dtype(), t.shape().to_vec(), t.data().to_vec())))
            .collect();
        Self { config, tensors }
    }

    fn bytes(&self) -> Vec<u8> {
        let views = self.tensors.iter().map(|(name, (dtype, shape, data))| {
            (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap())
        });
        safetensors::serialize(views, None).unwrap()
    }

    fn load(&self) -> Result<Gpt2, ModelError> {
        Gpt2::from_checkpoint(Config::from_json(&self.config)?, &self.bytes())
    }

    fn rename(&mut self, from: &str, to: &str) {
        let tensor = self.tensors.remove(from).expect(from);
        self.tensors.insert(to.to_string(), tensor);
    }

    /// Transposes a 2-d f32 tensor in place (shape and data).
    fn transpose(&mut self, name: &str) {
        let (_, shape, data) = self.tensors.get_mut(name).expect(name);
        let (rows, columns) = (shape[0], shape[1]);
        let value = |i: usize| &data[4 * i..4 * i + 4];
        let moved: Vec<u8> = (0..rows * columns)
            .flat_map(|i| value((i % rows) * columns + i / rows).to_vec())
            .collect();
        *data = moved;
        *shape = vec![columns, rows];
    }
}

fn refusal(checkpoint: &Checkpoint) -> String {
    checkpoint.load().expect_err("a bad checkpoint loaded").to_string()
}

fn tokens() -> Vec<u32> {
    (0..20).map(|i| (i * 37 % 502) as u32).collect()
}

#[test]
fn gpt2s_own_layout_without_the_prefix_loads_the_same_model() {
    let mut checkpoint = Checkpoint::tiny();
    let names: Vec<String> = checkpoint.tensors.keys().cloned().collect();
    for name in names {
        checkpoint.rename(&name, name.strip_prefix("transformer.").unwrap());
    }
    // Older GPT-2 files also store each layer's causal mask as a buffer, and the head.
    let mask = (Dtype::F32, vec![1, 1, 4, 4], vec![0; 64]);
    checkpoint.tensors.insert("h.0.attn.bias".into(), mask);
    let wte = checkpoint.tensors["wte.weight"].clone();
    checkpoint.tensors.insert("lm_head.weight".into(), wte);
    let naive = Attention::naive();
    let ours = checkpoint.load().unwrap().logits(&tokens(), &naive).unwrap();
    let original =
        Gpt2::from_folder(&tiny_checkpoint()).unwrap().logits(&tokens(), &naive).unwrap();
    assert_eq!(ours, original);
}

#[test]
fn f16_and_bf16_checkpoints_load_as_f32() {
    for (dtype, to_bytes) in [
        (Dtype::F16, (|x| half::f16::from_f32(x).to_le_bytes()) as fn(f32) -> [u8; 2]),
        (Dtype::BF16, |x| half::bf16::from_f32(x).to_le_bytes()),
    ] {
        let mut checkpoint = Checkpoint::tiny();
        for (stored, _, data) in checkpoint.tensors.values_mut() {
            let numbers = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()));
            *data = numbers.flat_map(to_bytes).collect();
            *stored = dtype;
        }
        let model = checkpoint.load().unwrap();
        let logits = model.logits(&tokens(), &Attention::naive()).unwrap();
        assert!(logits.iter().all(|x| x.is_finite()), "{dtype:?}");
    }
}

#[test]
fn missing_misshapen_and_unexpected_tensors_are_named() {
    let mut missing = Checkpoint::tiny();
    missing.tensors.remove("transformer.h.1.ln_2.bias");
    let message = refusal(&missing);
    assert!(message.contains("transformer.h.1.ln_2.bias: found no such tensor"), "{message}");

    // A Conv1D weight stored as torch.nn.Linear's [out, in].
    let mut linear = Checkpoint::tiny();
    linear.transpose("transformer.h.0.attn.c_attn.weight");
    let message = refusal(&linear);
    assert!(
        message.contains(
            "c_attn.weight: found shape [192, 64]; expected [64, 192] (Conv1D stores [in, out]"
        ),
        "{message}"
    );

    let mut extra = Checkpoint::tiny();
    extra
        .tensors
        .insert("transformer.h.0.attn.rotary.weight".into(), (Dtype::F32, vec![1], vec![0; 4]));
    let message = refusal(&extra);
    assert!(
        message.contains("h.0.attn.rotary.weight: found a tensor the config does not describe"),
        "{message}"
    );

    let mut integers = Checkpoint::tiny();
    integers.tensors.get_mut("transformer.ln_f.bias").unwrap().0 = Dtype::I32;
    let message = refusal(&integers);
    assert!(message.contains("ln_f.bias: found dtype I32"), "{message}");

    let mut not_finite = Checkpoint::tiny();
    let data = &mut not_finite.tensors.get_mut("transformer.h.0.mlp.c_fc.weight").unwrap().2;
    data[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
    let message = refusal(&not_finite);
    assert!(
        message.contains("c_fc.weight: found NaN at element 3; expected finite weights"),
        "{message}"
    );

    let mut untied = Checkpoint::tiny();
    let mut head = untied.tensors["transformer.wte.weight"].clone();
    head.2[0] ^= 1;
    untied.tensors.insert("lm_head.weight".into(), head);
    let message = refusal(&untied);
    assert!(
        message.contains("lm_head.weight: found a head different from wte.weight"),
        "{message}"
    );

    let not_safetensors =
        Gpt2::from_checkpoint(Config::from_json(&Checkpoint::tiny().config).unwrap(), b"{}");
    assert!(not_safetensors.unwrap_err().to_string().contains("a safetensors file"));
}

#[test]
fn a_config_that_disagrees_with_the_weights_is_refused() {
    let cases = [
        (("\"n_layer\": 2", "\"n_layer\": 3"), "h.2.attn.c_attn.weight: found no such tensor"),
        (
            ("\"n_layer\": 2", "\"n_layer\": 1"),
            "h.1.attn.c_attn.bias: found a tensor the config does not describe",
        ),
        (
            ("\"n_embd\": 64", "\"n_embd\": 32"),
            "wte.weight: found shape [502, 64]; expected [502, 32] (vocab_size x n_embd)",
        ),
        (("\"vocab_size\": 502", "\"vocab_size\": 50257"), "expected [50257, 64]"),
        (
            ("\"n_positions\": 64", "\"n_positions\": 1024"),
            "wpe.weight: found shape [64, 64]; expected [1024, 64]",
        ),
        (
            ("\"n_inner\": null", "\"n_inner\": 128"),
            "c_fc.weight: found shape [64, 256]; expected [64, 128]",
        ),
    ];
    for ((from, to), says) in cases {
        let mut checkpoint = Checkpoint::tiny();
        assert!(checkpoint.config.contains(from), "{from}");
        checkpoint.config = checkpoint.config.replace(from, to);
        let message = refusal(&checkpoint);
        assert!(message.contains(says), "{to}: {message}");
    }
}

#[test]
fn bad_tokens_and_lengths_are_refused() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let naive = Attention::naive();
    let cases: [(&[u32], &str); 3] = [
        (&[1, 502, 3], "token id 502; expected ids below vocab_size = 502"),
        (&[], "found none; expected at least one token"),
        (&[7; 65], "positions 0..65; expected at most n_positions = 64"),
    ];
    for (tokens, says) in cases {
        let message = model.logits(tokens, &naive).unwrap_err().to_string();
        assert!(message.contains(says), "{message}");
    }
    let message = generate(&model, &naive, &[1; 60], 5, true).unwrap_err().to_string();
    assert!(message.contains("60 prompt tokens and 5 new ones"), "{message}");

    // A session refuses the token that would pass the last position, and keeps its state.
    let mut session = lesson12::Session::new(&model, &naive).unwrap();
    session.feed(&[5; 64]).unwrap();
    let message = session.feed(&[5]).unwrap_err().to_string();
    assert!(message.contains("positions 64..65"), "{message}");
    assert_eq!(session.len(), 64);

    let message =
        Gpt2::from_folder(std::path::Path::new("no/such/folder")).unwrap_err().to_string();
    assert!(message.contains("cannot read no/such/folder/config.json"), "{message}");
}
