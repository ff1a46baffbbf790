//! The model's sizes, read from the checkpoint's `config.json`.

use serde_json::Value;

use crate::ModelError;

/// GPT-2's sizes. GPT-2 small (`openai-community/gpt2`): 50257 tokens, 1024 positions, 768
/// channels, 12 layers of 12 heads.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `V`, tokens in the vocabulary.
    pub vocab_size: usize,
    /// The longest sequence: rows of the position table.
    pub n_positions: usize,
    /// `C`, the channels of the residual stream.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// `H`, attention heads; each has `D = C / H` channels.
    pub n_head: usize,
    /// The MLP's hidden width, `4 C` unless the config says otherwise.
    pub n_inner: usize,
    /// Added to the variance in every LayerNorm.
    pub layer_norm_epsilon: f32,
}

impl Config {
    /// GPT-2 small's sizes (`openai-community/gpt2`, 124M parameters): 50257 tokens, 1024
    /// positions, 768 channels, 12 layers of 12 heads of 64.
    pub fn gpt2_small() -> Self {
        Self {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: 3072,
            layer_norm_epsilon: 1e-5,
        }
    }

    /// `D = C / H`.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Checks that `tokens` can be fed at positions `start..start + N`: at least one token,
    /// every id below `vocab_size`, and every position below `n_positions`.
    pub fn check_tokens(&self, tokens: &[u32], start: usize) -> Result<(), ModelError> {
        let (v, p) = (self.vocab_size, self.n_positions);
        if tokens.is_empty() {
            return Err(ModelError::input("tokens", "none", "at least one token"));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= v) {
            return Err(ModelError::input(
                "tokens",
                format!("token id {bad}"),
                format!("ids below vocab_size = {v}"),
            ));
        }
        if start + tokens.len() > p {
            return Err(ModelError::input(
                "tokens",
                format!("positions {start}..{}", start + tokens.len()),
                format!("at most n_positions = {p} tokens in a sequence"),
            ));
        }
        Ok(())
    }

    /// Reads `config.json` as transformers writes it. Errors name the key: a size that is
    /// missing, 0 or not a whole number, heads that do not divide the channels, and the
    /// options this implementation does not have (another activation, untied embeddings,
    /// attention scaled by the layer index or not at all).
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let json: Value = serde_json::from_str(text).map_err(|error| {
            ModelError::checkpoint(
                "config.json",
                format!("invalid JSON ({error})"),
                "a JSON object",
            )
        })?;
        let size = |key: &str| -> Result<usize, ModelError> {
            match json.get(key).and_then(Value::as_u64) {
                Some(n) if n > 0 => Ok(n as usize),
                _ => Err(ModelError::checkpoint(
                    format!("config.json: {key}"),
                    json.get(key).map_or("nothing".into(), Value::to_string),
                    "a whole number of at least 1",
                )),
            }
        };
        if let Some(kind) = json.get("model_type").and_then(Value::as_str)
            && kind != "gpt2"
        {
            return Err(ModelError::checkpoint("config.json: model_type", kind, "\"gpt2\""));
        }
        let (n_embd, n_head) = (size("n_embd")?, size("n_head")?);
        if !n_embd.is_multiple_of(n_head) {
            return Err(ModelError::checkpoint(
                "config.json: n_head",
                format!("{n_head} heads for n_embd = {n_embd} channels"),
                "a number of heads that divides n_embd",
            ));
        }
        let n_inner = match json.get("n_inner") {
            None | Some(Value::Null) => n_embd.saturating_mul(4),
            Some(_) => size("n_inner")?,
        };
        let epsilon = json.get("layer_norm_epsilon").map_or(Some(1e-5), Value::as_f64);
        let layer_norm_epsilon = match epsilon {
            Some(e) if e > 0.0 && e.is_finite() => e as f32,
            _ => {
                return Err(ModelError::checkpoint(
                    "config.json: layer_norm_epsilon",
                    json["layer_norm_epsilon"].to_string(),
                    "a positive number",
                ));
            }
        };
        require(&json, "activation_function", Value::from("gelu_new"))?;
        require(&json, "tie_word_embeddings", Value::from(true))?;
        require(&json, "scale_attn_weights", Value::from(true))?;
        require(&json, "scale_attn_by_inverse_layer_idx", Value::from(false))?;
        Ok(Self {
            vocab_size: size("vocab_size")?,
            n_positions: size("n_positions")?,
            n_embd,
            n_layer: size("n_layer")?,
            n_head,
            n_inner,
            layer_norm_epsilon,
        })
    }
}

/// An option that GPT-2 has and this implementation follows: absent (transformers' default
/// is `wanted`) or equal to `wanted`.
fn require(json: &Value, key: &str, wanted: Value) -> Result<(), ModelError> {
    match json.get(key) {
        None => Ok(()),
        Some(value) if *value == wanted => Ok(()),
        Some(value) => Err(ModelError::checkpoint(
            format!("config.json: {key}"),
            value.to_string(),
            format!("{wanted} (GPT-2's; this implementation has no other)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"model_type": "gpt2", "vocab_size": 502, "n_positions": 64,
        "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": null, "layer_norm_epsilon": 1e-05,
        "activation_function": "gelu_new", "tie_word_embeddings": true}"#;

    #[test]
    fn reads_gpt2_sizes_and_defaults() {
        let config = Config::from_json(TINY).unwrap();
        assert_eq!((config.vocab_size, config.n_positions, config.n_embd), (502, 64, 64));
        assert_eq!((config.n_layer, config.n_head, config.head_dim()), (2, 4, 16));
        assert_eq!((config.n_inner, config.layer_norm_epsilon), (256, 1e-5));
    }

    #[test]
    fn gpt2_small_is_what_its_config_json_says() {
        // openai-community/gpt2's config.json, the keys this reader looks at.
        let hub = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
            "n_ctx": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
            "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new"}"#;
        assert_eq!(Config::from_json(hub).unwrap(), Config::gpt2_small());
    }

    fn refusal(edit: (&str, &str)) -> String {
        let text = TINY.replace(edit.0, edit.1);
        Config::from_json(&text).unwrap_err().to_string()
    }

    #[test]
    fn refuses_what_it_cannot_run_and_says_why() {
        let cases = [
            (("\"n_head\": 4", "\"n_head\": 5"), "5 heads for n_embd = 64"),
            (("\"n_layer\": 2", "\"n_layer\": 0"), "n_layer: found 0"),
            (("\"n_embd\": 64,", ""), "n_embd: found nothing"),
            (("\"vocab_size\": 502", "\"vocab_size\": 5.5"), "vocab_size: found 5.5"),
            (("gelu_new", "relu"), "activation_function: found \"relu\""),
            (("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false"), "tie_word"),
            (("\"gpt2\"", "\"llama\""), "model_type: found llama"),
            (("1e-05", "-1"), "layer_norm_epsilon: found -1"),
            (("{", "["), "invalid JSON"),
        ];
        for (edit, says) in cases {
            let message = refusal(edit);
            assert!(message.contains(says), "{edit:?}: {message}");
        }
    }
}
