//! Streams: creation, the submission path every operation shares, and teardown.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use npu_core::contain::Rank;
use npu_core::ffi;
use npu_core::{Completer, Completion, Context, Error, Result, acl_call, acl_call_opt};
use npu_mem::PinnedPool;

use crate::callback;
use crate::event_pool::EventPool;
use crate::op::Op;
use crate::reactor::{Pace, Pending};
use crate::sentinel;
use crate::strategy::{self, OpInfo, Strategy, StrategyState};

mod abort;
mod builder;
pub(crate) mod drains;
mod failure;

use abort::Aborting;
pub use builder::StreamBuilder;
pub use failure::FailureMode;

/// An ACL stream: a FIFO queue of device work that runs concurrently with other streams.
///
/// Every operation on a stream is submitted on the calling thread (with the stream's context
/// bound there), followed by an event record, and returns an [`Op`] future that resolves when
/// the device has finished it. Operations take ownership of the buffers they touch and give
/// them back on completion.
///
/// `Stream` is `Send + Sync` and cheap to clone; clones submit to the same ACL stream. The ACL
/// stream is destroyed once the last clone is dropped and every operation npu-rs watched on it
/// has completed: on the dropping thread if none is in flight by then, otherwise later, on
/// npu-rs's reaper thread. Either way dropping never waits for the device. A last clone
/// dropped while npu-rs's threads still hold the stream counts as a teardown of its library
/// until the stream is released (`npu_core::wait_for_teardowns` waits for it).
///
/// Equality and hashing are by identity, as [`same`](Stream::same): clones are equal, two
/// streams created apart are not, whatever their settings. A stream in a `HashMap` keeps
/// itself alive, so its identity is not reused while it is a key.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::Stream;
///
/// # tokio_test::block_on(async {
/// let device = Device::open(0)?;
/// let stream = Stream::new(device.primary_context())?;
/// stream.synchronize().await?;
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct Stream {
    pub(crate) shared: Arc<StreamShared>,
}

impl Clone for Stream {
    fn clone(&self) -> Stream {
        // A clone is made from a live handle, so the count never comes back from 0.
        self.shared.users.fetch_add(1, Ordering::Relaxed);
        Stream {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Stream {
    /// The program's last handle of the stream going while npu-rs's threads still hold it
    /// (its operations' entries, a probe, a sentinel job, the reactor's list, ...): from here
    /// until the stream is released, it counts as a teardown of its library, so that a wait for
    /// the teardowns made after the program dropped it waits for whichever of those threads
    /// lets go of it last, wherever and whenever it does (`StreamShared::let_go`).
    ///
    /// Counted whether or not another reference is left: one found gone here could come back
    /// (a device abort's watch upgrades a weak one), and a count nobody needed ends with this
    /// handle's own reference, inline. Not counted once npu-rs gave the stream up
    /// (`StreamShared::leak`): it is never released, and would count for good.
    fn drop(&mut self) {
        if self.shared.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            let counted = npu_core::reaper::counted(
                crate::SEAL,
                self.shared.context.runtime().library_id(crate::SEAL),
            );
            let mut let_go = self.shared.let_go();
            if !let_go.leaked {
                let_go.counted = Some(counted);
            }
        }
    }
}

/// What the stream, the reactor and the completion strategies share.
pub(crate) struct StreamShared {
    pub(crate) context: Context,
    pub(crate) handle: ffi::aclrtStream,
    pub(crate) id: u64,
    /// Held from the ACL call until the completion is registered, so the order of pending
    /// completions is the order the device runs them in. Holds the aborts in progress (see
    /// [`Stream::abort`]).
    submit: Mutex<Aborting>,
    /// Completions awaiting the reactor, oldest first (event-polling strategy).
    pub(crate) queue: Mutex<Queue>,
    pub(crate) events: Arc<EventPool>,
    /// The context's staging pool, taken on the first upload or download.
    pub(crate) staging: OnceLock<Arc<PinnedPool>>,
    pub(crate) strategy: Strategy,
    pub(crate) strategy_state: StrategyState,
    /// The first device-side failure since the last `synchronize` completed (see
    /// [`failure::Failure`]).
    failure: Mutex<Option<failure::Failure>>,
    /// The most recently watched operation, for strategies that must complete in order on
    /// their own (`BlockingSync`).
    tail: Mutex<Option<Completion>>,
    /// How many operations were handed to the strategy (`OpInfo::seq` of the latest).
    pub(crate) watched: AtomicU64,
    /// The `seq` of the last operation an abort discarded (0: none); see [`Stream::abort`].
    pub(crate) aborted_through: AtomicU64,
    /// How many aborts have marked the work they discard: a failure recorded before an abort
    /// marked is of work that finished before the abort began (see [`failure::Failure`]).
    pub(crate) aborts_marked: AtomicU64,
    /// The `seq` of the last operation an abort of this stream may discard: set when its
    /// runtime call is about to begin, before the runtime can report anything discarded
    /// (`aborted_through` follows once the runtime has confirmed the discard; the last abort
    /// under way that fails brings it back down to `aborted_through`, or to the PRE mark of
    /// a device task abort no POST has confirmed, if higher). A failure with
    /// `ACL_ERROR_RT_STREAM_ABORT` is this stream's discarded work only up to here; past it,
    /// or on a stream never aborted, it is a wait that ran and found its record dropped by
    /// another stream's abort.
    pub(crate) aborting_through: AtomicU64,
    /// The work aborts discarded after a device fault had already stopped the stream (`seq`
    /// in `(after, through]`, one range per such abort, from what the aborts before it had
    /// confirmed when it marked its work: two aborts running at once after a stop may overlap,
    /// and an operation takes the oldest range that holds it), and each fault's error: that work
    /// failed with it before the abort began, so its operations report it, not
    /// `Error::Aborted`. Every range is kept (a later abort must not hide an earlier one's
    /// fault from operations a strategy has not failed yet), up to [`FAULTED_ABORTS_KEPT`].
    pub(crate) faulted_at_abort: Mutex<VecDeque<FaultedAtAbort>>,
    /// What the stream's device's latest `aclrtDeviceTaskAbort` (made by someone else than
    /// npu-rs) marked as discarded, from its PRE callback to its POST one.
    device_abort: Mutex<Option<abort::Marked>>,
    /// How many `Stream::stop` calls have returned: an abort whose runtime call began before
    /// one may have run before the stop, so a later abort does not share it.
    stops: AtomicU64,
    /// Set by the runtime's exception callback when a task of this stream failed, for the
    /// reactor to look at the stream at once.
    pub(crate) fault_noticed: Arc<AtomicBool>,
    /// Operations no strategy watches, waiting for the stream to run them (`sentinel::drain`).
    pub(crate) drains: drains::Drains,
    /// Keeps the exception callback telling this stream about its faults.
    _fault_watch: npu_core::FaultWatch,
    /// How many [`Stream`] handles the program holds (npu-rs's own threads hold the shared
    /// state, not a `Stream`).
    users: AtomicUsize,
    /// Counted as a teardown of the stream's library from the program's last handle going
    /// until this is dropped: the last field, so it ends after the stream is destroyed and its
    /// context let go of (a teardown that hands off is counted by then).
    let_go: Mutex<LetGo>,
}

/// The teardown count of a stream the program let go of, and whether npu-rs gave the stream
/// up instead (`StreamShared::leak`).
#[derive(Default)]
pub(crate) struct LetGo {
    counted: Option<npu_core::reaper::Counted>,
    leaked: bool,
}

/// How many faulted aborts a stream remembers. Each range is read only until the strategies
/// have failed its operations, which they do soon after the abort; the bound keeps a stream
/// that is faulted and aborted over and over from growing without end.
pub(crate) const FAULTED_ABORTS_KEPT: usize = 16;

/// What [`StreamShared::faulted_at_abort`] holds.
#[derive(Debug, Clone)]
pub(crate) struct FaultedAtAbort {
    pub(crate) after: u64,
    pub(crate) through: u64,
    pub(crate) error: npu_core::Error,
}

/// A stream's pending completions, whether the reactor is currently watching it, and how long
/// its operations usually take (which the reactor plans its queries from).
#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) in_reactor: bool,
    pub(crate) pace: Pace,
}

// SAFETY: an aclrtStream is an opaque handle ACL lets any thread use; every call binds the
// stream's context first, and submissions are serialised by `submit`.
unsafe impl Send for StreamShared {}
// SAFETY: as above: shared use of the handle is a call ACL lets any thread make, under the
// stream's bound context (the other fields are checked below).
unsafe impl Sync for StreamShared {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too. Each field is bound
// under a name without a leading underscore: one bound as `_name` and left out of the list below
// would draw no unused-variable warning.
const _: fn(&StreamShared) = |fields| {
    let StreamShared {
        context,
        handle: _,
        id,
        submit,
        queue,
        events,
        staging,
        strategy,
        strategy_state,
        failure,
        tail,
        watched,
        aborted_through,
        aborts_marked,
        aborting_through,
        faulted_at_abort,
        device_abort,
        stops,
        fault_noticed,
        drains,
        _fault_watch: fault_watch,
        users,
        let_go,
    } = fields;
    let _: [&(dyn Send + Sync); 22] = [
        context,
        id,
        submit,
        queue,
        events,
        staging,
        strategy,
        strategy_state,
        failure,
        tail,
        watched,
        aborted_through,
        aborts_marked,
        aborting_through,
        faulted_at_abort,
        device_abort,
        stops,
        fault_noticed,
        drains,
        fault_watch,
        users,
        let_go,
    ];
};

/// Where a submission failed: before the device accepted the work, or after.
enum Submission {
    Rejected(Completer, npu_core::Error),
    /// The device may run it, but no strategy watches it: drained (see [`drain`]).
    Drained(Arc<drains::Drain>),
}

/// Makes an operation the device may run, but no strategy watches, a drain of `stream`. Called
/// under the submission lock, so that every operation numbered above the count it reads was
/// submitted after this one, and ends it when it finishes. A stream that a fault of this very
/// operation stopped refuses the event record after it: the error is the operation's. The
/// next submission fences the drained work off ([`Stream::fence`]).
fn drain(
    stream: &StreamShared,
    completer: Completer,
    error: Error,
    api: &'static str,
) -> Submission {
    let error = strategy::attribute(stream, error, api);
    let through = stream.watched.load(Ordering::Acquire);
    stream.drains.unfence(api);
    Submission::Drained(stream.drains.add(through, completer, error))
}

impl Stream {
    /// Creates a stream in `context` with default priority, flags and completion strategy.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let buffer = stream.memset(DeviceBuffer::<u8>::new(&ctx, 8)?, 1).await?;
    /// assert_eq!(buffer.to_vec_blocking()?, [1; 8]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context) -> Result<Stream> {
        Stream::builder(context).build()
    }

    /// Options for creating a stream in `context`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Strategy, Stream};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let polled = Stream::builder(&ctx).build()?; // the same as Stream::new
    /// assert_eq!(polled.strategy(), Strategy::default());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn builder(context: &Context) -> StreamBuilder {
        StreamBuilder::new(context)
    }

    /// The context the stream belongs to.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let device = Device::open(1)?;
    /// let stream = Stream::new(device.primary_context())?;
    /// assert!(stream.context().same(device.primary_context()));
    /// assert_eq!(stream.context().device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.shared.context
    }

    /// The stream's id, as logs, tracing spans, traces and `Debug` show it.
    ///
    /// It is the ACL stream id (`aclrtStreamGetId`, read once when the stream is created),
    /// unique on the stream's device: the simulator's trace names the stream's track by it, and
    /// so does a timeline built from event timestamps on CANN. A runtime without
    /// `aclrtStreamGetId` gets npu-rs's own id, unique in the process.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// assert_ne!(a.id(), b.id(), "unique on the device");
    /// assert_eq!(a.clone().id(), a.id());
    /// assert!(format!("{a:?}").contains(&format!("id: {}", a.id())));
    /// // The id ACL itself reports:
    /// let (rt, mut acl_id) = (ctx.runtime(), 0);
    /// // SAFETY: the stream is alive and `acl_id` is a valid out-pointer.
    /// let code = unsafe { (rt.api().aclrtStreamGetId.unwrap())(a.as_raw(), &mut acl_id) };
    /// rt.check("aclrtStreamGetId", code)?;
    /// assert_eq!(a.id(), acl_id as u64);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The completion strategy this stream uses.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Strategy, Stream};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(Stream::new(&ctx)?.strategy(), Strategy::EventPoll);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn strategy(&self) -> Strategy {
        self.shared.strategy
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// A raw call must not take the stream's work out of plain stream order while npu-rs has
    /// operations on it: capturing the stream (`aclmdlRICaptureBegin`), binding it to a model
    /// instance (`aclmdlRIBindStream`), or giving it a persistent or task-group mode moves
    /// its tasks into something that may run them later, after npu-rs has handed their memory
    /// back, since the stream itself then reports them done. Aborting it
    /// (`aclrtStreamAbort`) is allowed: npu-rs fails the discarded operations with
    /// `Error::Aborted` once it finds the stream idle ([`Stream::abort`] does it at once).
    /// But not while another thread submits to the stream through npu-rs (nor an
    /// `aclrtDeviceTaskAbort` of its device without npu-rs's callback): an abort between an
    /// operation's work and its completion record, which npu-rs queues one after the other,
    /// discards the work and keeps the record, and the operation then succeeds although its
    /// work never ran. Its memory stays safe (the device no longer touches it), its result
    /// does not. [`Stream::abort`] takes the stream's submission lock and has no such window.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let rt = ctx.runtime();
    /// ctx.bind()?;
    /// // SAFETY: the stream is alive (`stream`) and belongs to the bound context.
    /// let code = unsafe { (rt.api().aclrtSynchronizeStream)(stream.as_raw()) };
    /// rt.check("aclrtSynchronizeStream", code)?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtStream {
        self.shared.handle
    }

    /// Chooses what happens to the rest of the context's work after a task fails
    /// (`aclrtSetStreamFailureMode`). CANN allows the choice once per stream: a second call
    /// fails with the runtime's error.
    ///
    /// ```
    /// use npu_core::{AclCode, Device};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{FailureMode, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(1)?.create_context()?;
    /// let stream = Stream::new(&ctx)?;
    /// stream.set_failure_mode(FailureMode::Stop)?;
    /// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap();
    /// let failing = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// let later = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1);
    /// assert_eq!(failing.await.unwrap_err().error.acl_code(), Some(AclCode(507015)));
    /// assert!(later.await.is_err(), "the context stopped: later work fails too");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn set_failure_mode(&self, mode: FailureMode) -> Result<()> {
        self.context().bind()?;
        let (handle, raw) = (self.shared.handle, mode.raw());
        // SAFETY: the stream is alive and belongs to the bound context.
        unsafe {
            acl_call_opt!(
                self.context().runtime(),
                aclrtSetStreamFailureMode(handle, raw)
            )
        }
    }

    /// Whether two handles refer to the same stream.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// assert!(stream.same(&stream.clone()));
    /// assert!(!stream.same(&Stream::new(&ctx)?));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Resolves once all work submitted to the stream before this call has finished, with the
    /// first device-side failure among the operations that completed since the previous
    /// `synchronize` (like `aclrtSynchronizeStream`), or when the stream's work can no longer
    /// complete (device lost, context stopped by `FailureMode::Stop`).
    ///
    /// A failed operation's own future reports its failure, and the next `synchronize`
    /// reports it again, awaited or not (the stream's failure record keeps the first failure
    /// since the previous `synchronize`, as `aclrtSynchronizeStream` does): a pipeline that
    /// handled a batch's fault and synchronises the stream sees it once more there.
    /// `synchronize` is also where the failure of an operation whose future was dropped
    /// surfaces. The error names the failed
    /// operation's ACL function. It is also where the failure of work the device ran without
    /// a completion event of its own surfaces (the device out of events: that operation fails
    /// with the runtime's refusal of its event, and the next submission to the stream records
    /// one after its work first), never on a later operation. Only the first failure since the
    /// previous `synchronize` is reported; later ones are reported by their own operations.
    /// An [`abort`](Stream::abort) keeps it if it is the fault of a task whose operation
    /// was seen to complete before the abort began (it carries a `DeviceFault`; a dropped
    /// operation's fault is kept only if its completion was seen by then, which awaiting a
    /// later operation first makes certain), and clears what the abort discarded or a stop
    /// left undone. A `synchronize` the abort discarded fails with `Error::Aborted` and
    /// leaves it to the next one, unless a device fault had stopped the stream before the
    /// abort: it then fails with that fault, which reports the stream's failures as any
    /// failed `synchronize` does.
    ///
    /// Cancel safety: cancel-safe in that no device work is lost; but a failure it would have
    /// reported is consumed when the synchronisation completes, whether or not the future is
    /// still polled.
    ///
    /// ```
    /// use npu_core::{AclCode, Device};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap(); // the next task fails
    /// drop(stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0)); // nobody awaits the memset ...
    /// let err = stream.synchronize().await.unwrap_err().error; // ... so synchronize reports it
    /// assert_eq!(err.acl_code(), Some(AclCode(507015)));
    /// assert!(err.to_string().starts_with("aclrtMemsetAsync failed"), "{err}");
    /// stream.synchronize().await?; // reported once
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn synchronize(&self) -> Op<()> {
        let op = OpInfo {
            api: "aclrtSynchronizeStream",
            synchronizes: true,
            seq: 0,
        };
        let caller = ("Stream::synchronize", "self");
        self.submit_op((caller, op), 0, None, (), |_, _| {}, |_, _| Ok(()))
    }

    /// Checks that a buffer from `context` can be used on this stream's runtime.
    pub(crate) fn check_runtime(
        &self,
        api: &'static str,
        argument: &'static str,
        context: &Context,
    ) -> Result<()> {
        if !context.runtime().same_library(self.context().runtime()) {
            return Err(Error::invalid(
                api,
                argument,
                "belongs to a different AscendCL runtime than the stream",
            ));
        }
        Ok(())
    }

    /// Checks that what `argument` names (device memory, a notify, a value word, a kernel
    /// function), made in `context`, lives on the stream's device.
    pub(crate) fn check_device(
        &self,
        api: &'static str,
        argument: &'static str,
        context: &Context,
    ) -> Result<()> {
        let (theirs, ours) = (context.device_id(), self.context().device_id());
        if theirs != ours {
            let rule = format!("belongs to device {theirs}, but the stream is on device {ours}");
            return Err(Error::invalid(api, argument, rule));
        }
        Ok(())
    }

    /// The one submission path: record uses, issue `call` under the submission lock, then let the
    /// completion strategy watch it. `caller` is the public method the caller called and the
    /// argument that was the stream, which npu-rs's own refusals name; `api` is the ACL function
    /// the operation submits, which its span, a device failure and an abort name.
    ///
    /// A failure before the device accepted the work resolves the future at once. A failure
    /// after it (recording the event, say) must not release the buffers while the device may
    /// still use them, so the stream is drained first, off this thread.
    pub(crate) fn submit<T: Send + 'static>(
        &self,
        caller: Caller,
        api: &'static str,
        bytes: usize,
        value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        let op = (caller, OpInfo::new(api));
        self.submit_op(op, bytes, None, value, record_uses, call)
    }

    /// [`submit`](Stream::submit) with one more field of the operation's span filled in:
    /// `direction` for copies, `kernel` for launches.
    #[allow(clippy::too_many_arguments)] // `submit`'s, and the field
    pub(crate) fn submit_described<T: Send + 'static>(
        &self,
        caller: Caller,
        api: &'static str,
        bytes: usize,
        field: (&'static str, &str),
        value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        self.submit_op(
            (caller, OpInfo::new(api)),
            bytes,
            Some(field),
            value,
            record_uses,
            call,
        )
    }

    fn submit_op<T: Send + 'static>(
        &self,
        (caller, mut op): (Caller, OpInfo),
        bytes: usize,
        field: Option<(&'static str, &str)>,
        mut value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        // `direction` and `kernel` are filled in here, before the submission lock is taken,
        // `error` when the operation fails.
        //
        // Making the span and recording into it run the subscriber, user code (as entering
        // it does, below): a panic there is contained and the operation goes without its span
        // (or with what was recorded). Unwinding would refuse a valid submission, and from a
        // destructor run by the thread's TLS destructors (a value a user keeps in a
        // `thread_local!`, whose drop submits) it aborts the process: tracing-subscriber's
        // registry panics there once its own per-thread state is gone.
        let mut span = tracing::Span::none();
        let device = self.context().device_id();
        npu_core::contain::contained(crate::SEAL, || {
            span = tracing::debug_span!(
                "npu_op",
                op = op.api,
                stream = self.shared.id,
                device,
                bytes,
                direction = tracing::field::Empty,
                kernel = tracing::field::Empty,
                error = tracing::field::Empty,
            );
            if let Some((name, value)) = field {
                span.record(name, value);
            }
        });
        // SAFETY: this completer is completed only by a completion strategy (once the
        // device is done with the operation), as a drain (once the stream has drained, or an
        // operation submitted after it has finished), or below for work the device never
        // accepted; its deferred actions never block.
        let completer = unsafe { Completer::new() };
        let completion = completer.completion();
        // Recording a use runs the buffers' `Memory::record_use` and the kernel arguments'
        // `KernelArg::record_use`, user code of public (unsafe) traits, which may panic.
        // Unwinding from here would drop the completer uncompleted, and an abandoned
        // completion keeps the memory whose uses it recorded for ever. Nothing has reached the
        // device yet: the operation is refused, its value released, and the panic resumed.
        let recorded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            record_uses(&value, &completion);
        }));
        if let Err(payload) = recorded {
            let rule = "recording a use of it panicked (a Memory or KernelArg implementation)";
            completer.complete(Err(Error::invalid(caller.0, "self", rule)));
            drop((value, completion));
            std::panic::resume_unwind(payload);
        }
        // The submission runs inside the span. Entering and leaving it run the subscriber,
        // which is user code: a panic there is contained, since unwinding from here would
        // abandon the completer (leaking the buffers whose uses it recorded) or, once the
        // device accepted the work, drop the value the operation must keep until it completes
        // (an `Arc` clone, which the caller could then unwrap under the device).
        let mut entered = None;
        if npu_core::contain::contained(crate::SEAL, || entered = Some(span.enter())) {
            // It panicked after the subscriber may have marked the thread as inside the span
            // (a registry records the entry before its layers see it): left again, as the
            // guard that never came to be would have, or the thread's later events and spans
            // would sit inside this one for ever. Leaving a span the thread is not in changes
            // nothing.
            npu_core::contain::contained(crate::SEAL, || {
                span.with_subscriber(|(id, dispatch)| dispatch.exit(id));
            });
        }
        let mut panicked = None;
        let outcome = (|| {
            // In a forked child nothing runs the stream: refused before anything, as the ACL
            // call would be. A synchronisation makes none before recording its event, and on
            // the thread that forked the bind is answered from the parent's record without
            // ACL, so its refused record was taken for work the device may run and drained
            // by a thread that never could: it waited for ever.
            if let Err(err) = npu_core::fork::refuse(crate::SEAL, op.api) {
                return Err(Submission::Rejected(completer, err));
            }
            if let Err(err) = self.context().bind() {
                return Err(Submission::Rejected(completer, err));
            }
            // Held across the ACL calls, which may run a tracing subscriber (the simulator
            // logs each failed call): one that submits to this stream again from there is
            // refused instead of waiting for this thread for ever.
            let Some(order) =
                npu_core::contain::lock_here(crate::SEAL, &self.shared.submit, Rank::Submission)
            else {
                return Err(Submission::Rejected(completer, reentered(caller)));
            };
            if order.refusing > 0 {
                // Not queued behind the abort, which waits for the device's running task:
                // discarded, as the abort would have discarded it.
                return Err(Submission::Rejected(
                    completer,
                    Error::Aborted { api: op.api },
                ));
            }
            // On a stream with drained work, fenced off before this operation's work, so
            // that its own event captures only its own tasks. Without a fence (no event
            // left for it) the operation is not watched by its event either, which would
            // capture the drained tasks' failures: it is drained too, once the device has
            // accepted it.
            let fence = self.shared.drains.fence_due().map(|api| self.fence(api));
            // The call runs user code too: the buffers' `Memory::context`, `addr`, `len` and
            // `MemoryMut::addr_mut`, the kernel arguments' `KernelArg::pack`. Unwinding from
            // here would drop the completer uncompleted, leaking every buffer whose use was
            // recorded above for good. That code runs before the ACL call in every
            // operation, but nothing here can tell for certain whether the runtime accepted
            // the work first, so the operation is handed to the sentinel as one that could
            // not be watched: it fails once the stream has run everything queued so far, or
            // can never run it, and its value is released after that. The panic is resumed
            // once the operation (and with it the value) is in the sentinel's hands.
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                call(&mut value, self.shared.handle)
            }));
            match called {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(Submission::Rejected(completer, err)),
                Err(payload) => {
                    panicked = Some(payload);
                    let rule = "a Memory or KernelArg implementation panicked while it was \
                                submitted";
                    let error = Error::invalid(caller.0, "self", rule);
                    return Err(drain(&self.shared, completer, error, op.api));
                }
            }
            if let Some(Err(error)) = fence {
                return Err(drain(&self.shared, completer, error, op.api));
            }
            op.seq = self.shared.watched.fetch_add(1, Ordering::AcqRel) + 1;
            self.shared
                .strategy
                .watch(&self.shared, op, completer)
                .map_err(|unwatched| {
                    drain(&self.shared, unwatched.completer, unwatched.error, op.api)
                })
        })();
        npu_core::contain::contained(crate::SEAL, move || drop(entered));
        match outcome {
            Ok(()) => {}
            // The device never saw the work: nothing to wait for. A context that a fault
            // stopped refuses it with the fault's code, and the error says which fault.
            Err(Submission::Rejected(completer, err)) => {
                completer.complete(Err(strategy::with_stopping_fault(&self.shared, err)));
            }
            // The device may run it: it completes once the stream has drained, or an operation
            // submitted after it has finished.
            Err(Submission::Drained(drained)) => sentinel::drain(self.shared.clone(), drained),
        }
        let op = Op::new(completion, value, span);
        if let Some(payload) = panicked {
            // Dropping the operation defers its value until the drain completes it.
            drop(op);
            std::panic::resume_unwind(payload);
        }
        op
    }
}

impl Stream {
    /// Records a completion event of no operation's own after the work drained on this stream
    /// since the last fence, so that the next operation's event captures only its own tasks.
    /// Watched like an operation (numbered, completed in order by the stream's strategy), it
    /// ends the drains before it when it completes, and a failure it captured goes to the
    /// stream's failure record under `api`, the first drained operation's ACL function, for
    /// the next `synchronize` to report. Called under the submission lock; `Err` if no
    /// strategy watches it (its event could not be recorded): the drained work stays
    /// unfenced.
    fn fence(&self, api: &'static str) -> Result<()> {
        // SAFETY: no memory stands behind the fence's completion and nothing is deferred on
        // it; the strategy completes it once the device has passed its record, or it is
        // completed below, unwatched.
        let completer = unsafe { Completer::new() };
        let op = OpInfo {
            api,
            synchronizes: false,
            seq: self.shared.watched.fetch_add(1, Ordering::AcqRel) + 1,
        };
        match self.shared.strategy.watch(&self.shared, op, completer) {
            Ok(()) => {
                self.shared.drains.fenced();
                Ok(())
            }
            Err(unwatched) => {
                unwatched.completer.complete(Err(unwatched.error.clone()));
                Err(unwatched.error)
            }
        }
    }
}

/// The public method a submission was made by, and the argument the caller passed the stream
/// as (`self` for `Stream`'s own methods): npu-rs's refusals of the submission name them.
pub(crate) type Caller = (&'static str, &'static str);

/// The error of a submission or an abort made on a thread that is submitting to the same
/// stream already (a tracing subscriber, called from inside that submission's ACL call), or
/// that would wait for another thread's submission while holding a lock that ranks as high
/// (see `npu_core::contain::lock_here`).
fn reentered((api, stream): Caller) -> Error {
    Error::invalid(
        api,
        stream,
        "is being submitted to by this thread already, or by another while this thread holds \
         a lock npu-rs takes after the stream's: called back from inside an ACL call (by a \
         tracing subscriber?)",
    )
}

impl StreamShared {
    fn let_go(&self) -> std::sync::MutexGuard<'_, LetGo> {
        self.let_go.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `stream` up for good, where the device may still run its work and no thread is
    /// left to see it end (a predecessor abandoned, a thread that could not start): never
    /// released, so its teardown count (the program's last handle gone, or going later) ends
    /// now instead of counting for the rest of the process.
    pub(crate) fn leak(stream: Arc<StreamShared>) {
        let counted = {
            let mut let_go = stream.let_go();
            let_go.leaked = true;
            let_go.counted.take()
        };
        drop(counted);
        std::mem::forget(stream);
    }

    /// Makes `completion` the most recently watched operation; returns the previous one.
    pub(crate) fn replace_tail(&self, completion: &Completion) -> Option<Completion> {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.replace(completion.clone())
    }
}

impl Drop for StreamShared {
    fn drop(&mut self) {
        if npu_core::forked() {
            // The stream is the parent's: in a forked child ACL is not ours to call (on the
            // thread that forked, the bind below would be answered from the parent's record,
            // and the stream queried through ACL).
            return;
        }
        callback::release(self);
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // Every operation npu-rs watched has completed (pending entries keep the stream
            // alive) or was failed because the stream can never run it (stopped, stopped by a
            // fault, device lost). CANN's aclrtDestroyStream waits for unfinished tasks, which
            // on such a stream never finish: this may run on the reaper (or on the thread that
            // dropped the last handle), which must not wait for them, so those are forced.
            if crate::sentinel::stream_unfinished(self)
                && runtime.api().aclrtDestroyStreamForce.is_some()
            {
                // SAFETY: the stream is ours, its context is bound, and nothing npu-rs
                // submitted to it can still run.
                unsafe { acl_call_opt!(runtime, aclrtDestroyStreamForce(self.handle)) }
            } else {
                // SAFETY: the stream is ours and idle (or the runtime has no forced form),
                // and its context is bound.
                unsafe { acl_call!(runtime, aclrtDestroyStream(self.handle)) }
            }
        });
        if let Err(err) = result {
            npu_core::log!(warn, %err, stream = self.id, "destroying a stream failed");
        }
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.same(other)
    }
}

impl Eq for Stream {}

impl std::hash::Hash for Stream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.shared), state)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.shared.id)
            .field("device", &self.context().device_id())
            .field("strategy", &self.shared.strategy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::test_support::sim_stream;

    /// The program's last handle of a stream going while a thread of npu-rs's still holds the
    /// stream (a reference such as a callback worker's probe, a sentinel job or the reactor's
    /// list keeps) counts as a teardown of its library until that reference goes and the
    /// stream is released: a wait for the teardowns made meanwhile runs out; once the
    /// reference is let go of (handed to the reaper, as those threads do), the stream is
    /// released and the count with it. A handle the program still holds counts nothing. The
    /// count is read on the stream itself: the process's count is shared with the other
    /// tests, whose streams may be counted too. The break (nothing counted): the wait
    /// returned at once with the stream still alive.
    #[test]
    fn a_reference_of_npu_rs_outliving_the_last_handle_is_waited_for() {
        let stream = sim_stream(0);
        let internal = stream.shared.clone();
        let kept = stream.clone();
        drop(stream);
        assert!(
            internal.let_go().counted.is_none(),
            "the program still holds a handle"
        );
        drop(kept);
        assert!(
            internal.let_go().counted.is_some(),
            "counted once the last handle went"
        );
        let ran_out = npu_core::wait_for_teardowns(Duration::ZERO);
        assert!(
            matches!(ran_out, Err(Error::TeardownsRunning { running: 1.., .. })),
            "{ran_out:?}"
        );
        let released = Arc::downgrade(&internal);
        strategy::release_stream(internal);
        npu_core::reaper::flush();
        assert!(
            released.upgrade().is_none(),
            "released, and its count ended"
        );
    }

    /// A stream npu-rs gives up (leaks: a predecessor abandoned, a thread that could not
    /// start) is never released, so it must not count as a teardown for the rest of the
    /// process, whether the program's last handle went before it was given up or after. The
    /// break (`mem::forget` of the reference, as before): the count stayed, and every later
    /// wait for the teardowns ran out.
    #[test]
    fn a_stream_given_up_counts_no_teardown_whenever_its_last_handle_goes() {
        for handle_first in [true, false] {
            let stream = sim_stream(0);
            let given_up = stream.shared.clone();
            // Kept to look at the state after the reference is given up (a leak of it too).
            let look = Arc::downgrade(&given_up);
            let mut stream = Some(stream);
            if handle_first {
                drop(stream.take());
                assert!(look.upgrade().unwrap().let_go().counted.is_some());
            }
            StreamShared::leak(given_up);
            drop(stream);
            let state = look.upgrade().expect("given up, never released");
            let let_go = state.let_go();
            assert!(
                let_go.leaked && let_go.counted.is_none(),
                "handle first: {handle_first}"
            );
        }
    }
}
