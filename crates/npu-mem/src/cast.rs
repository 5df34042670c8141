//! Reinterpreting memory as another plain-data element type.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;
use npu_core::{Completion, Context, Error, OpError};

use crate::slice::{DeviceSlice, HostSlice, Memory, MemoryMut, bytes_of};

/// Memory seen as elements of `U`: the same bytes, another [`Pod`] type. Obtained with
/// [`Memory::cast`] (checked size and alignment) or [`Memory::into_bytes`];
/// [`into_inner`](Cast::into_inner) gives the memory back.
///
/// It is whatever the inner memory is (device or page-locked host, writable or not), and it
/// records uses on the inner memory, so the allocation outlives every operation on the cast.
/// A host cast dereferences to `[U]`.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{Memory, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let floats = PinnedBuffer::from_slice(&ctx, &[1.0f32, -2.0])?;
/// let words = floats.cast::<u32>()?;
/// assert_eq!(words[..], [0x3f80_0000, 0xc000_0000]);
/// assert_eq!(words.into_inner()[..], [1.0, -2.0]);
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct Cast<S, U> {
    inner: S,
    _elements: PhantomData<fn() -> U>,
}

impl<S: Memory> Cast<S, u8> {
    /// Any memory as bytes: a whole number of them, always aligned.
    pub(crate) fn bytes(inner: S) -> Self {
        Cast {
            inner,
            _elements: PhantomData,
        }
    }
}

impl<S: Memory, U: Pod> Cast<S, U> {
    /// Checks that `inner`'s bytes are a whole number of aligned `U`s.
    pub(crate) fn new(inner: S) -> Result<Self, OpError<S>> {
        let (size, align) = (size_of::<U>(), align_of::<U>());
        let problem = if size == 0 {
            Some("the target type has no size".to_string())
        } else if !bytes_of(crate::SEAL, &inner).is_multiple_of(size) {
            Some(format!(
                "{} bytes are not a whole number of {} ({size} bytes)",
                bytes_of(crate::SEAL, &inner),
                std::any::type_name::<U>()
            ))
        } else if !(inner.addr() as usize).is_multiple_of(align) {
            Some(format!(
                "the address {:p} is not aligned to {align} bytes for {}",
                inner.addr(),
                std::any::type_name::<U>()
            ))
        } else {
            None
        };
        match problem {
            Some(rule) => Err(OpError::new(
                Error::invalid("Memory::cast", "U", rule),
                inner,
            )),
            None => Ok(Cast {
                inner,
                _elements: PhantomData,
            }),
        }
    }

    /// Gives back the memory with its own element type.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let bytes = DeviceBuffer::<u64>::new(&ctx, 4)?.into_bytes();
    /// assert_eq!(bytes.len(), 32);
    /// assert_eq!(bytes.into_inner().len(), 4);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

// SAFETY: the same bytes as the inner memory, whose guarantees it forwards: `new` checked
// that they are a whole number of `U`s at `U`'s alignment, and every bit pattern is a valid
// `U` (`Pod`), so the elements are initialised values.
unsafe impl<S: Memory, U: Pod> Memory for Cast<S, U> {
    type Elem = U;

    fn context(&self) -> &Context {
        self.inner.context()
    }

    fn addr(&self) -> *const c_void {
        self.inner.addr()
    }

    fn len(&self) -> usize {
        bytes_of(crate::SEAL, &self.inner) / size_of::<U>()
    }

    fn record_use(&self, completion: &Completion) {
        self.inner.record_use(completion)
    }
}

// SAFETY: exclusive ownership of the inner memory gives exclusive access to its bytes;
// `addr_mut` is `addr`, since the inner memory's are the same.
unsafe impl<S: MemoryMut, U: Pod> MemoryMut for Cast<S, U> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.inner.addr_mut()
    }
}

// SAFETY: the inner memory is device memory.
unsafe impl<S: DeviceSlice, U: Pod> DeviceSlice for Cast<S, U> {}
// SAFETY: the inner memory is page-locked host memory.
unsafe impl<S: HostSlice, U: Pod> HostSlice for Cast<S, U> {}

impl<S: HostSlice, U: Pod> Deref for Cast<S, U> {
    type Target = [U];

    fn deref(&self) -> &[U] {
        // SAFETY: `len()` initialised, aligned `U`s at a host address (`HostSlice`, checked
        // by `new`); while we hold the memory no device operation owns it, so nothing writes
        // it during the borrow.
        unsafe { std::slice::from_raw_parts(self.host_ptr(), self.len()) }
    }
}

impl<S: HostSlice + MemoryMut, U: Pod> DerefMut for Cast<S, U> {
    fn deref_mut(&mut self) -> &mut [U] {
        let len = self.len();
        // SAFETY: as for `deref`, and `MemoryMut` makes this the only access to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.addr_mut().cast::<U>(), len) }
    }
}

impl<S: fmt::Debug, U> fmt::Debug for Cast<S, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cast")
            .field("inner", &self.inner)
            .field("as", &std::any::type_name::<U>())
            .finish()
    }
}
