// ANCHOR: header
// Lesson 10, version 7: the softmax beside the tensor cores.
//
// What changes from version 6: which work shares a phase. Version 6 split each tile into a
// phase of products (O += P V, then S = Q K^T) and a phase of everything else (softmax, K and
// V staged); all subgroups of a workgroup cross the barriers together, so inside a workgroup
// the tensor cores idled through the softmax and the exponential unit through the products.
// Here each phase holds one product and other work that does not depend on it:
//
//   phase A(t):  S_t = Q K_t^T              | V_{t-1} staged, V_t fetched
//   phase B(t):  O += P_{t-1} V_{t-1}        | softmax(t) -> P_t, K_{t+1} staged, K_{t+2} fetched
//
// so a subgroup's products run while its own (and its neighbours') exponentials, shared-memory
// reads and writes go on. P_{t-1} is read while P_t is written: two P buffers. Q is staged in
// ROW_TILES rounds through the space of one K and one V tile, so the whole fits the 48 KiB of
// workgroup memory at 4 x 2 x 16 rows and 32 keys, version 6's best shape at D = 64.
//
// And K and V are read from memory 16 bytes (8 halves) at a time, not 8: half the load
// instructions in the staging.
//
// The loop runs once more than there are tiles, as in version 6: round T computes an S that
// is never read and adds the last P V.
//
// LEAVE_OUT is for measurements only (examples/tune.rs), as in version 6.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.
// ANCHOR_END: header

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 32u;           // keys per tile: 16, 32 or 64
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup
const ROW_TILES: u32 = 2u;           // 16-row query tiles per subgroup: 1 or 2
const LEAVE_OUT: u32 = 0u;           // measurements only: see `LeaveOut` in lib.rs

const RUN_SOFTMAX: bool = (LEAVE_OUT & 1u) == 0u;   // 1: no reads of S, exponentials, P
const RUN_SCORES: bool = (LEAVE_OUT & 2u) == 0u;    // 2: no S = Q K^T (S stored as zeros)
const RUN_VALUES: bool = (LEAVE_OUT & 4u) == 0u;    // 4: no O += P V
const RUN_STORE_S: bool = (LEAVE_OUT & 8u) == 0u;   // 8: S not stored to workgroup memory
const RUN_STAGING: bool = (LEAVE_OUT & 16u) == 0u;  // 16: no K or V read or staged
const RUN_RESCALE: bool = (LEAVE_OUT & 32u) == 0u;  // 32: O never rescaled
const RUN_OUTPUT: bool = (LEAVE_OUT & 64u) == 0u;   // 64: O and L never written

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const SUBGROUP_ROWS: u32 = 16u * ROW_TILES;
const BLOCK_Q: u32 = SUBGROUP_ROWS * SUBGROUPS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;            // 16-wide slices of the head dimension
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;           // 16-key slices of a tile
const CHUNKS: u32 = HEAD_DIM / 4u;                // vec4<f16>s per row
const LOAD_CHUNKS: u32 = HEAD_DIM / 8u;           // 16-byte loads per row of K or V
const LANES_PER_ROW: u32 = LANES / SUBGROUP_ROWS; // 2, or 1 with ROW_TILES = 2
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const TILE_LOADS: u32 = BLOCK_KV * LOAD_CHUNKS;      // loads for a tile of K (or of V)
const STAGED: u32 = (TILE_LOADS + THREADS - 1u) / THREADS; // ... per thread, at most
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8
// O goes through the subgroup's rows of S to be rescaled or written out, as in version 6.
const O_PER_ROUND: u32 = select(select(1u, 2u, FRAGMENTS % 2u == 0u && KEY_BLOCKS >= 2u), 4u, FRAGMENTS % 4u == 0u && KEY_BLOCKS >= 4u);
const ROUNDS: u32 = FRAGMENTS / O_PER_ROUND;
const ROUND_CHUNKS: u32 = 4u * O_PER_ROUND / LANES_PER_ROW; // vec4s of a round per lane

// Row strides in workgroup memory in vec4s, padded as in version 6.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;
const P_SIZE: u32 = BLOCK_Q * P_STRIDE;          // one of the two P buffers
const V_AT: u32 = BLOCK_KV * KV_STRIDE;           // V after K in kv_tile
const Q_ROUND_ROWS: u32 = 16u * SUBGROUPS;        // rows of Q staged per round
const KV_SIZE: u32 = max(2u * BLOCK_KV, Q_ROUND_ROWS) * KV_STRIDE; // K, V; Q before the loop

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

// K and V are read 8 halves (16 bytes) at a time, as matrices of two columns: WGSL has no
// vector of 8 f16s, and naga 30 cannot bitcast a vec2<u32> to a vec4<f16>.
alias Load = mat2x4<f16>;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> k: array<Load>;
@group(0) @binding(3) var<storage, read> v: array<Load>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

var<workgroup> kv_tile: array<vec4<f16>, KV_SIZE>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> p_tile: array<vec4<f16>, 2u * P_SIZE>; // P_{t-1} and P_t, alternately
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

// This thread's share of rows [first, first + BLOCK_KV) of K (from_k) or V: loads
// e = thread + i * THREADS of the tile's BLOCK_KV x LOAD_CHUNKS; zeros past Nkv.
fn fetch(from_k: bool, slice: u32, first: u32, thread: u32) -> array<Load, STAGED> {
    var staged: array<Load, STAGED>;
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let key = first + e / LOAD_CHUNKS;
        let in_tile = TILE_LOADS % THREADS == 0u || e < TILE_LOADS;  // constant if it divides
        var x = Load(vec4<f16>(0.0h), vec4<f16>(0.0h));
        let at = (slice * params.kv_len + key) * LOAD_CHUNKS + e % LOAD_CHUNKS;
        if in_tile && key < params.kv_len && from_k {
            x = k[at];
        } else if in_tile && key < params.kv_len {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into workgroup memory from row `row0` of kv_tile (0 for K, BLOCK_KV for V). Each
// load is two vec4<f16> stores; lanes on odd rows store their halves in the other order, so
// that the lanes storing at once spread over every bank (rows start 4 banks apart).
fn stash(staged: array<Load, STAGED>, row0: u32, thread: u32) {
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        if TILE_LOADS % THREADS == 0u || e < TILE_LOADS {  // constant if it divides
            let row = row0 + e / LOAD_CHUNKS;
            let at = row * KV_STRIDE + 2u * (e % LOAD_CHUNKS);
            let swap = row % 2u == 1u;       // selects: a variable index into the matrix
                                             // could put it in memory
            kv_tile[at + u32(swap)] = select(staged[i][0], staged[i][1], swap);
            kv_tile[at + u32(!swap)] = select(staged[i][1], staged[i][0], swap);
        }
    }
}

// Row tile `round` of every subgroup's rows of Q into kv_tile, zeros past Nq: subgroup g's
// rows g * SUBGROUP_ROWS + 16 * round + j go to rows 16 * g + j.
fn stage_queries(slice: u32, q_start: u32, round: u32, thread: u32) {
    for (var e = thread; e < Q_ROUND_ROWS * CHUNKS; e += THREADS) {
        let staged_row = e / CHUNKS;
        let row = (staged_row / 16u) * SUBGROUP_ROWS + 16u * round + staged_row % 16u;
        var x = vec4<f16>(0.0h);
        if q_start + row < params.q_len {
            x = q[(slice * params.q_len + q_start + row) * CHUNKS + e % CHUNKS];
        }
        kv_tile[staged_row * KV_STRIDE + e % CHUNKS] = x;
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

    // Q's fragments into registers, kept for the whole loop, one row tile at a time.
    if thread == 0u {
        atomicStore(&rescale_flag[0], 0u);
    }
    var q_frag: array<coop_mat16x16<f16, A>, ROW_TILES * FRAGMENTS>;
    var o_frag: array<coop_mat16x16<f32, C>, ROW_TILES * FRAGMENTS>;
    // unroll
    for (var r = 0u; r < ROW_TILES; r++) {
        stage_queries(slice, q_start, r, thread);
        workgroupBarrier();
        // unroll
        for (var f = 0u; f < FRAGMENTS; f++) {
            let at = 16u * sg * KV_STRIDE + f * 4u;
            q_frag[r * FRAGMENTS + f] = coopLoadT<coop_mat16x16<f16, A>>(&kv_tile[at], KV_STRIDE);
            o_frag[r * FRAGMENTS + f] = coop_mat16x16<f32, C>();
        }
        workgroupBarrier();                  // read before the next round (or K) overwrites
    }

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's part of the row sum

    // Prologue: both P buffers and V zero (round 0 multiplies them; uninitialised memory
    // could hold the bits of a NaN, and 0 x NaN = NaN), K of tile 0 in workgroup memory,
    // K of tile 1 on its way.
    for (var e = thread; e < 2u * P_SIZE; e += THREADS) {
        p_tile[e] = vec4<f16>(0.0h);
    }
    for (var e = thread; e < BLOCK_KV * KV_STRIDE; e += THREADS) {
        kv_tile[V_AT + e] = vec4<f16>(0.0h);
    }
    if RUN_STAGING {
        stash(fetch(true, slice, 0u, thread), 0u, thread);
    }
    var k_next = fetch(true, slice, BLOCK_KV, thread);
    var v_next = array<Load, STAGED>();
    workgroupBarrier();

    let tiles = (kv_end + BLOCK_KV - 1u) / BLOCK_KV;
    for (var t = 0u; t <= tiles; t++) {
        let kv_start = t * BLOCK_KV;
        let p_now = (t % 2u) * P_SIZE;             // P_t is written here
        let p_before = P_SIZE - p_now;             // P_{t-1} is read here
        // ANCHOR: phase_a
        // Phase A: S = Q K^T of tile t into workgroup memory, beside V_{t-1} staged from
        // registers and V_t fetched into them. K is stored [key][d]: loaded column-major with
        // stride KV_STRIDE it is K^T. (In the last round S is computed and never read.)
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
            if RUN_STORE_S {
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    // unroll
                    for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                        store_s(s[r * KEY_BLOCKS + kb], (first_row + 16u * r) * S_STRIDE + kb * 4u);
                    }
                }
            }
        }
        if t > 0u && RUN_STAGING {
            stash(v_next, BLOCK_KV, thread);
        }
        v_next = fetch(false, slice, kv_start, thread);
        // ANCHOR_END: phase_a
        workgroupBarrier();

        // ANCHOR: phase_b
        // Phase B: O += P_{t-1} V_{t-1} (nothing in round 0: P and V are zeros), beside the
        // softmax of tile t into the other P buffer and K_{t+1} staged.
        if RUN_VALUES {
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    let at = p_before + (first_row + 16u * r) * P_STRIDE + kb * 4u;
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
        if t < tiles && RUN_SOFTMAX {
            let masked_tile = kv_start + BLOCK_KV > all_see;
            softmax(kv_start, masked_tile, row_keys, my_row, part, p_now, &m, &l);
        }
        if t < tiles && RUN_STAGING {
            stash(k_next, 0u, thread);
            k_next = fetch(true, slice, kv_start + 2u * BLOCK_KV, thread);
        }
        // ANCHOR_END: phase_b
        // The barrier before the next tile, and whether any row's max grew by more than the
        // lazy threshold in this tile's softmax: then O (which now holds every tile before
        // it) is rescaled through the subgroup's rows of s_tile, as in version 6.
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

// One row's part of the tile, as in version 6, into the P buffer that starts at `p_at`.
fn softmax(
    kv_start: u32,
    masked_tile: bool,
    row_keys: u32,
    my_row: u32,
    part: u32,
    p_at: u32,
    m: ptr<function, f32>,
    l: ptr<function, f32>,
) {
    let neg_inf = minus_infinity();
    let scale = params.scale * LOG2_E;
    var scores: array<vec4<f32>, ROW_PART>;
    var max4 = vec4<f32>(neg_inf);           // four independent maxima, and sums below:
    // unroll                                   short dependency chains
    for (var c = 0u; c < ROW_PART; c++) {
        let chunk = c * LANES_PER_ROW + part;
        var x = s_tile[my_row * S_STRIDE + chunk] * scale;
        if masked_tile {
            let key = kv_start + chunk * 4u;
            let visible = vec4<u32>(key, key + 1u, key + 2u, key + 3u) < vec4<u32>(row_keys);
            x = select(vec4<f32>(neg_inf), x, visible);
        }
        scores[c] = x;
        max4 = max(max4, x);
    }
    let part_max = max(max(max4.x, max4.y), max(max4.z, max4.w));
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
    var sum4 = vec4<f32>(0.0);
    // unroll
    for (var c = 0u; c < ROW_PART; c++) {
        let p = exp2(scores[c] - m_safe);
        sum4 += p;
        p_tile[p_at + my_row * P_STRIDE + c * LANES_PER_ROW + part] = vec4<f16>(p);
    }
    *l += (sum4.x + sum4.y) + (sum4.z + sum4.w);
}
