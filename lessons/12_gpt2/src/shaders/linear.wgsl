// GPT-2's linear layers on the GPU: y = x W + b for the activations x [rows, inner] and a
// Conv1D weight W stored [inner, cols] (GPT-2's layout), or, with TRANSPOSED, W stored
// [cols, inner] (the tied head reads the token embeddings [V, C] as W^T).
//
// A tiled matrix product with register micro-tiles, as lesson 10's version 1 does for
// attention's scores. A workgroup of 16 x 16 threads computes a tile of y of 16 ROW_BLOCKS
// rows and 64 columns; thread (r, c) computes rows r + 16 i (i < ROW_BLOCKS) and columns
// c + 16 j (j < 4). For each 16-wide slice of the inner dimension the workgroup stages that
// slice of x's rows and of W's columns in workgroup memory (neighbouring threads reading
// neighbouring addresses), waits at a barrier, and for each k of the slice each thread loads
// ROW_BLOCKS values of x and 4 of W and does 4 ROW_BLOCKS multiply-adds: with 4 row blocks,
// 2 multiply-adds per number loaded from workgroup memory (with one output per thread, 1 per
// 2 loads). The host takes 4, 2 or 1 row blocks, fewer for short sequences, where 64-row
// tiles would leave most of the GPU idle.
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
override ROW_BLOCKS: u32 = 4u;   // 1, 2 or 4

const GROUP: u32 = 16u;          // threads along each side of the workgroup
const COLS: u32 = 64u;           // columns of the tile: 4 per thread
const MAX_ROWS: u32 = 64u;       // rows of the tile with 4 row blocks
const DEPTH: u32 = 16u;          // the slice of the inner dimension staged at a time
const THREADS: u32 = GROUP * GROUP;
const STORE: u32 = 0u;
const GELU: u32 = 1u;
const ADD: u32 = 2u;

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// x_tile[r][k] = x[row0 + r, k0 + k]; w_tile[k][c] = W[k0 + k, col0 + c].
var<workgroup> x_tile: array<array<f32, DEPTH>, MAX_ROWS>;
var<workgroup> w_tile: array<array<f32, COLS>, DEPTH>;

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

// Stages the slice k0 .. k0 + DEPTH of both tiles: x's 16 ROW_BLOCKS rows (ROW_BLOCKS
// elements per thread, along k) and W's 64 columns (4 per thread: along the columns, or
// along k for W^T, whose stored rows run along k).
fn stage(row0: u32, col0: u32, k0: u32, thread: u32) {
    for (var l = 0u; l < ROW_BLOCKS; l++) {
        let e = thread + l * THREADS;
        x_tile[e / DEPTH][e % DEPTH] = x_at(row0 + e / DEPTH, k0 + e % DEPTH);
    }
    for (var l = 0u; l < COLS * DEPTH / THREADS; l++) {
        let e = thread + l * THREADS;
        if TRANSPOSED {
            w_tile[e % DEPTH][e / DEPTH] = w_at(k0 + e % DEPTH, col0 + e / DEPTH);
        } else {
            w_tile[e / COLS][e % COLS] = w_at(k0 + e / COLS, col0 + e % COLS);
        }
    }
}

// y[row, col0 + 16 j] for j < 4 from one thread's sums (plus the bias, through the
// epilogue), skipping what lies beyond y.
fn store(row: u32, col0: u32, sums: vec4f) {
    if row >= sizes.rows {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let col = col0 + GROUP * j;
        if col < sizes.cols {
            let value = sums[j] + bias[col];
            let out = row * sizes.cols + col;
            switch EPILOGUE {
                case GELU: { y[out] = gelu(value); }
                case ADD: { y[out] += value; }
                default: { y[out] = value; }
            }
        }
    }
}

// ANCHOR: main
@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) group: vec3u,
    @builtin(local_invocation_id) local: vec3u,
    @builtin(local_invocation_index) thread: u32,
) {
    let row0 = group.y * GROUP * ROW_BLOCKS;
    let col0 = group.x * COLS;
    let r = local.y;
    let c = local.x;
    // The thread's sums, a vec4 (4 columns) per row block: named variables, not an array, so
    // that they stay in registers (a private array indexed in a loop may be put in memory:
    // measured on an H200, the whole model 13 times slower). Row blocks beyond ROW_BLOCKS
    // stay unused; the compiler drops them, ROW_BLOCKS being a constant of the pipeline.
    var sums0 = vec4f(0.0);
    var sums1 = vec4f(0.0);
    var sums2 = vec4f(0.0);
    var sums3 = vec4f(0.0);
    for (var k0 = 0u; k0 < sizes.inner; k0 += DEPTH) {
        stage(row0, col0, k0, thread);
        workgroupBarrier();
        for (var k = 0u; k < DEPTH; k++) {
            let w = vec4f(w_tile[k][c], w_tile[k][c + GROUP], w_tile[k][c + 2u * GROUP],
                          w_tile[k][c + 3u * GROUP]);
            sums0 += x_tile[r][k] * w;
            if ROW_BLOCKS > 1u {
                sums1 += x_tile[r + GROUP][k] * w;
            }
            if ROW_BLOCKS > 2u {
                sums2 += x_tile[r + 2u * GROUP][k] * w;
                sums3 += x_tile[r + 3u * GROUP][k] * w;
            }
        }
        workgroupBarrier();
    }
    store(row0 + r, col0 + c, sums0);
    if ROW_BLOCKS > 1u {
        store(row0 + r + GROUP, col0 + c, sums1);
    }
    if ROW_BLOCKS > 2u {
        store(row0 + r + 2u * GROUP, col0 + c, sums2);
        store(row0 + r + 3u * GROUP, col0 + c, sums3);
    }
}
// ANCHOR_END: main
