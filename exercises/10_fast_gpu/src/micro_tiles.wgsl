// NOT STARTED: delete this line when you start.
//
// Exercise 10: register micro-tiles in WGSL (see README.md and the book's chapter 10).
//
// This is lesson 10's version 7 with two functions left for you: score_block, the thread's
// block of scores S = Q K^T, and add_values, its share of O += P V. Everything else is given:
// the staging of Q, K and V, the online softmax with its subgroup shuffles, the output. Each
// thread owns ROWS_PER_THREAD query rows (rg + ROW_GROUPS * i) and, of every tile, the
// KEYS_PER_THREAD keys kg + KEY_GROUPS * j; of O, the chunks kg + KEY_GROUPS * u of its rows.
// The host writes the constants in and unrolls every loop marked `// unroll` (its bound must
// be one of the shader's constants): mark yours, so that your arrays can live in registers.

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
    // TODO: s[i * KEYS_PER_THREAD + j] = the dot product of query row rg + ROW_GROUPS * i of
    //       q_tile with key kg + KEY_GROUPS * j of k_tile, over the CHUNKS vec4s of a row
    //       (q_tile rows are CHUNKS long, k_tile rows KV_STRIDE long). See README.md.
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
    // TODO: sum[i * OUT_CHUNKS + u] += the weights of query row rg + ROW_GROUPS * i (p_tile,
    //       BLOCK_KV per row, 4 to a vec4) times chunk kg + KEY_GROUPS * u of every row of
    //       v_tile (rows KV_STRIDE long; a chunk at or past CHUNKS is never written out, so
    //       read chunk CHUNKS - 1 instead). See README.md.
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
