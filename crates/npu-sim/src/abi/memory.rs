//! Device and pinned host memory: allocation, release and pointer attributes.

use std::ffi::c_void;

use npu_sys::*;

use super::check::array;
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::memory::{AllocKind, PAGE, PtrClass};
use crate::sim::{Sim, sim};

/// Padding the runtime adds to every aclrtMalloc allocation (SoC spec "padding_size").
const PADDING: u64 = 32;
const HUGE_PAGE: u32 = 2 << 20;
const GIANT_PAGE: u32 = 1 << 30;

/// The allocation-rule bits of a policy: aclrtMallocWithCfg's policy may or a rule with the
/// band-width and read-only bits, which choose no page size.
const RULE_BITS: aclrtMemMallocPolicy = 0xff;

/// The rules aclrtMallocCached takes, the reference's four: its P2P rules are not among them.
const CACHED_RULES: [aclrtMemMallocPolicy; 4] = [
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY,
    ACL_MEM_MALLOC_NORMAL_ONLY,
    ACL_MEM_MALLOC_HUGE1G_ONLY,
];

/// A value outside aclrtMemMallocPolicy, standing for a rule a function does not take: the
/// size then chooses the pages, as the reference says of a rule outside the enumeration.
const NO_RULE: aclrtMemMallocPolicy = RULE_BITS;

/// The page size an allocation of `size` bytes gets under `policy`.
fn page_size(policy: aclrtMemMallocPolicy, size: usize) -> u32 {
    match policy {
        ACL_MEM_MALLOC_HUGE_ONLY | ACL_MEM_MALLOC_HUGE_ONLY_P2P => HUGE_PAGE,
        ACL_MEM_MALLOC_HUGE1G_ONLY | ACL_MEM_MALLOC_HUGE1G_ONLY_P2P => GIANT_PAGE,
        ACL_MEM_MALLOC_NORMAL_ONLY | ACL_MEM_MALLOC_NORMAL_ONLY_P2P => PAGE as u32,
        // Only HUGE_FIRST's description keeps requests up to 1 MiB on normal pages; the P2P
        // form's asks for huge pages at any size, normal ones only when those do not fit.
        ACL_MEM_MALLOC_HUGE_FIRST if size <= 1 << 20 => PAGE as u32,
        ACL_MEM_MALLOC_HUGE_FIRST | ACL_MEM_MALLOC_HUGE_FIRST_P2P => HUGE_PAGE,
        // A rule outside aclrtMemMallocPolicy: huge pages from 2 MiB on, as the reference
        // says of every aclrtMalloc* policy parameter (HUGE_FIRST's threshold is 1 MiB). A
        // rule or-ed with other bits is one too where the function takes a single enumerator
        // (aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached).
        _ if size >= HUGE_PAGE as usize => HUGE_PAGE,
        _ => PAGE as u32,
    }
}

/// The bytes the runtime reserves for `size`: rounded to 32, plus 32 bytes of padding unless
/// `padded` is false (aclrtMallocAlign32, 1 GiB pages).
pub(super) fn reserved_size(size: usize, padded: bool) -> Res<u64> {
    let padding = if padded { PADDING } else { 0 };
    match (size as u64).checked_add(padding + 31) {
        Some(total) => Ok(total / 32 * 32),
        None => fail!(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            "{size} bytes cannot be allocated"
        ),
    }
}

fn device_malloc(
    sim: &Sim,
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
    padded: bool,
    required_device: Option<u32>,
) -> Res<()> {
    check_out_and_size(dev_ptr, "devPtr", size as u64)?;
    let ctx = context::current(sim)?;
    check_required_device(&ctx.device, required_device)?;
    let device = &ctx.device;
    device.check_alive()?;
    let mut page = page_size(policy, size);
    let bytes = reserved_size(size, padded && page != GIANT_PAGE)?;
    // Huge pages are taken whole: the device gives up 2 MiB (1 GiB) per started page, which is
    // what aclrtGetMemInfo's free figure and the capacity see. Only `bytes` are mapped.
    let mut accounted = if page > PAGE as u32 {
        match bytes.checked_next_multiple_of(u64::from(page)) {
            Some(rounded) => rounded,
            None => fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{size} bytes cannot be allocated"
            ),
        }
    } else {
        bytes
    };
    // HUGE_FIRST takes normal pages when the huge ones do not fit.
    let huge_first = matches!(
        policy,
        ACL_MEM_MALLOC_HUGE_FIRST | ACL_MEM_MALLOC_HUGE_FIRST_P2P
    );
    let fallback = (huge_first && page == HUGE_PAGE && bytes != accounted).then_some(bytes);
    if device.reserve_preferring(accounted, fallback)? != accounted {
        page = PAGE as u32;
        accounted = bytes;
    }
    let kind = AllocKind::Device {
        device: device.id,
        accounted,
        page_size: page,
    };
    match sim.memory.allocate(bytes as usize, kind) {
        Ok(address) => write_out(dev_ptr, "devPtr", address as *mut c_void),
        Err(error) => {
            device.unreserve(accounted);
            Err(error)
        }
    }
}

/// Allocates device memory on the current context's device: 64-byte aligned, zero-filled,
/// `size` rounded up to 32 plus 32 bytes of padding counted against the device's capacity.
///
/// # Safety
/// `devPtr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
) -> aclError {
    guard("aclrtMalloc", || {
        device_malloc(sim()?, devPtr, size, policy, true, None)
    })
}

/// The same as aclrtMalloc, as CANN documents it: device memory is always cached, and CPU/NPU
/// coherence is the runtime's business. It takes HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY and
/// HUGE1G_ONLY only: another value, a P2P rule included, is a rule outside its range, and the
/// size chooses the pages (huge from 2 MiB on).
///
/// # Safety
/// `devPtr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocCached(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
) -> aclError {
    guard("aclrtMallocCached", || {
        let rule = match CACHED_RULES.contains(&policy) {
            true => policy,
            false => NO_RULE,
        };
        device_malloc(sim()?, devPtr, size, rule, true, None)
    })
}

/// aclrtMalloc without the 32 bytes of padding (size rounded up to 32 only).
///
/// # Safety
/// `devPtr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocAlign32(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
) -> aclError {
    guard("aclrtMallocAlign32", || {
        device_malloc(sim()?, devPtr, size, policy, false, None)
    })
}

/// The ACL layer's checks of an allocation's leading arguments: the out pointer (NULL →
/// 100000) and the size (0 → 100000), made before the configuration that follows them is read.
fn check_out_and_size(out: *mut *mut c_void, what: &str, size: u64) -> Res<()> {
    non_null(out, what)?;
    ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
    Ok(())
}

/// The DEVICE_ID attribute of a malloc configuration, after validating it.
fn config_device(cfg: *mut aclrtMallocConfig) -> Res<Option<u32>> {
    let Some(cfg) = super::check::optional(cfg) else {
        return Ok(None);
    };
    ensure!(
        cfg.numAttrs == 0 || !cfg.attrs.is_null(),
        ACL_ERROR_INVALID_PARAM,
        "cfg->attrs is NULL but cfg->numAttrs is {}",
        cfg.numAttrs
    );
    let mut device = None;
    for attr in array(cfg.attrs, cfg.numAttrs, "cfg->attrs")? {
        match attr.attr {
            ACL_RT_MEM_ATTR_RSV | ACL_RT_MEM_ATTR_MODULE_ID => {}
            // The reference gives vaFlag two values: 0 (no VA consistency, the default) and 1.
            ACL_RT_MEM_ATTR_VA_FLAG => {
                // SAFETY: every member of the 8-byte union is plain data; vaFlag is what the
                // VA_FLAG attribute carries.
                let flag = unsafe { attr.value.vaFlag };
                ensure!(
                    flag <= 1,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "vaFlag {flag} is neither 0 nor 1"
                );
            }
            // SAFETY: every member of the 8-byte union is plain data; deviceId is what the
            // DEVICE_ID attribute carries.
            ACL_RT_MEM_ATTR_DEVICE_ID => device = Some(unsafe { attr.value.deviceId }),
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown malloc attribute {other}"
            ),
        }
    }
    Ok(device)
}

/// aclrtMalloc with a configuration (NULL allowed; DEVICE_ID must name the current device).
/// Unlike aclrtMalloc's, its policy may combine a rule with the band-width and read-only bits;
/// the rule alone decides the pages.
///
/// # Safety
/// `devPtr` must be NULL or valid for a write; `cfg` NULL or a valid configuration.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocWithCfg(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
    cfg: *mut aclrtMallocConfig,
) -> aclError {
    guard("aclrtMallocWithCfg", || {
        check_out_and_size(devPtr, "devPtr", size as u64)?;
        let device = config_device(cfg)?;
        device_malloc(sim()?, devPtr, size, policy & RULE_BITS, true, device)
    })
}

/// Device memory the device's task scheduler may use (some graph-mode operators need it): on
/// the simulator, aclrtMallocWithCfg's memory, freed with aclrtFree.
///
/// # Safety
/// `devPtr` must be NULL or valid for a write; `cfg` NULL or a valid configuration.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocForTaskScheduler(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
    cfg: *mut aclrtMallocConfig,
) -> aclError {
    guard("aclrtMallocForTaskScheduler", || {
        check_out_and_size(devPtr, "devPtr", size as u64)?;
        let device = config_device(cfg)?;
        device_malloc(sim()?, devPtr, size, policy & RULE_BITS, true, device)
    })
}

/// Maps device memory into another device's page tables, so that device's first accesses do
/// not fault: validated, then nothing to do, since every device reaches the simulator's memory.
/// NULL devPtr or size 0 → 100000; not device memory (or past its allocation), `dstDevId` its
/// own device, or flags not 0 → 107000; no such device → 107001; `dstDevId` has not enabled
/// peer access to the memory's device → 207006.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemP2PMap(
    devPtr: *mut c_void,
    size: usize,
    dstDevId: i32,
    flags: u64,
) -> aclError {
    guard("aclrtMemP2PMap", || {
        non_null(devPtr, "devPtr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        // A value no lookup decides: before the device and the memory are looked up.
        ensure!(
            flags == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flags is reserved and must be 0, not {flags}"
        );
        let sim = sim()?;
        let user = sim.device(dstDevId.into())?;
        let owner = crate::indirect::device_of_range(&sim.memory, devPtr as usize, size, "devPtr")?;
        ensure!(
            owner != dstDevId,
            ACL_ERROR_RT_PARAM_INVALID,
            "devPtr is memory of device {dstDevId} itself"
        );
        ensure!(
            user.peer_enabled(owner),
            ACL_ERROR_RT_NO_PERMISSION,
            "device {dstDevId} has not enabled peer access to device {owner} \
             (aclrtDeviceEnablePeerAccess)"
        );
        Ok(())
    })
}

fn free_device(sim: &Sim, ptr: *mut c_void) -> Res<()> {
    non_null(ptr, "devPtr")?;
    ensure!(
        !sim.pools.owns(ptr as usize),
        ACL_ERROR_RT_MEMORY_FREE,
        "{ptr:p} belongs to a memory pool: return it with aclrtMemPoolFreeAsync"
    );
    ensure!(
        !super::cond_task::is_cond_word(ptr as usize),
        ACL_ERROR_RT_MEMORY_FREE,
        "{ptr:p} is the word of a condition handle: it is freed with its model runtime instance"
    );
    let managed = super::managed::is_managed(sim, ptr as usize)
        .then(|| sim.memory.allocation_of(ptr as usize))
        .flatten();
    // Keys of the allocation stop being importable before its address can be reused.
    sim.ipc.forget_allocation(ptr as usize);
    if let AllocKind::Device {
        device, accounted, ..
    } = sim.memory.free(ptr as usize, false)?
    {
        sim.device(device.into())?.unreserve(accounted);
    }
    // What was said about freed managed memory does not carry over to the next allocation.
    if let Some((base, len, _)) = managed {
        sim.advice.forget(base..base + len);
    }
    Ok(())
}

/// Frees device memory immediately (no synchronisation; needs no current context).
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFree(devPtr: *mut c_void) -> aclError {
    guard("aclrtFree", || free_device(sim()?, devPtr))
}

/// The checks of aclrtMemFlush and aclrtMemInvalidate, which change nothing else: CANN keeps
/// CPU and NPU caches coherent itself (its reference says the calls are not needed), and the
/// simulator's device memory is host memory.
fn cache_maintenance(dev_ptr: *mut c_void, size: usize) -> Res<()> {
    non_null(dev_ptr, "devPtr")?;
    ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
    Ok(())
}

/// Writes cached data back and invalidates it: a no-op on coherent memory. NULL devPtr or
/// size 0 → 100000.
///
/// # Safety
/// No preconditions; the pointer is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemFlush(devPtr: *mut c_void, size: usize) -> aclError {
    guard("aclrtMemFlush", || cache_maintenance(devPtr, size))
}

/// Invalidates cached data: a no-op on coherent memory. NULL devPtr or size 0 → 100000.
///
/// # Safety
/// No preconditions; the pointer is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemInvalidate(devPtr: *mut c_void, size: usize) -> aclError {
    guard("aclrtMemInvalidate", || cache_maintenance(devPtr, size))
}

/// Synchronises the device owning the memory and the current device, then frees it: waits
/// for the tasks of every stream of those devices (of a stream that can no longer run its
/// queued tasks, for the task running now), so no task is still touching the memory when it is
/// freed: the reference's "waits for the tasks using the memory" includes a task of the
/// current device's stream reading another device's memory (a peer copy). Task errors stay
/// for their streams' owners.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeWithDevSync(devPtr: *mut c_void) -> aclError {
    guard("aclrtFreeWithDevSync", || {
        non_null(devPtr, "devPtr")?;
        let sim = sim()?;
        if let Some((_, _, AllocKind::Device { device, .. })) =
            sim.memory.allocation_of(devPtr as usize)
        {
            let mut devices = vec![device];
            if let Ok(ctx) = context::current(sim)
                && ctx.device.id != device
            {
                devices.push(ctx.device.id);
            }
            quiesce(sim, &devices)?;
        }
        free_device(sim, devPtr)
    })
}

/// Waits until no task of any stream of the `devices` named can still touch memory. Fails
/// (207000), without waiting, if that would wait for the calling thread itself: it runs a host
/// task of one of those streams, or is the report thread a BLOCK callback queued on one waits
/// for (the wait for a stream that is not done includes its running task).
pub(super) fn quiesce(sim: &Sim, devices: &[i32]) -> Res<()> {
    let streams: Vec<_> = devices
        .iter()
        .flat_map(|&device| sim.streams_of(device))
        .collect();
    for stream in &streams {
        stream.refuse_self_wait(u64::MAX)?;
    }
    for stream in streams {
        stream.wait_quiescent();
    }
    Ok(())
}

/// A configuration's DEVICE_ID attribute, if any, must name the current device.
fn check_required_device(current: &crate::device::Device, required: Option<u32>) -> Res<()> {
    if let Some(id) = required {
        ensure!(
            i64::from(id) == i64::from(current.id),
            ACL_ERROR_RT_PARAM_INVALID,
            "the DEVICE_ID attribute ({id}) is not the current device ({})",
            current.id
        );
    }
    Ok(())
}

fn host_malloc(
    sim: &Sim,
    ptr: *mut *mut c_void,
    size: u64,
    required_device: Option<u32>,
) -> Res<()> {
    check_out_and_size(ptr, "hostPtr", size)?;
    check_required_device(&context::current(sim)?.device, required_device)?;
    let Some(bytes) = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_next_multiple_of(PAGE))
    else {
        fail!(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            "{size} bytes cannot be allocated"
        );
    };
    if let Some(code) = sim.memory.take_host_failure() {
        fail!(
            code,
            "allocating {size} bytes of pinned host memory failed (injected failure)"
        );
    }
    let address = sim.memory.allocate(bytes, AllocKind::Pinned)?;
    write_out(ptr, "hostPtr", address as *mut c_void)
}

/// Allocates page-locked host memory (mlock'ed where the OS allows), 64-byte aligned and
/// zero-filled. Needs a current context.
///
/// # Safety
/// `hostPtr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError {
    guard("aclrtMallocHost", || {
        host_malloc(sim()?, hostPtr, size as u64, None)
    })
}

/// aclrtMallocHost with a configuration (NULL allowed).
///
/// # Safety
/// `ptr` must be NULL or valid for a write; `cfg` NULL or a valid configuration.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHostWithCfg(
    ptr: *mut *mut c_void,
    size: u64,
    cfg: *mut aclrtMallocConfig,
) -> aclError {
    guard("aclrtMallocHostWithCfg", || {
        check_out_and_size(ptr, "hostPtr", size)?;
        let required = config_device(cfg)?;
        host_malloc(sim()?, ptr, size, required)
    })
}

/// Frees aclrtMallocHost memory immediately.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError {
    guard("aclrtFreeHost", || {
        non_null(hostPtr, "hostPtr")?;
        sim()?.memory.free(hostPtr as usize, true).map(drop)
    })
}

/// Synchronises the current device (as aclrtSynchronizeDevice would, without consuming task
/// errors), then frees aclrtMallocHost memory. Without a current context there is no device
/// to synchronise and it frees at once, like aclrtFreeHost.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHostWithDevSync(hostPtr: *mut c_void) -> aclError {
    guard("aclrtFreeHostWithDevSync", || {
        non_null(hostPtr, "hostPtr")?;
        let sim = sim()?;
        if sim.memory.is_pinned_allocation(hostPtr as usize)
            && let Ok(ctx) = context::current(sim)
        {
            quiesce(sim, &[ctx.device.id])?;
        }
        sim.memory.free(hostPtr as usize, true).map(drop)
    })
}

/// Where a pointer lives: device memory (with its device and page size), pinned or registered
/// host memory, or memory the runtime does not know (UNREGISTERED).
///
/// # Safety
/// `attributes` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtPointerGetAttributes(
    ptr: *const c_void,
    attributes: *mut aclrtPtrAttributes,
) -> aclError {
    guard("aclrtPointerGetAttributes", || {
        non_null(ptr, "ptr")?;
        non_null(attributes, "attributes")?;
        let sim = sim()?;
        let address = ptr as usize;
        let at = sim.memory.locate(address);
        let (id, type_, page) = match at.class {
            PtrClass::Device(device) => {
                let page = match at.allocation {
                    Some((_, _, AllocKind::Device { page_size, .. })) => page_size,
                    _ => PAGE as u32,
                };
                let type_ = if super::managed::is_managed(sim, address) {
                    ACL_MEM_LOCATION_TYPE_MANAGED
                } else {
                    ACL_MEM_LOCATION_TYPE_DEVICE
                };
                (device as u32, type_, page)
            }
            PtrClass::Host => (0, ACL_MEM_LOCATION_TYPE_HOST, PAGE as u32),
            PtrClass::Unregistered => (0, ACL_MEM_LOCATION_TYPE_UNREGISTERED, PAGE as u32),
        };
        let value = aclrtPtrAttributes {
            location: aclrtMemLocation { id, type_ },
            pageSize: page,
            rsv: [0; 4],
        };
        write_out(attributes, "attributes", value)
    })
}
