//! Streams: creation, the submission path every operation shares, and teardown.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use npu_core::contain::Rank;
use npu_core::ffi;
use npu_core::{Completer, Completion, Context, Error, Result, acl_call, acl_call_opt};
use npu_mem::PinnedPool;

use crate::callback;
use crate::event_pool::EventPool;
use crate::op::Op;
use crate::paused_clock::KeptWait;
use crate::reactor::{Pace, Pending};
use crate::sentinel;
use crate::strategy::{self, OpInfo, Strategy, StrategyState, Unwatched};

/// An ACL stream: a FIFO queue of device work that runs concurrently with other streams.
///
/// Every operation on a stream is submitted on the calling thread (with the stream's context
/// bound there), followed by an event record, and returns an [`Op`] future that resolves when
/// the device has finished it. Operations take ownership of the buffers they touch and give
/// them back on completion.
///
/// `Stream` is `Send + Sync` and cheap to clone; clones submit to the same ACL stream. The ACL
/// stream is destroyed once the last clone is dropped and the reactor has seen its last
/// operation complete; that happens off the dropping thread, so dropping never blocks.
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
#[derive(Clone)]
pub struct Stream {
    pub(crate) shared: Arc<StreamShared>,
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
    /// The first device-side failure since the last `synchronize` completed.
    failure: Mutex<Option<npu_core::Error>>,
    /// The most recently watched operation, for strategies that must complete in order on
    /// their own (`BlockingSync`).
    tail: Mutex<Option<Completion>>,
    /// How many operations were handed to the strategy (`OpInfo::seq` of the latest).
    pub(crate) watched: AtomicU64,
    /// The `seq` of the last operation an abort discarded (0: none); see [`Stream::abort`].
    pub(crate) aborted_through: AtomicU64,
    /// How many `Stream::stop` calls have returned: an abort whose runtime call began before
    /// one may have run before the stop, so a later abort does not share it.
    stops: AtomicU64,
    /// Set by the runtime's exception callback when a task of this stream failed, for the
    /// reactor to look at the stream at once.
    pub(crate) fault_noticed: Arc<AtomicBool>,
    /// Keeps the exception callback telling this stream about its faults.
    _fault_watch: npu_core::FaultWatch,
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
// SAFETY: as above; all mutable state is behind mutexes.
unsafe impl Sync for StreamShared {}

/// Where a submission failed: before the device accepted the work, or after.
enum Submission {
    Rejected(Completer, npu_core::Error),
    Unwatched(Unwatched),
}

/// Creation options for a [`Stream`].
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{Strategy, Stream};
///
/// let device = Device::open(0)?;
/// let urgent = device.stream_priority_range()?.greatest;
/// let stream = Stream::builder(device.primary_context())
///     .priority(urgent as u32)
///     .strategy(Strategy::CallbackThread)
///     .build()?;
/// assert_eq!(stream.strategy(), Strategy::CallbackThread);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StreamBuilder {
    context: Context,
    priority: u32,
    flags: u32,
    strategy: Strategy,
}

impl StreamBuilder {
    /// Stream priority: 0 is the most urgent; see `Device::stream_priority_range`. ACL clamps
    /// out-of-range values.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::builder(&ctx).priority(3).build()?;
    /// let (rt, mut priority) = (ctx.runtime(), 0);
    /// let get_priority = rt.api().aclrtStreamGetPriority.expect("an optional ACL function");
    /// // SAFETY: the stream is alive and `priority` is a valid out-pointer.
    /// let code = unsafe { get_priority(stream.as_raw(), &mut priority) };
    /// rt.check("aclrtStreamGetPriority", code)?;
    /// assert_eq!(priority, 3);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = priority;
        self
    }

    /// Raw `ACL_STREAM_*` creation flags (OR-ed). Flags that make a stream the host cannot
    /// watch (`ACL_STREAM_PERSISTENT`, `ACL_STREAM_CPU_SCHEDULE`, `ACL_STREAM_DEVICE_USE_ONLY`)
    /// are refused by [`build`](StreamBuilder::build).
    ///
    /// ```
    /// use npu_core::{Device, ffi};
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::builder(&ctx).flags(ffi::ACL_STREAM_FAST_LAUNCH).build()?;
    /// let (rt, mut flags) = (ctx.runtime(), 0);
    /// let get_flags = rt.api().aclrtStreamGetFlags.expect("an optional ACL function");
    /// // SAFETY: the stream is alive and `flags` is a valid out-pointer.
    /// rt.check("aclrtStreamGetFlags", unsafe { get_flags(stream.as_raw(), &mut flags) })?;
    /// assert_eq!(flags & ffi::ACL_STREAM_FAST_LAUNCH, ffi::ACL_STREAM_FAST_LAUNCH);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }

    /// How completions are detected (event polling by default).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Strategy, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::builder(&ctx).strategy(Strategy::BlockingSync).build()?;
    /// stream.synchronize().await?; // waited for on a blocking thread
    /// assert_eq!(stream.strategy(), Strategy::BlockingSync);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Creates the stream (`aclrtCreateStreamWithConfig`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Strategy, Stream};
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let stream = Stream::builder(&ctx).build()?;
    /// assert!(stream.context().same(&ctx));
    /// assert_eq!(stream.strategy(), Strategy::EventPoll);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn build(self) -> Result<Stream> {
        let unwatchable = self.flags & UNWATCHABLE_FLAGS;
        if unwatchable != 0 {
            return Err(Error::invalid(
                "StreamBuilder::build",
                "flags",
                format!(
                    "{unwatchable:#x} (ACL_STREAM_PERSISTENT, ACL_STREAM_CPU_SCHEDULE or \
                     ACL_STREAM_DEVICE_USE_ONLY) makes a stream whose work the host cannot \
                     watch, so its operations could never complete as futures"
                ),
            ));
        }
        let context = self.context;
        context.bind()?;
        let mut handle: ffi::aclrtStream = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; the context is bound on this thread.
        unsafe {
            acl_call!(
                context.runtime(),
                aclrtCreateStreamWithConfig(&mut handle, self.priority, self.flags)
            )
        }?;
        let events = EventPool::for_context(&context);
        let id = stream_id(&context, handle);
        let fault_noticed = Arc::new(AtomicBool::new(false));
        let fault_watch = watch_faults(&context, id, handle, self.strategy, fault_noticed.clone());
        let shared = Arc::new(StreamShared {
            context,
            handle,
            id,
            submit: Mutex::new(Aborting::default()),
            queue: Mutex::new(Queue::default()),
            events,
            staging: OnceLock::new(),
            strategy: self.strategy,
            strategy_state: StrategyState::default(),
            failure: Mutex::new(None),
            tail: Mutex::new(None),
            watched: AtomicU64::new(0),
            aborted_through: AtomicU64::new(0),
            stops: AtomicU64::new(0),
            fault_noticed,
            _fault_watch: fault_watch,
        });
        Ok(Stream { shared })
    }
}

/// Creation flags whose streams ACL's queries and host synchronisation say nothing about:
/// persistent streams hold work for a model run, CPU-scheduled and device-only streams are
/// driven from elsewhere.
const UNWATCHABLE_FLAGS: u32 =
    ffi::ACL_STREAM_PERSISTENT | ffi::ACL_STREAM_CPU_SCHEDULE | ffi::ACL_STREAM_DEVICE_USE_ONLY;

/// The ACL id of a new stream, or npu-rs's own where the runtime cannot say.
fn stream_id(context: &Context, handle: ffi::aclrtStream) -> u64 {
    let mut id = 0;
    // SAFETY: the stream was just created and `id` is a valid out-pointer.
    let acl = unsafe { acl_call_opt!(context.runtime(), aclrtStreamGetId(handle, &mut id)) };
    match acl {
        Ok(()) => u64::try_from(id).unwrap_or_else(|_| own_stream_id()),
        Err(_) => own_stream_id(),
    }
}

/// Has the runtime's exception callback flag the stream's faults and, for the strategies the
/// reactor serves (`EventPoll`, and `BlockingSync` operations it took over), wake the reactor,
/// so that the failed operation and, in `FailureMode::Stop`, those behind it resolve without
/// waiting for the reactor's next planned query or probe. The callback worker of
/// `CallbackThread` sits in `aclrtProcessReport` and cannot be woken; it finds the fault on its
/// next report or quiet period.
fn watch_faults(
    context: &Context,
    id: u64,
    handle: ffi::aclrtStream,
    strategy: Strategy,
    noticed: Arc<AtomicBool>,
) -> npu_core::FaultWatch {
    let on_fault = move || {
        noticed.store(true, Ordering::Release);
        if strategy != Strategy::CallbackThread {
            crate::reactor::Reactor::nudge_if_running();
        }
    };
    // SAFETY: the closure stores a flag and nudges the reactor, which only unparks it: it
    // neither blocks nor calls ACL. The stream is the one being created here.
    unsafe {
        context
            .runtime()
            .watch_faults(context.device_id(), id, handle, on_fault)
    }
}

/// Counts above every ACL id (a non-negative `i32`), so the two kinds never collide.
fn own_stream_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1 << 32);
    NEXT.fetch_add(1, Ordering::Relaxed)
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
        StreamBuilder {
            context: context.clone(),
            priority: 0,
            flags: 0,
            strategy: Strategy::default(),
        }
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
    /// A failed operation's own future reports its failure too; `synchronize` is where the
    /// failure of an operation whose future was dropped surfaces. The error names the failed
    /// operation's ACL function.
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
        self.submit_op(op, 0, None, (), |_, _| {}, |_, _| Ok(()))
    }

    /// Discards the work queued on the stream (`aclrtStreamAbort`) and resolves once the
    /// device has confirmed it: the task running at that moment has finished, the others will
    /// never run. Every operation submitted before the call and not yet completed then fails
    /// with [`Error::Aborted`](npu_core::Error::Aborted) (its buffers released safely, since the
    /// device is done with them), and the stream is usable again.
    ///
    /// The runtime call waits for the running task, so it runs on a thread of its own
    /// (`npu-abort`), never on the caller's, an executor's or Tokio's blocking pool. It starts
    /// when `abort` is called, like every operation, not when the future is first polled:
    /// dropping the future, polled or not, or the Tokio runtime, leaves the abort to finish
    /// there and waits for nothing. Work submitted to the stream
    /// while the abort is in progress is not queued behind it (which would block the submitting
    /// thread for as long as the device's task runs): it fails at once with
    /// [`Error::Aborted`](npu_core::Error::Aborted), without reaching the device, as the abort
    /// would have discarded it, and [`Event::record`](crate::Event::record) on the stream
    /// returns that error. The abort is in progress from the moment its thread marks what it
    /// discards, just before its runtime call: work submitted between `abort` returning and
    /// that mark is queued as usual and discarded with the earlier work (its future fails with
    /// `Error::Aborted`; a record made then succeeds, and the event then stands for a record
    /// that is never reached, so [`Event::wait`](crate::Event::wait) fails with
    /// `Error::Aborted`). An abort called while another is in progress on the stream shares
    /// it (it would discard nothing more), so aborts called in a loop while a task runs take
    /// one thread, not one each; only an abort called after [`stop`](Stream::stop) returned
    /// starts its own, since it must clear that stop.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// let queued = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1);
    /// stream.abort().await?;
    /// assert!(queued.await.unwrap_err().error.is_aborted());
    /// npu_sim::control::release(1).unwrap();
    /// let buffer = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 2).await?; // usable again
    /// assert_eq!(buffer.to_vec_blocking()?, [2; 64]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn abort(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        let mut wait = 'wait: {
            let Some(mut aborting) =
                npu_core::contain::lock_here(&self.shared.submit, Rank::Submission)
            else {
                // This thread is submitting to the stream (a tracing subscriber called from
                // inside the submission's ACL call), or would wait for another while holding a
                // lock that ranks as high: refused, as a submission would be.
                // SAFETY: no memory is recorded against this completion and nothing is
                // deferred on it; it completes here.
                let completer = unsafe { Completer::new() };
                let wait = KeptWait::new(&completer.completion());
                completer.complete(Err(reentered("Stream::abort")));
                break 'wait wait;
            };
            let stops = self.shared.stops.load(Ordering::Acquire);
            match &aborting.shared {
                // That abort discards all this one would: it marks its horizon after this
                // call, or marked it before and has refused every submission since. And no
                // `stop` has returned since its runtime call began, so what it leaves running
                // is what this one would. So this one waits for it instead of taking another
                // thread.
                Some(running) if running.stops_at_call.is_none_or(|at| at == stops) => {
                    KeptWait::new(&running.completion)
                }
                _ => {
                    // SAFETY: no memory is recorded against this completion and nothing is
                    // deferred on it; it completes once the runtime's abort call has returned.
                    let completer = unsafe { Completer::new() };
                    let wait = KeptWait::new(&completer.completion());
                    aborting.shared = Some(SharedAbort {
                        completion: completer.completion(),
                        stops_at_call: None,
                    });
                    drop(aborting);
                    self.start_abort(completer);
                    wait
                }
            }
        };
        std::future::poll_fn(move |cx| wait.poll(cx))
    }

    /// Runs the abort on a thread of its own, started now, like every operation: a future
    /// dropped unpolled (a `select!` whose other branch was ready) still aborts.
    fn start_abort(&self, completer: Completer) {
        // Taken back if the thread cannot start, to complete with that failure.
        let slot = Arc::new(Mutex::new(Some(completer)));
        let (shared, taken) = (self.shared.clone(), slot.clone());
        let started = std::thread::Builder::new()
            .name("npu-abort".into())
            .spawn(move || {
                let completer = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(completer) = completer {
                    let result = shared.abort_blocking(&completer.completion());
                    completer.complete(result);
                }
                // The last reference destroys the stream, which belongs on the reaper.
                strategy::release_stream(shared);
            });
        if let Err(err) = started {
            let completer = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(completer) = completer {
                self.shared
                    .lock_submission()
                    .end_shared(&completer.completion());
                completer.complete(Err(Error::invalid(
                    "Stream::abort",
                    "thread",
                    format!("cannot start the abort's thread: {err}"),
                )));
            }
        }
    }

    /// Stops the stream's work where it is (`aclrtStreamStop`): the running task finishes, the
    /// queued ones stay queued and do not run. The stream's pending operations then fail (with
    /// the runtime's code for a stopped stream) once the device reports the stop, and its
    /// queue is discarded only by [`abort`](Stream::abort), after which the stream runs new
    /// work again.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.create_context()?;
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap();
    /// let queued = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1);
    /// stream.stop()?;
    /// npu_sim::control::release(1).unwrap();
    /// assert!(queued.await.is_err(), "a stopped stream's work never runs");
    /// stream.abort().await?; // discards the stopped queue; the stream runs again
    /// stream.synchronize().await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn stop(&self) -> Result<()> {
        self.context().bind()?;
        let handle = self.shared.handle;
        // SAFETY: the stream is alive (`self`) and its context is bound.
        let result = unsafe { acl_call_opt!(self.context().runtime(), aclrtStreamStop(handle)) };
        // Counted once the stop has taken effect: an abort called from now on must clear it,
        // so it may not share one whose runtime call began before.
        self.shared.stops.fetch_add(1, Ordering::AcqRel);
        result
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

    /// The one submission path: record uses, issue `call` under the submission lock, then let
    /// the completion strategy watch it.
    ///
    /// A failure before the device accepted the work resolves the future at once. A failure
    /// after it (recording the event, say) must not release the buffers while the device may
    /// still use them, so the stream is drained first, off this thread.
    pub(crate) fn submit<T: Send + 'static>(
        &self,
        api: &'static str,
        bytes: usize,
        value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        self.submit_op(OpInfo::new(api), bytes, None, value, record_uses, call)
    }

    /// [`submit`](Stream::submit) with one more field of the operation's span filled in:
    /// `direction` for copies, `kernel` for launches.
    pub(crate) fn submit_described<T: Send + 'static>(
        &self,
        api: &'static str,
        bytes: usize,
        field: (&'static str, &str),
        value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        self.submit_op(
            OpInfo::new(api),
            bytes,
            Some(field),
            value,
            record_uses,
            call,
        )
    }

    fn submit_op<T: Send + 'static>(
        &self,
        mut op: OpInfo,
        bytes: usize,
        field: Option<(&'static str, &str)>,
        mut value: T,
        record_uses: impl FnOnce(&T, &Completion),
        call: impl FnOnce(&mut T, ffi::aclrtStream) -> Result<()>,
    ) -> Op<T> {
        // `direction` and `kernel` are filled in here, before the submission lock is taken,
        // `error` when the operation fails.
        let span = tracing::debug_span!(
            "npu_op",
            op = op.api,
            stream = self.shared.id,
            device = self.context().device_id(),
            bytes,
            direction = tracing::field::Empty,
            kernel = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        if let Some((name, value)) = field {
            span.record(name, value);
        }
        // SAFETY: this completer is completed only by a completion strategy (once the
        // device is done with the operation), by the sentinel (once the stream has drained),
        // or below for work the device never accepted; its deferred actions never block.
        let completer = unsafe { Completer::new() };
        let completion = completer.completion();
        record_uses(&value, &completion);
        // The submission runs inside the span. Entering and leaving it run the subscriber,
        // which is user code: a panic there is contained, since unwinding from here would
        // abandon the completer (leaking the buffers whose uses it recorded) or, once the
        // device accepted the work, drop the value the operation must keep until it completes
        // (an `Arc` clone, which the caller could then unwrap under the device).
        let mut entered = None;
        if npu_core::contain::contained(|| entered = Some(span.enter())) {
            // It panicked after the subscriber may have marked the thread as inside the span
            // (a registry records the entry before its layers see it): left again, as the
            // guard that never came to be would have, or the thread's later events and spans
            // would sit inside this one for ever. Leaving a span the thread is not in changes
            // nothing.
            npu_core::contain::contained(|| {
                span.with_subscriber(|(id, dispatch)| dispatch.exit(id));
            });
        }
        let outcome = (|| {
            if let Err(err) = self.context().bind() {
                return Err(Submission::Rejected(completer, err));
            }
            // Held across the ACL calls, which may run a tracing subscriber (the simulator
            // logs each failed call): one that submits to this stream again from there is
            // refused instead of waiting for this thread for ever.
            let Some(order) = npu_core::contain::lock_here(&self.shared.submit, Rank::Submission)
            else {
                return Err(Submission::Rejected(completer, reentered(op.api)));
            };
            if order.refusing > 0 {
                // Not queued behind the abort, which waits for the device's running task:
                // discarded, as the abort would have discarded it.
                return Err(Submission::Rejected(
                    completer,
                    Error::Aborted { api: op.api },
                ));
            }
            if let Err(err) = call(&mut value, self.shared.handle) {
                return Err(Submission::Rejected(completer, err));
            }
            op.seq = self.shared.watched.fetch_add(1, Ordering::AcqRel) + 1;
            self.shared
                .strategy
                .watch(&self.shared, op, completer)
                .map_err(Submission::Unwatched)
        })();
        npu_core::contain::contained(move || drop(entered));
        match outcome {
            Ok(()) => {}
            // The device never saw the work: nothing to wait for. A context that a fault
            // stopped refuses it with the fault's code, and the error says which fault.
            Err(Submission::Rejected(completer, err)) => {
                completer.complete(Err(strategy::with_stopping_fault(&self.shared, err)));
            }
            // The device may run it: it completes once the stream has drained. A stream that a
            // fault of this very operation stopped refuses the event record after it: the
            // error is the operation's.
            Err(Submission::Unwatched(unwatched)) => {
                let error = strategy::attribute(&self.shared, unwatched.error, op.api);
                sentinel::drain(self.shared.clone(), unwatched.completer, error);
            }
        }
        Op::new(completion, value, span)
    }
}

/// The error of a submission or an abort made on a thread that is submitting to the same
/// stream already (a tracing subscriber, called from inside that submission's ACL call), or
/// that would wait for another thread's submission while holding a lock that ranks as high
/// (see `npu_core::contain::lock_here`).
fn reentered(api: &'static str) -> Error {
    Error::invalid(
        api,
        "stream",
        "is being submitted to by this thread already, or by another while this thread holds \
         a lock npu-rs takes after the stream's: called back from inside an ACL call (by a \
         tracing subscriber?)",
    )
}

/// The aborts in progress on a stream, kept under its submission lock.
#[derive(Debug, Default)]
struct Aborting {
    /// The latest abort, from its call until it ends: an abort called meanwhile shares it
    /// instead of starting another, unless a `stop` returned since its runtime call began.
    shared: Option<SharedAbort>,
    /// How many aborts are between marking which operations they discard and their end:
    /// submissions are refused meanwhile.
    refusing: usize,
}

impl Aborting {
    /// Forgets the shared abort if it is the one `mine` completes (a later one may have
    /// taken its place).
    fn end_shared(&mut self, mine: &Completion) {
        if self
            .shared
            .as_ref()
            .is_some_and(|shared| shared.completion.same(mine))
        {
            self.shared = None;
        }
    }
}

/// An abort that later aborts may share.
#[derive(Debug)]
struct SharedAbort {
    completion: Completion,
    /// The stream's `stops` count when the abort's runtime call began; `None` before.
    stops_at_call: Option<u64>,
}

/// Ends an abort on drop, on every path out of [`StreamShared::abort_blocking`]: marks what it
/// discarded, stops refusing submissions on its behalf, and leaves the shared slot.
struct AbortInProgress<'a> {
    stream: &'a StreamShared,
    mine: &'a Completion,
    /// The horizon it marked (and so counted itself as refusing), if it got that far.
    through: Option<u64>,
    /// Whether the runtime confirmed the discard.
    discarded: bool,
}

impl Drop for AbortInProgress<'_> {
    fn drop(&mut self) {
        let stream = self.stream;
        let mut aborting = stream.lock_submission();
        if let Some(through) = self.through {
            if self.discarded {
                stream.aborted_through.fetch_max(through, Ordering::AcqRel);
                // The runtime cleared the stream's errors with its queue; so does the failure
                // record.
                *stream.failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            aborting.refusing -= 1;
        }
        aborting.end_shared(self.mine);
    }
}

/// What a context does after one of its tasks fails (`aclrtSetStreamFailureMode`).
///
/// ```
/// use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::{FailureMode, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(1)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// assert_eq!(FailureMode::default(), FailureMode::Continue); // what a new stream uses
/// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap();
/// let failing = stream.memset(DeviceBuffer::<u8>::new(&ctx, 4)?, 0);
/// let later = stream.memset(DeviceBuffer::<u8>::new(&ctx, 4)?, 9);
/// assert!(failing.await.is_err());
/// assert_eq!(later.await?.to_vec_blocking()?, [9; 4], "later work still runs");
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailureMode {
    /// Later tasks still run; the failure is reported to the failed task's operation.
    #[default]
    Continue,
    /// Every stream of the context stops; pending operations fail.
    Stop,
}

impl FailureMode {
    fn raw(self) -> u64 {
        match self {
            FailureMode::Continue => u64::from(ffi::ACL_CONTINUE_ON_FAILURE),
            FailureMode::Stop => u64::from(ffi::ACL_STOP_ON_FAILURE),
        }
    }
}

impl StreamShared {
    /// Passes an operation's result through the stream's failure record, in completion order:
    /// an ordinary operation's failure is remembered for the next `synchronize`; a
    /// `synchronize` reports (and clears) the first one remembered.
    pub(crate) fn finish(&self, op: OpInfo, result: Result<()>) -> Result<()> {
        let failure = || self.failure.lock().unwrap_or_else(|e| e.into_inner());
        // An ordinary operation that succeeded changes nothing: no lock on the common path.
        if !op.synchronizes {
            // What an abort discarded is the caller's doing, not a device failure to report.
            if let Err(err) = &result {
                if !self.aborted(op) {
                    failure().get_or_insert_with(|| err.clone());
                }
            }
            return result;
        }
        match (result, failure().take()) {
            (Err(err), _) | (Ok(()), Some(err)) => Err(err),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Whether an abort discarded `op`.
    pub(crate) fn aborted(&self, op: OpInfo) -> bool {
        op.seq != 0 && op.seq <= self.aborted_through.load(Ordering::Acquire)
    }

    /// Discards the stream's queued work (`aclrtStreamAbort`), blocking until the device has
    /// confirmed it; then marks every operation watched so far as discarded and tells the
    /// strategies.
    ///
    /// The submission lock is held only to mark the abort and to finish it, not across the
    /// runtime call, which waits for the device's running task: a submission meanwhile would
    /// otherwise block its thread (a Tokio worker) for as long as that task runs. It is
    /// refused instead (see `Stream::submit_op`), so the device's queue during the call holds
    /// exactly the operations watched before it and none is mistaken for a discarded one.
    fn abort_blocking(&self, mine: &Completion) -> Result<()> {
        let bound = self.context.bind();
        let mut in_progress = AbortInProgress {
            stream: self,
            mine,
            through: None,
            discarded: false,
        };
        if bound.is_ok() {
            let mut aborting = self.lock_submission();
            aborting.refusing += 1;
            in_progress.through = Some(self.watched.load(Ordering::Acquire));
            if let Some(shared) = aborting.shared.as_mut().filter(|s| s.completion.same(mine)) {
                shared.stops_at_call = Some(self.stops.load(Ordering::Acquire));
            }
        }
        let handle = self.handle;
        let result = bound.and_then(|()| {
            // SAFETY: the stream is alive (`self`) and its context is bound.
            unsafe { acl_call_opt!(self.context.runtime(), aclrtStreamAbort(handle)) }
        });
        in_progress.discarded = result.is_ok();
        drop(in_progress);
        result?;
        if self.strategy == Strategy::EventPoll {
            crate::reactor::Reactor::get().nudge();
        }
        Ok(())
    }

    fn lock_submission(&self) -> MutexGuard<'_, Aborting> {
        self.submit.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `completion` the most recently watched operation; returns the previous one.
    pub(crate) fn replace_tail(&self, completion: &Completion) -> Option<Completion> {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.replace(completion.clone())
    }
}

impl Drop for StreamShared {
    fn drop(&mut self) {
        callback::release(self);
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // Every operation npu-rs watched has completed (pending entries keep the stream
            // alive) or was failed because the stream can never run it (stopped, stopped by a
            // fault, device lost). CANN's aclrtDestroyStream waits for unfinished tasks, which
            // on such a stream never finish: this runs on the reaper, so those are forced.
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

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.shared.id)
            .field("device", &self.context().device_id())
            .field("strategy", &self.shared.strategy)
            .finish()
    }
}
