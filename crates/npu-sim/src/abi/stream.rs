//! Stream management.

use std::sync::Arc;

use npu_sys::*;

use super::check::deadline;
use super::device::LEAST_PRIORITY;
use crate::context;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::event::{Event, Latest, Unrecorded};
use crate::handle;
use crate::sim::sim;
use crate::stream::Stream;
use crate::task::{Op, Task};

/// Stream flags the runtime knows; other bits are ignored.
const KNOWN_STREAM_FLAGS: u32 = ACL_STREAM_FAST_LAUNCH
    | ACL_STREAM_FAST_SYNC
    | ACL_STREAM_PERSISTENT
    | ACL_STREAM_HUGE
    | ACL_STREAM_CPU_SCHEDULE
    | ACL_STREAM_DEVICE_USE_ONLY;

/// Creates a stream in the current context (shared by every creation API).
pub(super) fn create(out: *mut aclrtStream, priority: u32, flags: u32) -> Res<()> {
    non_null(out, "stream")?;
    let sim = sim()?;
    let ctx = context::current(sim)?;
    ctx.device.check_alive()?;
    let stream = ctx.create_stream(
        sim,
        priority.min(LEAST_PRIORITY),
        flags & KNOWN_STREAM_FLAGS,
    )?;
    write_out(out, "stream", handle::to_ptr(stream.handle))
}

/// Creates a stream in the current context (priority 0, no flags). Its worker thread starts
/// with it.
///
/// # Safety
/// `stream` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    guard("aclrtCreateStream", || create(stream, 0, 0))
}

/// Creates a stream with a priority (clamped to 0..=7) and flags (unknown bits ignored).
/// PERSISTENT / DEVICE_USE_ONLY / CPU_SCHEDULE streams are not synchronised from the host
/// (their syncs return at once); a PERSISTENT stream keeps its tasks for a model and never
/// runs them.
///
/// # Safety
/// `stream` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(
    stream: *mut aclrtStream,
    priority: u32,
    flag: u32,
) -> aclError {
    guard("aclrtCreateStreamWithConfig", || {
        create(stream, priority, flag)
    })
}

fn destroy(stream: aclrtStream, force: bool) -> Res<()> {
    non_null(stream, "stream")?;
    let sim = sim()?;
    let (ctx, stream) = context::owned_stream(sim, stream)?;
    ensure!(
        !stream.is_default,
        ACL_ERROR_RT_PARAM_INVALID,
        "the default stream is destroyed with its context, not with aclrtDestroyStream"
    );
    stream.check_not_captured("destroying it")?;
    // Both forms wait for the running task, which may be the caller's own; only the
    // unforced one waits for a BLOCK callback the caller would have to process.
    if force {
        stream.refuse_wait_for_caller(u64::MAX)?;
    } else {
        stream.refuse_self_wait(u64::MAX)?;
    }
    // Two threads may both resolve the handle before either destroys it: the one that does
    // not destroy it was given a handle that is going away.
    ensure!(
        stream.destroy(sim, force),
        ACL_ERROR_RT_INVALID_HANDLE,
        "the stream is being destroyed by another call"
    );
    ctx.remove_stream(stream.handle);
    Ok(())
}

/// Destroys a stream of the current context after its work completes.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    guard("aclrtDestroyStream", || destroy(stream, false))
}

/// Destroys a stream of the current context without waiting for its unfinished tasks:
/// submissions are refused at once, the tasks not started are dropped (waits on their records
/// fail with 107023), and this returns once the task running, which cannot be interrupted, has
/// finished. Task errors are not reported.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStreamForce(stream: aclrtStream) -> aclError {
    guard("aclrtDestroyStreamForce", || destroy(stream, true))
}

fn synchronize(stream: aclrtStream, timeout: i32) -> Res<()> {
    let deadline = deadline(timeout, ACL_ERROR_RT_PARAM_INVALID)?;
    let sim = sim()?;
    // A current context is required, but the stream may belong to another one.
    context::current(sim)?;
    let stream = context::any_stream(sim, stream)?;
    // The reference: a PERSISTENT, DEVICE_USE_ONLY or CPU_SCHEDULE stream's synchronisation
    // does nothing and returns success at once, whatever the stream's state (stopped, its
    // context stopped, a task failed).
    if stream.host_unsynced() {
        return Ok(());
    }
    stream.check_not_captured("synchronizing it")?;
    stream.synchronize(deadline)
}

/// Waits for a stream's work; returns (and clears) the first task error of the stream. NULL is
/// the current context's default stream; streams of other contexts are accepted. A PERSISTENT,
/// DEVICE_USE_ONLY or CPU_SCHEDULE stream is not synchronised: 0 at once.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    guard("aclrtSynchronizeStream", || synchronize(stream, -1))
}

/// aclrtSynchronizeStream with a timeout in ms (-1 = forever; 0 and < -1 → 107000); expiry →
/// 507046.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStreamWithTimeout(
    stream: aclrtStream,
    timeout: i32,
) -> aclError {
    guard("aclrtSynchronizeStreamWithTimeout", || {
        synchronize(stream, timeout)
    })
}

/// COMPLETE when all submitted work is done, else NOT_READY. Task failures are reported by
/// the synchronisations, not here; work that can never complete (stopped or aborting stream,
/// STOP-mode failure, lost device) fails the query.
///
/// # Safety
/// `status` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamQuery(
    stream: aclrtStream,
    status: *mut aclrtStreamStatus,
) -> aclError {
    guard("aclrtStreamQuery", || {
        non_null(status, "status")?;
        let stream = context::any_stream(sim()?, stream)?;
        stream.check_not_captured("querying it")?;
        let done = stream.query()?;
        let value = if done {
            ACL_STREAM_STATUS_COMPLETE
        } else {
            ACL_STREAM_STATUS_NOT_READY
        };
        write_out(status, "status", value)
    })
}

/// Makes later work on `stream` wait for the work captured by the event's latest record (an
/// Ex event never recorded imposes no wait; a legacy event never recorded, or reset since its
/// last record, holds the stream until its next record completes). Event of another device → 107003; event without
/// ACL_EVENT_SYNC → 207000. After aclrtSetOpWaitTimeout(n > 0) the wait fails the stream's
/// task with ACL_ERROR_RT_WAIT_TIMEOUT if the record is still pending n seconds later.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    guard("aclrtStreamWaitEvent", || {
        wait_event(stream, event, crate::op_timeout::wait_timeout())
    })
}

/// Queues a wait for the event's latest record, which fails with ACL_ERROR_RT_WAIT_TIMEOUT if
/// the record is still pending `timeout` after the wait began.
pub(super) fn wait_event(
    stream: aclrtStream,
    event: aclrtEvent,
    timeout: Option<std::time::Duration>,
) -> Res<()> {
    let (event, stream) = super::event::stream_waiting_for(stream, event)?;
    wait_on(event, &stream, timeout)
}

/// [`wait_event`]'s work, once the stream and event are looked up.
pub(super) fn wait_on(
    event: Arc<Event>,
    stream: &Arc<Stream>,
    timeout: Option<std::time::Duration>,
) -> Res<()> {
    ensure!(
        event.waitable(),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "the event was created without ACL_EVENT_SYNC and cannot be waited on"
    );
    super::event::check_not_captured(&event, stream)?;
    if let Some(model) = stream.bound_model() {
        // A built instance's wait waits, at each execution, for the record current then.
        model.check_accepts(stream)?;
        model.push(stream, crate::model_ri::Step::WaitFor(event));
        return Ok(());
    }
    let record = match event.latest() {
        // A capture takes no wait at a reset's gate (it waits for records it captured, or for
        // none).
        Latest::Never => match event.unrecorded() {
            Unrecorded::Gate(gate) if stream.capture().is_none() => {
                let mut task = Task::new(Op::ResetWait { gate, timeout });
                task.wait_ticket = Some(event.wait_ticket());
                return stream.submit(task);
            }
            Unrecorded::Gate(_) | Unrecorded::Nothing => return Ok(()),
            // A wait racing a record waits for it, whichever came first.
            Unrecorded::Recorded(record) => record,
        },
        Latest::Local(record) => record,
        Latest::Shared(shared, n) => {
            return stream.submit(Task::new(Op::SharedWait { shared, n, timeout }));
        }
    };
    let captured = record.is_captured() || stream.capture().is_some();
    if captured {
        match crate::capture::wait_dependency(stream, &record)? {
            true => {}
            // A record of a capture that is over only runs in its replays.
            false => return Ok(()),
        }
    }
    // A completed record still matters: under a timing model the waiting stream cannot
    // start before the record's timestamp.
    let mut task = Task::new(Op::Wait { record, timeout });
    if !captured {
        // Pending for aclrtQueryEventWaitStatus until the task has left the stream.
        task.wait_ticket = Some(event.wait_ticket());
    }
    stream.submit(task)
}

/// aclrtStreamWaitEventWithFlag(EXTERNAL), once its stream and event are looked up: the
/// capturing stream's instance waits, at each of its executions, for the event's record
/// current then.
pub(super) fn wait_external(event: Arc<Event>, stream: &Arc<Stream>) -> Res<()> {
    let capture = crate::capture::external_capture(stream, &event)?;
    capture
        .model
        .push(stream, crate::model_ri::Step::WaitFor(event));
    Ok(())
}

/// Sets the stream's failure mode: ACL_CONTINUE_ON_FAILURE (default) or ACL_STOP_ON_FAILURE
/// (a failing task stops every stream of the context). Once per stream: a second call →
/// 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamFailureMode(stream: aclrtStream, mode: u64) -> aclError {
    guard("aclrtSetStreamFailureMode", || {
        let mode = super::stream_config::failure_mode(mode)?;
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        stream.choose_failure_mode(mode)
    })
}

/// The stream's id (unique per device).
///
/// # Safety
/// `streamId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetId(stream: aclrtStream, streamId: *mut i32) -> aclError {
    guard("aclrtStreamGetId", || {
        non_null(streamId, "streamId")?;
        write_out(
            streamId,
            "streamId",
            context::any_stream(sim()?, stream)?.id,
        )
    })
}

/// The stream's (clamped) priority.
///
/// # Safety
/// `priority` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetPriority(
    stream: aclrtStream,
    priority: *mut u32,
) -> aclError {
    guard("aclrtStreamGetPriority", || {
        non_null(priority, "priority")?;
        write_out(
            priority,
            "priority",
            context::any_stream(sim()?, stream)?.priority(),
        )
    })
}

/// The stream's creation flags (known bits only).
///
/// # Safety
/// `flags` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetFlags(stream: aclrtStream, flags: *mut u32) -> aclError {
    guard("aclrtStreamGetFlags", || {
        non_null(flags, "flags")?;
        write_out(flags, "flags", context::any_stream(sim()?, stream)?.flags)
    })
}
