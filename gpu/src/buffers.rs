//! Moving plain data between the CPU and GPU buffers.
//!
//! `bytemuck` reinterprets `&[f32]` (or any `Pod` type) as bytes without copying, so uploading
//! a tensor is one call; downloading goes through a staging buffer the CPU may map.

use reference::AttentionError;

use crate::GpuError;
use wgpu::util::DeviceExt;

/// A storage buffer's usages: kernels read and write it, the CPU copies in and out of it.
pub const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// The most bytes one storage buffer binding may hold on `device`, and the name of the limit
/// that sets it: `max_storage_buffer_binding_size` (128 MiB by default, 2 GiB on an H200), or
/// `max_buffer_size` where that is smaller.
pub fn largest_binding(device: &wgpu::Device) -> (u64, &'static str) {
    let limits = device.limits();
    if limits.max_storage_buffer_binding_size < limits.max_buffer_size {
        (limits.max_storage_buffer_binding_size, "max_storage_buffer_binding_size")
    } else {
        (limits.max_buffer_size, "max_buffer_size")
    }
}

/// `what` needs `bytes` of one storage buffer binding: an error if the device cannot bind that
/// much ([`largest_binding`]).
pub fn check_storage_size(
    device: &wgpu::Device,
    what: &str,
    bytes: u64,
) -> Result<(), AttentionError> {
    let (limit, limit_name) = largest_binding(device);
    if bytes > limit {
        return Err(GpuError::ExceedsDeviceLimit {
            what: format!("{what} ({bytes} bytes)"),
            needed: bytes,
            limit,
            limit_name,
        }
        .into());
    }
    Ok(())
}

/// A storage buffer holding a copy of `data`, after checking that the device can bind it.
pub fn upload<T: bytemuck::Pod>(
    device: &wgpu::Device,
    what: &str,
    data: &[T],
) -> Result<wgpu::Buffer, AttentionError> {
    check_storage_size(device, what, std::mem::size_of_val(data) as u64)?;
    Ok(device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(what),
        contents: bytemuck::cast_slice(data),
        usage: STORAGE,
    }))
}

/// A uniform buffer holding `value` (a small struct of sizes and flags).
pub fn uniform<T: bytemuck::Pod>(device: &wgpu::Device, what: &str, value: &T) -> wgpu::Buffer {
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(what),
        contents: bytemuck::bytes_of(value),
        usage: wgpu::BufferUsages::UNIFORM,
    })
}

/// An uninitialised (zeroed by wgpu) storage buffer of `len` elements of `T`.
pub fn storage<T: bytemuck::Pod>(
    device: &wgpu::Device,
    what: &str,
    len: usize,
) -> Result<wgpu::Buffer, AttentionError> {
    let bytes = (len * std::mem::size_of::<T>()) as u64;
    check_storage_size(device, what, bytes)?;
    Ok(device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(what),
        size: bytes,
        usage: STORAGE,
        mapped_at_creation: false,
    }))
}

/// Copies a storage buffer back to the CPU: GPU copy into a mappable staging buffer, wait for
/// the queue, map, reinterpret the bytes as `T`.
pub fn download<T: bytemuck::Pod>(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
) -> Result<Vec<T>, AttentionError> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("staging for download"),
        size: buffer.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, buffer.size());
    queue.submit([encoder.finish()]);
    let (sender, receiver) = std::sync::mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |result| {
        // The receiver waits below; it cannot be gone.
        let _ = sender.send(result);
    });
    wait(device)?;
    receiver
        .recv()
        .map_err(|e| GpuError::Lost(format!("buffer mapping never finished: {e}")))?
        .map_err(|e| GpuError::Lost(format!("could not map a buffer for reading: {e}")))?;
    let data = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| GpuError::Lost(format!("could not read a mapped buffer: {e}")))?;
        bytemuck::pod_collect_to_vec(&view)
    };
    staging.unmap();
    Ok(data)
}

/// Blocks until the GPU has finished everything submitted so far.
pub fn wait(device: &wgpu::Device) -> Result<(), AttentionError> {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map(|_| ())
        .map_err(|e| GpuError::Lost(format!("waiting for the GPU failed: {e}")).into())
}
