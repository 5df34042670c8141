//! Page-locked host memory from `aclrtMallocHost`.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;
use npu_core::{Completion, Context, Result, UseList, acl_call};

use crate::device_buffer::byte_size;
use crate::slice::{HostSlice, Memory, MemoryMut};

/// `len` elements of `T` in page-locked host memory (`aclrtMallocHost`, 64-byte aligned).
///
/// The device can copy to and from it asynchronously, so it is what stream copies accept on the
/// host side. It dereferences to `[T]`: operations take the buffer by value while the device
/// uses it, so whoever holds it may read and write freely. It is zero-initialised.
///
/// Dropping it frees the memory (`aclrtFreeHost`) once every operation recorded against it has
/// completed. Pinning is expensive (milliseconds per allocation); recycle buffers through a
/// [`PinnedPool`](crate::PinnedPool) in hot paths.
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
    ptr: *mut T,
    len: usize,
    uses: UseList,
    _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; element values are plain data.
unsafe impl<T: Pod> Send for PinnedBuffer<T> {}
// SAFETY: shared access only reads; use recording is behind a mutex.
unsafe impl<T: Pod> Sync for PinnedBuffer<T> {}

impl<T: Pod> PinnedBuffer<T> {
    /// Allocates `len` zeroed elements of page-locked memory.
    pub fn new(context: &Context, len: usize) -> Result<Self> {
        let bytes = byte_size::<T>("PinnedBuffer::new", len)?;
        context.bind()?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is bound on this thread.
        unsafe { acl_call!(context.runtime(), aclrtMallocHost(&mut raw, bytes)) }?;
        // SAFETY: aclrtMallocHost returned `bytes` writable bytes; zeroing makes every element
        // a valid `T` (`Pod` allows all-zero), so the slice views below are sound.
        unsafe { std::ptr::write_bytes(raw.cast::<u8>(), 0, bytes) };
        Ok(PinnedBuffer {
            context: context.clone(),
            ptr: raw.cast(),
            len,
            uses: UseList::new(),
            _elements: PhantomData,
        })
    }

    /// Allocates a pinned copy of `data`.
    pub fn from_slice(context: &Context, data: &[T]) -> Result<Self> {
        let mut buffer = PinnedBuffer::new(context, data.len())?;
        buffer.copy_from_slice(data);
        Ok(buffer)
    }
}

impl<T: Pod> Deref for PinnedBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised elements for the buffer's lifetime. The device
        // writes into it only while an operation owns the buffer, so no `&self` exists then.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Pod> DerefMut for PinnedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: `ptr` is this buffer's own aclrtMallocHost allocation of `len` initialised elements;
// `Drop` frees it only after every recorded use has completed.
unsafe impl<T: Pod> Memory for PinnedBuffer<T> {
    type Elem = T;

    fn context(&self) -> &Context {
        &self.context
    }

    fn addr(&self) -> *const c_void {
        self.ptr.cast()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.uses.record(completion);
    }
}

// SAFETY: the buffer is the only owner of its allocation.
unsafe impl<T: Pod> MemoryMut for PinnedBuffer<T> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.ptr.cast()
    }
}

// SAFETY: the allocation comes from aclrtMallocHost, which page-locks it.
unsafe impl<T: Pod> HostSlice for PinnedBuffer<T> {}

/// Moves a host allocation's address into a deferred release.
struct HostPtr(*mut c_void);

// SAFETY: the address is only handed back to aclrtFreeHost.
unsafe impl Send for HostPtr {}

impl<T: Pod> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let context = self.context.clone();
        let ptr = HostPtr(self.ptr.cast());
        self.uses.release(move || {
            let ptr = ptr;
            // SAFETY: the allocation is ours and no operation uses it any more.
            if let Err(err) = unsafe { acl_call!(context.runtime(), aclrtFreeHost(ptr.0)) } {
                tracing::warn!(%err, "freeing pinned host memory failed");
            }
        });
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("ptr", &self.ptr)
            .field("uses", &self.uses)
            .finish()
    }
}
