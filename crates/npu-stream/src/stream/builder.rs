//! Creating a stream: its options, its id and the watch on its faults.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use npu_core::{Context, Error, Result, acl_call, acl_call_opt, ffi};

use super::{Aborting, Queue, Stream, StreamShared};
use crate::event_pool::EventPool;
use crate::strategy::{Strategy, StrategyState};

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
#[must_use = "a builder does nothing until built"]
pub struct StreamBuilder {
    context: Context,
    priority: u32,
    flags: u32,
    strategy: Strategy,
}

impl StreamBuilder {
    /// The defaults: priority 0, no flags, the default strategy.
    pub(super) fn new(context: &Context) -> Self {
        StreamBuilder {
            context: context.clone(),
            priority: 0,
            flags: 0,
            strategy: Strategy::default(),
        }
    }

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
            aborts_marked: AtomicU64::new(0),
            aborting_through: AtomicU64::new(0),
            faulted_at_abort: Mutex::new(VecDeque::new()),
            drains: Default::default(),
            stops: AtomicU64::new(0),
            fault_noticed,
            _fault_watch: fault_watch,
            device_abort: Mutex::new(None),
            users: AtomicUsize::new(1),
            let_go: Mutex::default(),
        });
        let watcher: Weak<dyn npu_core::DeviceAbortWatch> = Arc::downgrade(&shared) as _;
        let ctx = &shared.context;
        ctx.runtime()
            .watch_device_aborts(crate::SEAL, ctx.device_id(), watcher);
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
/// `CallbackThread` sits in `aclrtProcessReport` and cannot be woken; it finds the fault at its
/// next health check (a report that brings nothing, or 50 ms after the last check).
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
