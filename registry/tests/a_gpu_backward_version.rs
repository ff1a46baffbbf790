//! How a GPU backward version joins the registry, shown with a dummy. A lesson's version is a
//! module (below, `dummy_lesson`): its card, a kernel that implements
//! `gpu::backward::BackwardKernel`, and a build function. The registry takes it with one line
//! in `backwards()`, `entries(lesson13::versions()),`; here the same conversion extends a copy
//! of that list. From there it runs as every version does: validated inputs,
//! buffers uploaded once (or the forward's reused in place), its dispatches, the gradients
//! read back.
//!
//! The dummy computes only `D_i = dO_i . O_i` and writes placeholder gradients (every element
//! of dQ 1, of dK 2, of dV 3, so that a test sees they were written): it is checked for
//! what it computes, and never registered.

use gpu::attention::{KernelVersion, Prepared};
use gpu::backward::{BackwardBuffers, BackwardKernel, PreparedBackward};
use reference::{AttentionError, BackwardVersion, Device, Operation, Problem, ProblemSpec};
use registry::{BackwardEntry, Entry};

mod dummy_lesson {
    use gpu::backward::{BackwardBuffers, BackwardKernel, BackwardKernelVersion, boxed};
    use gpu::kernel::{Dispatch, compile, workgroup_count};
    use reference::{About, AttentionError, Device};

    /// `D` for every row, then the placeholder gradients.
    pub const SHADER: &str = "
struct Params { slices: u32, q_len: u32, kv_len: u32, head_dim: u32,
                scale: f32, causal: u32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> o: array<f32>;
@group(0) @binding(6) var<storage, read> d_o: array<f32>;
@group(0) @binding(7) var<storage, read_write> delta: array<f32>;
@group(0) @binding(8) var<storage, read_write> dq: array<f32>;
@group(0) @binding(9) var<storage, read_write> dk: array<f32>;
@group(0) @binding(10) var<storage, read_write> dv: array<f32>;

@compute @workgroup_size(64)
fn delta_rows(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    if row >= params.slices * params.q_len { return; }
    var sum = 0.0;
    for (var d = 0u; d < params.head_dim; d++) {
        sum += d_o[row * params.head_dim + d] * o[row * params.head_dim + d];
    }
    delta[row] = sum;
}

@compute @workgroup_size(64)
fn placeholder_gradients(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&dq) { dq[id.x] = 1.0; }
    if id.x < arrayLength(&dk) { dk[id.x] = 2.0; dv[id.x] = 3.0; }
}
";

    pub struct Dummy;

    impl BackwardKernel for Dummy {
        fn dispatches(
            &self,
            device: &wgpu::Device,
            io: &BackwardBuffers,
        ) -> Result<Vec<Dispatch>, AttentionError> {
            let s = &io.shape;
            let rows = s.batch * s.heads * s.q_len;
            let elements = s.batch * s.heads * s.q_len.max(s.kv_len) * io.row_stride;
            let mut dispatches = Vec::new();
            for (entry, threads) in [("delta_rows", rows), ("placeholder_gradients", elements)] {
                let pipeline = compile(device, "dummy backward", SHADER, entry, &[])?;
                let bind_group = io.bind_used(device, &pipeline, SHADER, entry)?;
                let workgroups = [workgroup_count(threads.div_ceil(64)), 1, 1];
                dispatches.push(Dispatch {
                    label: entry_label(entry),
                    pipeline,
                    bind_group,
                    workgroups,
                });
            }
            Ok(dispatches)
        }
    }

    fn entry_label(entry: &str) -> &'static str {
        if entry == "delta_rows" { "D = rowsum(dO * O)" } else { "placeholder gradients" }
    }

    /// The module's one version, as a lesson's `versions()` gives it.
    pub fn versions() -> Vec<BackwardKernelVersion> {
        let about = About::backward(
            "dummy GPU backward",
            "lesson13",
            Device::Gpu,
            "D only, placeholder gradients: the shape of a GPU backward version",
        );
        let build = |_: &wgpu::Device, _head_dim: usize| boxed(Ok::<_, AttentionError>(Dummy));
        vec![BackwardKernelVersion::new(about, build)]
    }
}

/// The registry's backward list with the dummy's line added.
fn backwards_with_the_dummy() -> Vec<BackwardEntry> {
    let mut entries = registry::backwards();
    entries.extend(dummy_lesson::versions().into_iter().map(Entry::from));
    entries
}

/// `D_i = dO_i . O_i` of every row, in f64.
fn delta(d_o: &ndarray::Array4<f32>, o: &ndarray::Array4<f32>) -> ndarray::Array3<f64> {
    (d_o.mapv(f64::from) * o.mapv(f64::from)).sum_axis(ndarray::Axis(3))
}

#[test]
fn its_card_is_a_gpu_backward_entry() {
    let entries = backwards_with_the_dummy();
    let dummy = entries.last().expect("the dummy");
    assert_eq!((dummy.about.operation, dummy.about.device), (Operation::Backward, Device::Gpu));
    assert!(matches!(dummy.code, registry::Code::Gpu(_)));
}

#[test]
fn it_runs_as_every_registered_backward_version_runs() {
    let Some(_) = gpu::for_tests() else { return };
    let here = registry::runnable(backwards_with_the_dummy(), |about, backward| BackwardVersion {
        about,
        backward,
    });
    let dummy = here.runs.last().expect("the dummy runs on any adapter");
    assert_eq!(dummy.about.name, "dummy GPU backward");
    let p = Problem::random(&ProblemSpec::new(2, 3, 17, 29, 8).causal(true), 1);
    let forward = lesson03::attention(&p.q, &p.k, &p.v, &p.options, Default::default()).unwrap();
    let d_o = Problem::random(&ProblemSpec::new(2, 3, 17, 17, 8), 2).q;
    let grads = (dummy.backward)(&p.q, &p.k, &p.v, &p.options, &forward, &d_o).unwrap();
    assert_eq!((grads.dq.dim(), grads.dk.dim(), grads.dv.dim()), (p.q.dim(), p.k.dim(), p.v.dim()));
    for (gradient, placeholder) in [(&grads.dq, 1.0), (&grads.dk, 2.0), (&grads.dv, 3.0)] {
        assert!(gradient.iter().all(|&g| g == placeholder), "not written: {gradient:?}");
    }
    // Bad input is refused before any kernel runs, as for every backward version.
    let mut bad = d_o.clone();
    bad[[1, 2, 3, 4]] = f32::NAN;
    let err = (dummy.backward)(&p.q, &p.k, &p.v, &p.options, &forward, &bad).unwrap_err();
    assert!(matches!(err, AttentionError::NonFinite { tensor: "dO", .. }), "{err}");
}

#[test]
fn after_a_forward_on_the_gpu_only_d_o_is_uploaded() {
    let Some(gpu) = gpu::for_tests() else { return };
    let (device, queue) = (&gpu.device, &gpu.queue);
    let p = Problem::random(&ProblemSpec::new(1, 2, 33, 21, 16).causal(true), 3);
    let forward_kernel: KernelVersion = lesson09::versions().remove(0);
    let kernel = (forward_kernel.build)(device, 16).unwrap();
    let forward = Prepared::new(device, kernel.as_ref(), &p.q, &p.k, &p.v, &p.options).unwrap();
    forward.run(device, queue, None).unwrap();
    let out = forward.read_output(device, queue).unwrap();
    let d_o = Problem::random(&ProblemSpec::new(1, 2, 33, 33, 16), 4).q;
    let io =
        BackwardBuffers::after_forward(device, &dummy_lesson::Dummy, &forward.io, &d_o).unwrap();
    assert!(io.q == forward.io.q && io.o == forward.io.o, "Q and O are shared, not copied");
    let backward = PreparedBackward::on(device, &dummy_lesson::Dummy, io).unwrap();
    backward.io.poison_output(queue);
    backward.run(device, queue, None).unwrap();
    let expected = delta(&d_o, &out.o);
    let got = backward.io.read_delta(device, queue).unwrap();
    for (g, e) in got.iter().zip(&expected) {
        assert!((f64::from(*g) - e).abs() <= 1e-5 * (1.0 + e.abs()), "D = {g}, expected {e}");
    }
    // dO of the wrong shape is refused, naming the axis.
    let short = Problem::random(&ProblemSpec::new(1, 2, 32, 32, 16), 4).q;
    let err = BackwardBuffers::after_forward(device, &dummy_lesson::Dummy, &forward.io, &short)
        .err()
        .expect("a dO of 32 rows for 33 queries");
    assert!(err.to_string().contains("dO"), "{err}");
}

/// A backward kernel that dispatches nothing and only says how it reads its inputs: what
/// the checks of reused buffers look at.
struct Reads {
    storage: reference::Storage,
    inputs_fit_f16: bool,
}

impl BackwardKernel for Reads {
    fn storage(&self) -> reference::Storage {
        self.storage
    }
    fn inputs_fit_f16(&self) -> bool {
        self.inputs_fit_f16
    }
    fn dispatches(
        &self,
        _: &wgpu::Device,
        _: &BackwardBuffers,
    ) -> Result<Vec<gpu::kernel::Dispatch>, AttentionError> {
        Ok(Vec::new())
    }
}

#[test]
fn a_kernel_that_reads_another_format_cannot_reuse_a_forward_s_buffers() {
    let f16_reader = Reads { storage: reference::Storage::F16, inputs_fit_f16: true };
    let Some(gpu) = gpu::for_tests() else { return };
    let p = Problem::random(&ProblemSpec::new(1, 1, 5, 5, 16), 5);
    let kernel = (lesson09::versions().remove(0).build)(&gpu.device, 16).unwrap();
    let forward =
        Prepared::new(&gpu.device, kernel.as_ref(), &p.q, &p.k, &p.v, &p.options).unwrap();
    let err = BackwardBuffers::after_forward(&gpu.device, &f16_reader, &forward.io, &p.q)
        .err()
        .expect("f32 buffers for an f16 kernel");
    assert!(err.to_string().contains("expected the same format and row stride"), "{err}");
}

#[test]
fn a_kernel_that_needs_f16_s_range_cannot_reuse_buffers_never_checked_for_it() {
    // Reads f32 and splits it into f16s, as lesson 10's version 11 does.
    let split_reader = Reads { storage: reference::Storage::F32, inputs_fit_f16: true };
    let Some(gpu) = gpu::for_tests() else { return };
    let mut p = Problem::random(&ProblemSpec::new(1, 1, 5, 5, 16), 6);
    p.k[[0, 0, 1, 2]] = 1e6; // beyond f16's largest number, 65504
    let kernel = (lesson09::versions().remove(0).build)(&gpu.device, 16).unwrap();
    let forward =
        Prepared::new(&gpu.device, kernel.as_ref(), &p.q, &p.k, &p.v, &p.options).unwrap();
    let err = BackwardBuffers::after_forward(&gpu.device, &split_reader, &forward.io, &p.q)
        .err()
        .expect("buffers never checked for f16's range");
    assert!(err.to_string().contains("f16's range"), "{err}");
    // Uploaded for it, the same input is refused where it is: K at [0, 0, 1, 2].
    let d_o = p.q.clone();
    let lse = ndarray::Array3::zeros((1, 1, 5));
    let forward = reference::AttentionOutput { o: p.q.clone(), lse };
    let err = BackwardBuffers::upload(
        &gpu.device,
        &split_reader,
        &p.q,
        &p.k,
        &p.v,
        &p.options,
        &forward,
        &d_o,
    )
    .err()
    .expect("K holds a number f16 cannot hold");
    assert!(matches!(err, AttentionError::NotRepresentable { tensor: "K", .. }), "{err}");
}
