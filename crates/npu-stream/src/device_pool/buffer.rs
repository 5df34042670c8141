//! A block of device memory on loan from a [`DevicePool`](super::DevicePool).

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use bytemuck::Pod;
use npu_core::{Completion, Context, UseList};
use npu_mem::pool_cache::Cache;
use npu_mem::{DeviceSlice, Memory, MemoryMut};

use super::source::{DeviceBlock, DeviceSource};

/// `len` elements of `T` in a device block from a [`DevicePool`](super::DevicePool).
///
/// It behaves like a [`DeviceBuffer`](npu_mem::DeviceBuffer): copies, memsets, kernel
/// arguments, views, splits and casts accept it, and operations take it by value. Dropping it
/// returns the block to the pool once every operation recorded against it, on any stream, has
/// completed (until then the pool counts it as awaiting its operations), failed or not: an
/// operation completes only once the device will not touch its memory again. So the next
/// owner, on whatever stream, can never race the last one. If one of those operations failed
/// with an uncorrectable memory error (`Error::is_memory_error`), the pool first looks for
/// the error in the block: it repairs it (`aclrtMemUceRepair`; the contents are lost) or
/// quarantines the block, which is never handed out again (`PoolStats::repaired`,
/// `quarantined`). After an error that has no repair (`MemoryErrorKind::Unrepairable`: an
/// HBM multi-bit ECC error, 507054) the block is quarantined without looking.
///
/// The contents are unspecified: whatever the previous owner left, or the device memory held.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{Memory, PinnedBuffer};
/// use npu_stream::{DevicePool, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = DevicePool::new(&ctx)?;
/// let stream = Stream::new(&ctx)?;
/// let device = pool.alloc::<u32>(&stream, 1000).await?;
/// assert_eq!((device.len(), device.block_bytes()), (1000, 4096));
/// let device = stream.memset(device, 0).await?;
/// let host = PinnedBuffer::<u32>::new(&ctx, 1000)?;
/// let (_device, host) = stream.copy_d2h(device, host).await?;
/// assert!(host.iter().all(|&x| x == 0));
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct PooledDeviceBuffer<T: Pod> {
    pub(super) pool: Arc<Cache<DeviceSource>>,
    /// Taken only by `Drop`.
    pub(super) block: ManuallyDrop<DeviceBlock>,
    pub(super) len: usize,
    pub(super) uses: UseList,
    pub(super) _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its block until it is returned; element values are plain data.
unsafe impl<T: Pod> Send for PooledDeviceBuffer<T> {}
// SAFETY: shared access only reads the address and records uses (a mutex-protected list).
unsafe impl<T: Pod> Sync for PooledDeviceBuffer<T> {}
// The impls above vouch for `block` and `_elements` alone: every other field is `Send + Sync` of
// its own, checked here, and a field added later breaks this pattern until it is checked too.
const _: fn(&PooledDeviceBuffer<u8>) = |fields| {
    let PooledDeviceBuffer {
        pool,
        block: _,
        len,
        uses,
        _elements: _,
    } = fields;
    let _: [&(dyn Send + Sync); 3] = [pool, len, uses];
};

impl<T: Pod> PooledDeviceBuffer<T> {
    /// The size of the underlying block (the request rounded to its size class).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// let block = pool.alloc::<u8>(&stream, (1 << 20) + 1).await?;
    /// assert_eq!(block.block_bytes(), (1 << 20) + (1 << 18));
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn block_bytes(&self) -> usize {
        self.block.bytes
    }

    /// The raw device address. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// let block = pool.alloc::<u8>(&stream, 64).await?;
    /// assert!(!block.as_raw().is_null());
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> *mut c_void {
        self.block.ptr
    }
}

// SAFETY: the block is a device allocation of at least `len` elements used by this buffer
// alone, block, length and context fixed for its life; `Drop` gives it back to the pool only
// after every recorded use has completed.
unsafe impl<T: Pod> Memory for PooledDeviceBuffer<T> {
    type Elem = T;

    fn context(&self) -> &Context {
        &self.pool.source().context
    }

    fn addr(&self) -> *const c_void {
        self.block.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.uses.record(completion);
    }
}

// SAFETY: the buffer is the only user of its block, and `addr_mut` is `addr`.
unsafe impl<T: Pod> MemoryMut for PooledDeviceBuffer<T> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.block.ptr
    }
}

// SAFETY: the block is device memory (aclrtMalloc or aclrtMemPoolMallocAsync).
unsafe impl<T: Pod> DeviceSlice for PooledDeviceBuffer<T> {}

impl<T: Pod> Drop for PooledDeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads `block` afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        self.pool.give_back(block, &mut self.uses);
    }
}

impl<T: Pod> fmt::Debug for PooledDeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledDeviceBuffer")
            .field("device", &self.pool.source().context.device_id())
            .field("len", &self.len)
            .field("block_bytes", &self.block.bytes)
            .field("ptr", &self.block.ptr)
            .field("uses", &self.uses)
            .finish()
    }
}
