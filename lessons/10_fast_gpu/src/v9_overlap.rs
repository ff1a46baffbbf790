//! Version 9: version 8 with the next tile's scores computed in the phase of this tile's
//! softmax (`v9_overlap.wgsl`). Version 8's tiles and workgroup memory.

use reference::{About, AttentionError};

use crate::{ArenaTiles, LeaveOut, Shader, V8, Version};

/// Version 9's WGSL source (its constants set by [`gpu::wgsl::specialise`]; version 8's tiles).
pub const SOURCE: &str = include_str!("v9_overlap.wgsl");

/// Version 9.
pub struct V9;

impl Version for V9 {
    type Tiles = ArenaTiles;
    const NUMBER: u32 = 9;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change = "the next tile's scores computed in the phase of this tile's softmax";
        About { name: "v9 overlap", change, ..V8::about() }
    }

    /// Version 8's.
    fn preferred(head_dim: usize) -> Vec<ArenaTiles> {
        V8::preferred(head_dim)
    }

    /// Version 8's.
    fn tried(head_dim: usize) -> Vec<ArenaTiles> {
        V8::tried(head_dim)
    }

    fn check(tiles: &ArenaTiles, _: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError> {
        tiles.check("v9 overlap", head_dim)
    }

    fn shader(tiles: &ArenaTiles, head_dim: usize, _: LeaveOut) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(tiles.source_from(SOURCE, head_dim)?))
    }

    fn describe(tiles: &ArenaTiles) -> String {
        tiles.describe_as("v9")
    }
}
