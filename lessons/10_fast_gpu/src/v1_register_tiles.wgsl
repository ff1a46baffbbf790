// ANCHOR: header
// Lesson 10, version 1: register micro-tiles (f32).
//
// What changes from lesson 09: lesson 09 gives each thread one query row and walks it over
// every key of a tile, so each number a thread loads from workgroup memory feeds one
// multiply-add. Here each thread computes a 4 x 4 block of the score tile (4 query rows x 4
// keys, ROWS_PER_THREAD x KEYS_PER_THREAD): per chunk of the head dimension it loads 4 rows of
// Q and 4 of K (8 vec4, 32 numbers) and does 16 vec4 dot products (64 multiply-adds): two
// multiply-adds per number loaded instead of one. A GPU's arithmetic is far faster than its workgroup memory, so that ratio sets the
// speed. Besides:
//   - exp2 with log2(e) folded into the scale: scores are kept in log2 units, so every
//     exponential is one exp2 (the GPU's native instruction) and no extra multiply;
//   - the mask is applied only on tiles that cross the diagonal or the end of the keys; the
//     other tiles take the unmasked path;
//   - O is divided by l once, at the end (as in lesson 03).
//
// Workgroup: KEY_GROUPS x ROW_GROUPS threads; thread t belongs to key group t % KEY_GROUPS and
// row group t / KEY_GROUPS. It owns query rows rg + ROW_GROUPS * i (i < 4), keys kg +
// KEY_GROUPS * j of each tile (j < KEYS_PER_THREAD), and, of O, the chunks kg + KEY_GROUPS * u
// of its rows. The 8 threads of a row share it through workgroup memory: per tile, one
// exchange of partial maxima; at the end, one of partial sums.
//
// Per tile of keys (three barriers):
//   1. load K into kv_tile                                           | barrier
//   2. scores of the thread's 4 x 4 block; partial row maxima out     | barrier
//   3. row maxima in; P = exp2(S - m) into p_tile; V into kv_tile     | barrier
//   4. O += P V for the thread's rows and chunks                      | (next tile's barrier)
//
// Layout as every kernel of the course: Q, O [slices, Nq, CHUNKS], K, V [slices, Nkv, CHUNKS]
// of vec4<f32>, rows padded with zeros; L [slices, Nq].
// ANCHOR_END: header

override HEAD_DIM: u32 = 64u;
override ROW_GROUPS: u32 = 16u;       // 4 query rows each: BLOCK_Q = 4 ROW_GROUPS
override KEYS_PER_THREAD: u32 = 4u;   // 4, or 2 where a tile of 32 keys would not fit

const ROWS_PER_THREAD: u32 = 4u;
const KEY_GROUPS: u32 = 8u;           // threads that share a query row
const MAX_KEYS_PER_THREAD: u32 = 4u;
const MAX_OUT_CHUNKS: u32 = 8u;       // O chunks per thread and row: D <= 8 * 8 * 4 = 256

override BLOCK_Q: u32 = ROWS_PER_THREAD * ROW_GROUPS;
override BLOCK_KV: u32 = KEY_GROUPS * KEYS_PER_THREAD;
override THREADS: u32 = KEY_GROUPS * ROW_GROUPS;
override CHUNKS: u32 = (HEAD_DIM + 3u) / 4u;
// Staged K rows take an odd number of vec4s: the 8 threads that read 8 different keys at the
// same chunk then hit 8 different groups of memory banks (no bank conflicts).
override KV_STRIDE: u32 = CHUNKS | 1u;
override OUT_CHUNKS: u32 = (CHUNKS + KEY_GROUPS - 1u) / KEY_GROUPS;

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

var<workgroup> q_tile: array<vec4<f32>, BLOCK_Q * CHUNKS>;     // the workgroup's query rows
var<workgroup> kv_tile: array<vec4<f32>, BLOCK_KV * KV_STRIDE>; // K, then V, of one tile
var<workgroup> p_tile: array<vec4<f32>, BLOCK_Q * BLOCK_KV / 4u>; // P, rows of BLOCK_KV
var<workgroup> row_parts: array<f32, BLOCK_Q * KEY_GROUPS>;    // each thread's share of a row

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

// -inf, which WGSL has no literal for: a masked score, and the running max of a row that has
// seen no key yet.
fn minus_infinity() -> f32 {
    var bits = 0xff800000u;
    return bitcast<f32>(bits);
}

// Copies keys [kv_start, kv_start + BLOCK_KV) of `slice`, of K or of V, into kv_tile; zeros
// past Nkv (their weights are 0, and 0 x 0 adds nothing where 0 x garbage could be NaN).
fn stage_keys(from_k: bool, slice: u32, kv_start: u32, thread: u32) {
    for (var e = thread; e < BLOCK_KV * CHUNKS; e += THREADS) {
        let key = e / CHUNKS;
        let chunk = e % CHUNKS;
        var x = vec4<f32>(0.0);
        let at = (slice * params.kv_len + kv_start + key) * CHUNKS + chunk;
        if kv_start + key < params.kv_len && from_k {
            x = k[at];
        } else if kv_start + key < params.kv_len {
            x = v[at];
        }
        kv_tile[key * KV_STRIDE + chunk] = x;
    }
}

@compute @workgroup_size(THREADS)
fn flash_forward(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(local_invocation_index) thread: u32,
) {
    let slice = tile.y;
    let q_start = tile.x * BLOCK_Q;
    let kg = thread % KEY_GROUPS;
    let rg = thread / KEY_GROUPS;
    let scale = params.scale * LOG2_E;      // scores in log2 units: exp(x) = exp2(x log2 e)
    let neg_inf = minus_infinity();

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
    let all_see = visible_keys(q_start);

    var m: array<f32, ROWS_PER_THREAD>;                  // running max per row (log2 units)
    var l: array<f32, ROWS_PER_THREAD>;                  // this thread's share of the row sum
    var acc: array<vec4<f32>, ROWS_PER_THREAD * MAX_OUT_CHUNKS>;  // unnormalised O
    var row_keys: array<u32, ROWS_PER_THREAD>;
    for (var i = 0u; i < ROWS_PER_THREAD; i++) {
        m[i] = neg_inf;
        l[i] = 0.0;
        row_keys[i] = visible_keys(q_start + rg + ROW_GROUPS * i);
        for (var u = 0u; u < MAX_OUT_CHUNKS; u++) {
            acc[i * MAX_OUT_CHUNKS + u] = vec4<f32>(0.0);
        }
    }

    for (var kv_start = 0u; kv_start < kv_end; kv_start += BLOCK_KV) {
        stage_keys(true, slice, kv_start, thread);
        workgroupBarrier();

        // 1. This thread's 4 x KEYS_PER_THREAD block of scores.
        var s: array<f32, ROWS_PER_THREAD * MAX_KEYS_PER_THREAD>;
        for (var n = 0u; n < ROWS_PER_THREAD * MAX_KEYS_PER_THREAD; n++) {
            s[n] = 0.0;
        }
        for (var c = 0u; c < CHUNKS; c++) {
            var keys: array<vec4<f32>, MAX_KEYS_PER_THREAD>;
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                keys[j] = kv_tile[(kg + KEY_GROUPS * j) * KV_STRIDE + c];
            }
            for (var i = 0u; i < ROWS_PER_THREAD; i++) {
                let q_chunk = q_tile[(rg + ROW_GROUPS * i) * CHUNKS + c];
                for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                    s[i * MAX_KEYS_PER_THREAD + j] += dot(q_chunk, keys[j]);
                }
            }
        }

        // 2. Scale, mask where needed, and each row's partial max.
        let masked_tile = kv_start + BLOCK_KV > min(all_see, params.kv_len);
        for (var i = 0u; i < ROWS_PER_THREAD; i++) {
            var part_max = neg_inf;
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                var x = s[i * MAX_KEYS_PER_THREAD + j] * scale;
                if masked_tile && kv_start + kg + KEY_GROUPS * j >= row_keys[i] {
                    x = neg_inf;
                }
                s[i * MAX_KEYS_PER_THREAD + j] = x;
                part_max = max(part_max, x);
            }
            row_parts[(rg + ROW_GROUPS * i) * KEY_GROUPS + kg] = part_max;
        }
        workgroupBarrier();

        // 3. Row maxima, the online-softmax rescale, P into workgroup memory, V staged.
        for (var i = 0u; i < ROWS_PER_THREAD; i++) {
            let row = rg + ROW_GROUPS * i;
            var tile_max = neg_inf;
            for (var g = 0u; g < KEY_GROUPS; g++) {
                tile_max = max(tile_max, row_parts[row * KEY_GROUPS + g]);
            }
            let m_new = max(m[i], tile_max);
            // A row that has seen no key keeps m = -inf: subtract 0 instead, so that its
            // weights are exp2(-inf) = 0 rather than exp2(-inf + inf) = NaN.
            let m_safe = select(m_new, 0.0, m_new == neg_inf);
            let correction = exp2(m[i] - m_safe);
            l[i] *= correction;
            for (var u = 0u; u < OUT_CHUNKS; u++) {
                acc[i * MAX_OUT_CHUNKS + u] *= correction;
            }
            m[i] = m_new;
            for (var j = 0u; j < KEYS_PER_THREAD; j++) {
                let p = exp2(s[i * MAX_KEYS_PER_THREAD + j] - m_safe);
                l[i] += p;
                let at = row * BLOCK_KV + kg + KEY_GROUPS * j;
                p_tile[at / 4u][at % 4u] = p;
            }
        }
        stage_keys(false, slice, kv_start, thread);
        workgroupBarrier();

        // 4. O += P V: four keys at a time, for the thread's rows and O chunks.
        for (var key = 0u; key < BLOCK_KV; key += 4u) {
            var p4: array<vec4<f32>, ROWS_PER_THREAD>;
            for (var i = 0u; i < ROWS_PER_THREAD; i++) {
                p4[i] = p_tile[((rg + ROW_GROUPS * i) * BLOCK_KV + key) / 4u];
            }
            for (var u = 0u; u < OUT_CHUNKS; u++) {
                let chunk = min(kg + KEY_GROUPS * u, CHUNKS - 1u);  // past D: computed, never written
                let v0 = kv_tile[key * KV_STRIDE + chunk];
                let v1 = kv_tile[(key + 1u) * KV_STRIDE + chunk];
                let v2 = kv_tile[(key + 2u) * KV_STRIDE + chunk];
                let v3 = kv_tile[(key + 3u) * KV_STRIDE + chunk];
                for (var i = 0u; i < ROWS_PER_THREAD; i++) {
                    let p = p4[i];
                    acc[i * MAX_OUT_CHUNKS + u] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
                }
            }
        }
        workgroupBarrier();
    }

    // Row sums: each thread's share out, the whole sum in.
    for (var i = 0u; i < ROWS_PER_THREAD; i++) {
        row_parts[(rg + ROW_GROUPS * i) * KEY_GROUPS + kg] = l[i];
    }
    workgroupBarrier();
    for (var i = 0u; i < ROWS_PER_THREAD; i++) {
        let row = rg + ROW_GROUPS * i;
        var total = 0.0;
        for (var g = 0u; g < KEY_GROUPS; g++) {
            total += row_parts[row * KEY_GROUPS + g];
        }
        if q_start + row < params.q_len {
            write_row(slice, q_start + row, kg, total, m[i], i, &acc);
        }
    }
}

// O = acc / l for the thread's chunks of one row, and L = ln 2 (m + log2 l); a row that saw
// no key gets O = 0 and L = -inf.
fn write_row(
    slice: u32, row: u32, kg: u32, total: f32, m: f32, i: u32,
    acc: ptr<function, array<vec4<f32>, ROWS_PER_THREAD * MAX_OUT_CHUNKS>>,
) {
    let out = (slice * params.q_len + row) * CHUNKS;
    let inv_l = select(0.0, 1.0 / total, total > 0.0);
    for (var u = 0u; u < OUT_CHUNKS; u++) {
        let chunk = kg + KEY_GROUPS * u;
        if chunk < CHUNKS {
            o[out + chunk] = (*acc)[i * MAX_OUT_CHUNKS + u] * inv_l;
        }
    }
    if kg == 0u {
        lse[slice * params.q_len + row] = select(minus_infinity(), LN_2 * (m + log2(total)), total > 0.0);
    }
}
