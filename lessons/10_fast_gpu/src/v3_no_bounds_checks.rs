//! Version 3: version 2's shader compiled without wgpu's run-time bounds checks (every array
//! index clamped, every loop bounded), which its tests prove unnecessary on every shape.

use gpu::kernel::Checks;
use reference::{About, AttentionError};

use crate::{LeaveOut, Shader, TensorCoreTiles, V2, Version};

/// Version 3.
pub struct V3;

impl Version for V3 {
    type Tiles = TensorCoreTiles;
    const NUMBER: u32 = 3;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change =
            "v2 compiled without wgpu's run-time bounds checks (its tests prove every index)";
        About { name: "v3 no bounds checks", change, ..V2::about() }
    }

    fn preferred(head_dim: usize) -> Vec<TensorCoreTiles> {
        V2::preferred(head_dim)
    }

    fn tried(head_dim: usize) -> Vec<TensorCoreTiles> {
        V2::tried(head_dim)
    }

    fn shader(
        tiles: &TensorCoreTiles,
        head_dim: usize,
        _leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        Ok(tiles.shader(head_dim, Checks::Off))
    }

    fn describe(tiles: &TensorCoreTiles) -> String {
        format!("v3 64 rows, {} keys", tiles.block_kv)
    }
}
