//! Owned buffers whose storage never moves: what a registration may hold.

use bytemuck::Pod;

/// An owned buffer whose elements stay at one address, allocated, for as long as the value
/// exists, however the value itself is moved: what
/// [`HostRegistration`](crate::HostRegistration) takes ownership of, so the memory cannot be
/// freed or moved while the device may access it.
///
/// Implemented for `Vec<T>` and [`PageAlignedBuffer<T>`](crate::PageAlignedBuffer) (a `Vec`
/// registers only if its allocation is page-aligned whole pages, which the global allocator
/// seldom gives: see [`HostRegistration`](crate::HostRegistration)). The
/// registration never resizes the buffer (it hands out `[T]`, not the `Vec`). Not for
/// `Box<[T]>`: moving a `Box` asserts that nothing else reaches what it owns, while the
/// registration and the device keep using the elements' address across every move; turn a
/// boxed slice into a `Vec` (`into_vec`, which reuses its allocation) to register it.
///
/// # Safety
///
/// Implementors guarantee that:
/// - [`as_slice`](StableBuffer::as_slice) and [`as_mut_slice`](StableBuffer::as_mut_slice)
///   always return the same address and length, for the value's whole lifetime, moves
///   included;
/// - the memory is owned by the value alone (no other handle reads or writes it) and is
///   released only when the value is dropped;
/// - moving the value does not assert unique access to the elements, as moving a `Box` of
///   them does: the registration keeps the elements' address and reads and writes through
///   it (and the device does) while the value moves, so the elements must be reached through
///   a raw pointer the value holds (as `Vec` and [`PageAlignedBuffer`](crate::PageAlignedBuffer)
///   do), not owned inline or by a `Box`;
/// - [`registered_bytes`](StableBuffer::registered_bytes) bytes from that address belong to
///   the allocation (fewer than the slice's bytes are refused by
///   [`HostRegistration::new`](crate::HostRegistration::new));
/// - dropping the value does not block (no wait for the device, another operation, a lock
///   held across such a wait, or I/O): a registration an operation still uses is released,
///   and the buffer dropped, on npu-rs's reaper thread, which every deferred release of the
///   process shares.
///
/// ```
/// use npu_mem::StableBuffer;
///
/// let buffer = vec![1u32, 2, 3];
/// assert_eq!(buffer.registered_bytes(), 12);
/// ```
pub unsafe trait StableBuffer: Send + Sync + 'static {
    /// The element type.
    type Elem: Pod;

    /// The elements.
    ///
    /// ```
    /// use npu_mem::StableBuffer;
    ///
    /// let buffer = vec![1u16, 2, 3];
    /// assert_eq!(StableBuffer::as_slice(&buffer), &[1, 2, 3]);
    /// ```
    fn as_slice(&self) -> &[Self::Elem];

    /// The elements, for writing.
    ///
    /// ```
    /// use npu_mem::StableBuffer;
    ///
    /// let mut buffer = vec![0u8; 4];
    /// StableBuffer::as_mut_slice(&mut buffer)[0] = 9;
    /// assert_eq!(buffer, [9, 0, 0, 0]);
    /// ```
    fn as_mut_slice(&mut self) -> &mut [Self::Elem];

    /// How many bytes to register: the elements' bytes, unless the buffer owns whole pages
    /// beyond them.
    ///
    /// ```
    /// use npu_mem::{PageAlignedBuffer, StableBuffer};
    ///
    /// assert_eq!(vec![0u8; 100].registered_bytes(), 100);
    /// // A page-aligned buffer registers the whole page it owns.
    /// assert_eq!(PageAlignedBuffer::<u8>::new(100)?.registered_bytes(), 4096);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn registered_bytes(&self) -> usize {
        size_of_val(self.as_slice())
    }
}

// SAFETY: a Vec's heap buffer moves only when it grows or shrinks, which needs `&mut Vec`;
// the registration exposes only the slice. Its heap storage is owned through a raw pointer
// (moving the Vec asserts nothing about it) and freed on drop.
unsafe impl<T: Pod + Send + Sync> StableBuffer for Vec<T> {
    type Elem = T;

    fn as_slice(&self) -> &[T] {
        self
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }
}
