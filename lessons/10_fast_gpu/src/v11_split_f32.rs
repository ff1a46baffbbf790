//! Version 11: f32 inputs on the tensor cores, each split into two f16s (hi and lo): three
//! products for every one, f32's accuracy at a fraction of the tensor cores' speed
//! (`v11_split_f32.wgsl`).

use gpu::GpuError;
use gpu::wgsl::{specialise, unroll};
use reference::{About, AttentionError, Storage, Tolerance};

use crate::v8_arena::{arena_layout_bytes, kv_stride, kvp};
use crate::{LeaveOut, Shader, TileShape, V1, Version};

/// Version 11's WGSL: f32 inputs, each split into two f16s for the tensor cores.
pub const SOURCE: &str = include_str!("v11_split_f32.wgsl");

/// Version 11.
pub struct V11;

/// Version 11's shape of work: version 8's with one 16-row query tile per subgroup, Q in
/// registers and K and V read where they are staged; every f32 input is split into two f16s
/// (hi and lo), so K, V and P take twice version 8's arena and Q twice its registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitTiles {
    /// Subgroups of 32 threads per workgroup, 16 query rows each: 4 or 8.
    pub subgroups: usize,
    /// Keys per tile: 16 or 32.
    pub block_kv: usize,
}

impl SplitTiles {
    /// How Q reaches its registers: `(passes, subgroups per pass)`, as many subgroups' rows
    /// (hi and lo) at a time as fit where K, V and P will be (at least one).
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let subgroup_rows = 2 * 16 * kv_stride(head_dim);
        let per_pass = (self.kvp(head_dim) / subgroup_rows).clamp(1, self.subgroups);
        (self.subgroups.div_ceil(per_pass), per_pass)
    }

    /// K, V and P, each as hi and lo, in vec4s of halves (the shader's `KVP`).
    fn kvp(&self, head_dim: usize) -> usize {
        2 * kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether version 11 accepts these tiles at `head_dim`.
    pub fn check(&self, head_dim: usize) -> Result<(), AttentionError> {
        let sensible = [4, 8].contains(&self.subgroups)
            && [16, 32].contains(&self.block_kv)
            && head_dim.is_multiple_of(16);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v11 split f32: {self:?} at head_dim {head_dim}; expected 4 or 8 subgroups, 16 \
                 or 32 keys, a head_dim that is a multiple of 16"
            ))
            .into());
        }
        Ok(())
    }
}

impl TileShape for SplitTiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        16 * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16), as the shader declares it:
    /// the f16 arena (K, V and P, hi and lo, or one pass of Q's his and los if that is
    /// larger), S in f32, a rescale factor per row and the flag.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (_, per_pass) = self.query_passes(head_dim);
        let pass = 2 * 16 * per_pass * kv_stride(head_dim);
        let arena = self.kvp(head_dim).max(pass);
        arena_layout_bytes(arena, self.block_q(), self.block_kv / 4 + 2)
    }
}

impl Version for V11 {
    type Tiles = SplitTiles;
    const NUMBER: u32 = 11;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change =
            "f32 inputs as two f16s each on the tensor cores: three products for every one";
        About { name: "v11 split f32", change, ..V1::about() }
            .stored_in(Storage::F32, Tolerance::F16_PAIRS)
    }

    /// As measured on an H100 (2026-11-26, the lab's `tune` at N = 4096 and 16384): 4
    /// subgroups at D = 64 (65.6 and 73.3 TFLOP/s against 60.1 and 67.7 with 8), 8 at D = 128
    /// (66.3 and 68.0 against 47.3 and 40.6); at D = 256 only 4 fit.
    fn preferred(head_dim: usize) -> Vec<SplitTiles> {
        let subgroups = if head_dim <= 64 { [4, 8] } else { [8, 4] };
        subgroups.into_iter().map(|subgroups| SplitTiles { subgroups, block_kv: 16 }).collect()
    }

    /// Every shape (those that do not fit a device's workgroup memory are left out where they
    /// run).
    fn tried(_head_dim: usize) -> Vec<SplitTiles> {
        [(8, 16), (4, 16), (8, 32), (4, 32)]
            .into_iter()
            .map(|(subgroups, block_kv)| SplitTiles { subgroups, block_kv })
            .collect()
    }

    fn check(tiles: &SplitTiles, _: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError> {
        tiles.check(head_dim)
    }

    /// Its constants set, its marked loops unrolled.
    fn shader(tiles: &SplitTiles, head_dim: usize, _: LeaveOut) -> Result<Shader, AttentionError> {
        let constants =
            [("HEAD_DIM", head_dim), ("BLOCK_KV", tiles.block_kv), ("SUBGROUPS", tiles.subgroups)];
        Ok(Shader::unchecked(unroll(&specialise(SOURCE, &constants)?)?))
    }

    fn describe(t: &SplitTiles) -> String {
        format!("v11 {}x1x16 rows, {} keys", t.subgroups, t.block_kv)
    }

    /// Each f32 input is split into two f16s on the GPU: f16 must hold it.
    fn inputs_fit_f16() -> bool {
        true
    }
}
