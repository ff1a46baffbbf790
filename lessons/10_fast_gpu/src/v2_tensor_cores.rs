//! Version 2: both matrix products on the tensor cores, through WGSL's cooperative matrices:
//! f16 inputs, f32 sums, P rounded to f16, and a lazy rescale of O (`v2_tensor_cores.wgsl`).

use gpu::kernel::Checks;
use reference::{About, AttentionError, Device, Storage, Tolerance};

use crate::{LeaveOut, Shader, TileShape, Version};

/// Version 2's WGSL source (version 3's too).
pub const SOURCE: &str = include_str!("v2_tensor_cores.wgsl");

/// Version 2.
pub struct V2;

/// Version 2's tiles: 64 query rows (4 subgroups of 16) and `block_kv` keys per tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorCoreTiles {
    /// Keys per tile: 64, or 32 where 64 would not fit in workgroup memory (D >= 128).
    pub block_kv: usize,
}

impl TensorCoreTiles {
    /// Query rows per workgroup: 16 per subgroup, 4 subgroups.
    pub const BLOCK_Q: usize = 64;

    /// Version 2's shader for these tiles at `head_dim`, its overrides set, with wgpu's
    /// run-time checks as `checks` says (version 3 turns them off).
    pub fn shader(&self, head_dim: usize, checks: Checks) -> Shader {
        let overrides = vec![("HEAD_DIM", head_dim as f64), ("BLOCK_KV", self.block_kv as f64)];
        Shader { source: SOURCE.into(), overrides, checks }
    }
}

impl TileShape for TensorCoreTiles {
    fn block_q(&self) -> usize {
        Self::BLOCK_Q
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): K and V in f16 (rows of
    /// D + 8 halves), S in f32 and P in f16 (rows padded by 4 and 8), a rescale factor per
    /// row and a flag (16 bytes).
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (Self::BLOCK_Q, self.block_kv);
        2 * keys * (head_dim + 8) * 2
            + rows * (keys + 4) * 4
            + rows * (keys + 8) * 2
            + rows * 4
            + 16
    }
}

impl Version for V2 {
    type Tiles = TensorCoreTiles;
    const NUMBER: u32 = 2;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change =
            "both matrix products on the tensor cores: f16 inputs, f32 sums, P rounded to f16";
        About::forward("v2 tensor cores", env!("CARGO_PKG_NAME"), Device::Gpu, change)
            .stored_in(Storage::F16, Tolerance::F16_STORAGE_AND_WEIGHTS)
    }

    /// 64 keys per tile where they fit, else 32.
    fn preferred(_head_dim: usize) -> Vec<TensorCoreTiles> {
        [64, 32].map(|block_kv| TensorCoreTiles { block_kv }).into()
    }

    fn tried(head_dim: usize) -> Vec<TensorCoreTiles> {
        Self::preferred(head_dim)
    }

    fn shader(
        tiles: &TensorCoreTiles,
        head_dim: usize,
        _leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        Ok(tiles.shader(head_dim, Checks::On))
    }

    fn describe(tiles: &TensorCoreTiles) -> String {
        format!("v2 64 rows, {} keys", tiles.block_kv)
    }
}
