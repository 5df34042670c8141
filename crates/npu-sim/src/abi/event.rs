//! Event management.

use std::sync::Arc;
use std::time::Instant;

use npu_sys::*;

use super::check::deadline;
use crate::context;
use crate::error::{Res, SimError, ensure, fail, guard, non_null, write_out};
use crate::event::{Event, LEGACY_DEFAULT_FLAGS, Latest, MAX_EVENTS_PER_DEVICE, Outcome, Record};
use crate::handle;
use crate::ipc::{Reached, SharedEvent};
use crate::sim::sim;
use crate::stream::Stream;
use crate::task::{Op, Task};

/// Flags aclrtCreateEventWithFlag knows.
const LEGACY_FLAGS: u32 = ACL_EVENT_SYNC
    | ACL_EVENT_CAPTURE_STREAM_PROGRESS
    | ACL_EVENT_TIME_LINE
    | ACL_EVENT_DEVICE_USE_ONLY
    | ACL_EVENT_EXTERNAL;
/// Flags aclrtCreateEventExWithFlag knows: EXTERNAL and DEVICE_USE_ONLY are the legacy
/// creation's only.
const EX_FLAGS: u32 =
    ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE | ACL_EVENT_IPC;
/// The flags the reference says cannot be OR'd with others.
const EXCLUSIVE_FLAGS: [u32; 2] = [ACL_EVENT_EXTERNAL, ACL_EVENT_IPC];

fn create(out: *mut aclrtEvent, flags: u32, ex: bool) -> Res<()> {
    non_null(out, "event")?;
    let sim = sim()?;
    let ctx = context::current(sim)?;
    ctx.device.check_alive()?;
    let handle = sim
        .events
        .insert(Arc::new(Event::new(ctx.device.clone(), flags, ex)?))?;
    write_out(out, "event", handle::to_ptr(handle))
}

fn check_flags(flags: u32, known: u32) -> Res<()> {
    ensure!(
        flags & !known == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "event flag {flags:#x} has unknown bits"
    );
    for exclusive in EXCLUSIVE_FLAGS {
        ensure!(
            flags & exclusive == 0 || flags == exclusive,
            ACL_ERROR_RT_PARAM_INVALID,
            "event flag {exclusive:#x} cannot be combined with other flags ({flags:#x})"
        );
    }
    Ok(())
}

/// Event of another device than the stream's → 107003 (the simulator's reading of the
/// multi-device rules; see docs/simulator.md).
fn check_same_device(event: &Event, stream: &Stream) -> Res<()> {
    ensure!(
        event.device.id == stream.device.id,
        ACL_ERROR_RT_STREAM_CONTEXT,
        "the event belongs to device {}, the stream to device {}",
        event.device.id,
        stream.device.id
    );
    Ok(())
}

/// ACL_EVENT_DEVICE_USE_ONLY events cannot be recorded, waited or reset from the host.
fn check_host_usable(event: &Event) -> Res<()> {
    ensure!(
        event.flags & ACL_EVENT_DEVICE_USE_ONLY == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "an ACL_EVENT_DEVICE_USE_ONLY event cannot be used from the host"
    );
    Ok(())
}

/// The event and stream of a record or reset (`event`, `stream`), looked up in that order,
/// after the checks every event operation on a stream shares.
pub(super) fn event_on_stream(
    event: aclrtEvent,
    stream: aclrtStream,
) -> Res<(Arc<Event>, Arc<Stream>)> {
    event_and_stream(event, stream, true)
}

/// The stream and event of a wait (`stream`, `event`), looked up in that order, after the
/// checks every event operation on a stream shares.
pub(super) fn stream_waiting_for(
    stream: aclrtStream,
    event: aclrtEvent,
) -> Res<(Arc<Event>, Arc<Stream>)> {
    event_and_stream(event, stream, false)
}

/// The NULL event first (the ACL layer's refusal), then both handles in the order the
/// function's parameters name them (`event_first`), as every two-handle function looks its
/// handles up: a destroyed event recorded on another context's stream is 107017, a foreign
/// stream waiting for a destroyed event 107003.
fn event_and_stream(
    event: aclrtEvent,
    stream: aclrtStream,
    event_first: bool,
) -> Res<(Arc<Event>, Arc<Stream>)> {
    non_null(event, "event")?;
    let sim = sim()?;
    let lookup_event = || sim.events.resolve(handle::from_ptr(event));
    let (event, stream) = if event_first {
        let event = lookup_event()?;
        (event, context::submit_stream(sim, stream)?)
    } else {
        let stream = context::submit_stream(sim, stream)?;
        (lookup_event()?, stream)
    };
    check_same_device(&event, &stream)?;
    check_host_usable(&event)?;
    Ok((event, stream))
}

/// Creates a legacy event (timing and waiting supported) in the current context.
///
/// # Safety
/// `event` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    guard("aclrtCreateEvent", || {
        create(event, LEGACY_DEFAULT_FLAGS, false)
    })
}

/// Creates a legacy event with flags: at least one known bit (0 or unknown bits → 107000);
/// EXTERNAL stands alone.
///
/// # Safety
/// `event` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    guard("aclrtCreateEventWithFlag", || {
        non_null(event, "event")?;
        ensure!(
            flag != 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "event flag 0 has no known bit"
        );
        check_flags(flag, LEGACY_FLAGS)?;
        create(event, flag, false)
    })
}

/// Creates a new-mode (Ex) event: every record overwrites the capture; never-recorded events
/// report COMPLETE; reset, aclrtQueryEvent and wait-status queries are rejected (207000).
/// Flags other than SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE and IPC → 107000.
///
/// # Safety
/// `event` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventExWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    guard("aclrtCreateEventExWithFlag", || {
        non_null(event, "event")?;
        check_flags(flag, EX_FLAGS)?;
        create(event, flag, true)
    })
}

/// Destroys an event; pending records still complete for the waits that captured them.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    guard("aclrtDestroyEvent", || {
        non_null(event, "event")?;
        let sim = sim()?;
        // An exported event's key stops being openable; other processes' events of it live on.
        sim.ipc
            .forget(crate::ipc::Kind::Event, handle::from_ptr(event) as usize);
        match sim.events.remove(handle::from_ptr(event)) {
            Some(event) => {
                event.destroy();
                Ok(())
            }
            None => sim.events.resolve(handle::from_ptr(event)).map(drop),
        }
    })
}

/// Records the event on a stream of the current context: it captures all work submitted to
/// the stream so far.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    guard("aclrtRecordEvent", || {
        let (event, stream) = event_on_stream(event, stream)?;
        record_on(&event, &stream, false)
    })
}

/// Queues a record of `event` on `stream`. An `external` one (ACL_EVENT_RECORD_EXTERNAL)
/// goes into the stream's capture without becoming the event's record, as does a record on
/// a stream bound to a built instance: only the instance's executions record the event.
pub(super) fn record_on(event: &Arc<Event>, stream: &Arc<Stream>, external: bool) -> Res<()> {
    if external {
        crate::capture::external_capture(stream, event)?;
    }
    let bound = stream.bound_model().is_some();
    check_not_captured(event, stream)?;
    ensure!(
        !stream.is_persistent() || bound,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "stream {} is ACL_STREAM_PERSISTENT and bound to no model runtime instance \
         (aclmdlRIBindStream), so a record there could never complete",
        stream.id
    );
    let record = Arc::new(Record::recording(stream.clone(), Some(event)));
    let number = event.shared().map(|shared| {
        let n = shared.issue();
        record.number(shared.clone(), n);
        (shared, n)
    });
    if let Err(error) = stream.submit(Task::new(Op::Record(record.clone()))) {
        // The number was taken: a record that never was must not leave waits on it pending.
        if let Some((shared, n)) = number {
            shared.complete(n);
        }
        return Err(error);
    }
    if !external && !bound {
        drop(event.set_current(record));
    }
    Ok(())
}

/// ACL_EVENT_IPC events cannot be recorded or waited on in a model runtime instance (a stream
/// being captured, or bound to an instance being built): 207000.
pub(super) fn check_not_captured(event: &Event, stream: &Stream) -> Res<()> {
    ensure!(
        event.flags != ACL_EVENT_IPC
            || (stream.capture().is_none() && stream.bound_model().is_none()),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "an ACL_EVENT_IPC event cannot be used in a model runtime instance (stream {} is being \
         captured or is bound to one)",
        stream.id
    );
    Ok(())
}

/// Resets the event when the stream reaches this point (legacy events with a wait capability
/// only; Ex events and TIME_LINE/STREAM_PROGRESS-only events → 207000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    guard("aclrtResetEvent", || {
        let (event, stream) = event_on_stream(event, stream)?;
        ensure!(
            !event.ex,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "Ex events cannot be reset"
        );
        ensure!(
            event.waitable(),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "the event has no wait capability (created without ACL_EVENT_SYNC) and cannot be reset"
        );
        let captured = event.current();
        stream.submit(Task::new(Op::Reset { event, captured }))
    })
}

/// The event, after the checks every query does (live handle, device not lost).
fn live_event(event: aclrtEvent) -> Res<Arc<Event>> {
    let event = resolve(event)?;
    event.device.check_alive()?;
    Ok(event)
}

fn resolve(event: aclrtEvent) -> Res<Arc<Event>> {
    non_null(event, "event")?;
    sim()?.events.resolve(handle::from_ptr(event))
}

/// An event and its latest record, if any.
type Recorded = (Arc<Event>, Option<Arc<Record>>);

/// The event and its record, after the checks every query does (live handle, device not
/// lost).
fn lookup(event: aclrtEvent) -> Res<Recorded> {
    recorded(live_event(event)?)
}

/// The event's record. A record captured into a model runtime instance is not one the host
/// can observe: while its capture goes on → ACL_ERROR_RT_EVENT_CAPTURED; afterwards the
/// event counts as never recorded (only the record's replays run).
fn recorded(event: Arc<Event>) -> Res<Recorded> {
    let record = event.current();
    if let Some(record) = &record
        && record.is_captured()
    {
        if let Some(capture) = record.active_capture() {
            fail!(
                ACL_ERROR_RT_EVENT_CAPTURED,
                "the event was recorded while stream {} is being captured: its record runs only \
                 when the model runtime instance executes",
                capture.origin.id
            );
        }
        return Ok((event, None));
    }
    Ok((event, record))
}

/// A status query: writes `pick(event, state)` through `status`, where state is `None` (never
/// recorded, or reset) or whether the latest record completed. `legacy_api` names queries Ex
/// events do not support (207000).
fn query<T>(
    event: aclrtEvent,
    status: *mut T,
    legacy_api: Option<&str>,
    pick: impl FnOnce(&Event, Option<bool>) -> T,
) -> Res<()> {
    non_null(event, "event")?;
    non_null(status, "status")?;
    let event = resolve(event)?;
    // A query never waits: a lost device still running a task reports the work not done
    // (the loss is reported once nothing touches the device's memory any more).
    if !event.device.check_alive_by(Some(Instant::now()))? {
        check_legacy(&event, legacy_api)?;
        return write_out(status, "status", pick(&event, Some(false)));
    }
    let (event, record) = recorded(event)?;
    check_legacy(&event, legacy_api)?;
    let state = match event.latest() {
        Latest::Shared(shared, n) => Some(shared.reached(n) == Some(Reached::Done)),
        _ => record.map(|r| matches!(r.outcome(), Outcome::Done { .. })),
    };
    write_out(status, "status", pick(&event, state))
}

/// Deprecated query: COMPLETE (0) unless the latest record is still pending (NOT_READY, 1);
/// never recorded → COMPLETE. Ex events → 207000.
///
/// # Safety
/// `status` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEvent(
    event: aclrtEvent,
    status: *mut aclrtEventStatus,
) -> aclError {
    guard("aclrtQueryEvent", || {
        query(
            event,
            status,
            Some("aclrtQueryEvent"),
            |_, state| match state {
                Some(false) => ACL_EVENT_STATUS_NOT_READY,
                _ => ACL_EVENT_STATUS_COMPLETE,
            },
        )
    })
}

/// COMPLETE (1) once the captured work is done, else NOT_READY (0). Never recorded: legacy
/// events NOT_READY, Ex events COMPLETE. Work that can never complete (context stopped) stays
/// NOT_READY.
///
/// # Safety
/// `status` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(
    event: aclrtEvent,
    status: *mut aclrtEventRecordedStatus,
) -> aclError {
    guard("aclrtQueryEventStatus", || {
        query(event, status, None, |event, state| {
            if state.unwrap_or(event.ex) {
                ACL_EVENT_RECORDED_STATUS_COMPLETE
            } else {
                ACL_EVENT_RECORDED_STATUS_NOT_READY
            }
        })
    })
}

/// Whether the waits on the event are done: COMPLETE (0) once the latest record completed and
/// every wait task issued on the event (aclrtStreamWaitEvent) has left its stream, NOT_READY
/// (1) before (and when never recorded). Ex events → 207000.
///
/// # Safety
/// `status` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventWaitStatus(
    event: aclrtEvent,
    status: *mut aclrtEventWaitStatus,
) -> aclError {
    guard("aclrtQueryEventWaitStatus", || {
        query(
            event,
            status,
            Some("aclrtQueryEventWaitStatus"),
            |event, state| match state {
                Some(true) if !event.waits_pending() => ACL_EVENT_WAIT_STATUS_COMPLETE,
                _ => ACL_EVENT_WAIT_STATUS_NOT_READY,
            },
        )
    })
}

fn synchronize(event: aclrtEvent, timeout: i32) -> Res<()> {
    // The ACL layer's NULL check comes before the runtime's check of the timeout, as `event`
    // comes before `timeout`.
    non_null(event, "event")?;
    let deadline = deadline(timeout, ACL_ERROR_RT_PARAM_INVALID)?;
    let event = resolve(event)?;
    // Waits for a lost device's running task until the deadline at most.
    if !event.device.check_alive_by(deadline)? {
        return Err(event_sync_timeout());
    }
    let (event, record) = recorded(event)?;
    if let Latest::Shared(shared, n) = event.latest() {
        return synchronize_shared(&shared, n, deadline);
    }
    let Some(record) = record else { return Ok(()) };
    match record.wait(deadline)? {
        None => Err(event_sync_timeout()),
        Some(None) => Ok(()),
        Some(Some(code)) => Err(SimError::new(
            code,
            "a task captured by the event (since the previous record on its stream) failed",
        )),
    }
}

fn event_sync_timeout() -> SimError {
    SimError::new(
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
        "the event did not complete in time",
    )
}

/// Queries Ex events do not support (`api`, if it is one) → 207000.
fn check_legacy(event: &Event, api: Option<&str>) -> Res<()> {
    if let Some(api) = api {
        ensure!(
            !event.ex,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "{api} does not support Ex events"
        );
    }
    Ok(())
}

/// Waits for record `n` of a shared event, which another process may have made: its tasks'
/// errors stay with that process, a record dropped unreached → 107023.
fn synchronize_shared(
    shared: &SharedEvent,
    n: u64,
    deadline: Option<std::time::Instant>,
) -> Res<()> {
    match shared.wait(n, deadline) {
        Some(Reached::Done) => Ok(()),
        Some(Reached::Dropped) => fail!(
            ACL_ERROR_RT_STREAM_ABORT,
            "the event's latest record was dropped (its stream was aborted) before it was reached"
        ),
        None => fail!(
            ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
            "the event did not complete in time"
        ),
    }
}

/// Waits for the work captured by the event's latest record (never recorded → returns at
/// once). Returns the first error among the tasks that record captured since the previous
/// record on the same stream.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    guard("aclrtSynchronizeEvent", || synchronize(event, -1))
}

/// aclrtSynchronizeEvent with a timeout in ms (-1 = forever; 0 and < -1 → 107000, checked
/// after a NULL event's 100000); expiry → 507047.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeEventWithTimeout(
    event: aclrtEvent,
    timeout: i32,
) -> aclError {
    guard("aclrtSynchronizeEventWithTimeout", || {
        synchronize(event, timeout)
    })
}

/// The simulated timestamp (ns) of a completed record, after the timing checks.
fn timestamp_ns(event: &Event, record: Option<Arc<Record>>) -> Res<u64> {
    ensure!(
        event.flags & (ACL_EVENT_IPC | ACL_EVENT_EXTERNAL) == 0,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "IPC and EXTERNAL events carry no timestamps"
    );
    let Some(record) = record else {
        fail!(
            ACL_ERROR_RT_INTERNAL_ERROR,
            "the event has not been recorded"
        );
    };
    // Only ACL_EVENT_TIME_LINE makes a record write its timestamp (aclrtCreateEvent's events
    // have it; a flag or an Ex event without it does not).
    ensure!(
        event.flags & ACL_EVENT_TIME_LINE != 0,
        ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
        "the event was created without ACL_EVENT_TIME_LINE, so its records write no timestamp"
    );
    match record.outcome() {
        Outcome::Done { ts_ns, .. } => Ok(ts_ns),
        Outcome::Pending => fail!(
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
            "the event's timestamp is not written yet (its record has not completed)"
        ),
    }
}

/// Milliseconds between two completed records, on the simulated device clock.
///
/// # Safety
/// `ms` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventElapsedTime(
    ms: *mut f32,
    startEvent: aclrtEvent,
    endEvent: aclrtEvent,
) -> aclError {
    guard("aclrtEventElapsedTime", || {
        non_null(ms, "ms")?;
        non_null(startEvent, "startEvent")?;
        non_null(endEvent, "endEvent")?;
        let (start, start_record) = lookup(startEvent)?;
        let (end, end_record) = lookup(endEvent)?;
        let start_ns = timestamp_ns(&start, start_record)?;
        let end_ns = timestamp_ns(&end, end_record)?;
        ensure!(
            end_ns >= start_ns,
            ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
            "the end event completed before the start event"
        );
        write_out(ms, "ms", (end_ns - start_ns) as f32 / 1e6)
    })
}

/// The completion time of the event's record in µs on the simulated device clock.
///
/// # Safety
/// `timestamp` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventGetTimestamp(
    event: aclrtEvent,
    timestamp: *mut u64,
) -> aclError {
    guard("aclrtEventGetTimestamp", || {
        non_null(event, "event")?;
        non_null(timestamp, "timestamp")?;
        let (event, record) = lookup(event)?;
        write_out(timestamp, "timestamp", timestamp_ns(&event, record)? / 1000)
    })
}

/// The event's ID, unique among the events of its device for the life of the process. The
/// device must not be lost (507010); NULL `event` or `eventId` → 100000 before the event is
/// looked up (a stale handle → 107017).
///
/// # Safety
/// `eventId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetEventId(event: aclrtEvent, eventId: *mut u32) -> aclError {
    guard("aclrtGetEventId", || {
        non_null(event, "event")?;
        non_null(eventId, "eventId")?;
        let event = live_event(event)?;
        ensure!(
            event.flags != ACL_EVENT_IPC,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "ACL_EVENT_IPC events have no event ID"
        );
        write_out(eventId, "eventId", event.id)
    })
}

/// How many more events holding a hardware event (waitable ones: aclrtCreateEvent, or a flag
/// with ACL_EVENT_SYNC; and ACL_EVENT_EXTERNAL ones) the current device can create: 65536
/// minus those alive. Needs a current context (107002).
///
/// # Safety
/// `eventCount` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetEventAvailNum(eventCount: *mut u32) -> aclError {
    guard("aclrtGetEventAvailNum", || {
        non_null(eventCount, "eventCount")?;
        let ctx = context::current(sim()?)?;
        ctx.device.check_alive()?;
        let live = ctx
            .device
            .hardware_events
            .load(std::sync::atomic::Ordering::Acquire);
        let available = MAX_EVENTS_PER_DEVICE.saturating_sub(live);
        write_out(eventCount, "eventCount", available as u32)
    })
}
