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
        let (bytes, _, filled) = self.parts();
        &bytes[..filled]
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

    /// The buffer's bytes, with the cursor and the filled length clamped to them.
    ///
    /// `B`'s `Deref` is user code and may answer with a different length on each call (the
    /// buffer shrank since bytes were filled, or the impl is hostile): each method reads the
    /// length once and works within it, so a shrunken buffer reads as filled up to its end and
    /// never panics or underflows.
    fn parts(&self) -> (&[u8], usize, usize) {
        let bytes = bytes_of(&self.buf);
        let filled = self.filled.min(bytes.len());
        (bytes, self.read.min(filled), filled)
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
        // A zero-sized element type has no bytes, so both cursors are 0 here: the view is
        // empty. (npu-rs allocates no such memory, but a `Memory` of the user's may be one.)
        let size = size.max(1);
        // Within the buffer, unless its `Deref` shrank since the bytes were filled: a range
        // past the `Memory`'s length is `view`'s error, handed back with the adapter.
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
        self.chunk().len()
    }

    fn chunk(&self) -> &[u8] {
        let (bytes, read, filled) = self.parts();
        &bytes[read..filled]
    }

    fn advance(&mut self, cnt: usize) {
        self.read = self.read.saturating_add(cnt).min(self.filled);
    }

    // The provided form loops over `chunk()` until `remaining()` bytes are read, which never
    // ends if the buffer shrinks between the two calls; this one reads the length once.
    fn try_copy_to_slice(&mut self, dst: &mut [u8]) -> Result<(), bytes::TryGetError> {
        let (bytes, read, filled) = self.parts();
        let Some(src) = bytes[read..filled].get(..dst.len()) else {
            return Err(bytes::TryGetError {
                requested: dst.len(),
                available: filled - read,
            });
        };
        dst.copy_from_slice(src);
        self.read = read + dst.len();
        Ok(())
    }
}

impl<T: Pod, B: DerefMut<Target = [T]>> Filled<B> {
    /// The unfilled tail of the buffer as its `DerefMut` gives it now, the filled length (and
    /// the cursor) first clamped to that buffer.
    fn tail_mut(&mut self) -> &mut [u8] {
        let bytes = bytemuck::cast_slice_mut::<T, u8>(&mut self.buf);
        self.filled = self.filled.min(bytes.len());
        self.read = self.read.min(self.filled);
        &mut bytes[self.filled..]
    }

    /// The next `cnt` unfilled bytes, which the caller fills and then counts as filled; a
    /// panic naming `api` if fewer are left, as `BufMut` documents for its writes.
    fn reserve(&mut self, api: &str, cnt: usize) -> &mut [u8] {
        let tail = self.tail_mut();
        let left = tail.len();
        match tail.get_mut(..cnt) {
            Some(room) => room,
            None => panic!("Filled::{api}: {cnt} bytes do not fit in the {left} left"),
        }
    }
}

// SAFETY: `chunk_mut` is exactly the unfilled tail of the buffer (`remaining_mut` bytes, both
// read from one length of the buffer, the filled length clamped to it), and `advance_mut`
// only moves the filled length within the buffer. The tail is always initialised memory, so
// advancing over bytes the caller did not write exposes old data, never uninitialised memory.
// `put_slice` and `put_bytes` write only into that tail, through `reserve`. A `Deref` whose
// length changes between calls changes only which initialised bytes count as filled: every
// access goes through a slice of the length read for it.
unsafe impl<T: Pod, B: DerefMut<Target = [T]>> BufMut for Filled<B> {
    fn remaining_mut(&self) -> usize {
        self.capacity().saturating_sub(self.filled)
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        self.filled = self.filled.saturating_add(cnt).min(self.capacity());
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        UninitSlice::new(self.tail_mut())
    }

    // The provided forms loop over `chunk_mut()` until the bytes are written, which never ends
    // if the buffer shrinks after `remaining_mut()` was read; these read the length once.
    fn put_slice(&mut self, src: &[u8]) {
        self.reserve("put_slice", src.len()).copy_from_slice(src);
        self.filled += src.len();
    }

    fn put_bytes(&mut self, val: u8, cnt: usize) {
        self.reserve("put_bytes", cnt).fill(val);
        self.filled += cnt;
    }

    // The provided form loops over `chunk_mut()` as well; this one copies the source's chunks
    // through `put_slice`, which reads the length once per chunk. A source whose `chunk()` is
    // empty while it says bytes remain ends the copy instead of spinning on it.
    fn put<U: Buf>(&mut self, mut src: U)
    where
        Self: Sized,
    {
        while src.has_remaining() {
            let chunk = src.chunk();
            let len = chunk.len();
            if len == 0 {
                break;
            }
            self.put_slice(chunk);
            src.advance(len);
        }
    }
}
