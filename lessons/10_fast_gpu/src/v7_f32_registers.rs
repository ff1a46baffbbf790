//! Version 7: version 1 (f32) with version 6's constants and unrolled loops (each thread's
//! arrays in registers), subgroup shuffles for the rows' maxima and sums, and the next tile
//! prefetched (`v7_f32_registers.wgsl`). Exercise 10 rebuilds it.

use gpu::GpuError;
use gpu::kernel::Checks;
use gpu::wgsl::{specialise, unroll};
use ndarray::Array4;
use reference::{About, AttentionError, AttentionOptions, AttentionOutput, AttentionShape};

use crate::{Kernel, LeaveOut, Shader, TileShape, V1, Version};

/// Version 7's WGSL source (its constants set by [`gpu::wgsl::specialise`]).
pub const SOURCE: &str = include_str!("v7_f32_registers.wgsl");

/// Version 7.
pub struct V7;

/// Version 7's shape of work, written into its source as constants: version 1's groups of 8
/// threads sharing query rows (4 or 8 per thread), and whether the next tile of K and V is
/// prefetched into registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32Tiles {
    /// Groups of 8 threads that share query rows: 1 to 16.
    pub row_groups: usize,
    /// Query rows per thread (and per group): 4 or 8. `BLOCK_Q = rows_per_thread * row_groups`.
    pub rows_per_thread: usize,
    /// Keys of a tile per thread: 1, 2 or 4. `BLOCK_KV = 8 * keys_per_thread`.
    pub keys_per_thread: usize,
    /// Whether each thread reads its share of the next tile into registers during this one.
    pub prefetch: bool,
}

impl F32Tiles {
    /// Keys per tile.
    pub fn block_kv(&self) -> usize {
        8 * self.keys_per_thread
    }

    /// Threads per workgroup.
    pub fn threads(&self) -> usize {
        8 * self.row_groups
    }

    /// vec4s of K (and as many of V) that each thread holds when it prefetches.
    pub fn staged_per_thread(&self, head_dim: usize) -> usize {
        (self.block_kv() * head_dim.div_ceil(4)).div_ceil(self.threads())
    }

    /// Whether `device`'s subgroups tile a workgroup exactly, each holding whole groups of 8
    /// threads (the shuffles of a row stay within one subgroup): a subgroup size that is a
    /// multiple of 8 and divides the number of threads.
    pub fn check_subgroups(&self, device: &wgpu::Device) -> Result<(), AttentionError> {
        if !device.features().contains(wgpu::Features::SUBGROUP) {
            let feature = "SUBGROUP";
            return Err(GpuError::MissingFeature { feature, needed_for: "v7 f32 registers" }.into());
        }
        let info = device.adapter_info();
        self.fits_subgroups(info.subgroup_min_size as usize, info.subgroup_max_size as usize)
    }

    /// Whether subgroups of `smallest` to `largest` threads (powers of two) tile a workgroup
    /// exactly, each holding whole groups of 8 threads.
    pub fn fits_subgroups(&self, smallest: usize, largest: usize) -> Result<(), AttentionError> {
        if smallest < 8 || !smallest.is_power_of_two() || !self.threads().is_multiple_of(largest) {
            return Err(GpuError::KernelMisuse(format!(
                "v7 f32 registers: {} threads per workgroup in subgroups of {smallest} to \
                 {largest}; expected subgroups of at least 8 threads (a power of two) that \
                 divide the workgroup",
                self.threads()
            ))
            .into());
        }
        Ok(())
    }

    /// Whether version 7 accepts these tiles: 1 to 16 row groups, a power of two, 4 or 8
    /// rows and 1, 2 or 4 keys per thread.
    pub fn check(&self) -> Result<(), AttentionError> {
        let sensible = [1, 2, 4, 8, 16].contains(&self.row_groups)
            && [4, 8].contains(&self.rows_per_thread)
            && [1, 2, 4].contains(&self.keys_per_thread);
        if !sensible {
            return Err(GpuError::KernelMisuse(format!(
                "v7 f32 registers: {self:?}; expected 1, 2, 4, 8 or 16 row groups, 4 or 8 \
                 rows and 1, 2 or 4 keys per thread"
            ))
            .into());
        }
        Ok(())
    }

    /// `template` (version 7's source, or exercise 10's) for these tiles at `head_dim`: its
    /// constants set, its marked loops unrolled ([`gpu::wgsl::unroll`]).
    pub fn source_from(&self, template: &str, head_dim: usize) -> Result<String, AttentionError> {
        let constants = [
            ("HEAD_DIM", head_dim),
            ("ROW_GROUPS", self.row_groups),
            ("ROWS_PER_THREAD", self.rows_per_thread),
            ("KEYS_PER_THREAD", self.keys_per_thread),
            ("PREFETCH", self.prefetch as usize),
        ];
        unroll(&specialise(template, &constants)?)
    }

    /// Loop iterations one thread runs at most, counted as
    /// [`crate::RegisterTiles::loop_iterations`] counts them; the unrolled loops are no loops
    /// any more.
    pub fn loop_iterations(&self, shape: &AttentionShape) -> u64 {
        let chunks = shape.head_dim.div_ceil(4);
        let staging = if self.prefetch {
            0
        } else {
            2 * ((self.block_kv() * chunks).div_ceil(self.threads()) + 1)
        };
        let per_tile = 1 + staging + (chunks + 1) + (self.block_kv() / 4 + 1);
        let setup = (self.block_q() * chunks).div_ceil(self.threads()) + 2;
        (shape.kv_len.div_ceil(self.block_kv()) * per_tile + setup) as u64
    }
}

impl TileShape for F32Tiles {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize {
        self.rows_per_thread * self.row_groups
    }

    /// Bytes of workgroup memory at `head_dim`: the query rows, a tile of K and one of V (rows
    /// padded to an odd number of vec4s), and P.
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        let chunks = head_dim.div_ceil(4);
        let vec4 = 16;
        let queries = self.block_q() * chunks * vec4;
        let keys_and_values = 2 * self.block_kv() * (chunks | 1) * vec4;
        queries + keys_and_values + self.block_q() * self.block_kv() * 4
    }
}

impl Version for V7 {
    type Tiles = F32Tiles;
    const NUMBER: u32 = 7;
    const ROW_ALIGNMENT: usize = 4;

    fn about() -> About {
        let change =
            "v1 with v6's constants and unrolled loops (arrays in registers), shuffles, prefetch";
        About { name: "v7 f32 registers", change, ..V1::about() }
    }

    fn requires() -> wgpu::Features {
        wgpu::Features::SUBGROUP
    }

    /// Large tiles first (the order of [`Version::tried`]).
    fn preferred(head_dim: usize) -> Vec<F32Tiles> {
        Self::tried(head_dim)
    }

    /// Every tile shape the tests check and the lab's tuning times at `head_dim`, the
    /// preferred first: large tiles; prefetch only where each thread holds at most 8 vec4s of
    /// K and 8 of V (more would crowd out the scores and O).
    fn tried(head_dim: usize) -> Vec<F32Tiles> {
        let shapes = [
            (16, 4, 4),
            (8, 8, 4),
            (8, 4, 4),
            (4, 8, 4),
            (16, 4, 2),
            (8, 8, 2),
            (8, 4, 2),
            (4, 4, 4),
            (4, 4, 2),
            (2, 4, 2),
            (16, 4, 1),
            (8, 8, 1),
            (4, 4, 1),
            (1, 4, 1),
        ];
        let mut all = Vec::new();
        for (row_groups, rows_per_thread, keys_per_thread) in shapes {
            let tiles = F32Tiles { row_groups, rows_per_thread, keys_per_thread, prefetch: true };
            if tiles.staged_per_thread(head_dim) <= 8 {
                all.push(tiles);
            }
            all.push(F32Tiles { prefetch: false, ..tiles });
        }
        all
    }

    /// Its own rules ([`F32Tiles::check`]) and whole subgroups ([`F32Tiles::check_subgroups`]).
    fn check(tiles: &F32Tiles, device: &wgpu::Device, _: usize) -> Result<(), AttentionError> {
        tiles.check()?;
        tiles.check_subgroups(device)
    }

    /// Compiled without wgpu's run-time checks: its tests cover every index.
    fn shader(tiles: &F32Tiles, head_dim: usize, _: LeaveOut) -> Result<Shader, AttentionError> {
        Ok(Shader::unchecked(tiles.source_from(SOURCE, head_dim)?))
    }

    fn describe(t: &F32Tiles) -> String {
        let prefetch = if t.prefetch { ", prefetch" } else { "" };
        format!("v7 {}x{} rows, {} keys{prefetch}", t.row_groups, t.rows_per_thread, t.block_kv())
    }

    /// Rows are padded to `vec4`s in memory; the shader takes the head dim as it is.
    fn compiled_head_dim(head_dim: usize) -> usize {
        head_dim
    }

    fn loop_iterations(tiles: &F32Tiles, shape: &AttentionShape) -> u64 {
        tiles.loop_iterations(shape)
    }
}

impl Kernel<V7> {
    /// Version 7's host code with the shader `template` in place of its own (exercise 10's,
    /// with wgpu's run-time checks on), for `head_dim` and `tiles`.
    pub fn from_template(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: F32Tiles,
        template: &str,
        checks: Checks,
    ) -> Result<Self, AttentionError> {
        Self::check(device, head_dim, &tiles)?;
        let source = tiles.source_from(template, head_dim)?;
        Self::from_shader(device, head_dim, tiles, Shader { source, overrides: Vec::new(), checks })
    }
}

/// Version 7's host code with another WGSL template in place of its own, and wgpu's
/// run-time bounds checks on: exercise 10 runs the learner's `micro_tiles.wgsl` through this,
/// and its grader the planted-bug shaders.
#[allow(clippy::too_many_arguments)] // a device's attention_on's arguments, the template, tiles
pub fn attention_with_shader(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    template: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    tiles: F32Tiles,
) -> Result<AttentionOutput<f32>, AttentionError> {
    // Bad input is reported before the shader is built for its head dimension.
    let head_dim = reference::check_inputs(q, k, v, options)?.shape.head_dim;
    let kernel = Kernel::<V7>::from_template(device, head_dim, tiles, template, Checks::On)?;
    gpu::attention::attention_on(device, queue, &kernel, q, k, v, options)
}
