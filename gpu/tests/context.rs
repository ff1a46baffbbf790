//! The `gpu` crate's helpers on the test device (lavapipe in CI).

use gpu::buffers::{check_storage_size, download, largest_binding, upload};
use gpu::kernel::{Dispatch, bind, compile, launch};
use gpu::{GpuError, GpuTimer, for_tests};

const DOUBLE: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn double(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) { x[id.x] = 2.0 * x[id.x]; }
}";

#[test]
fn upload_then_download_gives_back_the_same_bits() {
    let Some(gpu) = for_tests() else { return };
    let data: Vec<f32> = (0..1000).map(|i| (i as f32).sin() * 1e-3 + f32::MIN_POSITIVE).collect();
    let buffer = upload(&gpu.device, "x", &data).unwrap();
    let back: Vec<f32> = download(&gpu.device, &gpu.queue, &buffer).unwrap();
    assert_eq!(back, data);
}

#[test]
fn a_kernel_runs_and_the_timer_measures_it() {
    let Some(gpu) = for_tests() else { return };
    let (device, queue) = (&gpu.device, &gpu.queue);
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let buffer = upload(device, "x", &data).unwrap();
    let pipeline = compile(device, "double", DOUBLE, "double", &[]).unwrap();
    let dispatch = Dispatch {
        label: "double",
        bind_group: bind(device, &pipeline, &[(0, &buffer)]).unwrap(),
        pipeline,
        workgroups: [1000u32.div_ceil(64), 1, 1],
    };
    match GpuTimer::new(device, queue) {
        Ok(timer) => {
            let seconds = launch(device, queue, &[dispatch], Some(&timer)).unwrap().unwrap();
            assert!(seconds > 0.0 && seconds < 10.0, "{seconds} s");
        }
        Err(e) => {
            assert!(e.to_string().contains("TIMESTAMP_QUERY"), "{e}");
            assert_eq!(launch(device, queue, &[dispatch], None).unwrap(), None);
        }
    }
    let back: Vec<f32> = download(device, queue, &buffer).unwrap();
    assert_eq!(back, data.iter().map(|x| 2.0 * x).collect::<Vec<_>>());
}

#[test]
fn shader_errors_come_back_as_errors_not_panics() {
    let Some(gpu) = for_tests() else { return };
    let broken = DOUBLE.replace("2.0 * x[id.x]", "2u * x[id.x]");
    let err = compile(&gpu.device, "broken", &broken, "double", &[]).unwrap_err();
    assert!(
        matches!(GpuError::of(&err), Some(GpuError::Rejected { doing, .. }) if doing == "compiling broken"),
        "{err}"
    );
    let err = compile(&gpu.device, "double", DOUBLE, "no_such_entry", &[]).unwrap_err();
    assert!(matches!(GpuError::of(&err), Some(GpuError::Rejected { .. })), "{err}");
}

#[test]
fn binding_a_buffer_the_shader_does_not_declare_is_an_error() {
    let Some(gpu) = for_tests() else { return };
    let buffer = upload(&gpu.device, "x", &[1.0f32; 4]).unwrap();
    let pipeline = compile(&gpu.device, "double", DOUBLE, "double", &[]).unwrap();
    let err = bind(&gpu.device, &pipeline, &[(0, &buffer), (1, &buffer)]).unwrap_err();
    assert!(err.to_string().starts_with("binding buffers"), "{err}");
}

#[test]
fn buffers_above_the_device_limit_are_refused() {
    let Some(gpu) = for_tests() else { return };
    let limits = gpu.device.limits();
    let (limit, limit_name) = largest_binding(&gpu.device);
    assert_eq!(limit, limits.max_storage_buffer_binding_size.min(limits.max_buffer_size));
    assert!(check_storage_size(&gpu.device, "S", limit).is_ok());
    let err = check_storage_size(&gpu.device, "S", limit + 1).unwrap_err();
    assert_eq!(
        GpuError::of(&err),
        Some(&GpuError::ExceedsDeviceLimit {
            what: format!("S ({} bytes)", limit + 1),
            needed: limit + 1,
            limit,
            limit_name,
        })
    );
}

#[test]
fn the_device_has_the_adapters_limits_not_the_defaults() {
    let Some(gpu) = for_tests() else { return };
    // wgpu's defaults allow 16 KiB of workgroup memory; every adapter of the course has more,
    // and lesson 09's default tiles need 32 KiB at D = 128.
    assert!(gpu.device.limits().max_compute_workgroup_storage_size >= 32 * 1024);
    assert!(!gpu.describe().is_empty());
}
