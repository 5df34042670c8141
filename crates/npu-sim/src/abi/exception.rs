//! Exception callbacks, the exception info getters and the device's error detail.

use npu_sys::*;

use crate::error::{Res, fail, guard, guard_value, non_null, write_out};
use crate::exception::{self, ExceptionInfo};
use crate::handle;
use crate::sim::sim;

/// The getters' value for an info that is not one being delivered (the reference's "device
/// exception" marker).
const INVALID: u32 = 0xFFFF_FFFF;

fn info_of(info: *const aclrtExceptionInfo) -> Res<ExceptionInfo> {
    non_null(info, "info")?;
    match exception::read(info) {
        Some(info) => Ok(info),
        None => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{info:p} is not the aclrtExceptionInfo of an exception callback being run"
        ),
    }
}

/// Sets the process's one deprecated exception callback (NULL clears it); callbacks
/// registered with aclrtExceptionInfoCallbackRegister are kept.
///
/// # Safety
/// `callback` must be safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetExceptionInfoCallback(
    callback: aclrtExceptionInfoCallback,
) -> aclError {
    guard("aclrtSetExceptionInfoCallback", || {
        exception::set(callback);
        Ok(())
    })
}

/// Registers an exception callback, called on the failing stream's worker for every failed
/// task of the process (registering one twice keeps one entry). NULL → 100000.
///
/// # Safety
/// `callback` must be safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtExceptionInfoCallbackRegister(
    callback: aclrtExceptionInfoCallback,
) -> aclError {
    guard("aclrtExceptionInfoCallbackRegister", || {
        let Some(callback) = callback else {
            fail!(ACL_ERROR_INVALID_PARAM, "callback is NULL");
        };
        exception::register(callback);
        Ok(())
    })
}

/// Removes a registered exception callback (one never registered: success, nothing done).
/// NULL → 100000. A callback already being called may still finish.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtExceptionInfoCallbackUnregister(
    callback: aclrtExceptionInfoCallback,
) -> aclError {
    guard("aclrtExceptionInfoCallbackUnregister", || {
        let Some(callback) = callback else {
            fail!(ACL_ERROR_INVALID_PARAM, "callback is NULL");
        };
        exception::unregister(callback);
        Ok(())
    })
}

/// One field of the info being delivered; 0xFFFFFFFF for a NULL or unknown info.
fn field(
    api: &'static str,
    info: *const aclrtExceptionInfo,
    get: fn(&ExceptionInfo) -> u32,
) -> u32 {
    guard_value(api, INVALID, || info_of(info).map(|info| get(&info)))
}

/// The failed task's id (its position in its stream, as aclrtGetThreadLastTaskId reports).
///
/// # Safety
/// No preconditions: the pointer is checked against the infos being delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetTaskIdFromExceptionInfo(info: *const aclrtExceptionInfo) -> u32 {
    field("aclrtGetTaskIdFromExceptionInfo", info, |i| i.task_id)
}

/// The failed task's stream id (aclrtStreamGetId).
///
/// # Safety
/// No preconditions: the pointer is checked against the infos being delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamIdFromExceptionInfo(info: *const aclrtExceptionInfo) -> u32 {
    field("aclrtGetStreamIdFromExceptionInfo", info, |i| i.stream_id)
}

/// The id (gettid) of the thread that submitted the failed task.
///
/// # Safety
/// No preconditions: the pointer is checked against the infos being delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetThreadIdFromExceptionInfo(info: *const aclrtExceptionInfo) -> u32 {
    field("aclrtGetThreadIdFromExceptionInfo", info, |i| i.thread_id)
}

/// The device the task failed on.
///
/// # Safety
/// No preconditions: the pointer is checked against the infos being delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceIdFromExceptionInfo(info: *const aclrtExceptionInfo) -> u32 {
    field("aclrtGetDeviceIdFromExceptionInfo", info, |i| i.device_id)
}

/// The code the task failed with (the one the stream's synchronisation returns).
///
/// # Safety
/// No preconditions: the pointer is checked against the infos being delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetErrorCodeFromExceptionInfo(
    info: *const aclrtExceptionInfo,
) -> u32 {
    field("aclrtGetErrorCodeFromExceptionInfo", info, |i| i.error_code)
}

/// A kernel info's launch (argument pointer and bytes, function handle); 107000 for an info
/// of another kind of task or one not being delivered; NULL → 100000.
fn kernel_of(info: *const aclrtExceptionInfo) -> Res<(usize, u32, handle::Handle)> {
    let info = info_of(info)?;
    match info.kernel {
        Some(kernel) => Ok(kernel),
        None => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "the failed task (task {} of stream {}) is not a kernel launch",
            info.task_id,
            info.stream_id
        ),
    }
}

/// The failed kernel's argument pointer and length (for host-packed arguments, the
/// simulator's copy of them).
///
/// # Safety
/// `devArgsPtr` and `devArgsLen` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetArgsFromExceptionInfo(
    info: *const aclrtExceptionInfo,
    devArgsPtr: *mut *mut std::ffi::c_void,
    devArgsLen: *mut u32,
) -> aclError {
    guard("aclrtGetArgsFromExceptionInfo", || {
        non_null(info, "info")?;
        non_null(devArgsPtr, "devArgsPtr")?;
        non_null(devArgsLen, "devArgsLen")?;
        let (args, len, _) = kernel_of(info)?;
        write_out(devArgsPtr, "devArgsPtr", args as *mut std::ffi::c_void)?;
        write_out(devArgsLen, "devArgsLen", len)
    })
}

/// The failed kernel's function handle.
///
/// # Safety
/// `func` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFuncHandleFromExceptionInfo(
    info: *const aclrtExceptionInfo,
    func: *mut aclrtFuncHandle,
) -> aclError {
    guard("aclrtGetFuncHandleFromExceptionInfo", || {
        non_null(info, "info")?;
        non_null(func, "func")?;
        let (_, _, function) = kernel_of(info)?;
        write_out(func, "func", handle::to_ptr(function))
    })
}

/// The device's error detail after a fault. An Atlas A2 reports only ACL_RT_NO_ERROR,
/// ACL_RT_ERROR_MEMORY and ACL_RT_ERROR_OTHERS: a lost device or a failed kernel is OTHERS;
/// memory with uncorrectable errors (UCE) is MEMORY with its ranges (the first 20) as the
/// detail and `tryRepair` set (aclrtRepairError); a DMA fault (memory freed under a task) is
/// MEMORY with no detail, nothing to repair. NULL → 100000, then an unknown device → 107001.
///
/// # Safety
/// `errorInfo` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetErrorVerbose(
    deviceId: i32,
    errorInfo: *mut aclrtErrorInfo,
) -> aclError {
    guard("aclrtGetErrorVerbose", || {
        non_null(errorInfo, "errorInfo")?;
        let sim = sim()?;
        let device = sim.device(i64::from(deviceId))?;
        // SAFETY: aclrtErrorInfo is plain integers and pointers, for which all-zero is valid.
        let mut info: aclrtErrorInfo = unsafe { std::mem::zeroed() };
        let uce = sim.memory.uce.of_device(device.id);
        info.errorType = if device.is_lost() {
            ACL_RT_ERROR_OTHERS
        } else if !uce.is_empty() {
            // SAFETY: writing the union's UCE member, which is plain integers and pointers.
            let detail = unsafe { &mut info.detail.uceInfo };
            for (slot, &(addr, len)) in detail.memUceInfoArray.iter_mut().zip(&uce) {
                slot.addr = addr as *mut std::ffi::c_void;
                slot.len = len;
            }
            detail.arraySize = uce.len().min(detail.memUceInfoArray.len());
            info.tryRepair = 1;
            info.hasDetail = 1;
            ACL_RT_ERROR_MEMORY
        } else {
            match device.last_fault() {
                None => ACL_RT_NO_ERROR,
                Some(ACL_ERROR_RT_SYS_DMA) => ACL_RT_ERROR_MEMORY,
                Some(_) => ACL_RT_ERROR_OTHERS,
            }
        };
        write_out(errorInfo, "errorInfo", info)
    })
}
