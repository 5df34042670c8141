//! The flagged and timed forms of event record and wait.

use std::time::Duration;

use npu_sys::*;

use crate::error::{Res, ensure, guard};

/// Stream waits take their timeout in seconds, 0 waiting forever.
fn seconds(timeout: u32) -> Option<Duration> {
    (timeout != 0).then(|| Duration::from_secs(u64::from(timeout)))
}

/// ACL graph capture (the EXTERNAL flags) does not exist in the simulator.
fn no_capture(api: &str, flag: u32, external: u32, default: u32) -> Res<()> {
    ensure!(
        flag == default || flag == external,
        ACL_ERROR_INVALID_PARAM,
        "{api}: flag {flag:#x} is not a known flag"
    );
    ensure!(
        flag == default,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{api}: the EXTERNAL flag is for ACL graph capture, and no stream is being captured"
    );
    Ok(())
}

/// aclrtRecordEvent with a flag: ACL_EVENT_RECORD_DEFAULT records as aclrtRecordEvent;
/// ACL_EVENT_RECORD_EXTERNAL needs a stream under graph capture, which never exists here
/// (207000); other flags → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEventWithFlag(
    event: aclrtEvent,
    stream: aclrtStream,
    flag: u32,
) -> aclError {
    guard("aclrtRecordEventWithFlag", || {
        no_capture(
            "aclrtRecordEventWithFlag",
            flag,
            ACL_EVENT_RECORD_EXTERNAL,
            ACL_EVENT_RECORD_DEFAULT,
        )?;
        super::event::record(event, stream)
    })
}

/// aclrtStreamWaitEvent whose wait fails the stream's task with ACL_ERROR_RT_WAIT_TIMEOUT
/// (107019) if the event's record is still pending `timeout` seconds after the wait began
/// (0 = no timeout; negative → 107000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEventWithTimeout(
    stream: aclrtStream,
    event: aclrtEvent,
    timeout: i32,
) -> aclError {
    guard("aclrtStreamWaitEventWithTimeout", || {
        ensure!(
            timeout >= 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "timeout {timeout} is negative: use 0 (no timeout) or a number of seconds"
        );
        super::stream::wait_event(stream, event, seconds(timeout as u32))
    })
}

/// aclrtStreamWaitEventWithTimeout with a flag: ACL_EVENT_WAIT_DEFAULT waits as it does;
/// ACL_EVENT_WAIT_EXTERNAL needs graph capture (207000); other flags → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEventWithFlag(
    stream: aclrtStream,
    event: aclrtEvent,
    timeout: u32,
    flag: u32,
) -> aclError {
    guard("aclrtStreamWaitEventWithFlag", || {
        no_capture(
            "aclrtStreamWaitEventWithFlag",
            flag,
            ACL_EVENT_WAIT_EXTERNAL,
            ACL_EVENT_WAIT_DEFAULT,
        )?;
        super::stream::wait_event(stream, event, seconds(timeout))
    })
}
