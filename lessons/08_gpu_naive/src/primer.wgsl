// The WGSL primer's kernel: the largest number of each row of a matrix, one workgroup per row.
//
// ANCHOR: bindings
// What the host hands the kernel: a uniform with the sizes, the matrix to read, the output to
// write. `@group(0) @binding(n)` is the slot the host binds each buffer to.
struct Sizes {
    rows: u32,
    cols: u32,
}

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> matrix: array<f32>;        // [rows, cols], row-major
@group(0) @binding(2) var<storage, read_write> maxima: array<f32>;  // [rows]
// ANCHOR_END: bindings

// ANCHOR: kernel
// Invocations per workgroup. The host launches one workgroup per row.
const THREADS: u32 = 64u;

// Workgroup memory: one array per workgroup, shared by its THREADS invocations, gone when the
// workgroup ends.
var<workgroup> candidates: array<f32, THREADS>;

@compute @workgroup_size(THREADS)
fn row_max(
    @builtin(workgroup_id) workgroup: vec3<u32>,           // which workgroup: the row
    @builtin(local_invocation_index) thread: u32,          // which invocation in it: 0..THREADS
) {
    let row = workgroup.x;
    // 1. Each invocation scans every THREADS-th number of the row, in its own registers.
    var largest = matrix[row * sizes.cols]; // every row has at least one number (the host checks)
    for (var col = thread; col < sizes.cols; col += THREADS) {
        largest = max(largest, matrix[row * sizes.cols + col]);
    }
    candidates[thread] = largest;
    // 2. Wait until every invocation of the workgroup has written its candidate.
    workgroupBarrier();
    // 3. A tree: at each step the first half of the candidates takes the larger of itself and
    //    its partner in the second half, and every invocation waits before the next step.
    for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
        if thread < stride {
            candidates[thread] = max(candidates[thread], candidates[thread + stride]);
        }
        workgroupBarrier(); // outside the `if`: every invocation of the workgroup reaches it
    }
    // 4. One invocation writes the row's answer.
    if thread == 0u {
        maxima[row] = candidates[0];
    }
}
// ANCHOR_END: kernel
