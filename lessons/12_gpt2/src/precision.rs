//! Precision strategies for the whole model, and a monitor of every layer's output.
//!
//! Lesson 06 showed which parts of attention must stay in f32. A model has more parts, and a
//! strategy says for each where numbers are rounded to 16 bits:
//!
//! | | weights | activations between operations | residual stream | LayerNorm statistics | logits |
//! |---|---|---|---|---|---|
//! | [`Precision::F32`] ("conservative") | f32 | f32 | f32 | f32 | f32 |
//! | [`Precision::Mixed`] | 16-bit | 16-bit | f32 | f32 | f32 |
//! | [`Precision::Aggressive`] | 16-bit | 16-bit | 16-bit | 16-bit | 16-bit |
//!
//! Arithmetic inside each operation (a matrix product's sums, attention's softmax) stays f32
//! in every strategy, as on tensor cores and in every FlashAttention kernel: what a strategy
//! changes is what is *stored*. Attention's inputs are Q, K and V as stored, so with 16-bit
//! activations it computes what FlashAttention computes from f16 or bf16 tensors.

use ndarray::{Array2, ArrayBase, DataMut, Dimension};

pub use lesson06::Dtype;

/// Where a forward pass rounds to a 16-bit format (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 everywhere.
    F32,
    /// 16-bit weights and activations; f32 residual stream, LayerNorm statistics and logits.
    Mixed(Dtype),
    /// 16-bit everywhere outside the arithmetic of each operation.
    Aggressive(Dtype),
}

impl Precision {
    /// The strategies the report compares, in order.
    pub const ALL: [Precision; 5] = [
        Precision::F32,
        Precision::Mixed(Dtype::F16),
        Precision::Mixed(Dtype::BF16),
        Precision::Aggressive(Dtype::F16),
        Precision::Aggressive(Dtype::BF16),
    ];

    /// `"f32"`, `"mixed f16"`, `"aggressive bf16"`, ...
    pub fn name(self) -> String {
        match self {
            Self::F32 => "f32".into(),
            Self::Mixed(dtype) => format!("mixed {}", dtype.name()),
            Self::Aggressive(dtype) => format!("aggressive {}", dtype.name()),
        }
    }

    /// The 16-bit format of weights and activations (`F32` for none).
    pub fn storage(self) -> Dtype {
        match self {
            Self::F32 => Dtype::F32,
            Self::Mixed(dtype) | Self::Aggressive(dtype) => dtype,
        }
    }

    /// The format of the residual stream, the LayerNorm statistics and the logits.
    pub fn stream(self) -> Dtype {
        match self {
            Self::Aggressive(dtype) => dtype,
            Self::F32 | Self::Mixed(_) => Dtype::F32,
        }
    }
}

/// `x` rounded to `dtype` (to the nearest, ties to even; beyond the largest finite number,
/// infinity), kept in f32.
pub fn round(x: f32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => x,
        Dtype::F16 => half::f16::from_f32(x).to_f32(),
        Dtype::BF16 => half::bf16::from_f32(x).to_f32(),
    }
}

/// Every element of `x` rounded to `dtype`.
pub fn round_all<S: DataMut<Elem = f32>, D: Dimension>(x: &mut ArrayBase<S, D>, dtype: Dtype) {
    if dtype != Dtype::F32 {
        x.mapv_inplace(|v| round(v, dtype));
    }
}

// ANCHOR: monitor
/// The statistics of one layer's output.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerStats {
    /// Where in the model: `"embeddings"`, `"h.0.attn"`, `"h.0.mlp"`, `"h.0"`, `"ln_f"`,
    /// `"logits"`.
    pub layer: String,
    /// Of the finite values.
    pub mean: f64,
    /// Of the finite values.
    pub std: f64,
    /// Of the finite values.
    pub min: f32,
    /// Of the finite values.
    pub max: f32,
    /// NaN values.
    pub nan: usize,
    /// Infinite values.
    pub inf: usize,
}

/// A record of every layer's output statistics during forward passes, in order.
#[derive(Clone, Debug, Default)]
pub struct Monitor {
    /// One entry per layer output, in the order computed.
    pub layers: Vec<LayerStats>,
}

impl Monitor {
    /// Records `x`, the output of `layer`.
    pub fn record(&mut self, layer: &str, x: &Array2<f32>) {
        let finite: Vec<f32> = x.iter().copied().filter(|v| v.is_finite()).collect();
        let n = finite.len().max(1) as f64;
        let mean = finite.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let variance = finite.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
        self.layers.push(LayerStats {
            layer: layer.to_string(),
            mean,
            std: variance.sqrt(),
            min: finite.iter().copied().fold(f32::INFINITY, f32::min),
            max: finite.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            nan: x.iter().filter(|v| v.is_nan()).count(),
            inf: x.iter().filter(|v| v.is_infinite()).count(),
        });
    }

    /// The first layer whose output holds a NaN or an infinity.
    pub fn first_non_finite(&self) -> Option<&LayerStats> {
        self.layers.iter().find(|stats| stats.nan + stats.inf > 0)
    }
}
// ANCHOR_END: monitor

/// The monitor's records as a table, one row per layer.
pub fn table(monitor: &Monitor) -> String {
    let mut out = format!(
        "{:<12} {:>11} {:>11} {:>11} {:>11} {:>6} {:>6}\n",
        "layer", "mean", "std", "min", "max", "NaN", "inf"
    );
    for s in &monitor.layers {
        let numbers = if s.min <= s.max {
            format!("{:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e}", s.mean, s.std, s.min, s.max)
        } else {
            format!("{:>11} {:>11} {:>11} {:>11}", "-", "-", "-", "-") // no finite value
        };
        out += &format!("{:<12} {numbers} {:>6} {:>6}\n", s.layer, s.nan, s.inf);
    }
    out
}

/// Logits of a strategy against f32's: mean squared error, largest difference, and that
/// difference relative to f32's largest logit.
/// NaN for all three if a logit is not finite.
pub fn logit_errors(ours: &Array2<f32>, f32_logits: &Array2<f32>) -> (f64, f64, f64) {
    if ours.iter().any(|x| !x.is_finite()) {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let differences = ours.iter().zip(f32_logits).map(|(&a, &b)| f64::from(a) - f64::from(b));
    let (squares, largest) =
        differences.fold((0.0, 0.0f64), |(s, m), d| (s + d * d, m.max(d.abs())));
    let scale = f32_logits.iter().fold(0.0f64, |m, &x| m.max(f64::from(x).abs()));
    (squares / ours.len().max(1) as f64, largest, largest / scale)
}
