//! The flagged and timed forms of event record and wait.

use std::sync::OnceLock;
use std::time::Duration;

use npu_sys::*;

use crate::error::{Res, ensure, guard, non_null};
use crate::event::Event;
use crate::handle;
use crate::sim::sim;

/// Stream waits take their timeout in seconds, 0 waiting forever.
fn seconds(timeout: u32) -> Option<Duration> {
    (timeout != 0).then(|| Duration::from_secs(u64::from(timeout)))
}

/// Whether the flag of a flagged record or wait is EXTERNAL: DEFAULT or EXTERNAL, else
/// 100000. A value check, made after the NULL event and before any lookup.
fn is_external(api: &str, flag: u32, (external, default): (u32, u32)) -> Res<bool> {
    ensure!(
        flag == default || flag == external,
        ACL_ERROR_INVALID_PARAM,
        "{api}: flag {flag:#x} is not a known flag"
    );
    Ok(flag == external)
}

/// Fixes the flag the API uses the event with at the entry of its first call, as the
/// reference has it: the association is made there and what the call then returns does not
/// undo it. "There" is once the flag is known (DEFAULT or EXTERNAL) and `event` names a live
/// event (a NULL or destroyed one has nothing to associate), before the stream is looked up or
/// anything else checked, so a first call refused for its stream, a timeout or the capture
/// state still fixes the flag. `bound` picks the record or the wait association.
fn bind_at_entry(event: aclrtEvent, bound: fn(&Event) -> &OnceLock<u32>, flag: u32) {
    if let Ok(sim) = sim()
        && let Some(event) = sim.events.get(handle::from_ptr(event))
    {
        bound(&event).get_or_init(|| flag);
    }
}

/// Refuses a flag other than the one the event's first call fixed ([`bind_at_entry`]) with
/// 107000, once both handles are looked up (the codes keep the parameters' order).
fn bind_flag(api: &str, bound: &OnceLock<u32>, flag: u32) -> Res<()> {
    let first = *bound.get_or_init(|| flag);
    ensure!(
        first == flag,
        ACL_ERROR_RT_PARAM_INVALID,
        "{api}: the event was first used with flag {first:#x}, which cannot change to {flag:#x}"
    );
    Ok(())
}

/// aclrtRecordEvent with a flag: ACL_EVENT_RECORD_DEFAULT records as aclrtRecordEvent;
/// ACL_EVENT_RECORD_EXTERNAL, on a stream being captured, records the event at each execution
/// of the instance, for streams outside it to wait on; other flags → 100000.
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
        const API: &str = "aclrtRecordEventWithFlag";
        non_null(event, "event")?;
        let flags = (ACL_EVENT_RECORD_EXTERNAL, ACL_EVENT_RECORD_DEFAULT);
        let external = is_external(API, flag, flags)?;
        bind_at_entry(event, |e| &e.record_flag, flag);
        let (event, stream) = super::event::event_on_stream(event, stream)?;
        bind_flag(API, &event.record_flag, flag)?;
        super::event::record_on(&event, &stream, external)
    })
}

/// aclrtStreamWaitEvent whose wait fails the stream's task with ACL_ERROR_RT_WAIT_TIMEOUT
/// (107019) if the event's record is still pending `timeout` seconds after the wait began
/// (0 = no timeout; negative → 107000, checked after a NULL event's 100000).
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
        // A NULL event is the ACL layer's refusal, before the runtime looks at the timeout.
        non_null(event, "event")?;
        ensure!(
            timeout >= 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "timeout {timeout} is negative: use 0 (no timeout) or a number of seconds"
        );
        super::stream::wait_event(stream, event, seconds(timeout as u32))
    })
}

/// aclrtStreamWaitEventWithTimeout with a flag: ACL_EVENT_WAIT_DEFAULT waits as it does;
/// ACL_EVENT_WAIT_EXTERNAL, on a stream being captured, makes each execution of the instance
/// wait for the event's record current then; other flags → 100000.
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
        const API: &str = "aclrtStreamWaitEventWithFlag";
        non_null(event, "event")?;
        let flags = (ACL_EVENT_WAIT_EXTERNAL, ACL_EVENT_WAIT_DEFAULT);
        let external = is_external(API, flag, flags)?;
        bind_at_entry(event, |e| &e.wait_flag, flag);
        ensure!(
            !external || timeout == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "an EXTERNAL wait takes no timeout (0), not {timeout}"
        );
        let (event, stream) = super::event::stream_waiting_for(stream, event)?;
        bind_flag(API, &event.wait_flag, flag)?;
        match external {
            true => super::stream::wait_external(event, &stream),
            false => super::stream::wait_on(event, &stream, seconds(timeout)),
        }
    })
}
