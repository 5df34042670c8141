//! Counted notifies (aclrtCntNotify*): a feature the Atlas A2 does not have. No counted
//! notify can be created, so every handle passed is refused as well: a NULL pointer argument
//! → 100000, anything else → 207000.

use std::ffi::c_void;

use npu_sys::*;

use super::check::refuse_after_checks;

/// Checks the pointer arguments (NULL → 100000), then refuses the call.
fn refuse(api: &'static str, pointers: &[(*const c_void, &str)]) -> aclError {
    refuse_after_checks(api, pointers, "counted notifies (aclrtCntNotify)")
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, else 207000.
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyCreate(
    cntNotify: *mut aclrtCntNotify,
    flag: u64,
) -> aclError {
    let _ = flag;
    refuse("aclrtCntNotifyCreate", &[(cntNotify.cast(), "cntNotify")])
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyDestroy(cntNotify: aclrtCntNotify) -> aclError {
    refuse("aclrtCntNotifyDestroy", &[(cntNotify, "cntNotify")])
}

/// Not supported on an Atlas A2: NULL cntNotify or info → 100000, else 207000.
///
/// # Safety
/// No preconditions; nothing is read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyRecord(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
    info: *mut aclrtCntNotifyRecordInfo,
) -> aclError {
    let _ = stream;
    refuse(
        "aclrtCntNotifyRecord",
        &[(cntNotify, "cntNotify"), (info.cast(), "info")],
    )
}

/// Not supported on an Atlas A2: NULL cntNotify or info → 100000, else 207000.
///
/// # Safety
/// No preconditions; nothing is read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyWaitWithTimeout(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
    info: *mut aclrtCntNotifyWaitInfo,
) -> aclError {
    let _ = stream;
    refuse(
        "aclrtCntNotifyWaitWithTimeout",
        &[(cntNotify, "cntNotify"), (info.cast(), "info")],
    )
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyReset(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
) -> aclError {
    let _ = stream;
    refuse("aclrtCntNotifyReset", &[(cntNotify, "cntNotify")])
}

/// Not supported on an Atlas A2: NULL cntNotify or notifyId → 100000, else 207000.
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyGetId(
    cntNotify: aclrtCntNotify,
    notifyId: *mut u32,
) -> aclError {
    refuse(
        "aclrtCntNotifyGetId",
        &[(cntNotify, "cntNotify"), (notifyId.cast(), "notifyId")],
    )
}
