//! Memory for npu-rs: typed device buffers, page-locked host memory, a pinned pool, and
//! host-memory registration.
//!
//! Asynchronous operations (in npu-stream) accept only the traits defined here: [`Memory`]
//! (and [`MemoryMut`] for what they write), refined by [`DeviceSlice`] for device memory and
//! [`HostSlice`] for host memory the runtime knows is page-locked. Element types are plain old data
//! ([`bytemuck::Pod`]), so reading device results back can never produce an invalid value.

pub use bytemuck::{Pod, Zeroable};

mod device_buffer;
mod filled;
mod host_block;
mod pinned;
mod slice;

pub use device_buffer::{DeviceBuffer, MallocPolicy};
pub use filled::Filled;
pub use host_block::HostAllocConfig;
pub use pinned::PinnedBuffer;
pub use slice::{DeviceSlice, HostSlice, Memory, MemoryMut, View};
