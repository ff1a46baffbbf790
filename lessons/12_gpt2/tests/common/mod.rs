//! What the tests comparing with PyTorch's answers share.

use lesson12::tiny_checkpoint;
use ndarray::{Array2, ArrayView2};
use reference::Storage;
use safetensors::{Dtype, SafeTensors};

/// The reference file's tensors.
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    pub fn load() -> Self {
        let path = tiny_checkpoint().join("reference.safetensors");
        Self { bytes: std::fs::read(&path).expect("checkpoint/tiny/reference.safetensors") }
    }

    fn file(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("a safetensors file")
    }

    pub fn ids(&self, name: &str) -> Vec<u32> {
        let file = self.file();
        let tensor = file.tensor(name).expect(name);
        assert_eq!(tensor.dtype(), Dtype::I64);
        tensor
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect()
    }

    pub fn matrix(&self, name: &str) -> Array2<f64> {
        let file = self.file();
        let tensor = file.tensor(name).expect(name);
        assert_eq!(tensor.dtype(), Dtype::F64);
        let data = tensor.data().chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap()));
        Array2::from_shape_vec((tensor.shape()[0], tensor.shape()[1]), data.collect()).unwrap()
    }

    #[allow(dead_code, reason = "the GPU tests read no text")]
    pub fn text(&self, key: &str) -> String {
        let (_, metadata) = SafeTensors::read_metadata(&self.bytes).unwrap();
        metadata.metadata().as_ref().and_then(|m| m.get(key)).expect(key).clone()
    }
}

/// The largest difference from the reference, relative to the reference's largest value.
pub fn relative_error(ours: ArrayView2<f32>, reference: ArrayView2<f64>) -> f64 {
    assert_eq!(ours.dim(), reference.dim());
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
