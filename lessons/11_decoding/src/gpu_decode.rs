//! Flash-decoding in WGSL over an f16 cache: the host side of `decode.wgsl`.
//!
//! [`GpuCache::upload`] copies any cache ([`KeyValues`]) to the GPU as a pool of f16 blocks
//! and its block tables (a contiguous cache is one block per sequence). [`DecodeCall`]
//! prepares the two dispatches for one new query per sequence, and [`decode_on`] runs them:
//!
//! 1. `split_partials`, a grid of `splits x (Hkv G / rows) x B` workgroups, each reading one
//!    chunk of one sequence's keys and values once for `rows` query heads of a group;
//! 2. `merge_splits`, `Hq x B` workgroups, each merging one row's partial results.
//!
//! Decoding reads the whole cache and computes little with each byte: about one FLOP per
//! byte for MHA in f16. Its speed limit is the memory bandwidth, and the work must be spread
//! over enough workgroups to keep every memory channel busy ([`gpu_splits`]).

use bytemuck::{Pod, Zeroable};
use gpu::buffers::{self, upload};
use gpu::kernel::{
    Dispatch, bind, check_loop_iterations, compile, launch_repeated, workgroup_count,
};
use gpu::version::DecodeKernelVersion;
use gpu::{Gpu, GpuTimer};
use half::f16;
use ndarray::{Array3, Array4, s};
use reference::{
    About, AttentionError, AttentionOptions, AttentionOutput, Decoder, Device, FilledCache,
    Storage, Tolerance,
};

use crate::cache::{Blocks, CacheShape, KeyValues, cache_error};
use crate::decode::check_decode;
use crate::versions::contiguous_cache;

/// The WGSL source of both kernels.
pub const SHADER: &str = include_str!("decode.wgsl");

/// The largest head dimension the kernel takes (`ROWS * D` queries must fit beside the
/// scores in 32 KiB of workgroup memory).
pub const MAX_HEAD_DIM: usize = 256;
/// Query heads one workgroup serves at most (`MAX_ROWS` in the shader).
const MAX_ROWS: usize = 8;
/// The most scores one workgroup holds (`SCORES` in the shader as written; a layout's `scores`
/// replaces it): a tile is `scores / rows` keys.
const SCORES: usize = 4096;
/// How `split_partials` is laid out: threads per workgroup (a power of two, at least `D / 8`),
/// keys each thread scores at once, values each thread loads at once, and the scores a
/// workgroup holds (a tile of keys is `scores / rows`; fewer take less workgroup memory, so
/// that more workgroups fit on a multiprocessor at once). The benchmark's `--tune`
/// tries several on a real GPU; [`KernelShape::for_device`] picks the best that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    /// `THREADS`
    pub threads: usize,
    /// `KEY_STEPS`
    pub key_steps: usize,
    /// `PV_STEPS`
    pub pv_steps: usize,
    /// `SCORES`: a power of two from `rows` to 4096.
    pub scores: usize,
}

impl Default for KernelShape {
    /// The fastest layout `--tune` found on an H200 (2026-11-26, B = 1, Hq = 32, Hkv = 8,
    /// D = 128, 512 workgroups): 128 threads, 1 key and 8 values loaded at once, 512 scores
    /// (tiles of 128 keys for 4 query heads, 10.5 KiB of workgroup memory). Against the layout
    /// tuned on an H100 a day before (1024 scores), with the 512 workgroups [`gpu_splits`] aims
    /// at: 16K tokens in 32 us against 43, 128K in 159 us against 224.
    fn default() -> Self {
        Self { threads: 128, key_steps: 1, pv_steps: 8, scores: 512 }
    }
}

/// A layout as `--layout` and the tuning tables write it: threads, key steps, value steps,
/// scores.
impl From<[usize; 4]> for KernelShape {
    fn from([threads, key_steps, pv_steps, scores]: [usize; 4]) -> Self {
        Self { threads, key_steps, pv_steps, scores }
    }
}

impl KernelShape {
    /// Whether this layout fits the shader for a padded head dim and `rows` query heads per
    /// workgroup, on any device: threads a power of two from `D / 8` to 1024, steps from 1 to
    /// 2 (keys; the shader's `dots` holds two keys' rows) and 1 to 16 (values), scores a power
    /// of two from `rows` to `SCORES`.
    pub fn check(self, padded_dim: usize, rows: usize) -> Result<(), AttentionError> {
        let Self { threads, key_steps, pv_steps, scores } = self;
        let fits = threads.is_power_of_two()
            && (padded_dim / 8..=1024).contains(&threads)
            && (1..=2).contains(&key_steps)
            && (1..=16).contains(&pv_steps)
            && scores.is_power_of_two()
            && (rows..=SCORES).contains(&scores);
        if fits {
            return Ok(());
        }
        Err(gpu::GpuError::KernelMisuse(format!(
            "{self:?} for D = {padded_dim}: expected threads a power of two from D / 8 to \
             1024, 1 or 2 key steps, 1 to 16 value steps, scores a power of two from {rows} to \
             {SCORES}"
        ))
        .into())
    }

    /// The default layout, its scores halved until it fits the device's workgroup memory or
    /// they are down to `rows` (at `D = 256` with 8 query heads the rest alone takes 16 KiB,
    /// WebGPU's least; a call then reports that the layout does not fit).
    pub fn for_device(device: &wgpu::Device, padded_dim: usize, rows: usize) -> Self {
        let limit = device.limits().max_compute_workgroup_storage_size as usize;
        let mut shape = Self::default();
        while workgroup_bytes(shape, padded_dim, rows) > limit && shape.scores / 2 >= rows {
            shape.scores /= 2;
        }
        shape
    }
}

/// Bytes of workgroup memory `split_partials` takes: the queries, the scores, a value per
/// thread and row for the reductions, 8 sums per thread, and the value address of each key of
/// a tile.
fn workgroup_bytes(kernel: KernelShape, padded_dim: usize, rows: usize) -> usize {
    let tile = kernel.scores / rows;
    4 * (rows * padded_dim + kernel.scores + kernel.threads * rows + kernel.threads * 8 + tile)
}
/// The most chunks per sequence `merge_splits` merges (`MAX_SPLITS`: their weights are kept in
/// workgroup memory).
pub const MAX_SPLITS: usize = 1024;

// ANCHOR: gpu_splits
/// Workgroups the split kernel aims to launch: enough to give every multiprocessor of a large
/// GPU several (an H100 has 132), so that while some wait for memory others compute; no more,
/// as each chunk costs a partial result to write and merge. Measured on an H200 (2026-11-26,
/// B = 1, 8 K/V heads, the default layout): at 16K tokens 256, 512 and 1024 workgroups take 40,
/// 32 and 37 us; at 128K tokens 231, 159 and 165 us.
pub const TARGET_WORKGROUPS: usize = 512;
/// The fewest keys worth a chunk: below this, the partial result each chunk writes and the
/// merge reads (`D` floats) is no longer small against the chunk's `2 D` halves per key.
pub const MIN_GPU_CHUNK: usize = 64;

/// Splits per sequence on the GPU: enough chunks for [`TARGET_WORKGROUPS`] workgroups in all,
/// but no chunk of the longest sequence shorter than [`MIN_GPU_CHUNK`] keys (one chunk if the
/// sequence itself is shorter). Many sequences
/// or heads need no split; one long sequence with few K/V heads needs many.
pub fn gpu_splits(workgroups_per_chunk: usize, longest: usize) -> usize {
    let wanted = TARGET_WORKGROUPS.div_ceil(workgroups_per_chunk.max(1));
    wanted.min(longest / MIN_GPU_CHUNK).clamp(1, MAX_SPLITS)
}
// ANCHOR_END: gpu_splits

/// Query heads per workgroup for a group of `group_size` heads: the largest divisor of `G`
/// that is at most `MAX_ROWS` (8) and whose queries (`rows x D` floats) take at most a quarter
/// of the workgroup memory. The heads of a group in one workgroup share every key it reads.
pub fn rows_per_workgroup(group_size: usize, padded_dim: usize) -> usize {
    let most = MAX_ROWS.min(2048 / padded_dim).max(1);
    (1..=most).rev().find(|r| group_size.is_multiple_of(*r)).unwrap_or(1)
}

/// `D` rounded up to a whole number of 16-byte packs of 8 halves (the padding is zeros, which
/// change no dot product): the head dim the kernels are specialised for.
pub fn padded(head_dim: usize) -> usize {
    head_dim.next_multiple_of(8)
}

/// A cache on the GPU: its pool of blocks in f16 (keys, values), the block tables and the
/// lengths, and the shape a decoding call is checked against.
pub struct GpuCache {
    keys: wgpu::Buffer,
    values: wgpu::Buffer,
    tables: wgpu::Buffer,
    lens: wgpu::Buffer,
    shape: CacheShape,
    block_size: usize,
    table_stride: usize,
    /// The block tables as the GPU holds them, and the pool's size in f32 elements, to tell
    /// what [`GpuCache::sync`] must copy.
    tables_held: Vec<Vec<usize>>,
    pool_len: usize,
}

impl GpuCache {
    /// Copies `cache` to the GPU, rounding keys and values to f16 (round to nearest even, as
    /// `half` does); an error if its block tables are broken ([`crate::Blocks::check`]), its
    /// head dim is beyond [`MAX_HEAD_DIM`], or a buffer is beyond the device's limits.
    pub fn upload(device: &wgpu::Device, cache: &impl KeyValues) -> Result<Self, AttentionError> {
        let (kv_heads, head_dim) = (cache.kv_heads(), cache.head_dim());
        if head_dim > MAX_HEAD_DIM {
            return Err(AttentionError::UnsupportedHeadDim { head_dim, max: MAX_HEAD_DIM });
        }
        let blocks = cache.blocks();
        blocks.check(kv_heads, head_dim)?;
        // Room for a sequence to grow to the whole pool, so that `sync` never outgrows it.
        let table_stride = blocks.pool_blocks(kv_heads, head_dim).max(1);
        let mut tables = vec![0u32; blocks.tables.len() * table_stride];
        for (row, table) in tables.chunks_mut(table_stride).zip(&blocks.tables) {
            row.iter_mut().zip(table).for_each(|(to, &block)| *to = block as u32);
        }
        let lens: Vec<u32> = blocks.lens.iter().map(|&n| n as u32).collect();
        let keys = to_f16_rows("K", &blocks, blocks.keys, kv_heads, head_dim)?;
        let keys = packs_first(&keys, blocks.block_size, head_dim);
        let values = to_f16_rows("V", &blocks, blocks.values, kv_heads, head_dim)?;
        Ok(Self {
            keys: upload(device, "the cache's keys (f16)", &keys)?,
            values: upload(device, "the cache's values (f16)", &values)?,
            tables: upload(device, "block tables", &tables)?,
            lens: upload(device, "sequence lengths", &lens)?,
            shape: cache.shape(),
            block_size: blocks.block_size,
            table_stride,
            tables_held: blocks.tables.clone(),
            pool_len: blocks.keys.len(),
        })
    }

    // ANCHOR: sync
    /// Brings sequence `seq` of this GPU copy up to date with `cache`, the host cache it was
    /// uploaded from, after tokens were appended there: copies only the new tokens' keys and
    /// values (in f16), the sequence's block table and its length. One step of a generation
    /// loop then moves a few kilobytes to the GPU instead of the whole cache. A sequence that
    /// was released and refilled since (its table no longer starts with the blocks the GPU
    /// holds, or it is shorter) is copied whole. Errors: `cache` is not of this copy's shape
    /// (heads, head dim, block size, pool, sequences), a value beyond f16's range.
    pub fn sync(
        &mut self,
        queue: &wgpu::Queue,
        cache: &impl KeyValues,
        seq: usize,
    ) -> Result<(), AttentionError> {
        let blocks = cache.blocks();
        self.check_same_cache(cache, &blocks, seq)?;
        let table = &blocks.tables[seq];
        let held = &self.tables_held[seq];
        let kept = table.starts_with(held) && blocks.lens[seq] >= self.shape.lens[seq];
        let first_new = if kept { self.shape.lens[seq] } else { 0 };
        let (kv_heads, head_dim) = (self.shape.kv_heads, self.shape.head_dim);
        let row_bytes = padded(head_dim) * 2; // f16
        for j in first_new..blocks.lens[seq] {
            let (block, slot) = (table[j / self.block_size], j % self.block_size);
            for g in 0..kv_heads {
                let head_start = (block * kv_heads + g) * self.block_size;
                let row = (head_start + slot) * head_dim;
                let key = &blocks.keys[row..row + head_dim];
                let value = &blocks.values[row..row + head_dim];
                check_token_fits_f16("K", key, [seq, g, j])?;
                check_token_fits_f16("V", value, [seq, g, j])?;
                let value_at = ((head_start + slot) * row_bytes) as u64;
                queue.write_buffer(
                    &self.values,
                    value_at,
                    bytemuck::cast_slice(&pack_f16(value, head_dim)),
                );
                // The key's packs lie block_size packs apart (see `packs_first`).
                for (p, pack) in pack_f16(key, head_dim).chunks(4).enumerate() {
                    let key_at =
                        ((head_start * row_bytes) + (p * self.block_size + slot) * 16) as u64;
                    queue.write_buffer(&self.keys, key_at, bytemuck::cast_slice(pack));
                }
            }
        }
        let mut row = vec![0u32; self.table_stride];
        row.iter_mut().zip(table).for_each(|(to, &block)| *to = block as u32);
        queue.write_buffer(
            &self.tables,
            (seq * self.table_stride * 4) as u64,
            bytemuck::cast_slice(&row),
        );
        let len = [blocks.lens[seq] as u32];
        queue.write_buffer(&self.lens, (seq * 4) as u64, bytemuck::cast_slice(&len));
        self.tables_held[seq] = table.clone();
        self.shape.lens[seq] = blocks.lens[seq];
        self.shape.largest_key_norm = cache.largest_key_norm();
        Ok(())
    }
    // ANCHOR_END: sync

    /// Whether `cache` can be the host cache this copy was uploaded from.
    fn check_same_cache(
        &self,
        cache: &impl KeyValues,
        blocks: &Blocks,
        seq: usize,
    ) -> Result<(), AttentionError> {
        let same = cache.kv_heads() == self.shape.kv_heads
            && cache.head_dim() == self.shape.head_dim
            && blocks.block_size == self.block_size
            && blocks.keys.len() == self.pool_len
            && blocks.lens.len() == self.shape.lens.len();
        if !same {
            return Err(cache_error(
                "syncing the GPU copy",
                "a host cache of another shape (heads, head dim, block size, pool or sequences)"
                    .into(),
                "the cache this copy was uploaded from",
            ));
        }
        if seq >= blocks.lens.len() {
            return Err(cache_error(
                &format!("syncing sequence {seq}"),
                "no such sequence".into(),
                &format!("a sequence below {}", blocks.lens.len()),
            ));
        }
        blocks.check(self.shape.kv_heads, self.shape.head_dim)
    }

    /// Bytes of keys and values the kernel reads for one decoding step: every token of every
    /// sequence, `2 Hkv D` halves each (`D` padded to a multiple of 8).
    pub fn bytes_per_step(&self) -> u64 {
        let tokens: usize = self.shape.lens.iter().sum();
        (tokens * 2 * self.shape.kv_heads * padded(self.shape.head_dim) * 2) as u64
    }
}

/// Rows of `head_dim` f32 as rows of `padded(head_dim)` f16, two to a `u32` (the lower half
/// first, as WGSL's `unpack2x16float` reads them); an error naming the first value of a
/// sequence's tokens beyond f16's range (it would be stored as an infinity), indexed
/// `[sequence, K/V head, token, dim]`.
fn to_f16_rows(
    tensor: &'static str,
    blocks: &Blocks,
    values: &[f32],
    kv_heads: usize,
    head_dim: usize,
) -> Result<Vec<u32>, AttentionError> {
    if values.iter().any(|&x| too_large_for_f16(x)) {
        return Err(first_unrepresentable(tensor, blocks, values, kv_heads, head_dim));
    }
    Ok(pack_f16(values, head_dim))
}

/// Keys packed by [`pack_f16`], `[blocks, Hkv, block_size, packs]` (a pack is 8 halves, 4
/// `u32`), reordered to `[blocks, Hkv, packs, block_size]`: within a block, the first pack of
/// every token, then the second, and so on, as the kernel reads them (a thread per token, so
/// that neighbouring threads read neighbouring packs; vLLM lays keys out the same way).
fn packs_first(keys: &[u32], block_size: usize, head_dim: usize) -> Vec<u32> {
    let packs = padded(head_dim) / 8;
    let per_head = block_size * packs * 4;
    let mut reordered = vec![0u32; keys.len()];
    for (to, from) in reordered.chunks_mut(per_head).zip(keys.chunks(per_head)) {
        for (slot, token) in from.chunks(packs * 4).enumerate() {
            for (p, pack) in token.chunks(4).enumerate() {
                let at = (p * block_size + slot) * 4;
                to[at..at + 4].copy_from_slice(pack);
            }
        }
    }
    reordered
}

/// Rows of `head_dim` f32 as rows of `padded(head_dim)` f16, two to a `u32`, the lower half
/// first; a value beyond f16's range becomes an infinity (callers check first).
fn pack_f16(values: &[f32], head_dim: usize) -> Vec<u32> {
    let width = padded(head_dim);
    let mut halves = vec![0u16; values.len() / head_dim * width];
    for (to, from) in halves.chunks_mut(width).zip(values.chunks(head_dim)) {
        to.iter_mut().zip(from).for_each(|(h, &x)| *h = f16::from_f32(x).to_bits());
    }
    halves.chunks(2).map(|pair| u32::from(pair[0]) | (u32::from(pair[1]) << 16)).collect()
}

/// Whether `x` is finite in f32 but not in f16.
fn too_large_for_f16(x: f32) -> bool {
    f16::from_f32(x).is_infinite()
}

/// An error if a value of `row`, token `[sequence, K/V head, token]` of `tensor`, is beyond
/// f16's range; the index it names adds the dimension.
fn check_token_fits_f16(
    tensor: &'static str,
    row: &[f32],
    [seq, g, j]: [usize; 3],
) -> Result<(), AttentionError> {
    match row.iter().position(|&x| too_large_for_f16(x)) {
        Some(d) => Err(AttentionError::NotRepresentable {
            tensor,
            index: vec![seq, g, j, d],
            value: row[d],
            format: "f16",
            largest: f16::MAX.to_f32(),
        }),
        None => Ok(()),
    }
}

/// The error for the first token value (in sequence, head, token, dim order) that f16 cannot
/// hold; called once some value of the pool was found too large.
fn first_unrepresentable(
    tensor: &'static str,
    blocks: &Blocks,
    values: &[f32],
    kv_heads: usize,
    head_dim: usize,
) -> AttentionError {
    for (seq, (table, &len)) in blocks.tables.iter().zip(&blocks.lens).enumerate() {
        for g in 0..kv_heads {
            for j in 0..len {
                let (block, slot) = (table[j / blocks.block_size], j % blocks.block_size);
                let start = ((block * kv_heads + g) * blocks.block_size + slot) * head_dim;
                let row = &values[start..start + head_dim];
                if let Err(e) = check_token_fits_f16(tensor, row, [seq, g, j]) {
                    return e;
                }
            }
        }
    }
    // Only slots that no sequence holds (left by a released sequence) are too large: never
    // read, but the pool cannot be uploaded in f16 with them.
    let value = values.iter().copied().find(|&x| too_large_for_f16(x)).unwrap_or(f32::INFINITY);
    AttentionError::NotRepresentable {
        tensor,
        index: Vec::new(),
        value,
        format: "f16",
        largest: f16::MAX.to_f32(),
    }
}

/// `x` rounded to f16 and back: the keys and values the kernel computes with, for the oracle.
pub fn round_to_f16(x: &Array3<f32>) -> Array3<f32> {
    x.mapv(|v| f16::from_f32(v).to_f32())
}

/// The shader's uniform (`DecodeParams` in `decode.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Params {
    q_heads: u32,
    kv_heads: u32,
    group_size: u32,
    block_size: u32,
    table_stride: u32,
    splits: u32,
    scale_log2: f32,
    unused: u32,
}

/// One decoding step prepared on a device: the query uploaded, the outputs allocated, both
/// kernels compiled and bound. [`DecodeCall::run`] may be called many times (a benchmark).
pub struct DecodeCall {
    dispatches: [Dispatch; 2],
    out_o: wgpu::Buffer,
    out_lse: wgpu::Buffer,
    dims: (usize, usize, usize),
    splits: usize,
}

impl DecodeCall {
    /// Prepares the attention of `q [B, Hq, 1, D]`, one new token per sequence already
    /// appended to `cache`, over every token of its sequence. `splits` chunks per sequence, or
    /// [`gpu_splits`]'s choice when `None`. Errors: those of [`check_decode`], more than one
    /// new token per sequence, 0 splits or more than [`MAX_SPLITS`], the device's limits.
    pub fn new(
        device: &wgpu::Device,
        cache: &GpuCache,
        q: &Array4<f32>,
        options: &AttentionOptions,
        splits: Option<usize>,
    ) -> Result<Self, AttentionError> {
        Self::prepare(device, cache, q, options, splits, None, SHADER)
    }

    /// [`DecodeCall::new`] with another layout of the split kernel (an error if it does not fit
    /// the shader, [`KernelShape::check`], or the device's workgroup memory), compiled from
    /// `shader`: [`SHADER`] itself, or another text of it, for measuring what a part of the
    /// kernel costs (the benchmark's `--anatomy` times it with some loads taken out) or trying
    /// a change (`--tune --shader`). The tests check [`SHADER`], and the lab's tests the
    /// experiments it keeps ([`check_kernels`]); any other text's answers are checked only by
    /// the benchmark's `--tune`.
    #[allow(clippy::too_many_arguments)]
    pub fn with_shader(
        device: &wgpu::Device,
        cache: &GpuCache,
        q: &Array4<f32>,
        options: &AttentionOptions,
        splits: Option<usize>,
        kernel: KernelShape,
        shader: &str,
    ) -> Result<Self, AttentionError> {
        Self::prepare(device, cache, q, options, splits, Some(kernel), shader)
    }

    /// [`DecodeCall::with_shader`], with [`KernelShape::for_device`]'s layout when `kernel` is
    /// `None`.
    fn prepare(
        device: &wgpu::Device,
        cache: &GpuCache,
        q: &Array4<f32>,
        options: &AttentionOptions,
        splits: Option<usize>,
        kernel: Option<KernelShape>,
        shader: &str,
    ) -> Result<Self, AttentionError> {
        let (shape, scale) = check_decode(&cache.shape, q, options)?;
        if shape.q_len != 1 {
            let found = format!("{} new tokens per sequence", shape.q_len);
            let expected =
                "one (a generation step); prefill with the CPU decode or a forward kernel";
            return Err(cache_error("decoding on the GPU", found, expected));
        }
        let (batch, q_heads, d) = (shape.batch, shape.groups.q_heads(), padded(shape.head_dim));
        let group = shape.groups.group_size();
        let rows = rows_per_workgroup(group, d);
        let kernel = kernel.unwrap_or_else(|| KernelShape::for_device(device, d, rows));
        check_kernel_shape(device, kernel, d, rows)?;
        let per_chunk = batch * shape.groups.kv_heads() * (group / rows);
        let longest = cache.shape.lens.iter().copied().max().unwrap_or(0);
        let splits = splits.unwrap_or_else(|| gpu_splits(per_chunk, longest));
        if splits == 0 || splits > MAX_SPLITS {
            let found = format!("{splits} splits");
            let expected = format!("at least 1 split of the keys and at most {MAX_SPLITS}");
            return Err(cache_error("decoding on the GPU", found, &expected));
        }
        let tile = kernel.scores / rows;
        let chunk = longest.div_ceil(splits);
        let iterations = loop_iterations(chunk, tile, rows, d, kernel.threads);
        check_loop_iterations(device, "split_partials", iterations)?;

        let mut queries = Array4::<f32>::zeros((batch, q_heads, 1, d));
        queries.slice_mut(s![.., .., .., ..shape.head_dim]).assign(q);
        let q_buffer = upload(device, "queries", queries.as_slice().expect("standard layout"))?;
        let rows_out = batch * q_heads;
        let partial_o = buffers::storage::<f32>(device, "partial O", rows_out * splits * d)?;
        let partial_lse = buffers::storage::<f32>(device, "partial L", rows_out * splits)?;
        let out_o = buffers::storage::<f32>(device, "O", rows_out * d)?;
        let out_lse = buffers::storage::<f32>(device, "L", rows_out)?;
        let params = Params {
            q_heads: q_heads as u32,
            kv_heads: shape.groups.kv_heads() as u32,
            group_size: group as u32,
            block_size: cache.block_size as u32,
            table_stride: cache.table_stride as u32,
            splits: splits as u32,
            scale_log2: scale * std::f32::consts::LOG2_E,
            unused: 0,
        };
        let params = buffers::uniform(device, "decode parameters", &params);

        let source = kernel_source_of(shader, d, rows, kernel)?;
        let split_kernel = compile(device, "decode.wgsl", &source, "split_partials", &[])?;
        let merge_kernel = compile(device, "decode.wgsl", &source, "merge_splits", &[])?;
        let split = Dispatch {
            label: "split_partials",
            bind_group: bind(
                device,
                &split_kernel,
                &[
                    (0, &params),
                    (1, &q_buffer),
                    (2, &cache.keys),
                    (3, &cache.values),
                    (4, &cache.tables),
                    (5, &cache.lens),
                    (6, &partial_o),
                    (7, &partial_lse),
                ],
            )?,
            pipeline: split_kernel,
            workgroups: [
                workgroup_count(splits),
                workgroup_count(shape.groups.kv_heads() * group / rows),
                workgroup_count(batch),
            ],
        };
        let merge = Dispatch {
            label: "merge_splits",
            bind_group: bind(
                device,
                &merge_kernel,
                &[(0, &params), (6, &partial_o), (7, &partial_lse), (8, &out_o), (9, &out_lse)],
            )?,
            pipeline: merge_kernel,
            workgroups: [workgroup_count(q_heads), workgroup_count(batch), 1],
        };
        let dims = (batch, q_heads, shape.head_dim);
        Ok(Self { dispatches: [split, merge], out_o, out_lse, dims, splits })
    }

    /// The chunks each sequence's keys were split into.
    pub fn splits(&self) -> usize {
        self.splits
    }

    /// Runs both kernels `times` times back to back; with a timer, the GPU time of all of them.
    pub fn run(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timer: Option<&GpuTimer>,
        times: usize,
    ) -> Result<Option<f64>, AttentionError> {
        launch_repeated(device, queue, &self.dispatches, timer, times)
    }

    /// [`DecodeCall::run`] without the merge: the benchmark's measure of what merging costs.
    pub fn run_partials_only(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timer: Option<&GpuTimer>,
        times: usize,
    ) -> Result<Option<f64>, AttentionError> {
        launch_repeated(device, queue, &self.dispatches[..1], timer, times)
    }

    /// The last run's `O [B, Hq, 1, D]` and `L [B, Hq, 1]`.
    pub fn read(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let (batch, heads, d) = self.dims;
        let o: Vec<f32> = buffers::download(device, queue, &self.out_o)?;
        let lse: Vec<f32> = buffers::download(device, queue, &self.out_lse)?;
        let o = Array4::from_shape_vec((batch, heads, 1, padded(d)), o).expect("sized above");
        Ok(AttentionOutput {
            o: o.slice(s![.., .., .., ..d]).to_owned(),
            lse: ndarray::Array3::from_shape_vec((batch, heads, 1), lse).expect("sized above"),
        })
    }
}

/// [`DecodeCall::new`], run once, read back.
pub fn decode_on(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    cache: &GpuCache,
    q: &Array4<f32>,
    options: &AttentionOptions,
    splits: Option<usize>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let call = DecodeCall::new(device, cache, q, options, splits)?;
    call.run(device, queue, None, 1)?;
    call.read(device, queue)
}

/// [`SHADER`] for a padded head dim and `rows` query heads per workgroup: its sizes set as
/// constants and its loops over rows and packs unrolled (every index into a thread's arrays a
/// constant, so that they stay in registers).
pub fn kernel_source(padded_dim: usize, rows: usize) -> Result<String, AttentionError> {
    kernel_source_with(padded_dim, rows, KernelShape::default())
}

/// [`kernel_source`] with another layout of the split kernel.
pub fn kernel_source_with(
    padded_dim: usize,
    rows: usize,
    kernel: KernelShape,
) -> Result<String, AttentionError> {
    kernel_source_of(SHADER, padded_dim, rows, kernel)
}

/// [`kernel_source_with`] of another text of the shader (see [`DecodeCall::with_shader`]):
/// what the benchmark's `--write-shader` gives the driver-statistics example.
pub fn kernel_source_of(
    shader: &str,
    padded_dim: usize,
    rows: usize,
    kernel: KernelShape,
) -> Result<String, AttentionError> {
    let constants = [
        ("HEAD_DIM", padded_dim),
        ("ROWS", rows),
        ("THREADS", kernel.threads),
        ("SCORES", kernel.scores),
        ("TILE", kernel.scores / rows),
        ("KEY_STEPS", kernel.key_steps),
        ("PV_STEPS", kernel.pv_steps),
    ];
    gpu::wgsl::unroll(&gpu::wgsl::specialise(shader, &constants)?)
}

/// Whether `kernel` fits the shader and the device: [`KernelShape::check`], and workgroup
/// memory within the device's limit.
fn check_kernel_shape(
    device: &wgpu::Device,
    kernel: KernelShape,
    padded_dim: usize,
    rows: usize,
) -> Result<(), AttentionError> {
    kernel.check(padded_dim, rows)?;
    let threads = kernel.threads;
    let bytes = workgroup_bytes(kernel, padded_dim, rows) as u64;
    let limit = u64::from(device.limits().max_compute_workgroup_storage_size);
    if bytes > limit {
        return Err(gpu::GpuError::ExceedsDeviceLimit {
            what: format!("split_partials with {threads} threads, workgroup memory"),
            needed: bytes,
            limit,
            limit_name: "max_compute_workgroup_storage_size",
        }
        .into());
    }
    Ok(())
}

/// Loop iterations one invocation of `split_partials` runs over a chunk of `chunk` keys, for
/// lavapipe's limit (an over-count: every loop is counted, unrolled or not).
fn loop_iterations(
    chunk: usize,
    tile: usize,
    rows: usize,
    padded_dim: usize,
    threads: usize,
) -> u64 {
    let (packs, lanes) = (padded_dim / 8, threads / (padded_dim / 8));
    let tiles = chunk.div_ceil(tile).max(1);
    let keys = chunk.min(tile);
    let per_tile = keys.div_ceil(threads) * (packs * (rows + 1) + 2 * rows + 1)
        + 8 * rows
        + keys.div_ceil(lanes) * rows
        + 4 * rows;
    (tiles * per_tile + rows * (lanes + threads + 4) + 2 * rows) as u64
}

/// Each `(label, shader, layout)` (edited copies of [`SHADER`], as the lab's experiments, or
/// the lesson's at other layouts) against the oracle on one problem: sequences of 1100 and 300
/// tokens in a paged cache of 32-token blocks, 2 K/V heads of D = 64 shared by `q_heads` query
/// heads, 3 splits (chunks of several tiles, so that times compare like with like).
pub fn check_kernels(
    gpu: &Gpu,
    q_heads: usize,
    seed: u64,
    kernels: &[(&str, &str, KernelShape)],
) -> Result<(), String> {
    use crate::problem::{DecodeProblem, DecodeSpec};
    let lens = vec![1100, 300];
    let spec =
        DecodeSpec { q_heads, kv_heads: 2, lens, q_len: 1, head_dim: 64, causal: true, seed };
    let p = DecodeProblem::random(&spec);
    let text = |e: AttentionError| e.to_string();
    let cache = GpuCache::upload(&gpu.device, &p.paged(32, 0).map_err(text)?).map_err(text)?;
    let keys: Vec<Array3<f32>> = p.keys.iter().map(round_to_f16).collect();
    let values: Vec<Array3<f32>> = p.values.iter().map(round_to_f16).collect();
    for &(label, shader, shape) in kernels {
        let (device, options) = (&gpu.device, p.options());
        let call = DecodeCall::with_shader(device, &cache, &p.q, &options, Some(3), shape, shader)
            .map_err(|e| format!("{label} {shape:?}: {e}"))?;
        call.run(device, &gpu.queue, None, 1).map_err(text)?;
        let out = call.read(device, &gpu.queue).map_err(text)?;
        p.check_with(&out, Tolerance::F32, &keys, &values)
            .map_err(|e| format!("{label} {shape:?}: {e}"))?;
    }
    Ok(())
}

/// The decoding version in WGSL, for the course's registry.
pub fn versions() -> Vec<DecodeKernelVersion> {
    let about = About::decode(
        "decode, WGSL, f16 cache",
        env!("CARGO_PKG_NAME"),
        Device::Gpu,
        "split keys in WGSL over an f16 cache: a workgroup per chunk and group of query heads",
    )
    .stored_in(Storage::F16, Tolerance::F16_STORAGE);
    vec![DecodeKernelVersion::new(about, |gpu| Box::new(OnGpu(gpu)))]
}

/// Decoding on a GPU: the cache filled on the host, then uploaded in f16 ([`GpuCache`]).
struct OnGpu(&'static Gpu);

/// A cache on a GPU, ready to decode ([`decode_on`]).
struct FilledOnGpu {
    gpu: &'static Gpu,
    cache: GpuCache,
}

impl Decoder for OnGpu {
    fn fill(
        &self,
        keys: &[Array3<f32>],
        values: &[Array3<f32>],
    ) -> Result<Box<dyn FilledCache>, AttentionError> {
        let cache = GpuCache::upload(&self.0.device, &contiguous_cache(keys, values)?)?;
        Ok(Box::new(FilledOnGpu { gpu: self.0, cache }))
    }
}

impl FilledCache for FilledOnGpu {
    fn decode(
        &self,
        q: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        decode_on(&self.gpu.device, &self.gpu.queue, &self.cache, q, options, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the host computes with are the shader's own (they are written in both).
    #[test]
    fn the_host_and_the_shader_agree_on_their_sizes() {
        for (name, value) in
            [("MAX_ROWS", MAX_ROWS), ("SCORES", SCORES), ("MAX_SPLITS", MAX_SPLITS)]
        {
            let declaration = format!("const {name}: u32 = {value}u;");
            assert!(SHADER.contains(&declaration), "decode.wgsl lacks `{declaration}`");
        }
        assert!(SHADER.contains("var dots: array<f32, 2u * MAX_ROWS>;"));
        assert!(SHADER.contains("var acc: array<vec4<f32>, 2u * MAX_ROWS>;"));
    }

    /// The workgroup memory the host counts to fit a layout on a device is what the shader
    /// declares, for layouts from 32 to 256 threads at head dims 8 to 256 (beside the merge's
    /// own: the weights of up to `MAX_SPLITS` splits, and a maximum, a sum and 4 sums per
    /// thread of its 128).
    #[test]
    fn the_host_counts_the_workgroup_memory_the_shader_declares() {
        assert!(SHADER.contains("const MERGE_THREADS: u32 = 128u;"));
        let merge = 4 * (MAX_SPLITS + 128 * (1 + 1 + 4));
        for padded_dim in [8, 64, 72, 128, 256] {
            for rows in [1, 2, 4, 8] {
                for threads in [32, 64, 128, 256].into_iter().filter(|t| t * 8 >= padded_dim) {
                    let kernel = KernelShape { threads, key_steps: 1, pv_steps: 8, scores: 512 };
                    let source = kernel_source_with(padded_dim, rows, kernel).unwrap();
                    let declared = gpu::kernel::workgroup_memory_bytes(&source).unwrap();
                    let counted = workgroup_bytes(kernel, padded_dim, rows);
                    assert_eq!(
                        counted + merge,
                        declared,
                        "{kernel:?}, D = {padded_dim}, {rows} rows"
                    );
                }
            }
        }
    }
}
