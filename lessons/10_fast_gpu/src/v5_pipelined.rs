//! Version 5: software pipelining. The products of one tile run beside the softmax of the
//! next, with two barriers per tile instead of four (`v5_pipelined.wgsl`).

use gpu::GpuError;
use gpu::wgsl::specialise;
use reference::{About, AttentionError};

use crate::{LeaveOut, Shader, TileShape, V2, Version};

/// Version 5's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v5_pipelined.wgsl");

/// Version 5.
pub struct V5;

/// Version 5's shape of work (version 6's too), written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelinedTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2.
    pub row_tiles: usize,
    /// Keys per tile: 16, 32 or 64.
    pub block_kv: usize,
    /// V staged as `V^T`, which the tensor cores read as a column-major operand.
    pub transpose_v: bool,
}

/// `subgroups x row_tiles x 16` rows, `block_kv` keys, V row-major (as version 5 runs).
pub(crate) fn tiles(subgroups: usize, row_tiles: usize, block_kv: usize) -> PipelinedTiles {
    PipelinedTiles { subgroups, row_tiles, block_kv, transpose_v: false }
}

impl PipelinedTiles {
    /// Whether `version` (5 or 6) accepts these tiles at `head_dim` (a multiple of 16).
    pub fn check(&self, version: &str, head_dim: usize) -> Result<(), AttentionError> {
        let (subgroups, row_tiles, block_kv) = (self.subgroups, self.row_tiles, self.block_kv);
        check_subgroup_tiles(version, self, (subgroups, row_tiles, block_kv), head_dim)
    }

    /// The constants [`gpu::wgsl::specialise`] writes into version 5's source.
    pub fn constants(&self, head_dim: usize, leave_out: LeaveOut) -> [(&'static str, usize); 6] {
        [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("TRANSPOSE_V", self.transpose_v as usize),
            ("LEAVE_OUT", leave_out.0 as usize),
        ]
    }
}

impl TileShape for PipelinedTiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): K and V of a tile, or Q
    /// before the loop, in f16 (rows of D + 8 halves); S in f32 (rows padded by 4 floats per
    /// lane that reads a row); P in f16 (rows padded by 8); a rescale factor per row; a flag.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let lanes_per_row = 32 / (16 * self.row_tiles);
        let row = (head_dim + 8) * 2;
        let values = if self.transpose_v { head_dim * (keys + 8) * 2 } else { keys * row };
        (keys * row + values).max(rows * row)
            + rows * (keys + 4 * lanes_per_row) * 4
            + rows * (keys + 8) * 2
            + rows * 4
            + 16
    }
}

/// Whether a tensor-core version (5, 6, 8 or 9) accepts `tiles`, whose shape is `(subgroups,
/// row tiles, keys per tile)`, at `head_dim`: 1 to 8 subgroups, 1 or 2 row tiles, 16, 32 or 64
/// keys, a head dimension that is a multiple of 16.
pub(crate) fn check_subgroup_tiles(
    version: &str,
    tiles: &impl std::fmt::Debug,
    (subgroups, row_tiles, block_kv): (usize, usize, usize),
    head_dim: usize,
) -> Result<(), AttentionError> {
    let sensible = [1, 2].contains(&row_tiles)
        && [16, 32, 64].contains(&block_kv)
        && [1, 2, 4, 8].contains(&subgroups)
        && head_dim.is_multiple_of(16);
    if !sensible {
        return Err(GpuError::KernelMisuse(format!(
            "{version}: {tiles:?} at head_dim {head_dim}; expected 1 or 2 row tiles, 16, 32 or \
             64 keys, 1 to 8 subgroups, a head_dim that is a multiple of 16"
        ))
        .into());
    }
    Ok(())
}

impl Version for V5 {
    type Tiles = PipelinedTiles;
    const NUMBER: u32 = 5;
    const ROW_ALIGNMENT: usize = 16;
    const LEAVES_OUT: LeaveOut = LeaveOut::IN_VERSION_5;

    fn about() -> About {
        let change = "products of one tile beside the softmax of the next: two barriers per tile";
        About { name: "v5 pipelined", change, ..V2::about() }
    }

    /// The tiles measured fastest on an H100 at `head_dim` (the lab's `tune`, 2026-11-25),
    /// then smaller ones.
    fn preferred(head_dim: usize) -> Vec<PipelinedTiles> {
        if head_dim <= 64 {
            vec![tiles(4, 2, 32), tiles(4, 1, 64), tiles(4, 1, 32)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16), tiles(2, 1, 16)]
        }
    }

    /// The preferred tiles, and the others with V staged transposed.
    fn tried(head_dim: usize) -> Vec<PipelinedTiles> {
        let transposed = |subgroups, row_tiles, block_kv| PipelinedTiles {
            transpose_v: true,
            ..tiles(subgroups, row_tiles, block_kv)
        };
        let mut all = vec![
            tiles(4, 2, 32),
            tiles(4, 1, 32),
            tiles(4, 1, 64),
            tiles(4, 1, 16),
            tiles(2, 1, 16),
            transposed(4, 2, 32),
            transposed(4, 1, 64),
            transposed(4, 1, 32),
            transposed(4, 1, 16),
            transposed(8, 1, 32),
            transposed(8, 1, 16),
            transposed(4, 2, 16),
            transposed(2, 2, 32),
            transposed(2, 1, 16),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    fn check(
        tiles: &PipelinedTiles,
        _: &wgpu::Device,
        head_dim: usize,
    ) -> Result<(), AttentionError> {
        tiles.check("v5 pipelined", head_dim)
    }

    fn shader(
        tiles: &PipelinedTiles,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(specialise(SOURCE, &tiles.constants(head_dim, leave_out))?))
    }

    fn describe(t: &PipelinedTiles) -> String {
        let layout = if t.transpose_v { "" } else { ", V row-major" };
        format!("v5 {}x{}x16 rows, {} keys{layout}", t.subgroups, t.row_tiles, t.block_kv)
    }
}
