//! Raw page-locked host allocations, shared by [`PinnedBuffer`](crate::PinnedBuffer) and the
//! [`PinnedPool`](crate::PinnedPool): how they are allocated, checked, zeroed and freed.

use std::ffi::c_void;
use std::ptr::NonNull;

use npu_core::ffi;
use npu_core::{Context, Error, Result, acl_call, acl_call_opt};

/// The address alignment `aclrtMallocHost` documents, which npu-rs checks on every block (the
/// reference leaves it to the caller on some products, where the host is the device's own
/// CPU).
pub(crate) const HOST_ALIGN: usize = 64;
/// The host page size: the granularity of pinning and of registration, and the pool's
/// smallest block.
pub(crate) const PAGE: usize = 4096;

/// Options for `aclrtMallocHostWithCfg`: the attributes of a pinned host allocation.
///
/// Passing a configuration (even an empty one) makes npu-rs allocate with
/// `aclrtMallocHostWithCfg`, which only newer CANN releases export; on older ones the
/// allocation fails with [`Error::Unsupported`].
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostAllocConfig, PinnedBuffer};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let config = HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE);
/// let buffer = PinnedBuffer::<u16>::with_config(&ctx, 512, &config)?;
/// assert_eq!(buffer.len(), 512);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[must_use = "a HostAllocConfig is a value: a setter returns the changed copy"]
pub struct HostAllocConfig {
    module_id: Option<u16>,
    device_va: bool,
}

impl HostAllocConfig {
    /// The module id CANN recommends for application allocations.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostAllocConfig, PinnedBuffer};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let config = HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE);
    /// let buffer = PinnedBuffer::<u8>::with_config(&ctx, 64, &config)?;
    /// assert!(buffer.iter().all(|&b| b == 0));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const APP_MODULE: u16 = 33;

    /// A configuration without attributes.
    ///
    /// ```
    /// assert_eq!(npu_mem::HostAllocConfig::new(), Default::default());
    /// ```
    pub fn new() -> Self {
        HostAllocConfig::default()
    }

    /// Attributes the memory to module `id` in the runtime's accounting
    /// (`ACL_RT_MEM_ATTR_MODULE_ID`).
    ///
    /// ```
    /// let config = npu_mem::HostAllocConfig::new().module_id(33);
    /// assert_ne!(config, npu_mem::HostAllocConfig::new());
    /// ```
    pub fn module_id(mut self, id: u16) -> Self {
        self.module_id = Some(id);
        self
    }

    /// Asks for a host virtual address the device can use once the memory is registered
    /// (`ACL_RT_MEM_ATTR_VA_FLAG` = 1; Atlas A2/A3 only).
    ///
    /// ```
    /// let config = npu_mem::HostAllocConfig::new().device_va(true);
    /// assert_ne!(config, npu_mem::HostAllocConfig::new());
    /// ```
    pub fn device_va(mut self, enabled: bool) -> Self {
        self.device_va = enabled;
        self
    }

    fn attributes(&self) -> Vec<ffi::aclrtMallocAttribute> {
        let mut attributes = Vec::new();
        if let Some(id) = self.module_id {
            let mut value = ffi::aclrtMallocAttrValue::default();
            value.moduleId = id;
            attributes.push(ffi::aclrtMallocAttribute {
                attr: ffi::ACL_RT_MEM_ATTR_MODULE_ID,
                value,
            });
        }
        if self.device_va {
            let mut value = ffi::aclrtMallocAttrValue::default();
            value.vaFlag = 1;
            attributes.push(ffi::aclrtMallocAttribute {
                attr: ffi::ACL_RT_MEM_ATTR_VA_FLAG,
                value,
            });
        }
        attributes
    }
}

/// Checks that `T` can live in host memory ACL allocates (at most 64-byte aligned).
pub(crate) fn check_host_align<T>(api: &'static str) -> Result<()> {
    if align_of::<T>() > HOST_ALIGN {
        return Err(Error::invalid(
            api,
            "T",
            format!(
                "its alignment of {} bytes exceeds the {HOST_ALIGN} bytes aclrtMallocHost \
                 guarantees",
                align_of::<T>()
            ),
        ));
    }
    Ok(())
}

/// The address a successful pinned allocation returned, if npu-rs can use it: not NULL, and
/// aligned to [`HOST_ALIGN`], which every element type npu-rs accepts for pinned memory needs
/// at most ([`check_host_align`]) and which shared slices of the block rely on. The reference
/// guarantees that alignment except on products whose host is the device's own CPU, where it
/// leaves alignment to the caller; an unaligned block is refused rather than trusted.
fn returned_block(raw: *mut c_void) -> Result<NonNull<u8>> {
    let Some(ptr) = NonNull::new(raw.cast::<u8>()) else {
        return Err(Error::invalid(
            "aclrtMallocHost",
            "hostPtr",
            "the runtime reported success but returned NULL",
        ));
    };
    if !(ptr.as_ptr() as usize).is_multiple_of(HOST_ALIGN) {
        return Err(Error::invalid(
            "aclrtMallocHost",
            "hostPtr",
            format!(
                "the runtime returned {ptr:p}, which is not {HOST_ALIGN}-byte aligned: npu-rs \
                 makes slices of pinned blocks for element types aligned up to {HOST_ALIGN} bytes"
            ),
        ));
    }
    Ok(ptr)
}

/// One zero-filled `aclrtMallocHost` allocation. Owning it means owning the memory; it is
/// returned with [`HostBlock::free`], never implicitly (dropping it leaks).
pub(crate) struct HostBlock {
    ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: the block is an owned allocation; its address may be used and freed from any thread.
unsafe impl Send for HostBlock {}
// The impl above vouches for `ptr` alone: every other field is `Send` of its own, checked here, and
// a field added later breaks this pattern until it is checked too.
const _: fn(&HostBlock) = |fields| {
    let HostBlock { ptr: _, bytes } = fields;
    let _: [&dyn Send; 1] = [bytes];
};

impl HostBlock {
    /// Allocates `bytes` (already checked to be non-zero and at most `isize::MAX`) of pinned
    /// host memory in `context`, zero-filled so that every element type sees initialised
    /// bytes.
    pub(crate) fn alloc(
        context: &Context,
        bytes: usize,
        config: Option<&HostAllocConfig>,
    ) -> Result<HostBlock> {
        context.bind()?;
        let runtime = context.runtime();
        let mut raw: *mut c_void = std::ptr::null_mut();
        match config {
            None => {
                // SAFETY: `raw` is a valid out-pointer; the context is bound on this thread.
                unsafe { acl_call!(runtime, aclrtMallocHost(&mut raw, bytes)) }?
            }
            Some(config) => {
                let mut attributes = config.attributes();
                let mut cfg = ffi::aclrtMallocConfig {
                    attrs: attributes.as_mut_ptr(),
                    numAttrs: attributes.len(),
                };
                // SAFETY: `raw` is a valid out-pointer and `cfg` points at `attributes`, both
                // alive for the call; the context is bound on this thread.
                unsafe {
                    acl_call_opt!(
                        runtime,
                        aclrtMallocHostWithCfg(&mut raw, bytes as u64, &mut cfg)
                    )
                }?
            }
        }
        let ptr = match returned_block(raw) {
            Ok(ptr) => ptr,
            Err(err) => {
                if !raw.is_null() {
                    // SAFETY: the runtime just allocated `raw`; nothing else knows of it.
                    let freed = unsafe { acl_call!(runtime, aclrtFreeHost(raw)) };
                    if let Err(free) = freed {
                        npu_core::log!(warn, %free, bytes, "refused pinned host memory was not freed (leaked)");
                    }
                }
                return Err(err);
            }
        };
        // SAFETY: the runtime returned `bytes` writable bytes at `ptr`.
        unsafe { ptr.as_ptr().write_bytes(0, bytes) };
        Ok(HostBlock { ptr, bytes })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frees the block. The caller has seen every operation that used it complete, so nothing
    /// can still use the memory and `aclrtFreeHost` frees it at once (the device-synchronising
    /// `aclrtFreeHostWithDevSync` would stall the reaper for nothing).
    pub(crate) fn free(self, context: &Context) {
        let runtime = context.runtime();
        let ptr = self.ptr.as_ptr().cast::<c_void>();
        // Bound as for `DeviceBuffer`'s free: pinned memory is allocated in a context, and the
        // reference does not say aclrtFreeHost ignores the current one.
        let freed = context.bind().and_then(|()| {
            // SAFETY: the allocation is ours and every recorded use has completed.
            unsafe { acl_call!(runtime, aclrtFreeHost(ptr)) }
        });
        if let Err(err) = freed {
            npu_core::log!(warn, %err, bytes = self.bytes, "pinned host memory was not freed (leaked)");
        }
    }
}

/// Implements `Deref<Target = [T]>`, `DerefMut`, `Memory`, `MemoryMut` and `HostSlice` for a
/// buffer type `$type<T: Pod>` that owns a pinned block: fields `block: ManuallyDrop<HostBlock>`
/// (at least `len` elements, aligned for `T`, checked with [`check_host_align`]), `len` and
/// `uses: UseList`, and a `Drop` that gives the block up only through `uses.release`.
/// `|$this| $context` reaches the buffer's `Context`.
macro_rules! pinned_memory {
    ($type:ident, |$this:ident| $context:expr) => {
        impl<T: bytemuck::Pod> std::ops::Deref for $type<T> {
            type Target = [T];

            fn deref(&self) -> &[T] {
                // SAFETY: the block holds at least `len` elements' bytes, all initialised (zeroed
                // when pinned, written since only through slices of `Pod` elements, of this
                // buffer or of an earlier owner of a pooled block, or by the device) and so
                // valid `T`s; it is aligned for `T` (`alloc` refuses a block not
                // `HOST_ALIGN`-aligned, and `T`'s alignment was checked to be at most that) and
                // owned by `self` until `Drop`. Nothing writes it during the borrow: a copy into
                // it owns the buffer (so no `&self` exists), and a kernel given its
                // device-usable address must not write it while host code reads it
                // (`Stream::launch`'s contract).
                unsafe { std::slice::from_raw_parts(self.block.ptr().cast(), self.len) }
            }
        }

        impl<T: bytemuck::Pod> std::ops::DerefMut for $type<T> {
            fn deref_mut(&mut self) -> &mut [T] {
                // SAFETY: as for `deref`, and `&mut self` is exclusive.
                unsafe { std::slice::from_raw_parts_mut(self.block.ptr().cast(), self.len) }
            }
        }

        // SAFETY: the block is an aclrtMallocHost allocation of at least `len` initialised
        // elements used by this buffer alone; `Drop` gives it up (to be freed or pooled) only
        // after every recorded use has completed. Block, length and context are fixed for the
        // buffer's life.
        unsafe impl<T: bytemuck::Pod> $crate::slice::Memory for $type<T> {
            type Elem = T;

            fn context(&self) -> &npu_core::Context {
                let $this = self;
                $context
            }

            fn addr(&self) -> *const std::ffi::c_void {
                self.block.ptr().cast()
            }

            fn len(&self) -> usize {
                self.len
            }

            fn record_use(&self, completion: &npu_core::Completion) {
                self.uses.record(completion);
            }
        }

        // SAFETY: the buffer is the only user of its block, and `addr_mut` is `addr`.
        unsafe impl<T: bytemuck::Pod> $crate::slice::MemoryMut for $type<T> {
            fn addr_mut(&mut self) -> *mut std::ffi::c_void {
                self.block.ptr().cast()
            }
        }

        // SAFETY: the block comes from aclrtMallocHost(WithCfg), which page-locks it.
        unsafe impl<T: bytemuck::Pod> $crate::slice::HostSlice for $type<T> {}
    };
}

pub(crate) use pinned_memory;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_block_must_be_aligned_for_every_element_type_pinned_memory_takes() {
        let aligned = std::ptr::without_provenance_mut::<c_void>(HOST_ALIGN * 3);
        assert_eq!(
            returned_block(aligned).unwrap().as_ptr() as usize,
            HOST_ALIGN * 3
        );
        // The reference leaves the alignment to the caller on some products: such a block
        // would make `PinnedBuffer<u64>` hand out misaligned slices.
        let unaligned = std::ptr::without_provenance_mut::<c_void>(HOST_ALIGN * 3 + 8);
        let err = returned_block(unaligned).unwrap_err();
        assert!(err.to_string().contains("not 64-byte aligned"), "{err}");
        let null = returned_block(std::ptr::null_mut()).unwrap_err();
        assert!(null.to_string().contains("returned NULL"), "{null}");
    }
}
