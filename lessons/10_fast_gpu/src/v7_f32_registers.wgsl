// ANCHOR: header
// Lesson 10, version 7: version 1 (f32) with its arrays in registers.
//
// What changes from version 1: version 1's compiled code keeps its arrays of scores and of O
// in local memory (752 bytes per thread on an H100), because their sizes are the largest any
// head dimension needs and its loops have trip counts the compiler does not know. Here, as in
// version 6:
//   - the host writes the head dimension and the tile shape into the source as constants
//     (`gpu::wgsl::specialise`), so each array has exactly the size this head dimension needs;
//   - the host unrolls every loop over those arrays (`gpu::wgsl::unroll`), so every index is a
//     constant and every element can live in a register;
//   - the 8 threads that share a query row exchange their partial maxima and sums with
//     subgroup shuffles (`subgroupShuffleXor` with 1, 2 and 4), not through workgroup memory:
//     no barrier for it. Written for any subgroup size that is a multiple of 8 (lavapipe's 8,
//     NVIDIA's 32, AMD's 64): the 8 threads of a row are 8 neighbouring lanes of one subgroup;
//   - K and V have a buffer each, and the next tile of both is read from memory into
//     registers while this one is used (prefetch), so the global reads' latency hides behind
//     the arithmetic.
//
// Per tile of keys (three barriers):
//   1. the prefetched K and V into k_tile and v_tile; the next tile's reads issued | barrier
//   2. scores of the thread's ROWS_PER_THREAD x KEYS_PER_THREAD block; row maxima by shuffles;
//      P = exp2(S - m) into p_tile                                                    | barrier
//   3. O += P V for the thread's rows and chunks                                      | barrier
//
// Roles: thread t (counted from its subgroup and its lane, so that the 8 threads of a row are
// lanes of one subgroup) belongs to key group t % 8 and row group t / 8, as in version 1.
// A device whose subgroups do not tile the workgroup exactly gets
// NaN in every output rather than a silently wrong answer.
// ANCHOR_END: header

const HEAD_DIM: u32 = 64u;
const ROW_GROUPS: u32 = 16u;          // groups of 8 threads: BLOCK_Q = ROWS_PER_THREAD ROW_GROUPS
const ROWS_PER_THREAD: u32 = 4u;      // 4 or 8 query rows per thread
const KEYS_PER_THREAD: u32 = 4u;      // 1, 2 or 4: BLOCK_KV = 8 KEYS_PER_THREAD
const PREFETCH: u32 = 1u;             // 1: the next tile is read into registers during this one

const KEY_GROUPS: u32 = 8u;           // threads that share a query row
const BLOCK_Q: u32 = ROWS_PER_THREAD * ROW_GROUPS;
const BLOCK_KV: u32 = KEY_GROUPS * KEYS_PER_THREAD;
const THREADS: u32 = KEY_GROUPS * ROW_GROUPS;
const CHUNKS: u32 = (HEAD_DIM + 3u) / 4u;
const KV_STRIDE: u32 = CHUNKS | 1u;   // odd: 8 keys at one chunk fall in 8 groups of banks
const OUT_CHUNKS: u32 = (CHUNKS + KEY_GROUPS - 1u) / KEY_GROUPS;  // O chunks per thread and row
const SCORES: u32 = ROWS_PER_THREAD * KEYS_PER_THREAD;
const ACCUMULATORS: u32 = ROWS_PER_THREAD * OUT_CHUNKS;
const TILE_CHUNKS: u32 = BLOCK_KV * CHUNKS;  // vec4s of one tile of K (or V)
const STAGED: u32 = (TILE_CHUNKS + THREADS - 1u) / THREADS;  // of them per thread
const KEY_QUADS: u32 = BLOCK_KV / 4u;

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

var<workgroup> q_tile: array<vec4<f32>, BLOCK_Q * CHUNKS>;       // the workgroup's query rows
var<workgroup> k_tile: array<vec4<f32>, BLOCK_KV * KV_STRIDE>;   // one tile of K
var<workgroup> v_tile: array<vec4<f32>, BLOCK_KV * KV_STRIDE>;   // and of V
var<workgroup> p_tile: array<vec4<f32>, BLOCK_Q * BLOCK_KV / 4u>; // P, rows of BLOCK_KV

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

// ANCHOR: shuffles
// The largest and the sum of x over the 8 neighbouring lanes that share a query row
// (lanes 8r .. 8r + 7 of the subgroup): three exchanges each, no workgroup memory.
fn row_max(x: f32) -> f32 {
    var r = max(x, subgroupShuffleXor(x, 1u));
    r = max(r, subgroupShuffleXor(r, 2u));
    return max(r, subgroupShuffleXor(r, 4u));
}

fn row_sum(x: f32) -> f32 {
    var r = x + subgroupShuffleXor(x, 1u);
    r += subgroupShuffleXor(r, 2u);
    return r + subgroupShuffleXor(r, 4u);
}
// ANCHOR_END: shuffles

// This thread's share of keys [first, first + BLOCK_KV) of K (from_k) or V: elements
// e = thread + i * THREADS of the tile's BLOCK_KV x CHUNKS vec4s; zeros past Nkv (their
// weights are 0, and 0 x 0 adds nothing where 0 x garbage could be NaN).
fn fetch(from_k: bool, slice: u32, first: u32, thread: u32) -> array<vec4<f32>, STAGED> {
    var staged: array<vec4<f32>, STAGED>;
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let key = first + e / CHUNKS;
        let at = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        let read = (TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS) && key < params.kv_len;
        var x = vec4<f32>(0.0);
        if read && from_k {
            x = k[at];
        } else if read {
            x = v[at];
        }
        staged[i] = x;
    }
    return staged;
}

// ... and into k_tile (to_k) or v_tile.
fn stash(staged: array<vec4<f32>, STAGED>, to_k: bool, thread: u32) {
    // unroll
    for (var i = 0u; i < STAGED; i++) {
        let e = thread + i * THREADS;
        let at = (e / CHUNKS) * KV_STRIDE + e % CHUNKS;
        if (TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS) && to_k {
            k_tile[at] = staged[i];
        } else if TILE_CHUNKS % THREADS == 0u || e < TILE_CHUNKS {
            v_tile[at] = staged[i];
        }
    }
}

// Without prefetch (where the staged tile would take too many registers per thread): keys
// [first, first + BLOCK_KV) of K (from_k) or V straight into k_tile or v_tile.
fn stage_keys(from_k: bool, slice: u32, first: u32, thread: u32) {
    for (var e = thread; e < TILE_CHUNKS; e += THREADS) {
        let key = first + e / CHUNKS;
        let source = (slice * params.kv_len + key) * CHUNKS + e % CHUNKS;
        let at = (e / CHUNKS) * KV_STRIDE + e % CHUNKS;
        var x = vec4<f32>(0.0);
        if key < params.kv_len && from_k {
            x = k[source];
        } else if key < params.kv_len {
            x = v[source];
        }
        if from_k {
            k_tile[at] = x;
        } else {
            v_tile[at] = x;
        }
    }
}

// The thread's ROWS_PER_THREAD x KEYS_PER_THREAD block of S = Q K^T for the staged tile, not
// yet scaled: s[i KEYS_PER_THREAD + j] is the score of query row rg + ROW_GROUPS i of q_tile
// and key kg + KEY_GROUPS j of k_tile. Per chunk of the head dimension: KEYS_PER_THREAD keys
// and ROWS_PER_THREAD query rows loaded, ROWS_PER_THREAD x KEYS_PER_THREAD dot products.
fn score_block(rg: u32, kg: u32) -> array<f32, SCORES> {
    var s: array<f32, SCORES>;
    // unroll
    for (var n = 0u; n < SCORES; n++) {
        s[n] = 0.0;
    }
    for (var c = 0u; c < CHUNKS; c++) {
        var keys: array<vec4<f32>, KEYS_PER_THREAD>;
        // unroll
        for (var j = 0u; j < KEYS_PER_THREAD; j++) {
            keys[j] = k_tile[(kg + KEY_GROUPS * j) * KV_STRIDE + c];
        }
        // unroll
        for (var i = 0u; i < ROWS_PER_THREAD; i++) {
            let q_chunk = q_tile[(rg + ROW_GROUPS * i) * CHUNKS + c];
            // unroll
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                s[i * KEYS_PER_THREAD + j] += dot(q_chunk, keys[j]);
            }
        }
    }
    return s;
}

// acc plus P V of the staged tile for the thread's rows and O chunks: acc[i OUT_CHUNKS + u]
// is chunk kg + KEY_GROUPS u of query row rg + ROW_GROUPS i, P is row-major in p_tile (rows
// of BLOCK_KV weights, 4 to a vec4), V in v_tile. Four keys at a time: per row one vec4 of P,
// per chunk four rows of V.
fn add_values(
    acc: array<vec4<f32>, ACCUMULATORS>, rg: u32, kg: u32,
) -> array<vec4<f32>, ACCUMULATORS> {
    var sum = acc;
    for (var quad = 0u; quad < KEY_QUADS; quad++) {
        let key = 4u * quad;
        var p4: array<vec4<f32>, ROWS_PER_THREAD>;
        // unroll
        for (var i = 0u; i < ROWS_PER_THREAD; i++) {
            p4[i] = p_tile[(rg + ROW_GROUPS * i) * KEY_QUADS + quad];
        }
        // unroll
        for (var u = 0u; u < OUT_CHUNKS; u++) {
            let chunk = min(kg + KEY_GROUPS * u, CHUNKS - 1u);  // past D: computed, never written
            let v0 = v_tile[key * KV_STRIDE + chunk];
            let v1 = v_tile[(key + 1u) * KV_STRIDE + chunk];
            let v2 = v_tile[(key + 2u) * KV_STRIDE + chunk];
            let v3 = v_tile[(key + 3u) * KV_STRIDE + chunk];
            // unroll
            for (var i = 0u; i < ROWS_PER_THREAD; i++) {
                let p = p4[i];
                sum[i * OUT_CHUNKS + u] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
            }
        }
    }
    return sum;
}

@compute @workgroup_size(THREADS)
fn flash_forward(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) subgroup_size: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
    let slice = tile.y;
    let q_start = tile.x * BLOCK_Q;
    let thread = subgroup * subgroup_size + lane;
    let kg = thread % KEY_GROUPS;
    let rg = thread / KEY_GROUPS;
    let scale = params.scale * LOG2_E;      // scores in log2 units: exp(x) = exp2(x log2 e)
    let neg_inf = minus_infinity();
    if subgroups * subgroup_size != THREADS || subgroup_size % KEY_GROUPS != 0u {
        poison_rows(slice, q_start, thread);
        return;
    }

    // The workgroup's query rows, zeros past Nq.
    for (var e = thread; e < BLOCK_Q * CHUNKS; e += THREADS) {
        let row = q_start + e / CHUNKS;
        var x = vec4<f32>(0.0);
        if row < params.q_len {
            x = q[(slice * params.q_len + row) * CHUNKS + e % CHUNKS];
        }
        q_tile[e] = x;
    }

    // Causal tile skipping: the last row of the tile bounds the keys anyone sees; the first
    // row bounds the keys everyone sees (tiles below it need no mask).
    let last_row = min(q_start + BLOCK_Q, params.q_len) - 1u;
    let kv_end = visible_keys(last_row);
    let all_see = min(visible_keys(q_start), params.kv_len);

    var m: array<f32, ROWS_PER_THREAD>;      // running max per row (log2 units)
    var l: array<f32, ROWS_PER_THREAD>;      // this thread's share of the row sum
    var acc: array<vec4<f32>, ACCUMULATORS>; // unnormalised O: row i, chunk kg + 8 u at i OUT_CHUNKS + u
    var row_keys: array<u32, ROWS_PER_THREAD>;
    // unroll
    for (var i = 0u; i < ROWS_PER_THREAD; i++) {
        m[i] = neg_inf;
        l[i] = 0.0;
        row_keys[i] = visible_keys(q_start + rg + ROW_GROUPS * i);
    }
    // unroll
    for (var a = 0u; a < ACCUMULATORS; a++) {
        acc[a] = vec4<f32>(0.0);
    }

    var k_next: array<vec4<f32>, STAGED>;
    var v_next: array<vec4<f32>, STAGED>;
    if PREFETCH == 1u {
        k_next = fetch(true, slice, 0u, thread);
        v_next = fetch(false, slice, 0u, thread);
    }
    for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV) {
        // 1. This tile into workgroup memory; the next one's reads on their way.
        if PREFETCH == 1u {
            stash(k_next, true, thread);
            stash(v_next, false, thread);
        } else {
            stage_keys(true, slice, kv_start, thread);
            stage_keys(false, slice, kv_start, thread);
        }
        workgroupBarrier();
        if PREFETCH == 1u && kv_start + BLOCK_KV < kv_end {
            k_next = fetch(true, slice, kv_start + BLOCK_KV, thread);
            v_next = fetch(false, slice, kv_start + BLOCK_KV, thread);
        }

        // 2. This thread's block of scores, scaled and masked where needed; the online-softmax
        // rescale, and P into p_tile.
        var s = score_block(rg, kg);
        let masked_tile = kv_start + BLOCK_KV > all_see;
        // unroll
        for (var i = 0u; i < ROWS_PER_THREAD; i++) {
            var part_max = neg_inf;
            // unroll
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                var x = s[i * KEYS_PER_THREAD + j] * scale;
                if masked_tile && kv_start + kg + KEY_GROUPS * j >= row_keys[i] {
                    x = neg_inf;
                }
                s[i * KEYS_PER_THREAD + j] = x;
                part_max = max(part_max, x);
            }
            let m_new = max(m[i], row_max(part_max));
            // A row that has seen no key keeps m = -inf: subtract 0 instead, so that its
            // weights are exp2(-inf) = 0 rather than exp2(-inf + inf) = NaN.
            let m_safe = select(m_new, 0.0, m_new == neg_inf);
            let correction = exp2(m[i] - m_safe);
            l[i] *= correction;
            // unroll
            for (var u = 0u; u < OUT_CHUNKS; u++) {
                acc[i * OUT_CHUNKS + u] *= correction;
            }
            m[i] = m_new;
            let row = rg + ROW_GROUPS * i;
            // unroll
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                let p = exp2(s[i * KEYS_PER_THREAD + j] - m_safe);
                l[i] += p;
                let at = row * BLOCK_KV + kg + KEY_GROUPS * j;
                p_tile[at / 4u][at % 4u] = p;
            }
        }
        workgroupBarrier();

        // 3. O += P V for the thread's rows and O chunks.
        acc = add_values(acc, rg, kg);
        workgroupBarrier();
    }

    // O = acc / l for the thread's chunks of each row, and L = ln 2 (m + log2 l); a row
    // that saw no key gets O = 0 and L = -inf.
    // unroll
    for (var i = 0u; i < ROWS_PER_THREAD; i++) {
        let total = row_sum(l[i]);
        let row = q_start + rg + ROW_GROUPS * i;
        let inv_l = select(0.0, 1.0 / total, total > 0.0);
        let out = (slice * params.q_len + row) * CHUNKS;
        // unroll
        for (var u = 0u; u < OUT_CHUNKS; u++) {
            let chunk = kg + KEY_GROUPS * u;
            if row < params.q_len && chunk < CHUNKS {
                o[out + chunk] = acc[i * OUT_CHUNKS + u] * inv_l;
            }
        }
        if row < params.q_len && kg == 0u {
            lse[slice * params.q_len + row] =
                select(neg_inf, LN_2 * (m[i] + log2(total)), total > 0.0);
        }
    }
}

// Every output of the workgroup's rows set to NaN: what a device whose subgroups do not tile
// the workgroup (so that the shuffles would mix rows) returns instead of a wrong answer.
fn poison_rows(slice: u32, q_start: u32, thread: u32) {
    let nan = bitcast<f32>(0x7fc00000u);
    for (var e = thread; e < BLOCK_Q * CHUNKS; e += THREADS) {
        let row = q_start + e / CHUNKS;
        if row < params.q_len {
            o[(slice * params.q_len + row) * CHUNKS + e % CHUNKS] = vec4<f32>(nan);
        }
    }
    for (var r = thread; r < BLOCK_Q; r += THREADS) {
        if q_start + r < params.q_len {
            lse[slice * params.q_len + q_start + r] = nan;
        }
    }
}
