//! Version 8: version 6 with K, V and P in one f16 arena (Q passes through it), so that 8
//! subgroups of 16 rows fit; K and V read where they are staged; the keys of each workgroup
//! rotated and, with the causal mask, the query tiles longest first (`v8_arena.wgsl`).

use gpu::wgsl::{specialise, unroll};
use reference::{About, AttentionError};

use crate::v5_pipelined::check_subgroup_tiles;
use crate::{KeyOrder, LeaveOut, LoadAt, QueryOrder, Shader, TileShape, V2, Version};

/// Version 8's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v8_arena.wgsl");

/// Version 8.
pub struct V8;

/// Bytes of workgroup memory that versions 8 to 11 declare: the f16 arena of `arena` vec4s,
/// S in f32 (`rows` rows of `s_stride` vec4s), a rescale factor per row and the 16-byte flag.
pub(crate) fn arena_layout_bytes(arena: usize, rows: usize, s_stride: usize) -> usize {
    arena * 8 + rows * s_stride * 16 + rows * 4 + 16
}

/// The tiles of K, V and P together in versions 8 to 11's arena, for `rows` query rows and
/// `keys` keys per tile, in vec4s of halves (the shaders' `KVP`).
pub(crate) fn kvp(rows: usize, keys: usize, head_dim: usize) -> usize {
    let p_stride = keys / 4 + 2;
    2 * keys * kv_stride(head_dim) + rows * p_stride
}

/// A row of K, V or Q in the arena, in vec4s of halves: padded by 2 against bank conflicts
/// (the shaders' `KV_STRIDE`).
pub(crate) fn kv_stride(head_dim: usize) -> usize {
    head_dim / 4 + 2
}

/// Version 8's shape of work and its measured choices, written into its source as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaTiles {
    /// Subgroups of 32 threads per workgroup; they share each tile of K and V.
    pub subgroups: usize,
    /// 16-row query tiles per subgroup: 1 or 2.
    pub row_tiles: usize,
    /// Keys per tile: 16, 32 or 64.
    pub block_kv: usize,
    /// Whether Q's fragments stay in registers (else they are read from workgroup memory for
    /// every tile).
    pub q_in_registers: bool,
    /// When the next K and V are read.
    pub load_at: LoadAt,
    /// The order of the tiles of K and V.
    pub key_order: KeyOrder,
    /// Which query tile each workgroup takes.
    pub query_order: QueryOrder,
}

impl ArenaTiles {
    /// How Q reaches its registers: `(passes, subgroups per pass)`. With Q in registers, Q
    /// passes through the arena as many subgroups' rows at a time as fit where K, V and P will
    /// be (at least one); kept in the arena, it is staged once.
    pub fn query_passes(&self, head_dim: usize) -> (usize, usize) {
        let subgroup_rows = 16 * self.row_tiles;
        let per_pass = if self.q_in_registers {
            (self.kvp(head_dim) / (subgroup_rows * kv_stride(head_dim))).clamp(1, self.subgroups)
        } else {
            self.subgroups
        };
        (self.subgroups.div_ceil(per_pass), per_pass)
    }

    /// The tiles of K, V and P together in the arena, in vec4s of halves.
    fn kvp(&self, head_dim: usize) -> usize {
        kvp(self.block_q(), self.block_kv, head_dim)
    }

    /// Whether `version` (8 or 9, which take the same tiles) accepts them at `head_dim` (a
    /// multiple of 16).
    pub fn check(&self, version: &str, head_dim: usize) -> Result<(), AttentionError> {
        let (subgroups, row_tiles, block_kv) = (self.subgroups, self.row_tiles, self.block_kv);
        check_subgroup_tiles(version, self, (subgroups, row_tiles, block_kv), head_dim)?;
        self.query_order.check(version)
    }

    /// `template` (version 8's or 9's source) for these tiles at `head_dim`: its constants set,
    /// its marked loops unrolled ([`gpu::wgsl::unroll`]).
    pub fn source_from(&self, template: &str, head_dim: usize) -> Result<String, AttentionError> {
        let constants = [
            ("HEAD_DIM", head_dim),
            ("BLOCK_KV", self.block_kv),
            ("SUBGROUPS", self.subgroups),
            ("ROW_TILES", self.row_tiles),
            ("Q_IN_REGISTERS", self.q_in_registers as usize),
            ("LOAD_AT", self.load_at as usize),
            ("KEY_ORDER", self.key_order as usize),
            ("QUERY_GROUP", self.query_order.group()),
        ];
        unroll(&specialise(template, &constants)?)
    }

    /// A short name, `version` first: `v8 8x1x16 rows, 16 keys, Q in registers, ...`.
    pub fn describe_as(&self, version: &str) -> String {
        format!(
            "{version} {}x{}x16 rows, {} keys, Q {}, loads {}{}{}",
            self.subgroups,
            self.row_tiles,
            self.block_kv,
            if self.q_in_registers { "in registers" } else { "per tile" },
            self.load_at.phrase(),
            self.key_order.phrase(),
            self.query_order.phrase(),
        )
    }

    /// With the causal mask, the query tiles longest first in groups of two rounds
    /// ([`QueryOrder::two_rounds`]): two workgroups on a multiprocessor at D = 64, where
    /// version 8's preferred tiles take 107 registers, one above (the other shapes' counts
    /// are not measured, and version 9's groups were not timed).
    fn longest_first(head_dim: usize) -> QueryOrder {
        QueryOrder::two_rounds(if head_dim <= 64 { 2 } else { 1 })
    }
}

impl TileShape for ArenaTiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        16 * self.row_tiles * self.subgroups
    }

    /// Bytes of workgroup memory at `head_dim` (a multiple of 16), as the shader declares it:
    /// the f16 arena (Q where it is kept, K, V and P; at least one pass of Q, see
    /// [`ArenaTiles::query_passes`]), S in f32, a rescale factor per row and the flag.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let (rows, keys) = (self.block_q(), self.block_kv);
        let lanes_per_row = 32 / (16 * self.row_tiles);
        let kv_stride = kv_stride(head_dim);
        let s_stride = keys / 4 + lanes_per_row;
        let q_kept = if self.q_in_registers { 0 } else { rows * kv_stride };
        let (_, pass_subgroups) = self.query_passes(head_dim);
        let pass_rows = pass_subgroups * 16 * self.row_tiles;
        let arena = (q_kept + self.kvp(head_dim)).max(pass_rows * kv_stride);
        arena_layout_bytes(arena, rows, s_stride)
    }

    /// Tested in any group size ([`QueryOrder::as_tested`]).
    fn as_tested(&self) -> Self {
        Self { query_order: self.query_order.as_tested(), ..*self }
    }
}

impl Version for V8 {
    type Tiles = ArenaTiles;
    const NUMBER: u32 = 8;
    const ROW_ALIGNMENT: usize = 16;

    fn about() -> About {
        let change = "K, V and P in one f16 arena (Q passes through it): 8 subgroups fit; \
                      loads where staged";
        About { name: "v8 arena", change, ..V2::about() }
    }

    /// The tiles measured fastest at `head_dim` (the lab's `tune`, the keys in order): on an
    /// H100 on 2026-11-26 at D = 64 (16 keys, 159.7 TFLOP/s against 141.9 with 32), on an H100
    /// on 2026-11-25 and an H200 on 2026-11-26 at D = 128; then smaller ones. Their keys are
    /// rotated ([`KeyOrder::Rotated`]: 1.17 times as fast as in order at D = 64 and N = 4096,
    /// 1.11 at 16384, on an H200 on 2026-11-26; 1.14 and 1.10 on an H100 on 2026-11-27; at
    /// D = 128 and 256, and for version 9, which takes these tiles too, both orders pass the
    /// tests but were not timed against each other), and with the causal mask the query tiles
    /// are taken longest first in groups of two rounds.
    fn preferred(head_dim: usize) -> Vec<ArenaTiles> {
        let tiles = |subgroups, row_tiles, block_kv| ArenaTiles {
            subgroups,
            row_tiles,
            block_kv,
            q_in_registers: true,
            load_at: LoadAt::Staging,
            key_order: KeyOrder::Rotated,
            query_order: ArenaTiles::longest_first(head_dim),
        };
        if head_dim <= 64 {
            vec![tiles(8, 1, 16), tiles(4, 1, 16)]
        } else if head_dim <= 128 {
            vec![tiles(8, 1, 32), tiles(8, 1, 16), tiles(4, 1, 16)]
        } else {
            vec![tiles(4, 1, 16)]
        }
    }

    /// Every shape with Q's fragments in registers and read per tile, K and V read where they
    /// are staged (the fastest timing in the fastest shapes, though not in every shape:
    /// [`crate::tuning::load_choices`]), each in the orders of [`QueryOrder::tried`].
    fn tried(head_dim: usize) -> Vec<ArenaTiles> {
        let mut all = Vec::new();
        for q_in_registers in [true, false] {
            for (subgroups, row_tiles, block_kv) in [
                (8, 1, 32),
                (4, 1, 16),
                (4, 2, 32),
                (4, 1, 32),
                (8, 1, 16),
                (4, 2, 16),
                (4, 1, 64),
                (2, 2, 32),
            ] {
                all.push(ArenaTiles {
                    subgroups,
                    row_tiles,
                    block_kv,
                    q_in_registers,
                    load_at: LoadAt::Staging,
                    key_order: KeyOrder::InOrder,
                    query_order: QueryOrder::AsLaunched,
                });
            }
        }
        if head_dim > 128 {
            all.retain(|t| t.row_tiles == 1);
        }
        let longest_first = ArenaTiles::longest_first(head_dim);
        QueryOrder::tried(all, longest_first, |t, key_order, query_order| ArenaTiles {
            key_order,
            query_order,
            ..t
        })
    }

    fn check(tiles: &ArenaTiles, _: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError> {
        tiles.check("v8 arena", head_dim)
    }

    fn shader(tiles: &ArenaTiles, head_dim: usize, _: LeaveOut) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(tiles.source_from(SOURCE, head_dim)?))
    }

    fn describe(tiles: &ArenaTiles) -> String {
        tiles.describe_as("v8")
    }
}
