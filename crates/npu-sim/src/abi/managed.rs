//! Managed (unified) memory: aclrtMemAllocManaged, aclrtMemManagedAdvise,
//! aclrtMemManagedPrefetchAsync, aclrtMemManagedPrefetchBatchAsync.
//!
//! Host and devices share the simulator's memory, so managed memory never migrates: it is
//! zero-filled anonymous memory placed in the runtime's unified-address window, recorded as
//! memory of the allocating device (copies treat it as device memory, the host may touch it
//! directly), reported as MANAGED by aclrtPointerGetAttributes and freed with aclrtFree.
//! Advice is validated and recorded for aclrtMemManagedGetAttr(s) (`crate::advice`), with no
//! other effect; a prefetch is recorded as requested and is a task that does nothing.

use std::ffi::c_void;

use npu_sys::*;

use super::check::{array, run_of, run_starts};
use crate::advice::{Place, place_of};
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::memory::AllocKind;
use crate::sim::{Sim, sim};

/// The unified-address window managed memory lives in: [9 TiB, 12 TiB).
pub(super) const WINDOW: std::ops::Range<usize> = 0x900_0000_0000..0x900_0000_0000 + (3 << 40);
/// Managed sizes are whole 2 MiB pages.
const GRAIN: usize = 2 << 20;

/// Whether `ptr` lies in managed memory.
pub(super) fn is_managed(sim: &Sim, ptr: usize) -> bool {
    WINDOW.contains(&ptr) && sim.memory.allocation_of(ptr).is_some()
}

/// Maps `len` bytes at the first free place of the window.
fn place(sim: &Sim, len: usize) -> Res<usize> {
    loop {
        let Some(at) = sim.memory.first_gap(WINDOW.start, WINDOW.end, len) else {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{len} bytes of managed memory do not fit the 3 TiB unified-address window"
            );
        };
        // SAFETY: an anonymous private mapping at an address nothing of ours uses;
        // MAP_FIXED_NOREPLACE fails instead of replacing anything already there.
        let ptr = unsafe {
            libc::mmap(
                at as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if ptr as usize == at {
            return Ok(at);
        }
        if ptr != libc::MAP_FAILED {
            // An old kernel ignored the placement: give it back.
            // SAFETY: the mapping was just made and nothing refers to it.
            unsafe { libc::munmap(ptr, len) };
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "mapping {len} bytes of managed memory failed: {}",
                std::io::Error::last_os_error()
            );
        }
        // Another thread took the gap first: look again.
    }
}

/// Allocates `size` bytes of managed memory (rounded up to 2 MiB), accessible from the host
/// and every device; `flag` must be ACL_RT_MEM_ATTACH_GLOBAL (107000). Needs a current
/// context; free it with aclrtFree.
///
/// # Safety
/// `ptr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemAllocManaged(
    ptr: *mut *mut c_void,
    size: u64,
    flag: u32,
) -> aclError {
    guard("aclrtMemAllocManaged", || {
        non_null(ptr, "ptr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        ensure!(
            flag == ACL_RT_MEM_ATTACH_GLOBAL,
            ACL_ERROR_RT_PARAM_INVALID,
            "flag must be ACL_RT_MEM_ATTACH_GLOBAL, not {flag}"
        );
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.device.check_alive()?;
        let Some(len) = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_next_multiple_of(GRAIN))
        else {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{size} bytes cannot be allocated"
            );
        };
        // Counted as an allocation of the device, with no bytes: the memory is the host's
        // until a device would touch it.
        ctx.device.reserve(0)?;
        let base = match place(sim, len) {
            Ok(base) => base,
            Err(error) => {
                ctx.device.unreserve(0);
                return Err(error);
            }
        };
        let kind = AllocKind::Device {
            device: ctx.device.id,
            accounted: 0,
            page_size: GRAIN as u32,
        };
        sim.memory.insert_mapped(base, len, kind);
        write_out(ptr, "ptr", base as *mut c_void)
    })
}

/// Checks a managed range: inside managed memory, `size` a non-zero multiple of 2 MiB.
fn check_range(sim: &Sim, ptr: *const c_void, size: u64) -> Res<()> {
    non_null(ptr, "ptr")?;
    let address = ptr as usize;
    ensure!(
        is_managed(sim, address),
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p} is not managed memory (aclrtMemAllocManaged)"
    );
    ensure!(
        size != 0 && size.is_multiple_of(GRAIN as u64),
        ACL_ERROR_RT_PARAM_INVALID,
        "size {size} is not a non-zero multiple of 2 MiB"
    );
    let inside = sim
        .memory
        .allocation_of(address)
        // Checked: a size near u64::MAX would wrap the sum round to an end that passes.
        .is_some_and(|(base, len, _)| {
            ((address - base) as u64)
                .checked_add(size)
                .is_some_and(|end| end <= len as u64)
        });
    ensure!(
        inside,
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p}+{size} runs past the end of its managed allocation"
    );
    Ok(())
}

/// Records where a prefetch request sends a range (what it asked, not whether it ran).
fn record_prefetch(sim: &Sim, ptr: *const c_void, size: usize, place: Place) {
    sim.advice
        .update(ptr as usize, size, |page| page.last_prefetch = Some(place));
}

/// Checks a managed-memory location: a device that exists (107001), the host, or a NUMA node of
/// the host. The simulated host is one NUMA node, 0 (what HOST_NUMA_CURRENT records), so a
/// HOST_NUMA location naming another node is refused (107000): the reference asks for a
/// reasonable NUMA id with that type, and a node the host does not have would be recorded and
/// reported back as if memory could be placed there.
fn check_location(sim: &Sim, location: &aclrtMemManagedLocation) -> Res<()> {
    match location.type_ {
        ACL_MEM_LOCATIONTYPE_DEVICE => sim.device(location.id.into()).map(drop),
        ACL_MEM_LOCATIONTYPE_HOST_NUMA => {
            ensure!(
                location.id == 0,
                ACL_ERROR_RT_PARAM_INVALID,
                "NUMA node {} does not exist: the host is one node, 0",
                location.id
            );
            Ok(())
        }
        ACL_MEM_LOCATIONTYPE_HOST | ACL_MEM_LOCATIONTYPE_HOST_NUMA_CURRENT => Ok(()),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "location type {other} is not a device or the host"
        ),
    }
}

/// Gives the runtime advice about managed memory. It is validated (range, advice, and for the
/// location-taking advice the location) and recorded for aclrtMemManagedGetAttr(s); nothing
/// migrates on the simulator.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemManagedAdvise(
    ptr: *const c_void,
    size: u64,
    advise: aclrtMemManagedAdviseType,
    location: aclrtMemManagedLocation,
) -> aclError {
    guard("aclrtMemManagedAdvise", || {
        let sim = sim()?;
        check_range(sim, ptr, size)?;
        match advise {
            ACL_MEM_ADVISE_SET_READ_MOSTLY | ACL_MEM_ADVISE_UNSET_READ_MOSTLY => {}
            ACL_MEM_ADVISE_SET_PREFERRED_LOCATION
            | ACL_MEM_ADVISE_UNSET_PREFERRED_LOCATION
            | ACL_MEM_ADVISE_SET_ACCESSED_BY
            | ACL_MEM_ADVISE_UNSET_ACCESSED_BY => check_location(sim, &location)?,
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown advice {other}"),
        }
        let place = place_of(&location);
        sim.advice
            .update(ptr as usize, size as usize, |page| match advise {
                ACL_MEM_ADVISE_SET_READ_MOSTLY => page.read_mostly = true,
                ACL_MEM_ADVISE_UNSET_READ_MOSTLY => page.read_mostly = false,
                ACL_MEM_ADVISE_SET_PREFERRED_LOCATION => page.preferred = Some(place),
                ACL_MEM_ADVISE_UNSET_PREFERRED_LOCATION => page.preferred = None,
                ACL_MEM_ADVISE_SET_ACCESSED_BY => {
                    page.accessed_by.insert(place);
                }
                _ => {
                    page.accessed_by.remove(&place);
                }
            });
        Ok(())
    })
}

/// Recodes a refused prefetch argument: the prefetch functions' headers name
/// ACL_ERROR_INVALID_PARAM (100000) for error input, where aclrtMemManagedAdvise and the
/// attribute queries (whose headers name no code) answer 107000 for the same checks. A location
/// naming a device that does not exist keeps 107001, the code of every invalid device id.
fn as_input_error(error: crate::error::SimError) -> crate::error::SimError {
    error.recoded(&[ACL_ERROR_RT_PARAM_INVALID], ACL_ERROR_INVALID_PARAM)
}

/// Prefetches a batch of managed ranges as one task of `stream` that does nothing (see
/// aclrtMemManagedPrefetchAsync): each range and each location is checked as that function
/// checks them; NULL arrays, count 0, numPrefetchLocs 0 or above count, prefetchLocIdxs not
/// starting at 0 and increasing below count, or flags not 0 → 100000, the code their headers
/// name for error input.
///
/// # Safety
/// The arrays must hold `count` (`numPrefetchLocs`) elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemManagedPrefetchBatchAsync(
    ptrs: *mut *const c_void,
    sizes: *mut usize,
    count: usize,
    prefetchLocs: *mut aclrtMemManagedLocation,
    prefetchLocIdxs: *mut usize,
    numPrefetchLocs: usize,
    flags: u64,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemManagedPrefetchBatchAsync", || {
        non_null(ptrs, "ptrs")?;
        non_null(sizes, "sizes")?;
        non_null(prefetchLocs, "prefetchLocs")?;
        non_null(prefetchLocIdxs, "prefetchLocIdxs")?;
        ensure!(count != 0, ACL_ERROR_INVALID_PARAM, "count is 0");
        let ptrs = array(ptrs.cast_const(), count, "ptrs")?;
        let sizes = array(sizes.cast_const(), count, "sizes")?;
        let locations = array(prefetchLocs.cast_const(), numPrefetchLocs, "prefetchLocs")?;
        let starts = array(
            prefetchLocIdxs.cast_const(),
            numPrefetchLocs,
            "prefetchLocIdxs",
        )?;
        run_starts(starts, count, "prefetchLocIdxs").map_err(as_input_error)?;
        ensure!(
            flags == 0,
            ACL_ERROR_INVALID_PARAM,
            "flags is reserved and must be 0, not {flags}"
        );
        let sim = sim()?;
        for (&ptr, &size) in ptrs.iter().zip(sizes) {
            check_range(sim, ptr, size as u64).map_err(as_input_error)?;
        }
        for location in locations {
            check_location(sim, location).map_err(as_input_error)?;
        }
        let stream = context::submit_stream(sim, stream)?;
        for (index, (&ptr, &size)) in ptrs.iter().zip(sizes).enumerate() {
            let place = place_of(&locations[run_of(starts, index)]);
            record_prefetch(sim, ptr, size, place);
        }
        super::cmo::ordering_only(&stream)
    })
}

/// Prefetches managed memory to a location as a task of `stream`: the task does nothing (the
/// memory is where every device and the host can reach it), but keeps its place in stream
/// order. A range or location refused, or `flags` not 0 → 100000, the code its header names for
/// error input (aclrtMemManagedAdvise answers 107000 for the same checks).
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemManagedPrefetchAsync(
    ptr: *const c_void,
    size: usize,
    location: aclrtMemManagedLocation,
    flags: u32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemManagedPrefetchAsync", || {
        // A value, checked before the range and the location's device are looked up, as the
        // batched form checks its flags.
        ensure!(
            flags == 0,
            ACL_ERROR_INVALID_PARAM,
            "flags is reserved and must be 0, not {flags}"
        );
        let sim = sim()?;
        check_range(sim, ptr, size as u64).map_err(as_input_error)?;
        check_location(sim, &location).map_err(as_input_error)?;
        let stream = context::submit_stream(sim, stream)?;
        record_prefetch(sim, ptr, size, place_of(&location));
        super::cmo::ordering_only(&stream)
    })
}
