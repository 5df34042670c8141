//! Device memory, the device pool, pinned host memory, the pinned pool and host registration.
//!
//! - [`DeviceBuffer`]: device memory (`aclrtMalloc`), freed once every operation that used it
//!   has completed.
//! - [`PinnedBuffer`]: page-locked host memory (`aclrtMallocHost`), the host side of async
//!   copies; [`PinnedPool`] recycles such buffers and waits (asynchronously) for capacity.
//! - [`DevicePool`]: stream-ordered device memory for servers. `pool.alloc(&stream, len)`
//!   costs a lock on a cache hit; a block is handed out again, to any stream, only once every
//!   operation that used it has completed. Built on the runtime's `aclrtMemPool*` where it
//!   exists, on `aclrtMalloc` otherwise ([`DevicePoolBackend`]).
//! - [`HostRegistration`]: registers memory you already own (`aclrtHostRegisterV2`, or
//!   `aclrtHostRegister` on runtimes without it), page-aligned whole pages such as a
//!   [`PageAlignedBuffer`].
//! - The traits: [`Memory`] / [`MemoryMut`] (what an operation may touch), [`DeviceSlice`] /
//!   [`HostSlice`] (which side it is on) and [`View`] (a sub-range). Pageable memory is not a
//!   [`HostSlice`]: async copies from a `Vec` do not compile; `Stream::copy_from_slice_staged`
//!   copies through a pool block instead.
//!
//! ```
//! use npu::prelude::*;
//!
//! let ctx = Device::open(0)?.primary_context().clone();
//! let host = PinnedBuffer::from_slice(&ctx, &[1u32, 2, 3])?;
//! let device = DeviceBuffer::<u32>::new(&ctx, 3)?;
//! assert_eq!((host.len(), device.byte_len()), (3, 12));
//! # Ok::<(), npu::Error>(())
//! ```

pub use npu_mem::{
    Cast, DeviceBuffer, DeviceSlice, Filled, HacType, Halves, HostAllocConfig, HostRegistration,
    HostSlice, MallocPolicy, Memory, MemoryMut, PageAlignedBuffer, PinnedBuffer, PinnedPool,
    PinnedPoolBuilder, Pod, PoolStats, PooledBuffer, RegisterError, RegisterFlags, Split,
    StableBuffer, View, Zeroable, host_mem_map_capability,
};
pub use npu_stream::{
    DevicePool, DevicePoolBackend, DevicePoolBuilder, DevicePoolStats, PooledDeviceBuffer,
    RuntimePoolUsage,
};

/// For implementers of the `unsafe` [`Memory`] trait: the list of completions a memory type
/// keeps so that it releases itself only once the device is done with it.
///
/// ```
/// use npu::memory::extend::UseList;
///
/// let uses = UseList::new();
/// assert_eq!(uses.pending(), 0, "nothing has used the memory yet");
/// ```
pub mod extend {
    pub use npu_core::UseList;
}
