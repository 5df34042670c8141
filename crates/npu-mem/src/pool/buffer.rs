//! A block on loan from the pool.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use bytemuck::Pod;
use npu_core::UseList;

use super::Pinned;
use super::cache::Cache;
use crate::host_block::{HostBlock, pinned_memory};

/// `len` elements of `T` in a pinned block from a [`PinnedPool`](crate::PinnedPool).
///
/// It behaves like a [`PinnedBuffer`](crate::PinnedBuffer): it dereferences to `[T]`, stream
/// copies accept it on the host side, and operations take it by value. Dropping it returns
/// the block to the pool's free list once every operation recorded against it has completed
/// (until then the pool counts it as awaiting events), failed or not: an operation completes
/// only once the device will not touch its memory again.
///
/// The contents are unspecified: zeros in a newly pinned block, the previous user's data in a
/// reused one (every bit pattern is a valid `T`, which is `Pod`).
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostSlice, Memory, PinnedPool};
///
/// # tokio_test::block_on(async {
/// let pool = PinnedPool::new(Device::open(0)?.primary_context());
/// let mut block = pool.alloc::<u32>(1000).await?;
/// block.fill(7);
/// assert_eq!(block.len(), 1000);
/// assert_eq!(block.block_bytes(), 4096);
/// assert_eq!(block.host_ptr() as usize % 64, 0);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct PooledBuffer<T: Pod> {
    pub(super) shared: Arc<Cache<Pinned>>,
    /// Taken only by `Drop`.
    pub(super) block: ManuallyDrop<HostBlock>,
    pub(super) len: usize,
    pub(super) uses: UseList,
    pub(super) _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its block until it is returned; element values are plain data.
unsafe impl<T: Pod> Send for PooledBuffer<T> {}
// SAFETY: shared access only reads; use recording is behind a mutex.
unsafe impl<T: Pod> Sync for PooledBuffer<T> {}
// The impls above vouch for `block` and `_elements` alone: every other field is `Send + Sync` of
// its own, checked here, and a field added later breaks this pattern until it is checked too.
const _: fn(&PooledBuffer<u8>) = |fields| {
    let PooledBuffer {
        shared,
        block: _,
        len,
        uses,
        _elements: _,
    } = fields;
    let _: [&(dyn Send + Sync); 3] = [shared, len, uses];
};

impl<T: Pod> PooledBuffer<T> {
    /// The size of the underlying block (the request rounded to its size class).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// # tokio_test::block_on(async {
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// let block = pool.alloc::<u8>((1 << 20) + 1).await?;
    /// assert_eq!(block.block_bytes(), (1 << 20) + (1 << 18));
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn block_bytes(&self) -> usize {
        self.block.bytes()
    }
}

pinned_memory!(PooledBuffer, |buffer| &buffer.shared.source().context);

impl<T: Pod> Drop for PooledBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads `block` afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        self.shared.give_back(block, &mut self.uses);
    }
}

impl<T: Pod> fmt::Debug for PooledBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("len", &self.len)
            .field("block_bytes", &self.block.bytes())
            .field("ptr", &self.block.ptr())
            .field("uses", &self.uses)
            .finish()
    }
}
