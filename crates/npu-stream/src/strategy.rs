//! How a stream learns that an operation finished: the completion strategies.

use std::sync::{Arc, OnceLock};

use npu_core::{AclError, Completion, Error, Result, acl_call};

use crate::event_pool::PooledEvent;
use crate::stream::StreamShared;
use crate::{callback, reactor};

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
pub enum Strategy {
    /// The reactor thread polls `aclrtQueryEventStatus` on the oldest pending event of each
    /// stream and wakes the task. One thread for the whole process; no blocking anywhere.
    #[default]
    EventPoll,
    /// A per-device thread loops `aclrtProcessReport`; each operation is followed by an
    /// `aclrtLaunchCallback` that signals the task.
    CallbackThread,
    /// Each operation occupies a blocking thread waiting in `aclrtSynchronizeEventWithTimeout`
    /// (or `aclrtSynchronizeEvent` on runtimes without it), in Tokio's blocking pool inside a
    /// runtime and on a plain thread outside: what `spawn_blocking` code does.
    BlockingSync,
}

/// What a completer needs to know about an operation besides its completion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpInfo {
    /// The ACL function that submitted it; device-side failures are reported under it.
    pub(crate) api: &'static str,
    /// Whether it is a `Stream::synchronize`, which also reports the stream's earlier failures.
    pub(crate) synchronizes: bool,
}

impl OpInfo {
    /// An ordinary operation, reporting only its own failure.
    pub(crate) fn new(api: &'static str) -> Self {
        OpInfo {
            api,
            synchronizes: false,
        }
    }
}

/// The interface every strategy implements.
///
/// Every strategy completes the operations of one stream in submission order, and passes each
/// result through [`StreamShared::finish`] first, so a `synchronize` sees every failure before
/// it.
pub(crate) trait CompletionStrategy: Send + Sync {
    /// Called under the stream's submission lock, right after the operation was enqueued:
    /// arranges for `completion` to be completed when the device has run it.
    fn watch(&self, stream: &Arc<StreamShared>, op: OpInfo, completion: Completion) -> Result<()>;
}

impl Strategy {
    fn implementation(self) -> &'static dyn CompletionStrategy {
        match self {
            Strategy::EventPoll => reactor::Reactor::get(),
            Strategy::CallbackThread => &callback::CallbackStrategy,
            Strategy::BlockingSync => &BlockingSync,
        }
    }

    pub(crate) fn watch(
        self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completion: Completion,
    ) -> Result<()> {
        self.implementation().watch(stream, op, completion)
    }
}

/// Per-stream state a strategy may need (the callback thread's subscription).
#[derive(Default)]
pub(crate) struct StrategyState {
    /// The callback worker the stream is subscribed to, once it is.
    pub(crate) subscription: OnceLock<Result<Arc<callback::Worker>, Error>>,
}

/// Records a pooled event on the stream, after the operation just submitted.
pub(crate) fn record(stream: &StreamShared) -> Result<PooledEvent> {
    let event = stream.events.take()?;
    let (handle, raw) = (event.handle(), stream.handle);
    // SAFETY: both handles are alive; the stream's context is bound by the submitter.
    unsafe { acl_call!(stream.context.runtime(), aclrtRecordEvent(handle, raw)) }?;
    Ok(event)
}

/// Turns a completed event into the operation's result, and recycles the event.
///
/// `aclrtSynchronizeEvent` returns at once for a completed event and reports a task failure
/// among the work its record captured; the failure is attributed to the operation's own API.
pub(crate) fn settle(event: PooledEvent, api: &'static str) -> Result<()> {
    let synced = {
        let runtime = event.pool().context().runtime();
        let handle = event.handle();
        let code = match runtime.api().aclrtSynchronizeEventWithTimeout {
            // SAFETY: the event is alive (owned by `event`); a timeout of -1 waits as long as
            // needed, which for a completed event is not at all.
            Some(sync) => unsafe { sync(handle, -1) },
            // SAFETY: as above.
            None => unsafe { (runtime.api().aclrtSynchronizeEvent)(handle) },
        };
        runtime.check("aclrtSynchronizeEvent", code)
    };
    synced.map_err(|err| fail(event, err, api))
}

/// The error of an operation that failed on the device: its event, which captured the failure,
/// is not recycled, and the error is reported under the operation's API.
pub(crate) fn fail(event: PooledEvent, err: Error, api: &'static str) -> Error {
    event.discard();
    attribute(err, api)
}

/// Reports a device-side failure under the API of the operation it belongs to.
fn attribute(err: Error, api: &'static str) -> Error {
    match err {
        Error::Acl(AclError { code, message, .. }) => Error::Acl(AclError { api, code, message }),
        other => other,
    }
}

/// One blocking wait per operation.
struct BlockingSync;

impl CompletionStrategy for BlockingSync {
    fn watch(&self, stream: &Arc<StreamShared>, op: OpInfo, completion: Completion) -> Result<()> {
        let event = record(stream)?;
        // Waits run on threads of their own, so they finish in any order; each one completes
        // only after the operation submitted before it, as the other strategies do.
        let previous = stream.replace_tail(&completion);
        let stream = stream.clone();
        let wait = move || {
            let result = settle(event, op.api);
            if let Some(previous) = previous {
                let _ = previous.wait_blocking();
            }
            completion.complete(stream.finish(op, result));
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(wait);
                Ok(())
            }
            Err(_) => std::thread::Builder::new()
                .name("npu-sync".into())
                .spawn(wait)
                .map(drop)
                .map_err(|e| Error::invalid("Strategy::BlockingSync", "thread", e.to_string())),
        }
    }
}
