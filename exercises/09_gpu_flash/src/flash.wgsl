// NOT STARTED: delete this line when you start.
//
// Exercise 09: FlashAttention-2 forward in WGSL, f32 (see README.md and the book's chapter 9).
// One workgroup per (slice, query tile of BLOCK_Q rows), one thread per query row; K and V
// tiles of BLOCK_KV keys staged in workgroup memory; online softmax in registers.
//
// Layout: Q, O [slices, Nq, CHUNKS]; K, V [slices, Nkv, CHUNKS] of vec4<f32> (the host pads
// rows with zeros to a multiple of 4 floats); L [slices, Nq] of f32. slices = B * H.
// Everything outside the TODOs is given; do not change the bindings or the constants' names.

override BLOCK_Q: u32 = 64u;   // Br: query rows per workgroup = threads per workgroup
override BLOCK_KV: u32 = 32u;  // Bc: keys per tile
override HEAD_DIM: u32 = 64u;  // D
override CHUNKS: u32 = (HEAD_DIM + 3u) / 4u;  // vec4s per row
const MAX_CHUNKS: u32 = 32u;   // D <= 128
const MAX_BLOCK_KV: u32 = 64u; // Bc <= 64

struct Params {
    slices: u32,    // B * H
    q_len: u32,     // Nq
    kv_len: u32,    // Nkv
    head_dim: u32,  // D
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
// Given: how many tiles of keys each workgroup loaded, [slices, query tiles]. load_tile counts
// them and the end of flash_forward writes the count: the grader checks causal skipping with it.
@group(0) @binding(6) var<storage, read_write> tiles_loaded: array<u32>;
var<private> my_tiles_loaded: u32 = 0u;

var<workgroup> k_tile: array<vec4<f32>, BLOCK_KV * CHUNKS>;
var<workgroup> v_tile: array<vec4<f32>, BLOCK_KV * CHUNKS>;

const LOWEST: f32 = -3.4028235e38;  // the running max before any key: exp(LOWEST - x) = 0

// How many keys query row `row` sees (a prefix): all, or clamp(row + 1 + Nkv - Nq, 0, Nkv).
fn visible_keys(row: u32) -> u32 {
    if params.causal == 0u {
        return params.kv_len;
    }
    let end = i32(row) + 1 + i32(params.kv_len) - i32(params.q_len);
    return u32(clamp(end, 0, i32(params.kv_len)));
}

// Copies keys and values [kv_start, kv_start + BLOCK_KV) of `slice` into k_tile and v_tile,
// every thread a share.
fn load_tile(slice: u32, kv_start: u32, thread: u32) {
    my_tiles_loaded += 1u;  // given: load every tile with this function
    // TODO: keys = min(BLOCK_KV, Nkv - kv_start); copy the keys * CHUNKS vec4s that start at
    //       (slice * Nkv + kv_start) * CHUNKS, thread t taking t, t + BLOCK_Q, ...
}

@compute @workgroup_size(BLOCK_Q)
fn flash_forward(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(num_workgroups) grid: vec3<u32>,
    @builtin(local_invocation_index) thread: u32,
) {
    let slice = tile.y;
    let q_start = tile.x * BLOCK_Q;
    let row = q_start + thread;
    let row_valid = row < params.q_len;

    var q_row: array<vec4<f32>, MAX_CHUNKS>;
    var acc: array<vec4<f32>, MAX_CHUNKS>;
    var m = LOWEST;
    var l = 0.0;
    var s: array<f32, MAX_BLOCK_KV>;

    // TODO: 1. read this thread's query row into q_row (if row_valid) and zero acc.
    //       2. loop over key tiles up to the last key the workgroup's LAST row can see; in
    //          each: load_tile, barrier, update (m, l, acc) with the keys this row sees in the
    //          tile, barrier. Every thread must reach every barrier.
    //       3. if row_valid: o = acc / l and lse = m + ln(l), or O = 0 and L = -inf when the
    //          row saw no key (var bits = 0xff800000u; bitcast<f32>(bits)).
    workgroupBarrier();

    // Given: report how many tiles this workgroup loaded.
    if thread == 0u {
        tiles_loaded[slice * grid.x + tile.x] = my_tiles_loaded;
    }
}
