// Microbenchmark of the WGSL primitives a tensor-core FlashAttention is built from (lesson 10,
// lab/src/bin/primitives.rs): each subgroup runs ITERATIONS steps of PRODUCTS independent
// 16x16x16 multiply-adds (f16 in, f32 accumulate), and MODE says what else each step does:
//
//   0: nothing: every fragment stays in registers (the tensor cores' own rate);
//   1: loads one B fragment from workgroup memory, column-major (coopLoad), for all products;
//   2: the same, row-major (coopLoadT);
//   3: loads one A fragment from workgroup memory, row-major (coopLoadT), for all products;
//   4: loads a fresh B fragment for every product (coopLoad): one load per product;
//   5: stores the first accumulator to workgroup memory and loads it back (coopStoreT and
//      coopLoadT of f32), as a kernel does with S;
//   6: as 1, from an array of f16 rather than of vec4<f16>;
//   7: as 3, from an array of f16 rather than of vec4<f16>.
//
// The timing and the tables are in primitives.rs; the results feed nothing but the chapter.

enable f16;
enable wgpu_cooperative_matrix;

const MODE: u32 = 1u;
const PRODUCTS: u32 = 2u;            // independent accumulators per subgroup
const ITERATIONS: u32 = 512u;
const SUBGROUPS: u32 = 4u;

const THREADS: u32 = SUBGROUPS * 32u;
const STRIDE: u32 = 6u;              // vec4<f16> per row: 16 halves + 8 of padding (48 bytes)
const C_STRIDE: u32 = 5u;            // vec4<f32> per row: 16 floats + 4 of padding (80 bytes)

@group(0) @binding(0) var<storage, read_write> out: array<f32>;

var<workgroup> tile: array<vec4<f16>, 64u * STRIDE>;        // four 16 x 16 fragments
var<workgroup> tile_h: array<f16, 64u * 4u * STRIDE>;        // the same, scalars
var<workgroup> c_tile: array<vec4<f32>, SUBGROUPS * 16u * C_STRIDE>;

fn store_c(c: coop_mat16x16<f32, C>, at: u32) {
    coopStoreT(c, &c_tile[at], C_STRIDE);
}

@compute @workgroup_size(THREADS)
fn main(
    @builtin(local_invocation_index) thread: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    for (var e = thread; e < 64u * STRIDE; e += THREADS) {
        tile[e] = vec4<f16>(f16(e % 7u) * 0.01h);
    }
    for (var e = thread; e < 64u * 4u * STRIDE; e += THREADS) {
        tile_h[e] = f16(e % 7u) * 0.01h;
    }
    workgroupBarrier();
    var a: array<coop_mat16x16<f16, A>, PRODUCTS>;
    var b: array<coop_mat16x16<f16, B>, PRODUCTS>;
    var acc: array<coop_mat16x16<f32, C>, PRODUCTS>;
    for (var r = 0u; r < PRODUCTS; r++) {
        a[r] = coopLoadT<coop_mat16x16<f16, A>>(&tile[(r % 4u) * 16u * STRIDE], STRIDE);
        b[r] = coopLoad<coop_mat16x16<f16, B>>(&tile[((r + 1u) % 4u) * 16u * STRIDE], STRIDE);
        acc[r] = coop_mat16x16<f32, C>();
    }
    for (var i = 0u; i < ITERATIONS; i++) {
        let at = (i % 4u) * 16u * STRIDE;    // a different fragment each step: nothing to hoist
        if MODE == 1u {
            let loaded = coopLoad<coop_mat16x16<f16, B>>(&tile[at], STRIDE);
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(a[r], loaded, acc[r]);
            }
        } else if MODE == 2u {
            let loaded = coopLoadT<coop_mat16x16<f16, B>>(&tile[at], STRIDE);
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(a[r], loaded, acc[r]);
            }
        } else if MODE == 3u {
            let loaded = coopLoadT<coop_mat16x16<f16, A>>(&tile[at], STRIDE);
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(loaded, b[r], acc[r]);
            }
        } else if MODE == 6u {
            let loaded = coopLoad<coop_mat16x16<f16, B>>(&tile_h[4u * at], 4u * STRIDE);
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(a[r], loaded, acc[r]);
            }
        } else if MODE == 7u {
            let loaded = coopLoadT<coop_mat16x16<f16, A>>(&tile_h[4u * at], 4u * STRIDE);
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(loaded, b[r], acc[r]);
            }
        } else if MODE == 4u {
            for (var r = 0u; r < PRODUCTS; r++) {
                let source = ((i + r) % 4u) * 16u * STRIDE;
                let loaded = coopLoad<coop_mat16x16<f16, B>>(&tile[source], STRIDE);
                acc[r] = coopMultiplyAdd(a[r], loaded, acc[r]);
            }
        } else {
            for (var r = 0u; r < PRODUCTS; r++) {
                acc[r] = coopMultiplyAdd(a[r], b[r], acc[r]);
            }
            if MODE == 5u {
                store_c(acc[0], sg * 16u * C_STRIDE);
                acc[0] = coopLoadT<coop_mat16x16<f32, C>>(&c_tile[sg * 16u * C_STRIDE], C_STRIDE);
            }
        }
    }
    // Every accumulator is used, so that no product can be left out by the compiler.
    var sum = acc[0];
    for (var r = 1u; r < PRODUCTS; r++) {
        sum = sum + acc[r];
    }
    workgroupBarrier();
    store_c(sum, sg * 16u * C_STRIDE);
    workgroupBarrier();
    let first = c_tile[sg * 16u * C_STRIDE + lane % 16u];
    out[(group.x * SUBGROUPS + sg) * 32u + lane] = first.x + first.y + first.z + first.w;
}
