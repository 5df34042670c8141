//! Shareable handles of virtual memory's physical allocations (aclrtMemExportToShareableHandle,
//! aclrtMemSetPidToShareableHandle, aclrtMemImportFromShareableHandle): another process
//! imports the physical memory as a handle of its own and maps it with aclrtMapMem.

use std::sync::Arc;

use npu_sys::*;

use super::check::array;
use crate::error::{ensure, guard, non_null, write_out};
use crate::handle;
use crate::ipc::{Kind, shareable_key};
use crate::sim::sim;

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
        non_null(handle, "handle")?;
        let sim = sim()?;
        let owner = handle::from_ptr(handle);
        let physical = sim.vmm.resolve(owner)?;
        ensure!(
            handleType == ACL_MEM_HANDLE_TYPE_NONE,
            ACL_ERROR_RT_PARAM_INVALID,
            "handleType {handleType} is reserved: use ACL_MEM_HANDLE_TYPE_NONE"
        );
        ensure!(
            flags == ACL_RT_VMM_EXPORT_FLAG_DEFAULT as u64
                || flags == ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
            ACL_ERROR_RT_PARAM_INVALID,
            "flags {flags:#x} are not valid export flags (0 or 0x1)"
        );
        non_null(shareableHandle, "shareableHandle")?;
        let shared = sim.ipc.export_physical(
            owner as usize,
            &physical,
            flags == ACL_RT_VMM_EXPORT_FLAG_DEFAULT as u64,
        )?;
        write_out(shareableHandle, "shareableHandle", shared)
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
        non_null(pid, "pid")?;
        ensure!(pidNum != 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
        let pids = array(pid.cast_const(), pidNum, "pid")?;
        sim()?
            .ipc
            .allow(&shareable_key(shareableHandle), Kind::Physical, pids)
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
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        let imported = sim.ipc.import_physical(
            shareableHandle,
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
    })
}
