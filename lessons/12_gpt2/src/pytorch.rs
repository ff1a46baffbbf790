//! What PyTorch's transformers computed for the tiny checkpoint, in float64
//! (`checkpoint/tiny/reference.safetensors`, made by `checkpoint/make_tiny.py`), and how far a
//! backend may be from it: what the tests, the tour and exercise 12's grader compare with.
//!
//! The file holds `input_ids` (37 tokens) with the `hidden_states.{i}` and `logits` of one
//! forward pass over them, and `prompt_ids` (4 tokens) with the 12 tokens greedy generation
//! gives after them (`generated`); its metadata holds the texts (`text`, `prompt`).

use ndarray::{Array2, ArrayView2};
use reference::Storage;
use safetensors::{Dtype, SafeTensors};

use crate::ModelError;

/// The reference file.
pub struct Answers {
    bytes: Vec<u8>,
}

impl Answers {
    /// Reads the tiny checkpoint's reference file.
    pub fn load() -> Result<Self, ModelError> {
        let path = crate::tiny_checkpoint().join("reference.safetensors");
        let bytes = std::fs::read(&path).map_err(|error| ModelError::io(&path, error))?;
        Ok(Self { bytes })
    }

    fn tensor(&self, name: &str, dtype: Dtype) -> Result<(Vec<usize>, Vec<u8>), ModelError> {
        let bad = |found: String| {
            ModelError::checkpoint(
                format!("reference.safetensors: {name}"),
                found,
                format!("{dtype:?}"),
            )
        };
        let file = SafeTensors::deserialize(&self.bytes).map_err(|e| bad(e.to_string()))?;
        let tensor = file.tensor(name).map_err(|e| bad(e.to_string()))?;
        if tensor.dtype() != dtype {
            return Err(bad(format!("{:?}", tensor.dtype())));
        }
        Ok((tensor.shape().to_vec(), tensor.data().to_vec()))
    }

    /// Token ids (`input_ids`, `prompt_ids`, `generated`).
    pub fn ids(&self, name: &str) -> Result<Vec<u32>, ModelError> {
        let (_, data) = self.tensor(name, Dtype::I64)?;
        let id = |b: &[u8]| i64::from_le_bytes(b.try_into().expect("8 bytes")) as u32;
        Ok(data.chunks_exact(8).map(id).collect())
    }

    /// A float64 matrix (`hidden_states.{i}`, `logits`).
    pub fn matrix(&self, name: &str) -> Result<Array2<f64>, ModelError> {
        let (shape, data) = self.tensor(name, Dtype::F64)?;
        let value = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
        let values = data.chunks_exact(8).map(value).collect();
        Array2::from_shape_vec((shape[0], shape[1]), values).map_err(|e| {
            ModelError::checkpoint(
                format!("reference.safetensors: {name}"),
                e.to_string(),
                "a matrix",
            )
        })
    }

    /// A text of the metadata (`text`, `prompt`).
    pub fn text(&self, key: &str) -> Result<String, ModelError> {
        let missing =
            || ModelError::checkpoint("reference.safetensors", format!("no {key}"), "its text");
        let (_, metadata) = SafeTensors::read_metadata(&self.bytes).map_err(|_| missing())?;
        metadata.metadata().as_ref().and_then(|m| m.get(key)).cloned().ok_or_else(missing)
    }
}

/// The largest difference from the reference, relative to the reference's largest value.
pub fn relative_error(ours: ArrayView2<f32>, reference: ArrayView2<f64>) -> f64 {
    assert_eq!(ours.dim(), reference.dim(), "the same shape");
    let largest = reference.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let worst =
        ours.iter().zip(reference).fold(0.0f64, |m, (&a, b)| m.max((f64::from(a) - b).abs()));
    worst / largest
}

/// How far a backend's hidden states and logits may be from float64, relative to the
/// largest value of each: the unit roundoff of the format attention stores its inputs in,
/// times 8, and 2e-5 for f32 arithmetic everywhere else. Measured on this checkpoint
/// (2026-11-25): 9.4e-7 at most with f32 storage, 5.7e-4 (1.2 units) with f16, 9.5e-3 (2.4
/// units) with bf16. A transposed Conv1D, a LayerNorm without its gain or a missing causal
/// mask give 0.1 or more.
pub fn tolerance(storage: Storage) -> f64 {
    let unit = match storage {
        Storage::F32 => 0.0,
        Storage::F16 => 2f64.powi(-11),
        Storage::BF16 => 2f64.powi(-8),
    };
    2e-5 + 8.0 * unit
}
