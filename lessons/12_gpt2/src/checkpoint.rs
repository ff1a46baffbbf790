//! Reading GPT-2's weights from a Hugging Face `model.safetensors`.
//!
//! A safetensors file is an 8-byte header length, a JSON header naming each tensor with its
//! dtype, shape and byte range, then the raw little-endian data. GPT-2's tensors are named as
//! in transformers' `GPT2Model` (`wte.weight`, `h.0.attn.c_attn.weight`, ...), with the prefix
//! `transformer.` when saved from `GPT2LMHeadModel`; both are read.
//!
//! GPT-2's linear layers are `Conv1D` modules, which store their weight as `[in, out]` and
//! compute `x W + b`: the transpose of `torch.nn.Linear`'s `[out, in]`. A loader that treats
//! them as `Linear` weights transposes every one; for the square `c_proj` of the attention the
//! shapes still fit, and only the logits show the mistake.

use std::collections::BTreeSet;

use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors};

use crate::ModelError;

/// The tensors of a checkpoint, read one by one, each checked against the shape the config
/// implies; [`Tensors::finish`] then refuses any tensor that was not read.
pub struct Tensors<'a> {
    file: SafeTensors<'a>,
    prefix: &'static str,
    read: BTreeSet<String>,
}

impl<'a> Tensors<'a> {
    /// Parses a safetensors file's header.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ModelError> {
        let file = SafeTensors::deserialize(bytes).map_err(|error| {
            ModelError::checkpoint("model.safetensors", format!("{error}"), "a safetensors file")
        })?;
        let names = file.names();
        let prefixed = names.iter().any(|name| name.starts_with("transformer."));
        let prefix = if prefixed { "transformer." } else { "" };
        Ok(Self { file, prefix, read: BTreeSet::new() })
    }

    /// The tensor `name` (without the `transformer.` prefix), which must have `shape`, as f32.
    /// `why` says where the shape comes from, for the error.
    pub fn vector(&mut self, name: &str, len: usize, why: &str) -> Result<Array1<f32>, ModelError> {
        let data = self.read(name, &[len], why)?;
        Ok(Array1::from(data))
    }

    /// ... a matrix `[rows, columns]`.
    pub fn matrix(
        &mut self,
        name: &str,
        shape: [usize; 2],
        why: &str,
    ) -> Result<Array2<f32>, ModelError> {
        let data = self.read(name, &shape, why)?;
        Ok(Array2::from_shape_vec(shape, data).expect("the length was checked"))
    }

    /// Whether the file holds `name` (without the prefix).
    pub fn contains(&self, name: &str) -> bool {
        self.file.tensor(&self.full_name(name)).is_ok()
    }

    /// The name in the file: with the prefix, except the head, which `GPT2LMHeadModel` keeps
    /// outside its `transformer`.
    fn full_name(&self, name: &str) -> String {
        let prefix = if name.starts_with("lm_head.") { "" } else { self.prefix };
        format!("{prefix}{name}")
    }

    fn read(&mut self, name: &str, shape: &[usize], why: &str) -> Result<Vec<f32>, ModelError> {
        let full = self.full_name(name);
        let tensor = self.file.tensor(&full).map_err(|_| {
            ModelError::checkpoint(
                format!("model.safetensors: {full}"),
                "no such tensor",
                format!("a tensor of shape {shape:?} ({why})"),
            )
        })?;
        if tensor.shape() != shape {
            return Err(ModelError::checkpoint(
                format!("model.safetensors: {full}"),
                format!("shape {:?}", tensor.shape()),
                format!("{shape:?} ({why})"),
            ));
        }
        let data = to_f32(tensor.dtype(), tensor.data()).ok_or_else(|| {
            ModelError::checkpoint(
                format!("model.safetensors: {full}"),
                format!("dtype {:?}", tensor.dtype()),
                "F32, F16, BF16 or F64",
            )
        })?;
        if let Some(at) = data.iter().position(|x| !x.is_finite()) {
            return Err(ModelError::checkpoint(
                format!("model.safetensors: {full}"),
                format!("{} at element {at}", data[at]),
                "finite weights",
            ));
        }
        self.read.insert(full);
        Ok(data)
    }

    /// Refuses a file that holds tensors that were not read, except GPT-2's causal-mask
    /// buffers (`h.N.attn.bias`, `h.N.attn.masked_bias`, in older checkpoints). A tensor left
    /// over means the file is not the model the config describes (more layers than
    /// `n_layer`, another architecture).
    pub fn finish(self) -> Result<(), ModelError> {
        let is_buffer =
            |name: &str| name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
        let names = self.file.names();
        let mut left: Vec<&str> = names
            .into_iter()
            .filter(|name| !self.read.contains(*name) && !is_buffer(name))
            .collect();
        left.sort();
        match left.first() {
            None => Ok(()),
            Some(first) => Err(ModelError::checkpoint(
                format!("model.safetensors: {first}"),
                format!("a tensor the config does not describe ({} such)", left.len()),
                "only the tensors of the model in config.json",
            )),
        }
    }
}

/// Little-endian numbers of a supported dtype, as f32.
fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => {
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
        }
        Dtype::F64 => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32)
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes(b.try_into().unwrap()).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes(b.try_into().unwrap()).to_f32())
            .collect(),
        _ => return None,
    })
}
