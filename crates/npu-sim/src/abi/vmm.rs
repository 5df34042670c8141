//! Virtual memory management (aclrtReserveMemAddress, aclrtMallocPhysical, aclrtMapMem, ...);
//! the model is in `crate::vmm`.

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use super::check::{array, optional, unsupported_after_checks, unsupported_on_a2};
use crate::device::Device;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::sim::{Sim, sim};

const HUGE: usize = 2 << 20;
const GIANT: usize = 1 << 30;

/// Checks physical memory properties; returns the device and its allocation granularity.
fn granularity_of<'a>(sim: &'a Sim, prop: &aclrtPhysicalMemProp) -> Res<(&'a Arc<Device>, usize)> {
    ensure!(
        prop.allocationType == ACL_MEM_ALLOCATION_TYPE_PINNED,
        ACL_ERROR_RT_PARAM_INVALID,
        "allocationType {} is not ACL_MEM_ALLOCATION_TYPE_PINNED",
        prop.allocationType
    );
    match prop.handleType {
        ACL_MEM_HANDLE_TYPE_NONE => {}
        ACL_MEM_HANDLE_TYPE_POSIX => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "physical memory shared between processes (ACL_MEM_HANDLE_TYPE_POSIX) is not supported"
        ),
        other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown handleType {other}"),
    }
    match prop.location.type_ {
        ACL_MEM_LOCATION_TYPE_DEVICE => {}
        ACL_MEM_LOCATION_TYPE_HOST | ACL_MEM_LOCATION_TYPE_HOST_NUMA => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "the simulator has no host physical memory: use location type ACL_MEM_LOCATION_TYPE_DEVICE"
        ),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "location type {other} cannot hold physical memory"
        ),
    }
    let granularity = match prop.memAttr {
        ACL_MEM_NORMAL | ACL_MEM_HUGE | ACL_MEM_P2P_NORMAL | ACL_MEM_P2P_HUGE
        | ACL_HBM_MEM_NORMAL | ACL_HBM_MEM_HUGE => HUGE,
        ACL_MEM_HUGE1G | ACL_HBM_MEM_HUGE1G => GIANT,
        ACL_MEM_P2P_HUGE1G => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "ACL_MEM_P2P_HUGE1G is not supported on this product"
        ),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "memAttr {other} is not a device memory type for physical allocations"
        ),
    };
    let device = sim.device(prop.location.id.into())?;
    Ok((device, granularity))
}

fn read_prop(prop: *const aclrtPhysicalMemProp) -> Res<aclrtPhysicalMemProp> {
    match optional(prop) {
        Some(prop) => Ok(prop),
        None => fail!(ACL_ERROR_INVALID_PARAM, "prop is NULL"),
    }
}

/// Reserves `size` bytes of virtual addresses. `alignment` must be 0 (107000); `expectPtr`
/// NULL, or an address in [16 TiB, 24 TiB) aligned to the next power of two of `size` (1 GiB
/// above 1 GiB; 107000 otherwise, and when the addresses are taken → 207001). `flags` is
/// reserved and ignored.
///
/// # Safety
/// `virPtr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReserveMemAddress(
    virPtr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expectPtr: *mut c_void,
    _flags: u64,
) -> aclError {
    guard("aclrtReserveMemAddress", || {
        non_null(virPtr, "virPtr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        ensure!(
            alignment == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "alignment is reserved and must be 0, not {alignment}"
        );
        let base = sim()?.vmm.reserve(size, expectPtr as usize)?;
        write_out(virPtr, "virPtr", base as *mut c_void)
    })
}

/// Releases a reserved range by its start; it must have nothing mapped (107000).
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> aclError {
    guard("aclrtReleaseMemAddress", || {
        non_null(virPtr, "virPtr")?;
        sim()?.vmm.release(virPtr as usize)
    })
}

/// Allocates physical device memory: `size` rounded up to the granularity of `prop->memAttr`
/// (2 MiB; 1 GiB for the HUGE1G types) and counted against the device's capacity (207001).
/// Host locations, POSIX handles and ACL_MEM_P2P_HUGE1G → 207000; other bad properties →
/// 107000, an unknown device → 107001; then `flags` must be 0 (107000).
///
/// # Safety
/// `handle` must be NULL or valid for a write; `prop` NULL or a valid struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocPhysical(
    handle: *mut aclrtDrvMemHandle,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> aclError {
    guard("aclrtMallocPhysical", || {
        non_null(handle, "handle")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let prop = read_prop(prop)?;
        // The properties are checked before the later `flags`, in parameter order.
        let sim = sim()?;
        let (device, granularity) = granularity_of(sim, &prop)?;
        ensure!(
            flags == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flags is reserved and must be 0, not {flags}"
        );
        device.check_alive()?;
        let physical = sim.vmm.allocate(device, size, granularity, prop)?;
        write_out(handle, "handle", handle::to_ptr(physical))
    })
}

/// Frees a physical allocation's handle; memory still mapped is released when unmapped. The
/// last free withdraws its shareable handle (other processes' imports live on).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreePhysical(handle: aclrtDrvMemHandle) -> aclError {
    guard("aclrtFreePhysical", || {
        non_null(handle, "handle")?;
        let sim = sim()?;
        let freed = handle::from_ptr(handle);
        sim.vmm.free(freed)?;
        if sim.vmm.resolve(freed).is_err() {
            sim.ipc.forget(crate::ipc::Kind::Physical, freed as usize);
        }
        Ok(())
    })
}

/// The checks of aclrtMapMem and aclrtMemMapNoAccess, then the mapping, with `access` for the
/// physical memory's own device. `invalid` is the code for a `virPtr`, `size`, `handle` or
/// `flags` the mapping cannot take (a stale handle, a size other than the allocation's, flags
/// not 0, an address the mapping cannot start at): aclrtMapMem's header names no code and the
/// simulator answers 107000 as for its other refusals, aclrtMemMapNoAccess's header names
/// ACL_ERROR_INVALID_PARAM (100000) for exactly these four.
fn map_physical(
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
    access: aclrtMemAccessFlags,
    invalid: aclError,
) -> Res<()> {
    // Only aclrtMemMapNoAccess recodes the refusals: aclrtMapMem keeps 107017 for a stale
    // handle, as every other function does.
    let as_invalid = |error: crate::error::SimError| match invalid {
        ACL_ERROR_INVALID_PARAM => error.recoded(
            &[ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_INVALID_HANDLE],
            invalid,
        ),
        _ => error,
    };
    non_null(virPtr, "virPtr")?;
    non_null(handle, "handle")?;
    // `size` 0, `offset` and `flags` need nothing looked up, so they are checked in parameter
    // order before `handle` is; `size` can only be compared with the allocation once the
    // handle is resolved.
    ensure!(size != 0, invalid, "size is 0");
    ensure!(
        offset == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "offset must be 0, not {offset}"
    );
    ensure!(
        flags == 0,
        invalid,
        "flags is reserved and must be 0, not {flags}"
    );
    let sim = sim()?;
    let physical = sim
        .vmm
        .resolve(handle::from_ptr(handle))
        .map_err(as_invalid)?;
    ensure!(
        size == physical.size,
        invalid,
        "size {size} is not the physical allocation's size ({})",
        physical.size
    );
    // The reference asks both: the allocation's size, and a whole number of the minimum
    // granularity. An allocation of another size is rounded up and counted, but never mapped.
    ensure!(
        size.is_multiple_of(physical.granularity),
        invalid,
        "size {size} is not a multiple of the allocation granularity ({:#x})",
        physical.granularity
    );
    physical.device.check_alive()?;
    sim.vmm
        .map(&sim.memory, virPtr as usize, &physical, access)
        .map_err(as_invalid)
}

/// Maps a whole physical allocation at `virPtr` (granularity-aligned, inside one reserved
/// range, over nothing mapped, and every mapping of a range on one device), readable and
/// writable by the memory's own device. `size` must be the allocation's size and a multiple of
/// the granularity, `offset` and `flags` 0 (107000 otherwise).
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMapMem(
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> aclError {
    guard("aclrtMapMem", || {
        let access = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
        let invalid = ACL_ERROR_RT_PARAM_INVALID;
        map_physical(virPtr, size, offset, handle, flags, access, invalid)
    })
}

/// aclrtMapMem with no access recorded for any device, the memory's own included, until
/// aclrtMemSetAccess grants it (the simulator records access, it does not enforce it). As its
/// header says, an invalid `virPtr`, `size`, `handle` or `flags` → 100000 (where aclrtMapMem
/// answers 107000 or, for a stale handle, 107017); `offset` other than 0 → 107000.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemMapNoAccess(
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> aclError {
    guard("aclrtMemMapNoAccess", || {
        let access = ACL_RT_MEM_ACCESS_FLAGS_NONE;
        let invalid = ACL_ERROR_INVALID_PARAM;
        map_physical(virPtr, size, offset, handle, flags, access, invalid)
    })
}

/// Not supported on an Atlas A2: NULL `virPtr` → 100000, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (`virPtr` is not written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReserveMemAddressNoUCMemory(
    virPtr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expectPtr: *mut c_void,
    flags: u64,
) -> aclError {
    let _ = (size, alignment, expectPtr, flags);
    guard("aclrtReserveMemAddressNoUCMemory", || {
        unsupported_after_checks(
            &[(virPtr.cast_const().cast(), "virPtr")],
            "reserving virtual memory kept from uncached operators",
        )
    })
}

/// Not supported on an Atlas A2: NULL `virPtrDst` or `virPtrSrc` → 100000 (the header's code for
/// bad input), else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (no address is touched).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemMapSelectedLink(
    virPtrDst: *mut c_void,
    size: usize,
    virPtrSrc: *mut c_void,
    linkIdx: u32,
) -> aclError {
    let _ = (size, linkIdx);
    guard("aclrtMemMapSelectedLink", || {
        unsupported_after_checks(
            &[
                (virPtrDst.cast_const(), "virPtrDst"),
                (virPtrSrc.cast_const(), "virPtrSrc"),
            ],
            "mapping over a selected SIO or HCCS link",
        )
    })
}

/// Chooses the link a memory handle's mappings use. A NULL handle → 100000 and a value outside
/// `aclrtMemLinkType` → 207021 ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED; every link is then not
/// supported on an Atlas A2 (207000): SIO joins the dies of an Atlas A3, the UB paths are the
/// Ascend 950's, and an A2 maps over no selectable link (as aclrtMemMapSelectedLink).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (the handle is not
/// dereferenced).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemMapSetLink(
    handle: aclrtDrvMemHandle,
    adviceLink: aclrtMemLinkType,
) -> aclError {
    guard("aclrtMemMapSetLink", || {
        non_null(handle, "handle")?;
        ensure!(
            adviceLink <= ACL_RT_MEM_ACCESS_UB_MULTI_PORT_PATH,
            ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED,
            "adviceLink {adviceLink} is no aclrtMemLinkType"
        );
        unsupported_on_a2("choosing the link of a memory handle's mappings")
    })
}

/// Unmaps the mapping starting at `virPtr` (107000 if none), after any task touching it.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtUnmapMem(virPtr: *mut c_void) -> aclError {
    guard("aclrtUnmapMem", || {
        non_null(virPtr, "virPtr")?;
        let sim = sim()?;
        sim.vmm.unmap(&sim.memory, virPtr as usize)
    })
}

/// The key under which a mapping records the access of the host: no device has this id.
const HOST_ACCESS: u32 = u32::MAX;

/// Whose access an access location names: a device that exists (its id), or the host (its id
/// ignored, as the reference says); another location type → 107000.
fn access_location(sim: &Sim, location: &aclrtMemLocation) -> Res<u32> {
    match location.type_ {
        ACL_MEM_LOCATION_TYPE_HOST => Ok(HOST_ACCESS),
        ACL_MEM_LOCATION_TYPE_DEVICE => {
            sim.device(location.id.into())?;
            Ok(location.id)
        }
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "location type {other} is neither ACL_MEM_LOCATION_TYPE_HOST nor \
             ACL_MEM_LOCATION_TYPE_DEVICE"
        ),
    }
}

/// Records which devices (and whether the host) may access the mapping made at `virPtr` with
/// `size` bytes: `virPtr` and `size` must be those aclrtMapMem or aclrtMemMapNoAccess was given
/// (107000 otherwise, checked before `desc` is read); each entry's flags must be READWRITE, the
/// only ones the reference supports, and its `rsv` 0 (107000). The simulator records the flags;
/// every device and the host can still reach the memory.
///
/// # Safety
/// `desc` must be NULL or hold `count` descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemSetAccess(
    virPtr: *mut c_void,
    size: usize,
    desc: *mut aclrtMemAccessDesc,
    count: usize,
) -> aclError {
    guard("aclrtMemSetAccess", || {
        non_null(virPtr, "virPtr")?;
        non_null(desc, "desc")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        ensure!(count != 0, ACL_ERROR_INVALID_PARAM, "count is 0");
        let sim = sim()?;
        // `virPtr` and `size` name a mapping before `desc` is read, in parameter order.
        sim.vmm.check_mapping(virPtr as usize, size)?;
        // Every entry is checked before any is applied: a bad one changes nothing. The array
        // is read (and its count bounded) before anything is sized by the count.
        let entries = array(desc.cast_const(), count, "desc")?;
        let mut access = Vec::with_capacity(entries.len());
        for entry in entries {
            // The reference (aclrtMemAccessDesc): only READWRITE is supported, and `rsv` is
            // fixed at 0; NONE and READ are in the header's enum all the same.
            ensure!(
                entry.flags == ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
                ACL_ERROR_RT_PARAM_INVALID,
                "access flags {:#x}: only ACL_RT_MEM_ACCESS_FLAGS_READWRITE is supported",
                entry.flags
            );
            ensure!(
                entry.rsv.iter().all(|&byte| byte == 0),
                ACL_ERROR_RT_PARAM_INVALID,
                "an access descriptor's rsv is reserved and must be 0"
            );
            access.push((access_location(sim, &entry.location)?, entry.flags));
        }
        sim.vmm.set_access(virPtr as usize, size, &access)
    })
}

/// The access flags a device has on the mapping made at `virPtr` (a mapping's start, else
/// 107000, checked before `location`): READWRITE for the memory's own device after aclrtMapMem, NONE for others until
/// aclrtMemSetAccess.
///
/// # Safety
/// `location` must be NULL or a valid struct; `flag` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemGetAccess(
    virPtr: *mut c_void,
    location: *mut aclrtMemLocation,
    flag: *mut u64,
) -> aclError {
    guard("aclrtMemGetAccess", || {
        non_null(virPtr, "virPtr")?;
        non_null(flag, "flag")?;
        let Some(location) = optional(location) else {
            fail!(ACL_ERROR_INVALID_PARAM, "location is NULL");
        };
        let sim = sim()?;
        // `virPtr` must start a mapping before `location` is looked at, in parameter order:
        // the mapping is looked up once, its flags read for the location once it is checked.
        let access = sim.vmm.access(virPtr as usize)?;
        let whose = access_location(sim, &location)?;
        write_out(flag, "flag", u64::from(access.of(whose)))
    })
}

/// The allocation granularity of physical memory with `prop`: 2 MiB, or 1 GiB for the
/// HUGE1G types, both as the minimum and the recommendation.
///
/// # Safety
/// `prop` must be NULL or a valid struct; `granularity` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut aclrtPhysicalMemProp,
    option: aclrtMemGranularityOptions,
    granularity: *mut usize,
) -> aclError {
    guard("aclrtMemGetAllocationGranularity", || {
        let prop = read_prop(prop)?;
        non_null(granularity, "granularity")?;
        // The properties are checked before the later `option`, in parameter order.
        let (_, bytes) = granularity_of(sim()?, &prop)?;
        ensure!(
            option == ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM
                || option == ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            ACL_ERROR_RT_PARAM_INVALID,
            "option {option} is neither MINIMUM nor RECOMMENDED"
        );
        write_out(granularity, "granularity", bytes)
    })
}

/// The handle of the physical allocation mapped at `virPtr` (the address aclrtMapMem was
/// given, else 107000); it counts as one more reference, to be freed with aclrtFreePhysical.
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemRetainAllocationHandle(
    virPtr: *mut c_void,
    handle: *mut aclrtDrvMemHandle,
) -> aclError {
    guard("aclrtMemRetainAllocationHandle", || {
        non_null(virPtr, "virPtr")?;
        non_null(handle, "handle")?;
        let sim = sim()?;
        check_retain_driver(sim)?;
        let physical = sim.vmm.retain(virPtr as usize)?;
        write_out(handle, "handle", handle::to_ptr(physical))
    })
}

/// The oldest driver aclrtMemRetainAllocationHandle works with: 26.0.RC1, in the package
/// version form of `SimConfig::package_version`.
const RETAIN_DRIVER: &str = "26.0.0-rc.1";

/// The reference: aclrtMemRetainAllocationHandle fails with 207000 on a driver older than
/// 26.0.RC1. The simulated driver is the configured `driver` package (25.5.0 by default, the
/// one CANN 8.5 ships with).
fn check_retain_driver(sim: &Sim) -> Res<()> {
    let driver = sim.config.packages.get("driver").map_or("", String::as_str);
    let number = crate::version::package_version_number;
    ensure!(
        number(driver)
            .zip(number(RETAIN_DRIVER))
            .is_some_and(|(have, need)| have >= need),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMemRetainAllocationHandle needs driver {RETAIN_DRIVER} or later; the simulated \
         driver is {driver:?} (the `driver` package of the simulator's configuration)"
    );
    Ok(())
}

/// The properties a physical allocation was made with.
///
/// # Safety
/// `prop` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemGetAllocationPropertiesFromHandle(
    handle: aclrtDrvMemHandle,
    prop: *mut aclrtPhysicalMemProp,
) -> aclError {
    guard("aclrtMemGetAllocationPropertiesFromHandle", || {
        non_null(handle, "handle")?;
        non_null(prop, "prop")?;
        let physical = sim()?.vmm.resolve(handle::from_ptr(handle))?;
        write_out(prop, "prop", physical.prop)
    })
}
