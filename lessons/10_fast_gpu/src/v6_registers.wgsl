// ANCHOR: header
// Lesson 10, version 6: every cooperative matrix in registers.
//
// What changes from version 5: nothing in the algorithm; only where the fragments live.
// The driver's own statistics of the compiled kernels (lab/src/bin/shader_stats.rs) showed
// versions 3 to 5 with local memory per thread, of the order of their arrays of cooperative
// matrices: version 5 at D = 64 with two row tiles has 384 bytes, exactly its 8 O
// accumulators x 32 bytes + 8 Q fragments x 16 bytes. Local memory is backed by device memory: every
// multiply-add into O read and wrote it. A microbenchmark with the same kind of arrays
// (lab/src/bin/primitives.rs) kept them in registers, at 440 to 600 TFLOP/s.
//
// Writing the kernel as one function, with no pointer to those arrays, did not change the
// statistics (measured). What did: the host unrolls every loop marked `// unroll` before the
// driver sees the source (`gpu::wgsl::unroll`), so every index into a fragment array is a
// constant. Local memory drops to 0, and the kernel runs 1.7 times as fast as version 5 (the
// book's lab notes).
//
// The loop runs once more than there are tiles, so that the last tile's O += P V is the same
// code as every other's:
//
//   t = 0:          S_0 = Q K_0^T              | softmax(0), stage K_1, V_0
//   t = 1 .. T-1:   O += P_{t-1} V_{t-1}; S_t  | softmax(t), stage K_{t+1}, V_t
//   t = T:          O += P_{T-1} V_{T-1}
//
// (The products run in every round: P starts as zeros, so round 0 adds nothing to O, and
// round T's S is never read.)
//
// LEAVE_OUT is for measurements only (lab/src/bin/tune.rs), as in version 5.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.
// ANCHOR_END: header

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 64u;           // keys per tile: 16, 32 or 64
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup
const ROW_TILES: u32 = 1u;           // 16-row query tiles per subgroup: 1 or 2
const LEAVE_OUT: u32 = 0u;           // measurements only: see above and `LeaveOut` in tuning.rs

const RUN_SOFTMAX: bool = (LEAVE_OUT & 1u) == 0u;   // 1: no reads of S, exponentials, P
const RUN_SCORES: bool = (LEAVE_OUT & 2u) == 0u;    // 2: no S = Q K^T (S stored as zeros)
const RUN_VALUES: bool = (LEAVE_OUT & 4u) == 0u;    // 4: no O += P V
// 8: S not stored to workgroup memory (behind a condition that never holds, as `pad0` is 0:
// a store left out for good would let the compiler drop QK^T, which only it reads)
const RUN_STORE_S: bool = (LEAVE_OUT & 8u) == 0u;
const RUN_STAGING: bool = (LEAVE_OUT & 16u) == 0u;  // 16: no K or V read or staged
const RUN_RESCALE: bool = (LEAVE_OUT & 32u) == 0u;  // 32: O never rescaled
const RUN_OUTPUT: bool = (LEAVE_OUT & 64u) == 0u;   // 64: O and L never written
const RUN_LOADS: bool = (LEAVE_OUT & 128u) == 0u;   // 128: K and V staged as zeros, never read
// 256: K and V read but not staged (a store behind a condition that never holds keeps the
// loads alive: the host sets `pad0` to 0)
const RUN_STASH: bool = (LEAVE_OUT & 256u) == 0u;

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
// O goes through the subgroup's rows of S to be rescaled or written out, as many 16-column
// fragments at a time as a row of S holds (a divisor of FRAGMENTS): all of them when
// BLOCK_KV >= HEAD_DIM, so that no loop with a barrier in it indexes the O fragments.
const O_PER_ROUND: u32 = select(select(1u, 2u, FRAGMENTS % 2u == 0u && KEY_BLOCKS >= 2u), 4u, FRAGMENTS % 4u == 0u && KEY_BLOCKS >= 4u);
const ROUNDS: u32 = FRAGMENTS / O_PER_ROUND;
const ROUND_CHUNKS: u32 = 4u * O_PER_ROUND / LANES_PER_ROW; // vec4s of a round per lane

// Row strides in workgroup memory, in vec4s; every one a whole number of 16-byte units (see
// version 2 on alignment). K, V and P rows are padded by 16 bytes, so the 8 rows that the
// tensor cores read at once start in 8 different groups of banks. S rows are padded by 32
// bytes (8 banks) where two lanes read a row, each every other vec4, and by 16 bytes (4 banks)
// where one lane reads a whole row: either way the lanes reading at once hit distinct banks.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;
const V_AT: u32 = BLOCK_KV * KV_STRIDE;           // V after K in kv_tile
const KV_SIZE: u32 = max(2u * BLOCK_KV, BLOCK_Q) * KV_STRIDE; // K, V; Q before the loop

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
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let key = first + e / CHUNKS;
        let at = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        let in_tile = TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS;  // constant if it divides
        var x = vec4<f16>(0.0h);
        let read = RUN_LOADS && in_tile && key < params.kv_len;
        if read && from_k {
            x = k[at];
        } else if read {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into workgroup memory from row `row0` of kv_tile (0 for K, BLOCK_KV for V).
fn stash(staged: array<vec4<f16>, STAGED>, row0: u32, thread: u32) {
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let stashed = RUN_STASH || params.pad0 == 1u;
        if (TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS) && stashed {
            kv_tile[(row0 + e / CHUNKS) * KV_STRIDE + e % CHUNKS] = staged[i];
        }
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
    // unroll
    for (var r = 0u; r < ROW_TILES; r++) {
        // unroll
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

    // Prologue: P = 0, V = 0 and K of tile 0 in workgroup memory; K of tile 1 and V of tile
    // 0 on their way.
    for (var e = thread; e < BLOCK_Q * P_STRIDE; e += THREADS) {
        p_tile[e] = vec4<f16>(0.0h);
    }
    var k_next = fetch(true, slice, 0u, thread);
    workgroupBarrier();                      // Q's fragments are read: kv_tile is free
    if RUN_STAGING {
        stash(k_next, 0u, thread);
    }
    // V as zeros too: round 0 multiplies them by P = 0, and uninitialised memory could hold
    // the bits of a NaN (0 x NaN = NaN).
    for (var e = thread; e < BLOCK_KV * KV_STRIDE; e += THREADS) {
        kv_tile[V_AT + e] = vec4<f16>(0.0h);
    }
    k_next = fetch(true, slice, BLOCK_KV, thread);
    var v_next = fetch(false, slice, 0u, thread);
    workgroupBarrier();

    let tiles = (kv_end + BLOCK_KV - 1u) / BLOCK_KV;
    for (var t = 0u; t <= tiles; t++) {
        let kv_start = t * BLOCK_KV;
        // O += P V of the previous tile: P's rows as A operands (f16), V [key][d] row-major
        // as B; one V fragment feeds ROW_TILES products, FRAGMENTS x ROW_TILES independent
        // ones per 16 keys.
        // In the first round P is still all zeros and adds nothing: no condition on t is
        // needed, and none is allowed here (naga counts the loop counter as non-uniform, and
        // cooperative-matrix operations need uniform control flow; version 5 gets away with
        // `if kv_start > 0u` only because its products sit in a called function, whose
        // uniformity naga does not check at the call).
        if RUN_VALUES {
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    let at = (first_row + 16u * r) * P_STRIDE + kb * 4u;
                    p[r] = coopLoadT<coop_mat16x16<f16, A>>(&p_tile[at], P_STRIDE);
                }
                // unroll
                for (var f = 0u; f < FRAGMENTS; f++) {
                    let at = V_AT + kb * 16u * KV_STRIDE + f * 4u;
                    let v_frag = coopLoadT<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
                    // unroll
                    for (var r = 0u; r < ROW_TILES; r++) {
                        o_frag[r * FRAGMENTS + f] = coopMultiplyAdd(p[r], v_frag, o_frag[r * FRAGMENTS + f]);
                    }
                }
            }
        }
                // S = Q K^T of this tile, every key block and row tile at once, into workgroup
        // memory. K is stored [key][d]: loaded column-major with stride KV_STRIDE it is K^T.
        // (In the last round, t = tiles, this S is computed from K_tiles and never read.)
        {
            var s: array<coop_mat16x16<f32, C>, ROW_TILES * KEY_BLOCKS>;
            if RUN_SCORES {
                // unroll
                for (var f = 0u; f < FRAGMENTS; f++) {
                    // unroll
                    for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                        let at = kb * 16u * KV_STRIDE + f * 4u;
                        let k_t = coopLoad<coop_mat16x16<f16, B>>(&kv_tile[at], KV_STRIDE);
                        // unroll
                        for (var r = 0u; r < ROW_TILES; r++) {
                            s[r * KEY_BLOCKS + kb] = coopMultiplyAdd(q_frag[r * FRAGMENTS + f], k_t, s[r * KEY_BLOCKS + kb]);
                        }
                    }
                }
            }
            if RUN_STORE_S || params.pad0 == 1u {
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    // unroll
                    for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                        store_s(s[r * KEY_BLOCKS + kb], (first_row + 16u * r) * S_STRIDE + kb * 4u);
                    }
                }
            }
        }
                workgroupBarrier();

        // Softmax of this tile, then K of the next tile and V of this one staged.
        if t < tiles && RUN_SOFTMAX {
            let masked_tile = kv_start + BLOCK_KV > all_see;
            softmax(kv_start, masked_tile, row_keys, my_row, part, &m, &l);
        }
        if t < tiles && RUN_STAGING {
            stash(k_next, 0u, thread);
            stash(v_next, BLOCK_KV, thread);
            k_next = fetch(true, slice, kv_start + 2u * BLOCK_KV, thread);
            v_next = fetch(false, slice, kv_start + BLOCK_KV, thread);
        }
        // The barrier before the next products, and whether any row's max grew by more than
        // the lazy threshold in this tile: then row i of every O fragment is multiplied by
        // row_rescale[i] before P V adds to it, O_PER_ROUND fragments at a time through the
        // subgroup's rows of s_tile (S is no longer needed there).
        let rescale_o = workgroupUniformLoad(&rescale_flag[0]) == 1u;
        if RUN_RESCALE {
            if rescale_o {
                // unroll
                for (var round = 0u; round < ROUNDS; round++) {
                    // unroll
                    for (var j = 0u; j < O_PER_ROUND; j++) {
                        // unroll
                        for (var r = 0u; r < ROW_TILES; r++) {
                            let at = (first_row + 16u * r) * S_STRIDE + 4u * j;
                            store_s(o_frag[r * FRAGMENTS + round * O_PER_ROUND + j], at);
                        }
                    }
                    workgroupBarrier();
                    // unroll
                    for (var c = 0u; c < ROUND_CHUNKS; c++) {
                        s_tile[my_row * S_STRIDE + part * ROUND_CHUNKS + c] *= row_rescale[my_row];
                    }
                    workgroupBarrier();
                    // unroll
                    for (var j = 0u; j < O_PER_ROUND; j++) {
                        // unroll
                        for (var r = 0u; r < ROW_TILES; r++) {
                            let at = (first_row + 16u * r) * S_STRIDE + 4u * j;
                            let f = round * O_PER_ROUND + j;
                            o_frag[r * FRAGMENTS + f] = coopLoadT<coop_mat16x16<f32, C>>(&s_tile[at], S_STRIDE);
                        }
                    }
                    workgroupBarrier();          // loaded before the next round is stored
                }
            }
        }
        if thread == 0u {
            atomicStore(&rescale_flag[0], 0u);
        }
    }

    // O = acc / l, 16 columns at a time through workgroup memory; L = ln 2 (m + log2 l).
    var total = l;
    if LANES_PER_ROW == 2u {
        total = l + subgroupShuffleXor(l, 1u);
    }
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    let row = q_start + my_row;
    // unroll
    for (var round = 0u; round < ROUNDS; round++) {
        workgroupBarrier();                  // s_tile is free
        // unroll
        for (var j = 0u; j < O_PER_ROUND; j++) {
            // unroll
            for (var r = 0u; r < ROW_TILES; r++) {
                let at = (first_row + 16u * r) * S_STRIDE + 4u * j;
                store_s(o_frag[r * FRAGMENTS + round * O_PER_ROUND + j], at);
            }
        }
        workgroupBarrier();
        if row < params.q_len && RUN_OUTPUT {
            // unroll
            for (var c = 0u; c < ROUND_CHUNKS; c++) {
                let chunk = round * 4u * O_PER_ROUND + part * ROUND_CHUNKS + c;
                let out = (slice * params.q_len + row) * CHUNKS + chunk;
                o[out] = s_tile[my_row * S_STRIDE + part * ROUND_CHUNKS + c] * inv_l;
            }
        }
    }
    if row < params.q_len && part == 0u && RUN_OUTPUT {
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
    // unroll
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
    // unroll
    for (var c = 0u; c < ROW_PART; c++) {
        let p = exp2(scores[c] - m_safe);
        *l += p.x + p.y + p.z + p.w;
        p_tile[my_row * P_STRIDE + c * LANES_PER_ROW + part] = vec4<f16>(p);
    }
}
