//! Typed device memory.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use npu_core::ffi;
use npu_core::{Completion, Context, Error, Result, UseList, acl_call};

use crate::slice::{DeviceSlice, Memory, MemoryMut};

/// How `aclrtMalloc` should back an allocation (`aclrtMemMallocPolicy`).
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, MallocPolicy, Memory};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let small = DeviceBuffer::<u8>::with_policy(&ctx, 4096, MallocPolicy::NormalOnly)?;
/// assert_eq!(small.len(), 4096);
/// assert_eq!(MallocPolicy::default(), MallocPolicy::HugeFirst);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MallocPolicy {
    /// 2 MiB pages for allocations over 1 MiB, falling back to normal pages (ACL's default).
    #[default]
    HugeFirst,
    /// 2 MiB pages or fail.
    HugeOnly,
    /// Normal pages or fail.
    NormalOnly,
    /// Like `HugeFirst`, usable for copies between devices.
    HugeFirstP2p,
    /// Like `HugeOnly`, usable for copies between devices.
    HugeOnlyP2p,
    /// Like `NormalOnly`, usable for copies between devices.
    NormalOnlyP2p,
}

impl MallocPolicy {
    /// The `aclrtMemMallocPolicy` value.
    ///
    /// ```
    /// use npu_core::ffi;
    /// use npu_mem::MallocPolicy;
    ///
    /// assert_eq!(MallocPolicy::HugeFirst.raw(), ffi::ACL_MEM_MALLOC_HUGE_FIRST);
    /// assert_eq!(MallocPolicy::NormalOnlyP2p.raw(), ffi::ACL_MEM_MALLOC_NORMAL_ONLY_P2P);
    /// ```
    pub fn raw(self) -> ffi::aclrtMemMallocPolicy {
        match self {
            MallocPolicy::HugeFirst => ffi::ACL_MEM_MALLOC_HUGE_FIRST,
            MallocPolicy::HugeOnly => ffi::ACL_MEM_MALLOC_HUGE_ONLY,
            MallocPolicy::NormalOnly => ffi::ACL_MEM_MALLOC_NORMAL_ONLY,
            MallocPolicy::HugeFirstP2p => ffi::ACL_MEM_MALLOC_HUGE_FIRST_P2P,
            MallocPolicy::HugeOnlyP2p => ffi::ACL_MEM_MALLOC_HUGE_ONLY_P2P,
            MallocPolicy::NormalOnlyP2p => ffi::ACL_MEM_MALLOC_NORMAL_ONLY_P2P,
        }
    }
}

/// `len` elements of `T` in device memory (`aclrtMalloc`), tied to the context it was
/// allocated in.
///
/// Operations take a `DeviceBuffer` by value and give it back when the device is done, so
/// safe code can never touch it while the device does. Dropping it frees the memory
/// (`aclrtFree`) only once every operation recorded against it has completed; until then the
/// release waits on the reaper thread, never on the dropping thread.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let mut buffer = DeviceBuffer::<u32>::new(&ctx, 1024)?;
/// assert_eq!(buffer.byte_len(), 4096);
///
/// // Blocking copies are handy for set-up and tests; use a stream in async code.
/// buffer.copy_from_host_blocking(&vec![7; 1024])?;
/// let mut back = vec![0; 1024];
/// buffer.copy_to_host_blocking(&mut back)?;
/// assert!(back.iter().all(|&x| x == 7));
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct DeviceBuffer<T: Pod> {
    context: Context,
    ptr: *mut c_void,
    len: usize,
    uses: UseList,
    _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; the raw pointer is a device address that any thread
// may pass to ACL, and element values are plain data.
unsafe impl<T: Pod> Send for DeviceBuffer<T> {}
// SAFETY: shared access only reads the address and records uses (a mutex-protected list).
unsafe impl<T: Pod> Sync for DeviceBuffer<T> {}
// The impls above vouch for `ptr` and `_elements` alone: every other field is `Send + Sync` of its
// own, checked here, and a field added later breaks this pattern until it is checked too.
const _: fn(&DeviceBuffer<u8>) = |fields| {
    let DeviceBuffer {
        context,
        ptr: _,
        len,
        uses,
        _elements: _,
    } = fields;
    let _: [&(dyn Send + Sync); 3] = [context, len, uses];
};

/// The size in bytes of an allocation of `len` elements of `T`: exactly
/// `len * size_of::<T>()`, checked before any memory is asked for.
///
/// It counts `len` contiguous elements and nothing else: no rounding (a pool rounds the
/// result up to a size class afterwards), no alignment or bookkeeping the runtime adds to an
/// allocation, no row pitch (a 2D copy's shape is checked by `Copy2d`, not here), and not a
/// view's offset: a view of `len` elements of a larger buffer has `len * size_of::<T>()`
/// bytes wherever it starts (what [`Memory::byte_len`](crate::Memory::byte_len) says of it).
///
/// # Errors
///
/// It never wraps and never panics: every refusal is an [`Error::InvalidArgument`] naming
/// `api`, the method the caller called, and `argument`, what the caller gave the count as
/// (`len`, `bytes`, or the `data` whose length it is):
///
/// - `T` is zero-sized (argument `T`): there is nothing to allocate.
/// - `len` is 0: ACL rejects empty allocations.
/// - the product is more than `isize::MAX` bytes, or overflows `usize` (so it needs no
///   wider type to be refused): no host view of the memory could span it, as Rust slices
///   are limited to `isize::MAX` bytes. The largest size it returns is `isize::MAX` rounded
///   down to a multiple of `size_of::<T>()`.
pub fn byte_size<T>(
    _: npu_core::seal::Seal,
    api: &'static str,
    argument: &'static str,
    len: usize,
) -> Result<usize> {
    if size_of::<T>() == 0 {
        return Err(Error::invalid(
            api,
            "T",
            "zero-sized element types cannot be allocated",
        ));
    }
    if len == 0 {
        // A count "must be at least 1"; said of a slice, that reads as a number it is not.
        let rule = match argument {
            "data" => "is empty: ACL rejects empty allocations, so it needs at least 1 element",
            _ => "must be at least 1: ACL rejects empty allocations",
        };
        return Err(Error::invalid(api, argument, rule));
    }
    // Rust slices, and so every host view of the memory, are limited to isize::MAX bytes.
    len.checked_mul(size_of::<T>())
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                api,
                argument,
                format!(
                    "{len} elements of {} bytes exceed the largest possible allocation \
                     (isize::MAX bytes)",
                    size_of::<T>()
                ),
            )
        })
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` uninitialised-on-device elements with ACL's default policy.
    ///
    /// The contents are whatever the device memory held; on the simulator, zeros.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::<f32>::new(&ctx, 256)?;
    /// assert_eq!(buffer.to_vec_blocking()?, vec![0.0; 256]); // npu-sim's memory starts zeroed
    /// assert!(DeviceBuffer::<f32>::new(&ctx, 0).is_err(), "ACL rejects empty allocations");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context, len: usize) -> Result<Self> {
        let api = ("DeviceBuffer::new", "len");
        DeviceBuffer::allocate(api, context, len, MallocPolicy::HugeFirst)
    }

    /// Allocates with an explicit page policy. Fails as [`new`](DeviceBuffer::new) does, with
    /// errors naming `DeviceBuffer::with_policy`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, MallocPolicy, Memory};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // Memory another device will copy from, once peer access is enabled.
    /// let shared = DeviceBuffer::<u64>::with_policy(&ctx, 1 << 20, MallocPolicy::HugeFirstP2p)?;
    /// assert_eq!(shared.byte_len(), 8 << 20);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn with_policy(context: &Context, len: usize, policy: MallocPolicy) -> Result<Self> {
        DeviceBuffer::allocate(("DeviceBuffer::with_policy", "len"), context, len, policy)
    }

    /// Allocates with `policy`; argument errors name `api` and `argument`, the method the
    /// caller called and what it gave `len` as.
    fn allocate(
        (api, argument): (&'static str, &'static str),
        context: &Context,
        len: usize,
        policy: MallocPolicy,
    ) -> Result<Self> {
        let bytes = byte_size::<T>(crate::SEAL, api, argument, len)?;
        context.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the context is bound on this thread.
        unsafe {
            acl_call!(
                context.runtime(),
                aclrtMalloc(&mut ptr, bytes, policy.raw())
            )
        }?;
        Ok(DeviceBuffer {
            context: context.clone(),
            ptr,
            len,
            uses: UseList::new(),
            _elements: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`, copying synchronously (blocking).
    ///
    /// Blocks the calling thread until the device is done. It may be called inside a Tokio
    /// runtime (it never waits on the runtime, so it cannot deadlock it), but it holds a worker
    /// meanwhile: async code should use a stream operation (docs/architecture.md, "Blocking
    /// calls inside a Tokio runtime"). As `Context::synchronize_blocking`, it is refused with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks (a waker, a completion's release, a tracing subscriber's callback from inside an
    /// ACL call npu-rs makes under one of its locks), since a synchronous `aclrtMemcpy` may
    /// first wait for the device's running work (on the simulator, every task of the device
    /// touching memory, a running kernel included), which that thread may be the one to let
    /// finish; in a forked child it is [`Error::Forked`] (naming `aclrtMemcpy`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::from_host_blocking(&ctx, &[1u16, 2, 3])?;
    /// assert_eq!(buffer.to_vec_blocking()?, [1, 2, 3]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn from_host_blocking(context: &Context, data: &[T]) -> Result<Self> {
        const API: &str = "DeviceBuffer::from_host_blocking";
        // Before the allocation: a buffer made for a copy that is refused is never used.
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", API)?;
        let api = (API, "data");
        let mut buffer = DeviceBuffer::allocate(api, context, data.len(), MallocPolicy::HugeFirst)?;
        buffer.write_from_host(API, data)?;
        Ok(buffer)
    }

    /// The raw device address. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::{Device, ffi};
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::<u8>::new(&ctx, 16)?;
    /// let rt = ctx.runtime();
    /// ctx.bind()?;
    /// let bytes = [0xabu8; 16];
    /// // SAFETY: the buffer holds 16 bytes and no operation uses it; `bytes` is 16 host bytes.
    /// let code = unsafe {
    ///     let (dst, src) = (buffer.as_raw(), bytes.as_ptr().cast());
    ///     (rt.api().aclrtMemcpy)(dst, 16, src, 16, ffi::ACL_MEMCPY_HOST_TO_DEVICE)
    /// };
    /// rt.check("aclrtMemcpy", code)?;
    /// assert_eq!(buffer.to_vec_blocking()?, [0xab; 16]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> *mut c_void {
        self.ptr
    }

    /// Copies `src` into the buffer with the synchronous `aclrtMemcpy`, blocking this thread.
    ///
    /// Fails if the lengths differ (an invalid argument `src`). Use a stream's copy in async
    /// code.
    ///
    /// Blocks the calling thread until the device is done. It may be called inside a Tokio
    /// runtime (it never waits on the runtime, so it cannot deadlock it), but it holds a worker
    /// meanwhile: async code should use a stream operation (docs/architecture.md, "Blocking
    /// calls inside a Tokio runtime"). As `Context::synchronize_blocking`, it is refused with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks (a waker, a completion's release, a tracing subscriber's callback from inside an
    /// ACL call npu-rs makes under one of its locks), since a synchronous `aclrtMemcpy` may
    /// first wait for the device's running work (on the simulator, every task of the device
    /// touching memory, a running kernel included), which that thread may be the one to let
    /// finish; in a forked child it is [`Error::Forked`] (naming `aclrtMemcpy`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let mut buffer = DeviceBuffer::<i32>::new(&ctx, 4)?;
    /// buffer.copy_from_host_blocking(&[-1, 0, 1, 2])?;
    /// assert_eq!(buffer.to_vec_blocking()?, [-1, 0, 1, 2]);
    /// assert!(buffer.copy_from_host_blocking(&[1, 2]).is_err(), "lengths differ");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_from_host_blocking(&mut self, src: &[T]) -> Result<()> {
        const API: &str = "DeviceBuffer::copy_from_host_blocking";
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", API)?;
        self.write_from_host(API, src)
    }

    /// [`copy_from_host_blocking`](Self::copy_from_host_blocking) once the caller, `api`, has
    /// made the blocking call's refusal (so that it is made once, naming the call the program
    /// made).
    fn write_from_host(&mut self, api: &'static str, src: &[T]) -> Result<()> {
        self.check_len(api, "src", src.len())?;
        self.context.bind()?;
        let (dst, bytes) = (self.ptr, self.byte_len());
        let kind = ffi::ACL_MEMCPY_HOST_TO_DEVICE;
        // SAFETY: `src` holds `bytes` readable bytes and the buffer has room for them; `&mut
        // self` means no operation is using the buffer (operations own what they touch).
        unsafe {
            acl_call!(
                self.context.runtime(),
                aclrtMemcpy(dst, bytes, src.as_ptr().cast(), bytes, kind)
            )
        }
    }

    /// Copies the buffer into `dst` with the synchronous `aclrtMemcpy`, blocking this thread.
    ///
    /// Fails if the lengths differ (an invalid argument `dst`). Use a stream's copy in async
    /// code.
    ///
    /// Blocks the calling thread until the device is done. It may be called inside a Tokio
    /// runtime (it never waits on the runtime, so it cannot deadlock it), but it holds a worker
    /// meanwhile: async code should use a stream operation (docs/architecture.md, "Blocking
    /// calls inside a Tokio runtime"). As `Context::synchronize_blocking`, it is refused with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks (a waker, a completion's release, a tracing subscriber's callback from inside an
    /// ACL call npu-rs makes under one of its locks), since a synchronous `aclrtMemcpy` may
    /// first wait for the device's running work (on the simulator, every task of the device
    /// touching memory, a running kernel included), which that thread may be the one to let
    /// finish; in a forked child it is [`Error::Forked`] (naming `aclrtMemcpy`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::from_host_blocking(&ctx, &[5u8; 8])?;
    /// let mut back = [0u8; 8];
    /// buffer.copy_to_host_blocking(&mut back)?;
    /// assert_eq!(back, [5; 8]);
    /// assert!(buffer.copy_to_host_blocking(&mut [0u8; 9]).is_err(), "lengths differ");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_to_host_blocking(&self, dst: &mut [T]) -> Result<()> {
        const API: &str = "DeviceBuffer::copy_to_host_blocking";
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", API)?;
        self.read_to_host(API, dst)
    }

    /// [`copy_to_host_blocking`](Self::copy_to_host_blocking) once the caller, `api`, has made
    /// the blocking call's refusal (so that it is made once, naming the call the program made).
    fn read_to_host(&self, api: &'static str, dst: &mut [T]) -> Result<()> {
        self.check_len(api, "dst", dst.len())?;
        self.context.bind()?;
        let (src, bytes) = (self.ptr, self.byte_len());
        let kind = ffi::ACL_MEMCPY_DEVICE_TO_HOST;
        // SAFETY: the buffer holds `bytes` bytes at `src` (its own allocation, kept by `&self`)
        // and `dst` has room for as many (the lengths were just checked equal); any byte
        // pattern is a valid `T: Pod`, so `dst` holds valid elements afterwards, whatever
        // device work does to the source meanwhile (an operation that may write the buffer
        // owns it, `MemoryMut` taken by value, so none exists while `&self` does; a kernel
        // writing it through another address at most makes the values unspecified).
        unsafe {
            acl_call!(
                self.context.runtime(),
                aclrtMemcpy(dst.as_mut_ptr().cast(), bytes, src, bytes, kind)
            )
        }
    }

    /// Reads the whole buffer into a new `Vec` (blocking).
    ///
    /// Blocks the calling thread until the device is done. It may be called inside a Tokio
    /// runtime (it never waits on the runtime, so it cannot deadlock it), but it holds a worker
    /// meanwhile: async code should use a stream operation (docs/architecture.md, "Blocking
    /// calls inside a Tokio runtime"). As `Context::synchronize_blocking`, it is refused with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks (a waker, a completion's release, a tracing subscriber's callback from inside an
    /// ACL call npu-rs makes under one of its locks), since a synchronous `aclrtMemcpy` may
    /// first wait for the device's running work (on the simulator, every task of the device
    /// touching memory, a running kernel included), which that thread may be the one to let
    /// finish; in a forked child it is [`Error::Forked`] (naming `aclrtMemcpy`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = DeviceBuffer::from_host_blocking(&ctx, &[0.5f64, 1.5])?;
    /// assert_eq!(buffer.to_vec_blocking()?, vec![0.5, 1.5]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn to_vec_blocking(&self) -> Result<Vec<T>> {
        const API: &str = "DeviceBuffer::to_vec_blocking";
        // Before the vector's allocation, naming the call the program made.
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", API)?;
        let mut out = vec![T::zeroed(); self.len];
        self.read_to_host(API, &mut out)?;
        Ok(out)
    }

    /// Checks that the host slice the caller passed to `api` as `argument` has `other`
    /// elements, as many as the buffer.
    fn check_len(&self, api: &'static str, argument: &'static str, other: usize) -> Result<()> {
        if other != self.len {
            return Err(Error::invalid(
                api,
                argument,
                format!(
                    "has {other} elements but the device buffer has {}",
                    self.len
                ),
            ));
        }
        Ok(())
    }
}

// SAFETY: `ptr` is this buffer's own allocation of `len` elements in `context`, all three fixed
// for the buffer's life; `Drop` frees it only after every recorded use has completed.
unsafe impl<T: Pod> Memory for DeviceBuffer<T> {
    type Elem = T;

    fn context(&self) -> &Context {
        &self.context
    }

    fn addr(&self) -> *const c_void {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn record_use(&self, completion: &Completion) {
        self.uses.record(completion);
    }
}

// SAFETY: the buffer is the only owner of its allocation, and `addr_mut` is `addr`.
unsafe impl<T: Pod> MemoryMut for DeviceBuffer<T> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.ptr
    }
}

// SAFETY: `ptr` comes from aclrtMalloc made with `context` bound (`allocate`), so it is device
// memory of `context`'s runtime on `context`'s device, and both are fixed for the buffer's life.
unsafe impl<T: Pod> DeviceSlice for DeviceBuffer<T> {}

/// Moves a raw device address into a deferred release.
struct DevicePtr(*mut c_void);

// SAFETY: a device address is an integer to the host; it is only handed back to aclrtFree.
unsafe impl Send for DevicePtr {}

impl<T: Pod> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let context = self.context.clone();
        let ptr = DevicePtr(self.ptr);
        let release = move || {
            let ptr = ptr;
            let runtime = context.runtime();
            // The reference does not say that aclrtFree ignores the current context, and a
            // runtime that frees through the current context's device must not be handed
            // another device's (or, on the reaper's thread, no) context.
            let freed = context.bind().and_then(|()| {
                // SAFETY: the allocation is ours and every operation that used it has
                // completed, so the device will not touch it again (operations complete only
                // then, failed or not); aclrtFree does not wait for the device.
                unsafe { acl_call!(runtime, aclrtFree(ptr.0)) }
            });
            if let Err(err) = freed {
                npu_core::log!(warn, %err, "device memory was not freed (leaked)");
            }
        };
        // SAFETY: the release frees with aclrtFree, which does not wait for the device.
        unsafe { self.uses.release(release) };
    }
}

impl<T: Pod> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.context.device_id())
            .field("len", &self.len)
            .field("ptr", &self.ptr)
            .field("uses", &self.uses)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::byte_size;
    use npu_core::Error;

    const MAX: usize = isize::MAX as usize;

    /// The argument and rule of `byte_size`'s refusal of `len` elements of `T`.
    fn refused<T>(len: usize) -> (&'static str, String) {
        match byte_size::<T>(crate::SEAL, "DeviceBuffer::new", "len", len) {
            Err(Error::InvalidArgument {
                api,
                argument,
                rule,
            }) => {
                assert_eq!(api, "DeviceBuffer::new");
                (argument, rule.into_owned())
            }
            other => panic!("{len} elements of {} bytes: {other:?}", size_of::<T>()),
        }
    }

    #[test]
    fn byte_size_is_exact_up_to_isize_max_and_refuses_the_rest_with_a_typed_error() {
        let size =
            |len| byte_size::<[u8; 3]>(crate::SEAL, "DeviceBuffer::new", "len", len).unwrap();
        assert_eq!(size(1), 3);
        // The largest: isize::MAX rounded down to the element size, for 1, 3 and 8 bytes.
        assert_eq!(size(MAX / 3), MAX - MAX % 3);
        assert_eq!(
            byte_size::<u8>(crate::SEAL, "api", "len", MAX).unwrap(),
            MAX
        );
        assert_eq!(
            byte_size::<u64>(crate::SEAL, "api", "len", MAX / 8).unwrap(),
            MAX - MAX % 8
        );
        // One element more is past isize::MAX bytes; usize::MAX elements overflow usize
        // itself: refused, never wrapped to a small size.
        for (argument, rule) in [
            refused::<u8>(MAX + 1),
            refused::<[u8; 3]>(MAX / 3 + 1),
            refused::<u64>(MAX / 8 + 1),
            refused::<u64>(usize::MAX),
            refused::<u8>(usize::MAX),
        ] {
            assert_eq!(argument, "len");
            assert!(
                rule.contains("exceed the largest possible allocation"),
                "{rule}"
            );
        }
        let (argument, rule) = refused::<u32>(0);
        assert_eq!(argument, "len");
        assert!(rule.contains("at least 1"), "{rule}");
        let (argument, rule) = refused::<()>(1);
        assert_eq!(argument, "T");
        assert!(rule.contains("zero-sized"), "{rule}");
    }
}
