//! GPT-2 on the GPU: every weight uploaded once, every activation kept on the device from
//! the embeddings to the logits, attention through any registered WGSL kernel, and each
//! layer's keys and values cached on the device for generation.
//!
//! A forward pass is one command buffer: per layer, LayerNorm, `c_attn`, the split into heads
//! (Q for this call; K and V into the layer's cache), a copy of the cached keys and values
//! into the attention kernel's inputs, the kernel, the heads merged back, `c_proj` added to
//! the residual stream, then the MLP the same way. Only the logits come back (and, for
//! [`GpuGpt2::trace`], each layer's residual stream). The arithmetic is f32 throughout, but
//! for what the attention kernel stores in f16 (the tensor-core kernels): the precision
//! strategies are lesson 12's CPU model's.
//!
//! Shapes as in [`crate::model`]: `N` tokens, `C` channels, `H` heads of `D`, `V`
//! vocabulary, `P` positions.

use gpu::attention::{AttentionBuffers, AttentionKernel, KernelVersion, params_of};
use gpu::kernel::{Dispatch, bind, catch_errors, check_workgroups, compile, workgroup_count};
use gpu::{Gpu, GpuError, buffers};
use ndarray::{Array1, Array2};
use reference::{About, AttentionShape, Storage};

use crate::model::{Block, Conv1d, LayerNorm, Trace};
use crate::{Config, Gpt2, ModelError, Precision};

/// The WGSL of the model's own kernels (the attention kernels are lessons 08 to 10's).
pub mod shaders {
    /// `y = x W + b`, with GELU or a residual add as its epilogue.
    pub const LINEAR: &str = include_str!("shaders/linear.wgsl");
    /// LayerNorm, one workgroup per row.
    pub const LAYER_NORM: &str = include_str!("shaders/layer_norm.wgsl");
    /// Token plus position embeddings.
    pub const EMBED: &str = include_str!("shaders/embed.wgsl");
    /// `[N, 3C]` to the attention kernel's heads and the cache; heads back to `[N, C]`.
    pub const HEADS: &str = include_str!("shaders/heads.wgsl");
}

/// The uniform every kernel of the model reads (each uses the fields it needs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct Sizes {
    /// Tokens of this call, `N`.
    rows: u32,
    /// Output columns (`C`, `3C`, `4C` or `V`).
    cols: u32,
    /// A linear layer's input columns.
    inner: u32,
    /// Position of the first token.
    start: u32,
    /// `H`
    heads: u32,
    /// `D`
    head_dim: u32,
    /// The attention kernel's row stride (`D` padded).
    row_stride: u32,
    /// Positions in each cache, `P`.
    capacity: u32,
    /// LayerNorm's epsilon.
    epsilon: f32,
    /// Padding to a multiple of 16 bytes.
    pad: [u32; 3],
}

/// A linear layer on the device.
struct DeviceLinear {
    /// `[in, out]`, or `[out, in]` for the head.
    weight: wgpu::Buffer,
    /// `[out]`
    bias: wgpu::Buffer,
    inputs: usize,
    outputs: usize,
}

/// A LayerNorm on the device: gain and bias `[C]`.
struct DeviceNorm {
    gain: wgpu::Buffer,
    bias: wgpu::Buffer,
    epsilon: f32,
}

struct DeviceBlock {
    ln_1: DeviceNorm,
    qkv: DeviceLinear,
    attn_out: DeviceLinear,
    ln_2: DeviceNorm,
    mlp_in: DeviceLinear,
    mlp_out: DeviceLinear,
}

/// What a linear layer does with `x W + b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// `y = x W + b`
    Store = 0,
    /// `y = gelu(x W + b)`
    Gelu = 1,
    /// `y += x W + b`: a residual add.
    Add = 2,
}

/// GPT-2 with its weights on the GPU and one WGSL attention kernel.
pub struct GpuGpt2 {
    gpu: &'static Gpu,
    config: Config,
    about: About,
    attention: Box<dyn AttentionKernel>,
    /// `[V, C]`: the embeddings, and the head read transposed.
    wte: wgpu::Buffer,
    /// `[P, C]`
    wpe: wgpu::Buffer,
    blocks: Vec<DeviceBlock>,
    ln_f: DeviceNorm,
    /// The tied head: `wte` read transposed, and `[V]` zeros for a bias.
    head: DeviceLinear,
}

impl GpuGpt2 {
    /// `model`'s weights uploaded to `gpu`, with attention by `kernel` built for the model's
    /// head dimension. Errors: the kernel needs a feature the device lacks, does not support
    /// this head dimension, stores in bf16, or a weight exceeds the device's buffer limits.
    pub fn new(
        model: &Gpt2,
        kernel: &KernelVersion,
        gpu: &'static Gpu,
    ) -> Result<Self, ModelError> {
        on_gpu(Self::upload(model, kernel, gpu))
    }

    fn upload(model: &Gpt2, kernel: &KernelVersion, gpu: &'static Gpu) -> Result<Self, ModelError> {
        if let Some(missing) = kernel.missing_on(&gpu.device) {
            return Err(reference::AttentionError::from(missing).into());
        }
        if model.precision != Precision::F32 {
            return Err(ModelError::input(
                "the GPU model",
                format!("a model of precision {:?}", model.precision),
                "an f32 model: the GPU model computes in f32, the precision strategies are the \
                 CPU model's",
            ));
        }
        let (limit, limit_name) = buffers::largest_binding(&gpu.device);
        let wte_bytes = (model.wte.len() * 4) as u64;
        if wte_bytes > limit {
            return Err(ModelError::input(
                "the GPU model",
                format!("token embeddings wte [V, C] of {wte_bytes} bytes"),
                format!(
                    "at most {limit} bytes in one buffer ({limit_name} of {}); lavapipe allows \
                     128 MiB, GPT-2 small's wte is 147 MiB: run it on a GPU, or on the CPU model",
                    gpu.info.name
                ),
            ));
        }
        let config = model.config.clone();
        let attention = (kernel.build)(&gpu.device, config.head_dim())?;
        let stride = config.head_dim().next_multiple_of(attention.row_alignment().max(1));
        match attention.storage() {
            Storage::F32 => {}
            // Two neighbouring channels per u32: a pair must not straddle two heads.
            Storage::F16 if stride.is_multiple_of(2) && config.head_dim().is_multiple_of(2) => {}
            storage => {
                return Err(misuse(format!(
                    "{} stores {storage:?} rows of {stride} elements for heads of {}; the model \
                     writes f32 rows, or f16 rows and heads of an even length",
                    kernel.about.name,
                    config.head_dim()
                )));
            }
        }
        let device = &gpu.device;
        let upload = |what: &str, x: &[f32]| buffers::upload(device, what, x);
        let matrix = |what: &str, x: &Array2<f32>| upload(what, &standard(x));
        let linear = |what: &str, conv: &Conv1d| -> Result<DeviceLinear, ModelError> {
            Ok(DeviceLinear {
                weight: matrix(what, &conv.weight)?,
                bias: upload(what, conv.bias.as_slice().expect("a vector is contiguous"))?,
                inputs: conv.weight.nrows(),
                outputs: conv.weight.ncols(),
            })
        };
        let norm = |what: &str, ln: &LayerNorm| -> Result<DeviceNorm, ModelError> {
            let vector = |x: &Array1<f32>| upload(what, x.as_slice().expect("contiguous"));
            Ok(DeviceNorm { gain: vector(&ln.gain)?, bias: vector(&ln.bias)?, epsilon: ln.epsilon })
        };
        let block = |b: &Block| -> Result<DeviceBlock, ModelError> {
            Ok(DeviceBlock {
                ln_1: norm("ln_1", &b.ln_1)?,
                qkv: linear("c_attn", &b.qkv)?,
                attn_out: linear("attn.c_proj", &b.attn_out)?,
                ln_2: norm("ln_2", &b.ln_2)?,
                mlp_in: linear("c_fc", &b.mlp_in)?,
                mlp_out: linear("mlp.c_proj", &b.mlp_out)?,
            })
        };
        let wte = matrix("wte", &model.wte)?;
        Ok(Self {
            gpu,
            about: kernel.about,
            attention,
            wpe: matrix("wpe", &model.wpe)?,
            blocks: model.blocks.iter().map(block).collect::<Result<_, _>>()?,
            ln_f: norm("ln_f", &model.ln_f)?,
            head: DeviceLinear {
                weight: wte.clone(),
                bias: upload("head bias", &vec![0.0; config.vocab_size])?,
                inputs: config.n_embd,
                outputs: config.vocab_size,
            },
            wte,
            config,
        })
    }

    /// The attention kernel's name, as the registry gives it.
    pub fn name(&self) -> &'static str {
        self.about.name
    }

    /// The format the attention kernel stores Q, K and V in.
    pub fn storage(&self) -> Storage {
        self.attention.storage()
    }

    /// The sizes.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The logits of every position of `tokens`, `[N, V]`.
    pub fn logits(&self, tokens: &[u32]) -> Result<Array2<f32>, ModelError> {
        GpuSession::new(self)?.feed(tokens)
    }

    /// One forward pass keeping every layer's output, as [`Gpt2::trace`] does (the residual
    /// streams are copied out on the device and downloaded at the end).
    pub fn trace(&self, tokens: &[u32]) -> Result<Trace, ModelError> {
        let (logits, hidden) = on_gpu(GpuSession::new(self)?.run(tokens, true))?;
        Ok(Trace { hidden, logits })
    }

    /// One forward pass over `tokens` on the device, waiting for the GPU to finish and
    /// downloading nothing (the logits stay on the device): what the benchmark times.
    pub fn forward_on_device(&self, tokens: &[u32]) -> Result<(), ModelError> {
        on_gpu(GpuSession::new(self)?.run_on_device(tokens, false).map(drop))
    }

    /// Greedy generation of `new_tokens` tokens after `prompt`, with the device's cache
    /// (`cached`) or by running the whole sequence again for every token.
    pub fn generate(
        &self,
        prompt: &[u32],
        new_tokens: usize,
        cached: bool,
    ) -> Result<Vec<u32>, ModelError> {
        let mut session = GpuSession::new(self)?;
        crate::model::greedy(prompt, new_tokens, self.config.n_positions, |tokens, new| {
            if cached { session.feed(&tokens[tokens.len() - new..]) } else { self.logits(tokens) }
        })
    }

    fn device(&self) -> &wgpu::Device {
        &self.gpu.device
    }

    /// `x [rows, inner]` through `linear` into `y [rows, outputs]`, as `epilogue` says.
    fn linear(
        &self,
        linear: &DeviceLinear,
        transposed: bool,
        epilogue: Epilogue,
        rows: usize,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<Dispatch, ModelError> {
        let blocks = row_blocks(rows, linear.outputs);
        linear_dispatch(self.device(), linear, transposed, epilogue, blocks, rows, x, y)
    }

    /// LayerNorm of `x [rows, C]` into `y`.
    fn layer_norm(
        &self,
        norm: &DeviceNorm,
        rows: usize,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<Dispatch, ModelError> {
        let pipeline = compile(self.device(), "layer norm", shaders::LAYER_NORM, "main", &[])?;
        let sizes = Sizes {
            rows: rows as u32,
            cols: self.config.n_embd as u32,
            epsilon: norm.epsilon,
            ..Sizes::default()
        };
        let buffers = [x, &norm.gain, &norm.bias, y];
        dispatch(self.device(), "layer norm", pipeline, sizes, &buffers, [rows, 1, 1])
    }
}

/// A sequence being generated on the GPU: for each layer, its keys and values cached on the
/// device (`[H, P, stride]` each, in the attention kernel's storage format). Each call to
/// [`GpuSession::feed`] computes only the new tokens.
pub struct GpuSession<'a> {
    model: &'a GpuGpt2,
    /// `(keys, values)` per layer, `[H, P, stride]` each.
    caches: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    len: usize,
    /// A call failed after its commands may have written the caches.
    failed: bool,
}

/// The buffers of one call of `n` new tokens after `len - n` cached ones.
struct Activations {
    tokens: wgpu::Buffer,
    /// `[n, C]`, the residual stream.
    x: wgpu::Buffer,
    /// `[n, C]`, a LayerNorm's output.
    normalised: wgpu::Buffer,
    /// `[n, 3C]`
    qkv: wgpu::Buffer,
    /// `[n, C]`, the heads side by side again.
    merged: wgpu::Buffer,
    /// `[n, 4C]`
    mlp: wgpu::Buffer,
    /// `[n, V]`
    logits: wgpu::Buffer,
    /// Q `[H, n, stride]`; K and V `[H, len, stride]`, copied from the caches.
    attention: AttentionBuffers,
}

impl<'a> GpuSession<'a> {
    /// An empty sequence: two caches per layer with room for `n_positions` tokens.
    pub fn new(model: &'a GpuGpt2) -> Result<Self, ModelError> {
        on_gpu(Self::allocate(model))
    }

    fn allocate(model: &'a GpuGpt2) -> Result<Self, ModelError> {
        let c = &model.config;
        let cache = |what: &str| model.heads_buffer(what, c.n_positions);
        let caches = (0..c.n_layer).map(|_| Ok((cache("keys")?, cache("values")?)));
        Ok(Self {
            model,
            caches: caches.collect::<Result<_, ModelError>>()?,
            len: 0,
            failed: false,
        })
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been fed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `tokens` and returns their logits `[n, V]`. Errors as [`Gpt2::trace`]; after
    /// a failure on the device the session refuses every later call.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<Array2<f32>, ModelError> {
        Ok(on_gpu(self.run(tokens, false))?.0)
    }

    /// [`GpuSession::feed`], also returning the residual streams when `keep_hidden` (as
    /// [`Trace::hidden`]; empty otherwise).
    fn run(
        &mut self,
        tokens: &[u32],
        keep_hidden: bool,
    ) -> Result<(Array2<f32>, Vec<Array2<f32>>), ModelError> {
        let (buffers, hidden) = self.run_on_device(tokens, keep_hidden)?;
        let (n, c) = (tokens.len(), self.model.config.n_embd);
        let logits = download_matrix(self.model, &buffers.logits, n)?;
        let hidden = match hidden {
            Some(hidden) => {
                let all =
                    buffers::download::<f32>(self.model.device(), &self.model.gpu.queue, &hidden)?;
                let layer = |h: &[f32]| Array2::from_shape_vec((n, c), h.to_vec()).expect("[n, C]");
                all.chunks(n * c).map(layer).collect()
            }
            None => Vec::new(),
        };
        self.failed = false;
        self.len += n;
        Ok((logits, hidden))
    }

    /// Runs a call of `tokens` on the device and waits for the GPU to finish. Returns the
    /// call's buffers, the logits still on the device, and with `keep_hidden` the residual
    /// streams `[L + 1, n, C]`. Leaves the session refusing later calls (`failed`) until the
    /// caller has what it needs.
    fn run_on_device(
        &mut self,
        tokens: &[u32],
        keep_hidden: bool,
    ) -> Result<(Activations, Option<wgpu::Buffer>), ModelError> {
        if self.failed {
            return Err(ModelError::input(
                "feeding a GPU session",
                "a session whose caches a failed call may have part-written",
                "a new GpuSession",
            ));
        }
        let config = &self.model.config;
        config.check_tokens(tokens, self.len)?;
        let buffers = self.activations(tokens)?;
        let hidden_len = (config.n_layer + 1) * tokens.len() * config.n_embd;
        let hidden = keep_hidden
            .then(|| buffers::storage::<f32>(self.model.device(), "hidden states", hidden_len))
            .transpose()?;
        let ran = self.model.submit(&self.commands(&buffers, hidden.as_ref())?);
        // The commands may have written the caches: refuse later calls until all is back.
        self.failed = true;
        ran?;
        Ok((buffers, hidden))
    }

    /// The buffers of a call feeding `tokens`.
    fn activations(&self, tokens: &[u32]) -> Result<Activations, ModelError> {
        let model = self.model;
        let device = model.device();
        let Config { n_embd: c, n_inner: inner, vocab_size: v, n_head: h, .. } = model.config;
        let (n, len, d, stride) =
            (tokens.len(), self.len + tokens.len(), model.config.head_dim(), model.row_stride());
        let matrix = |what: &str, cols: usize| buffers::storage::<f32>(device, what, n * cols);
        let shape = AttentionShape { batch: 1, heads: h, q_len: n, kv_len: len, head_dim: d };
        let params = params_of(&shape, 1.0 / (d as f32).sqrt(), true)?;
        let attention = AttentionBuffers {
            shape,
            row_stride: stride,
            storage: model.attention.storage(),
            // Q, K and V are written by the model's own kernels, never checked on upload.
            checked_f16_range: false,
            params: buffers::uniform(device, "params", &params),
            q: model.heads_buffer("Q", n)?,
            k: model.heads_buffer("K", len)?,
            v: model.heads_buffer("V", len)?,
            o: buffers::storage::<f32>(device, "O", h * n * stride)?,
            lse: buffers::storage::<f32>(device, "L", h * n)?,
        };
        Ok(Activations {
            tokens: buffers::upload(device, "tokens", tokens)?,
            x: matrix("residual stream", c)?,
            normalised: matrix("LayerNorm output", c)?,
            qkv: matrix("c_attn output", 3 * c)?,
            merged: matrix("attention output", c)?,
            mlp: matrix("c_fc output", inner)?,
            logits: matrix("logits", v)?,
            attention,
        })
    }

    // ANCHOR: gpu_forward
    /// Every command of a call, in order: kernels, and copies between them (the cached keys
    /// and values into the attention kernel's inputs; with `hidden`, each layer's residual
    /// stream into its slot of `hidden [L + 1, n, C]`).
    fn commands<'b>(
        &'b self,
        b: &'b Activations,
        hidden: Option<&'b wgpu::Buffer>,
    ) -> Result<Vec<Step<'b>>, ModelError> {
        let model = self.model;
        let (n, start, layers) = (b.attention.shape.q_len, self.len, model.blocks.len());
        let mut steps = Steps::default();
        steps.kernel(model.embed(n, start, &b.tokens, &b.x)?);
        steps.keep(hidden, 0, &b.x);
        for (layer, (block, (keys, values))) in model.blocks.iter().zip(&self.caches).enumerate() {
            use Epilogue::{Add, Gelu, Store};
            steps.kernel(model.layer_norm(&block.ln_1, n, &b.x, &b.normalised)?);
            steps.kernel(model.linear(&block.qkv, false, Store, n, &b.normalised, &b.qkv)?);
            steps.kernel(model.split_heads(n, start, &b.qkv, &b.attention.q, keys, values)?);
            steps.gather(model, keys, &b.attention.k);
            steps.gather(model, values, &b.attention.v);
            for dispatch in model.attention.dispatches(model.device(), &b.attention)? {
                steps.kernel(dispatch);
            }
            steps.kernel(model.merge_heads(n, &b.attention.o, &b.merged)?);
            steps.kernel(model.linear(&block.attn_out, false, Add, n, &b.merged, &b.x)?);
            steps.kernel(model.layer_norm(&block.ln_2, n, &b.x, &b.normalised)?);
            steps.kernel(model.linear(&block.mlp_in, false, Gelu, n, &b.normalised, &b.mlp)?);
            steps.kernel(model.linear(&block.mlp_out, false, Add, n, &b.mlp, &b.x)?);
            if layer + 1 < layers {
                steps.keep(hidden, layer + 1, &b.x);
            }
        }
        steps.kernel(model.layer_norm(&model.ln_f, n, &b.x, &b.normalised)?);
        steps.keep(hidden, layers, &b.normalised);
        steps.kernel(model.linear(
            &model.head,
            true,
            Epilogue::Store,
            n,
            &b.normalised,
            &b.logits,
        )?);
        Ok(steps.finish())
    }
    // ANCHOR_END: gpu_forward
}

/// One command of a call: kernels in one compute pass, or a copy between buffers.
enum Step<'b> {
    Kernels(Vec<Dispatch>),
    Copy {
        from: &'b wgpu::Buffer,
        from_offset: u64,
        to: &'b wgpu::Buffer,
        to_offset: u64,
        bytes: u64,
    },
}

/// Steps being collected: kernels accumulate into one pass until a copy comes.
#[derive(Default)]
struct Steps<'b> {
    done: Vec<Step<'b>>,
    pass: Vec<Dispatch>,
}

impl<'b> Steps<'b> {
    fn kernel(&mut self, dispatch: Dispatch) {
        self.pass.push(dispatch);
    }

    fn copy(
        &mut self,
        from: &'b wgpu::Buffer,
        from_offset: u64,
        to: &'b wgpu::Buffer,
        to_offset: u64,
        bytes: u64,
    ) {
        if !self.pass.is_empty() {
            self.done.push(Step::Kernels(std::mem::take(&mut self.pass)));
        }
        self.done.push(Step::Copy { from, from_offset, to, to_offset, bytes });
    }

    /// Copies the first `len` positions of each head of `cache [H, P, stride]` into
    /// `to [H, len, stride]`, the layout the attention kernels read.
    fn gather(&mut self, model: &GpuGpt2, cache: &'b wgpu::Buffer, to: &'b wgpu::Buffer) {
        let heads = model.config.n_head as u64;
        let per_position = model.row_stride() as u64 * model.element_bytes();
        let capacity = model.config.n_positions as u64;
        let len = to.size() / (heads * per_position);
        for head in 0..heads {
            let bytes = len * per_position;
            self.copy(cache, head * capacity * per_position, to, head * bytes, bytes);
        }
    }

    /// With `hidden [L + 1, n, C]`, copies `x [n, C]` into its slot `index`.
    fn keep(&mut self, hidden: Option<&'b wgpu::Buffer>, index: usize, x: &'b wgpu::Buffer) {
        if let Some(hidden) = hidden {
            self.copy(x, 0, hidden, index as u64 * x.size(), x.size());
        }
    }

    fn finish(mut self) -> Vec<Step<'b>> {
        if !self.pass.is_empty() {
            self.done.push(Step::Kernels(self.pass));
        }
        self.done
    }
}

impl GpuGpt2 {
    /// The attention kernel's row stride: `D` rounded up to its alignment.
    fn row_stride(&self) -> usize {
        self.config.head_dim().next_multiple_of(self.attention.row_alignment().max(1))
    }

    /// A buffer of `H` heads of `rows` rows of the attention kernel's stride, in the format
    /// it stores Q, K and V in: Q for a call, K and V for a call or a cache.
    fn heads_buffer(&self, what: &str, rows: usize) -> Result<wgpu::Buffer, ModelError> {
        let elements = self.config.n_head * rows * self.row_stride();
        Ok(match self.attention.storage() {
            Storage::F16 => buffers::storage::<u16>(self.device(), what, elements)?,
            _ => buffers::storage::<f32>(self.device(), what, elements)?,
        })
    }

    /// Bytes of one element of Q, K or V as the attention kernel stores them.
    fn element_bytes(&self) -> u64 {
        if self.attention.storage() == Storage::F16 { 2 } else { 4 }
    }

    /// The embeddings of `n` tokens at positions `start..` into `x [n, C]`.
    fn embed(
        &self,
        n: usize,
        start: usize,
        tokens: &wgpu::Buffer,
        x: &wgpu::Buffer,
    ) -> Result<Dispatch, ModelError> {
        let pipeline = compile(self.device(), "embeddings", shaders::EMBED, "main", &[])?;
        let c = self.config.n_embd;
        let sizes =
            Sizes { rows: n as u32, cols: c as u32, start: start as u32, ..Sizes::default() };
        dispatch(
            self.device(),
            "embeddings",
            pipeline,
            sizes,
            &[tokens, &self.wte, &self.wpe, x],
            [c.div_ceil(64), n, 1],
        )
    }

    /// The sizes the head-splitting kernels read.
    fn head_sizes(&self, n: usize, start: usize) -> Sizes {
        let c = &self.config;
        Sizes {
            rows: n as u32,
            start: start as u32,
            heads: c.n_head as u32,
            head_dim: c.head_dim() as u32,
            row_stride: self.row_stride() as u32,
            capacity: c.n_positions as u32,
            ..Sizes::default()
        }
    }

    /// `qkv [n, 3C]` to `q [H, n, stride]`, and into the caches `[H, P, stride]` at positions
    /// `start..start + n`.
    fn split_heads(
        &self,
        n: usize,
        start: usize,
        qkv: &wgpu::Buffer,
        q: &wgpu::Buffer,
        keys: &wgpu::Buffer,
        values: &wgpu::Buffer,
    ) -> Result<Dispatch, ModelError> {
        let (entry, first, per_thread) = match self.attention.storage() {
            Storage::F16 => ("split_heads_f16", 5, 2),
            _ => ("split_heads", 2, 1),
        };
        let pipeline = compile(self.device(), "split heads", shaders::HEADS, entry, &[])?;
        let uniform = buffers::uniform(self.device(), "split heads", &self.head_sizes(n, start));
        let bindings =
            [(0, &uniform), (1, qkv), (first, q), (first + 1, keys), (first + 2, values)];
        let threads = (3 * self.config.n_embd).div_ceil(per_thread);
        dispatch_bound(
            self.device(),
            "split heads",
            pipeline,
            &bindings,
            [threads.div_ceil(64), n, 1],
        )
    }

    /// The attention output `o [H, n, stride]` to `merged [n, C]`.
    fn merge_heads(
        &self,
        n: usize,
        o: &wgpu::Buffer,
        merged: &wgpu::Buffer,
    ) -> Result<Dispatch, ModelError> {
        let pipeline = compile(self.device(), "merge heads", shaders::HEADS, "merge_heads", &[])?;
        let uniform = buffers::uniform(self.device(), "merge heads", &self.head_sizes(n, 0));
        let bindings = [(0, &uniform), (8, o), (9, merged)];
        dispatch_bound(
            self.device(),
            "merge heads",
            pipeline,
            &bindings,
            [self.config.n_embd.div_ceil(64), n, 1],
        )
    }

    /// Records `steps` in one command buffer, submits it and waits for the GPU.
    fn submit(&self, steps: &[Step]) -> Result<(), ModelError> {
        let device = self.device();
        catch_errors(device, "running the model", || {
            let mut encoder = device.create_command_encoder(&Default::default());
            for step in steps {
                match step {
                    Step::Kernels(dispatches) => {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        for d in dispatches {
                            pass.set_pipeline(&d.pipeline);
                            pass.set_bind_group(0, &d.bind_group, &[]);
                            let [x, y, z] = d.workgroups;
                            pass.dispatch_workgroups(x, y, z);
                        }
                    }
                    &Step::Copy { from, from_offset, to, to_offset, bytes } => {
                        encoder.copy_buffer_to_buffer(from, from_offset, to, to_offset, bytes);
                    }
                }
            }
            self.gpu.queue.submit([encoder.finish()]);
        })?;
        buffers::wait(device)?;
        Ok(())
    }
}

/// A dispatch of `pipeline` with `sizes` at binding 0 and `buffers` at bindings 1, 2, …
fn dispatch(
    device: &wgpu::Device,
    label: &'static str,
    pipeline: wgpu::ComputePipeline,
    sizes: Sizes,
    buffers: &[&wgpu::Buffer],
    workgroups: [usize; 3],
) -> Result<Dispatch, ModelError> {
    let uniform = buffers::uniform(device, label, &sizes);
    let bindings: Vec<(u32, &wgpu::Buffer)> = std::iter::once(&uniform)
        .chain(buffers.iter().copied())
        .zip(0..)
        .map(|(b, i)| (i, b))
        .collect();
    dispatch_bound(device, label, pipeline, &bindings, workgroups)
}

/// A dispatch of `pipeline` with the given `(binding, buffer)` pairs.
fn dispatch_bound(
    device: &wgpu::Device,
    label: &'static str,
    pipeline: wgpu::ComputePipeline,
    bindings: &[(u32, &wgpu::Buffer)],
    workgroups: [usize; 3],
) -> Result<Dispatch, ModelError> {
    let workgroups = workgroups.map(workgroup_count);
    check_workgroups(device, label, workgroups)?;
    let bind_group = bind(device, &pipeline, bindings)?;
    Ok(Dispatch { label, pipeline, bind_group, workgroups })
}

/// A dispatch of the linear kernel: `x [rows, inputs]` through `layer` into `y [rows,
/// outputs]`, as `epilogue` says, in tiles of `16 blocks` rows ([`row_blocks`]).
#[allow(clippy::too_many_arguments)]
fn linear_dispatch(
    device: &wgpu::Device,
    layer: &DeviceLinear,
    transposed: bool,
    epilogue: Epilogue,
    blocks: usize,
    rows: usize,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
) -> Result<Dispatch, ModelError> {
    let constants = [
        ("TRANSPOSED", f64::from(u8::from(transposed))),
        ("EPILOGUE", epilogue as u8 as f64),
        ("ROW_BLOCKS", blocks as f64),
    ];
    let pipeline = compile(device, "linear", shaders::LINEAR, "main", &constants)?;
    let sizes = Sizes {
        rows: rows as u32,
        cols: layer.outputs as u32,
        inner: layer.inputs as u32,
        ..Sizes::default()
    };
    let workgroups = [layer.outputs.div_ceil(64), rows.div_ceil(16 * blocks), 1];
    dispatch(device, "linear", pipeline, sizes, &[x, &layer.weight, &layer.bias, y], workgroups)
}

/// One linear layer on the GPU, as the model runs it, for tests: `y + x W + b` (with
/// `Epilogue::Add`), `x W + b` or `gelu(x W + b)`, `x [rows, in]`, `W [in, out]` or with
/// `transposed` `[out, in]`, in tiles of `16 blocks` rows (1, 2 or 4).
#[allow(clippy::too_many_arguments)]
pub fn linear_on(
    gpu: &Gpu,
    x: &Array2<f32>,
    weight: &Array2<f32>,
    bias: &Array1<f32>,
    y: &Array2<f32>,
    transposed: bool,
    epilogue: Epilogue,
    blocks: usize,
) -> Result<Array2<f32>, ModelError> {
    let (inputs, outputs) = if transposed {
        (weight.ncols(), weight.nrows())
    } else {
        (weight.nrows(), weight.ncols())
    };
    if ![1, 2, 4].contains(&blocks) {
        return Err(misuse(format!("{blocks} row blocks; expected 1, 2 or 4")));
    }
    if x.ncols() != inputs || bias.len() != outputs || y.dim() != (x.nrows(), outputs) {
        return Err(misuse(format!(
            "x {:?}, W {:?} (transposed: {transposed}), b [{}], y {:?}; expected x [rows, in], W \
             [in, out] (or [out, in]), b [out], y [rows, out]",
            x.dim(),
            weight.dim(),
            bias.len(),
            y.dim()
        )));
    }
    let device = &gpu.device;
    let layer = DeviceLinear {
        weight: buffers::upload(device, "W", &standard(weight))?,
        bias: buffers::upload(device, "b", bias.as_slice().expect("contiguous"))?,
        inputs,
        outputs,
    };
    let (x_buffer, y_buffer) =
        (buffers::upload(device, "x", &standard(x))?, buffers::upload(device, "y", &standard(y))?);
    let linear = linear_dispatch(
        device,
        &layer,
        transposed,
        epilogue,
        blocks,
        x.nrows(),
        &x_buffer,
        &y_buffer,
    )?;
    gpu::kernel::launch(device, &gpu.queue, &[linear], None)?;
    let values = buffers::download::<f32>(device, &gpu.queue, &y_buffer)?;
    Ok(Array2::from_shape_vec(y.dim(), values).expect("y's shape"))
}

/// Row blocks of 16 in the linear kernel's tiles of `[16 blocks, 64]`: 4 (each number read
/// from workgroup memory feeds more multiply-adds), unless that gives fewer than 512
/// workgroups (4 per multiprocessor of a large GPU), then 2, then 1: a short sequence's
/// products are too small to fill the GPU with 64-row tiles.
fn row_blocks(rows: usize, cols: usize) -> usize {
    let enough = |blocks: usize| rows.div_ceil(16 * blocks) * cols.div_ceil(64) >= 512;
    [4, 2].into_iter().find(|&blocks| enough(blocks)).unwrap_or(1)
}

/// Downloads `[rows, V]` logits.
fn download_matrix(
    model: &GpuGpt2,
    buffer: &wgpu::Buffer,
    rows: usize,
) -> Result<Array2<f32>, ModelError> {
    let values = buffers::download::<f32>(model.device(), &model.gpu.queue, buffer)?;
    let cols = values.len() / rows;
    Ok(Array2::from_shape_vec((rows, cols), values).expect("rows x cols values"))
}

/// The elements of `x` in row-major order.
fn standard(x: &Array2<f32>) -> Vec<f32> {
    x.as_standard_layout().iter().copied().collect()
}

/// The device's errors (compiling, buffers, limits, running) as [`ModelError::Gpu`].
fn on_gpu<T>(result: Result<T, ModelError>) -> Result<T, ModelError> {
    result.map_err(|error| match error {
        ModelError::Attention(error) => ModelError::Gpu(error),
        other => other,
    })
}

/// A [`GpuError::KernelMisuse`] as a model error.
fn misuse(message: String) -> ModelError {
    reference::AttentionError::from(GpuError::KernelMisuse(message)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of `struct Sizes { ... }` in a shader.
    fn sizes_struct(source: &str) -> &str {
        let start = source.find("struct Sizes {").expect("every shader declares Sizes");
        let end = start + source[start..].find('}').expect("closed");
        &source[start..=end]
    }

    #[test]
    fn every_shader_declares_the_hosts_sizes() {
        // WGSL has no includes: each shader repeats the struct, and all must agree with the
        // host's 12 fields of 4 bytes.
        let first = sizes_struct(shaders::LINEAR);
        for source in [shaders::LAYER_NORM, shaders::EMBED, shaders::HEADS] {
            assert_eq!(sizes_struct(source), first);
        }
        let fields = first.lines().filter(|l| l.trim_end().ends_with(',')).count();
        assert_eq!((fields, std::mem::size_of::<Sizes>()), (12, 48));
    }
}
