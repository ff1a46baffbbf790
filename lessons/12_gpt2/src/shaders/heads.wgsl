// Between the model's [rows, C] activations and the attention kernels' heads.
//
// split_heads: c_attn's output qkv [rows, 3C] holds Q, K and V side by side, each H heads of
// D channels side by side. Q goes to q [H, rows, row_stride]; K and V go to this layer's
// cache, k_cache and v_cache [H, capacity, row_stride], at positions start .. start + rows.
// Rows are padded to the attention kernel's row_stride; the padding is never written and
// stays zero (wgpu zeroes new buffers), which adds nothing to a dot product. The _f16 entry
// point stores two neighbouring channels per u32, as the tensor-core kernels read them.
//
// merge_heads: the attention output o [H, rows, row_stride] back to [rows, C], heads side
// by side.

struct Sizes {
    rows: u32,
    cols: u32,
    inner: u32,
    start: u32,
    heads: u32,
    head_dim: u32,
    row_stride: u32,
    capacity: u32,
    epsilon: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(5) var<storage, read_write> q_f16: array<u32>;
@group(0) @binding(6) var<storage, read_write> k_cache_f16: array<u32>;
@group(0) @binding(7) var<storage, read_write> v_cache_f16: array<u32>;
@group(0) @binding(8) var<storage, read> o: array<f32>;
@group(0) @binding(9) var<storage, read_write> merged: array<f32>;

// Where channel j (0 .. 3C) of token row goes: which of Q, K, V (0, 1, 2), and the element's
// index in q (for Q) or in the caches (for K and V).
struct Destination {
    part: u32,
    index: u32,
}

fn destination(row: u32, j: u32) -> Destination {
    let c = sizes.heads * sizes.head_dim;
    let part = j / c;
    let head = (j % c) / sizes.head_dim;
    let d = j % sizes.head_dim;
    if part == 0u {
        return Destination(0u, (head * sizes.rows + row) * sizes.row_stride + d);
    }
    let position = sizes.start + row;
    return Destination(part, (head * sizes.capacity + position) * sizes.row_stride + d);
}

@compute @workgroup_size(64)
fn split_heads(@builtin(global_invocation_id) id: vec3u) {
    let row = id.y;
    let j = id.x;
    let c = sizes.heads * sizes.head_dim;
    if row >= sizes.rows || j >= 3u * c {
        return;
    }
    let value = qkv[row * 3u * c + j];
    let to = destination(row, j);
    switch to.part {
        case 0u: { q[to.index] = value; }
        case 1u: { k_cache[to.index] = value; }
        default: { v_cache[to.index] = value; }
    }
}

// One thread per pair of channels (j, j + 1), j even: D and row_stride are even, so a pair
// never straddles two heads and lands in one u32.
@compute @workgroup_size(64)
fn split_heads_f16(@builtin(global_invocation_id) id: vec3u) {
    let row = id.y;
    let j = 2u * id.x;
    let c = sizes.heads * sizes.head_dim;
    if row >= sizes.rows || j >= 3u * c {
        return;
    }
    let first = row * 3u * c + j;
    let pair = pack2x16float(vec2f(qkv[first], qkv[first + 1u]));
    let to = destination(row, j);
    switch to.part {
        case 0u: { q_f16[to.index / 2u] = pair; }
        case 1u: { k_cache_f16[to.index / 2u] = pair; }
        default: { v_cache_f16[to.index / 2u] = pair; }
    }
}

@compute @workgroup_size(64)
fn merge_heads(@builtin(global_invocation_id) id: vec3u) {
    let row = id.y;
    let j = id.x;
    let c = sizes.heads * sizes.head_dim;
    if row >= sizes.rows || j >= c {
        return;
    }
    let head = j / sizes.head_dim;
    let d = j % sizes.head_dim;
    merged[row * c + j] = o[(head * sizes.rows + row) * sizes.row_stride + d];
}
