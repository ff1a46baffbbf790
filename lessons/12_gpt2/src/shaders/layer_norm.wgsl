// LayerNorm on the GPU: each row x_i [C] of x [rows, C] to
// (x_i - mean) / sqrt(var + eps) * gain + bias, statistics in f32.
//
// One workgroup per row. Its 64 threads each sum every 64th value of the row, then a tree in
// workgroup memory adds their 64 partial sums (6 halving steps, a barrier each): first for
// the mean, then for the variance, the mean of (x - mean)^2, as the CPU version does (two
// passes: the one-pass E[x^2] - mean^2 cancels catastrophically when |mean| >> std).

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

const THREADS: u32 = 64u;

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gain: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> partial: array<f32, THREADS>;

// The sum of every thread's `mine` over the workgroup, in every thread.
fn workgroup_sum(mine: f32, thread: u32) -> f32 {
    partial[thread] = mine;
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
        if thread < stride {
            partial[thread] += partial[thread + stride];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    // Everyone has read the total before the next call overwrites it.
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) thread: u32) {
    let row = group.x;
    let c = sizes.cols;
    let first = row * c;
    var sum = 0.0;
    for (var j = thread; j < c; j += THREADS) {
        sum += x[first + j];
    }
    let mean = workgroup_sum(sum, thread) / f32(c);
    var squares = 0.0;
    for (var j = thread; j < c; j += THREADS) {
        let centred = x[first + j] - mean;
        squares += centred * centred;
    }
    let variance = workgroup_sum(squares, thread) / f32(c);
    let inverse = 1.0 / sqrt(variance + sizes.epsilon);
    for (var j = thread; j < c; j += THREADS) {
        y[first + j] = (x[first + j] - mean) * inverse * gain[j] + bias[j];
    }
}
