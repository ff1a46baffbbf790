// NOT STARTED: delete this line when you start.
//
// Exercise 08: naive attention as three kernels (see README.md and the book's chapter 8).
//   scores:       S = scale * Q K^T            one thread per score    [slices, Nq, Nkv]
//   softmax:      P = softmax(S), L            one thread per row      (P overwrites S)
//   weighted_sum: O = P V                      one thread per output   [slices, Nq, D]
//
// Layout: Q, O [slices, Nq, D]; K, V [slices, Nkv, D]; S [slices, Nq, Nkv]; L [slices, Nq];
// row-major f32, slices = B * H. Everything above `// TODO` lines is given.

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

override TILE: u32 = 16u;
override ROWS: u32 = 64u;

// How many keys query row `row` sees: all of them, or with the bottom-right causal mask a
// prefix of length clamp(row + 1 + Nkv - Nq, 0, Nkv).
fn visible_keys(row: u32) -> u32 {
    // TODO: return params.kv_len without the mask; the clamped prefix length with it.
    return params.kv_len;
}

// One thread per score: id.x = key j, id.y = query row i, id.z = slice.
@compute @workgroup_size(TILE, TILE)
fn scores(@builtin(global_invocation_id) id: vec3<u32>) {
    // TODO: return if i >= Nq or j is not visible; else
    //       s[(slice * Nq + i) * Nkv + j] = scale * (q row i . k row j).
    s[0] = q[0] * k[0];
}

// One thread per row: id.x = row i, id.y = slice. Overwrites row i of S with P, writes L.
@compute @workgroup_size(ROWS)
fn softmax(@builtin(global_invocation_id) id: vec3<u32>) {
    // TODO: m = max of the visible scores; l = sum of exp(s - m); P = exp(s - m) / l for
    //       visible keys and 0 for masked ones; L = m + ln(l), or -inf for a row that sees
    //       no key (bitcast<f32>(0xff800000u) from a `var`).
    lse[0] = s[0];
}

// One thread per output number: id.x = d, id.y = query row i, id.z = slice.
@compute @workgroup_size(TILE, TILE)
fn weighted_sum(@builtin(global_invocation_id) id: vec3<u32>) {
    // TODO: o[(slice * Nq + i) * D + d] = sum over visible keys j of P[i, j] * v[j, d].
    o[0] = s[0] * v[0];
}
