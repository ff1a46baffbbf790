// Lesson 10, version 11: f32 inputs on the tensor cores, each number split into two f16s.
//
// Versions 1 and 7 keep f32 and run on the CUDA cores, and stayed below PyTorch's f32
// kernel, which uses the tensor cores (3xTF32). WGSL's cooperative matrices take f16, whose
// 11 bits are far from f32's 24; two of them are not:
//
//   x = hi + lo / 2^10,   hi = x truncated to f16's bits,   lo = f16((x - hi) 2^10)
//
// hi is x with its mantissa cut to f16's 10 bits (below 2^-14, cut to f16's subnormal grid
// of 2^-24), so x - hi is exact in f32 and below 2^-10 |x|; lo holds it to 11 more bits. The
// pair holds x within 2^-21 |x| where lo is a normal f16 (2^-22 if the GPU rounds to
// nearest), and within 2^-34 where it is not (|x| below 2^-13). Scaled by 2^10, lo stays a
// normal f16 for |x| down to 2^-13, and finite for every x the host lets in (f16's range).
// A product of two split numbers is then three products of f16s, each exact, summed in f32
// by the tensor cores:
//
//   q k = q_hi k_hi + (q_hi k_lo + q_lo k_hi) / 2^10 + q_lo k_lo / 2^20
//
// and the last term, below 2^-20 |q k|, is dropped (3xTF32 does the same). The tensor cores'
// f32 sums are not necessarily rounded as IEEE sums are; the tolerance below has room for it.
// S = Q K^T and O += P V each take three products instead of one, S into two accumulators (the
// main term and the two cross terms, added when S is stored), O into two kept for the whole
// loop (added when O is rescaled or written). K, V and P are staged as hi and lo, twice
// version 8's arena; Q's fragments are held as hi and lo. The error model's tolerance for it
// counts each stored number as off by 2^-20 of itself, 16 times f32's unit roundoff, and 2^-34
// below f16's normal range (`Tolerance::F16_PAIRS`).
//
// Otherwise version 8, with one 16-row query tile per subgroup, Q in registers and K and V
// read where they are staged.
//
// Layout: Q, K, V [slices, N, CHUNKS] of vec4<f32>, O [slices, Nq, CHUNKS] of vec4<f32>,
// rows padded with zeros to a multiple of 16 numbers; L [slices, Nq] of f32.

enable f16;
enable wgpu_cooperative_matrix;

// Set by the host before compiling (these values are only the defaults the shader test uses).
const HEAD_DIM: u32 = 64u;           // a multiple of 16
const BLOCK_KV: u32 = 16u;           // keys per tile: 16 or 32
const SUBGROUPS: u32 = 4u;           // subgroups of 32 threads per workgroup: 4 or 8

const LANES: u32 = 32u;
const THREADS: u32 = SUBGROUPS * LANES;
const BLOCK_Q: u32 = 16u * SUBGROUPS;
const FRAGMENTS: u32 = HEAD_DIM / 16u;            // 16-wide slices of the head dimension
const KEY_BLOCKS: u32 = BLOCK_KV / 16u;           // 16-key slices of a tile
const CHUNKS: u32 = HEAD_DIM / 4u;                // vec4s per row
const LANES_PER_ROW: u32 = 2u;                    // the softmax: 16 rows per subgroup
const ROW_PART: u32 = BLOCK_KV / 4u / LANES_PER_ROW; // vec4s of a row of S per lane
const TILE_CHUNKS: u32 = BLOCK_KV * CHUNKS;          // vec4s in a tile of K (or of V)
const STAGED: u32 = (TILE_CHUNKS + THREADS - 1u) / THREADS; // ... per thread, at most
const LAZY_RESCALE: f32 = 8.0;       // log2 units: weights stay below 2^8
const LO_SCALE: f32 = 1024.0;        // lo is stored times 2^10 ...
const LO_STEP: f32 = 1.0 / 1024.0;   // ... and its products scaled back by 2^-10
const F16_MANTISSA: u32 = 0xffffe000u;    // sign, exponent and the top 10 mantissa bits of an f32
const F16_SMALLEST_NORMAL: f32 = 6.103515625e-5;  // 2^-14
const F16_GRID_STEPS: f32 = 16777216.0;           // 2^24: f16's subnormals are multiples of 2^-24
// O goes through the subgroup's rows of S to be rescaled or written out, as many 16-column
// fragments at a time as a row of S holds (see version 6).
const O_PER_ROUND: u32 = select(1u, 2u, FRAGMENTS % 2u == 0u && KEY_BLOCKS >= 2u);
const ROUNDS: u32 = FRAGMENTS / O_PER_ROUND;
const ROUND_CHUNKS: u32 = 4u * O_PER_ROUND / LANES_PER_ROW; // vec4s of a round per lane

// Row strides in vec4s, padded against bank conflicts as in version 6.
const KV_STRIDE: u32 = CHUNKS + 2u;
const S_STRIDE: u32 = BLOCK_KV / 4u + LANES_PER_ROW;
const P_STRIDE: u32 = BLOCK_KV / 4u + 2u;

// The arena, in vec4<f16>s: [K hi | K lo | V hi | V lo | P hi | P lo]. Q passes through it
// before the loop, hi and lo, as many subgroups' rows at a time as fit.
const KV_TILE: u32 = BLOCK_KV * KV_STRIDE;
const K_HI: u32 = 0u;
const K_LO: u32 = KV_TILE;
const V_HI: u32 = 2u * KV_TILE;
const V_LO: u32 = 3u * KV_TILE;
const P_HI: u32 = 4u * KV_TILE;
const P_LO: u32 = P_HI + BLOCK_Q * P_STRIDE;
const KVP: u32 = P_LO + BLOCK_Q * P_STRIDE;
const PASS_SUBGROUPS: u32 = clamp(KVP / (2u * 16u * KV_STRIDE), 1u, SUBGROUPS);
const PASS_ROWS: u32 = 16u * PASS_SUBGROUPS;
const Q_PASSES: u32 = (SUBGROUPS + PASS_SUBGROUPS - 1u) / PASS_SUBGROUPS;
const Q_LO: u32 = PASS_ROWS * KV_STRIDE;          // where a pass's lo rows start
const ARENA: u32 = max(KVP, 2u * PASS_ROWS * KV_STRIDE);

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
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

var<workgroup> arena: array<vec4<f16>, ARENA>;
var<workgroup> s_tile: array<vec4<f32>, BLOCK_Q * S_STRIDE>;
var<workgroup> row_rescale: array<f32, BLOCK_Q>;    // exp2(m_old - m_new) for each row
// [0]: some row's max grew by more than 8 (4 of them: a whole 16-byte unit, see version 2)
var<workgroup> rescale_flag: array<atomic<u32>, 4>;

const LOG2_E: f32 = 1.4426950408889634;
const LN_2: f32 = 0.6931471805599453;

// ANCHOR: split
// x as hi + lo / 2^10, both f16, at `at` and `at + lo_at` in the arena. hi is x with its
// mantissa cut to f16's 10 bits, or below f16's normal range to its subnormal grid (both
// numbers f16 holds exactly, if the driver keeps f16 subnormals), so x - hi is exact in f32.
// Not x - f32(f16(x)): on an H100 that left lo = 0, as if the driver folded the round trip.
fn store_split(x: vec4<f32>, at: u32, lo_at: u32) {
    let cut = bitcast<vec4<f32>>(bitcast<vec4<u32>>(x) & vec4<u32>(F16_MANTISSA));
    let grid = trunc(x * F16_GRID_STEPS) / F16_GRID_STEPS;      // multiples of 2^-24
    let hi = select(cut, grid, abs(x) < vec4<f32>(F16_SMALLEST_NORMAL));
    arena[at] = vec4<f16>(hi);
    arena[at + lo_at] = vec4<f16>((x - hi) * LO_SCALE);
}
// ANCHOR_END: split

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
fn fetch(from_k: bool, slice: u32, first: u32, thread: u32) -> array<vec4<f32>, STAGED> {
    var staged: array<vec4<f32>, STAGED>;
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let key = first + e / CHUNKS;
        let at = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        let in_tile = TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS;  // constant if it divides
        var x = vec4<f32>(0.0);
        if in_tile && key < params.kv_len && from_k {
            x = k[at];
        } else if in_tile && key < params.kv_len {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into the arena, split, from offset `at` (K_HI for K, V_HI for V).
fn stash(staged: array<vec4<f32>, STAGED>, at: u32, thread: u32) {
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        if TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS {
            store_split(staged[i], at + (e / CHUNKS) * KV_STRIDE + e % CHUNKS, KV_TILE);
        }
    }
}

// Rows [first, first + PASS_ROWS) of the workgroup's rows of Q into the start of the arena,
// split (hi from 0, lo from Q_LO), zeros past Nq.
fn stage_queries(slice: u32, q_start: u32, first: u32, thread: u32) {
    for (var e = thread; e < PASS_ROWS * CHUNKS; e += THREADS) {
        let row = e / CHUNKS;
        let q_row = q_start + first + row;
        var x = vec4<f32>(0.0);
        if first + row < BLOCK_Q && q_row < params.q_len {
            x = q[(slice * params.q_len + q_row) * CHUNKS + e % CHUNKS];
        }
        store_split(x, row * KV_STRIDE + e % CHUNKS, Q_LO);
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
    let first_row = sg * 16u;                         // the subgroup's rows of the tile
    let my_row = first_row + lane / LANES_PER_ROW;    // this lane's row for the softmax
    let part = lane % LANES_PER_ROW;                  // and which vec4s of it: every other
    let row_keys = visible_keys(q_start + my_row);

    if thread == 0u {
        atomicStore(&rescale_flag[0], 0u);
    }
    var q_hi: array<coop_mat16x16<f16, A>, FRAGMENTS>;
    var q_lo: array<coop_mat16x16<f16, A>, FRAGMENTS>;
    var o_frag: array<coop_mat16x16<f32, C>, FRAGMENTS>;   // the products of the his
    var o_cross: array<coop_mat16x16<f32, C>, FRAGMENTS>;  // hi x lo and lo x hi, times 2^10
    // unroll
    for (var f = 0u; f < FRAGMENTS; f++) {
        o_frag[f] = coop_mat16x16<f32, C>();
        o_cross[f] = coop_mat16x16<f32, C>();
    }
    // Q into the arena, PASS_ROWS rows at a time, split; each subgroup takes its fragments
    // into registers in the pass that holds its rows. Every subgroup loads in every pass
    // (cooperative-matrix loads must stay in uniform control flow) and keeps only its own.
    for (var q_pass = 0u; q_pass < Q_PASSES; q_pass++) {
        let pass_first = q_pass * PASS_ROWS;
        stage_queries(slice, q_start, pass_first, thread);
        workgroupBarrier();
        let mine = first_row >= pass_first && first_row < pass_first + PASS_ROWS;
        let local_row = select(0u, first_row - pass_first, mine);
        // unroll
        for (var f = 0u; f < FRAGMENTS; f++) {
            let at = local_row * KV_STRIDE + f * 4u;
            let hi = coopLoadT<coop_mat16x16<f16, A>>(&arena[at], KV_STRIDE);
            let lo = coopLoadT<coop_mat16x16<f16, A>>(&arena[Q_LO + at], KV_STRIDE);
            if mine {
                q_hi[f] = hi;
                q_lo[f] = lo;
            }
        }
        workgroupBarrier();                  // read before the next pass, K, V and P reuse it
    }

    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = visible_keys(q_start);
    var m = neg_inf;                         // the row's max so far (log2 units), lazily kept
    var l = 0.0;                             // this lane's part of the row sum

    // Prologue: K of tile 0 staged, P = 0 and V = 0 (hi and lo: uninitialised memory could
    // hold the bits of a NaN, and 0 x NaN = NaN).
    stash(fetch(true, slice, 0u, thread), K_HI, thread);
    for (var e = thread; e < 2u * BLOCK_Q * P_STRIDE; e += THREADS) {
        arena[P_HI + e] = vec4<f16>(0.0h);
    }
    for (var e = thread; e < 2u * KV_TILE; e += THREADS) {
        arena[V_HI + e] = vec4<f16>(0.0h);
    }
    workgroupBarrier();

    // ANCHOR: products
    let tiles = (kv_end + BLOCK_KV - 1u) / BLOCK_KV;
    for (var t = 0u; t <= tiles; t++) {
        let kv_start = t * BLOCK_KV;
        // O += P V of the previous tile (P is all zeros in round 0): three products.
        // unroll
        for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
            let p_at = first_row * P_STRIDE + kb * 4u;
            let p_hi = coopLoadT<coop_mat16x16<f16, A>>(&arena[P_HI + p_at], P_STRIDE);
            let p_lo = coopLoadT<coop_mat16x16<f16, A>>(&arena[P_LO + p_at], P_STRIDE);
            // unroll
            for (var f = 0u; f < FRAGMENTS; f++) {
                let v_at = kb * 16u * KV_STRIDE + f * 4u;
                let v_hi = coopLoadT<coop_mat16x16<f16, B>>(&arena[V_HI + v_at], KV_STRIDE);
                let v_lo = coopLoadT<coop_mat16x16<f16, B>>(&arena[V_LO + v_at], KV_STRIDE);
                o_frag[f] = coopMultiplyAdd(p_hi, v_hi, o_frag[f]);
                o_cross[f] = coopMultiplyAdd(p_hi, v_lo, o_cross[f]);
                o_cross[f] = coopMultiplyAdd(p_lo, v_hi, o_cross[f]);
            }
        }
        // S = Q K^T of this tile, three products; K [key][d] loaded column-major is K^T.
        {
            var s: array<coop_mat16x16<f32, C>, KEY_BLOCKS>;
            var s_cross: array<coop_mat16x16<f32, C>, KEY_BLOCKS>;
            // unroll
            for (var f = 0u; f < FRAGMENTS; f++) {
                // unroll
                for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                    let at = kb * 16u * KV_STRIDE + f * 4u;
                    let k_hi = coopLoad<coop_mat16x16<f16, B>>(&arena[K_HI + at], KV_STRIDE);
                    let k_lo = coopLoad<coop_mat16x16<f16, B>>(&arena[K_LO + at], KV_STRIDE);
                    s[kb] = coopMultiplyAdd(q_hi[f], k_hi, s[kb]);
                    s_cross[kb] = coopMultiplyAdd(q_hi[f], k_lo, s_cross[kb]);
                    s_cross[kb] = coopMultiplyAdd(q_lo[f], k_hi, s_cross[kb]);
                }
            }
            // unroll
            for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
                store_s(s[kb] + s_cross[kb] * LO_STEP, first_row * S_STRIDE + kb * 4u);
            }
        }
        // ANCHOR_END: products
        workgroupBarrier();

        // Softmax of this tile, then K of the next tile and V of this one staged.
        if t < tiles {
            let masked_tile = kv_start + BLOCK_KV > all_see;
            softmax(kv_start, masked_tile, row_keys, my_row, part, &m, &l);
            stash(fetch(true, slice, kv_start + BLOCK_KV, thread), K_HI, thread);
            stash(fetch(false, slice, kv_start, thread), V_HI, thread);
        }
        // The barrier before the next products, and the rare rescale of O (version 6), with
        // the cross terms added in first.
        let rescale_o = workgroupUniformLoad(&rescale_flag[0]) == 1u;
        if rescale_o {
            // unroll
            for (var round = 0u; round < ROUNDS; round++) {
                // unroll
                for (var j = 0u; j < O_PER_ROUND; j++) {
                    let f = round * O_PER_ROUND + j;
                    store_s(o_frag[f] + o_cross[f] * LO_STEP, first_row * S_STRIDE + 4u * j);
                }
                workgroupBarrier();
                // unroll
                for (var c = 0u; c < ROUND_CHUNKS; c++) {
                    s_tile[my_row * S_STRIDE + part * ROUND_CHUNKS + c] *= row_rescale[my_row];
                }
                workgroupBarrier();
                // unroll
                for (var j = 0u; j < O_PER_ROUND; j++) {
                    let f = round * O_PER_ROUND + j;
                    let at = first_row * S_STRIDE + 4u * j;
                    o_frag[f] = coopLoadT<coop_mat16x16<f32, C>>(&s_tile[at], S_STRIDE);
                    o_cross[f] = coop_mat16x16<f32, C>();
                }
                workgroupBarrier();          // loaded before the next round is stored
            }
        }
        if thread == 0u {
            atomicStore(&rescale_flag[0], 0u);
        }
    }

    // O = acc / l, through workgroup memory; L = ln 2 (m + log2 l).
    let total = l + subgroupShuffleXor(l, 1u);
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    let row = q_start + my_row;
    // unroll
    for (var round = 0u; round < ROUNDS; round++) {
        workgroupBarrier();                  // s_tile is free
        // unroll
        for (var j = 0u; j < O_PER_ROUND; j++) {
            let f = round * O_PER_ROUND + j;
            store_s(o_frag[f] + o_cross[f] * LO_STEP, first_row * S_STRIDE + 4u * j);
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
// max, P = exp2(S - m) split into the arena as hi and lo.
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
    let tile_max = max(part_max, subgroupShuffleXor(part_max, 1u));
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
        store_split(p, P_HI + my_row * P_STRIDE + c * LANES_PER_ROW + part, P_LO - P_HI);
    }
}
