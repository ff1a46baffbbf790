// Lesson 10, version 5: tensor cores, software-pipelined: two barriers per tile.
//
// What changes from version 4 (same products, same lazy rescale, same layout):
//   - Two barriers per tile instead of four. Version 4 ran each tile as four phases with a
//     barrier after each: stage K and V, S = Q K^T, softmax, O += P V. Every subgroup waited
//     for the slowest at each one, and the tensor cores idled while the lanes computed
//     exponentials. Here the loop is pipelined, as FlashAttention-3 does within a warp group:
//     one phase of tile t runs the products (O += P_{t-1} V_{t-1}, then S_t = Q K_t^T), the
//     other runs the softmax of tile t and stages the next tile's K and V. Two phases, two
//     barriers, and every workgroup memory hazard is ordered by one of them:
//
//        products(t):  PV of tile t-1 (reads P, V)   QK of tile t (reads K, writes S)
//        ---------------- barrier -------------------------------------------------
//        softmax(t):   reads S, writes P             stages K of t+1 and V of t
//        ---------------- barrier (workgroupUniformLoad of the rescale flag) -------
//
//     K and V each need only one buffer: the softmax phase writes K_{t+1} over K_t and V_t
//     over V_{t-1} after the barrier that ends their last reads.
//   - The loads of the next tile's K and V from global memory are issued right after the
//     current ones are staged, so each has a whole phase of products to arrive.
//   - Conflict-free strides: each row of S is padded so that the 2 lanes of a row and the
//     rows next to each other fall in different memory banks (see the strides below).
//   - TRANSPOSE_V = 1 stages V transposed, so that the tensor cores read it column-major like
//     K. Measured on an H100 (lab/src/bin/tune.rs), it was no faster, so the registered kernel
//     reads V row-major; the option stays for the comparison.
//
// Measured, this version is only 1.3 times version 4 (the book's lab notes): the products
// themselves, not the barriers, turned out to be what was slow. Version 6 says why.
//
// LEAVE_OUT is for measurements only (lab/src/bin/tune.rs): each bit removes one part of the
// work so that its cost shows as a difference in time. Every registered kernel has 0; with
// any other value the output is wrong.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 64u;           // keys per tile: 16, 32 or 64
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup
const ROW_TILES: u32 = 1u;           // 16-row query tiles per subgroup: 1 or 2
const TRANSPOSE_V: u32 = 1u;         // 1: V staged as V^T, read as a column-major B operand
const LEAVE_OUT: u32 = 0u;           // measurements only: see above and `LeaveOut` in tuning.rs

const RUN_SOFTMAX: bool = (LEAVE_OUT & 1u) == 0u;   // 1: no reads of S, exponentials, P
const RUN_SCORES: bool = (LEAVE_OUT & 2u) == 0u;    // 2: no S = Q K^T (S stored as zeros)
const RUN_VALUES: bool = (LEAVE_OUT & 4u) == 0u;    // 4: no O += P V
// 8: S not stored to workgroup memory (behind a condition that never holds, as `pad0` is 0:
// a store left out for good would let the compiler drop QK^T, which only it reads)
const RUN_STORE_S: bool = (LEAVE_OUT & 8u) == 0u;
const RUN_STAGING: bool = (LEAVE_OUT & 16u) == 0u;  // 16: no K or V read or staged

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const SUBGROUP_ROWS: u32 = 16u * ROW_TILES;
const BLOCK_Q: u32 = SUBGROUP_ROWS * SUBGROUPS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;            // 16-wide slices of the head dimension
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;           // 16-key slices of a tile
const CHUNKS: u32 = HEAD_DIM / 4u;                // vec4s per row
const LANES_PER_ROW: u32 = LANES / SUBGROUP_ROWS; // 2, or 1 with ROW_TILES = 2
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const TILE_CHUNKS: u32 = BLOCK_KV * CHUNKS;          // vec4s in a tile of K (or of V)
const STAGED: u32 = (TILE_CHUNKS + THREADS - 1u) / THREADS; // ... per thread, at most
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8

// Row strides in workgroup memory, in vec4s; every one a whole number of 16-byte units (see
// version 2 on alignment). K, V and P rows are padded by 16 bytes, so the 8 rows that the
// tensor cores read at once start in 8 different groups of banks. S rows are padded by 32
// bytes (8 banks) where two lanes read a row, each every other vec4, and by 16 bytes (4 banks)
// where one lane reads a whole row: either way the lanes reading at once hit distinct banks.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;
const VT_STRIDE: u32 = BLOCK_KV / 4u + 2u;        // f16 rows of V^T: BLOCK_KV + 8 halves
const V_AT: u32 = BLOCK_KV * KV_STRIDE;           // V (or V^T) after K in kv_tile
const V_SIZE: u32 = select(BLOCK_KV * KV_STRIDE, HEAD_DIM * VT_STRIDE, TRANSPOSE_V == 1u);
const KV_SIZE: u32 = max(V_AT + V_SIZE, BLOCK_Q * KV_STRIDE); // K, V; Q before the loop
const V_GROUPS: u32 = BLOCK_KV / 4u * CHUNKS;     // 4 keys x 4 dims blocks of V^T
const STAGED_VT: u32 = (V_GROUPS + THREADS - 1u) / THREADS;

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

var<workgroup> kv_tile: array<vec4<f16>, KV_SIZE>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> p_tile: array<vec4<f16>, BLOCK_Q * P_STRIDE>;
var<workgroup> row_rescale: array<f32, BLOCK_Q>;    // exp2(m_old - m_new) for each row
var<workgroup> rescale_flag: array<atomic<u32>, 4>; // [0]: some row's max grew by more than 8

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

// This thread's share of rows [first, first + BLOCK_KV) of K (from_k) or V: elements
// e = thread + i * THREADS of the tile's BLOCK_KV x CHUNKS vec4s; zeros past Nkv.
fn fetch(from_k: bool, slice: u32, first: u32, thread: u32) -> array<vec4<f16>, STAGED> {
    var staged: array<vec4<f16>, STAGED>;
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let key = first + e / CHUNKS;
        let at = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        let in_tile = TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS;  // constant if it divides
        var x = vec4<f16>(0.0h);
        if !in_tile {
            break;
        } else if key < params.kv_len && from_k {
            x = k[at];
        } else if key < params.kv_len {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into workgroup memory from row `row0` of kv_tile (0 for K, BLOCK_KV for V).
fn stash(staged: array<vec4<f16>, STAGED>, row0: u32, thread: u32) {
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        if TILE_CHUNKS % THREADS != 0u && e >= TILE_CHUNKS {
            break;
        }
        kv_tile[(row0 + e / CHUNKS) * KV_STRIDE + e % CHUNKS] = staged[i];
    }
}
// V staged transposed: V^T [d][key], so that the tensor cores read it as a column-major B
// operand, the layout they load fastest. Each thread takes blocks of 4 keys x 4 dims: 4
// rows of V in (one vec4 each), 4 rows of V^T out (one vec4 each, 4 keys of one dim).
fn fetch_values_transposed(slice: u32, first: u32, thread: u32) -> array<vec4<f16>, 4u * STAGED_VT> {
    var staged: array<vec4<f16>, 4u * STAGED_VT>;
    for (var i = 0u; i < STAGED_VT; i++) {
        let e = thread + i * THREADS;
        if V_GROUPS % THREADS != 0u && e >= V_GROUPS {
            break;
        }
        let keys = first + 4u * (e % (BLOCK_KV / 4u));
        let chunk = e / (BLOCK_KV / 4u);
        for (var j = 0u; j < 4u; j++) {
            var x = vec4<f16>(0.0h);
            if keys + j < params.kv_len {
                x = v[(slice * params.kv_len + keys + j) * CHUNKS + chunk];
            }
            staged[4u * i + j] = x;
        }
    }
    return staged;
}

fn stash_values_transposed(staged: array<vec4<f16>, 4u * STAGED_VT>, thread: u32) {
    for (var i = 0u; i < STAGED_VT; i++) {
        let e = thread + i * THREADS;
        if V_GROUPS % THREADS != 0u && e >= V_GROUPS {
            break;
        }
        let group = e % (BLOCK_KV / 4u);
        let d = 4u * (e / (BLOCK_KV / 4u));
        let x0 = staged[4u * i];
        let x1 = staged[4u * i + 1u];
        let x2 = staged[4u * i + 2u];
        let x3 = staged[4u * i + 3u];
        kv_tile[V_AT + d * VT_STRIDE + group] = vec4<f16>(x0.x, x1.x, x2.x, x3.x);
        kv_tile[V_AT + (d + 1u) * VT_STRIDE + group] = vec4<f16>(x0.y, x1.y, x2.y, x3.y);
        kv_tile[V_AT + (d + 2u) * VT_STRIDE + group] = vec4<f16>(x0.z, x1.z, x2.z, x3.z);
        kv_tile[V_AT + (d + 3u) * VT_STRIDE + group] = vec4<f16>(x0.w, x1.w, x2.w, x3.w);
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

// The tensor-core phase. O += P V for the previous tile: one V fragment loaded from
// workgroup memory feeds ROW_TILES products, FRAGMENTS x ROW_TILES independent ones per
// 16 keys, so several are in flight at once.
fn add_values(o_frag: ptr<function, array<coop_mat16x16<f32, C>, ROW_TILES * FRAGMENTS>>, first_row: u32) {
    for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
        var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
        for (var r = 0u; r < ROW_TILES; r++) {
            let at = (first_row + 16u * r) * P_STRIDE + kb * 4u;
            p[r] = coopLoadT<coop_mat16x16<f16, A>>(&p_tile[at], P_STRIDE);
        }
        for (var f = 0u; f < FRAGMENTS; f++) {
            var v_frag: coop_mat16x16<f16, B>;
            if TRANSPOSE_V == 1u {
                // V^T [d][key] read column-major is V [key][d].
                let at = V_AT + f * 16u * VT_STRIDE + kb * 4u;
                v_frag = coopLoad<coop_mat16x16<f16, B>>(&kv_tile[at], VT_STRIDE);
            } else {
                let at = V_AT + kb * 16u * KV_STRIDE + f * 4u;
                v_frag = coopLoadT<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
            }
            for (var r = 0u; r < ROW_TILES; r++) {
                (*o_frag)[r * FRAGMENTS + f] = coopMultiplyAdd(p[r], v_frag, (*o_frag)[r * FRAGMENTS + f]);
            }
        }
    }
}

// Then S = Q K^T for this tile, all key blocks and row tiles at once, stored to workgroup
// memory. K is stored [key][d]: loaded column-major with stride KV_STRIDE it is K^T.
fn scores(q_frag: ptr<function, array<coop_mat16x16<f16, A>, ROW_TILES * FRAGMENTS>>, first_row: u32) {
    var s: array<coop_mat16x16<f32, C>, ROW_TILES * KEY_BLOCKS>;
    if RUN_SCORES {
        for (var f = 0u; f < FRAGMENTS; f++) {
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                let at = kb * 16u * KV_STRIDE + f * 4u;
                let k_t = coopLoad<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
                for (var r = 0u; r < ROW_TILES; r++) {
                    s[r * KEY_BLOCKS + kb] = coopMultiplyAdd((*q_frag)[r * FRAGMENTS + f], k_t, s[r * KEY_BLOCKS + kb]);
                }
            }
        }
    }
    if RUN_STORE_S || params.pad0 == 1u {
        for (var r = 0u; r < ROW_TILES; r++) {
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                store_s(s[r * KEY_BLOCKS + kb], (first_row + 16u * r) * S_STRIDE + kb * 4u);
            }
        }
    }
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
    let neg_inf = minus_infinity();
    let first_row = sg * SUBGROUP_ROWS;               // the subgroup's rows of the tile
    let my_row = first_row + lane / LANES_PER_ROW;    // this lane's row for the softmax
    let part = lane % LANES_PER_ROW;                  // and which vec4s of it: every other
    let row_keys = visible_keys(q_start + my_row);

    // Q's fragments into registers, kept for the whole loop.
    stage_queries(slice, q_start, thread);
    if thread == 0u {
        atomicStore(&rescale_flag[0], 0u);
    }
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

    // Prologue: K of tile 0 into workgroup memory; K of tile 1 and V of tile 0 on their way.
    var k_next = fetch(true, slice, 0u, thread);
    workgroupBarrier();                      // Q's fragments are read: kv_tile is free
    if RUN_STAGING {
        stash(k_next, 0u, thread);
    }
    k_next = fetch(true, slice, BLOCK_KV, thread);
    var v_next: array<vec4<f16>, STAGED>;
    var vt_next: array<vec4<f16>, 4u * STAGED_VT>;
    if TRANSPOSE_V == 1u {
        vt_next = fetch_values_transposed(slice, 0u, thread);
    } else {
        v_next = fetch(false, slice, 0u, thread);
    }
    workgroupBarrier();

    for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV) {
        // Products: O += P V of the previous tile, S = Q K^T of this one.
        if kv_start > 0u && RUN_VALUES {
            add_values(&o_frag, first_row);
        }
        scores(&q_frag, first_row);
        workgroupBarrier();

        // Softmax of this tile, then K of the next tile and V of this one staged.
        if RUN_SOFTMAX {
            let masked_tile = kv_start + BLOCK_KV > all_see;
            softmax(kv_start, masked_tile, row_keys, my_row, part, &m, &l);
        }
        if RUN_STAGING {
            stash(k_next, 0u, thread);
            k_next = fetch(true, slice, kv_start + 2u * BLOCK_KV, thread);
            if TRANSPOSE_V == 1u {
                stash_values_transposed(vt_next, thread);
                vt_next = fetch_values_transposed(slice, kv_start + BLOCK_KV, thread);
            } else {
                stash(v_next, BLOCK_KV, thread);
                v_next = fetch(false, slice, kv_start + BLOCK_KV, thread);
            }
        }
        // The barrier before the next products, and whether any row's max grew by more
        // than the lazy threshold in this tile: then O is rescaled before P V adds to it.
        if workgroupUniformLoad(&rescale_flag[0]) == 1u {
            rescale_output(&o_frag, first_row, my_row, part);
            if thread == 0u {
                atomicStore(&rescale_flag[0], 0u);
            }
            workgroupBarrier();
        }
    }
    // Epilogue: O += P V of the last tile.
    if kv_end > 0u && RUN_VALUES {
        add_values(&o_frag, first_row);
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

// One row's part of the tile: scores in log2 units, masked on tiles that cross the diagonal
// or the end of the keys, the row max through the partner lane, the lazy max (kept unless
// the tile's exceeds it by more than LAZY_RESCALE), P = exp2(S - m) as f16.
fn softmax(
    kv_start: u32,
    masked_tile: bool,
    row_keys: u32,
    my_row: u32,
    part: u32,
    m: ptr<function, f32>,
    l: ptr<function, f32>,
) {
    let neg_inf = minus_infinity();
    let scale = params.scale * LOG2_E;
    var scores: array<vec4<f32>, ROW_PART>;
    var part_max = neg_inf;
    for (var c = 0u; c < ROW_PART; c++) {
        let chunk = c * LANES_PER_ROW + part;
        var x = s_tile[my_row * S_STRIDE + chunk] * scale;
        if masked_tile {
            let key = kv_start + chunk * 4u;
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
    var rescale = 1.0;
    if *m == neg_inf {
        *m = tile_max;                       // first keys of the row: O and l are still 0
    } else if tile_max > *m + LAZY_RESCALE {
        rescale = exp2(*m - tile_max);
        *m = tile_max;
        atomicStore(&rescale_flag[0], 1u);
    }
    *l *= rescale;
    if part == 0u {
        row_rescale[my_row] = rescale;
    }
    let m_safe = select(*m, 0.0, *m == neg_inf);
    for (var c = 0u; c < ROW_PART; c++) {
        let p = exp2(scores[c] - m_safe);
        *l += p.x + p.y + p.z + p.w;
        p_tile[my_row * P_STRIDE + c * LANES_PER_ROW + part] = vec4<f16>(p);
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
        workgroupBarrier();                  // loaded before the next fragment is stored
    }
}
