//! Ascend NPU streams and events as Rust futures.
//!
//! Every stream operation (copies, 2D copies, memsets, kernel launches, event records) is
//! submitted on the calling thread, followed by an event record; under the default
//! [`Strategy`] one reactor thread polls `aclrtQueryEventStatus` for the oldest pending event
//! of each stream and wakes the task (the other strategies use a callback thread per device,
//! or a blocking thread per operation). A Tokio server can therefore `.await` device work
//! inside the same `select!` as its socket reads, without blocking a worker thread and without
//! a blocking-pool thread per operation.
//!
//! ```
//! use npu_core::Device;
//! use npu_mem::{DeviceBuffer, PinnedBuffer};
//! use npu_stream::Stream;
//!
//! # tokio_test::block_on(async {
//! let ctx = Device::open(0)?.primary_context().clone();
//! let stream = Stream::new(&ctx)?;
//! let input = PinnedBuffer::from_slice(&ctx, &[1.0f32; 1024])?;
//! let device = DeviceBuffer::<f32>::new(&ctx, 1024)?;
//! let (input, device) = stream.copy_h2d(input, device).await?;
//! let device = stream.memset(device, 0).await?;
//! let (_device, output) = stream.copy_d2h(device, input).await?;
//! assert!(output.iter().all(|&x| x == 0.0));
//! # Ok::<(), npu_core::Error>(())
//! # })?;
//! # Ok::<(), npu_core::Error>(())
//! ```
//!
//! See docs/cancellation.md for what dropping a future at any point does (and does not) do.

mod blocking;
mod callback;
mod copy;
mod device_pool;
mod event;
mod event_pool;
mod kernel;
mod op;
mod reactor;
mod sentinel;
mod signal;
mod staged;
mod strategy;
mod stream;
mod stream_pool;
#[cfg(test)]
mod test_support;
mod timed;

pub use copy::{Copy2d, MAX_2D_HEIGHT, MAX_2D_WIDTH_BYTES};
pub use device_pool::{
    DevicePool, DevicePoolBackend, DevicePoolBuilder, DevicePoolStats, PooledDeviceBuffer,
    RuntimePoolUsage,
};
pub use event::{Event, EventBuilder, EventKind, EventWait};
pub use kernel::{ArgWriter, ByValue, KernelArg, KernelArgs};
pub use op::Op;
pub use reactor::ReactorStats;
pub use signal::{AsValueWord, Notify, ValueCondition, ValueWord};
pub use strategy::Strategy;
pub use stream::{FailureMode, Stream, StreamBuilder};

pub use stream_pool::StreamPool;

/// npu-stream's seal for the plumbing npu-rs's crates share (`npu_core::seal`).
// SAFETY: npu-stream is one of npu-rs's crates.
pub(crate) const SEAL: npu_core::seal::Seal = unsafe { npu_core::seal::Seal::npu_rs() };

/// A snapshot of the reactor's counters (operations registered and completed, event queries,
/// parks).
///
/// ```
/// use npu_core::Device;
/// use npu_stream::Stream;
///
/// # tokio_test::block_on(async {
/// let stream = Stream::new(Device::open(0)?.primary_context())?;
/// let before = npu_stream::reactor_stats();
/// stream.synchronize().await?; // watched by the reactor (Strategy::EventPoll)
/// let after = npu_stream::reactor_stats();
/// assert!(after.registered > before.registered);
/// assert!(after.completed > before.completed);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub fn reactor_stats() -> ReactorStats {
    reactor::Reactor::stats()
}
