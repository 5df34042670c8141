//! Counted notifies (aclrtCntNotify*): a feature the Atlas A2 does not have. No counted
//! notify can be created, so the refusal stands for the lookup of the `cntNotify` handle a
//! runtime without the feature cannot resolve. The arguments are checked first, as every
//! stream-taking call checks them: NULL pointers → 100000, values outside their enums (a
//! reserved `flag` not 0, an unknown mode, an `isClear` not 0 or 1) → 107000, then the stream
//! (NULL is the current context's default stream: no context → 107002; destroyed → 107017,
//! another context's → 107003); only then 207000.

use npu_sys::*;

use super::check::{unsupported_on_a2, unsupported_on_stream};
use crate::error::{Res, ensure, guard, non_null};

const WHAT: &str = "counted notifies (aclrtCntNotify)";

/// The refusal, once every argument passed.
fn refuse() -> Res<()> {
    unsupported_on_a2(WHAT)
}

/// Looks `stream` up, then refuses the call.
fn refuse_on(stream: aclrtStream) -> Res<()> {
    unsupported_on_stream(stream, WHAT)
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, `flag` (reserved) not 0 → 107000,
/// else 207000.
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyCreate(
    cntNotify: *mut aclrtCntNotify,
    flag: u64,
) -> aclError {
    guard("aclrtCntNotifyCreate", || {
        non_null(cntNotify, "cntNotify")?;
        ensure!(
            flag == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flag {flag:#x} is reserved and must be 0"
        );
        refuse()
    })
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyDestroy(cntNotify: aclrtCntNotify) -> aclError {
    guard("aclrtCntNotifyDestroy", || {
        non_null(cntNotify, "cntNotify")?;
        refuse()
    })
}

/// Not supported on an Atlas A2: NULL cntNotify or info → 100000, a mode outside
/// aclrtCntNotifyRecordMode → 107000, the stream's lookup (107002, 107017, 107003), else
/// 207000.
///
/// # Safety
/// `info` must be NULL or valid for a read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyRecord(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
    info: *mut aclrtCntNotifyRecordInfo,
) -> aclError {
    guard("aclrtCntNotifyRecord", || {
        non_null(cntNotify, "cntNotify")?;
        non_null(info, "info")?;
        // SAFETY: non-NULL, and the caller makes it valid for a read.
        let mode = unsafe { (*info).mode };
        ensure!(
            matches!(
                mode,
                ACL_RT_CNT_NOTIFY_RECORD_SET_VALUE_MODE
                    | ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE
                    | ACL_RT_CNT_NOTIFY_RECORD_BIT_OR_MODE
                    | ACL_RT_CNT_NOTIFY_RECORD_BIT_AND_MODE
            ),
            ACL_ERROR_RT_PARAM_INVALID,
            "info mode {mode} is not an aclrtCntNotifyRecordMode"
        );
        refuse_on(stream)
    })
}

/// Not supported on an Atlas A2: NULL cntNotify or info → 100000, a mode outside
/// aclrtCntNotifyWaitMode or an `isClear` not 0 or 1 → 107000, the stream's lookup (107002,
/// 107017, 107003), else 207000.
///
/// # Safety
/// `info` must be NULL or valid for a read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyWaitWithTimeout(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
    info: *mut aclrtCntNotifyWaitInfo,
) -> aclError {
    guard("aclrtCntNotifyWaitWithTimeout", || {
        non_null(cntNotify, "cntNotify")?;
        non_null(info, "info")?;
        // SAFETY: non-NULL, and the caller makes it valid for a read.
        let info = unsafe { info.read() };
        ensure!(
            info.mode <= ACL_RT_CNT_NOTIFY_WAIT_EQUAL_WITH_BITMASK_MODE,
            ACL_ERROR_RT_PARAM_INVALID,
            "info mode {} is not an aclrtCntNotifyWaitMode",
            info.mode
        );
        ensure!(
            info.isClear <= 1,
            ACL_ERROR_RT_PARAM_INVALID,
            "info isClear {} is neither 0 nor 1",
            info.isClear
        );
        refuse_on(stream)
    })
}

/// Not supported on an Atlas A2: NULL cntNotify → 100000, the stream's lookup (107002,
/// 107017, 107003), else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCntNotifyReset(
    cntNotify: aclrtCntNotify,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtCntNotifyReset", || {
        non_null(cntNotify, "cntNotify")?;
        refuse_on(stream)
    })
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
    guard("aclrtCntNotifyGetId", || {
        non_null(cntNotify, "cntNotify")?;
        non_null(notifyId, "notifyId")?;
        refuse()
    })
}
