//! How long the GPU spent on a compute pass, from timestamp queries.
//!
//! The GPU writes a timestamp when the pass begins and one when it ends; the difference, in
//! ticks of `queue.get_timestamp_period()` nanoseconds, is the kernel time without the CPU's
//! submission and waiting costs that a wall clock would include.

use reference::AttentionError;

use crate::GpuError;

/// Two timestamp slots (begin and end of a pass) and the buffers to read them back.
pub struct GpuTimer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    nanoseconds_per_tick: f64,
}

impl GpuTimer {
    /// A timer for `device`; an error if the device was opened without `TIMESTAMP_QUERY`
    /// (the adapter lacks it).
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Self, AttentionError> {
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(GpuError::MissingFeature {
                feature: "TIMESTAMP_QUERY",
                needed_for: "measuring GPU time",
            }
            .into());
        }
        let queries = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("pass begin and end"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolved = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("resolved timestamps"),
            size: 2 * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let nanoseconds_per_tick = f64::from(queue.get_timestamp_period());
        Ok(Self { queries, resolved, nanoseconds_per_tick })
    }

    /// What a compute pass descriptor needs to write the two timestamps.
    pub fn pass_writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    /// Records, after the timed pass, the copy of the timestamps into a readable buffer.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolved, 0);
    }

    /// Seconds between the two timestamps of the last submitted pass (waits for it).
    pub fn seconds(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<f64, AttentionError> {
        let ticks: Vec<u64> = crate::buffers::download(device, queue, &self.resolved)?;
        let elapsed = ticks[1].saturating_sub(ticks[0]) as f64;
        Ok(elapsed * self.nanoseconds_per_tick * 1e-9)
    }
}
