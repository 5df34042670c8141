//! Shareable handles of virtual memory's physical allocations (aclrtMemExportToShareableHandle,
//! aclrtMemSetPidToShareableHandle, aclrtMemImportFromShareableHandle and their V2 forms):
//! another process imports the physical memory as a handle of its own and maps it with
//! aclrtMapMem. The V2 forms take the handle by pointer and a share type; the cross-server
//! FABRIC type is Atlas A3 only.

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use super::check::array;
use crate::context;
use crate::device::Device;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::ipc::{Kind, shareable_key};
use crate::sim::sim;

/// Checks an export's flags: 0 or ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION (107000).
fn check_export_flags(flags: u64) -> Res<()> {
    ensure!(
        flags == ACL_RT_VMM_EXPORT_FLAG_DEFAULT as u64
            || flags == ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
        ACL_ERROR_RT_PARAM_INVALID,
        "flags {flags:#x} are not valid export flags (0 or 0x1)"
    );
    Ok(())
}

/// The checks of an export (the NULL pointers, the handle, then `values`: the handle or share
/// type and the flags, in the form's parameter order), then the export; `write` stores the
/// result.
fn export(
    handle: aclrtDrvMemHandle,
    values: impl FnOnce() -> Res<()>,
    flags: u64,
    out: *const c_void,
    write: impl FnOnce(u64) -> Res<()>,
) -> Res<()> {
    non_null(handle, "handle")?;
    non_null(out, "shareableHandle")?;
    let sim = sim()?;
    let owner = handle::from_ptr(handle);
    let physical = sim.vmm.resolve(owner)?;
    values()?;
    let shared = sim.ipc.export_physical(
        owner as usize,
        &physical,
        flags == ACL_RT_VMM_EXPORT_FLAG_DEFAULT as u64,
    )?;
    write(shared)
}

/// Whitelists `pidNum` pids for a shareable handle this process exported.
fn set_pid(shareable: u64, pid: *mut i32, pid_num: usize) -> Res<()> {
    non_null(pid, "pid")?;
    ensure!(pid_num != 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
    let pids = array(pid.cast_const(), pid_num, "pid")?;
    sim()?
        .ipc
        .allow(&shareable_key(shareable), Kind::Physical, pids)
}

/// Imports a shareable handle as physical memory of `device` and writes its handle.
fn import(shareable: u64, device: &Arc<Device>, handle: *mut aclrtDrvMemHandle) -> Res<()> {
    let sim = sim()?;
    let imported = sim.ipc.import_physical(
        shareable,
        |reply, file| {
            let prop = aclrtPhysicalMemProp {
                handleType: ACL_MEM_HANDLE_TYPE_NONE,
                allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
                memAttr: reply.attr,
                location: aclrtMemLocation {
                    id: device.id as u32,
                    type_: ACL_MEM_LOCATION_TYPE_DEVICE,
                },
                reserve: 0,
            };
            sim.vmm.adopt(
                device,
                reply.size as usize,
                reply.len as usize,
                reply.page_size as usize,
                prop,
                Arc::new(file),
            )
        },
        |owned| sim.vmm.resolve(owned).is_ok(),
    )?;
    write_out(handle, "handle", handle::to_ptr(imported))
}

/// Checks a V2 share type: DEFAULT is the only one within a server; FABRIC (across servers) is
/// Atlas A3 only (207000); anything else → 107000.
fn check_share_type(share_type: aclrtMemSharedHandleType) -> Res<()> {
    match share_type {
        ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT => Ok(()),
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "ACL_MEM_SHARE_HANDLE_TYPE_FABRIC shares memory across servers, which only an \
             Atlas A3 supports"
        ),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "shareType {other} is not an aclrtMemSharedHandleType"
        ),
    }
}

/// Reads the V2 forms' shareable handle (a DEFAULT handle is a uint64_t).
fn read_shareable(shareable: *const c_void) -> Res<u64> {
    non_null(shareable, "shareableHandle")?;
    // SAFETY: non-NULL; for the DEFAULT type the caller's pointer addresses a uint64_t by the
    // API contract (read unaligned: it is a void pointer).
    Ok(unsafe { shareable.cast::<u64>().read_unaligned() })
}

/// Exports physical memory of this process as a shareable handle for other processes. NULL
/// handle or shareableHandle → 100000; a freed handle → 107017; handleType other than
/// ACL_MEM_HANDLE_TYPE_NONE, unknown flags, memory already exported → 107000. With
/// ACL_RT_VMM_EXPORT_FLAG_DEFAULT only whitelisted processes may import it.
///
/// # Safety
/// `shareableHandle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemExportToShareableHandle(
    handle: aclrtDrvMemHandle,
    handleType: aclrtMemHandleType,
    flags: u64,
    shareableHandle: *mut u64,
) -> aclError {
    guard("aclrtMemExportToShareableHandle", || {
        let values = || {
            ensure!(
                handleType == ACL_MEM_HANDLE_TYPE_NONE,
                ACL_ERROR_RT_PARAM_INVALID,
                "handleType {handleType} is reserved: use ACL_MEM_HANDLE_TYPE_NONE"
            );
            check_export_flags(flags)
        };
        export(handle, values, flags, shareableHandle.cast(), |shared| {
            write_out(shareableHandle, "shareableHandle", shared)
        })
    })
}

/// aclrtMemExportToShareableHandle with the share type instead of the handle type: DEFAULT
/// writes a uint64_t at `shareableHandle`; FABRIC → 207000 (Atlas A3 only); another type →
/// 107000. Unknown flags (107000) are refused before the share type, which follows them.
///
/// # Safety
/// `shareableHandle` must be NULL or valid for a write of a uint64_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemExportToShareableHandleV2(
    handle: aclrtDrvMemHandle,
    flags: u64,
    shareType: aclrtMemSharedHandleType,
    shareableHandle: *mut c_void,
) -> aclError {
    guard("aclrtMemExportToShareableHandleV2", || {
        // The flags precede the share type among this form's parameters.
        let values = || {
            check_export_flags(flags)?;
            check_share_type(shareType)
        };
        export(handle, values, flags, shareableHandle, |shared| {
            // SAFETY: non-NULL; for the DEFAULT type it addresses a writable uint64_t by the
            // API contract (written unaligned: it is a void pointer).
            unsafe { shareableHandle.cast::<u64>().write_unaligned(shared) };
            Ok(())
        })
    })
}

/// Adds `pidNum` pids to the whitelist of a shareable handle this process exported. NULL pid
/// or pidNum 0 → 100000; a handle this process did not export (or whose memory it freed), a
/// pid that is not positive → 107000.
///
/// # Safety
/// `pid` must be NULL or valid for `pidNum` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemSetPidToShareableHandle(
    shareableHandle: u64,
    pid: *mut i32,
    pidNum: usize,
) -> aclError {
    guard("aclrtMemSetPidToShareableHandle", || {
        set_pid(shareableHandle, pid, pidNum)
    })
}

/// aclrtMemSetPidToShareableHandle for a V2 handle (read from `shareableHandle`); NULL →
/// 100000, share types as aclrtMemExportToShareableHandleV2.
///
/// # Safety
/// `shareableHandle` must be NULL or valid for a read of a uint64_t; `pid` NULL or valid for
/// `pidNum` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemSetPidToShareableHandleV2(
    shareableHandle: *mut c_void,
    shareType: aclrtMemSharedHandleType,
    pid: *mut i32,
    pidNum: usize,
) -> aclError {
    guard("aclrtMemSetPidToShareableHandleV2", || {
        let shareable = read_shareable(shareableHandle)?;
        non_null(pid, "pid")?;
        ensure!(pidNum != 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
        check_share_type(shareType)?;
        set_pid(shareable, pid, pidNum)
    })
}

/// Imports physical memory another process exported as a handle of this process on device
/// `deviceId` (any device: the exporter's memory is reachable from all), to map with
/// aclrtMapMem and free with aclrtFreePhysical. NULL handle → 100000; unknown deviceId →
/// 107001; a shareable handle of this process, of nothing (any longer) exported, or already
/// imported by this process and not freed → 107000; not whitelisted → 207006; an exporter that
/// is gone → 507022.
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemImportFromShareableHandle(
    shareableHandle: u64,
    deviceId: i32,
    handle: *mut aclrtDrvMemHandle,
) -> aclError {
    guard("aclrtMemImportFromShareableHandle", || {
        non_null(handle, "handle")?;
        let device = sim()?.device(deviceId.into())?;
        import(shareableHandle, device, handle)
    })
}

/// aclrtMemImportFromShareableHandle for a V2 handle (read from `shareableHandle`), on the
/// current context's device (107002 without one). NULL shareableHandle or handle → 100000;
/// flags other than 0 → 107000; share types as aclrtMemExportToShareableHandleV2.
///
/// # Safety
/// `shareableHandle` must be NULL or valid for a read of a uint64_t; `handle` NULL or valid
/// for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemImportFromShareableHandleV2(
    shareableHandle: *mut c_void,
    shareType: aclrtMemSharedHandleType,
    flags: u64,
    handle: *mut aclrtDrvMemHandle,
) -> aclError {
    guard("aclrtMemImportFromShareableHandleV2", || {
        let shareable = read_shareable(shareableHandle)?;
        non_null(handle, "handle")?;
        check_share_type(shareType)?;
        ensure!(
            flags == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flags is reserved and must be 0, not {flags:#x}"
        );
        let sim = sim()?;
        let ctx = context::current(sim)?;
        import(shareable, &ctx.device, handle)
    })
}
