//! Device-to-device copies whose addresses the device reads from device memory when the task
//! runs (aclrtMemcpyAsyncWithDesc, aclrtMemcpyAsyncWithOffset), the device-memory descriptors
//! they and the CMO descriptors use, and the checks that a range is device memory (of a given
//! device) which the launches, CMO and peer mappings share.
//!
//! Reading at run time is what makes them "second-level pointer" copies: work queued earlier
//! on the stream (a kernel, a copy) may write the descriptor or the base pointers first. An
//! address that turns out not to be device memory of the stream's device is a DMA fault
//! (ACL_ERROR_RT_SYS_DMA) of the task, as a bad address on the device would be.

use std::ptr;

use npu_sys::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::memory::{AllocKind, Lease, MemoryMap};

/// The simulator's memcpy descriptor (aclrtGetMemcpyDescSize): source, destination and count
/// as u64s, then a zero u64.
pub(crate) const MEMCPY_DESC_SIZE: usize = 32;

/// Where an indirect copy finds its addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Indirect {
    /// A memcpy descriptor at this device address.
    Desc(usize),
    /// Base pointers stored in device memory at `dst` and `src`, plus offsets.
    Offset {
        dst: usize,
        dst_offset: usize,
        src: usize,
        src_offset: usize,
        count: usize,
    },
}

/// An indirect copy as a stream task on `device`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndirectCopy {
    pub(crate) device: i32,
    pub(crate) how: Indirect,
}

/// Leases `[ptr, ptr+len)` if it lies in one device allocation of `device`.
pub(crate) fn lease_device(
    memory: &MemoryMap,
    device: i32,
    ptr: usize,
    len: usize,
) -> Option<Lease> {
    let lease = memory.lease(ptr, len)?;
    // The lease keeps the allocation alive, so the kind read now is the leased one's.
    let on_device = matches!(
        memory.allocation_of(ptr),
        Some((_, _, AllocKind::Device { device: owner, .. })) if owner == device
    );
    on_device.then_some(lease)
}

/// The DMA fault of a task that reaches for `[ptr, ptr+len)`, the `what`, and finds no device
/// memory of `device` there.
pub(crate) fn fault(what: &str, ptr: usize, len: usize, device: i32) -> SimError {
    SimError::new(
        ACL_ERROR_RT_SYS_DMA,
        format!("DMA fault: the {what} {ptr:#x}+{len} is not device memory of device {device}"),
    )
}

/// Fills `out` from device memory of `device` at `at` (a DMA fault if it is not device
/// memory of the device, the `what`).
pub(crate) fn read_device(
    memory: &MemoryMap,
    device: i32,
    at: usize,
    out: &mut [u8],
    what: &str,
) -> Result<(), SimError> {
    let len = out.len();
    let Some(_lease) = lease_device(memory, device, at, len) else {
        return Err(fault(what, at, len, device));
    };
    memory.uce.check(at, len)?;
    // SAFETY: the lease keeps these `len` bytes of device memory allocated; device memory is
    // host memory on the simulator, and `out` is the caller's own buffer, distinct from it.
    unsafe { ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), len) };
    Ok(())
}

/// Reads `N` u64s of device memory of `device`.
fn read_words<const N: usize>(
    memory: &MemoryMap,
    device: i32,
    at: usize,
    what: &str,
) -> Result<[u64; N], SimError> {
    let mut words = [0u64; N];
    // SAFETY: the view covers exactly the array, and any bytes read into it are valid u64s
    // (no padding, no invalid bit patterns); it ends before `words` is returned.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), N * 8) };
    read_device(memory, device, at, bytes, what)?;
    Ok(words)
}

/// Writes `bytes` into device memory of `device` at `at` (a DMA fault if it is not device
/// memory of the device, the `what`).
pub(crate) fn write_device(
    memory: &MemoryMap,
    device: i32,
    at: usize,
    bytes: &[u8],
    what: &str,
) -> Result<(), SimError> {
    let Some(_lease) = lease_device(memory, device, at, bytes.len()) else {
        return Err(fault(what, at, bytes.len(), device));
    };
    memory.uce.check(at, bytes.len())?;
    // SAFETY: the lease keeps the range allocated as device memory (host memory on the
    // simulator); `bytes` is the caller's own buffer, distinct from it.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
    Ok(())
}

impl IndirectCopy {
    /// Reads the addresses, checks both ranges are device memory of the device, and copies.
    pub(crate) fn run(&self, memory: &MemoryMap) -> Result<(), SimError> {
        let device = self.device;
        let (dst, src, count) = match self.how {
            Indirect::Desc(desc) => {
                let [src, dst, count, _] = read_words::<4>(memory, device, desc, "descriptor")?;
                (dst as usize, src as usize, count as usize)
            }
            Indirect::Offset {
                dst,
                dst_offset,
                src,
                src_offset,
                count,
            } => {
                let [dst_base] = read_words::<1>(memory, device, dst, "destination pointer")?;
                let [src_base] = read_words::<1>(memory, device, src, "source pointer")?;
                let at = |base: u64, offset: usize| (base as usize).wrapping_add(offset);
                (at(dst_base, dst_offset), at(src_base, src_offset), count)
            }
        };
        if count == 0 {
            return Ok(());
        }
        let Some(_dst) = lease_device(memory, device, dst, count) else {
            return Err(fault("destination", dst, count, device));
        };
        let Some(_src) = lease_device(memory, device, src, count) else {
            return Err(fault("source", src, count, device));
        };
        memory.uce.check(dst, count)?;
        memory.uce.check(src, count)?;
        // SAFETY: both ranges are leased device memory of the device (host memory on the
        // simulator), kept allocated for the copy; `ptr::copy` tolerates overlap.
        unsafe { ptr::copy(src as *const u8, dst as *mut u8, count) };
        Ok(())
    }
}

/// The device whose memory holds all of `[ptr, ptr+len)`; 107000 if it is not device memory.
pub(crate) fn device_of_range(memory: &MemoryMap, ptr: usize, len: usize, what: &str) -> Res<i32> {
    match memory.allocation_of(ptr) {
        Some((base, alloc_len, AllocKind::Device { device, .. }))
            if ptr - base <= alloc_len && len <= alloc_len - (ptr - base) =>
        {
            Ok(device)
        }
        _ => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{what} ({ptr:#x}+{len}) is not in one device allocation"
        ),
    }
}

/// Checks `[ptr, ptr+len)` is device memory of `device` (107000 otherwise).
pub(crate) fn check_on_device(
    memory: &MemoryMap,
    ptr: usize,
    len: usize,
    device: i32,
    what: &str,
) -> Res<()> {
    let owner = device_of_range(memory, ptr, len, what)?;
    ensure!(
        owner == device,
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} ({ptr:#x}+{len}) is memory of device {owner}, not of device {device}"
    );
    Ok(())
}

/// Writes a descriptor's words into device memory now (aclrtSetMemcpyDesc, aclrtCmoSetDesc).
/// The descriptor must be device memory (107000).
pub(crate) fn write_descriptor(memory: &MemoryMap, desc: usize, words: &[u64]) -> Res<()> {
    let len = std::mem::size_of_val(words);
    let device = device_of_range(memory, desc, len, "the descriptor")?;
    let Some(_lease) = lease_device(memory, device, desc, len) else {
        fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "the descriptor ({desc:#x}) was freed"
        );
    };
    // SAFETY: the lease keeps these `len` bytes of device memory allocated; unaligned writes
    // since the caller may place the descriptor anywhere.
    unsafe { ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), desc as *mut u8, len) };
    Ok(())
}
