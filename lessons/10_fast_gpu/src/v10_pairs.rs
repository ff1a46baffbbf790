//! Version 10: subgroups in pairs on 32 query rows, each subgroup of a pair computing half the
//! keys of their scores and half the columns of their output, so that each fragment of K and V
//! read from workgroup memory serves 32 rows (`v10_pairs.wgsl`).

use gpu::GpuError;
use gpu::wgsl::{specialise, unroll};
use reference::{About, AttentionError};

use crate::v8_arena::{arena_layout_bytes, kv_stride, kvp};
use crate::{KeyOrder, LeaveOut, LoadAt, QueryOrder, Shader, TileShape, V2, Version};

/// Version 10's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v10_pairs.wgsl");

/// Version 10.
pub struct V10;

/// Version 10's shape of work: pairs of subgroups that share 32 query rows, each subgroup of
/// a pair computing half the keys of their scores and half the columns of their output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairTiles {
    /// Subgroups of 32 threads per workgroup, in pairs: 2, 4 or 8. They share each tile of K
    /// and V.
    pub subgroups: usize,
    /// Keys per tile: 32 or 64 (a pair splits them into two halves of 16-key blocks).
    pub block_kv: usize,
    /// When the next K and V are read: where staged, or at the start of their phase
    /// ([`LoadAt::Products`]; a tile ahead is not offered).
    pub load_at: LoadAt,
    /// The order of the tiles of K and V.
    pub key_order: KeyOrder,
    /// Which query tile each workgroup takes.
    pub query_order: QueryOrder,
}

impl PairTiles {
    /// How Q reaches its registers: `(passes, pairs per pass)`, as many pairs' rows at a time
    /// as fit where K, V and P will be (at least one pair).
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let pair_rows = 32 * kv_stride(head_dim);
        let pairs = self.subgroups / 2;
        let per_pass = (self.kvp(head_dim) / pair_rows).clamp(1, pairs);
        (pairs.div_ceil(per_pass), per_pass)
    }

    /// The tiles of K, V and P together in the arena, in vec4s of halves.
    fn kvp(&self, head_dim: usize) -> usize {
        kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether version 10 accepts these tiles at `head_dim` (which it pads to a multiple
    /// of 32).
    pub fn check(&self, head_dim: usize) -> Result<(), AttentionError> {
        let sensible = [2, 4, 8].contains(&self.subgroups)
            && [32, 64].contains(&self.block_kv)
            && self.load_at != LoadAt::TileAhead
            && head_dim.is_multiple_of(32);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v10 pairs: {self:?} at head_dim {head_dim}; expected 2, 4 or 8 subgroups, 32 or \
                 64 keys, K and V read where staged or before the products, a head_dim that \
                 is a multiple of 32"
            ))
            .into());
        }
        self.query_order.check("v10 pairs")
    }
}

impl TileShape for PairTiles {
    /// Query rows per workgroup: 32 per pair.
    fn block_q(&self) -> usize {
        16 * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 32), as the shader declares it:
    /// the f16 arena (K, V and P, or one pass of Q if that is larger), S in f32, a rescale
    /// factor per row and the flag.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let rows = self.block_q();
        let pass_rows = 32 * self.query_passes(head_dim).1;
        let arena = self.kvp(head_dim).max(pass_rows * kv_stride(head_dim));
        arena_layout_bytes(arena, rows, self.block_kv / 4 + 2)
    }

    /// Tested in any group size ([`QueryOrder::as_tested`]).
    fn as_tested(&self) -> Self {
        Self { query_order: self.query_order.as_tested(), ..*self }
    }
}

impl Version for V10 {
    type Tiles = PairTiles;
    const NUMBER: u32 = 10;
    /// Each subgroup of a pair takes half of the 16-wide slices.
    const ROW_ALIGNMENT: usize = 32;
    const LEAVES_OUT: LeaveOut = LeaveOut::IN_VERSION_10;

    fn about() -> About {
        let change =
            "subgroups in pairs on 32 rows, each half the keys of S and half the columns of O";
        About { name: "v10 pairs", change, ..V2::about() }
    }

    /// Best first, their keys rotated ([`KeyOrder::Rotated`]: 1.13 times as fast as in order
    /// at D = 128 and N = 4096, 1.01 at 16384, on an H200 on 2026-11-26, spread over the whole
    /// slice; 1.14 and 1.09 on an H100 on 2026-11-27, over at most 4 MiB of K and V), and with
    /// the causal mask the query tiles taken longest first in groups of 256 workgroups
    /// ([`QueryOrder::two_rounds`]: one workgroup of 4 pairs fits a multiprocessor at D = 64
    /// and 128, and 256 was the best group at both on an H200, 2026-11-29).
    fn preferred(_head_dim: usize) -> Vec<PairTiles> {
        let tiles = |subgroups, block_kv| PairTiles {
            subgroups,
            block_kv,
            load_at: LoadAt::Staging,
            key_order: KeyOrder::Rotated,
            query_order: QueryOrder::two_rounds(1),
        };
        vec![tiles(8, 32), tiles(4, 32), tiles(2, 32)]
    }

    /// Every shape, each in the orders of [`QueryOrder::tried`] (those that do not fit a
    /// device's workgroup memory are left out where they run).
    fn tried(_head_dim: usize) -> Vec<PairTiles> {
        let mut all = Vec::new();
        for load_at in [LoadAt::Staging, LoadAt::Products] {
            for (subgroups, block_kv) in [(8, 32), (4, 32), (2, 32), (4, 64), (2, 64)] {
                let (key_order, query_order) = (KeyOrder::InOrder, QueryOrder::AsLaunched);
                all.push(PairTiles { subgroups, block_kv, load_at, key_order, query_order });
            }
        }
        QueryOrder::tried(all, QueryOrder::two_rounds(1), |t, key_order, query_order| PairTiles {
            key_order,
            query_order,
            ..t
        })
    }

    fn check(tiles: &PairTiles, _: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError> {
        tiles.check(head_dim)
    }

    /// Its constants set, its marked loops unrolled.
    fn shader(
        tiles: &PairTiles,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError> {
        let constants = [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", tiles.block_kv),
            ("SUBGROUPS", tiles.subgroups),
            ("LOAD_AT", tiles.load_at as usize),
            ("KEY_ORDER", tiles.key_order as usize),
            ("QUERY_GROUP", tiles.query_order.group()),
            ("LEAVE_OUT", leave_out.0 as usize),
        ];
        Ok(Shader::unchecked(unroll(&specialise(SOURCE, &constants)?)?))
    }

    fn describe(t: &PairTiles) -> String {
        format!(
            "v10 {} pairs, {} keys, loads {}{}{}",
            t.subgroups / 2,
            t.block_kv,
            t.load_at.phrase(),
            t.key_order.phrase(),
            t.query_order.phrase(),
        )
    }
}
