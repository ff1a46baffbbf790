//! Version 6: the host unrolls every loop over fragments ([`gpu::wgsl::unroll`]), so every index
//! into an array of cooperative matrices is a constant and every fragment stays in registers
//! (`v6_registers.wgsl`). Version 5's tiles, V never transposed.

use gpu::wgsl::{specialise, unroll};
use reference::{About, AttentionError};

use crate::v5_pipelined::tiles;
use crate::{LeaveOut, PipelinedTiles, Shader, V2, Version};

/// Version 6's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v6_registers.wgsl");

/// Version 6.
pub struct V6;

/// The constants [`gpu::wgsl::specialise`] writes into version 6's source.
pub fn constants(
    tiles: &PipelinedTiles,
    head_dim: usize,
    leave_out: LeaveOut,
) -> [(&'static str, usize); 5] {
    [
        ("HEAD_DIM", head_dim),
        ("BLOCK_KV", tiles.block_kv),
        ("SUBGROUPS", tiles.subgroups),
        ("ROW_TILES", tiles.row_tiles),
        ("LEAVE_OUT", leave_out.0 as usize),
    ]
}

impl Version for V6 {
    type Tiles = PipelinedTiles;
    const NUMBER: u32 = 6;
    const ROW_ALIGNMENT: usize = 16;
    const LEAVES_OUT: LeaveOut = LeaveOut::IN_VERSION_6;

    fn about() -> About {
        let change =
            "the host unrolls every loop over fragments: all of them in registers, none in memory";
        About { name: "v6 registers", change, ..V2::about() }
    }

    /// As measured on an H100 (2026-11-25, the lab's `tune` at N = 16384: 100 TFLOP/s at
    /// D = 64, 93 at D = 128).
    fn preferred(head_dim: usize) -> Vec<PipelinedTiles> {
        if head_dim <= 64 {
            vec![tiles(4, 2, 32), tiles(4, 1, 16)]
        } else if head_dim <= 128 {
            vec![tiles(4, 1, 32), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16), tiles(2, 1, 16)]
        }
    }

    fn tried(head_dim: usize) -> Vec<PipelinedTiles> {
        let mut all = vec![
            tiles(4, 1, 64),
            tiles(2, 2, 64),
            tiles(2, 1, 64),
            tiles(4, 2, 32),
            tiles(4, 1, 32),
            tiles(2, 2, 32),
            tiles(8, 1, 32),
            tiles(4, 1, 16),
            tiles(2, 1, 16),
        ];
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        all
    }

    /// Version 5's rules, with V never transposed.
    fn check(
        tiles: &PipelinedTiles,
        _: &wgpu::Device,
        head_dim: usize,
    ) -> Result<(), AttentionError> {
        tiles.check("v6 registers", head_dim)?;
        if tiles.transpose_v {
            let message =
                format!("v6 registers: {tiles:?}; expected V row-major (transpose_v false)");
            return Err(gpu::GpuError::KernelMisuse(message).into());
        }
        Ok(())
    }

    /// Its constants set, its marked loops unrolled.
    fn shader(
        tiles: &PipelinedTiles,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(unroll(&specialise(SOURCE, &constants(tiles, head_dim, leave_out))?)?))
    }

    fn describe(t: &PipelinedTiles) -> String {
        format!("v6 {}x{}x16 rows, {} keys", t.subgroups, t.row_tiles, t.block_kv)
    }
}
