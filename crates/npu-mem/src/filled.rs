//! `bytes::Buf` / `bytes::BufMut` over a fixed host buffer, so socket reads land directly in
//! pinned memory.

use std::ops::{Deref, DerefMut};

use bytemuck::Pod;
use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut};
use npu_core::{Error, OpError};

use crate::slice::{Memory, View};

/// A buffer of fixed capacity seen as bytes, with a filled length and a read cursor (both in
/// bytes): `BufMut` appends after the filled part, `Buf` reads the filled part from the cursor.
///
/// The elements may be any [`Pod`] type, so an `f32` tensor read from a socket lands in a
/// `PinnedBuffer<f32>` without a cast. Wrap a [`PinnedBuffer`](crate::PinnedBuffer), a
/// [`PooledBuffer`](crate::PooledBuffer) or a [`HostRegistration`](crate::HostRegistration), and
/// `tokio::io::AsyncReadExt::read_buf` writes socket data straight into page-locked memory;
/// [`into_view`](Filled::into_view) then hands the unread bytes to a stream copy without an
/// intermediate buffer.
///
/// The buffer never grows: once it is full, `remaining_mut()` is 0 (so `read_buf` returns
/// `Ok(0)`). Advancing past the end stops at the end; it never panics.
///
/// ```
/// use bytes::{Buf, BufMut};
/// use npu_core::Device;
/// use npu_mem::{Filled, Memory, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let mut buf = Filled::new(PinnedBuffer::<u8>::new(&ctx, 16)?);
/// buf.put_slice(b"header:payload");
/// assert_eq!(buf.remaining_mut(), 2);
/// buf.advance(7); // consume "header:"
/// let view = buf.into_view()?; // the unread "payload", ready for Stream::copy_h2d
/// assert_eq!((view.offset(), view.len()), (7, 7));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Filled<B> {
    buf: B,
    read: usize,
    filled: usize,
}

impl<T: Pod, B: Deref<Target = [T]>> Filled<B> {
    /// An empty adapter over `buf`: nothing filled, cursor at the start.
    ///
    /// ```
    /// use bytes::BufMut;
    /// let buf = npu_mem::Filled::new(vec![0u8; 4]);
    /// assert_eq!(buf.remaining_mut(), 4);
    /// ```
    pub fn new(buf: B) -> Self {
        Filled {
            buf,
            read: 0,
            filled: 0,
        }
    }

    /// The filled bytes, including any already consumed through `Buf`.
    ///
    /// ```
    /// use bytes::BufMut;
    /// let mut buf = npu_mem::Filled::new(vec![0u8; 4]);
    /// buf.put_u16(0x0102);
    /// assert_eq!(buf.filled(), &[1, 2]);
    /// ```
    pub fn filled(&self) -> &[u8] {
        &bytes_of(&self.buf)[..self.filled]
    }

    /// The buffer's size in bytes.
    ///
    /// ```
    /// assert_eq!(npu_mem::Filled::new(vec![0u8; 4]).capacity(), 4);
    /// assert_eq!(npu_mem::Filled::new(vec![0f32; 4]).capacity(), 16);
    /// ```
    pub fn capacity(&self) -> usize {
        size_of_val::<[T]>(&self.buf)
    }

    /// Forgets the filled bytes and rewinds the cursor, to reuse the buffer.
    ///
    /// ```
    /// use bytes::{Buf, BufMut};
    /// let mut buf = npu_mem::Filled::new(vec![0u8; 4]);
    /// buf.put_u8(1);
    /// buf.clear();
    /// assert_eq!((buf.remaining(), buf.remaining_mut()), (0, 4));
    /// ```
    pub fn clear(&mut self) {
        self.read = 0;
        self.filled = 0;
    }

    /// Gives back the buffer (its contents are untouched).
    ///
    /// ```
    /// use bytes::BufMut;
    /// let mut buf = npu_mem::Filled::new(vec![0u8; 2]);
    /// buf.put_u8(9);
    /// assert_eq!(buf.into_inner(), vec![9, 0]);
    /// ```
    pub fn into_inner(self) -> B {
        self.buf
    }
}

impl<T: Pod, B: Memory<Elem = T> + Deref<Target = [T]>> Filled<B> {
    /// The unread filled bytes as an owned [`View`] of the buffer, for a stream copy. The
    /// cursor and the filled length must fall on element boundaries; otherwise it fails with
    /// [`Error::InvalidArgument`], handing the adapter back as it was in the [`OpError`].
    ///
    /// ```
    /// use bytes::BufMut;
    /// use npu_core::Device;
    /// use npu_mem::{Filled, Memory, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let mut buf = Filled::new(PinnedBuffer::<u8>::new(&ctx, 64)?);
    /// buf.put_slice(&[7; 10]);
    /// assert_eq!(buf.into_view()?.len(), 10);
    ///
    /// let mut floats = Filled::new(PinnedBuffer::<f32>::new(&ctx, 4)?);
    /// floats.put_f32_le(1.5);
    /// floats.put_u8(0); // a quarter of an element
    /// let err = floats.into_view().unwrap_err();
    /// assert!(err.to_string().contains("element boundary"), "{err}");
    /// let mut floats = err.value.expect("handed back, as it was");
    /// floats.put_slice(&[0, 0, 0xbf]); // the rest of -0.5
    /// assert_eq!(floats.into_view()?.len(), 2);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_view(self) -> Result<View<B>, OpError<Self>> {
        let size = size_of::<T>();
        if !self.read.is_multiple_of(size) || !self.filled.is_multiple_of(size) {
            let rule = format!(
                "the unread bytes {}..{} do not start and end on an element boundary ({size} \
                 bytes)",
                self.read, self.filled
            );
            return Err(OpError::new(
                Error::invalid("Filled::into_view", "self", rule),
                self,
            ));
        }
        let (read, filled) = (self.read, self.filled);
        // Within the buffer (the cursors never pass its end), so this hands back nothing.
        self.buf
            .view(read / size..filled / size)
            .map_err(|err| err.map_value(|buf| Filled { buf, read, filled }))
    }
}

/// The elements' bytes: every `Pod` value is plain bytes.
fn bytes_of<T: Pod>(elements: &[T]) -> &[u8] {
    bytemuck::cast_slice(elements)
}

impl<T: Pod, B: Deref<Target = [T]>> Buf for Filled<B> {
    fn remaining(&self) -> usize {
        self.filled - self.read
    }

    fn chunk(&self) -> &[u8] {
        &bytes_of(&self.buf)[self.read..self.filled]
    }

    fn advance(&mut self, cnt: usize) {
        self.read = self.read.saturating_add(cnt).min(self.filled);
    }
}

// SAFETY: `chunk_mut` is exactly the unfilled tail of the buffer (`remaining_mut` bytes), and
// `advance_mut` only moves the filled length within it. The tail is always initialised
// memory, so advancing over bytes the caller did not write exposes old data, never
// uninitialised memory.
unsafe impl<T: Pod, B: DerefMut<Target = [T]>> BufMut for Filled<B> {
    fn remaining_mut(&self) -> usize {
        self.capacity() - self.filled
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        self.filled = self.filled.saturating_add(cnt).min(self.capacity());
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        let filled = self.filled;
        UninitSlice::new(&mut bytemuck::cast_slice_mut::<T, u8>(&mut self.buf)[filled..])
    }
}
