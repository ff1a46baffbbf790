// Lesson 10, version 9: version 8 with the scores of each tile computed in the phase that
// runs the softmax of the tile before it.
//
// Version 8's two phases each keep one kind of unit busy: the first the tensor cores (the
// products), the second the arithmetic and special-function units (the softmax) and the
// staging. A subgroup waiting on its products leaves its multiprocessor's other units idle,
// and where one workgroup fills a multiprocessor (at D = 128: 184 to 204 registers a
// thread), no other workgroup's work runs beside it. Here each phase has both kinds of work,
// independent of each other, so that the driver's compiler and the subgroup's scheduler can
// interleave them:
//
//   t = 0 .. T:   S_t = Q K_t^T (kept in registers), softmax(t - 1), stage V_{t-1}
//                 | store S_t, O += P_{t-1} V_{t-1}, stage K_{t+1}
//
// as FlashAttention-3 overlaps the softmax of one tile with the first product of the next
// inside a warpgroup. S_t waits in registers (8 per 16 x 16 fragment) until the softmax of
// tile t - 1 has read S_{t-1} out of the same workgroup memory (the other subgroups read
// theirs until the barrier, and a second S array would not fit); no memory is added, and the
// barriers per tile stay three (the rescale flag's two and the one after the second phase).
//
// LOAD_AT: 0 reads V (K) from global memory where it is staged; 1 or 2 at the start of its
// phase, so that the loads are in flight while the phase computes. KEY_ORDER is version 8's:
// the tiles of K and V in order, or each workgroup starting at its own (kv_tile); so is
// QUERY_GROUP: with the causal mask, the query tiles longest first in groups (assignment;
// not timed for this version).
//
// Measured on an H100 (2026-11-26, the book's lab notes), 8 subgroups of 16 rows, Q in
// registers: at D = 128 with 32 keys, 160 TFLOP/s against version 8's 152 at N = 16384 and
// 144 against 134 at N = 4096 (1.06 to 1.07 times, in one run), in 184 registers against
// 204. At D = 64, with 16 keys and loads where staged, it is slower: 131 against 160
// TFLOP/s, in 114 registers against 107 (both leave room for two workgroups on a
// multiprocessor, whose phases can overlap without this change); reading K and V at the
// start of their phase, 154.5. Why it loses there is not measured yet.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f16>, O [slices, Nq, CHUNKS] of vec4<f32>, rows
// padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 32u;           // keys per tile: 16, 32 or 64
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup
const ROW_TILES: u32 = 2u;           // 16-row query tiles per subgroup: 1 or 2
const Q_IN_REGISTERS: u32 = 1u;      // 1: Q's fragments held in registers; 0: read per tile
const LOAD_AT: u32 = 0u;             // when K and V are read: see the header
const KEY_ORDER: u32 = 0u;           // 0: tiles of K and V in order; 1: rotated (kv_tile)
// With KEY_ORDER = 1 and no causal mask, the starts are spread over at most this many tiles:
// 4 MiB of K and V in f16 (the book's lab notes: "Orders of the keys and of the query tiles").
const SPREAD_TILES: u32 = 4194304u / (4u * BLOCK_KV * HEAD_DIM);
// 0: workgroup (x, y) takes query tile x of slice y; W > 0: see `assignment`.
const QUERY_GROUP: u32 = 0u;

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const SUBGROUP_ROWS: u32 = 16u * ROW_TILES;
const BLOCK_Q: u32 = SUBGROUP_ROWS * SUBGROUPS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;            // 16-wide slices of the head dimension
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;           // 16-key slices of a tile
const O_FRAGMENTS: u32 = ROW_TILES * FRAGMENTS;   // a subgroup's fragments of O (or of Q)
const CHUNKS: u32 = HEAD_DIM / 4u;                // vec4s per row
const LANES_PER_ROW: u32 = LANES / SUBGROUP_ROWS; // 2, or 1 with ROW_TILES = 2
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const TILE_CHUNKS: u32 = BLOCK_KV * CHUNKS;          // vec4s in a tile of K (or of V)
const STAGED: u32 = (TILE_CHUNKS + THREADS - 1u) / THREADS; // ... per thread, at most
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8
// O goes through the subgroup's rows of S to be rescaled or written out, as many 16-column
// fragments at a time as a row of S holds (see version 6).
const O_PER_ROUND: u32 = select(select(1u, 2u, FRAGMENTS % 2u == 0u && KEY_BLOCKS >= 2u), 4u, FRAGMENTS % 4u == 0u && KEY_BLOCKS >= 4u);
const ROUNDS: u32 = FRAGMENTS / O_PER_ROUND;
const ROUND_CHUNKS: u32 = 4u * O_PER_ROUND / LANES_PER_ROW; // vec4s of a round per lane

// Row strides in vec4s, each a whole number of 16-byte units, padded against bank conflicts
// as in version 6.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;

// The arena, in vec4<f16>s: [Q (kept only when Q_IN_REGISTERS = 0) | K | V | P]. With Q in
// registers, Q passes through the start of the arena before the loop, as many subgroups' rows
// at a time as fit where K, V and P will be (in the shapes version 8 prefers, in two passes
// at D = 64; at D = 128 the workgroup's Q would need more room than K, V and P: 34
// KiB of 48 with 8 subgroups). Every
// offset is an even number of vec4<f16>s, so every row starts on the 16-byte grid (see
// version 2).
const Q_KEPT: u32 = select(0u, BLOCK_Q * KV_STRIDE, Q_IN_REGISTERS == 0u);
const K_AT: u32 = Q_KEPT;
const V_AT: u32 = K_AT + BLOCK_KV * KV_STRIDE;
const P_AT: u32 = V_AT + BLOCK_KV * KV_STRIDE;
const KVP: u32 = 2u * BLOCK_KV * KV_STRIDE + BLOCK_Q * P_STRIDE;   // K, V and P together
const PASS_SUBGROUPS: u32 = select(clamp(KVP / (SUBGROUP_ROWS * KV_STRIDE), 1u, SUBGROUPS), SUBGROUPS, Q_IN_REGISTERS == 0u);
const PASS_ROWS: u32 = PASS_SUBGROUPS * SUBGROUP_ROWS;            // rows of Q staged per pass
const Q_PASSES: u32 = (SUBGROUPS + PASS_SUBGROUPS - 1u) / PASS_SUBGROUPS;
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

// The first key of the u-th tile of K and V that this workgroup reads. With KEY_ORDER = 1 the
// workgroup starts at tile `rotation` of its `tiles` and wraps around, so that the workgroups
// of a slice, which run at the same time, start at different tiles instead of all reading
// tile 0, 1, 2, ... together (chapter 10's "The order of the work"). Online
// softmax takes the tiles in any order; only the rounding of the sums changes.
fn kv_tile(u: u32, tiles: u32, rotation: u32) -> u32 {
    return ((u + rotation) % max(tiles, 1u)) * BLOCK_KV;
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
        if in_tile && key < params.kv_len && from_k {
            x = k[at];
        } else if in_tile && key < params.kv_len {
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
    let first_row = sg * SUBGROUP_ROWS;               // the subgroup's rows of the tile
    let my_row = first_row + lane / LANES_PER_ROW;    // this lane's row for the softmax
    let part = lane % LANES_PER_ROW;                  // and which vec4s of it: every other
    let row_keys = visible_keys(q_start + my_row);

    if thread == 0u {
        atomicStore(&rescale_flag[0], 0u);
    }
    var q_frag: array<coop_mat16x16<f16, A>, ROW_TILES * FRAGMENTS>;
    var o_frag: array<coop_mat16x16<f32, C>, ROW_TILES * FRAGMENTS>;
    // unroll
    for (var f = 0u; f < O_FRAGMENTS; f++) {
        o_frag[f] = coop_mat16x16<f32, C>();
    }
    // Q into the arena, PASS_ROWS rows at a time; with Q_IN_REGISTERS, each subgroup takes its
    // fragments into registers for the whole loop in the pass that holds its rows. Every
    // subgroup loads in every pass (cooperative-matrix loads must stay in uniform control
    // flow) and keeps only its own.
    for (var q_pass = 0u; q_pass < Q_PASSES; q_pass++) {
        let pass_first = q_pass * PASS_ROWS;
        stage_queries(slice, q_start, pass_first, thread);
        workgroupBarrier();
        if Q_IN_REGISTERS == 1u {
            let mine = first_row >= pass_first && first_row < pass_first + PASS_ROWS;
            let local_row = select(0u, first_row - pass_first, mine);
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
            workgroupBarrier();              // read before the next pass, K, V and P reuse it
        }
    }

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    let tiles = (kv_end + BLOCK_KV - 1u) / BLOCK_KV;
    // KEY_ORDER = 1: workgroup x starts at tile x S / (query tiles) of its T tiles. Without
    // the causal mask S is T, or SPREAD_TILES where the slice's K and V take more than 4 MiB:
    // the starts are evenly spaced over the slice's tiles, or over its first 4 MiB. With the
    // mask (T grows with x) S is T: the cap measured slower there.
    let spread = select(min(tiles, SPREAD_TILES), tiles, params.causal == 1u);
    let rotation = select(0u, (work.x * spread) / query_tiles, KEY_ORDER == 1u);
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's part of the row sum

    // Prologue: K of the first tile staged; P = 0 and V = 0, so that round 0's O += P V adds
    // zeros (uninitialised memory could hold the bits of a NaN, and 0 x NaN = NaN).
    stash(fetch(true, slice, kv_tile(0u, tiles, rotation), thread), K_AT, thread);
    for (var e = thread; e < BLOCK_Q * P_STRIDE; e += THREADS) {
        arena[P_AT + e] = vec4<f16>(0.0h);
    }
    for (var e = thread; e < BLOCK_KV * KV_STRIDE; e += THREADS) {
        arena[V_AT + e] = vec4<f16>(0.0h);
    }
    workgroupBarrier();

    // Round t computes S_t while it runs the softmax of tile t - 1, and adds P_{t-1} V_{t-1}
    // to O after the barrier: the tensor cores' work and the softmax's share each phase.
    for (var t = 0u; t <= tiles; t++) {
        var k_next: array<vec4<f16>, STAGED>;
        var v_now: array<vec4<f16>, STAGED>;
        if LOAD_AT != 0u && t > 0u {
            v_now = fetch(false, slice, kv_tile(t - 1u, tiles, rotation), thread);
        }
        // Phase 1. S_t = Q K_t^T into registers; K [key][d] loaded column-major is K^T.
        var s: array<coop_mat16x16<f32, C>, ROW_TILES * KEY_BLOCKS>;
        // unroll
        for (var f = 0u; f < FRAGMENTS; f++) {
            var q_now: array<coop_mat16x16<f16, A>, ROW_TILES>;
            // unroll
            for (var r = 0u; r < ROW_TILES; r++) {
                if Q_IN_REGISTERS == 1u {
                    q_now[r] = q_frag[r * FRAGMENTS + f];
                } else {
                    let at = (first_row + 16u * r) * KV_STRIDE + f * 4u;
                    q_now[r] = coopLoadT<coop_mat16x16<f16, A>>(&arena[at], KV_STRIDE);
                }
            }
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                let at = K_AT + kb * 16u * KV_STRIDE + f * 4u;
                let k_t = coopLoad<coop_mat16x16<f16, B>>(&arena[at], KV_STRIDE);
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    s[r * KEY_BLOCKS + kb] = coopMultiplyAdd(q_now[r], k_t, s[r * KEY_BLOCKS + kb]);
                }
            }
        }
        // ... while the softmax of tile t - 1 reads S_{t-1} and writes P_{t-1}, and V_{t-1}
        // is staged.
        if t > 0u {
            let previous = kv_tile(t - 1u, tiles, rotation);
            let masked_tile = previous + BLOCK_KV > all_see;
            softmax(previous, masked_tile, row_keys, my_row, part, &m, &l);
            if LOAD_AT == 0u {
                v_now = fetch(false, slice, previous, thread);
            }
            stash(v_now, V_AT, thread);
        }
        // The barrier between the phases, and the rare rescale of O (version 6) through
        // s_tile, which S_{t-1} has left.
        let rescale_o = workgroupUniformLoad(&rescale_flag[0]) == 1u;
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
                workgroupBarrier();          // loaded before S_t is stored
            }
        }
        if thread == 0u {
            atomicStore(&rescale_flag[0], 0u);
        }
        // Phase 2. S_t into workgroup memory for the next round's softmax, O += P_{t-1} V_{t-1}
        // (zeros in round 0), and K of the next tile staged.
        if LOAD_AT != 0u && t < tiles {
            k_next = fetch(true, slice, kv_tile(t + 1u, tiles, rotation), thread);
        }
        // unroll
        for (var r = 0u; r < ROW_TILES; r++) {
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                store_s(s[r * KEY_BLOCKS + kb], (first_row + 16u * r) * S_STRIDE + kb * 4u);
            }
        }
        // unroll
        for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
            var p: array<coop_mat16x16<f16, A>, ROW_TILES>;
            // unroll
            for (var r = 0u; r < ROW_TILES; r++) {
                let at = P_AT + (first_row + 16u * r) * P_STRIDE + kb * 4u;
                p[r] = coopLoadT<coop_mat16x16<f16, A>>(&arena[at], P_STRIDE);
            }
            // unroll
            for (var f = 0u; f < FRAGMENTS; f++) {
                let at = V_AT + kb * 16u * KV_STRIDE + f * 4u;
                let v_frag = coopLoadT<coop_mat16x16<f16, B>>(&arena[at], KV_STRIDE);
                // unroll
                for (var r = 0u; r < ROW_TILES; r++) {
                    o_frag[r * FRAGMENTS + f] = coopMultiplyAdd(p[r], v_frag, o_frag[r * FRAGMENTS + f]);
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

    // O = acc / l, through workgroup memory; L = ln 2 (m + log2 l).
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
        if row < params.q_len {
            // unroll
            for (var c = 0u; c < ROUND_CHUNKS; c++) {
                let chunk = round * 4u * O_PER_ROUND + part * ROUND_CHUNKS + c;
                let out = (slice * params.q_len + row) * CHUNKS + chunk;
                o[out] = s_tile[my_row * S_STRIDE + part * ROUND_CHUNKS + c] * inv_l;
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
