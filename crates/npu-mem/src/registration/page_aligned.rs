//! Heap buffers aligned to, and made of, whole 4 KiB pages: what host registration needs.

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytemuck::Pod;
use npu_core::{Error, Result};

use super::StableBuffer;
use crate::device_buffer::byte_size;
use crate::host_block::PAGE;

/// `len` zeroed elements of `T` in ordinary (pageable) heap memory that starts on a 4 KiB
/// page boundary and occupies whole pages, so it can be registered with
/// [`HostRegistration`](crate::HostRegistration). A `Vec` is rarely page aligned.
///
/// ```
/// use npu_mem::PageAlignedBuffer;
///
/// let mut buffer = PageAlignedBuffer::<u32>::new(1000)?;
/// buffer[999] = 7;
/// assert_eq!(buffer.as_ptr() as usize % 4096, 0);
/// assert_eq!(buffer.len(), 1000);
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct PageAlignedBuffer<T: Pod> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
    _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; element values are plain data.
unsafe impl<T: Pod> Send for PageAlignedBuffer<T> {}
// SAFETY: shared access only reads.
unsafe impl<T: Pod> Sync for PageAlignedBuffer<T> {}
// The impls above vouch for `ptr` and `_elements` alone: every other field is `Send + Sync` of its
// own, checked here, and a field added later breaks this pattern until it is checked too.
const _: fn(&PageAlignedBuffer<u8>) = |fields| {
    let PageAlignedBuffer {
        ptr: _,
        len,
        layout,
        _elements: _,
    } = fields;
    let _: [&(dyn Send + Sync); 2] = [len, layout];
};

impl<T: Pod> PageAlignedBuffer<T> {
    /// Allocates `len` zeroed elements, rounded up to whole pages.
    ///
    /// Fails for `len == 0`, a size over `isize::MAX` bytes, an element type aligned to more
    /// than a page, or when the allocator has no memory.
    ///
    /// ```
    /// assert!(npu_mem::PageAlignedBuffer::<u8>::new(0).is_err());
    /// ```
    pub fn new(len: usize) -> Result<Self> {
        PageAlignedBuffer::allocate(("PageAlignedBuffer::new", "len"), len)
    }

    fn allocate((api, argument): (&'static str, &'static str), len: usize) -> Result<Self> {
        if align_of::<T>() > PAGE {
            return Err(Error::invalid(
                api,
                "T",
                format!("its alignment of {} bytes exceeds a page", align_of::<T>()),
            ));
        }
        let bytes = byte_size::<T>(crate::SEAL, api, argument, len)?;
        let layout = bytes
            .checked_next_multiple_of(PAGE)
            .and_then(|size| Layout::from_size_align(size, PAGE).ok())
            .ok_or_else(|| {
                Error::invalid(
                    api,
                    argument,
                    format!("{bytes} bytes cannot be rounded to pages"),
                )
            })?;
        // SAFETY: the layout's size is at least one page (never zero).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<T>()).ok_or_else(|| {
            Error::invalid(
                api,
                argument,
                format!("the allocator could not provide {} bytes", layout.size()),
            )
        })?;
        Ok(PageAlignedBuffer {
            ptr,
            len,
            layout,
            _elements: PhantomData,
        })
    }

    /// A page-aligned copy of `data`.
    ///
    /// ```
    /// let buffer = npu_mem::PageAlignedBuffer::from_slice(b"abc")?;
    /// assert_eq!(&buffer[..], b"abc");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn from_slice(data: &[T]) -> Result<Self> {
        let api = ("PageAlignedBuffer::from_slice", "data");
        let mut buffer = PageAlignedBuffer::allocate(api, data.len())?;
        buffer.copy_from_slice(data);
        Ok(buffer)
    }
}

impl<T: Pod> Deref for PageAlignedBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the allocation holds at least `len` zero-initialised (hence valid, `T: Pod`)
        // elements, aligned for `T` (page alignment is a multiple of T's), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Pod> DerefMut for PageAlignedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

// SAFETY: the allocation never moves or resizes and is freed only in `Drop`; it spans
// `layout.size()` bytes, which is what `registered_bytes` reports; it is owned through a raw
// pointer, so moving the buffer asserts nothing about the elements.
unsafe impl<T: Pod> StableBuffer for PageAlignedBuffer<T> {
    type Elem = T;

    fn as_slice(&self) -> &[T] {
        self
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }

    /// Every page the buffer owns, including the tail after the last element.
    fn registered_bytes(&self) -> usize {
        self.layout.size()
    }
}

impl<T: Pod> Drop for PageAlignedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
    }
}

impl<T: Pod> fmt::Debug for PageAlignedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageAlignedBuffer")
            .field("len", &self.len)
            .field("ptr", &self.ptr)
            .field("bytes", &self.layout.size())
            .finish()
    }
}
