//! A block on loan from the pool.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytemuck::Pod;
use npu_core::{Completion, Context, UseList};

use super::Shared;
use crate::host_block::HostBlock;
use crate::slice::{HostSlice, Memory, MemoryMut};

/// `len` elements of `T` in a pinned block from a [`PinnedPool`](crate::PinnedPool).
///
/// It behaves like a [`PinnedBuffer`](crate::PinnedBuffer): it dereferences to `[T]`, stream
/// copies accept it on the host side, and operations take it by value. Dropping it returns
/// the block to the pool's free list once every operation recorded against it has completed
/// (until then the pool counts it as awaiting events); a block used by an operation that
/// failed with an ACL error is not reused but freed with `aclrtFreeHostWithDevSync`.
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
    pub(super) shared: Arc<Shared>,
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

impl<T: Pod> Deref for PooledBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the block holds at least `len` initialised elements (zero-filled when pinned,
        // then only written as whole `T`s or by the device), aligned for `T` (checked before
        // allocating), and is ours until `Drop`. The device writes into it only while an
        // operation owns the buffer, so no `&self` exists then.
        unsafe { std::slice::from_raw_parts(self.block.ptr().cast(), self.len) }
    }
}

impl<T: Pod> DerefMut for PooledBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.block.ptr().cast(), self.len) }
    }
}

// SAFETY: the block is an aclrtMallocHost allocation of at least `len` elements that only this
// buffer uses; `Drop` returns it to the pool (where it can be reused or freed) only after every
// recorded use has completed.
unsafe impl<T: Pod> Memory for PooledBuffer<T> {
    type Elem = T;

    fn context(&self) -> &Context {
        &self.shared.context
    }

    fn addr(&self) -> *const c_void {
        self.block.ptr().cast()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.uses.record(completion);
    }
}

// SAFETY: the buffer is the only user of its block.
unsafe impl<T: Pod> MemoryMut for PooledBuffer<T> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.block.ptr().cast()
    }
}

// SAFETY: the block comes from aclrtMallocHost(WithCfg), which page-locks it.
unsafe impl<T: Pod> HostSlice for PooledBuffer<T> {}

impl<T: Pod> Drop for PooledBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads `block` afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        let shared = self.shared.clone();
        let class = block.bytes();
        shared.update(|state, _| state.retire(class));
        self.uses
            .release(move |settled| shared.returned(block, settled));
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
