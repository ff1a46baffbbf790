// GPT-2's linear layers on the GPU: y = x W + b for the activations x [rows, inner] and a
// Conv1D weight W stored [inner, cols] (GPT-2's layout), or, with TRANSPOSED, W stored
// [cols, inner] (the tied head reads the token embeddings [V, C] as W^T).
//
// A tiled matrix product with register micro-tiles, as lesson 10's version 1 does for
// attention's scores: a workgroup of 16 x 16 threads computes a 64 x 64 tile of y, each
// thread a 4 x 4 block of it (rows ty + 16 i, columns tx + 16 j). For each 16-wide slice of
// the inner dimension the workgroup stages 64 x 16 of x and 16 x 64 of W in workgroup memory
// (4 elements per thread each, neighbouring threads reading neighbouring addresses), waits at
// a barrier, and each thread does 16 x 16 multiply-adds from 8 loads per step of k: every
// number loaded from workgroup memory feeds 4 of them (1 with one output per thread).
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

const GROUP: u32 = 16u;          // threads along each side of the workgroup
const PER_THREAD: u32 = 4u;      // outputs along each side of a thread's block
const TILE: u32 = GROUP * PER_THREAD;  // 64: outputs along each side of the tile
const DEPTH: u32 = 16u;          // the slice of the inner dimension staged at a time
const LOADS: u32 = TILE * DEPTH / (GROUP * GROUP);  // 4 elements of each tile per thread
const STORE: u32 = 0u;
const GELU: u32 = 1u;
const ADD: u32 = 2u;

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// x_tile[r][k] = x[row0 + r, k0 + k]; w_tile[k][c] = W[k0 + k, col0 + c].
var<workgroup> x_tile: array<array<f32, DEPTH>, TILE>;
var<workgroup> w_tile: array<array<f32, TILE>, DEPTH>;

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

// Stages the slice k0 .. k0 + DEPTH of both tiles. Thread t loads elements t + 256 l: along
// k for x (and for W^T, stored along k), along the columns for W.
fn stage(row0: u32, col0: u32, k0: u32, thread: u32) {
    for (var l = 0u; l < LOADS; l++) {
        let e = thread + l * GROUP * GROUP;
        x_tile[e / DEPTH][e % DEPTH] = x_at(row0 + e / DEPTH, k0 + e % DEPTH);
        if TRANSPOSED {
            w_tile[e % DEPTH][e / DEPTH] = w_at(k0 + e % DEPTH, col0 + e / DEPTH);
        } else {
            w_tile[e / TILE][e % TILE] = w_at(k0 + e / TILE, col0 + e % TILE);
        }
    }
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) group: vec3u,
    @builtin(local_invocation_id) local: vec3u,
    @builtin(local_invocation_index) thread: u32,
) {
    let row0 = group.y * TILE;
    let col0 = group.x * TILE;
    var sums: array<array<f32, PER_THREAD>, PER_THREAD>;
    for (var k0 = 0u; k0 < sizes.inner; k0 += DEPTH) {
        stage(row0, col0, k0, thread);
        workgroupBarrier();
        for (var k = 0u; k < DEPTH; k++) {
            var a: array<f32, PER_THREAD>;
            var b: array<f32, PER_THREAD>;
            for (var i = 0u; i < PER_THREAD; i++) {
                a[i] = x_tile[local.y + GROUP * i][k];
                b[i] = w_tile[k][local.x + GROUP * i];
            }
            for (var i = 0u; i < PER_THREAD; i++) {
                for (var j = 0u; j < PER_THREAD; j++) {
                    sums[i][j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < PER_THREAD; i++) {
        for (var j = 0u; j < PER_THREAD; j++) {
            let row = row0 + local.y + GROUP * i;
            let col = col0 + local.x + GROUP * j;
            if row < sizes.rows && col < sizes.cols {
                let value = sums[i][j] + bias[col];
                let out = row * sizes.cols + col;
                switch EPILOGUE {
                    case GELU: { y[out] = gelu(value); }
                    case ADD: { y[out] += value; }
                    default: { y[out] = value; }
                }
            }
        }
    }
}
