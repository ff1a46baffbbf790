//! Version 4: the tile sizes written into the source as constants instead of overrides, so
//! that arrays of cooperative matrices have exact sizes; 32 query rows per subgroup; the next
//! tile of K and V prefetched into registers (`v4_specialised.wgsl`).

use gpu::GpuError;
use gpu::wgsl::specialise;
use reference::{About, AttentionError};

use crate::{LeaveOut, Shader, TileShape, V2, Version};

/// Version 4's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v4_specialised.wgsl");

/// Version 4.
pub struct V4;

/// Version 4's shape of work, written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialisedTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2 (two feed each K or V fragment to two products).
    pub row_tiles: usize,
    /// Keys per tile: 32 or 64.
    pub block_kv: usize,
    /// Whether the next tile of K and V is read into registers during this one.
    pub prefetch: bool,
}

/// `subgroups x row_tiles x 16` rows, `block_kv` keys, prefetching or not.
fn tiles(subgroups: usize, row_tiles: usize, block_kv: usize, prefetch: bool) -> SpecialisedTiles {
    SpecialisedTiles { subgroups, row_tiles, block_kv, prefetch }
}

impl SpecialisedTiles {
    /// The constants [`gpu::wgsl::specialise`] writes into version 4's source.
    pub fn constants(&self, head_dim: usize) -> [(&'static str, usize); 5] {
        [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("PREFETCH", self.prefetch as usize),
        ]
    }
}

impl TileShape for SpecialisedTiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16): Q, or K and V, in f16 (rows
    /// of D + 8 halves), S in f32 and P in f16 (rows padded by 4 and 8), a rescale factor per
    /// row and a flag (16 bytes).
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let kv_rows = (2 * keys).max(rows);
        kv_rows * (head_dim + 8) * 2 + rows * (keys + 4) * 4 + rows * (keys + 8) * 2 + rows * 4 + 16
    }
}

impl Version for V4 {
    type Tiles = SpecialisedTiles;
    const NUMBER: u32 = 4;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change =
            "constants for exact fragment arrays, 32 rows per subgroup, next tile prefetched";
        About { name: "v4 specialised", change, ..V2::about() }
    }

    /// The tiles measured fastest on an H100 at `head_dim` (the lab's `tune`, 2026-11-25),
    /// then smaller ones.
    fn preferred(head_dim: usize) -> Vec<SpecialisedTiles> {
        if head_dim <= 64 {
            vec![tiles(4, 2, 32, true), tiles(4, 1, 64, true), tiles(4, 1, 32, true)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32, true), tiles(2, 1, 32, true)]
        } else {
            vec![tiles(4, 1, 32, false), tiles(2, 1, 32, false), tiles(1, 1, 32, false)]
        }
    }

    /// Each knob changed one at a time around a few starting points, and the smaller shapes it
    /// falls back to (two row tiles only up to D = 128: beyond, their fragments would not fit
    /// in 255 registers).
    fn tried(head_dim: usize) -> Vec<SpecialisedTiles> {
        let mut all = vec![
            tiles(4, 1, 64, true),
            tiles(4, 1, 32, true),
            tiles(4, 1, 32, false),
            tiles(4, 2, 32, false),
            tiles(4, 2, 32, true),
            tiles(8, 1, 32, true),
            tiles(2, 1, 32, true),
            tiles(2, 1, 32, false),
            tiles(1, 1, 32, false),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    /// 1 or 2 row tiles, 32 or 64 keys, 1 to 8 subgroups sharing a tile of K and V evenly.
    fn check(
        tiles: &SpecialisedTiles,
        _: &wgpu::Device,
        head_dim: usize,
    ) -> Result<(), AttentionError> {
        let threads = 32 * tiles.subgroups;
        let sensible = [1, 2].contains(&tiles.row_tiles)
            && [32, 64].contains(&tiles.block_kv)
            && [1, 2, 4, 8].contains(&tiles.subgroups)
            && (2 * tiles.block_kv * head_dim / 4).is_multiple_of(threads);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v4 specialised: {tiles:?} at head_dim {head_dim}; expected 1 or 2 row tiles, 32 \
                 or 64 keys, 1 to 8 subgroups sharing a tile evenly"
            ))
            .into());
        }
        Ok(())
    }

    fn shader(
        tiles: &SpecialisedTiles,
        head_dim: usize,
        _leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(specialise(SOURCE, &tiles.constants(head_dim))?))
    }

    fn describe(t: &SpecialisedTiles) -> String {
        let prefetch = if t.prefetch { ", prefetch" } else { "" };
        format!("v4 {}x{}x16 rows, {} keys{prefetch}", t.subgroups, t.row_tiles, t.block_kv)
    }
}
