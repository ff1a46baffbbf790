// ANCHOR: header
// Lesson 10, version 2: tensor cores (f16 inputs, f32 accumulation).
//
// What changes from version 1: the two matrix products, S = Q K^T and O += P V, run on the
// GPU's tensor cores through WGSL cooperative matrices: a subgroup of 32 threads multiplies
// 16 x 16 tiles of f16 and adds into a 16 x 16 tile of f32 in one instruction. Q, K and V are
// stored in f16 (half the bytes), every sum is accumulated in f32, and P is rounded to f16
// before P V, as FlashAttention-2 does on its tensor cores (its error is part of the error
// model: `Tolerance::F16_STORAGE_AND_WEIGHTS`).
//
// A cooperative matrix has no element access: its 256 numbers are spread over the subgroup's
// registers in a layout the driver chooses. The softmax works on single numbers, so S goes
// through workgroup memory: stored by the subgroup, read by its lanes (two per row), turned
// into P, written back as f16, loaded again as the A operand of P V.
//
// Rescaling O by exp2(m_old - m_new) would need element access too. So O stays in its
// accumulators and the max is updated lazily (as FlashAttention-4 does): a row keeps its old
// max while the new one exceeds it by at most 8 (log2 units), its weights then being at most
// 2^8 = 256, well inside f16. Only when some row's max grows by more does the workgroup store
// O, rescale it and load it again, which on typical inputs happens on the first tiles only.
//
// Workgroup: 4 subgroups of 32 threads (the subgroup size must be 32, as on NVIDIA); each
// subgroup owns 16 query rows, so BLOCK_Q = 64, and all four share each tile of BLOCK_KV keys
// staged in workgroup memory. Q's fragments stay in registers for the whole loop.
//
// Per tile of keys (three barriers, four on a rescale):
//   1. stage K and V (f16)                                              | barrier
//   2. S = Q K^T on the tensor cores, into workgroup memory              | barrier
//   3. lanes: scale, mask where needed, row max, P = exp2(S - m) as f16  | barrier
//   (3b. if any row's max grew by more than 8: O through workgroup memory, rescaled)
//   4. O += P V on the tensor cores                                     | barrier
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.
// ANCHOR_END: header

enable f16;
enable wgpu_cooperative_matrix;

override HEAD_DIM: u32 = 64u;        // a multiple of 16 (the host pads rows to one)
override BLOCK_KV: u32 = 64u;        // keys per tile: 64, or 32 at D >= 128 (workgroup memory)

const SUBGROUPS: u32 = 4u;
const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const BLOCK_Q: u32 = 16u * SUBGROUPS;
const MAX_FRAGMENTS: u32 = 16u;      // 16-wide slices of the head dimension: D <= 256
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8

override CHUNKS: u32 = HEAD_DIM / 4u;             // vec4s per row in global memory
override FRAGMENTS: u32 = HEAD_DIM / 16u;
// Row strides in workgroup memory, in vec4s, padded by one vec4 against bank conflicts.
override KV_STRIDE: u32 = CHUNKS + 2u;            // f16 rows of K and V: D + 8 halves
override S_STRIDE: u32 = BLOCK_KV / 4u + 1u;      // f32 rows of S (and of O on the way out)
override P_STRIDE: u32 = BLOCK_KV / 4u + 2u;      // f16 rows of P
override HALF_ROW: u32 = BLOCK_KV / 8u;           // vec4s of a row of S per lane (2 lanes a row)

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

// ANCHOR: workgroup_memory
// Workgroup memory. The tensor cores load each row of a tile with one 16-byte access, so
// every row a cooperative matrix reads must start on a multiple of 16 bytes. An array of
// vec4<f16> is only 8-byte aligned, and the driver places the variables where it likes: a
// lone u32 among them once put P 8 bytes off, and the tensor cores then read each row from
// 8 bytes too early (measured on an H100: keys 0 to 3 of every tile lost). Every variable
// here is therefore a whole number of 16-byte units, and every row stride a multiple of 16
// bytes, so no variable can push another off the 16-byte grid.
//
// K then V of one tile (and, before the loop, the workgroup's rows of Q on their way into
// registers).
var<workgroup> kv_tile: array<vec4<f16>, 2u * BLOCK_KV * KV_STRIDE>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> p_tile: array<vec4<f16>, BLOCK_Q * P_STRIDE>;
var<workgroup> row_rescale: array<f32, BLOCK_Q>;   // exp2(m_old - m_new) for each row
var<workgroup> any_rescale: vec4<u32>;             // .x: some row's max grew by more than 8
// ANCHOR_END: workgroup_memory

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

// Rows [first, first + rows) of one slice of `tensor` (0: Q, 1: K, 2: V) into kv_tile from
// vec4 `at`, zeros past the tensor's end.
fn stage(tensor: u32, slice: u32, first: u32, rows: u32, len: u32, at: u32, thread: u32) {
    for (var e = thread; e < rows * CHUNKS; e += THREADS) {
        let row = e / CHUNKS;
        let chunk = e % CHUNKS;
        var x = vec4<f16>(0.0h);
        if first + row < len {
            let source = (slice * len + first + row) * CHUNKS + chunk;
            if tensor == 0u {
                x = q[source];
            } else if tensor == 1u {
                x = k[source];
            } else {
                x = v[source];
            }
        }
        kv_tile[at + row * KV_STRIDE + chunk] = x;
    }
}

// Stores wrapped in functions: naga 30's SPIR-V writer can fail on a coopStoreT whose
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
    let my_row = sg * 16u + lane / 2u;       // this lane's row of the tile for the softmax
    let half = lane % 2u;                    // and which half of the tile's keys
    let row_keys = visible_keys(q_start + my_row);

    // Q's fragments, through workgroup memory into registers, kept for the whole loop.
    stage(0u, slice, q_start, BLOCK_Q, params.q_len, 0u, thread);
    workgroupBarrier();
    var q_frag: array<coop_mat16x16<f16, A>, MAX_FRAGMENTS>;
    for (var f = 0u; f < FRAGMENTS; f++) {
        q_frag[f] = coopLoadT<coop_mat16x16<f16, A>>(&kv_tile[sg * 16u * KV_STRIDE + f * 4u], KV_STRIDE);
    }
    var o_frag: array<coop_mat16x16<f32, C>, MAX_FRAGMENTS>;
    for (var f = 0u; f < FRAGMENTS; f++) {
        o_frag[f] = coop_mat16x16<f32, C>();
    }
    workgroupBarrier();                      // Q is in registers before K overwrites it

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's half of the row sum

    for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV) {
        stage(1u, slice, kv_start, BLOCK_KV, params.kv_len, 0u, thread);
        stage(2u, slice, kv_start, BLOCK_KV, params.kv_len, BLOCK_KV * KV_STRIDE, thread);
        if thread == 0u {
            any_rescale = vec4<u32>(0u);
        }
        workgroupBarrier();

        // ANCHOR: scores
        // S = Q K^T for the subgroup's 16 rows, 16 keys at a time. K is stored [key][d]:
        // loaded column-major with stride KV_STRIDE it is K^T, the B operand.
        for (var kb = 0u; kb < BLOCK_KV / 16u; kb++) {
            var s = coop_mat16x16<f32, C>();
            for (var f = 0u; f < FRAGMENTS; f++) {
                let k_t = coopLoad<coop_mat16x16<f16, B>>(&kv_tile[kb * 16u * KV_STRIDE + f * 4u], KV_STRIDE);
                s = coopMultiplyAdd(q_frag[f], k_t, s);
            }
            store_s(s, sg * 16u * S_STRIDE + kb * 4u);
        }
        // ANCHOR_END: scores
        workgroupBarrier();

        // The softmax, two lanes per row: scores in log2 units, masked on tiles that cross
        // the diagonal or the end of the keys, the row max through the partner lane.
        let masked_tile = kv_start + BLOCK_KV > all_see;
        var scores: array<vec4<f32>, 8>;     // HALF_ROW <= 8
        var part_max = neg_inf;
        for (var c = 0u; c < HALF_ROW; c++) {
            var x = s_tile[my_row * S_STRIDE + half * HALF_ROW + c] * scale;
            if masked_tile {
                let key = kv_start + (half * HALF_ROW + c) * 4u;
                let visible = vec4<u32>(key, key + 1u, key + 2u, key + 3u) < vec4<u32>(row_keys);
                x = select(vec4<f32>(neg_inf), x, visible);
            }
            scores[c] = x;
            part_max = max(part_max, max(max(x.x, x.y), max(x.z, x.w)));
        }
        let tile_max = max(part_max, subgroupShuffleXor(part_max, 1u));
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
        if half == 0u {
            row_rescale[my_row] = rescale;
        }
        let m_safe = select(m, 0.0, m == neg_inf);
        for (var c = 0u; c < HALF_ROW; c++) {
            let p = exp2(scores[c] - m_safe);
            l += p.x + p.y + p.z + p.w;
            p_tile[my_row * P_STRIDE + half * HALF_ROW + c] = vec4<f16>(p);
        }
        if workgroupUniformLoad(&any_rescale).x == 1u {
            rescale_output(&o_frag, sg, lane);
        }
        workgroupBarrier();

        // O += P V: P's rows as A operands (f16), V [key][d] row-major as B.
        for (var kb = 0u; kb < BLOCK_KV / 16u; kb++) {
            let p = coopLoadT<coop_mat16x16<f16, A>>(&p_tile[sg * 16u * P_STRIDE + kb * 4u], P_STRIDE);
            for (var f = 0u; f < FRAGMENTS; f++) {
                let v_frag = coopLoadT<coop_mat16x16<f16, B>>(&kv_tile[(BLOCK_KV + kb * 16u) * KV_STRIDE + f * 4u], KV_STRIDE);
                o_frag[f] = coopMultiplyAdd(p, v_frag, o_frag[f]);
            }
        }
        workgroupBarrier();
    }

    // O = acc / l, 16 columns at a time through workgroup memory; L = ln 2 (m + log2 l).
    let total = l + subgroupShuffleXor(l, 1u);
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    let row = q_start + my_row;
    for (var f = 0u; f < FRAGMENTS; f++) {
        store_s(o_frag[f], sg * 16u * S_STRIDE);
        workgroupBarrier();
        if row < params.q_len {
            let at = my_row * S_STRIDE + half * 2u;
            let out = (slice * params.q_len + row) * CHUNKS + f * 4u + half * 2u;
            o[out] = s_tile[at] * inv_l;
            o[out + 1u] = s_tile[at + 1u] * inv_l;
        }
        workgroupBarrier();
    }
    if row < params.q_len && half == 0u {
        lse[slice * params.q_len + row] = select(neg_inf, LN_2 * (m + log2(total)), total > 0.0);
    }
}

// Multiplies row i of every O fragment by row_rescale[i]: each fragment goes through the
// subgroup's rows of s_tile (S is no longer needed there), its lanes scale their row's half,
// and it is loaded back. Called by the whole workgroup (its barriers need every thread).
fn rescale_output(o_frag: ptr<function, array<coop_mat16x16<f32, C>, MAX_FRAGMENTS>>, sg: u32, lane: u32) {
    let my_row = sg * 16u + lane / 2u;
    let at = my_row * S_STRIDE + (lane % 2u) * 2u;
    for (var f = 0u; f < FRAGMENTS; f++) {
        workgroupBarrier();                  // the lanes are done with s_tile
        store_s((*o_frag)[f], sg * 16u * S_STRIDE);
        workgroupBarrier();
        s_tile[at] *= row_rescale[my_row];
        s_tile[at + 1u] *= row_rescale[my_row];
        workgroupBarrier();
        (*o_frag)[f] = coopLoadT<coop_mat16x16<f32, C>>(&s_tile[sg * 16u * S_STRIDE], S_STRIDE);
    }
}
