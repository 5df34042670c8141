//! Disjoint owned parts of one buffer, as `split_at_mut` gives for slices.

use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use npu_core::{Completion, Context, Error, OpError};

use crate::slice::{DeviceSlice, HostSlice, Memory, MemoryMut};

/// One of several disjoint, owned parts of a buffer, made by [`MemoryMut::into_halves`] and
/// [`Split::into_halves`]. Each part is writable memory of its own, so two parts can be used by
/// two operations at once (even on two streams), and [`join`](Split::join) /
/// [`into_whole`](Split::into_whole) put them back together.
///
/// Every part holds the whole buffer (an `Arc` they share), so the allocation lives until the
/// last part is gone, and each part records its uses on the whole buffer's use list: the
/// memory is released only once every operation on every part has completed. No part gives
/// access to the whole buffer, so no two values can reach the same bytes.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory, MemoryMut};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let buffer = DeviceBuffer::from_host_blocking(&ctx, &[1u32, 2, 3, 4, 5])?;
/// let (head, tail) = buffer.into_halves(2)?;
/// assert_eq!((head.offset(), head.len(), tail.offset(), tail.len()), (0, 2, 2, 3));
/// assert_eq!(tail.addr() as usize, head.addr() as usize + 8);
/// let whole = head.join(tail)?.into_whole()?;
/// assert_eq!(whole.to_vec_blocking()?, [1, 2, 3, 4, 5]);
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// The buffer is moved into its parts, so it cannot be used beside them:
///
/// ```compile_fail,E0382
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, MemoryMut};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let buffer = DeviceBuffer::<u8>::new(&ctx, 8)?;
/// let (head, tail) = buffer.into_halves(4)?;
/// let aliased = buffer.view(..)?; // error: `buffer` was moved into its parts
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct Split<S> {
    whole: Arc<S>,
    /// The whole buffer's first element, taken from `addr_mut` while it was still owned.
    base: *mut c_void,
    offset: usize,
    len: usize,
}

/// The two parts a split makes: `[0, mid)` and `[mid, len)`.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Halves, MemoryMut};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (head, tail): Halves<DeviceBuffer<u8>> = DeviceBuffer::new(&ctx, 4)?.into_halves(1)?;
/// assert_eq!((head.offset(), tail.offset()), (0, 1));
/// # Ok::<(), npu_core::Error>(())
/// ```
pub type Halves<S> = (Split<S>, Split<S>);

// SAFETY: a part is its `Arc` (Send and Sync for a `Send + Sync` buffer) plus the address of
// memory that the buffer owns; the address stays valid wherever the part goes.
unsafe impl<S: Send + Sync> Send for Split<S> {}
// SAFETY: shared access to a part only reads its range.
unsafe impl<S: Send + Sync> Sync for Split<S> {}
// The impls above vouch for `base` alone: every other field is `Send + Sync` of its own under
// the impls' bound, checked here for any such `S` (not one chosen type), and a field added later
// breaks this pattern until it is checked too.
const _: () = {
    fn checked<S: Send + Sync>(fields: &Split<S>) {
        let Split {
            whole,
            base: _,
            offset,
            len,
        } = fields;
        let _: [&(dyn Send + Sync); 3] = [whole, offset, len];
    }
    let _ = checked::<()>;
};

impl<S: MemoryMut + Sync> Split<S> {
    /// The whole of `buffer` as one part.
    pub(crate) fn whole(mut buffer: S) -> Self {
        let (base, len) = (buffer.addr_mut(), buffer.len());
        Split {
            whole: Arc::new(buffer),
            base,
            offset: 0,
            len,
        }
    }

    /// The part's first element, counted from the start of the whole buffer.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{MemoryMut, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (_, tail) = PinnedBuffer::<u8>::new(&ctx, 10)?.into_halves(3)?;
    /// let (_, last) = tail.into_halves(6)?;
    /// assert_eq!(last.offset(), 9);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Splits this part in two at element `mid`: `[0, mid)` and `[mid, len)`. Fails, handing the
    /// part back, when `mid > len`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{Memory, MemoryMut, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (head, tail) = PinnedBuffer::from_slice(&ctx, &[1u8, 2, 3, 4])?.into_halves(1)?;
    /// let (middle, last) = tail.into_halves(2)?;
    /// assert_eq!((&head[..], &middle[..], &last[..]), (&[1][..], &[2, 3][..], &[4][..]));
    /// let err = last.into_halves(2).unwrap_err();
    /// assert!(err.to_string().contains("2 is past the part's 1 elements"), "{err}");
    /// assert_eq!(err.value.unwrap().len(), 1); // handed back
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_halves(self, mid: usize) -> Result<Halves<S>, OpError<Split<S>>> {
        if mid > self.len {
            let rule = format!("{mid} is past the part's {} elements", self.len);
            return Err(OpError::new(
                Error::invalid("Split::into_halves", "mid", rule),
                self,
            ));
        }
        Ok(self.divide(mid))
    }

    /// Divides the part at `mid`, which is at most its length.
    pub(crate) fn divide(self, mid: usize) -> Halves<S> {
        debug_assert!(mid <= self.len);
        let tail = Split {
            whole: self.whole.clone(),
            base: self.base,
            offset: self.offset + mid,
            len: self.len - mid,
        };
        let head = Split { len: mid, ..self };
        (head, tail)
    }

    /// Joins two adjacent parts of the same buffer, in either order, into one. Fails, handing
    /// both back, when they belong to different buffers or do not touch.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory, MemoryMut};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, rest) = DeviceBuffer::<u8>::new(&ctx, 9)?.into_halves(3)?;
    /// let (b, c) = rest.into_halves(3)?;
    /// let err = a.join(c).unwrap_err(); // a and c do not touch
    /// assert!(err.to_string().contains("not adjacent"), "{err}");
    /// let (a, c) = err.value.unwrap();
    /// let ab = b.join(a)?; // either order
    /// assert_eq!((ab.offset(), ab.len()), (0, 6));
    /// assert_eq!(ab.join(c)?.len(), 9);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    // The error hands both parts back by value, as every `OpError` hands back its values;
    // boxing it would make this one error unlike all the others.
    #[allow(clippy::result_large_err)]
    pub fn join(self, other: Split<S>) -> Result<Split<S>, OpError<Halves<S>>> {
        let rule = if !Arc::ptr_eq(&self.whole, &other.whole) {
            "the parts belong to different buffers".to_string()
        } else if self.offset + self.len == other.offset {
            return Ok(Split {
                len: self.len + other.len,
                ..self
            });
        } else if other.offset + other.len == self.offset {
            return Ok(Split {
                len: self.len + other.len,
                ..other
            });
        } else {
            format!(
                "elements {}..{} and {}..{} are not adjacent",
                self.offset,
                self.offset + self.len,
                other.offset,
                other.offset + other.len
            )
        };
        Err(OpError::new(
            Error::invalid("Split::join", "other", rule),
            (self, other),
        ))
    }

    /// The whole buffer back, once this is its only part. Fails, handing the part back, while
    /// other parts are alive (join them first).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{Memory, MemoryMut, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (head, tail) = PinnedBuffer::<u16>::new(&ctx, 4)?.into_halves(2)?;
    /// let err = head.into_whole().unwrap_err();
    /// assert!(err.to_string().contains("1 other part"), "{err}");
    /// let buffer: PinnedBuffer<u16> = err.value.unwrap().join(tail)?.into_whole()?;
    /// assert_eq!(buffer.len(), 4);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_whole(self) -> Result<S, OpError<Split<S>>> {
        let Split {
            whole,
            base,
            offset,
            len,
        } = self;
        Arc::try_unwrap(whole).map_err(|whole| {
            let others = Arc::strong_count(&whole) - 1;
            let rule = format!("{others} other part(s) of the buffer are still alive");
            let part = Split {
                whole,
                base,
                offset,
                len,
            };
            OpError::new(Error::invalid("Split::into_whole", "self", rule), part)
        })
    }
}

// SAFETY: the part's range lies within the whole buffer's `len()` elements from `base` (which
// `into_halves` checks, and which `Memory`'s and `MemoryMut`'s contracts keep true: the buffer's
// address and length are fixed, and `addr_mut` is its `addr`); the shared `Arc` keeps the
// allocation alive, and uses are recorded on the whole buffer, which releases its memory only
// after all of them, whichever part recorded them.
unsafe impl<S: MemoryMut + Sync> Memory for Split<S> {
    type Elem = S::Elem;

    fn context(&self) -> &Context {
        self.whole.context()
    }

    fn addr(&self) -> *const c_void {
        self.addr_of_offset()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.whole.record_use(completion)
    }
}

impl<S: MemoryMut + Sync> Split<S> {
    fn addr_of_offset(&self) -> *mut c_void {
        self.base
            .cast::<u8>()
            .wrapping_add(self.offset * size_of::<S::Elem>())
            .cast()
    }
}

// SAFETY: parts of one buffer never overlap (`into_halves` divides a part, `join` merges only
// adjacent ones), the buffer itself is reachable only through its parts, and the base address
// came from the buffer's own `addr_mut`, which is its `addr`: each part is the only access to
// its bytes, and its `addr_mut` is its `addr`.
unsafe impl<S: MemoryMut + Sync> MemoryMut for Split<S> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.addr_of_offset()
    }
}

// SAFETY: part of device memory is device memory.
unsafe impl<S: DeviceSlice + MemoryMut + Sync> DeviceSlice for Split<S> {}
// SAFETY: part of page-locked host memory is page-locked host memory.
unsafe impl<S: HostSlice + MemoryMut + Sync> HostSlice for Split<S> {}

impl<S: HostSlice + MemoryMut + Sync> Deref for Split<S> {
    type Target = [S::Elem];

    fn deref(&self) -> &[S::Elem] {
        // SAFETY: the part's `len` initialised elements at a host address; no other value
        // reaches them, and no device operation owns the part during the borrow.
        unsafe { std::slice::from_raw_parts(self.host_ptr(), self.len) }
    }
}

impl<S: HostSlice + MemoryMut + Sync> DerefMut for Split<S> {
    fn deref_mut(&mut self) -> &mut [S::Elem] {
        let len = self.len;
        // SAFETY: as for `deref`; `&mut self` makes this the only access to the part.
        unsafe { std::slice::from_raw_parts_mut(self.addr_mut().cast(), len) }
    }
}

impl<S> fmt::Debug for Split<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Split")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}
