//! Recovering a device after a fault: aclrtDeviceTaskAbort and its callbacks, and the
//! uncorrectable memory errors (UCE) aclrtGetMemUceInfo lists and aclrtMemUceRepair /
//! aclrtRepairError repair.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use npu_sys::*;

use super::check::c_str;
use crate::device::Device;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::sim::{Sim, sim};
use crate::task_abort::{self, MAX_TIMEOUT_MS};

/// Registers `callback` under the unique name `regName`, called with `args` on the aborting
/// thread before (ACL_RT_DEVICE_TASK_ABORT_PRE) and after (POST) every aclrtDeviceTaskAbort,
/// with the abort's device and timeout. A NULL callback removes the name's registration.
/// NULL or empty name → 100000; a name already registered, or removing one that is not →
/// 107000.
///
/// # Safety
/// `regName` must be NULL or a NUL-terminated string; `callback` must be safe to call with
/// `args` from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDeviceTaskAbortCallback(
    regName: *const c_char,
    callback: aclrtDeviceTaskAbortCallback,
    args: *mut c_void,
) -> aclError {
    guard("aclrtSetDeviceTaskAbortCallback", || {
        let name = c_str(regName, "regName")?;
        crate::stream_state::register_abort(name, callback, args as usize)
    })
}

/// Drops every task of the device not run yet, on every stream of every context, and returns
/// with the streams empty, their errors cleared and usable again; tasks running finish first.
/// `timeout` in ms bounds that wait (0: no bound; above 36 minutes → 100000); past it →
/// 107020. Meanwhile submissions to the device's streams → 107022. A PRE callback returning
/// non-zero stops the abort before it starts, a POST one is reported after it: 107035.
/// Unknown device → 107001.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceTaskAbort(deviceId: i32, timeout: u32) -> aclError {
    guard("aclrtDeviceTaskAbort", || {
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        ensure!(
            timeout <= MAX_TIMEOUT_MS,
            ACL_ERROR_INVALID_PARAM,
            "timeout {timeout} ms is above the 36-minute maximum ({MAX_TIMEOUT_MS} ms)"
        );
        task_abort::abort_device(sim, device, timeout)
    })
}

/// An aclrtMemUceInfo naming one range.
fn uce_info(addr: usize, len: usize) -> aclrtMemUceInfo {
    aclrtMemUceInfo {
        addr: addr as *mut c_void,
        len,
        reserved: [0; UCE_INFO_RESERVED_SIZE as usize],
    }
}

/// The UCE array arguments of aclrtGetMemUceInfo and aclrtMemUceRepair: NULL or an arraySize
/// of 0 → 100000, checked before the device is looked up.
fn check_uce_array(array: *const aclrtMemUceInfo, size: usize) -> Res<()> {
    non_null(array, "memUceInfoArray")?;
    ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "arraySize is 0");
    Ok(())
}

/// Lists the device's memory ranges with uncorrectable errors, in address order, into the
/// caller's array (at most `arraySize` of them); `*retSize` receives how many were written.
/// NULL array or retSize, or arraySize 0 → 100000, then an unknown device → 107001.
///
/// # Safety
/// `memUceInfoArray` must be NULL or valid for writes of `arraySize` entries; `retSize` NULL
/// or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemUceInfo(
    deviceId: i32,
    memUceInfoArray: *mut aclrtMemUceInfo,
    arraySize: usize,
    retSize: *mut usize,
) -> aclError {
    guard("aclrtGetMemUceInfo", || {
        check_uce_array(memUceInfoArray, arraySize)?;
        non_null(retSize, "retSize")?;
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        let ranges = sim.memory.uce.of_device(device.id);
        let written = ranges.len().min(arraySize);
        for (at, &(addr, len)) in ranges.iter().take(written).enumerate() {
            // SAFETY: the caller's array holds `arraySize` entries and `at < arraySize`.
            let slot = unsafe { memUceInfoArray.add(at) };
            write_out(slot, "memUceInfoArray", uce_info(addr, len))?;
        }
        write_out(retSize, "retSize", written)
    })
}

/// Repairs the given ranges of a device (each exactly one aclrtGetMemUceInfo reported; all or
/// none are repaired); their memory reads as zeros afterwards, what it held being lost. Once
/// no range is left, a device whose latest fault was the UCE reports no error again.
fn repair(sim: &Sim, device: &Arc<Device>, infos: &[aclrtMemUceInfo]) -> Res<()> {
    let ranges: Vec<(usize, usize)> = infos.iter().map(|i| (i.addr as usize, i.len)).collect();
    sim.memory.uce.repair(device.id, &ranges)?;
    for &(addr, len) in &ranges {
        // A range of an allocation freed meanwhile has nothing left to zero.
        if let Some(_lease) = sim.memory.lease(addr, len) {
            // SAFETY: the lease keeps `[addr, addr+len)` live device memory of the simulator.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        }
    }
    crate::device::MEMORY_BELL.ring();
    if sim.memory.uce.of_device(device.id).is_empty() {
        device.clear_fault(ACL_ERROR_RT_DEVICE_MEM_ERROR);
    }
    Ok(())
}

/// Repairs uncorrectable memory errors the caller got from aclrtGetMemUceInfo. NULL array or
/// arraySize 0 → 100000, then an unknown device → 107001; an entry that is not one of the device's
/// error ranges → 107000, nothing repaired.
///
/// # Safety
/// `memUceInfoArray` must be NULL or valid for reads of `arraySize` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemUceRepair(
    deviceId: i32,
    memUceInfoArray: *mut aclrtMemUceInfo,
    arraySize: usize,
) -> aclError {
    guard("aclrtMemUceRepair", || {
        check_uce_array(memUceInfoArray, arraySize)?;
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        let infos =
            super::check::array(memUceInfoArray.cast_const(), arraySize, "memUceInfoArray")?;
        repair(sim, device, infos)
    })
}

/// Repairs what aclrtGetErrorVerbose reported: nothing to do for an info that does not ask
/// for a repair (`tryRepair` 0) or reports no error; a MEMORY error's UCE ranges are repaired
/// as aclrtMemUceRepair does (they must be in its detail: `hasDetail` 0 or more than 20
/// entries → 100000); the other kinds cannot be repaired on an Atlas A2 (207000): reset the
/// device. NULL → 100000, then an unknown device → 107001; an unknown error type → 100000.
///
/// # Safety
/// `errorInfo` must be NULL or valid for a read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRepairError(
    deviceId: i32,
    errorInfo: *const aclrtErrorInfo,
) -> aclError {
    guard("aclrtRepairError", || {
        non_null(errorInfo, "errorInfo")?;
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        // SAFETY: non-NULL, and the caller's info is valid for a read; every field is a plain
        // integer (the error type is read as one, whatever its value).
        let info = unsafe { errorInfo.read_unaligned() };
        let error_type = info.errorType;
        ensure!(
            matches!(
                error_type,
                ACL_RT_NO_ERROR
                    | ACL_RT_ERROR_MEMORY
                    | ACL_RT_ERROR_L2
                    | ACL_RT_ERROR_AICORE
                    | ACL_RT_ERROR_LINK
                    | ACL_RT_ERROR_L3_PORT
                    | ACL_RT_ERROR_OTHERS
            ),
            ACL_ERROR_INVALID_PARAM,
            "errorType {error_type} is not an aclrtErrorType"
        );
        if info.tryRepair == 0 || error_type == ACL_RT_NO_ERROR {
            return Ok(());
        }
        if error_type != ACL_RT_ERROR_MEMORY {
            fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "errors of type {error_type} cannot be repaired on an Atlas A2 device: reset \
                 device {deviceId}"
            );
        }
        ensure!(
            info.hasDetail != 0,
            ACL_ERROR_INVALID_PARAM,
            "a memory error is repaired from its detail, and hasDetail is 0"
        );
        // SAFETY: a MEMORY error's detail is the UCE array (the union's plain-integer member).
        let uce = unsafe { info.detail.uceInfo };
        ensure!(
            uce.arraySize <= uce.memUceInfoArray.len(),
            ACL_ERROR_INVALID_PARAM,
            "detail.uceInfo.arraySize {} is above ACL_RT_MEM_UCE_INFO_MAX_NUM ({})",
            uce.arraySize,
            uce.memUceInfoArray.len()
        );
        repair(sim, device, &uce.memUceInfoArray[..uce.arraySize])
    })
}
