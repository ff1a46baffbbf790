// EXPERIMENT, measured slower; not the lesson's kernel. `decode.wgsl` with one change: each
// thread's weighted sums (8 per query head) wait in workgroup memory between tiles instead of
// in registers, so that they are not live while the keys are loaded and scored. The hope: 96
// registers or fewer, so that a multiprocessor holds 5 workgroups of 128 threads instead of
// 4. It costs 16 KiB more workgroup memory and, per thread and tile, 2 loads and 2 stores of
// 16 bytes for each query head of the group (8 of each with the 4 heads measured below).
//
// The driver gives it 127 registers per thread against the lesson's 128 (`shader_stats`,
// NVIDIA H100, driver 580.159.04, 2026-11-26): the sums were not what held the registers.
// Measured on that H100, B = 1, Hq = 32, Hkv = 8, D = 128, layout 128,1,8,512, in one run
// with the lesson's kernel, each at its best number of splits (16 here, 64 for the lesson's):
//   16K tokens 58.1 us against 37.7, 32K 102.8 against 62.2, 128K 367.1 against 200.9.
// The same workgroups per multiprocessor, and the sums' round trips on top.
//
// cargo run --release -p lesson11 --example decode_benchmark -- --write-shader k.wgsl \
//     --shader lessons/11_decoding/experiments/acc_in_workgroup_memory.wgsl --layout 128,1,8,512
// cargo run --release -p lab --bin shader_stats -- --wgsl k.wgsl --entry split_partials
// cargo run --release -p lesson11 --example decode_benchmark -- --tune --batches 1 \
//     --shader lessons/11_decoding/experiments/acc_in_workgroup_memory.wgsl --layout 128,1,8,512
// The same command without --shader times the lesson's kernel.

// Flash-decoding in two kernels: attention of one new query per sequence over a KV cache
// stored in f16, in blocks (PagedAttention's layout; a contiguous cache is one block per
// sequence). Within a block, values are stored token by token, and keys pack by pack: the
// first 16 bytes of every token, then the next 16 bytes of every token, and so on (the layout
// vLLM's kernels read keys in), so that threads that each score a neighbouring token read
// neighbouring bytes.
//
// 1. `split_partials`: one workgroup per (chunk of keys, group of query heads, sequence). It
//    reads each key and value of its chunk once, for all ROWS query heads that share that K/V
//    head (grouped-query attention), and writes each head's partial result over the chunk:
//    O normalised over the chunk and its logsumexp, in log2 units.
// 2. `merge_splits`: one workgroup per (query head, sequence) combines the partial results
//    with the logsumexp merge of lesson 02.
//
// Inside a workgroup the chunk is walked in tiles of TILE keys, with the online softmax of
// lesson 03 between tiles:
//   scores    one thread per key: its dot products with the ROWS queries (q pre-scaled by
//             scale * log2(e), so that exp2 gives e^score), kept in workgroup memory;
//   max       a tree reduction over the threads gives each row's tile maximum, and each
//             thread turns its keys' scores into weights p = 2^(s - m);
//   P V       threads in a grid of PACKS x LANES: a thread owns 8 dimensions (one 16-byte
//             pack of f16) and every LANES-th key, so neighbouring threads read neighbouring
//             bytes of a value row; its 8 sums per row wait in workgroup memory between
//             tiles (this experiment's change).
// The lanes' sums are added once, when the chunk is done.

struct DecodeParams {
    q_heads: u32,       // Hq
    kv_heads: u32,      // Hkv
    group_size: u32,    // G = Hq / Hkv
    block_size: u32,    // tokens per block of the pool
    table_stride: u32,  // entries per sequence in block_table
    splits: u32,        // chunks per sequence
    scale_log2: f32,    // softmax scale * log2(e)
    _unused: u32,
}

// Set by the host for each call (`gpu::wgsl::specialise`), then the loops marked `// unroll`
// are unrolled (`gpu::wgsl::unroll`): every index into the arrays of a thread (m, l, acc, ...)
// is then a constant, which keeps them in registers. Left as loops, the driver kept them in
// local memory and the kernel read the cache at 3 to 11% of the copy bandwidth (measured on
// an H100, 2026-11-25).
const HEAD_DIM: u32 = 128u;  // D, padded to a multiple of 8 (the padding is zeros)
const ROWS: u32 = 4u;        // query heads per workgroup, at most MAX_ROWS
const THREADS: u32 = 128u;   // a power of two, at least HEAD_DIM / 8
const TILE: u32 = 1024u;     // keys per tile: ROWS * TILE scores fit in `scores`

const MAX_ROWS: u32 = 8u;
const SCORES: u32 = 4096u;
// A finite stand-in for -infinity (WGSL has no literal for it): exp2(NO_KEY - x) is 0 for any
// score x, and no NaN arises from (-inf) - (-inf).
const NO_KEY: f32 = -3.0e38;

const PACKS: u32 = HEAD_DIM / 8u;   // 16-byte packs of 8 f16 in a row
const KEY_STEPS: u32 = 2u;          // keys a thread scores at once (1 or 2)
const PV_STEPS: u32 = 4u;           // values a thread loads at once
const MERGE_STEPS: u32 = 16u;       // partial results a merging thread loads at once
const LANES: u32 = THREADS / PACKS; // keys read side by side in the P V phase

@group(0) @binding(0) var<uniform> params: DecodeParams;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;            // [B, Hq, HEAD_DIM/4]
@group(0) @binding(2) var<storage, read> k_pool: array<vec4<u32>>;       // [blocks, Hkv, PACKS, block_size]
@group(0) @binding(3) var<storage, read> v_pool: array<vec4<u32>>;       // [blocks, Hkv, block_size, PACKS]
@group(0) @binding(4) var<storage, read> block_table: array<u32>;        // [B, table_stride]
@group(0) @binding(5) var<storage, read> lens: array<u32>;               // [B]
@group(0) @binding(6) var<storage, read_write> partial_o: array<vec4<f32>>; // [B, Hq, splits, HEAD_DIM/4]
@group(0) @binding(7) var<storage, read_write> partial_lse: array<f32>;     // [B, Hq, splits], log2 units

var<workgroup> q_rows: array<vec4<f32>, ROWS * HEAD_DIM / 4u>;
var<workgroup> scores: array<f32, SCORES>;             // [ROWS, TILE]
var<workgroup> reduce: array<f32, THREADS * ROWS>;     // a value per thread and row
var<workgroup> lane_sums: array<vec4<f32>, THREADS * 2u>;
var<workgroup> value_at: array<u32, TILE>;            // where each key of the tile has its value
// Each thread's 8 sums per row between tiles, out of its registers: [row * 2 + half, thread].
var<workgroup> acc_held: array<vec4<f32>, 2u * ROWS * THREADS>;

// Where token j of a sequence is in the pool, in packs: `key` is its key's first pack (pack p
// at key + p * block_size), `value` its value's (pack p at value + p).
struct TokenAddress {
    key: u32,
    value: u32,
}

// Where token j of K/V head g of sequence b is in the pool: the block table gives the block,
// j % block_size the slot. Both tensors hold PACKS * block_size packs per (block, K/V head).
fn token_address(b: u32, g: u32, j: u32) -> TokenAddress {
    let block = block_table[b * params.table_stride + j / params.block_size];
    let slot = j % params.block_size;
    let head_start = (block * params.kv_heads + g) * params.block_size * PACKS;
    return TokenAddress(head_start + slot, head_start + slot * PACKS);
}

// The 8 f16 of a pack as two vec4<f32>.
fn low_half(pack: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(pack.x), unpack2x16float(pack.y));
}
fn high_half(pack: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(pack.z), unpack2x16float(pack.w));
}

@compute @workgroup_size(THREADS)
fn split_partials(
    @builtin(local_invocation_index) tid: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
) {
    let split = wg.x;
    let g = wg.y / (params.group_size / ROWS);                     // K/V head
    let first_head = g * params.group_size + (wg.y % (params.group_size / ROWS)) * ROWS;
    let b = wg.z;
    let len = lens[b];
    let chunk = (len + params.splits - 1u) / params.splits;
    let start = min(split * chunk, len);
    let end = min(start + chunk, len);

    // This workgroup's queries, scaled so that exp2(q.k) = e^(scale q.k).
    for (var i = tid; i < ROWS * HEAD_DIM / 4u; i += THREADS) {
        let row = i / (HEAD_DIM / 4u);
        q_rows[i] = q[(b * params.q_heads + first_head + row) * (HEAD_DIM / 4u) + i % (HEAD_DIM / 4u)] * params.scale_log2;
    }
    workgroupBarrier();

    let pack = tid % PACKS;
    let lane = tid / PACKS;
    var m: array<f32, MAX_ROWS>;            // running maximum of each row (log2 units)
    var l: array<f32, MAX_ROWS>;            // this thread's keys' running sum of exp2(s - m)
    var rescales: array<f32, MAX_ROWS>;     // what this tile multiplies the held sums by
    // unroll
    for (var r = 0u; r < ROWS; r++) {
        m[r] = NO_KEY;
        l[r] = 0.0;
        acc_held[(2u * r) * THREADS + tid] = vec4<f32>(0.0);
        acc_held[(2u * r + 1u) * THREADS + tid] = vec4<f32>(0.0);
    }

    for (var tile = start; tile < end; tile += TILE) {
        let n = min(TILE, end - tile);
        // Scores: one key per thread, its dot product with every row.
        var tile_max: array<f32, MAX_ROWS>;
        // unroll
        for (var r = 0u; r < ROWS; r++) {
            tile_max[r] = NO_KEY;
        }
        for (var t0 = tid; t0 < n; t0 += KEY_STEPS * THREADS) {
            // KEY_STEPS keys at once (the last ones clamped to the tile and not stored), so
            // that their loads are in flight together.
            var keys: array<TokenAddress, KEY_STEPS>;
            // unroll
            for (var u = 0u; u < KEY_STEPS; u++) {
                keys[u] = token_address(b, g, tile + min(t0 + u * THREADS, n - 1u));
            }
            var dots: array<f32, 2u * MAX_ROWS>; // [u * MAX_ROWS + r], KEY_STEPS <= 2
            // unroll
            for (var p = 0u; p < PACKS; p++) {
                // unroll
                for (var u = 0u; u < KEY_STEPS; u++) {
                    let k8 = k_pool[keys[u].key + p * params.block_size];
                    let lo = low_half(k8);
                    let hi = high_half(k8);
                    // unroll
                    for (var r = 0u; r < ROWS; r++) {
                        let at = r * (HEAD_DIM / 4u) + 2u * p;
                        dots[u * MAX_ROWS + r] += dot(q_rows[at], lo) + dot(q_rows[at + 1u], hi);
                    }
                }
            }
            // unroll
            for (var u = 0u; u < KEY_STEPS; u++) {
                let t = t0 + u * THREADS;
                if t < n {
                    // The value phase reads the address from here, without a division.
                    value_at[t] = keys[u].value;
                    // unroll
                    for (var r = 0u; r < ROWS; r++) {
                        scores[r * TILE + t] = dots[u * MAX_ROWS + r];
                        tile_max[r] = max(tile_max[r], dots[u * MAX_ROWS + r]);
                    }
                }
            }
        }
        // Each row's maximum over the tile: a tree over the threads.
        // unroll
        for (var r = 0u; r < ROWS; r++) {
            reduce[r * THREADS + tid] = tile_max[r];
        }
        workgroupBarrier();
        for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
            if tid < stride {
                // unroll
                for (var r = 0u; r < ROWS; r++) {
                    let i = r * THREADS + tid;
                    reduce[i] = max(reduce[i], reduce[i + stride]);
                }
            }
            workgroupBarrier();
        }
        // The online softmax: rescale what was summed under the old maximum.
        // unroll
        for (var r = 0u; r < ROWS; r++) {
            let new_max = max(m[r], reduce[r * THREADS]);
            let rescale = exp2(m[r] - new_max);
            m[r] = new_max;
            l[r] *= rescale;
            rescales[r] = rescale;
        }
        // Weights: each thread turns its own keys' scores into p = 2^(s - m), once.
        for (var t = tid; t < n; t += THREADS) {
            // unroll
            for (var r = 0u; r < ROWS; r++) {
                let p = exp2(scores[r * TILE + t] - m[r]);
                scores[r * TILE + t] = p;
                l[r] += p;
            }
        }
        workgroupBarrier();
        // P V: this thread's 8 dims, over every LANES-th key of the tile.
        if lane < LANES {
            var acc: array<vec4<f32>, 2u * MAX_ROWS>;  // this thread's 8 dims of each row: [row * 2 + half]
            // unroll
            for (var r = 0u; r < ROWS; r++) {
                acc[2u * r] = acc_held[(2u * r) * THREADS + tid] * rescales[r];
                acc[2u * r + 1u] = acc_held[(2u * r + 1u) * THREADS + tid] * rescales[r];
            }
            for (var t0 = lane; t0 < n; t0 += PV_STEPS * LANES) {
                // PV_STEPS values loaded at once (the last ones clamped, weighted 0).
                var values: array<vec4<u32>, PV_STEPS>;
                // unroll
                for (var u = 0u; u < PV_STEPS; u++) {
                    values[u] = v_pool[value_at[min(t0 + u * LANES, n - 1u)] + pack];
                }
                // unroll
                for (var u = 0u; u < PV_STEPS; u++) {
                    let t = t0 + u * LANES;
                    let lo = low_half(values[u]);
                    let hi = high_half(values[u]);
                    // unroll
                    for (var r = 0u; r < ROWS; r++) {
                        let p = select(0.0, scores[r * TILE + min(t, n - 1u)], t < n);
                        acc[2u * r] += p * lo;
                        acc[2u * r + 1u] += p * hi;
                    }
                }
            }
            // unroll
            for (var r = 0u; r < ROWS; r++) {
                acc_held[(2u * r) * THREADS + tid] = acc[2u * r];
                acc_held[(2u * r + 1u) * THREADS + tid] = acc[2u * r + 1u];
            }
        }
        workgroupBarrier(); // scores, reduce and value_at are rewritten by the next tile
    }

    // Each row's sum of weights: a tree over the threads.
    // unroll
    for (var r = 0u; r < ROWS; r++) {
        reduce[r * THREADS + tid] = l[r];
    }
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
        if tid < stride {
            // unroll
            for (var r = 0u; r < ROWS; r++) {
                let i = r * THREADS + tid;
                reduce[i] += reduce[i + stride];
            }
        }
        workgroupBarrier();
    }
    // Add the lanes' sums, one row at a time, and write the row's partial result.
    // unroll
    for (var r = 0u; r < ROWS; r++) {
        lane_sums[2u * tid] = acc_held[(2u * r) * THREADS + tid];
        lane_sums[2u * tid + 1u] = acc_held[(2u * r + 1u) * THREADS + tid];
        workgroupBarrier();
        if tid < PACKS {
            var lo = vec4<f32>(0.0);
            var hi = vec4<f32>(0.0);
            for (var i = 0u; i < LANES; i++) {
                lo += lane_sums[2u * (i * PACKS + tid)];
                hi += lane_sums[2u * (i * PACKS + tid) + 1u];
            }
            let sum = reduce[r * THREADS];
            let slot = (b * params.q_heads + first_head + r) * params.splits + split;
            let inverse = select(0.0, 1.0 / sum, sum > 0.0);
            partial_o[slot * (HEAD_DIM / 4u) + 2u * tid] = lo * inverse;
            partial_o[slot * (HEAD_DIM / 4u) + 2u * tid + 1u] = hi * inverse;
            if tid == 0u {
                partial_lse[slot] = select(NO_KEY, m[r] + log2(sum), sum > 0.0);
            }
        }
        workgroupBarrier();
    }
}

// ---------------------------------------------------------------------------------------------
// The merge: O = sum_s 2^(L_s - L) O_s with L = log2 sum_s 2^(L_s), then L in natural units.
// Each thread owns one vec4 of O and every MERGE_LANES-th split. It loads its first
// MERGE_STEPS partial results before anything else: they do not depend on the weights, so
// their latency overlaps the reduction that finds L (one tree over (max, sum) pairs, combined
// as the online softmax combines them).

@group(0) @binding(8) var<storage, read_write> out_o: array<vec4<f32>>; // [B, Hq, HEAD_DIM/4]
@group(0) @binding(9) var<storage, read_write> out_lse: array<f32>;     // [B, Hq]

const MERGE_THREADS: u32 = 128u;
const MAX_SPLITS: u32 = 1024u;
const MERGE_LANES: u32 = MERGE_THREADS / (HEAD_DIM / 4u);

var<workgroup> split_lse: array<f32, MAX_SPLITS>;
var<workgroup> merge_max: array<f32, MERGE_THREADS>;
var<workgroup> merge_sum: array<f32, MERGE_THREADS>;
var<workgroup> merge_sums: array<vec4<f32>, MERGE_THREADS>;

@compute @workgroup_size(MERGE_THREADS)
fn merge_splits(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.y * params.q_heads + wg.x; // (sequence, query head)
    let first = row * params.splits;
    let last = params.splits - 1u;
    let i = tid % (HEAD_DIM / 4u);
    let lane = tid / (HEAD_DIM / 4u); // lanes beyond MERGE_LANES load (clamped) but do not add
    var parts: array<vec4<f32>, MERGE_STEPS>;
    // unroll
    for (var u = 0u; u < MERGE_STEPS; u++) {
        parts[u] = partial_o[(first + min(lane + u * MERGE_LANES, last)) * (HEAD_DIM / 4u) + i];
    }

    // L = log2 sum_s 2^(L_s) as a largest L_s and a sum of 2^(L_s - largest), per thread over
    // its splits, then over the threads.
    var largest = NO_KEY;
    var total = 0.0;
    for (var s = tid; s < params.splits; s += MERGE_THREADS) {
        let lse = partial_lse[first + s];
        split_lse[s] = lse;
        let new_largest = max(largest, lse);
        total = total * exp2(largest - new_largest) + exp2(lse - new_largest);
        largest = new_largest;
    }
    merge_max[tid] = largest;
    merge_sum[tid] = total;
    workgroupBarrier();
    for (var stride = MERGE_THREADS / 2u; stride > 0u; stride /= 2u) {
        if tid < stride {
            let other = tid + stride;
            let m = max(merge_max[tid], merge_max[other]);
            merge_sum[tid] = merge_sum[tid] * exp2(merge_max[tid] - m) + merge_sum[other] * exp2(merge_max[other] - m);
            merge_max[tid] = m;
        }
        workgroupBarrier();
    }
    largest = merge_max[0];
    total = merge_sum[0];

    var o = vec4<f32>(0.0);
    if lane < MERGE_LANES {
        var s0 = lane;
        loop {
            // unroll
            for (var u = 0u; u < MERGE_STEPS; u++) {
                let s = s0 + u * MERGE_LANES;
                o += select(0.0, exp2(split_lse[min(s, last)] - largest), s <= last) * parts[u];
            }
            s0 += MERGE_STEPS * MERGE_LANES;
            if s0 > last {
                break;
            }
            // unroll
            for (var u = 0u; u < MERGE_STEPS; u++) {
                parts[u] = partial_o[(first + min(s0 + u * MERGE_LANES, last)) * (HEAD_DIM / 4u) + i];
            }
        }
    }
    merge_sums[tid] = o;
    workgroupBarrier();
    if tid < HEAD_DIM / 4u {
        var sum = vec4<f32>(0.0);
        for (var k = 0u; k < MERGE_LANES; k++) {
            sum += merge_sums[k * (HEAD_DIM / 4u) + tid];
        }
        out_o[row * (HEAD_DIM / 4u) + tid] = sum / total;
    }
    if tid == 0u {
        // log2 -> natural log; -inf (built from its bits) if no split saw a key
        out_lse[row] = select(bitcast<f32>(0xff800000u), (largest + log2(total)) * 0.6931471805599453, largest > NO_KEY);
    }
}
