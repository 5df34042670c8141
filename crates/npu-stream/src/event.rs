//! User events: record on a stream, await, time, and order streams.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use npu_core::contain::Rank;
use npu_core::ffi;
use npu_core::{Completion, Context, Error, Result, Runtime, Wait, acl_call, acl_call_opt};

use crate::op::Op;
use crate::stream::Stream;

/// Which ACL event model an [`Event`] uses.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{Event, EventKind};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let legacy = Event::new(&ctx)?;
/// let ex = Event::builder(&ctx).kind(EventKind::Ex).build()?;
/// assert!(!legacy.is_complete()?, "a never-recorded legacy event is not complete");
/// assert!(ex.is_complete()?, "a never-recorded Ex event is");
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EventKind {
    /// `aclrtCreateEventWithFlag`: available on every CANN release.
    #[default]
    Legacy,
    /// `aclrtCreateEventExWithFlag` (newer releases): every record re-captures the stream's
    /// work, and a never-recorded event counts as complete.
    Ex,
}

/// An ACL event, recorded on a stream to mark a point in its work.
///
/// Use it to await that point, to time the work between two events, or to make another
/// stream wait for it. `Event` is `Send + Sync` and cheap to clone; the ACL event is destroyed
/// with the last clone.
///
/// Equality and hashing are by identity: clones are equal, two events created apart are not,
/// whether or not they were recorded at the same point. An event in a `HashMap` keeps itself
/// alive, so its identity is not reused while it is a key.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{Event, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// let (start, end) = (Event::new(&ctx)?, Event::new(&ctx)?);
/// start.record(&producer)?;
/// end.record(&producer)?;
/// consumer.wait_event(&end)?; // later work on `consumer` runs after `end`
/// end.wait().await?;
/// let elapsed = Event::elapsed(&start, &end)?;
/// assert!(elapsed.as_secs() < 60);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Event {
    inner: Arc<EventInner>,
}

struct EventInner {
    context: Context,
    handle: ffi::aclrtEvent,
    kind: EventKind,
    flags: u32,
    /// Completes when the device reaches the latest record.
    last_record: Mutex<Option<Completion>>,
    /// Held by a record from its ACL call to storing its completion, so that records racing
    /// on two streams store in the order the device sees them. Apart from `last_record`, so
    /// that `wait`, which only reads, never waits behind a record held up at its stream's
    /// submission (an abort holds that while the device confirms).
    recording: Mutex<()>,
}

// SAFETY: an aclrtEvent is an opaque handle ACL lets any thread use; records are serialised
// by `recording`, which each holds from the record to storing its completion, and
// `last_record` is behind a mutex.
unsafe impl Send for EventInner {}
// SAFETY: as above.
unsafe impl Sync for EventInner {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&EventInner) = |fields| {
    let EventInner {
        context,
        handle: _,
        kind,
        flags,
        last_record,
        recording,
    } = fields;
    let _: [&(dyn Send + Sync); 5] = [context, kind, flags, last_record, recording];
};

/// Creation options for an [`Event`].
///
/// ```
/// use npu_core::{Device, ffi};
/// use npu_stream::{Event, EventKind};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let event = Event::builder(&ctx)
///     .kind(EventKind::Ex)
///     .flags(ffi::ACL_EVENT_SYNC | ffi::ACL_EVENT_TIME_LINE)
///     .build()?;
/// assert_eq!(event.kind(), EventKind::Ex);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct EventBuilder {
    context: Context,
    kind: EventKind,
    flags: u32,
}

impl EventBuilder {
    /// The event model.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Event, EventKind};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(Event::builder(&ctx).kind(EventKind::Ex).build()?.kind(), EventKind::Ex);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn kind(mut self, kind: EventKind) -> Self {
        self.kind = kind;
        self
    }

    /// Raw `ACL_EVENT_*` flags. The default, `ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE`, allows
    /// both cross-stream waits and timing.
    ///
    /// ```
    /// use npu_core::{Device, ffi};
    /// use npu_stream::Event;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // Without ACL_EVENT_TIME_LINE an event orders streams but records no timestamp.
    /// let sync_only = Event::builder(&ctx).flags(ffi::ACL_EVENT_SYNC).build()?;
    /// let err = Event::elapsed(&sync_only, &sync_only).unwrap_err();
    /// assert!(err.to_string().contains("without ACL_EVENT_TIME_LINE"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }

    /// Creates the event.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Event;
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let event = Event::builder(&ctx).build()?;
    /// assert!(event.context().same(&ctx));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn build(self) -> Result<Event> {
        let context = self.context;
        context.bind()?;
        let runtime = context.runtime();
        let mut handle: ffi::aclrtEvent = std::ptr::null_mut();
        let flags = self.flags;
        match self.kind {
            // SAFETY: `handle` is a valid out-pointer; the context is bound.
            EventKind::Legacy => unsafe {
                acl_call!(runtime, aclrtCreateEventWithFlag(&mut handle, flags))
            },
            // SAFETY: as above.
            EventKind::Ex => unsafe {
                acl_call_opt!(runtime, aclrtCreateEventExWithFlag(&mut handle, flags))
            },
        }?;
        Ok(Event {
            inner: Arc::new(EventInner {
                context,
                handle,
                kind: self.kind,
                flags,
                last_record: Mutex::new(None),
                recording: Mutex::new(()),
            }),
        })
    }
}

impl Event {
    /// A legacy event that supports waits and timing.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Event, EventKind, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let event = Event::new(&ctx)?;
    /// assert_eq!(event.kind(), EventKind::Legacy);
    /// event.record(&Stream::new(&ctx)?)?;
    /// event.wait().await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context) -> Result<Event> {
        Event::builder(context).build()
    }

    /// Options for an event in `context`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Event, EventKind};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let event = Event::builder(&ctx).build()?; // the same as Event::new
    /// assert_eq!(event.kind(), EventKind::Legacy);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn builder(context: &Context) -> EventBuilder {
        EventBuilder {
            context: context.clone(),
            kind: EventKind::Legacy,
            flags: ffi::ACL_EVENT_SYNC | ffi::ACL_EVENT_TIME_LINE,
        }
    }

    /// The event model.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Event, EventKind};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(Event::new(&ctx)?.kind(), EventKind::Legacy);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn kind(&self) -> EventKind {
        self.inner.kind
    }

    /// The context the event belongs to.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Event;
    ///
    /// let device = Device::open(1)?;
    /// let event = Event::new(device.primary_context())?;
    /// assert_eq!(event.context().device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Event, Stream};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let event = Event::new(&ctx)?;
    /// event.record(&Stream::new(&ctx)?)?;
    /// let rt = ctx.runtime();
    /// // SAFETY: the event is alive (`event`). This blocks the thread, unlike `event.wait()`.
    /// let code = unsafe { (rt.api().aclrtSynchronizeEvent)(event.as_raw()) };
    /// rt.check("aclrtSynchronizeEvent", code)?;
    /// assert!(event.is_complete()?);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtEvent {
        self.inner.handle
    }

    /// Records the event after all work submitted to `stream` so far (`aclrtRecordEvent`).
    ///
    /// Re-recording moves the event to the new point; [`wait`](Event::wait) then waits for it.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let filled = stream.memset(DeviceBuffer::<u8>::new(&ctx, 1 << 20)?, 1);
    /// let event = Event::new(&ctx)?;
    /// event.record(&stream)?; // after the memset
    /// event.wait().await?;
    /// assert!(filled.is_complete(), "the memset came before the record");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn record(&self, stream: &Stream) -> Result<()> {
        stream.check_runtime("Event::record", "stream", self.context())?;
        let handle = self.inner.handle;
        // In a forked child the recording lock may belong to a thread of the parent that was
        // recording at the fork, which does not exist here: refused before the lock, as the
        // submission would be.
        npu_core::fork::refuse(crate::SEAL, "aclrtRecordEvent")?;
        // Held across the record and the store: records on two streams at once must store
        // their completions in the order the device sees the records, or `wait` would watch
        // an older record than the one the event now stands for.
        // Taken with `lock_here`: the submission below creates and enters the operation's
        // span and may run a tracing subscriber (the simulator logs a failed record), and one
        // that records this event again from there is refused instead of waiting for itself.
        let Some(_recording) =
            npu_core::contain::lock_here(crate::SEAL, &self.inner.recording, Rank::Record)
        else {
            return Err(Error::invalid(
                "Event::record",
                "self",
                "is being recorded by this thread already, or by another while this thread \
                 holds a lock npu-rs takes after it: called back from inside an ACL call (by \
                 a tracing subscriber?)",
            ));
        };
        let op = stream.submit(
            ("Event::record", "stream"),
            "aclrtRecordEvent",
            0,
            (),
            |_, _| {},
            |_, raw| {
                // SAFETY: event and stream are alive; the stream's context is bound.
                unsafe { acl_call!(stream.context().runtime(), aclrtRecordEvent(handle, raw)) }
            },
        );
        if let Some(Err(err)) = op.completion().result() {
            return Err(err);
        }
        *self
            .inner
            .last_record
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(op.completion().clone());
        Ok(())
    }

    /// Resolves when the device reaches the latest record. Resolves at once if the event was
    /// never recorded.
    ///
    /// Unlike [`Stream::synchronize`], it does not report a task failure among the captured
    /// work: the failed operation's own future does, and so does the stream's next
    /// `synchronize`. This fails only when the recording stream's work can no longer complete
    /// (device lost, stream or context stopped), or with
    /// [`Error::Aborted`](npu_core::Error::Aborted) when [`Stream::abort`] discarded the record.
    ///
    /// Cancel safety: cancel-safe; dropping the future only stops waiting.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let event = Event::new(&ctx)?;
    /// event.wait().await?; // never recorded: resolves at once
    /// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap(); // the next task fails
    /// let memset = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// event.record(&stream)?;
    /// event.wait().await?; // the device got past the failed memset
    /// assert!(memset.await.is_err(), "the memset's own future reports the failure");
    /// assert!(stream.synchronize().await.is_err(), "and so does the next synchronize");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait(&self) -> EventWait {
        let record = self
            .inner
            .last_record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Completion::wait);
        EventWait { record }
    }

    /// Whether the work captured by the latest record has completed
    /// (`aclrtQueryEventStatus`, or the deprecated `aclrtQueryEvent` on runtimes that predate
    /// it). A never-recorded legacy event reports `false`, an `Ex` event `true`, as in ACL.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let event = Event::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// event.record(&stream)?;
    /// assert!(!event.is_complete()?);
    /// npu_sim::control::release(1).unwrap();
    /// event.wait().await?;
    /// assert!(event.is_complete()?);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn is_complete(&self) -> Result<bool> {
        query_event(self.context().runtime(), self.inner.handle)
    }

    /// The device time between two recorded and completed events (`aclrtEventElapsedTime`).
    /// Both must be events of one device: each device stamps its records with its own clock, so
    /// events of two devices are refused (`InvalidArgument`, argument `end`). An event never
    /// recorded with [`record`](Event::record) that the runtime refuses is an
    /// `InvalidArgument` of `start` or `end` too, not the runtime's code, which reads as an
    /// internal error (507000 on npu-sim); a record not yet completed is the runtime's
    /// `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID` (107006): await [`wait`](Event::wait) first.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_stream::Event;
    ///
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// let (start, end) = (Event::new(&ctx)?, Event::new(&ctx)?);
    /// let err = Event::elapsed(&start, &end).unwrap_err();
    /// assert!(err.to_string().starts_with("Event::elapsed: invalid argument `start`: was never recorded"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_sim::{TimingModel, control};
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let (start, end) = (Event::new(&ctx)?, Event::new(&ctx)?);
    /// // npu-sim: memsets on device 1 run at 1 GB/s on its simulated clock, all from one instant.
    /// control::set_timing(1, Some(TimingModel::default().d2d_bandwidth(1_000_000_000))).unwrap();
    /// control::hold(1).unwrap();
    /// start.record(&stream)?;
    /// let memset = stream.memset(DeviceBuffer::<u8>::new(&ctx, 1 << 20)?, 0);
    /// end.record(&stream)?;
    /// control::release(1).unwrap();
    /// memset.await?;
    /// end.wait().await?;
    /// assert_eq!(Event::elapsed(&start, &end)?.as_micros(), 1048); // 1 MiB at 1 GB/s
    /// # control::set_timing(1, None).unwrap();
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn elapsed(start: &Event, end: &Event) -> Result<Duration> {
        for (event, argument) in [(start, "start"), (end, "end")] {
            event.check_timestamped("Event::elapsed", argument)?;
        }
        let runtime = start.context().runtime();
        // Handles are meaningful only to the library that made them: another runtime's handle
        // could name an unrelated event of this one.
        if !end.context().runtime().same_library(runtime) {
            return Err(Error::invalid(
                "Event::elapsed",
                "end",
                "belongs to a different AscendCL runtime than start",
            ));
        }
        // Each device stamps records with its own clock: a difference between two devices'
        // stamps is no duration, whatever the runtime returns for it.
        let (from, to) = (start.context().device_id(), end.context().device_id());
        if from != to {
            return Err(Error::invalid(
                "Event::elapsed",
                "end",
                format!(
                    "is an event of device {to} but start is of device {from}: events of two \
                     devices have no common clock"
                ),
            ));
        }
        // Bound although the reference states no context for this call, as for frees
        // (docs/architecture.md): a runtime resolving it through the current context must
        // not meet another device's, or none.
        start.context().bind()?;
        let mut ms = 0f32;
        let (a, b) = (start.inner.handle, end.inner.handle);
        // SAFETY: both events are alive and `ms` is a valid out-pointer.
        let measured = unsafe { acl_call!(runtime, aclrtEventElapsedTime(&mut ms, a, b)) };
        if let Err(err) = measured {
            for (event, argument) in [(start, "start"), (end, "end")] {
                event.never_recorded("Event::elapsed", argument)?;
            }
            return Err(err);
        }
        Duration::try_from_secs_f64(f64::from(ms) / 1e3).map_err(|_| {
            Error::invalid("Event::elapsed", "end", format!("is {ms} ms before start"))
        })
    }

    /// The device time of the latest record, in microseconds (`aclrtEventGetTimestamp`). An
    /// event created without `ACL_EVENT_TIME_LINE` records no timestamp and is refused
    /// (`InvalidArgument`, argument `self`), as [`elapsed`](Event::elapsed) refuses it.
    /// An event never recorded with [`record`](Event::record) that the runtime refuses is an
    /// `InvalidArgument` of `self` too, as for [`elapsed`](Event::elapsed).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let event = Event::new(&ctx)?;
    /// event.record(&stream)?;
    /// event.wait().await?;
    /// let device_now_us = npu_sim::control::now_ns(0).unwrap() / 1000;
    /// assert!(event.timestamp_us()? <= device_now_us, "a past instant of the device clock");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn timestamp_us(&self) -> Result<u64> {
        // As for `elapsed`: without the flag no stamp is written, and what a runtime answers
        // for the unwritten one (an error, or some number) is not the event's time.
        self.check_timestamped("Event::timestamp_us", "self")?;
        let runtime = self.context().runtime();
        // Bound for the reason `elapsed` gives.
        self.context().bind()?;
        let handle = self.inner.handle;
        let mut timestamp = 0u64;
        // SAFETY: the event is alive and `timestamp` is a valid out-pointer.
        let read =
            unsafe { acl_call_opt!(runtime, aclrtEventGetTimestamp(handle, &mut timestamp)) };
        if let Err(err) = read {
            self.never_recorded("Event::timestamp_us", "self")?;
            return Err(err);
        }
        Ok(timestamp)
    }

    /// Refuses, as the caller's mistake, an event npu-rs never recorded, once the runtime has
    /// refused it: the runtime's code for that is an internal error's (507000 on npu-sim),
    /// which a caller would take for a broken device. Asked only after the runtime failed, so
    /// that an event recorded through its raw handle is still the runtime's to judge.
    fn never_recorded(&self, api: &'static str, argument: &'static str) -> Result<()> {
        let last = self.inner.last_record.lock();
        if last.unwrap_or_else(|e| e.into_inner()).is_none() {
            return Err(Error::invalid(
                api,
                argument,
                "was never recorded: record it on a stream (Event::record) and await its \
                 Event::wait first",
            ));
        }
        Ok(())
    }

    /// Refuses, as `api`'s `event`, a legacy event npu-rs never recorded: ACL holds a stream
    /// waiting for one until its first record (as after a reset), and the wait keeps the event
    /// alive, so nothing might ever record it and the stream would be held for ever. An Ex
    /// event holds no work before its first record, and its wait is the runtime's to judge.
    fn check_recorded_for_wait(&self, api: &'static str) -> Result<()> {
        let last = self.inner.last_record.lock();
        if self.inner.kind == EventKind::Legacy && last.unwrap_or_else(|e| e.into_inner()).is_none()
        {
            return Err(Error::invalid(
                api,
                "event",
                "is a legacy event that was never recorded, whose wait ACL holds until its \
                 first record: record it first (Event::record), or use an Ex event",
            ));
        }
        Ok(())
    }

    /// Refuses an event created without `ACL_EVENT_TIME_LINE`, which records no timestamp, as
    /// `api`'s `argument`.
    fn check_timestamped(&self, api: &'static str, argument: &'static str) -> Result<()> {
        if self.inner.flags & ffi::ACL_EVENT_TIME_LINE == 0 {
            return Err(Error::invalid(
                api,
                argument,
                "was created without ACL_EVENT_TIME_LINE, so it records no timestamp",
            ));
        }
        Ok(())
    }
}

/// Whether an event's latest record is known to have completed: a query that fails counts as
/// not complete, since it says the event or its stream is broken, and taking that for done
/// would release memory the device may still use.
pub(crate) fn event_complete(runtime: &Runtime, event: ffi::aclrtEvent) -> bool {
    query_event(runtime, event).unwrap_or(false)
}

/// Whether an event's latest record has completed, hiding ACL's two status numberings: the
/// current `aclrtEventRecordedStatus` (1 = complete) and, on runtimes without
/// `aclrtQueryEventStatus`, the deprecated `aclrtEventStatus` (0 = complete).
pub(crate) fn query_event(runtime: &Runtime, event: ffi::aclrtEvent) -> Result<bool> {
    npu_core::fork::refuse(crate::SEAL, "aclrtQueryEventStatus")?;
    let api = runtime.api();
    match api.aclrtQueryEventStatus {
        Some(query_status) => {
            let mut status = ffi::ACL_EVENT_RECORDED_STATUS_NOT_READY;
            // SAFETY: the caller keeps the event alive; the query checks no context.
            let code = unsafe { query_status(event, &mut status) };
            runtime.check("aclrtQueryEventStatus", code)?;
            Ok(status == ffi::ACL_EVENT_RECORDED_STATUS_COMPLETE)
        }
        None => {
            let mut status = ffi::ACL_EVENT_STATUS_NOT_READY;
            // SAFETY: as above; older runtimes only have the deprecated query (and a runtime
            // with neither gives `Error::Unsupported`).
            unsafe { npu_core::acl_call_opt!(runtime, aclrtQueryEvent(event, &mut status)) }?;
            Ok(status == ffi::ACL_EVENT_STATUS_COMPLETE)
        }
    }
}

impl Stream {
    /// Makes all work submitted to this stream after this call wait until `event`'s latest
    /// record is reached (`aclrtStreamWaitEvent`). Does not block the caller.
    ///
    /// Keep the event on this stream's device. CANN's reference does not say what a wait on
    /// another device's event does on hardware; npu-sim refuses it, as its reading of the
    /// multi-device rules (`ACL_ERROR_RT_STREAM_CONTEXT`, 107003, its message naming both
    /// devices). Portable code orders work on two devices by the host (await the first device's
    /// operation, then submit the second's), or by queuing a cross-device copy on the stream of
    /// the device whose work it follows.
    ///
    /// A legacy event npu-rs never recorded is refused ([`Error::InvalidArgument`], argument
    /// `event`): ACL would hold the stream until the event's first record. An
    /// [`EventKind::Ex`] event never recorded holds no work, and its wait does not wait.
    ///
    /// Fails if the runtime refuses the wait, and also if the wait has failed already by the
    /// time this returns: the record it waits for can never complete (its stream was stopped,
    /// aborted or faulted). A wait that fails later is a failed task of this stream, which its
    /// [`FailureMode`](crate::FailureMode) decides the consequences of. One whose record
    /// another stream's [`Stream::abort`] dropped fails with the runtime's
    /// `ACL_ERROR_RT_STREAM_ABORT` ([`is_aborted`](npu_core::Error::is_aborted) is true), not
    /// [`Error::Aborted`](npu_core::Error::Aborted): this stream was not aborted, and the work
    /// after the wait goes on (in `FailureMode::Continue`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let ready = Event::new(&ctx)?;
    /// let _filled = producer.memset(DeviceBuffer::<u8>::new(&ctx, 1 << 20)?, 7);
    /// ready.record(&producer)?;
    /// consumer.wait_event(&ready)?; // the consumer's later work starts after `ready`
    /// consumer.synchronize().await?;
    /// assert!(ready.is_complete()?, "the consumer waited for the producer");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.check_runtime("Stream::wait_event", "event", event.context())?;
        let handle = event.inner.handle;
        // Submitted like any operation, so that it is watched: the stream (and the event)
        // stay alive until the wait is over, and dropping the last `Stream` while the device
        // still waits never lands a blocking aclrtDestroyStream on the dropping thread.
        let op = self.submit(
            ("Stream::wait_event", "self"),
            "aclrtStreamWaitEvent",
            0,
            event.clone(),
            |_, _| {},
            |event, stream| {
                event.check_recorded_for_wait("Stream::wait_event")?;
                // SAFETY: stream and event are alive; the stream's context is bound.
                unsafe {
                    acl_call!(
                        self.context().runtime(),
                        aclrtStreamWaitEvent(stream, handle)
                    )
                }
            },
        );
        match op.completion().result() {
            Some(Err(err)) => Err(err),
            _ => Ok(()),
        }
    }

    /// As [`wait_event`](Stream::wait_event), but the device gives up waiting once `timeout`
    /// has passed since the wait began (`aclrtStreamWaitEventWithTimeout`), and the wait is
    /// an operation of its own: it resolves (to a clone of the event) once the stream has
    /// passed the wait, and fails with an error whose
    /// [`is_timeout`](npu_core::Error::is_timeout) is true (`ACL_ERROR_RT_WAIT_TIMEOUT`) if
    /// the event's record was not reached in time. The stream then goes on with its later
    /// work (in [`FailureMode::Continue`](crate::FailureMode)), unordered with the event.
    ///
    /// ACL counts the timeout in whole seconds, so it is rounded up to the next second; a zero
    /// timeout (which ACL reads as "for ever") or one above `i32::MAX` seconds is refused with
    /// [`Error::InvalidArgument`].
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the wait; the
    /// event's clone is dropped after it is over.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use std::time::Duration;
    /// use npu_stream::{Event, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let ready = Event::new(&ctx)?;
    /// ready.record(&producer)?;
    /// consumer.wait_event_timeout(&ready, Duration::from_secs(5)).await?; // reached in time
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_event_timeout(&self, event: &Event, timeout: Duration) -> Op<Event> {
        let api = "Stream::wait_event_timeout";
        let max = i32::MAX as u64;
        let seconds = crate::signal::timeout_seconds(api, timeout, max);
        self.submit(
            (api, "self"),
            "aclrtStreamWaitEventWithTimeout",
            0,
            event.clone(),
            |_, _| {},
            |event, stream| {
                let seconds = i32::try_from(seconds?).unwrap_or(i32::MAX);
                self.check_runtime(api, "event", event.context())?;
                event.check_recorded_for_wait(api)?;
                let handle = event.inner.handle;
                // SAFETY: stream and event are alive; the stream's context is bound.
                unsafe {
                    acl_call_opt!(
                        self.context().runtime(),
                        aclrtStreamWaitEventWithTimeout(stream, handle, seconds)
                    )
                }
            },
        )
    }
}

impl Drop for EventInner {
    fn drop(&mut self) {
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // SAFETY: the event is ours; ACL allows destroying an event whose record has not
            // completed (it frees it once the record completes).
            unsafe { acl_call!(runtime, aclrtDestroyEvent(self.handle)) }
        });
        if let Err(err) = result {
            npu_core::log!(warn, %err, "destroying an event failed");
        }
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Event {}

impl std::hash::Hash for Event {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.inner), state)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("kind", &self.inner.kind)
            .field("flags", &self.inner.flags)
            .field("device", &self.inner.context.device_id())
            .finish()
    }
}

/// Future returned by [`Event::wait`].
///
/// ```
/// # use npu_core::Device;
/// use npu_stream::{Event, Stream};
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// let event = Event::new(&ctx)?;
/// event.record(&stream)?;
/// drop(event.wait()); // stops waiting; the event and the stream are unaffected
/// event.wait().await?;
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct EventWait {
    /// The wait for the latest record, with its own waker registration (any number of tasks
    /// may wait for one event), keeping a paused Tokio clock still as an `Op` does.
    record: Option<Wait>,
}

impl Future for EventWait {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        match &mut self.record {
            Some(record) => Pin::new(record).poll(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}
