// Lesson 10, version 4: tensor cores, specialised and kept busy.
//
// What changes from version 3 (same algorithm, same tensor-core products):
//   - Constants, not overrides. The host writes HEAD_DIM, BLOCK_KV, SUBGROUPS, ROW_TILES and
//     PREFETCH into the source before compiling (`gpu::wgsl::specialise`). Every array of
//     cooperative matrices then has exactly the size it needs and every loop over them a
//     constant trip count. Version 2 sized them for the largest head dimension (16
//     fragments) and indexed them with a pipeline-time bound. (The driver still keeps some
//     of these arrays in local memory, its statistics show: version 6 is about that.)
//   - Independent multiply-adds. S for all BLOCK_KV / 16 key blocks (and, with ROW_TILES = 2,
//     both 16-row tiles) is accumulated at once, head-dimension slice by slice, so several
//     tensor-core products are in flight instead of one chain waiting on itself.
//   - ROW_TILES = 2: a subgroup owns 32 query rows, so every K and V fragment it loads from
//     workgroup memory feeds two products instead of one. Loading those fragments is the
//     traffic that bounds this kernel (the chapter's roofline), as it bounds FlashAttention-2.
//   - PREFETCH: the next tile of K and V is read from global memory into registers while the
//     tensor cores work on this one, and written to workgroup memory after the loop's first
//     barrier, so the wait for global memory overlaps the arithmetic.
//   - One barrier fewer: the flag that says "some row's max grew by more than 8" is read with
//     workgroupUniformLoad, which is itself the barrier before P V.
//
// Per tile of keys (four barriers, more on the rare rescale):
//   | barrier: everyone is done with the last tile's K and V
//   1. registers -> workgroup memory: this tile's K and V; then fetch the next tile's  | barrier
//   2. S = Q K^T on the tensor cores, into workgroup memory                            | barrier
//   3. lanes: scale, mask where needed, row max, P = exp2(S - m) as f16  | workgroupUniformLoad
//   (3b. if any row's max grew by more than 8: O through workgroup memory, rescaled)
//   4. O += P V on the tensor cores
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.

enable f16;
enable wgpu_cooperative_matrix;

// ANCHOR: constants
// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 64u;           // keys per tile: 64 or 32
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup
const ROW_TILES: u32 = 1u;           // 16-row query tiles per subgroup: 1 or 2
const PREFETCH: u32 = 1u;            // 1: next K/V tile read into registers during this one
// ANCHOR_END: constants

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const SUBGROUP_ROWS: u32 = 16u * ROW_TILES;
const BLOCK_Q: u32 = SUBGROUP_ROWS * SUBGROUPS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;           // 16-wide slices of the head dimension
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;          // 16-key slices of a tile
const CHUNKS: u32 = HEAD_DIM / 4u;               // vec4s per row in global memory
const LANES_PER_ROW: u32 = LANES / SUBGROUP_ROWS; // 2, or 1 with ROW_TILES = 2
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const STAGED: u32 = 2u * BLOCK_KV * CHUNKS / THREADS; // vec4s of K and V per thread per tile
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8

// Row strides in workgroup memory, in vec4s, padded against bank conflicts; every stride is a
// whole number of 16-byte units (see version 2 on alignment).
const KV_STRIDE: u32 = CHUNKS + 2u;            // f16 rows of Q, K and V: D + 8 halves
const S_STRIDE: u32 = BLOCK_KV / 4u + 1u;      // f32 rows of S (and of O on the way out)
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;      // f16 rows of P
const KV_ROWS: u32 = max(2u * BLOCK_KV, BLOCK_Q); // K and V of a tile; Q before the loop

struct Params {
    slices: u32,    // B * H
    q_len: u32,     // Nq
    kv_len: u32,    // Nkv
    head_dim: u32,  // D (equal to HEAD_DIM; kept for the host's checks)
    scale: f32,     // softmax scale, usually 1 / sqrt(D)
    causal: u32,    // 1: bottom-right causal mask
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

var<workgroup> kv_tile: array<vec4<f16>, KV_ROWS * KV_STRIDE>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> p_tile: array<vec4<f16>, BLOCK_Q * P_STRIDE>;
var<workgroup> row_rescale: array<f32, BLOCK_Q>;   // exp2(m_old - m_new) for each row
var<workgroup> any_rescale: vec4<u32>;             // .x: some row's max grew by more than 8

const LOG2_E: f32 = 1.4426950408889634;
const LN_2: f32 = 0.6931471805599453;

// How many keys query row `row` sees: all of them, or with the bottom-right causal mask the
// keys j <= row + Nkv - Nq, a prefix of length clamp(row + 1 + Nkv - Nq, 0, Nkv).
fn visible_keys(row: u32) -> u32 {
    if params.causal == 0u {
        return params.kv_len;
    }
    let end = i32(row) + 1 + i32(params.kv_len) - i32(params.q_len);
    return u32(clamp(end, 0, i32(params.kv_len)));
}

fn minus_infinity() -> f32 {
    var bits = 0xff800000u;
    return bitcast<f32>(bits);
}

// This thread's share of one tile of keys from global memory: K's rows then V's, element e of
// the 2 BLOCK_KV x CHUNKS vec4s for e = thread, thread + THREADS, ... (zeros past Nkv).
fn fetch(slice: u32, kv_start: u32, thread: u32) -> array<vec4<f16>, STAGED> {
    var staged: array<vec4<f16>, STAGED>;
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let row = e / CHUNKS;
        let key = kv_start + row % BLOCK_KV;
        let at = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        var x = vec4<f16>(0.0h);
        if key < params.kv_len && row < BLOCK_KV {
            x = k[at];
        } else if key < params.kv_len {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into workgroup memory: K in rows [0, BLOCK_KV) of kv_tile, V in the next BLOCK_KV.
fn stash(staged: array<vec4<f16>, STAGED>, thread: u32) {
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        kv_tile[(e / CHUNKS) * KV_STRIDE + e % CHUNKS] = staged[i];
    }
}

// The workgroup's BLOCK_Q rows of Q into kv_tile, zeros past Nq.
fn stage_queries(slice: u32, q_start: u32, thread: u32) {
    for (var e = thread; e < BLOCK_Q * CHUNKS; e += THREADS) {
        let row = e / CHUNKS;
        var x = vec4<f16>(0.0h);
        if q_start + row < params.q_len {
            x = q[(slice * params.q_len + q_start + row) * CHUNKS + e % CHUNKS];
        }
        kv_tile[row * KV_STRIDE + e % CHUNKS] = x;
    }
}

// Stores wrapped in a function: naga 30's SPIR-V writer can fail on a coopStoreT whose
// arguments mix let-bound and inline expressions.
fn store_s(tile: coop_mat16x16<f32, C>, at: u32) {
    coopStoreT(tile, &s_tile[at], S_STRIDE);
}

@compute @workgroup_size(THREADS)
fn flash_forward(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(local_invocation_index) thread: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let slice = tile.y;
    let q_start = tile.x * BLOCK_Q;
    let scale = params.scale * LOG2_E;
    let neg_inf = minus_infinity();
    let first_row = sg * SUBGROUP_ROWS;               // the subgroup's rows of the tile
    let my_row = first_row + lane / LANES_PER_ROW;    // this lane's row for the softmax
    let part = lane % LANES_PER_ROW;                  // and which part of the row's keys
    let row_keys = visible_keys(q_start + my_row);

    // Q's fragments into registers, kept for the whole loop: fragment r * FRAGMENTS + f holds
    // rows [16 r, 16 r + 16) of the subgroup's rows, columns [16 f, 16 f + 16).
    stage_queries(slice, q_start, thread);
    workgroupBarrier();
    var q_frag: array<coop_mat16x16<f16, A>, ROW_TILES * FRAGMENTS>;
    var o_frag: array<coop_mat16x16<f32, C>, ROW_TILES * FRAGMENTS>;
    for (var r = 0u; r < ROW_TILES; r++) {
        for (var f = 0u; f < FRAGMENTS; f++) {
            let at = (first_row + 16u * r) * KV_STRIDE + f * 4u;
            q_frag[r * FRAGMENTS + f] = coopLoadT<coop_mat16x16<f16, A>>(&kv_tile[at], KV_STRIDE);
            o_frag[r * FRAGMENTS + f] = coop_mat16x16<f32, C>();
        }
    }

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's part of the row sum
    var staged: array<vec4<f16>, STAGED>;
    if PREFETCH == 1u {
        staged = fetch(slice, 0u, thread);
    }

    for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV) {
        if PREFETCH == 0u {
            staged = fetch(slice, kv_start, thread);               // wait for it here
        }
        workgroupBarrier();                  // Q, or the last tile's K and V, no longer read
        stash(staged, thread);
        if thread == 0u {
            any_rescale = vec4<u32>(0u);
        }
        workgroupBarrier();
        if PREFETCH == 1u {
            staged = fetch(slice, kv_start + BLOCK_KV, thread);   // in flight during 2 to 4
        }

        // S = Q K^T, all key blocks and row tiles at once: one K fragment loaded from
        // workgroup memory feeds ROW_TILES products, and KEY_BLOCKS x ROW_TILES independent
        // products are in flight per slice of the head dimension.
        var s: array<coop_mat16x16<f32, C>, ROW_TILES * KEY_BLOCKS>;
        for (var f = 0u; f < FRAGMENTS; f++) {
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                let at = kb * 16u * KV_STRIDE + f * 4u;
                let k_t = coopLoad<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
                for (var r = 0u; r < ROW_TILES; r++) {
                    s[r * KEY_BLOCKS + kb] = coopMultiplyAdd(q_frag[r * FRAGMENTS + f], k_t, s[r * KEY_BLOCKS + kb]);
                }
            }
        }
        for (var r = 0u; r < ROW_TILES; r++) {
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                store_s(s[r * KEY_BLOCKS + kb], (first_row + 16u * r) * S_STRIDE + kb * 4u);
            }
        }
        workgroupBarrier();

        // The softmax, LANES_PER_ROW lanes per row: scores in log2 units, masked on tiles that
        // cross the diagonal or the end of the keys, the row max through the partner lane.
        let masked_tile = kv_start + BLOCK_KV > all_see;
        var scores: array<vec4<f32>, ROW_PART>;
        var part_max = neg_inf;
        for (var c = 0u; c < ROW_PART; c++) {
            var x = s_tile[my_row * S_STRIDE + part * ROW_PART + c] * scale;
            if masked_tile {
                let key = kv_start + (part * ROW_PART + c) * 4u;
                let visible = vec4<u32>(key, key + 1u, key + 2u, key + 3u) < vec4<u32>(row_keys);
                x = select(vec4<f32>(neg_inf), x, visible);
            }
            scores[c] = x;
            part_max = max(part_max, max(max(x.x, x.y), max(x.z, x.w)));
        }
        var tile_max = part_max;
        if LANES_PER_ROW == 2u {
            tile_max = max(part_max, subgroupShuffleXor(part_max, 1u));
        }
        // Lazy max: keep the old one unless the new exceeds it by more than LAZY_RESCALE.
        var rescale = 1.0;
        if m == neg_inf {
            m = tile_max;                    // first keys of the row: O and l are still 0
        } else if tile_max > m + LAZY_RESCALE {
            rescale = exp2(m - tile_max);
            m = tile_max;
            any_rescale.x = 1u;              // every writer writes the same value
        }
        l *= rescale;
        if part == 0u {
            row_rescale[my_row] = rescale;
        }
        let m_safe = select(m, 0.0, m == neg_inf);
        for (var c = 0u; c < ROW_PART; c++) {
            let p = exp2(scores[c] - m_safe);
            l += p.x + p.y + p.z + p.w;
            p_tile[my_row * P_STRIDE + part * ROW_PART + c] = vec4<f16>(p);
        }
        if workgroupUniformLoad(&any_rescale).x == 1u {
            rescale_output(&o_frag, first_row, my_row, part);
        }

        // O += P V: P's rows as A operands (f16), V [key][d] row-major as B; one V fragment
        // feeds ROW_TILES products, FRAGMENTS x ROW_TILES independent ones per key block.
        for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
            var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
            for (var r = 0u; r < ROW_TILES; r++) {
                let at = (first_row + 16u * r) * P_STRIDE + kb * 4u;
                p[r] = coopLoadT<coop_mat16x16<f16, A>>(&p_tile[at], P_STRIDE);
            }
            for (var f = 0u; f < FRAGMENTS; f++) {
                let at = (BLOCK_KV + kb * 16u) * KV_STRIDE + f * 4u;
                let v_frag = coopLoadT<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
                for (var r = 0u; r < ROW_TILES; r++) {
                    o_frag[r * FRAGMENTS + f] = coopMultiplyAdd(p[r], v_frag, o_frag[r * FRAGMENTS + f]);
                }
            }
        }
    }

    // O = acc / l, 16 columns at a time through workgroup memory; L = ln 2 (m + log2 l).
    var total = l;
    if LANES_PER_ROW == 2u {
        total = l + subgroupShuffleXor(l, 1u);
    }
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    let row = q_start + my_row;
    let columns = 4u / LANES_PER_ROW;        // vec4s of a 16-column fragment per lane
    for (var f = 0u; f < FRAGMENTS; f++) {
        workgroupBarrier();                  // s_tile is free
        for (var r = 0u; r < ROW_TILES; r++) {
            store_s(o_frag[r * FRAGMENTS + f], (first_row + 16u * r) * S_STRIDE);
        }
        workgroupBarrier();
        if row < params.q_len {
            for (var c = 0u; c < columns; c++) {
                let out = (slice * params.q_len + row) * CHUNKS + f * 4u + part * columns + c;
                o[out] = s_tile[my_row * S_STRIDE + part * columns + c] * inv_l;
            }
        }
    }
    if row < params.q_len && part == 0u {
        lse[slice * params.q_len + row] = select(neg_inf, LN_2 * (m + log2(total)), total > 0.0);
    }
}

// Multiplies row i of every O fragment by row_rescale[i]: each fragment goes through the
// subgroup's rows of s_tile (S is no longer needed there), its lanes scale their row's part,
// and it is loaded back. Called by the whole workgroup (its barriers need every thread).
fn rescale_output(
    o_frag: ptr<function, array<coop_mat16x16<f32, C>, ROW_TILES * FRAGMENTS>>,
    first_row: u32,
    my_row: u32,
    part: u32,
) {
    let columns = 4u / LANES_PER_ROW;
    for (var f = 0u; f < FRAGMENTS; f++) {
        workgroupBarrier();                  // the lanes are done with s_tile
        for (var r = 0u; r < ROW_TILES; r++) {
            store_s((*o_frag)[r * FRAGMENTS + f], (first_row + 16u * r) * S_STRIDE);
        }
        workgroupBarrier();
        for (var c = 0u; c < columns; c++) {
            s_tile[my_row * S_STRIDE + part * columns + c] *= row_rescale[my_row];
        }
        workgroupBarrier();
        for (var r = 0u; r < ROW_TILES; r++) {
            let at = (first_row + 16u * r) * S_STRIDE;
            (*o_frag)[r * FRAGMENTS + f] = coopLoadT<coop_mat16x16<f32, C>>(&s_tile[at], S_STRIDE);
        }
    }
}
