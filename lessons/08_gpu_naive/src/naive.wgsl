// Naive attention in WGSL, f32: lesson 01's three steps as three kernels, each a separate
// dispatch that reads and writes global memory (storage buffers):
//   scores:       S = scale * Q K^T            one thread per score    [slices, Nq, Nkv]
//   softmax:      P = softmax(S), L            one thread per row      (P overwrites S)
//   weighted_sum: O = P V                      one thread per output   [slices, Nq, D]
// The whole N x N matrix S lives in GPU memory between the dispatches: that is the cost
// FlashAttention removes.
//
// Layout: Q, O [slices, Nq, D]; K, V [slices, Nkv, D]; S [slices, Nq, Nkv]; L [slices, Nq].

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
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> s: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;

// Threads per workgroup along each axis of the 2-D kernels (TILE x TILE threads), and along
// the rows for the softmax. Overridable when the pipeline is created.
override TILE: u32 = 16u;
override ROWS: u32 = 64u;

// How many keys query row `row` sees: all of them, or with the bottom-right causal mask the
// keys j <= row + Nkv - Nq, a prefix of length clamp(row + 1 + Nkv - Nq, 0, Nkv).
fn visible_keys(row: u32) -> u32 {
    if params.causal == 0u {
        return params.kv_len;
    }
    let end = i32(row) + 1 + i32(params.kv_len) - i32(params.q_len);
    return u32(clamp(end, 0, i32(params.kv_len)));
}

// ANCHOR: scores
// S[i, j] = scale * q_i . k_j, for every visible key (masked entries are never read).
@compute @workgroup_size(TILE, TILE)
fn scores(@builtin(global_invocation_id) id: vec3<u32>) {
    let j = id.x;
    let i = id.y;
    let slice = id.z;
    if i >= params.q_len || j >= visible_keys(i) {
        return;
    }
    let d_len = params.head_dim;
    let q_row = (slice * params.q_len + i) * d_len;
    let k_row = (slice * params.kv_len + j) * d_len;
    var dot = 0.0;
    for (var d = 0u; d < d_len; d++) {
        dot += q[q_row + d] * k[k_row + d];
    }
    s[(slice * params.q_len + i) * params.kv_len + j] = params.scale * dot;
}
// ANCHOR_END: scores

// ANCHOR: softmax
// Row i of S becomes row i of P = exp(S - max) / sum, in place; L = max + ln(sum). Three
// passes over the row in global memory: max, sum, normalise.
@compute @workgroup_size(ROWS)
fn softmax(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    let slice = id.y;
    if i >= params.q_len {
        return;
    }
    let row = (slice * params.q_len + i) * params.kv_len;
    let keys = visible_keys(i);
    var m = -3.4028235e38;  // lowest f32: below every real score
    for (var j = 0u; j < keys; j++) {
        m = max(m, s[row + j]);
    }
    var l = 0.0;
    for (var j = 0u; j < keys; j++) {
        l += exp(s[row + j] - m);
    }
    for (var j = 0u; j < params.kv_len; j++) {
        s[row + j] = select(0.0, exp(s[row + j] - m) / l, j < keys);  // masked: P = 0
    }
    var neg_inf_bits = 0xff800000u;  // -inf has no WGSL literal; build it from bits
    lse[slice * params.q_len + i] = select(bitcast<f32>(neg_inf_bits), m + log(l), keys > 0u);
}
// ANCHOR_END: softmax

// ANCHOR: weighted_sum
// O[i, d] = sum_j P[i, j] V[j, d] over the visible keys (a row that sees none gets 0).
@compute @workgroup_size(TILE, TILE)
fn weighted_sum(@builtin(global_invocation_id) id: vec3<u32>) {
    let d = id.x;
    let i = id.y;
    let slice = id.z;
    let d_len = params.head_dim;
    if i >= params.q_len || d >= d_len {
        return;
    }
    let p_row = (slice * params.q_len + i) * params.kv_len;
    let v_first = slice * params.kv_len * d_len;
    var sum = 0.0;
    for (var j = 0u; j < visible_keys(i); j++) {
        sum += s[p_row + j] * v[v_first + j * d_len + d];
    }
    o[(slice * params.q_len + i) * d_len + d] = sum;
}
// ANCHOR_END: weighted_sum
