// GPT-2's linear layers on the GPU: y = x W + b for the activations x [rows, inner] and a
// Conv1D weight W stored [inner, cols] (GPT-2's layout), or, with TRANSPOSED, W stored
// [cols, inner] (the tied head reads the token embeddings [V, C] as W^T).
//
// The classic tiled matrix product: a workgroup of 16 x 16 threads computes a 16 x 16 tile
// of y, one element per thread. For each 16-wide slice of the inner dimension, every thread
// loads one element of x's and one of W's tile into workgroup memory, the workgroup waits at
// a barrier, and each thread adds its 16 products from there: every value loaded from memory
// is used 16 times.
//
// The epilogue saves a pass over y: 0 stores x W + b, 1 stores gelu(x W + b) (the MLP's first
// layer), 2 adds x W + b to y (a residual add: y is the residual stream).

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

override TRANSPOSED: bool = false;
override EPILOGUE: u32 = 0u;

const TILE: u32 = 16u;
const STORE: u32 = 0u;
const GELU: u32 = 1u;
const ADD: u32 = 2u;

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// x_tile[r][k] = x[row0 + r, k0 + k]; w_tile[k][c] = W[k0 + k, col0 + c].
var<workgroup> x_tile: array<array<f32, TILE>, TILE>;
var<workgroup> w_tile: array<array<f32, TILE>, TILE>;

fn x_at(row: u32, k: u32) -> f32 {
    if row < sizes.rows && k < sizes.inner {
        return x[row * sizes.inner + k];
    }
    return 0.0;
}

// W[k, col] of the product, whichever way it is stored.
fn w_at(k: u32, col: u32) -> f32 {
    if k >= sizes.inner || col >= sizes.cols {
        return 0.0;
    }
    if TRANSPOSED {
        return weight[col * sizes.inner + k];
    }
    return weight[k * sizes.cols + col];
}

// GPT-2's gelu_new: 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
fn gelu(v: f32) -> f32 {
    let sqrt_2_over_pi = 0.7978846;
    return 0.5 * v * (1.0 + tanh(sqrt_2_over_pi * (v + 0.044715 * v * v * v)));
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_id) local: vec3u) {
    let row0 = group.y * TILE;
    let col0 = group.x * TILE;
    var sum = 0.0;
    for (var k0 = 0u; k0 < sizes.inner; k0 += TILE) {
        x_tile[local.y][local.x] = x_at(row0 + local.y, k0 + local.x);
        if TRANSPOSED {
            // Neighbouring threads (local.x) read neighbouring k of one stored row.
            w_tile[local.x][local.y] = w_at(k0 + local.x, col0 + local.y);
        } else {
            // Neighbouring threads read neighbouring columns of one stored row.
            w_tile[local.y][local.x] = w_at(k0 + local.y, col0 + local.x);
        }
        workgroupBarrier();
        for (var k = 0u; k < TILE; k++) {
            sum += x_tile[local.y][k] * w_tile[k][local.x];
        }
        workgroupBarrier();
    }
    let row = row0 + local.y;
    let col = col0 + local.x;
    if row >= sizes.rows || col >= sizes.cols {
        return;
    }
    let value = sum + bias[col];
    let out = row * sizes.cols + col;
    switch EPILOGUE {
        case GELU: { y[out] = gelu(value); }
        case ADD: { y[out] += value; }
        default: { y[out] = value; }
    }
}
