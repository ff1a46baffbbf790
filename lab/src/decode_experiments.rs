//! Lesson 11's experiments on its decoding kernel: restructurings that each give the oracle's
//! answer, for a learner to apply and time against the lesson's kernel. Each is its patch of
//! `decode.wgsl` (`lab/decode_experiments/NAME.patch`, made against the kernel with its anchor
//! lines left out), whose header says what it changes, the workgroup memory it takes and the
//! commands that time it; with the layout to time it at.

use lesson11::gpu_decode::{KernelShape, SHADER};

use crate::patch;

/// One experiment: its name, the layout its header measures, its patch.
pub struct Experiment {
    /// The patch's file name without `.patch`.
    pub name: &'static str,
    /// The layout of the split kernel to time it at.
    pub layout: KernelShape,
    patch: &'static str,
}

macro_rules! experiment {
    ($name:literal, $layout:expr) => {
        Experiment {
            name: $name,
            layout: KernelShape::from($layout),
            patch: include_str!(concat!("../decode_experiments/", $name, ".patch")),
        }
    };
}

/// Every experiment, in the order the chapter's lab notes list them.
pub fn experiments() -> Vec<Experiment> {
    vec![
        experiment!("values_before_scores", [128, 1, 8, 512]),
        experiment!("split_dot_products", [128, 1, 8, 512]),
        experiment!("own_softmax_per_thread", [32, 2, 16, 256]),
        experiment!("keys_in_halves", [128, 1, 8, 512]),
        experiment!("acc_in_workgroup_memory", [128, 1, 8, 512]),
        experiment!("acc_and_keys_in_halves", [128, 1, 8, 512]),
    ]
}

impl Experiment {
    /// The experiment's kernel: the lesson's `decode.wgsl` with its patch applied.
    pub fn source(&self) -> Result<String, String> {
        let lesson: String = SHADER
            .lines()
            .filter(|line| !line.trim_start().starts_with("// ANCHOR"))
            .map(|line| format!("{line}\n"))
            .collect();
        patch::apply(&lesson, self.patch).map_err(|e| format!("{}.patch: {e}", self.name))
    }
}
