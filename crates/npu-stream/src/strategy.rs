//! How a stream learns that an operation finished: the completion strategies.

use std::sync::{Arc, OnceLock};

use npu_core::{Completer, Completion, Error, Result, acl_call, ffi};

use crate::event_pool::PooledEvent;
use crate::stream::StreamShared;
use crate::{blocking, callback, reactor};

/// How a stream detects completions. Every strategy records a pooled event after each
/// operation; they differ in who notices that it completed.
///
/// The choice is per stream, at run time, so the three can be compared on the same work (see
/// the benches).
///
/// ```
/// use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::{Strategy, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// for strategy in [Strategy::EventPoll, Strategy::CallbackThread, Strategy::BlockingSync] {
///     let stream = Stream::builder(&ctx).strategy(strategy).build()?;
///     let buffer = stream.memset(DeviceBuffer::<u8>::new(&ctx, 16)?, 3).await?;
///     assert_eq!(buffer.to_vec_blocking()?, [3; 16]);
/// }
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// The reactor thread polls `aclrtQueryEventStatus` on the oldest pending event of each
    /// stream and wakes the task. One thread for the whole process; no blocking anywhere.
    #[default]
    EventPoll,
    /// A per-device thread loops `aclrtProcessReport`; each operation is followed by an
    /// `aclrtLaunchCallback` that signals the task.
    CallbackThread,
    /// Each operation occupies a blocking thread waiting in `aclrtSynchronizeEventWithTimeout`,
    /// in Tokio's blocking pool inside a runtime and on a plain thread outside: what
    /// `spawn_blocking` code does. A wait still running after 100 ms, or on a runtime without
    /// the timed wait (which could only wait as long as the device takes), is handed to the
    /// reactor, so the thread always comes back in bounded time; so is a wait that Tokio's
    /// blocking pool, full, has not started 100 ms after it was queued, so that completion
    /// never depends on the pool having a free thread.
    BlockingSync,
}

/// What a completer needs to know about an operation besides its completion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpInfo {
    /// The ACL function that submitted it; device-side failures are reported under it.
    pub(crate) api: &'static str,
    /// Whether it is a `Stream::synchronize`, which also reports the stream's earlier failures.
    pub(crate) synchronizes: bool,
    /// Its place among the stream's watched operations (1 for the first), set at submission.
    pub(crate) seq: u64,
}

impl OpInfo {
    /// An ordinary operation, reporting only its own failure.
    pub(crate) fn new(api: &'static str) -> Self {
        OpInfo {
            api,
            synchronizes: false,
            seq: 0,
        }
    }
}

/// An operation the device accepted but no strategy could take on (recording its event
/// failed, say): handed back to the submitter with the error, to be drained.
pub(crate) struct Unwatched {
    pub(crate) completer: Completer,
    pub(crate) error: Error,
}

/// The interface every strategy implements.
///
/// Every strategy completes the operations of one stream in submission order, and passes each
/// result through [`StreamShared::finish`] first, so a `synchronize` sees every failure before
/// it. None of them completes an operation before the device is done with it: its event
/// completed, or the runtime confirmed that the stream's work can never run again.
pub(crate) trait CompletionStrategy: Send + Sync {
    /// Called under the stream's submission lock, right after the operation was enqueued:
    /// arranges for `completer` to be completed when the device has run it.
    fn watch(
        &self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completer: Completer,
    ) -> std::result::Result<(), Unwatched>;
}

impl Strategy {
    /// `None` for `EventPoll` in a forked child whose parent had not started the reactor
    /// (see `npu_core::fork::start_once`).
    fn implementation(self) -> Option<&'static dyn CompletionStrategy> {
        match self {
            Strategy::EventPoll => reactor::Reactor::get().map(|r| r as _),
            Strategy::CallbackThread => Some(&callback::CallbackStrategy),
            Strategy::BlockingSync => Some(&blocking::BlockingSync),
        }
    }

    /// An abort discarded work on a stream of this strategy (its `aborted_through` has moved):
    /// tells whoever completes the stream's operations to fail the discarded ones now, before
    /// any submitted after the abort. Called under the stream's submission lock: only wakes or
    /// counts, never blocks or starts a thread.
    pub(crate) fn discarded(self) {
        match self {
            // Its reactor, if it was ever started, looks at the stream's aborted work at once.
            Strategy::EventPoll => reactor::Reactor::nudge_if_running(),
            // The callbacks of discarded operations never run: the worker fails them before
            // it settles a callback that ran since.
            Strategy::CallbackThread => callback::note_abort(),
            // Each waiter's own wait returns, with the abort's code, as the device drops
            // its work.
            Strategy::BlockingSync => {}
        }
    }

    pub(crate) fn watch(
        self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completer: Completer,
    ) -> std::result::Result<(), Unwatched> {
        match self.implementation() {
            Some(strategy) => strategy.watch(stream, op, completer),
            // A forked child refuses a submission before making it, so this is for the
            // record: the thread that would watch the operation cannot start there.
            None => Err(Unwatched {
                completer,
                error: Error::Forked {
                    api: "Strategy::EventPoll",
                },
            }),
        }
    }
}

/// Per-stream state a strategy may need (the callback thread's subscription).
#[derive(Default)]
pub(crate) struct StrategyState {
    /// The callback worker the stream is subscribed to, once it is.
    pub(crate) subscription: OnceLock<Result<Arc<callback::Worker>, Error>>,
}

/// Records a pooled event on the stream, after the operation just submitted. If that fails,
/// the operation's completer goes back to the submitter, which drains the stream instead.
pub(crate) fn record(
    stream: &StreamShared,
    completer: Completer,
) -> std::result::Result<(PooledEvent, Completer), Unwatched> {
    let recorded = stream.events.take().and_then(|event| {
        let (handle, raw) = (event.handle(), stream.handle);
        // SAFETY: both handles are alive (the pool's event, the stream `stream` holds). The
        // submitter bound the stream's context; a launch then bound its function's context,
        // which a successful launch shows to be the stream's (ACL refuses a stream of another
        // context with 107003), so the stream's context is the current one.
        unsafe { acl_call!(stream.context.runtime(), aclrtRecordEvent(handle, raw)) }?;
        Ok(event)
    });
    match recorded {
        Ok(event) => Ok((event, completer)),
        Err(error) => Err(Unwatched { completer, error }),
    }
}

/// Waits up to `timeout_ms` (-1: as long as needed) for the event; `None` if it timed out.
/// Runtimes without the timed wait wait as long as needed.
///
/// The event's context is made current first: the wait runs on whatever thread the strategy
/// chose (a blocking-pool thread, the sentinel, the reactor), and although the reference
/// documents no context requirement for it, a wait refused for the thread's state would say
/// nothing about the operation. (Binding costs a thread-local check unless the thread's last
/// context was another one.)
pub(crate) fn wait_event(event: &PooledEvent, timeout_ms: i32) -> Option<Result<()>> {
    let context = event.pool().context();
    if let Err(err) = context.bind() {
        return Some(Err(err));
    }
    let runtime = context.runtime();
    let handle = event.handle();
    let code = match runtime.api().aclrtSynchronizeEventWithTimeout {
        // SAFETY: the event is alive (owned by `event`).
        Some(sync) => unsafe { sync(handle, timeout_ms) },
        // SAFETY: as above.
        None => unsafe { (runtime.api().aclrtSynchronizeEvent)(handle) },
    };
    let checked = runtime.check("aclrtSynchronizeEvent", code);
    (code != ffi::ACL_ERROR_RT_EVENT_SYNC_TIMEOUT).then_some(checked)
}

/// Reports a device-side failure under the API of the operation it belongs to, with its
/// fault ([`with_fault`]).
pub(crate) fn attribute(stream: &StreamShared, err: Error, api: &'static str) -> Error {
    match with_fault(stream, err) {
        Error::Acl(mut acl) => {
            acl.api = api;
            Error::Acl(acl)
        }
        other => other,
    }
}

/// Attaches to an ACL error of `stream` the fault the runtime's exception callback recorded
/// for it. The callback runs before the runtime lets a failure be seen (by a synchronisation,
/// a query, or a submission refused because the failure stopped the context), so it has run
/// by the time npu-rs learns of the failure, whenever the runtime reports one at all.
pub(crate) fn with_fault(stream: &StreamShared, err: Error) -> Error {
    attach_fault(stream, err, false)
}

/// [`with_fault`] for a submission the runtime refused: a context that a fault on another of
/// its streams stopped refuses work on this one with that fault's code, so without a fault of
/// this stream's own the error carries the device's latest one of that code.
pub(crate) fn with_stopping_fault(stream: &StreamShared, err: Error) -> Error {
    attach_fault(stream, err, true)
}

fn attach_fault(stream: &StreamShared, err: Error, refused: bool) -> Error {
    match err {
        Error::Acl(acl) if acl.fault.is_none() => {
            let device = stream.context.device_id();
            let runtime = stream.context.runtime();
            // SAFETY: the stream is this npu-stream stream, whose faults are its own to claim.
            let fault = unsafe { runtime.claim_fault(device, stream.id, acl.code) }.or_else(|| {
                refused
                    .then(|| runtime.latest_fault(crate::SEAL, device, acl.code))
                    .flatten()
            });
            Error::Acl(match fault {
                Some(fault) => acl.with_fault(fault),
                None => acl,
            })
        }
        other => other,
    }
}

/// Completes an operation of `stream` with `result`, after `after` (the operation submitted
/// before it, for strategies that may finish out of order) has completed.
///
/// Never blocks: if `after` is still pending, the completion is chained behind it and runs on
/// its completer's thread.
pub(crate) fn complete_after(
    stream: &Arc<StreamShared>,
    op: OpInfo,
    completer: Completer,
    result: Result<()>,
    after: Option<Completion>,
) {
    complete_in_order(stream, op, completer, result, after, false);
}

/// Fails an operation of `stream` whose event reported `err` (or whose stream can no longer
/// run it), after `after` has completed, as [`complete_after`] does. The error is reported
/// under the operation's API with the fault the runtime recorded for it ([`attribute`]),
/// claimed only once the operation completes: `Runtime::claim_fault` hands out the stream's
/// oldest unclaimed fault of the code, so the operations of a stream must claim theirs in
/// submission order. Under `BlockingSync` the waits of two failed operations end on threads
/// of their own, in either order; claimed as each wait ended, the later one took the earlier
/// one's fault (the operation after a drain fence, the fault of the drained task).
pub(crate) fn fail_after(
    stream: &Arc<StreamShared>,
    op: OpInfo,
    completer: Completer,
    err: Error,
    after: Option<Completion>,
) {
    complete_in_order(stream, op, completer, Err(err), after, true);
}

fn complete_in_order(
    stream: &Arc<StreamShared>,
    op: OpInfo,
    completer: Completer,
    result: Result<()>,
    after: Option<Completion>,
    claim: bool,
) {
    // Discarded by an abort: say so, whatever the device reported for the dropped task. The
    // runtime's own code for a discard counts only for work an abort of this stream may have
    // discarded: a wait of this stream that ran and found its record dropped by another
    // stream's abort fails with the same code, and was not discarded (the work after it ran).
    // A fault claimed for the operation says its task ran and failed (its event completed
    // with the fault, as in `FailureMode::Continue`): it is reported, abort or not. Whether an
    // abort covers it is decided now, when the device reported the result.
    let discarded = result.as_ref().is_err_and(|err| {
        let discarded = err.acl_code() == Some(npu_core::AclCode::STREAM_ABORT)
            && stream.abort_may_have_discarded(op);
        discarded || stream.aborted(op)
    });
    let ended = move |stream: &StreamShared| {
        result.map_err(|err| {
            let err = if claim {
                attribute(stream, err, op.api)
            } else {
                err
            };
            let ran_and_faulted = matches!(&err, Error::Acl(acl) if acl.fault.is_some());
            match discarded && !ran_and_faulted {
                true => stream.aborted_error(op),
                false => err,
            }
        })
    };
    match after {
        Some(previous) if !previous.is_complete() => {
            // An abandoned predecessor drops this unrun: the completer goes abandoned too,
            // and the stream is leaked, since the device may still run its work.
            let carried = Carried::new((completer, stream.clone()), |(completer, stream)| {
                drop(completer);
                StreamShared::leak(stream);
            });
            let finish = move || {
                let (completer, stream) = carried.take();
                let result = ended(&stream);
                completer.complete(stream.finish(op, result));
                release_stream(stream);
            };
            // SAFETY: claiming a fault (one short lock of the runtime's fault table),
            // completing and handing the stream to the reaper do not block or call ACL.
            unsafe { previous.on_complete(finish) }
        }
        _ => completer.complete(stream.finish(op, ended(stream))),
    }
}

/// Drops a reference to a stream from a thread that must not block: the last reference
/// destroys the ACL stream, which happens on the reaper thread.
pub(crate) fn release_stream(stream: Arc<StreamShared>) {
    if let Some(last) = Arc::into_inner(stream) {
        // SAFETY: the last reference goes only once nothing npu-rs queued on the stream can
        // still run, and the drop force-destroys a stream the runtime does not report done
        // (docs/cancellation.md, rule 5): destroying it does not wait for the device.
        unsafe { npu_core::reaper::release_later(move || drop(last)) };
    }
}

/// What a notification chained on another operation's completion carries: if that operation
/// is abandoned, its notifications are dropped unrun, and `give_up` decides what becomes of
/// the value (what the device may still use must be leaked, not freed).
pub(crate) struct Carried<T> {
    value: Option<T>,
    give_up: fn(T),
}

impl<T> Carried<T> {
    pub(crate) fn new(value: T, give_up: fn(T)) -> Self {
        Carried {
            value: Some(value),
            give_up,
        }
    }

    /// The value, for the notification that runs.
    pub(crate) fn take(mut self) -> T {
        self.value
            .take()
            .expect("a carried value is taken once, by the notification that owns it")
    }
}

impl<T> Drop for Carried<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            (self.give_up)(value);
        }
    }
}
