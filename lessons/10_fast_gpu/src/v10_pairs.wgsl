// ANCHOR: header
// Lesson 10, version 10: version 9 with the subgroups in pairs, each pair 32 query rows, so
// that every fragment of K and V read from workgroup memory serves 32 rows instead of 16.
//
// Version 9 gives each subgroup 16 rows: it reads every fragment of the tile of K (for
// S = Q K^T) and of V (for O += P V) and uses each for one 16-row product. At D = 128 those
// fragments are 32 of the 48 bytes of workgroup memory that a score costs, and workgroup
// memory traffic is most of a score's time in chapter 10's time model. Two row tiles per
// subgroup would reuse each fragment twice, but their O alone takes 128 registers at D = 128.
// Here the two subgroups of a pair share the pair's 32 rows and split the work of both
// products instead:
//
//   S = Q K^T   subgroup h of the pair: all 32 rows, the h-th half of the tile's 16-key blocks
//   O += P V    subgroup h of the pair: all 32 rows, head-dimension columns [h D/2, (h+1) D/2)
//
// Each subgroup holds Q for 32 rows (64 registers at D = 128 instead of 32) and O for 32 rows
// and half the columns (as many as before), and reads half the K and half the V fragments it
// did, and twice the P: per tile of 32 keys at D = 128, 15 KiB of workgroup memory a
// subgroup instead of 22. The softmax is version 9's: each subgroup still takes 16 rows of S
// (which both subgroups of its pair wrote), 2 lanes a row, and the rescale of O and the
// output go row by row through S's memory, whoever's fragments hold the row.
//
// KEY_ORDER and QUERY_GROUP are version 8's. What each choice measured, and version 10 beside
// versions 8 and 9, is in the book's lab notes ("Tuning the fast forward kernels").
//
// LEAVE_OUT is for measurements only (lab/src/bin/tune.rs, `--ablate v10`), as in version 6:
// each bit removes one part of the work, so that the time it costs can be read off.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 32 numbers (two halves of 16-wide slices); L [slices,
// Nq] of f32.
// ANCHOR_END: header

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 32
const BLOCK_KV: u32 = 32u;           // keys per tile: 32 or 64
const SUBGROUPS: u32 = 8u;           // subgroups of 32 threads per workgroup: 2, 4 or 8
const LOAD_AT: u32 = 0u;             // 0: K and V read where staged; 1: at their phase's start
const KEY_ORDER: u32 = 0u;           // 0: tiles of K and V in order; 1: rotated (kv_tile)
// With KEY_ORDER = 1 and no causal mask, the starts are spread over at most this many tiles:
// 4 MiB of K and V in f16 (the book's lab notes: "Orders of the keys and of the query tiles").
const SPREAD_TILES: u32 = 4194304u / (4u * BLOCK_KV * HEAD_DIM);
// 0: workgroup (x, y) takes query tile x of slice y; W > 0: see `assignment`.
const QUERY_GROUP: u32 = 0u;
const LEAVE_OUT: u32 = 0u;           // measurements only: see above and `LeaveOut` in tuning.rs

const RUN_SOFTMAX: bool = (LEAVE_OUT & 1u) == 0u;   // 1: no reads of S, exponentials, P
const RUN_SCORES: bool = (LEAVE_OUT & 2u) == 0u;    // 2: no S = Q K^T (S stored as zeros)
const RUN_VALUES: bool = (LEAVE_OUT & 4u) == 0u;    // 4: no O += P V
// 8: S not stored to workgroup memory (behind a condition that never holds, as `pad0` is 0:
// a store left out for good would let the compiler drop QK^T, which only it reads)
const RUN_STORE_S: bool = (LEAVE_OUT & 8u) == 0u;
const RUN_LOADS: bool = (LEAVE_OUT & 128u) == 0u;   // 128: K and V staged as zeros, never read

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const PAIRS: u32 = SUBGROUPS / 2u;
const ROW_TILES: u32 = 2u;                        // a pair's 32 rows, 16 at a time
const BLOCK_Q: u32 = 32u * PAIRS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;            // 16-wide slices of the head dimension
const HALF_FRAGMENTS: u32 = FRAGMENTS / 2u;       // ... of O, per subgroup
const O_FRAGMENTS: u32 = ROW_TILES * HALF_FRAGMENTS; // a subgroup's fragments of O
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;           // 16-key slices of a tile
const HALF_KEY_BLOCKS: u32 = KEY_BLOCKS / 2u;     // ... of S, per subgroup
const CHUNKS: u32 = HEAD_DIM / 4u;                // vec4s per row
const LANES_PER_ROW: u32 = 2u;                    // the softmax: 16 rows per subgroup
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const TILE_CHUNKS: u32 = BLOCK_KV * CHUNKS;          // vec4s in a tile of K (or of V)
const STAGED: u32 = (TILE_CHUNKS + THREADS - 1u) / THREADS; // ... per thread, at most
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8
// O goes through the pair's rows of S to be rescaled or written out: each subgroup of the
// pair its half of those rows, as many 16-column fragments of O at a time as the half holds.
const O_PER_ROUND: u32 = select(1u, 2u, HALF_KEY_BLOCKS == 2u && HALF_FRAGMENTS % 2u == 0u);
const ROUNDS: u32 = HALF_FRAGMENTS / O_PER_ROUND;
const HALF_ROW: u32 = 4u * HALF_KEY_BLOCKS;       // vec4s of half a row of S

// Row strides in vec4s, padded against bank conflicts as in version 6.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;

// The arena, in vec4<f16>s: [K | V | P], as in version 8 with Q in registers. Q passes
// through it before the loop, as many pairs' rows at a time as fit.
const K_AT: u32 = 0u;
const V_AT: u32 = K_AT + BLOCK_KV * KV_STRIDE;
const P_AT: u32 = V_AT + BLOCK_KV * KV_STRIDE;
const KVP: u32 = 2u * BLOCK_KV * KV_STRIDE + BLOCK_Q * P_STRIDE;
const PASS_PAIRS: u32 = clamp(KVP / (32u * KV_STRIDE), 1u, PAIRS);
const PASS_ROWS: u32 = 32u * PASS_PAIRS;
const Q_PASSES: u32 = (PAIRS + PASS_PAIRS - 1u) / PASS_PAIRS;
const ARENA: u32 = max(P_AT + BLOCK_Q * P_STRIDE, PASS_ROWS * KV_STRIDE);

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

var<workgroup> arena: array<vec4<f16>, ARENA>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> row_rescale: array<f32, BLOCK_Q>;    // exp2(m_old - m_new) for each row
// [0]: some row's max grew by more than 8 (4 of them: a whole 16-byte unit, see version 2)
var<workgroup> rescale_flag: array<atomic<u32>, 4>;

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

// ANCHOR: assignment
// The query tile (x) and slice (y) that workgroup `id` of the grid (query tiles, slices)
// takes. With QUERY_GROUP = W > 0 and the causal mask, the workgroups, counted in the order
// they are assumed to be launched (x first; neither Vulkan nor WGSL promises an order, and in
// another the mapping may be slower, never wrong), take the slices G = max(1, W / query_tiles) at
// a time, about W workgroups, and within those G slices the query tiles from the last (which
// sees the most keys) down, each tile for the G slices one after another: each group, and the
// dispatch, ends with its shortest workgroups, and the workgroups in flight read only a few
// slices' K and V.
fn assignment(id: vec2<u32>, query_tiles: u32) -> vec2<u32> {
    if QUERY_GROUP == 0u || params.causal == 0u {
        return id;
    }
    let slices_per_group = max(QUERY_GROUP / query_tiles, 1u);
    let launched = id.y * query_tiles + id.x;
    let first_slice = (launched / (slices_per_group * query_tiles)) * slices_per_group;
    let group = min(slices_per_group, params.slices - first_slice);
    let within = launched - first_slice * query_tiles;
    return vec2<u32>(query_tiles - 1u - within / group, first_slice + within % group);
}
// ANCHOR_END: assignment

// ANCHOR: kv_tile
// The first key of the u-th tile of K and V that this workgroup reads. With KEY_ORDER = 1 the
// workgroup starts at tile `rotation` of its `tiles` and wraps around, so that the workgroups
// of a slice, which run at the same time, start at different tiles instead of all reading
// tile 0, 1, 2, ... together (chapter 10's "The order of the work"). Online
// softmax takes the tiles in any order; only the rounding of the sums changes.
fn kv_tile(u: u32, tiles: u32, rotation: u32) -> u32 {
    return ((u + rotation) % max(tiles, 1u)) * BLOCK_KV;
}
// ANCHOR_END: kv_tile

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

// ... and into the arena from offset `at` (K_AT for K, V_AT for V).
fn stash(staged: array<vec4<f16>, STAGED>, at: u32, thread: u32) {
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        if TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS {
            arena[at + (e / CHUNKS) * KV_STRIDE + e % CHUNKS] = staged[i];
        }
    }
}

// Rows [first, first + PASS_ROWS) of the workgroup's rows of Q into the start of the arena,
// zeros past Nq (rows past BLOCK_Q belong to the next workgroup: not staged).
fn stage_queries(slice: u32, q_start: u32, first: u32, thread: u32) {
    for (var e = thread; e < PASS_ROWS * CHUNKS; e += THREADS) {
        let row = e / CHUNKS;
        let q_row = q_start + first + row;
        var x = vec4<f16>(0.0h);
        if first + row < BLOCK_Q && q_row < params.q_len {
            x = q[(slice * params.q_len + q_row) * CHUNKS + e % CHUNKS];
        }
        arena[row * KV_STRIDE + e % CHUNKS] = x;
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
    let query_tiles = (params.q_len + BLOCK_Q - 1u) / BLOCK_Q;
    let work = assignment(tile.xy, query_tiles);
    let slice = work.y;
    let q_start = work.x * BLOCK_Q;
    let neg_inf = minus_infinity();
    let pair_row = (sg / 2u) * 32u;                   // the pair's 32 rows of the tile
    let half = sg % 2u;                               // which half of the pair's work
    let my_row = sg * 16u + lane / LANES_PER_ROW;     // this lane's row for the softmax
    let part = lane % LANES_PER_ROW;                  // and which vec4s of it: every other
    let row_keys = visible_keys(q_start + my_row);

    if thread == 0u {
        atomicStore(&rescale_flag[0], 0u);
    }
    var q_frag: array<coop_mat16x16<f16, A>, ROW_TILES * FRAGMENTS>; // 32 rows, all of D
    var o_frag: array<coop_mat16x16<f32, C>, O_FRAGMENTS>;    // 32 rows, half of D
    // unroll
    for (var f = 0u; f < O_FRAGMENTS; f++) {
        o_frag[f] = coop_mat16x16<f32, C>();
    }
    // Q into the arena, PASS_ROWS rows at a time; each subgroup takes its pair's fragments into
    // registers in the pass that holds them. Every subgroup loads in every pass
    // (cooperative-matrix loads must stay in uniform control flow) and keeps only its own.
    for (var q_pass = 0u; q_pass < Q_PASSES; q_pass++) {
        let pass_first = q_pass * PASS_ROWS;
        stage_queries(slice, q_start, pass_first, thread);
        workgroupBarrier();
        let mine = pair_row >= pass_first && pair_row < pass_first + PASS_ROWS;
        let local_row = select(0u, pair_row - pass_first, mine);
        // unroll
        for (var r = 0u; r < ROW_TILES; r++) {
            // unroll
            for (var f = 0u; f < FRAGMENTS; f++) {
                let at = (local_row + 16u * r) * KV_STRIDE + f * 4u;
                let fragment = coopLoadT<coop_mat16x16<f16, A>>(&arena[at], KV_STRIDE);
                if mine {
                    q_frag[r * FRAGMENTS + f] = fragment;
                }
            }
        }
        workgroupBarrier();                  // read before the next pass, K, V and P reuse it
    }

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    let tiles = (kv_end + BLOCK_KV - 1u) / BLOCK_KV;
    // ANCHOR: rotation
    // KEY_ORDER = 1: workgroup x starts at tile x S / (query tiles) of its T tiles. Without
    // the causal mask S is T, or SPREAD_TILES where the slice's K and V take more than 4 MiB:
    // the starts are evenly spaced over the slice's tiles, or over its first 4 MiB. With the
    // mask (T grows with x) S is T: the cap measured slower there.
    let spread = select(min(tiles, SPREAD_TILES), tiles, params.causal == 1u);
    let rotation = select(0u, (work.x * spread) / query_tiles, KEY_ORDER == 1u);
    // ANCHOR_END: rotation
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's part of the row sum
    // This subgroup's first key block of S, and its first column of O (in vec4s).
    let my_keys = half * HALF_KEY_BLOCKS;
    let my_columns = half * HALF_FRAGMENTS * 4u;

    // Prologue, as in version 9: K of the first tile staged, P = 0 and V = 0.
    stash(fetch(true, slice, kv_tile(0u, tiles, rotation), thread), K_AT, thread);
    for (var e = thread; e < BLOCK_Q * P_STRIDE; e += THREADS) {
        arena[P_AT + e] = vec4<f16>(0.0h);
    }
    for (var e = thread; e < BLOCK_KV * KV_STRIDE; e += THREADS) {
        arena[V_AT + e] = vec4<f16>(0.0h);
    }
    workgroupBarrier();

    for (var t = 0u; t <= tiles; t++) {
        var k_next: array<vec4<f16>, STAGED>;
        var v_now: array<vec4<f16>, STAGED>;
        if LOAD_AT != 0u && t > 0u {
            v_now = fetch(false, slice, kv_tile(t - 1u, tiles, rotation), thread);
        }
        // Phase 1. This subgroup's share of S_t = Q K_t^T (the pair's 32 rows, half the keys)
        // into registers; each fragment of K serves both row tiles.
        var s: array<coop_mat16x16<f32, C>, ROW_TILES * HALF_KEY_BLOCKS>;
        if RUN_SCORES {
            // unroll
            for (var f = 0u; f < FRAGMENTS; f++) {
                // unroll
                for (var kb = 0u; kb < HALF_KEY_BLOCKS; kb++) {
                    let at = K_AT + (my_keys + kb) * 16u * KV_STRIDE + f * 4u;
                    let k_t = coopLoad<coop_mat16x16<f16, B>>(&arena[at], KV_STRIDE);
                    // unroll
                    for (var r = 0u; r < ROW_TILES; r++) {
                        let i = r * HALF_KEY_BLOCKS + kb;
                        s[i] = coopMultiplyAdd(q_frag[r * FRAGMENTS + f], k_t, s[i]);
                    }
                }
            }
        }
        // ... while the softmax of tile t - 1 reads S_{t-1} and writes P_{t-1}, and V_{t-1}
        // is staged.
        if t > 0u {
            let previous = kv_tile(t - 1u, tiles, rotation);
            let masked_tile = previous + BLOCK_KV > all_see;
            if RUN_SOFTMAX {
                softmax(previous, masked_tile, row_keys, my_row, part, &m, &l);
            }
            if LOAD_AT == 0u {
                v_now = fetch(false, slice, previous, thread);
            }
            stash(v_now, V_AT, thread);
        }
        // The barrier between the phases, and the rare rescale of O.
        let rescale_o = workgroupUniformLoad(&rescale_flag[0]) == 1u;
        if rescale_o {
            // unroll
            for (var round = 0u; round < ROUNDS; round++) {
                // unroll
                for (var j = 0u; j < O_PER_ROUND; j++) {
                    // unroll
                    for (var r = 0u; r < ROW_TILES; r++) {
                        let at = (pair_row + 16u * r) * S_STRIDE + half * HALF_ROW + 4u * j;
                        store_s(o_frag[r * HALF_FRAGMENTS + round * O_PER_ROUND + j], at);
                    }
                }
                workgroupBarrier();
                // unroll
                for (var c = 0u; c < ROW_PART; c++) {
                    s_tile[my_row * S_STRIDE + c * LANES_PER_ROW + part] *= row_rescale[my_row];
                }
                workgroupBarrier();
                // unroll
                for (var j = 0u; j < O_PER_ROUND; j++) {
                    // unroll
                    for (var r = 0u; r < ROW_TILES; r++) {
                        let at = (pair_row + 16u * r) * S_STRIDE + half * HALF_ROW + 4u * j;
                        let f = r * HALF_FRAGMENTS + round * O_PER_ROUND + j;
                        o_frag[f] = coopLoadT<coop_mat16x16<f32, C>>(&s_tile[at], S_STRIDE);
                    }
                }
                workgroupBarrier();          // loaded before S_t is stored
            }
        }
        if thread == 0u {
            atomicStore(&rescale_flag[0], 0u);
        }
        // Phase 2. S_t into workgroup memory, O += P_{t-1} V_{t-1} for the pair's 32 rows and
        // this subgroup's half of the columns (each fragment of V serves both row tiles), and
        // K of the next tile staged.
        if LOAD_AT != 0u && t < tiles {
            k_next = fetch(true, slice, kv_tile(t + 1u, tiles, rotation), thread);
        }
        if RUN_STORE_S || params.pad0 == 1u {
            // unroll
            for (var r = 0u; r < ROW_TILES; r++) {
                // unroll
                for (var kb = 0u; kb < HALF_KEY_BLOCKS; kb++) {
                    let at = (pair_row + 16u * r) * S_STRIDE + (my_keys + kb) * 4u;
                    store_s(s[r * HALF_KEY_BLOCKS + kb], at);
                }
            }
        }
        if RUN_VALUES {
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    let at = P_AT + (pair_row + 16u * r) * P_STRIDE + kb * 4u;
                    p[r] = coopLoadT<coop_mat16x16<f16, A>>(&arena[at], P_STRIDE);
                }
                // unroll
                for (var f = 0u; f < HALF_FRAGMENTS; f++) {
                    let at = V_AT + kb * 16u * KV_STRIDE + my_columns + f * 4u;
                    let v_frag = coopLoadT<coop_mat16x16<f16, B>>(&arena[at], KV_STRIDE);
                    // unroll
                    for (var r = 0u; r < ROW_TILES; r++) {
                        let i = r * HALF_FRAGMENTS + f;
                        o_frag[i] = coopMultiplyAdd(p[r], v_frag, o_frag[i]);
                    }
                }
            }
        }
        if t < tiles {
            if LOAD_AT == 0u {
                k_next = fetch(true, slice, kv_tile(t + 1u, tiles, rotation), thread);
            }
            stash(k_next, K_AT, thread);
        }
        workgroupBarrier();
    }

    // O = acc / l, through S's memory a round of columns at a time; L = ln 2 (m + log2 l).
    let total = l + subgroupShuffleXor(l, 1u);
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    let row = q_start + my_row;
    // unroll
    for (var round = 0u; round < ROUNDS; round++) {
        workgroupBarrier();                  // s_tile is free
        // unroll
        for (var j = 0u; j < O_PER_ROUND; j++) {
            // unroll
            for (var r = 0u; r < ROW_TILES; r++) {
                let at = (pair_row + 16u * r) * S_STRIDE + half * HALF_ROW + 4u * j;
                store_s(o_frag[r * HALF_FRAGMENTS + round * O_PER_ROUND + j], at);
            }
        }
        workgroupBarrier();
        if row < params.q_len {
            // unroll
            for (var c = 0u; c < ROW_PART; c++) {
                // Vec4 `at` of the row: the half of the pair it came from, its fragment and
                // its place in the fragment give its columns of O.
                let at = c * LANES_PER_ROW + part;
                let from_half = at / HALF_ROW;
                let j = (at % HALF_ROW) / 4u;
                let chunk = from_half * (CHUNKS / 2u) + (round * O_PER_ROUND + j) * 4u + at % 4u;
                if j < O_PER_ROUND {
                    let out = (slice * params.q_len + row) * CHUNKS + chunk;
                    o[out] = s_tile[my_row * S_STRIDE + at] * inv_l;
                }
            }
        }
    }
    if row < params.q_len && part == 0u {
        lse[slice * params.q_len + row] = select(neg_inf, LN_2 * (m + log2(total)), total > 0.0);
    }
}

// One row's part of the tile, as in version 6: scores in log2 units, masked on tiles that
// cross the diagonal or the end of the keys, the row max through the partner lane, the lazy
// max, P = exp2(S - m) as f16 into the arena.
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
        arena[P_AT + my_row * P_STRIDE + c * LANES_PER_ROW + part] = vec4<f16>(p);
    }
}
