//! Registering memory the program already owns with the runtime, so the device can copy from
//! it asynchronously (and, mapped, access it directly).

use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};

use npu_core::ffi;
use npu_core::{Completion, Context, Error, Result, UseList, acl_call_opt};

use crate::slice::{HostSlice, Memory, MemoryMut};

mod flags;
mod page_aligned;
mod stable;

pub use flags::{HacType, RegisterFlags, host_mem_map_capability};
pub use page_aligned::PageAlignedBuffer;
pub use stable::StableBuffer;

use crate::host_block::PAGE;

/// A host buffer registered with the runtime (`aclrtHostRegisterV2`), owned for as long as it
/// is registered.
///
/// Registration makes memory the program already has usable where pinned memory is needed:
/// stream copies accept it ([`HostSlice`]), and with [`RegisterFlags::MAPPED`] kernels can
/// reach it through [`device_ptr`](HostRegistration::device_ptr). Registering costs about as
/// much as pinning (up to ~100 ms for large buffers), so register long-lived buffers once.
///
/// The registration owns the buffer `B` (a [`StableBuffer`]), so the memory can be neither
/// freed nor moved while registered. Dropping it unregisters (`aclrtHostUnregister`) and then
/// drops the buffer, once every operation recorded against it has completed, failed or not:
/// an operation completes only once the device will never touch its memory again
/// (docs/cancellation.md, rule 3). Only if unregistering fails are both leaked (the runtime
/// may still map the memory). [`into_inner`](HostRegistration::into_inner) gives the buffer
/// back.
///
/// The rules ACL sets are checked before calling it, with an error naming the rule: the
/// address must be 4 KiB aligned, and the registered size non-zero and whole pages (the
/// runtime pins and maps whole pages, so a partial last page would drag in, and conflict
/// with, neighbouring allocations). [`PageAlignedBuffer`] always qualifies. A `Vec` qualifies
/// only if its allocation happens to start on a page, which the global allocator does not
/// promise and seldom does (glibc's `malloc` puts a header before every block, so its large
/// blocks start 16 bytes past a page): expect a `Vec` to be refused, with the buffer handed
/// back. Memory a program fills to stream should be a [`PageAlignedBuffer`] from the start;
/// data that is already in a `Vec` goes through a pinned pool instead
/// (`Stream::copy_from_slice_staged`, `Stream::upload`). Registering a
/// range that is already registered fails with ACL's `ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED`
/// (507910).
///
/// On runtimes without `aclrtHostRegisterV2`, `aclrtHostRegister` (which always pins and
/// maps) is used instead.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, HostRegistration, PageAlignedBuffer, RegisterFlags};
/// use npu_stream::Stream;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// let data = PageAlignedBuffer::from_slice(&[3u8; 8192])?;
/// let host = HostRegistration::new(&ctx, data, RegisterFlags::PINNED)?;
/// let device = DeviceBuffer::<u8>::new(&ctx, 8192)?;
/// let (host, device) = stream.copy_h2d(host, device).await?;
/// assert_eq!(device.to_vec_blocking()?, vec![3u8; 8192]);
/// let data: PageAlignedBuffer<u8> = host.into_inner().await?; // unregistered, ours again
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct HostRegistration<B: StableBuffer> {
    context: Context,
    /// `None` only after `into_inner` took it.
    buffer: Option<B>,
    /// The buffer's elements, fixed for its lifetime (a `StableBuffer` guarantee).
    ptr: *mut B::Elem,
    len: usize,
    flags: RegisterFlags,
    device_ptr: Option<*mut c_void>,
    uses: UseList,
}

// SAFETY: the registration owns the buffer (`Send + Sync` by the `StableBuffer` bound); the
// raw pointers are addresses into it, or a device alias only handed back to the caller.
unsafe impl<B: StableBuffer> Send for HostRegistration<B> {}
// SAFETY: shared access only reads; use recording is behind a mutex.
unsafe impl<B: StableBuffer> Sync for HostRegistration<B> {}
// The impls above vouch for `ptr` and `device_ptr` alone: every other field is `Send + Sync` of its
// own under the impls' bound, checked here for any such `B` (not one chosen type), and a field
// added later breaks this pattern until it is checked too.
const _: () = {
    fn checked<B: StableBuffer>(fields: &HostRegistration<B>) {
        let HostRegistration {
            context,
            buffer,
            ptr: _,
            len,
            flags,
            device_ptr: _,
            uses,
        } = fields;
        let _: [&(dyn Send + Sync); 5] = [context, buffer, len, flags, uses];
    }
    let _ = checked::<Vec<u8>>;
};

/// A registration that failed: the error, and the buffer handed back.
///
/// It converts into [`npu_core::Error`] (dropping the buffer), so `?` works in functions
/// returning `npu_core::Result`. As an error it is its `error`: it displays that error's
/// message and reports that error's source as its own, so a report walking the chain says the
/// message once; its `Debug` names the buffer's type, not its contents.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostRegistration, RegisterFlags};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let rejected = HostRegistration::new(&ctx, vec![0u8; 100], RegisterFlags::PINNED).unwrap_err();
/// assert!(rejected.error.to_string().contains("HostRegistration::new"));
/// assert_eq!(rejected.buffer.len(), 100);
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct RegisterError<B> {
    /// Why the registration failed.
    pub error: Error,
    /// The buffer, unregistered and unchanged.
    pub buffer: B,
}

impl<B> fmt::Display for RegisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

// Not derived: the buffer need not be `Debug`, and a panic message from `unwrap` should show
// the error, not the megabytes the caller tried to register (as `OpError`'s does).
impl<B> fmt::Debug for RegisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterError")
            .field("error", &self.error)
            .field("buffer", &std::any::type_name::<B>())
            .finish()
    }
}

// Transparent, as `OpError` is: it displays its error's message, so reporting that error again
// as its source would print the message twice in a report that walks the chain.
impl<B> std::error::Error for RegisterError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<B> From<RegisterError<B>> for Error {
    fn from(rejected: RegisterError<B>) -> Error {
        rejected.error
    }
}

/// Checks ACL's registration rules before calling it.
fn check_range(ptr: *const c_void, bytes: usize) -> Result<()> {
    let api = "HostRegistration::new";
    if bytes == 0 {
        return Err(Error::invalid(
            api,
            "buffer",
            // Not "is empty": a `Vec<()>` of 4096 elements is not, and holds no bytes either.
            "holds no bytes: ACL rejects zero-size registrations",
        ));
    }
    if !(ptr as usize).is_multiple_of(PAGE) {
        return Err(Error::invalid(
            api,
            "buffer",
            format!(
                "starts at {ptr:p}, which is not 4 KiB aligned: ACL registers page-aligned \
                 memory only (PageAlignedBuffer always is)"
            ),
        ));
    }
    if !bytes.is_multiple_of(PAGE) {
        return Err(Error::invalid(
            api,
            "buffer",
            format!(
                "spans {bytes} bytes, not whole 4 KiB pages: the runtime would pin and map the \
                 partial last page, which other allocations share"
            ),
        ));
    }
    Ok(())
}

impl<B: StableBuffer> HostRegistration<B> {
    /// Registers `buffer` with `flags` in `context`'s runtime and takes ownership of it.
    ///
    /// On failure the buffer comes back in the [`RegisterError`].
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, PageAlignedBuffer, RegisterFlags};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = PageAlignedBuffer::<f32>::new(1024)?;
    /// let mapped = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED | RegisterFlags::MAPPED)?;
    /// assert!(mapped.device_ptr().is_some());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(
        context: &Context,
        mut buffer: B,
        flags: RegisterFlags,
    ) -> Result<Self, RegisterError<B>> {
        let slice = buffer.as_mut_slice();
        let (ptr, len, slice_bytes) = (slice.as_mut_ptr(), slice.len(), size_of_val(slice));
        let bytes = buffer.registered_bytes();
        if bytes < slice_bytes {
            // The registration is `HostSlice` for every element: all of them must be pinned.
            let rule = format!(
                "registers {bytes} bytes of its {slice_bytes}: the elements past them would \
                 not be page-locked, yet copies would use them as if they were"
            );
            let error = Error::invalid("HostRegistration::new", "buffer", rule);
            return Err(RegisterError { error, buffer });
        }
        match register(context, ptr.cast(), bytes, flags) {
            Ok(device_ptr) => Ok(HostRegistration {
                context: context.clone(),
                buffer: Some(buffer),
                ptr,
                len,
                flags,
                device_ptr,
                uses: UseList::new(),
            }),
            Err(error) => Err(RegisterError { error, buffer }),
        }
    }

    /// The device's alias of the memory, for kernel arguments, when registered with
    /// [`RegisterFlags::MAPPED`]. ACL forbids passing it to copies; use the registration
    /// itself there. Dereferencing it is up to device code, and it is valid only while the
    /// registration lives. npu-rs records no use through it: a kernel given it by value must
    /// complete before the registration is dropped, and before host code reads memory the
    /// kernel writes (or writes memory it reads), which `Stream::launch`'s contract requires.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, PageAlignedBuffer, RegisterFlags};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pinned = HostRegistration::new(&ctx, PageAlignedBuffer::<u8>::new(4096)?, RegisterFlags::PINNED)?;
    /// assert!(pinned.device_ptr().is_none());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device_ptr(&self) -> Option<*mut c_void> {
        self.device_ptr
    }

    /// The flags the memory was registered with.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, PageAlignedBuffer, RegisterFlags};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let reg = HostRegistration::new(&ctx, PageAlignedBuffer::<u8>::new(1)?, RegisterFlags::PINNED)?;
    /// assert_eq!(reg.flags(), RegisterFlags::PINNED);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn flags(&self) -> RegisterFlags {
        self.flags
    }

    /// Waits until every operation recorded against the memory has completed, unregisters
    /// it, and gives the buffer back.
    ///
    /// An operation that used the memory and failed (a device fault, an abort) is waited
    /// for like any other: once it has completed the device is done with the memory, so the
    /// buffer comes back. Fails only if unregistering fails (the buffer is leaked, as the
    /// runtime may still map it).
    ///
    /// Cancel safety: not cancel-safe. Dropping the future drops the registration: the memory
    /// is unregistered and the buffer freed after the pending work, as on drop, and the
    /// buffer is not returned.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, RegisterFlags};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = npu_mem::PageAlignedBuffer::from_slice(&[1u16; 2048])?;
    /// let reg = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED)?;
    /// assert_eq!(reg.into_inner().await?[0], 1);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn into_inner(mut self) -> Result<B> {
        let api = "HostRegistration::into_inner";
        for operation in self.uses.pending_uses() {
            // Failed or not, a completed operation no longer touches the memory.
            let _ = operation.wait().await;
        }
        let unregistered = unregister(&self.context, self.ptr.cast());
        let buffer = self
            .buffer
            .take()
            .ok_or_else(|| Error::invalid(api, "self", "the buffer was already taken"))?;
        match unregistered {
            Ok(()) => Ok(buffer),
            Err(err) => {
                std::mem::forget(buffer);
                Err(err)
            }
        }
    }
}

/// Registers `[ptr, ptr + bytes)`, returning the device alias if `flags` asks for a mapping.
fn register(
    context: &Context,
    ptr: *mut c_void,
    bytes: usize,
    flags: RegisterFlags,
) -> Result<Option<*mut c_void>> {
    check_range(ptr, bytes)?;
    context.bind()?;
    let runtime = context.runtime();
    let size = bytes as u64;
    if runtime.api().aclrtHostRegisterV2.is_none() {
        let mut alias: *mut c_void = std::ptr::null_mut();
        let kind = ffi::ACL_HOST_REGISTER_MAPPED;
        // SAFETY: the range is owned by the caller's buffer and outlives the registration;
        // `alias` is a valid out-pointer.
        unsafe { acl_call_opt!(runtime, aclrtHostRegister(ptr, size, kind, &mut alias)) }?;
        return Ok(flags.is_mapped().then_some(alias));
    }
    let raw = flags.raw();
    // SAFETY: the range is owned by the caller's buffer, which the registration keeps alive
    // and unmoved until it unregisters.
    unsafe { acl_call_opt!(runtime, aclrtHostRegisterV2(ptr, size, raw)) }?;
    if !flags.is_mapped() {
        return Ok(None);
    }
    let mut alias: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ptr` was just registered as MAPPED; `alias` is a valid out-pointer.
    let mapped = unsafe { acl_call_opt!(runtime, aclrtHostGetDevicePointer(ptr, &mut alias, 0)) };
    match mapped {
        Ok(()) => Ok(Some(alias)),
        Err(err) => {
            if let Err(undo) = unregister(context, ptr) {
                npu_core::log!(warn, %undo, "undoing a registration failed");
            }
            Err(err)
        }
    }
}

fn unregister(context: &Context, ptr: *mut c_void) -> Result<()> {
    context.bind()?;
    // SAFETY: `ptr` is the start of a range this registration registered.
    unsafe { acl_call_opt!(context.runtime(), aclrtHostUnregister(ptr)) }
}

impl<B: StableBuffer> Deref for HostRegistration<B> {
    type Target = [B::Elem];

    fn deref(&self) -> &[B::Elem] {
        // SAFETY: `ptr`/`len` are the owned buffer's elements, which a `StableBuffer` keeps at
        // this address while it lives (it lives as long as `self`). The device writes into
        // them only while an operation owns the registration, so no `&self` exists then.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<B: StableBuffer> DerefMut for HostRegistration<B> {
    fn deref_mut(&mut self) -> &mut [B::Elem] {
        // SAFETY: as for `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: the elements belong to the owned buffer, registered with the context's runtime until
// `Drop` unregisters it after every recorded use has completed (or leaks it); its address,
// length and context are set at registration and never change.
unsafe impl<B: StableBuffer> Memory for HostRegistration<B> {
    type Elem = B::Elem;

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

// SAFETY: the registration owns the buffer exclusively, and `addr_mut` is `addr`.
unsafe impl<B: StableBuffer> MemoryMut for HostRegistration<B> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.ptr.cast()
    }
}

// SAFETY: the memory is registered (pinned) with the context's runtime while the value lives.
unsafe impl<B: StableBuffer> HostSlice for HostRegistration<B> {}

/// Moves a registered address into a deferred release.
struct HostAddr(*mut c_void);

// SAFETY: the address is only handed back to aclrtHostUnregister.
unsafe impl Send for HostAddr {}

impl<B: StableBuffer> Drop for HostRegistration<B> {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        let context = self.context.clone();
        let ptr = HostAddr(self.ptr.cast());
        // SAFETY: aclrtHostUnregister does not wait for the device, and dropping the buffer
        // (a `StableBuffer`: host memory) frees it without waiting.
        unsafe {
            self.uses.release(move || {
                let ptr = ptr;
                match unregister(&context, ptr.0) {
                    Ok(()) => drop(buffer),
                    Err(err) => {
                        npu_core::log!(warn, %err, "a host registration was leaked with its buffer");
                        std::mem::forget(buffer);
                    }
                }
            })
        };
    }
}

impl<B: StableBuffer> fmt::Debug for HostRegistration<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRegistration")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("flags", &self.flags)
            .field("device_ptr", &self.device_ptr)
            .field("uses", &self.uses)
            .finish()
    }
}
