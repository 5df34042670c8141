//! Host memory registration.

use std::ffi::c_void;

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::memory::PAGE;
use crate::sim::sim;

/// The length of a registration of `size` bytes at `ptr`. No buffer is larger than
/// isize::MAX bytes or ends past the address space: a range that did would wrap the
/// registry's `base + len` round to a small end (107000). A value no lookup decides, so both
/// calls check it with their other arguments, before the context is looked up.
fn range_len(ptr: *mut c_void, size: u64) -> Res<usize> {
    let len = usize::try_from(size)
        .ok()
        .filter(|&len| isize::try_from(len).is_ok() && (ptr as usize).checked_add(len).is_some());
    match len {
        Some(len) => Ok(len),
        None => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{ptr:p}+{size} does not fit the address space"
        ),
    }
}

/// Registers `len` bytes at `ptr`, once the arguments have passed: needs a current context.
fn register(ptr: *mut c_void, len: usize, mapped: bool, pin: bool) -> Res<()> {
    let sim = sim()?;
    context::current(sim)?;
    // Only host memory can be registered. Device memory is the device's already, and an
    // address the runtime gave out and took back (freed memory held back from reuse, a bare
    // virtual-memory reservation) is no memory of the caller's: registered, it would count as
    // host memory, and a copy would then write it (a fault on the simulator, where such ranges
    // are kept inaccessible).
    ensure!(
        !sim.memory.overlaps_device(ptr as usize, len),
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p}+{len} is device memory, not host memory"
    );
    super::copy::check_mapped(sim, sim.memory.locate(ptr as usize).class, ptr as usize)?;
    ensure!(
        !(pin && sim.memory.is_pinned_allocation(ptr as usize)),
        ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        "{ptr:p} is aclrtMallocHost memory, which is already pinned"
    );
    sim.memory.register(ptr as usize, len, mapped, pin)
}

/// Registers (maps) host memory for device access; `*devPtr` receives the device alias (on
/// the simulator, the same address). `ptr` must be 4 KiB aligned (107000); a type other than
/// ACL_HOST_REGISTER_MAPPED → 207000 (IOMEMORY and READONLY are reserved options the
/// reference says are not supported yet), both checked in parameter order before the context
/// is looked up (none → 107002); device memory, or memory the runtime took back → 107000.
///
/// # Safety
/// `ptr` must be host memory valid for `size` bytes while registered; `devPtr` NULL or
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtHostRegister(
    ptr: *mut c_void,
    size: u64,
    type_: aclrtHostRegisterType,
    devPtr: *mut *mut c_void,
) -> aclError {
    guard("aclrtHostRegister", || {
        non_null(ptr, "ptr")?;
        non_null(devPtr, "devPtr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        // In parameter order: the address, the range and the type, all before the context is
        // looked up. Only the V1 call checks the page alignment the reference asks of both:
        // aclrtHostRegisterV2 validates its flags and leaves the address to the driver.
        ensure!(
            (ptr as usize).is_multiple_of(PAGE),
            ACL_ERROR_RT_PARAM_INVALID,
            "{ptr:p} is not aligned to the {PAGE}-byte page size"
        );
        let len = range_len(ptr, size)?;
        ensure!(
            type_ == ACL_HOST_REGISTER_MAPPED,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "registration type {type_:#x} is not supported: only ACL_HOST_REGISTER_MAPPED is \
             (IOMEMORY and READONLY are reserved)"
        );
        register(ptr, len, true, false)?;
        write_out(devPtr, "devPtr", ptr)
    })
}

/// Registers host memory with flags (MAPPED: device-accessible through
/// aclrtHostGetDevicePointer; PINNED: page-locked, for pageable memory only). No valid bit or
/// an unknown bit → 107000; the reserved IOMEMORY and READONLY, which the reference says are
/// not supported yet → 207000; any host address is accepted (unlike aclrtHostRegister, no
/// alignment check), device memory or memory the runtime took back is not (107000); overlap
/// with a registered range (or PINNED on aclrtMallocHost memory) → 507910.
///
/// # Safety
/// `ptr` must be host memory valid for `size` bytes while registered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtHostRegisterV2(ptr: *mut c_void, size: u64, flag: u32) -> aclError {
    guard("aclrtHostRegisterV2", || {
        non_null(ptr, "ptr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let len = range_len(ptr, size)?;
        let known = ACL_HOST_REG_MAPPED
            | ACL_HOST_REG_IOMEMORY
            | ACL_HOST_REG_READONLY
            | ACL_HOST_REG_PINNED;
        ensure!(
            flag != 0 && flag & !known == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flag {flag:#x} has no valid bit or an unknown bit"
        );
        ensure!(
            flag & (ACL_HOST_REG_IOMEMORY | ACL_HOST_REG_READONLY) == 0,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "flag {flag:#x} asks for ACL_HOST_REG_IOMEMORY or ACL_HOST_REG_READONLY, reserved \
             options that are not supported"
        );
        register(
            ptr,
            len,
            flag & ACL_HOST_REG_MAPPED != 0,
            flag & ACL_HOST_REG_PINNED != 0,
        )
    })
}

/// The device alias of mapped registered host memory (same address on the simulator).
/// flag must be 0 (100000); memory not registered as MAPPED → 507911.
///
/// # Safety
/// `pDevice` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtHostGetDevicePointer(
    pHost: *mut c_void,
    pDevice: *mut *mut c_void,
    flag: u32,
) -> aclError {
    guard("aclrtHostGetDevicePointer", || {
        non_null(pHost, "pHost")?;
        non_null(pDevice, "pDevice")?;
        ensure!(
            flag == 0,
            ACL_ERROR_INVALID_PARAM,
            "flag must be 0, not {flag}"
        );
        let mapped = sim()?
            .memory
            .registration_of(pHost as usize)
            .is_some_and(|(_, reg)| reg.mapped);
        ensure!(
            mapped,
            ACL_ERROR_HOST_MEMORY_NOT_REGISTERED,
            "{pHost:p} is not in host memory registered with ACL_HOST_REG_MAPPED"
        );
        write_out(pDevice, "pDevice", pHost)
    })
}

/// Undoes aclrtHostRegister / aclrtHostRegisterV2 (by the registered start address); not
/// registered → 507911.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtHostUnregister(ptr: *mut c_void) -> aclError {
    guard("aclrtHostUnregister", || {
        non_null(ptr, "ptr")?;
        sim()?.memory.unregister(ptr as usize)
    })
}

/// Whether an engine can access registered host memory: yes for the task scheduler, AI CPU,
/// AI cores, vector cores and the DMA engines; no for RDMA, DVPP, UDMA and CCU. NULL
/// `capabilities` → 100000, then an unknown engine type → 107000, then an unknown device →
/// 107001; nothing is written on a failure.
///
/// # Safety
/// `capabilities` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtHostMemMapCapabilities(
    deviceId: u32,
    hacType: aclrtHacType,
    capabilities: *mut aclrtHostMemMapCapability,
) -> aclError {
    guard("aclrtHostMemMapCapabilities", || {
        non_null(capabilities, "capabilities")?;
        // The engine type is a value no lookup decides: checked before the device.
        let capability = match hacType {
            ACL_RT_HAC_TYPE_STARS
            | ACL_RT_HAC_TYPE_AICPU
            | ACL_RT_HAC_TYPE_AIC
            | ACL_RT_HAC_TYPE_AIV
            | ACL_RT_HAC_TYPE_PCIEDMA
            | ACL_RT_HAC_TYPE_SDMA => ACL_RT_HOST_MEM_MAP_SUPPORTED,
            ACL_RT_HAC_TYPE_RDMA | ACL_RT_HAC_TYPE_DVPP | ACL_RT_HAC_TYPE_UDMA
            | ACL_RT_HAC_TYPE_CCU => ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED,
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown engine type {other}"),
        };
        sim()?.device(deviceId.into())?;
        write_out(capabilities, "capabilities", capability)
    })
}
