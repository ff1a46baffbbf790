// The embeddings on the GPU: x[i, c] = wte[token_i, c] + wpe[start + i, c] for the tokens
// at positions start .. start + rows. One thread per element; the host has checked every
// token id and position.

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
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> wte: array<f32>;
@group(0) @binding(3) var<storage, read> wpe: array<f32>;
@group(0) @binding(4) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3u) {
    let row = id.y;
    let c = id.x;
    if row >= sizes.rows || c >= sizes.cols {
        return;
    }
    let token = tokens[row];
    x[row * sizes.cols + c] = wte[token * sizes.cols + c] + wpe[(sizes.start + row) * sizes.cols + c];
}
