//! Page-locked host memory from `aclrtMallocHost`.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use bytemuck::Pod;
use npu_core::{Context, Result, UseList};

use crate::device_buffer::byte_size;
use crate::host_block::{HostAllocConfig, HostBlock, check_host_align, pinned_memory};

/// `len` elements of `T` in page-locked host memory (`aclrtMallocHost`, 64-byte aligned).
///
/// The device can copy to and from it asynchronously, so it is what stream copies accept on the
/// host side. It dereferences to `[T]`: operations take the buffer by value while the device
/// uses it, so whoever holds it may read and write freely. It is zero-initialised. For socket
/// I/O, wrap it in [`Filled`](crate::Filled), which implements `bytes::Buf` and
/// `bytes::BufMut`.
///
/// Dropping it frees the memory once every operation recorded against it has completed.
/// Pinning is expensive (milliseconds per allocation); recycle buffers
/// through a [`PinnedPool`](crate::PinnedPool) in hot paths.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostSlice, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let mut buffer = PinnedBuffer::<u8>::new(&ctx, 4096)?;
/// buffer[..5].copy_from_slice(b"hello");
/// assert_eq!(buffer.host_ptr() as usize % 64, 0);
/// assert_eq!(&buffer[..5], b"hello");
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct PinnedBuffer<T: Pod> {
    context: Context,
    /// Taken only by `Drop`.
    block: ManuallyDrop<HostBlock>,
    len: usize,
    uses: UseList,
    _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; element values are plain data.
unsafe impl<T: Pod> Send for PinnedBuffer<T> {}
// SAFETY: shared access only reads; use recording is behind a mutex.
unsafe impl<T: Pod> Sync for PinnedBuffer<T> {}
// The impls above vouch for `block` and `_elements` alone: every other field is `Send + Sync` of
// its own, checked here, and a field added later breaks this pattern until it is checked too.
const _: fn(&PinnedBuffer<u8>) = |fields| {
    let PinnedBuffer {
        context,
        block: _,
        len,
        uses,
        _elements: _,
    } = fields;
    let _: [&(dyn Send + Sync); 3] = [context, len, uses];
};

impl<T: Pod> PinnedBuffer<T> {
    /// Allocates `len` zeroed elements of page-locked memory (`aclrtMallocHost`).
    ///
    /// Fails with [`npu_core::Error::InvalidArgument`] for `len == 0`, a size over
    /// `isize::MAX` bytes or an element type aligned to more than 64 bytes, and with the ACL
    /// error (`ACL_ERROR_RT_MEMORY_ALLOCATION`) when the host cannot pin that much.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert!(PinnedBuffer::<f32>::new(&ctx, 0).is_err());
    /// assert!(PinnedBuffer::<f32>::new(&ctx, 256)?.iter().all(|&x| x == 0.0));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context, len: usize) -> Result<Self> {
        PinnedBuffer::allocate(("PinnedBuffer::new", "len"), context, len, None)
    }

    /// Allocates like [`new`](PinnedBuffer::new), with `aclrtMallocHostWithCfg` and the
    /// attributes in `config`; argument errors name `PinnedBuffer::with_config`, and a
    /// runtime without the function is [`npu_core::Error::Unsupported`].
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostAllocConfig, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let config = HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE);
    /// let buffer = PinnedBuffer::<u64>::with_config(&ctx, 8, &config)?;
    /// assert_eq!(&buffer[..], &[0; 8]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn with_config(context: &Context, len: usize, config: &HostAllocConfig) -> Result<Self> {
        let api = ("PinnedBuffer::with_config", "len");
        PinnedBuffer::allocate(api, context, len, Some(config))
    }

    /// Allocates with `config` (`aclrtMallocHostWithCfg`) if given; argument errors name `api`
    /// and `argument`, the method the caller called and what it gave `len` as.
    fn allocate(
        (api, argument): (&'static str, &'static str),
        context: &Context,
        len: usize,
        config: Option<&HostAllocConfig>,
    ) -> Result<Self> {
        check_host_align::<T>(api)?;
        let bytes = byte_size::<T>(crate::SEAL, api, argument, len)?;
        let block = HostBlock::alloc(context, bytes, config)?;
        Ok(PinnedBuffer {
            context: context.clone(),
            block: ManuallyDrop::new(block),
            len,
            uses: UseList::new(),
            _elements: PhantomData,
        })
    }

    /// Allocates a pinned copy of `data`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(&PinnedBuffer::from_slice(&ctx, &[1u8, 2, 3])?[..], &[1, 2, 3]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn from_slice(context: &Context, data: &[T]) -> Result<Self> {
        let api = ("PinnedBuffer::from_slice", "data");
        let mut buffer = PinnedBuffer::allocate(api, context, data.len(), None)?;
        buffer.copy_from_slice(data);
        Ok(buffer)
    }
}

pinned_memory!(PinnedBuffer, |buffer| &buffer.context);

impl<T: Pod> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads `block` afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        let context = self.context.clone();
        // SAFETY: freeing pinned memory (aclrtFreeHost) does not wait for the device.
        unsafe { self.uses.release(move || block.free(&context)) };
    }
}

impl<T: Pod> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("ptr", &self.block.ptr())
            .field("uses", &self.uses)
            .finish()
    }
}
