//! GPT-2 in ndarray: embeddings, blocks of pre-LayerNorm attention and MLP, a final
//! LayerNorm, and the language-model head tied to the token embeddings.
//!
//! Shapes: `N` tokens, `C` channels, `H` heads of `D = C / H`, `V` vocabulary, `P` positions.
//! The residual stream `x` is `[N, C]` (one sequence; each row a token).

use std::path::Path;

use lesson11::{KeyValues, KvCache};
use ndarray::{Array1, Array2, Array3, ArrayView2, ArrayView3, Axis, s};
use rayon::prelude::*;
use reference::{AttentionOptions, ForwardVersion};

use crate::checkpoint::Tensors;
use crate::precision::{Dtype, Monitor, Precision, round, round_all};
use crate::{Config, ModelError};

/// A linear layer in GPT-2's `Conv1D` layout: `y = x W + b` with `W` stored `[in, out]`.
#[derive(Clone, Debug)]
pub struct Conv1d {
    /// `[in, out]`
    pub weight: Array2<f32>,
    /// `[out]`
    pub bias: Array1<f32>,
}

impl Conv1d {
    /// `x [N, in]` to `[N, out]`.
    pub fn forward(&self, x: &Array2<f32>) -> Array2<f32> {
        product(x, self.weight.view()) + &self.bias
    }
}

/// `x [N, in]` times `w [in, out]`, the columns of `w` shared among rayon's threads:
/// ndarray's own product runs on one core, and the model's time would be its matrix
/// products'. (Columns, not rows: each thread then reads only its part of the weights, which
/// is what a short sequence's time is made of.) Each element's sum is the one `x.dot(w)`
/// makes.
pub fn product(x: &Array2<f32>, w: ArrayView2<f32>) -> Array2<f32> {
    let cols = w.ncols().div_ceil(rayon::current_num_threads()).max(1);
    let blocks: Vec<_> = w.axis_chunks_iter(Axis(1), cols).collect();
    let products: Vec<Array2<f32>> = blocks.into_par_iter().map(|block| x.dot(&block)).collect();
    let mut out = Array2::zeros((x.nrows(), w.ncols()));
    for (mut block, part) in out.axis_chunks_iter_mut(Axis(1), cols).zip(&products) {
        block.assign(part);
    }
    out
}

/// LayerNorm over the channels, statistics in f32.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// `[C]`, the gain (transformers calls it `weight`).
    pub gain: Array1<f32>,
    /// `[C]`
    pub bias: Array1<f32>,
    /// Added to the variance.
    pub epsilon: f32,
}

// ANCHOR: layer_norm
impl LayerNorm {
    /// Each row `x_i [C]` to `(x_i - mean) / sqrt(var + eps) * gain + bias`, with the mean
    /// and the (biased) variance of the row's `C` values, summed in `stats` (f32 but for the
    /// aggressive strategy: a sum of squares in f16 passes 65504 once the values' root mean
    /// square passes `256 / sqrt(C)`).
    pub fn forward(&self, x: &Array2<f32>, stats: Dtype) -> Array2<f32> {
        let c = x.ncols() as f32;
        let sum = |values: &mut dyn Iterator<Item = f32>| {
            values.fold(0.0, |total, v| round(total + round(v, stats), stats))
        };
        let mut out = x.clone();
        for mut row in out.rows_mut() {
            let mean = round(sum(&mut row.iter().copied()) / c, stats);
            let variance = sum(&mut row.iter().map(|&v| (v - mean) * (v - mean))) / c;
            let inverse = 1.0 / (round(variance, stats) + self.epsilon).sqrt();
            row.zip_mut_with(&self.gain, |v, &g| *v = (*v - mean) * inverse * g);
            row += &self.bias;
        }
        out
    }
}
// ANCHOR_END: layer_norm

/// GPT-2's GELU (`gelu_new`): the tanh approximation
/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

/// One transformer block: `x += attn(ln_1(x))`, then `x += mlp(ln_2(x))`.
#[derive(Clone, Debug)]
pub struct Block {
    /// Before attention.
    pub ln_1: LayerNorm,
    /// `c_attn`: `[C, 3C]`, Q, K and V side by side.
    pub qkv: Conv1d,
    /// `attn.c_proj`: `[C, C]`, the heads' outputs back into the residual stream.
    pub attn_out: Conv1d,
    /// Before the MLP.
    pub ln_2: LayerNorm,
    /// `c_fc`: `[C, 4C]`.
    pub mlp_in: Conv1d,
    /// `mlp.c_proj`: `[4C, C]`.
    pub mlp_out: Conv1d,
}

/// GPT-2's weights and sizes.
#[derive(Clone, Debug)]
pub struct Gpt2 {
    /// The sizes.
    pub config: Config,
    /// `[V, C]`, token embeddings; also the language-model head (tied).
    pub wte: Array2<f32>,
    /// `[P, C]`, position embeddings.
    pub wpe: Array2<f32>,
    /// `n_layer` blocks.
    pub blocks: Vec<Block>,
    /// The final LayerNorm.
    pub ln_f: LayerNorm,
    /// Where the forward pass rounds to 16 bits ([`Gpt2::with_precision`]).
    pub precision: Precision,
}

/// How the model computes attention: any of the course's forward versions (every one takes
/// the contract's `[B, H, N, D]` and the bottom-right causal mask).
pub struct Attention {
    version: ForwardVersion,
}

impl Attention {
    /// A forward version of the course.
    pub fn new(version: ForwardVersion) -> Self {
        Self { version }
    }

    /// Lesson 01's naive attention, the baseline every other backend is compared with.
    pub fn naive() -> Self {
        Self::new(lesson01::versions().remove(0))
    }

    /// The version's name, as the registry gives it.
    pub fn name(&self) -> &'static str {
        self.version.about.name
    }

    /// The format the version rounds its inputs to (f16 and bf16 storage: lesson 06).
    pub fn storage(&self) -> reference::Storage {
        self.version.about.storage
    }

    // ANCHOR: attend
    /// Causal attention of the queries `q [H, n, D]` (the last `n` tokens) over the keys and
    /// values of every token so far, `k`, `v [H, len, D]`: `[H, n, D]`. The contract's
    /// bottom-right causal mask is what lets `n < len`: query `i` sees keys
    /// `0..=i + len - n`, its own position and every one before it.
    pub fn attend(
        &self,
        q: Array3<f32>,
        k: Array3<f32>,
        v: Array3<f32>,
    ) -> Result<Array3<f32>, ModelError> {
        let [q, k, v] = [q, k, v].map(|x| x.insert_axis(Axis(0)));
        let out = (self.version.forward)(&q, &k, &v, &AttentionOptions::causal())?;
        Ok(out.o.index_axis_move(Axis(0), 0))
    }
    // ANCHOR_END: attend
}

/// Every layer's residual stream and the logits of one forward pass.
#[derive(Clone, Debug)]
pub struct Trace {
    /// transformers' `hidden_states`: the embeddings, then the output of each block except
    /// the last, then the last block's output after the final LayerNorm; `n_layer + 1` of
    /// `[N, C]`.
    pub hidden: Vec<Array2<f32>>,
    /// `[N, V]`
    pub logits: Array2<f32>,
}

impl Gpt2 {
    /// Reads `config.json` and `model.safetensors` from a checkpoint's folder (as saved by
    /// transformers, or downloaded from the Hugging Face hub).
    pub fn from_folder(folder: &Path) -> Result<Self, ModelError> {
        let read = |name: &str| {
            let path = folder.join(name);
            std::fs::read(&path).map_err(|error| ModelError::io(&path, error))
        };
        let config = read("config.json")?;
        let config = std::str::from_utf8(&config).map_err(|_| {
            ModelError::checkpoint("config.json", "bytes that are not UTF-8", "JSON text")
        })?;
        Self::from_checkpoint(Config::from_json(config)?, &read("model.safetensors")?)
    }

    // ANCHOR: load
    /// The model `config` describes, with its weights from the bytes of a `model.safetensors`.
    /// Every tensor must be there with the shape the config implies, and nothing else (see
    /// [`Tensors::finish`]).
    pub fn from_checkpoint(config: Config, safetensors: &[u8]) -> Result<Self, ModelError> {
        let mut file = Tensors::parse(safetensors)?;
        let Config { vocab_size: v, n_positions: p, n_embd: c, n_inner: inner, .. } = config;
        let wte = file.matrix("wte.weight", [v, c], "vocab_size x n_embd")?;
        let wpe = file.matrix("wpe.weight", [p, c], "n_positions x n_embd")?;
        let mut blocks = Vec::with_capacity(config.n_layer);
        for layer in 0..config.n_layer {
            let mut conv1d = |name: &str, inputs: usize, outputs: usize| -> Result<_, ModelError> {
                let name = format!("h.{layer}.{name}");
                let why = format!("Conv1D stores [in, out] = [{inputs}, {outputs}]");
                Ok(Conv1d {
                    weight: file.matrix(&format!("{name}.weight"), [inputs, outputs], &why)?,
                    bias: file.vector(&format!("{name}.bias"), outputs, "out")?,
                })
            };
            let (qkv, attn_out) = (conv1d("attn.c_attn", c, 3 * c)?, conv1d("attn.c_proj", c, c)?);
            let (mlp_in, mlp_out) =
                (conv1d("mlp.c_fc", c, inner)?, conv1d("mlp.c_proj", inner, c)?);
            let ln_1 = layer_norm(&mut file, &format!("h.{layer}.ln_1"), &config)?;
            let ln_2 = layer_norm(&mut file, &format!("h.{layer}.ln_2"), &config)?;
            blocks.push(Block { ln_1, qkv, attn_out, ln_2, mlp_in, mlp_out });
        }
        let ln_f = layer_norm(&mut file, "ln_f", &config)?;
        // GPT-2's head is the token embedding matrix itself; a checkpoint may store a copy.
        if file.contains("lm_head.weight") {
            let head = file.matrix("lm_head.weight", [v, c], "vocab_size x n_embd")?;
            if head != wte {
                return Err(ModelError::checkpoint(
                    "model.safetensors: lm_head.weight",
                    "a head different from wte.weight",
                    "the head tied to the token embeddings (GPT-2's tie_word_embeddings)",
                ));
            }
        }
        file.finish()?;
        Ok(Self { config, wte, wpe, blocks, ln_f, precision: Precision::F32 })
    }
    // ANCHOR_END: load

    /// A model of `config`'s sizes with random weights, fixed by `seed`: normal, with standard
    /// deviation 0.2 for the embeddings, `1 / sqrt(in)` for a Conv1D's weights (so that its
    /// outputs are about as large as its inputs), 0.1 for the biases, and LayerNorm gains
    /// about 1 (mean 1, deviation 0.1). For
    /// what needs a model of a given shape and no checkpoint: the GPU model's tests at head
    /// dims the tiny checkpoint lacks, and timings at GPT-2 small's sizes.
    pub fn random(config: Config, seed: u64) -> Self {
        let mut random = RandomWeights(reference::problem::SplitMix64::new(seed));
        let Config { vocab_size: v, n_positions: p, n_embd: c, n_inner: inner, .. } = config;
        let epsilon = config.layer_norm_epsilon;
        let (wte, wpe) = (random.matrix(v, c, 0.2), random.matrix(p, c, 0.2));
        let blocks = (0..config.n_layer)
            .map(|_| Block {
                ln_1: random.layer_norm(c, epsilon),
                qkv: random.conv1d(c, 3 * c),
                attn_out: random.conv1d(c, c),
                ln_2: random.layer_norm(c, epsilon),
                mlp_in: random.conv1d(c, inner),
                mlp_out: random.conv1d(inner, c),
            })
            .collect();
        let ln_f = random.layer_norm(c, epsilon);
        Self { config, wte, wpe, blocks, ln_f, precision: Precision::F32 }
    }

    /// The logits of every position of `tokens`, `[N, V]`.
    pub fn logits(&self, tokens: &[u32], attention: &Attention) -> Result<Array2<f32>, ModelError> {
        Ok(self.trace(tokens, attention)?.logits)
    }

    // ANCHOR: forward
    /// One forward pass over `tokens` (at positions `0..N`), keeping every layer's output.
    /// Errors: no token, a token id outside the vocabulary, more tokens than positions.
    pub fn trace(&self, tokens: &[u32], attention: &Attention) -> Result<Trace, ModelError> {
        self.trace_monitored(tokens, attention, &mut Monitor::default())
    }

    /// The same, recording each layer's output statistics in `monitor` as it goes: after an
    /// error (attention refuses infinite inputs) the monitor still says where it started.
    pub fn trace_monitored(
        &self,
        tokens: &[u32],
        attention: &Attention,
        monitor: &mut Monitor,
    ) -> Result<Trace, ModelError> {
        let mut x = self.embed(tokens, 0)?;
        monitor.record("embeddings", &x);
        let mut hidden = vec![x.clone()];
        for (layer, block) in self.blocks.iter().enumerate() {
            let (q, k, v) = self.queries_keys_values(block, &x);
            let heads = attention.attend(q, k, v)?;
            self.finish_block(block, layer, &mut x, heads, monitor);
            hidden.push(x.clone());
        }
        let (last, logits) = self.head(&x);
        monitor.record("ln_f", &last);
        monitor.record("logits", &logits);
        *hidden.last_mut().expect("the embeddings at least") = last;
        Ok(Trace { hidden, logits })
    }
    // ANCHOR_END: forward

    /// One empty lesson 11 cache per layer for `sequences` sequences, room for `n_positions`
    /// tokens each: where cached generation starts.
    pub fn empty_caches(&self, sequences: usize) -> Result<Vec<KvCache>, ModelError> {
        let c = &self.config;
        let cache = KvCache::new(sequences, c.n_head, c.n_positions, c.head_dim())?;
        Ok(vec![cache; c.n_layer])
    }

    /// The end of the model: the final LayerNorm of the stream `x [N, C]`, and the logits
    /// `[N, V]`, its dot products with every token's embedding (the tied head).
    pub fn head(&self, x: &Array2<f32>) -> (Array2<f32>, Array2<f32>) {
        let last = self.stored(self.ln_f.forward(x, self.precision.stream()));
        let mut logits = product(&last, self.wte.t());
        round_all(&mut logits, self.precision.stream());
        (last, logits)
    }

    // ANCHOR: embed
    /// `x [N, C]`: each token's embedding plus its position's, for tokens at positions
    /// `start..start + N`.
    pub fn embed(&self, tokens: &[u32], start: usize) -> Result<Array2<f32>, ModelError> {
        self.config.check_tokens(tokens, start)?;
        let mut x = Array2::zeros((tokens.len(), self.config.n_embd));
        for (i, (mut row, &token)) in x.rows_mut().into_iter().zip(tokens).enumerate() {
            row.assign(&self.wte.row(token as usize));
            row += &self.wpe.row(start + i);
        }
        round_all(&mut x, self.precision.stream());
        Ok(x)
    }
    // ANCHOR_END: embed

    // ANCHOR: qkv
    /// The block's queries, keys and values of `x [N, C]`, each `[H, N, D]`: `ln_1`, then
    /// `c_attn`, whose `3C` outputs are Q, K and V side by side, each `H` heads of `D`
    /// channels side by side.
    pub fn queries_keys_values(
        &self,
        block: &Block,
        x: &Array2<f32>,
    ) -> (Array3<f32>, Array3<f32>, Array3<f32>) {
        let (n, c, h, d) =
            (x.nrows(), self.config.n_embd, self.config.n_head, self.config.head_dim());
        let normalised = self.stored(block.ln_1.forward(x, self.precision.stream()));
        let qkv = self.stored(block.qkv.forward(&normalised));
        // [N, 3C] = [N, 3, H, D] -> three [H, N, D]
        let qkv = qkv.into_shape_with_order((n, 3, h, d)).expect("3C = 3 H D");
        let heads =
            |part: usize| qkv.slice(s![.., part, .., ..]).permuted_axes([1, 0, 2]).to_owned();
        debug_assert_eq!(c, h * d);
        (heads(0), heads(1), heads(2))
    }

    /// The rest of block `layer`, given the heads' attention output `[H, N, D]`: heads side
    /// by side again, `attn.c_proj`, the residual add; then `x += mlp(ln_2(x))`. Each output
    /// is rounded as the model's precision says, and recorded in `monitor`.
    pub fn finish_block(
        &self,
        block: &Block,
        layer: usize,
        x: &mut Array2<f32>,
        heads: Array3<f32>,
        monitor: &mut Monitor,
    ) {
        let (h, n, d) = heads.dim();
        let merged = heads.permuted_axes([1, 0, 2]).as_standard_layout().into_owned();
        let merged = merged.into_shape_with_order((n, h * d)).expect("[N, H, D] is [N, C]");
        let attended = self.stored(block.attn_out.forward(&self.stored(merged)));
        monitor.record(&format!("h.{layer}.attn"), &attended);
        self.add_to_stream(x, &attended);
        let normalised = self.stored(block.ln_2.forward(x, self.precision.stream()));
        let mut hidden = self.stored(block.mlp_in.forward(&normalised));
        hidden.mapv_inplace(gelu);
        let mlp = self.stored(block.mlp_out.forward(&self.stored(hidden)));
        monitor.record(&format!("h.{layer}.mlp"), &mlp);
        self.add_to_stream(x, &mlp);
        monitor.record(&format!("h.{layer}"), x);
    }
    // ANCHOR_END: qkv

    // ANCHOR: precision
    /// The model with its weights rounded to `precision`'s 16-bit format, and its forward
    /// passes rounding activations, the residual stream, LayerNorm statistics and logits as
    /// [`Precision`] says.
    pub fn with_precision(&self, precision: Precision) -> Self {
        let mut model = self.clone();
        let dtype = precision.storage();
        round_all(&mut model.wte, dtype);
        round_all(&mut model.wpe, dtype);
        for block in &mut model.blocks {
            for conv in [&mut block.qkv, &mut block.attn_out, &mut block.mlp_in, &mut block.mlp_out]
            {
                round_all(&mut conv.weight, dtype);
                round_all(&mut conv.bias, dtype);
            }
        }
        for norm in model.blocks.iter_mut().flat_map(|b| [&mut b.ln_1, &mut b.ln_2]) {
            round_all(&mut norm.gain, dtype);
            round_all(&mut norm.bias, dtype);
        }
        round_all(&mut model.ln_f.gain, dtype);
        round_all(&mut model.ln_f.bias, dtype);
        model.precision = precision;
        model
    }

    /// An activation as stored between two operations.
    fn stored(&self, mut x: Array2<f32>) -> Array2<f32> {
        round_all(&mut x, self.precision.storage());
        x
    }

    /// `x += delta` in the residual stream's format.
    fn add_to_stream(&self, x: &mut Array2<f32>, delta: &Array2<f32>) {
        *x += delta;
        round_all(x, self.precision.stream());
    }
    // ANCHOR_END: precision
}

/// The weights of [`Gpt2::random`].
struct RandomWeights(reference::problem::SplitMix64);

impl RandomWeights {
    /// Normal, mean 0, standard deviation `std`.
    fn matrix(&mut self, rows: usize, cols: usize, std: f32) -> Array2<f32> {
        Array2::from_shape_simple_fn((rows, cols), || std * self.0.normal())
    }

    /// Normal, standard deviation 0.1.
    fn vector(&mut self, len: usize, mean: f32) -> Array1<f32> {
        Array1::from_shape_simple_fn(len, || mean + 0.1 * self.0.normal())
    }

    fn conv1d(&mut self, inputs: usize, outputs: usize) -> Conv1d {
        let std = 1.0 / (inputs as f32).sqrt();
        Conv1d { weight: self.matrix(inputs, outputs, std), bias: self.vector(outputs, 0.0) }
    }

    fn layer_norm(&mut self, c: usize, epsilon: f32) -> LayerNorm {
        LayerNorm { gain: self.vector(c, 1.0), bias: self.vector(c, 0.0), epsilon }
    }
}

/// One block's LayerNorm, `name.weight` and `name.bias` of `[C]`.
fn layer_norm(file: &mut Tensors, name: &str, config: &Config) -> Result<LayerNorm, ModelError> {
    let c = config.n_embd;
    Ok(LayerNorm {
        gain: file.vector(&format!("{name}.weight"), c, "n_embd")?,
        bias: file.vector(&format!("{name}.bias"), c, "n_embd")?,
        epsilon: config.layer_norm_epsilon,
    })
}

// ANCHOR: session
/// A sequence being generated: the tokens so far and, for each layer, lesson 11's cache of
/// their keys and values. Each call to [`Session::feed`] computes only the new tokens.
pub struct Session<'a> {
    model: &'a Gpt2,
    attention: &'a Attention,
    caches: Vec<KvCache>,
    len: usize,
    /// A call failed after some layers had cached its tokens.
    failed: bool,
}

impl<'a> Session<'a> {
    /// An empty sequence: one cache per layer, room for `n_positions` tokens.
    pub fn new(model: &'a Gpt2, attention: &'a Attention) -> Result<Self, ModelError> {
        let caches = model.empty_caches(1)?;
        Ok(Self { model, attention, caches, len: 0, failed: false })
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been fed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `tokens` (a prompt, or one generated token) and returns their logits `[n, V]`.
    /// Each layer appends the new keys and values to its cache and runs attention of the new
    /// queries over everything cached. Errors as [`Gpt2::trace`]: for a bad token nothing is
    /// appended; if a layer fails (non-finite values), earlier layers have cached the tokens
    /// already, so the session refuses every later call.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<Array2<f32>, ModelError> {
        if self.failed {
            return Err(ModelError::input(
                "feeding a session",
                "a session whose caches a failed call left part-written",
                "a new Session",
            ));
        }
        let model = self.model;
        let mut x = model.embed(tokens, self.len)?;
        for (layer, (block, cache)) in model.blocks.iter().zip(&mut self.caches).enumerate() {
            let (q, k, v) = model.queries_keys_values(block, &x);
            self.failed = true; // until this layer has cached and attended
            cache.append(0, k.view(), v.view())?;
            let (keys, values) = cached(cache, 0);
            let heads = self.attention.attend(q, keys, values)?;
            self.failed = false;
            model.finish_block(block, layer, &mut x, heads, &mut Monitor::default());
        }
        self.len += tokens.len();
        Ok(model.head(&x).1)
    }
}

/// Every cached key and value of sequence `seq`, `[H, len, D]` each: the first `len` of the
/// `capacity` slots of its block (a contiguous cache is one block per sequence, `[Hkv,
/// capacity, D]`, block `seq` for sequence `seq`).
pub fn cached(cache: &KvCache, seq: usize) -> (Array3<f32>, Array3<f32>) {
    let blocks = cache.blocks();
    let (h, d) = (cache.kv_heads(), cache.head_dim());
    let block = h * blocks.block_size * d;
    let filled = |pool: &[f32]| {
        let own = &pool[seq * block..(seq + 1) * block];
        let all =
            ArrayView3::from_shape((h, blocks.block_size, d), own).expect("[Hkv, capacity, D]");
        all.slice(s![.., ..cache.len(seq), ..]).to_owned()
    };
    (filled(blocks.keys), filled(blocks.values))
}
// ANCHOR_END: session

/// How many rows of two logit matrices `[N, V]` have the same most likely token.
pub fn same_top1(a: &Array2<f32>, b: &Array2<f32>) -> usize {
    a.rows().into_iter().zip(b.rows()).filter(|(x, y)| argmax(*x) == argmax(*y)).count()
}

/// The index of the largest logit of a row (the first, on a tie): greedy decoding's choice.
pub fn argmax(logits: ndarray::ArrayView1<f32>) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy generation of `new_tokens` tokens after `prompt`, with the cache (`cached`) or by
/// running the whole sequence again for every token. An error, before any work, if the
/// prompt and the new tokens would not fit in `n_positions`.
pub fn generate(
    model: &Gpt2,
    attention: &Attention,
    prompt: &[u32],
    new_tokens: usize,
    cached: bool,
) -> Result<Vec<u32>, ModelError> {
    let mut session = Session::new(model, attention)?;
    greedy(prompt, new_tokens, model.config.n_positions, |tokens, new| {
        if cached {
            session.feed(&tokens[tokens.len() - new..])
        } else {
            model.logits(tokens, attention)
        }
    })
}

/// Greedy generation of `new_tokens` tokens after `prompt` by any model: `logits_of(tokens,
/// new)` gives the logits `[n, V]` of the sequence so far, of which the last `new` tokens are
/// new since the previous call (a cached model feeds only those, and returns their rows; one
/// that recomputes runs every token). An error, before any work, if the prompt and the new
/// tokens would not fit in `positions`.
pub fn greedy(
    prompt: &[u32],
    new_tokens: usize,
    positions: usize,
    mut logits_of: impl FnMut(&[u32], usize) -> Result<Array2<f32>, ModelError>,
) -> Result<Vec<u32>, ModelError> {
    if new_tokens > positions.saturating_sub(prompt.len()) {
        return Err(ModelError::input(
            "generation",
            format!("{} prompt tokens and {new_tokens} new ones", prompt.len()),
            format!("at most n_positions = {positions} tokens in all"),
        ));
    }
    let mut tokens = prompt.to_vec();
    let mut logits = logits_of(&tokens, prompt.len())?;
    for step in 0..new_tokens {
        let next = argmax(logits.row(logits.nrows() - 1));
        tokens.push(next);
        if step + 1 < new_tokens {
            logits = logits_of(&tokens, 1)?;
        }
    }
    Ok(tokens.split_off(prompt.len()))
}
