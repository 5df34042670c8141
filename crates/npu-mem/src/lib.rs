//! Memory for npu-rs: typed device buffers, page-locked host memory, a pinned pool, and
//! host-memory registration.
//!
//! Asynchronous operations (in npu-stream) accept only the traits defined here: [`Memory`]
//! (and [`MemoryMut`] for what they write), refined by [`DeviceSlice`] for device memory and
//! [`HostSlice`] for host memory the runtime knows is page-locked. Element types are plain old
//! data ([`bytemuck::Pod`]), so reading device results back can never produce an invalid value.
//!
//! - [`DeviceBuffer`]: device memory.
//! - [`PinnedBuffer`]: page-locked host memory; [`Filled`] lets socket reads land in it.
//! - [`PinnedPool`]: a caching allocator of pinned blocks ([`PooledBuffer`]) that reuses a
//!   block only after the device is done with it, with an optional capacity.
//! - [`HostRegistration`]: memory the program already owns, registered with the runtime.
//!
//! Every one of them releases its memory only after the device operations recorded against
//! it have completed, so dropping a buffer (or a future holding one) is always safe.
//!
//! ```
//! use npu_core::Device;
//! use npu_mem::{DeviceBuffer, PinnedPool};
//! use npu_stream::Stream;
//!
//! # tokio_test::block_on(async {
//! let ctx = Device::open(0)?.primary_context().clone();
//! let pool = PinnedPool::new(&ctx);
//! let stream = Stream::new(&ctx)?;
//! let mut host = pool.alloc::<u32>(256).await?;
//! host.fill(42);
//! let (_host, device) = stream.copy_h2d(host, DeviceBuffer::new(&ctx, 256)?).await?;
//! assert_eq!(device.to_vec_blocking()?, vec![42; 256]);
//! # Ok::<(), npu_core::Error>(())
//! # })?;
//! # Ok::<(), npu_core::Error>(())
//! ```

pub use bytemuck::{Pod, Zeroable};

mod cast;
mod device_buffer;
mod filled;
mod host_block;
mod pinned;
mod pool;
mod registration;
mod slice;
mod split;

pub use cast::Cast;
pub use device_buffer::{DeviceBuffer, MallocPolicy};
pub use filled::Filled;
pub use host_block::HostAllocConfig;
pub use pinned::PinnedBuffer;
#[doc(hidden)]
pub use pool::cache as pool_cache;
pub use pool::{PinnedPool, PinnedPoolBuilder, PoolStats, PooledBuffer};
pub use registration::{
    HacType, HostRegistration, PageAlignedBuffer, RegisterError, RegisterFlags, StableBuffer,
    host_mem_map_capability,
};
#[doc(hidden)]
pub use slice::bytes_of;
pub use slice::{DeviceSlice, HostSlice, Memory, MemoryMut, View};
pub use split::{Halves, Split};

/// npu-mem's seal for the plumbing npu-rs's crates share (`npu_core::seal`).
// SAFETY: npu-mem is one of npu-rs's crates.
pub(crate) const SEAL: npu_core::seal::Seal = unsafe { npu_core::seal::Seal::npu_rs() };
