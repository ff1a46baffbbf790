//! What version 2 assumes of WGSL's cooperative matrices, checked on their own before the
//! kernel builds on them (only on a device with tensor cores; lavapipe has none): which of
//! `coopLoad` and `coopLoadT` reads row-major memory, that strides count `vec4`s of a
//! `vec4<f16>` or `vec4<f32>` array, and that fragments kept in an array survive a loop. The
//! matrices are small integers, so every product is exact and any difference is a wrong
//! assumption, not rounding.

use gpu::buffers::{download, storage, upload};
use gpu::kernel::{Dispatch, bind, compile, launch};

const PROBE: &str = "
enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

// 16 x 16 matrices, rows padded to 6 vec4 (24 halves) as the kernel pads them.
var<workgroup> wa: array<vec4<f16>, 96>;
var<workgroup> wb: array<vec4<f16>, 96>;
var<workgroup> wc: array<vec4<f32>, 80>;

fn store_c(m: coop_mat16x16<f32, C>) {
    coopStoreT(m, &wc[0], 5u);
}

fn copy_out(at: u32, t: u32) {
    for (var e = t; e < 64u; e += 32u) {
        out[at + e] = wc[(e / 4u) * 5u + e % 4u];
    }
}

@compute @workgroup_size(32)
fn probe(@builtin(local_invocation_index) t: u32) {
    for (var e = t; e < 96u; e += 32u) {
        wa[e] = a[e];
        wb[e] = b[e];
    }
    workgroupBarrier();
    let a_rows = coopLoadT<coop_mat16x16<f16, A>>(&wa[0], 6u);
    let zero = coop_mat16x16<f32, C>();
    // A B: B row-major.
    store_c(coopMultiplyAdd(a_rows, coopLoadT<coop_mat16x16<f16, B>>(&wb[0], 6u), zero));
    workgroupBarrier();
    copy_out(0u, t);
    workgroupBarrier();
    // A B^T: B's rows read as columns (K [key][d] as K^T).
    store_c(coopMultiplyAdd(a_rows, coopLoad<coop_mat16x16<f16, B>>(&wb[0], 6u), zero));
    workgroupBarrier();
    copy_out(64u, t);
    workgroupBarrier();
    // 2 A B, with A's fragment kept in an array indexed in a loop.
    var frags: array<coop_mat16x16<f16, A>, 4>;
    for (var f = 0u; f < 2u; f++) {
        frags[f] = coopLoadT<coop_mat16x16<f16, A>>(&wa[0], 6u);
    }
    var c = coop_mat16x16<f32, C>();
    for (var f = 0u; f < 2u; f++) {
        c = coopMultiplyAdd(frags[f], coopLoadT<coop_mat16x16<f16, B>>(&wb[0], 6u), c);
    }
    store_c(c);
    workgroupBarrier();
    copy_out(128u, t);
}
";

/// `x [16][16]` as f16 bits, rows padded to 24 halves.
fn padded_f16(x: &[[f32; 16]; 16]) -> Vec<u16> {
    let mut bits = vec![0u16; 16 * 24];
    for (i, row) in x.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            bits[i * 24 + j] = half::f16::from_f32(v).to_bits();
        }
    }
    bits
}

#[test]
fn cooperative_matrices_read_and_write_memory_as_the_kernel_assumes() {
    let Some(gpu) = gpu::for_tests() else { return };
    if !gpu.has_tensor_cores() {
        eprintln!("no tensor cores on {}: nothing to check", gpu.info.name);
        return;
    }
    let (device, queue) = (&gpu.device, &gpu.queue);
    // Small, non-symmetric integers: every product and sum is exact in f16 and f32.
    let a: [[f32; 16]; 16] =
        std::array::from_fn(|i| std::array::from_fn(|j| ((i * 3 + j * 7) % 11) as f32 - 5.0));
    let b: [[f32; 16]; 16] =
        std::array::from_fn(|i| std::array::from_fn(|j| ((i * 5 + j * 2) % 7) as f32 - 3.0));
    let product = |transpose_b: bool, times: f32| -> Vec<f32> {
        let b_at = |k: usize, j: usize| if transpose_b { b[j][k] } else { b[k][j] };
        let entry = |i: usize, j: usize| times * (0..16).map(|k| a[i][k] * b_at(k, j)).sum::<f32>();
        (0..16 * 16).map(|e| entry(e / 16, e % 16)).collect()
    };
    let pipeline = compile(device, "tensor-core probe", PROBE, "probe", &[]).unwrap();
    let a_buffer = upload(device, "A", &padded_f16(&a)).unwrap();
    let b_buffer = upload(device, "B", &padded_f16(&b)).unwrap();
    let out = storage::<f32>(device, "out", 3 * 256).unwrap();
    let bind_group = bind(device, &pipeline, &[(0, &a_buffer), (1, &b_buffer), (2, &out)]).unwrap();
    let dispatch = Dispatch { label: "probe", pipeline, bind_group, workgroups: [1, 1, 1] };
    launch(device, queue, &[dispatch], None).unwrap();
    let got: Vec<f32> = download(device, queue, &out).unwrap();
    assert_eq!(got[..256], product(false, 1.0), "coopLoadT: A B with B row-major");
    assert_eq!(got[256..512], product(true, 1.0), "coopLoad: A B^T, B's rows as columns");
    assert_eq!(got[512..], product(false, 2.0), "fragments kept in an array across a loop");
}
