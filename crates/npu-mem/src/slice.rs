//! What an asynchronous device operation may touch: the traits every safe operation accepts.

use std::ffi::c_void;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::sync::Arc;

use bytemuck::Pod;
use npu_core::{Completion, Context, Error, OpError, Result};

use crate::cast::Cast;
use crate::split::{Halves, Split};

/// Memory an asynchronous device operation may access: what every copy, memset and kernel
/// argument has in common. [`DeviceSlice`] and [`HostSlice`] say which side it lives on.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
///
/// /// Where the memory lives and how big it is, for any kind of memory.
/// fn describe<M: Memory>(memory: &M) -> (u32, usize) {
///     (memory.context().device_id(), memory.byte_len())
/// }
///
/// let ctx = Device::open(1)?.primary_context().clone();
/// assert_eq!(describe(&DeviceBuffer::<f32>::new(&ctx, 8)?), (1, 32));
/// assert_eq!(describe(&PinnedBuffer::<u8>::new(&ctx, 8)?.view(2..)?), (1, 6));
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// # Safety
///
/// Implementors guarantee that:
/// - `addr()` is the address of `len()` contiguous, initialised elements that `context()`'s
///   runtime can access asynchronously, and both stay the same for the value's lifetime
///   ([`View`], [`Cast`] and [`Split`] check a range once, when they are made, and trust it
///   for as long as they hold the memory), moves included; moving the value does not assert
///   unique access to that memory (as moving a `Box` of it would), since the device and those
///   views reach it through the address while the value moves;
/// - `context()` is the same context for the value's lifetime (device memory lives on its
///   device: operations check the device against the stream's from it);
/// - that memory stays allocated (and, for host memory, page-locked), and is not reused for
///   anything else, until every [`Completion`] passed to [`record_use`](Memory::record_use)
///   has completed, even if the value is dropped first (see [`npu_core::UseList`]);
/// - dropping the value does not block (no wait for the device, another operation, a lock
///   held across such a wait, or I/O): the value of an operation dropped in flight is dropped
///   on npu-rs's reaper thread once the device is done, and the reaper serves every deferred
///   release of the process.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not memory a device operation can use",
    label = "not device memory or page-locked host memory",
    note = "pageable host memory (a `Vec`, a slice, an array) cannot be used by async device \
            operations: copy it through a pinned pool with `Stream::copy_from_slice_staged` / \
            `Stream::copy_to_vec_staged` or `Stream::upload` / `Stream::download`, or register \
            it with `HostRegistration`"
)]
pub unsafe trait Memory: Send + 'static {
    /// The element type.
    type Elem: Pod;

    /// The context whose runtime allocated, pinned or registered the memory.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.create_context()?;
    /// let buffer = DeviceBuffer::<u8>::new(&ctx, 16)?;
    /// assert!(buffer.context().same(&ctx));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn context(&self) -> &Context;

    /// The address of the first element: a device address for device memory, a host pointer
    /// for host memory.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::<u32>::new(&ctx, 8)?;
    /// let start = buffer.addr() as usize;
    /// assert_eq!(buffer.view(2..)?.addr() as usize, start + 2 * 4);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn addr(&self) -> *const c_void;

    /// The number of elements.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::<f32>::new(&ctx, 100)?;
    /// assert_eq!(buffer.len(), 100);
    /// assert_eq!(buffer.view(..40)?.len(), 40);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn len(&self) -> usize;

    /// Whether there are no elements.
    ///
    /// npu-rs never relies on an implementation's own `is_empty`, as it never does on its
    /// `byte_len`: it asks `len()`, which the contract covers.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::<u8>::new(&ctx, 8)?;
    /// assert!(!buffer.is_empty()); // an allocation holds at least one element
    /// assert!(buffer.view(3..3)?.is_empty());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size in bytes.
    ///
    /// npu-rs never relies on an implementation's own `byte_len`: every size it hands to the
    /// runtime or to a slice is `len()` elements.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{Memory, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(PinnedBuffer::<u64>::new(&ctx, 10)?.byte_len(), 80);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn byte_len(&self) -> usize {
        bytes_of(crate::SEAL, self)
    }

    /// Records that the operation behind `completion` may access this memory.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_sim::control::{device_stats, hold, release};
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// hold(1).unwrap(); // npu-sim: nothing on device 1 runs until `release`
    /// let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 16)?, 0);
    /// let buffer = DeviceBuffer::<u8>::new(&ctx, 64)?;
    /// buffer.record_use(op.completion()); // what every stream operation does with its buffers
    /// let live = device_stats(1).unwrap().live_allocations;
    /// drop(buffer);
    /// assert_eq!(device_stats(1).unwrap().live_allocations, live, "kept while the op runs");
    /// release(1).unwrap();
    /// tokio_test::block_on(op)?; // once it completes, the buffer is freed
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn record_use(&self, completion: &Completion);

    /// An owned view of elements `range`.
    ///
    /// Fails, handing the memory back in the [`OpError`], with [`Error::InvalidArgument`]
    /// (argument `range`) when the range is not within the memory's `len()` elements.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let view = DeviceBuffer::<f32>::new(&ctx, 100)?.view(10..20)?;
    /// assert_eq!(view.len(), 10);
    /// let err = view.into_inner().view(90..101).unwrap_err();
    /// assert!(err.to_string().contains("90..101 is outside"), "{err}");
    /// assert_eq!(err.value.unwrap().len(), 100, "the buffer comes back");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn view(self, range: impl RangeBounds<usize>) -> Result<View<Self>, OpError<Self>>
    where
        Self: Sized,
    {
        let total = self.len();
        View::checked(self, range, total)
    }

    /// The same memory seen as elements of another [`Pod`] type `U`. Fails, handing the memory
    /// back, unless its bytes are a whole number of `U`s aligned for `U`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let words = DeviceBuffer::from_host_blocking(&ctx, &[1u8, 0, 0, 0, 2, 0, 0, 0])?;
    /// assert_eq!(words.cast::<u32>()?.len(), 2);
    /// let odd = DeviceBuffer::<u8>::new(&ctx, 6)?;
    /// let err = odd.cast::<u32>().unwrap_err();
    /// assert!(err.to_string().contains("6 bytes are not a whole number of u32"), "{err}");
    /// let unaligned = err.value.unwrap().view(1..5)?;
    /// let err = unaligned.cast::<u32>().unwrap_err();
    /// assert!(err.to_string().contains("not aligned to 4 bytes"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn cast<U: Pod>(self) -> Result<Cast<Self, U>, OpError<Self>>
    where
        Self: Sized,
    {
        Cast::new(self)
    }

    /// The same memory as bytes: a byte-typed view of device memory (for a byte-level copy or
    /// memset), or of host memory. Always succeeds.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let bytes = DeviceBuffer::<f32>::new(&ctx, 3)?.into_bytes();
    /// assert_eq!(bytes.len(), 12);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn into_bytes(self) -> Cast<Self, u8>
    where
        Self: Sized,
    {
        Cast::bytes(self)
    }
}

/// Memory an operation may write: the caller owns it exclusively.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory, MemoryMut};
///
/// /// Takes memory an operation may write: owned buffers and views of them, not `Arc`s.
/// fn writable<M: MemoryMut>(memory: M) -> M {
///     memory
/// }
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let view = writable(DeviceBuffer::<u8>::new(&ctx, 64)?.view(32..)?);
/// assert_eq!(view.len(), 32);
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// # Safety
///
/// As for [`Memory`], and no other live value grants access to the same memory;
/// [`addr_mut`](MemoryMut::addr_mut) returns the same address as [`addr`](Memory::addr) (a
/// copy writes `len()` elements there, and [`Split`] keeps it as the base of its parts).
pub unsafe trait MemoryMut: Memory {
    /// The address of the first element, for writing.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory, MemoryMut};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let mut view = DeviceBuffer::<u32>::new(&ctx, 8)?.view(2..)?;
    /// let start = view.get_ref().addr() as usize;
    /// assert_eq!(view.addr_mut() as usize, start + 2 * 4);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn addr_mut(&mut self) -> *mut c_void;

    /// Splits the memory into two disjoint, owned parts at element `mid`, `[0, mid)` and
    /// `[mid, len)`, as `slice::split_at_mut` does for a borrow. Each part is writable memory
    /// that an operation may take on its own; see [`Split`]. Fails, handing the memory back,
    /// when `mid > len`.
    ///
    /// Not named `split_at`: host buffers dereference to slices, and a trait method of that
    /// name, taking `self`, would win method resolution over the slice's `split_at` wherever
    /// this trait is in scope (as under `npu::prelude::*`), so `pinned.split_at(n)` would
    /// consume the buffer instead of borrowing two subslices.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{Memory, MemoryMut, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (mut head, mut tail) = PinnedBuffer::<u8>::new(&ctx, 6)?.into_halves(4)?;
    /// head.fill(1);
    /// tail.fill(2); // both parts writable at once: they never overlap
    /// assert_eq!(head.join(tail)?.into_whole()?[..], [1, 1, 1, 1, 2, 2]);
    /// let err = PinnedBuffer::<u8>::new(&ctx, 6)?.into_halves(7).unwrap_err();
    /// assert!(err.to_string().contains("7 is past"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn into_halves(self, mid: usize) -> Result<Halves<Self>, OpError<Self>>
    where
        Self: Sized + Sync,
    {
        if mid > self.len() {
            let rule = format!("{mid} is past the memory's {} elements", self.len());
            return Err(OpError::new(
                Error::invalid("MemoryMut::into_halves", "mid", rule),
                self,
            ));
        }
        Ok(Split::whole(self).divide(mid))
    }
}

/// Device memory: a [`DeviceBuffer`](crate::DeviceBuffer) (or npu-stream's
/// `PooledDeviceBuffer`), and any [`View`], [`Cast`], [`Split`] part or `Arc` of device
/// memory.
///
/// ```
/// use npu_core::{Device, OpError};
/// use npu_mem::{DeviceBuffer, DeviceSlice, Memory, MemoryMut};
/// use npu_stream::Stream;
///
/// async fn clear<D: DeviceSlice + MemoryMut>(stream: &Stream, dst: D) -> Result<D, OpError<D>> {
///     stream.memset(dst, 0).await // a failure hands `dst` back
/// }
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// let buffer = DeviceBuffer::from_host_blocking(&ctx, &[7u8; 4])?;
/// let buffer = clear(&stream, buffer.view(..2)?).await?.into_inner();
/// assert_eq!(buffer.to_vec_blocking()?, [0, 0, 7, 7]);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// # Safety
///
/// `addr()` is a device address allocated by `context()`'s runtime on `context()`'s device:
/// copies, memsets and kernel arguments refuse device memory of another device than the
/// stream's (or the kernel's) by comparing that context's device, so memory that lives on
/// another device would be written by a stream of the wrong one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory",
    label = "expected a `DeviceBuffer`, a view of one or an `Arc` of either",
    note = "to move pageable host data (a `Vec`, a slice) to the device, use \
            `Stream::upload` or `Stream::copy_from_slice_staged`, which stage it through \
            pinned memory"
)]
pub unsafe trait DeviceSlice: Memory {}

/// Host memory the runtime knows is page-locked: [`PinnedBuffer`](crate::PinnedBuffer),
/// [`PooledBuffer`](crate::PooledBuffer), [`HostRegistration`](crate::HostRegistration), and
/// any [`View`], [`Cast`], [`Split`] part or `Arc` of page-locked memory.
///
/// Ordinary (pageable) memory such as a `Vec` does not implement it on purpose: ACL silently
/// turns an async copy from pageable memory into a blocking one, which would stall a Tokio
/// worker thread. Two ways out:
///
/// - register memory you own and keep, with [`HostRegistration`](crate::HostRegistration)
///   (use a [`PageAlignedBuffer`](crate::PageAlignedBuffer): ACL registers whole pages);
/// - for one-off pageable data, the explicitly named escape hatch in npu-stream,
///   `Stream::copy_from_slice_staged(&pool, &data, dst)` and
///   `Stream::copy_to_vec_staged(&pool, src)`, which copy through a
///   [`PinnedPool`](crate::PinnedPool) block at the price of one extra CPU copy.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostRegistration, HostSlice, PageAlignedBuffer, PinnedBuffer, RegisterFlags};
///
/// fn first<H: HostSlice>(host: &H) -> H::Elem {
///     // SAFETY: the memory holds at least one initialised element and nothing writes it now.
///     unsafe { *host.host_ptr() }
/// }
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// assert_eq!(first(&PinnedBuffer::from_slice(&ctx, &[4u8, 5])?), 4);
/// let owned = PageAlignedBuffer::from_slice(&[6u8; 4096])?;
/// assert_eq!(first(&HostRegistration::new(&ctx, owned, RegisterFlags::PINNED)?), 6);
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// A `Vec` is not accepted where page-locked memory is needed:
///
/// ```compile_fail,E0277
/// # use npu_mem::DeviceBuffer;
/// # use npu_stream::Stream;
/// # fn f(stream: &Stream, dst: DeviceBuffer<u8>) {
/// // error: `Vec<u8>` is not a `HostSlice`
/// let _ = stream.copy_h2d(vec![0u8; 16], dst);
/// # }
/// ```
///
/// # Safety
///
/// `addr()` is a host pointer to memory that `context()`'s runtime pinned (`aclrtMallocHost`)
/// or registered, for at least as long as [`Memory`] requires. npu-rs makes shared slices of
/// the elements from it (`as_bytes`, the `Deref` of a [`View`], [`Cast`] or [`Split`] part), so also:
/// - `addr()` is non-null and aligned for `Elem`, even when `len()` is 0;
/// - the elements are never written while the value (or a reference to it) is shared, except
///   by a device operation given the memory as a [`MemoryMut`] by value: no interior
///   mutability of the elements (a store through `&self`, a clone that writes them while
///   another clone is read).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not page-locked host memory",
    label = "pageable memory cannot take part in an async copy",
    note = "use a `PinnedBuffer`, a `PinnedPool` block or a `HostRegistration`, or copy \
            pageable data through a pinned pool with `Stream::copy_from_slice_staged` / \
            `Stream::copy_to_vec_staged` (or `Stream::upload` / `Stream::download`)"
)]
pub unsafe trait HostSlice: Memory {
    /// The first element, as a host pointer.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostSlice, Memory, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let view = PinnedBuffer::from_slice(&ctx, &[1u16, 2, 3])?.view(1..)?;
    /// // SAFETY: the view holds two initialised elements and nothing writes them now.
    /// assert_eq!(unsafe { *view.host_ptr() }, 2);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn host_ptr(&self) -> *const Self::Elem {
        self.addr().cast()
    }

    /// The memory's bytes.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostSlice, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let host = PinnedBuffer::from_slice(&ctx, &[0x0102u16])?;
    /// assert_eq!(host.as_bytes(), 0x0102u16.to_ne_bytes());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn as_bytes(&self) -> &[u8] {
        let bytes = bytes_of(crate::SEAL, self);
        // SAFETY: `len()` initialised elements, so `bytes` initialised bytes, at a host
        // address (`Memory`'s and this trait's contracts); while we hold the memory no device
        // operation owns it, and only writable memory (`MemoryMut`, taken by value) is ever
        // written by one.
        unsafe { std::slice::from_raw_parts(self.addr().cast(), bytes) }
    }

    /// The memory's bytes, for writing (a socket read of an `f32` tensor, say).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostSlice, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let mut host = PinnedBuffer::<f32>::new(&ctx, 1)?;
    /// host.as_bytes_mut().copy_from_slice(&1.5f32.to_ne_bytes());
    /// assert_eq!(host[0], 1.5);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn as_bytes_mut(&mut self) -> &mut [u8]
    where
        Self: MemoryMut,
    {
        let len = bytes_of(crate::SEAL, self);
        // SAFETY: as for `as_bytes`; `MemoryMut` and `&mut self` make this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.addr_mut().cast(), len) }
    }
}

/// The size of `memory` in bytes as npu-rs's own code counts it, for every size it hands to
/// the runtime or to a slice: `len()` elements, which `Memory`'s contract covers, never an
/// implementation's own [`byte_len`](Memory::byte_len), which may say more than the memory
/// holds.
#[doc(hidden)]
pub fn bytes_of<M: Memory + ?Sized>(_: npu_core::seal::Seal, memory: &M) -> usize {
    memory.len() * size_of::<M::Elem>()
}

// SAFETY: an `Arc` shares the inner memory read-only; the inner value, and with it the memory,
// lives until the last clone is dropped, and its own guarantees (fixed address, length and
// context among them) cover pending uses.
unsafe impl<S: Memory + Sync> Memory for Arc<S> {
    type Elem = S::Elem;

    fn context(&self) -> &Context {
        (**self).context()
    }

    fn addr(&self) -> *const c_void {
        (**self).addr()
    }

    fn len(&self) -> usize {
        (**self).len()
    }

    fn record_use(&self, completion: &Completion) {
        (**self).record_use(completion)
    }
}

// SAFETY: the inner value is device memory.
unsafe impl<S: DeviceSlice + Sync> DeviceSlice for Arc<S> {}
// SAFETY: the inner value is page-locked host memory.
unsafe impl<S: HostSlice + Sync> HostSlice for Arc<S> {}

/// An owned sub-range of a device or host slice; it keeps the whole underlying buffer.
///
/// Obtained with [`Memory::view`]; [`View::into_inner`] gives the buffer back.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{Memory, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let view = PinnedBuffer::<u8>::new(&ctx, 100)?.view(20..)?;
/// assert_eq!((view.offset(), view.len()), (20, 80));
/// assert_eq!(view.into_inner().len(), 100);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
pub struct View<S> {
    inner: S,
    offset: usize,
    len: usize,
}

impl<S> View<S> {
    fn checked(inner: S, range: impl RangeBounds<usize>, total: usize) -> Result<Self, OpError<S>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => total,
        };
        if start > end || end > total {
            // Shown as the caller wrote its end: `0..=usize::MAX` saturated to `0..usize::MAX`
            // would name a range they did not pass.
            let shown = match range.end_bound() {
                Bound::Included(e) => format!("{start}..={e}"),
                Bound::Excluded(e) => format!("{start}..{e}"),
                Bound::Unbounded => format!("{start}.."),
            };
            // A start past the end is outside whatever the end says (`usize::MAX..`).
            let rule = if start > end && start <= total {
                format!("{shown} is reversed: it starts after it ends")
            } else {
                format!("{shown} is outside the slice's {total} elements")
            };
            return Err(OpError::new(
                Error::invalid("Memory::view", "range", rule),
                inner,
            ));
        }
        Ok(View {
            inner,
            offset: start,
            len: end - start,
        })
    }

    /// The element offset of the view within the underlying slice.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(DeviceBuffer::<u8>::new(&ctx, 10)?.view(4..)?.offset(), 4);
    /// assert_eq!(DeviceBuffer::<u8>::new(&ctx, 10)?.view(..)?.offset(), 0);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Gives back the underlying slice.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let view = DeviceBuffer::<u8>::new(&ctx, 10)?.view(2..4)?;
    /// let whole: DeviceBuffer<u8> = view.into_inner();
    /// assert_eq!(whole.len(), 10);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The underlying slice.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{Memory, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let view = PinnedBuffer::from_slice(&ctx, &[1u8, 2, 3, 4])?.view(1..3)?;
    /// assert_eq!(view.get_ref()[..], [1, 2, 3, 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

// SAFETY: the view's range lies within the inner memory's `len()` elements, checked at
// construction and still true because `Memory`'s contract keeps the inner `addr()` and `len()`
// fixed; the view forwards the inner memory's guarantees (uses are recorded on it), and the
// address arithmetic stays inside that allocation (device addresses are never dereferenced on
// the host).
unsafe impl<S: Memory> Memory for View<S> {
    type Elem = S::Elem;

    fn context(&self) -> &Context {
        self.inner.context()
    }

    fn addr(&self) -> *const c_void {
        self.inner
            .addr()
            .cast::<u8>()
            .wrapping_add(self.offset * size_of::<S::Elem>())
            .cast()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.inner.record_use(completion)
    }
}

// SAFETY: exclusive ownership of the inner memory gives exclusive access to any part of it;
// `addr_mut` is `addr`, since the inner memory's are the same.
unsafe impl<S: MemoryMut> MemoryMut for View<S> {
    fn addr_mut(&mut self) -> *mut c_void {
        let offset = self.offset * size_of::<S::Elem>();
        self.inner
            .addr_mut()
            .cast::<u8>()
            .wrapping_add(offset)
            .cast()
    }
}

// SAFETY: part of device memory is device memory.
unsafe impl<S: DeviceSlice> DeviceSlice for View<S> {}
// SAFETY: part of page-locked host memory is page-locked host memory.
unsafe impl<S: HostSlice> HostSlice for View<S> {}

/// A view of host memory dereferences to its elements, as a host [`Cast`] or [`Split`] part
/// does.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{Memory, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let mut view = PinnedBuffer::from_slice(&ctx, &[1u16, 2, 3, 4])?.view(1..3)?;
/// assert_eq!(view[..], [2, 3]);
/// view[1] = 9;
/// assert_eq!(view.into_inner()[..], [1, 2, 9, 4]);
/// # Ok::<(), npu_core::Error>(())
/// ```
impl<S: HostSlice> Deref for View<S> {
    type Target = [S::Elem];

    fn deref(&self) -> &[S::Elem] {
        // SAFETY: the view's `len` initialised elements at a host address, aligned and
        // non-null (`HostSlice`), within the inner memory (checked at construction); while we
        // hold the memory no device operation owns it, and nothing writes shared elements.
        unsafe { std::slice::from_raw_parts(self.host_ptr(), self.len) }
    }
}

impl<S: HostSlice + MemoryMut> DerefMut for View<S> {
    fn deref_mut(&mut self) -> &mut [S::Elem] {
        let len = self.len;
        // SAFETY: as for `deref`; `&mut self` owns the inner memory exclusively (`MemoryMut`),
        // so this is the only access to the view's elements.
        unsafe { std::slice::from_raw_parts_mut(self.addr_mut().cast(), len) }
    }
}
