//! Events and their records.
//!
//! Every aclrtRecordEvent creates a [`Record`]: the capture of the work submitted to a stream
//! so far. The event points at its latest record; waits and syncs hold on to the record that
//! was current when they were issued, which gives the Ex events' "every record overwrites the
//! capture" semantics and the legacy events' behaviour alike. A wait issued while a legacy
//! event is reset (aclrtResetEvent) or not yet recorded holds on to the event's [`ResetGate`]
//! instead: it waits for the record that comes next.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use npu_sys::*;

use crate::capture::Capture;
use crate::device::Device;
use crate::error::{Res, SimError};
use crate::ipc::SharedEvent;
use crate::stream::Stream;
use crate::sync::{Bell, Listen, lock, wait_until};

/// What became of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not reached yet by its stream.
    Pending,
    /// Reached: the first error among the tasks it captured since the previous record on its
    /// stream, and its simulated timestamp (ns).
    Done { error: Option<aclError>, ts_ns: u64 },
}

pub(crate) struct Record {
    stream: Arc<Stream>,
    /// The record's position in its stream ([`Stream::submit`]).
    position: AtomicU64,
    outcome: Mutex<Outcome>,
    /// Why the stream dropped the record without reaching it (aclrtStreamAbort, a forced
    /// destruction), 0 while it was not dropped: waits on it must not outlive the drop.
    discarded: AtomicI32,
    /// The event recorded (None: an ordering-only marker), which a replay records again.
    event: Option<Weak<Event>>,
    /// Set when the record was captured into a model runtime instance instead of queued: it
    /// never runs itself, each replay of the model queues a copy of it.
    captured: OnceLock<Weak<Capture>>,
    /// For a record of an event shared between processes: the counters it publishes its
    /// outcome to, and its number there.
    shared: OnceLock<(Arc<SharedEvent>, u64)>,
    /// Unique in the process: the records of one program share its position.
    serial: u64,
    /// A replayed record (an execution of a model runtime instance made it): it becomes its
    /// event's current record when its stream queues it ([`Record::queued`]), before the
    /// worker can reach a reset of the same execution.
    replayed: bool,
    /// The event's hardware event, held until the record completes or is dropped: the
    /// reference frees an event destroyed before its record completed only once it completes.
    hardware: Mutex<Option<Arc<HardwareEvent>>>,
}

/// One of a device's [`MAX_EVENTS_PER_DEVICE`] hardware events, given back when the last
/// holder (its event, or a record of it not completed yet) lets it go.
pub(crate) struct HardwareEvent(Arc<Device>);

impl HardwareEvent {
    /// Takes one of `device`'s hardware events (ACL_ERROR_RT_NO_EVENT_RESOURCE when none is
    /// left).
    fn take(device: &Arc<Device>) -> Res<Arc<Self>> {
        device.take_slot(
            &device.hardware_events,
            MAX_EVENTS_PER_DEVICE,
            ACL_ERROR_RT_NO_EVENT_RESOURCE,
            "events with ACL_EVENT_SYNC or ACL_EVENT_EXTERNAL",
        )?;
        Ok(Arc::new(Self(device.clone())))
    }
}

impl Drop for HardwareEvent {
    fn drop(&mut self) {
        self.0.hardware_events.fetch_sub(1, Ordering::AcqRel);
    }
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl Record {
    /// An ordering-only marker (no event).
    pub(crate) fn new(stream: Arc<Stream>) -> Self {
        Self::recording(stream, None)
    }

    /// A record of `event` (aclrtRecordEvent), or a marker without one.
    pub(crate) fn recording(stream: Arc<Stream>, event: Option<&Arc<Event>>) -> Self {
        Self::made(stream, event, false)
    }

    /// A record an execution of a model runtime instance makes, replaying `event`'s captured
    /// record on `stream`.
    pub(crate) fn replaying(stream: Arc<Stream>, event: Option<&Arc<Event>>) -> Self {
        Self::made(stream, event, true)
    }

    fn made(stream: Arc<Stream>, event: Option<&Arc<Event>>, replayed: bool) -> Self {
        Self {
            stream,
            position: AtomicU64::new(0),
            outcome: Mutex::new(Outcome::Pending),
            discarded: AtomicI32::new(0),
            event: event.map(Arc::downgrade),
            captured: OnceLock::new(),
            shared: OnceLock::new(),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            replayed,
            hardware: Mutex::new(event.and_then(|event| event.hardware.clone())),
        }
    }

    /// Its stream queued it at `position` (under the stream's lock, before anyone can wait on
    /// it). A replayed record
    /// becomes its event's current record now: a record a PERSISTENT stream keeps, or a bound
    /// stream gives the instance it builds, is never queued, and never becomes current.
    ///
    /// Returns the record it replaced as current, for the caller to drop once it holds no
    /// lock (the last handle of a record may hold the last handle of its stream).
    pub(crate) fn queued(self: &Arc<Self>, position: u64) -> Option<Arc<Record>> {
        self.position.store(position, Ordering::Release);
        match self.event() {
            Some(event) if self.replayed => event.set_current(self.clone()),
            _ => None,
        }
    }

    /// Makes the record number `n` of the shared counters `shared`, before it is queued.
    pub(crate) fn number(&self, shared: Arc<SharedEvent>, n: u64) {
        let _ = self.shared.set((shared, n));
    }

    /// The record's number among the shared event's records (0: the event was not shared
    /// when it was made).
    pub(crate) fn number_in_shared(&self) -> u64 {
        self.shared.get().map_or(0, |&(_, n)| n)
    }

    /// The event this records, if it is still alive.
    pub(crate) fn event(&self) -> Option<Arc<Event>> {
        self.event.as_ref().and_then(Weak::upgrade)
    }

    /// Called by [`Stream::submit`] when the record goes into a capture instead of the queue.
    pub(crate) fn mark_captured(&self, capture: &Arc<Capture>) {
        let _ = self.captured.set(Arc::downgrade(capture));
    }

    /// Whether the record was captured (it never runs itself).
    pub(crate) fn is_captured(&self) -> bool {
        self.captured.get().is_some()
    }

    /// The capture the record went into, while that capture is still going on.
    pub(crate) fn active_capture(&self) -> Option<Arc<Capture>> {
        self.captured
            .get()
            .and_then(Weak::upgrade)
            .filter(|capture| capture.is_active())
    }

    /// The record's position in its stream (0 until it is queued).
    pub(crate) fn position(&self) -> u64 {
        self.position.load(Ordering::Acquire)
    }

    /// The stream the record was queued on.
    pub(crate) fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// What a wait for the record listens to: its stream reaching it, or being doomed.
    pub(crate) fn listens(&self) -> [Listen<'_>; 3] {
        self.stream.listens(self.position.load(Ordering::Acquire))
    }

    /// The device and stream ids of the record's stream and the record's serial number,
    /// which name the record in the trace (its position would not: the records of a program
    /// share one).
    pub(crate) fn trace_name(&self) -> (i32, i32, u64) {
        (self.stream.device.id, self.stream.id, self.serial)
    }

    pub(crate) fn outcome(&self) -> Outcome {
        *lock(&self.outcome)
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.stream.device
    }

    /// Called by the stream's worker when it reaches the record (it rings its bell once the
    /// record counts as finished).
    pub(crate) fn complete(&self, error: Option<aclError>, ts_ns: u64) {
        *lock(&self.outcome) = Outcome::Done { error, ts_ns };
        if let Some((shared, n)) = self.shared.get() {
            shared.complete(*n);
        }
        drop(lock(&self.hardware).take());
    }

    /// Whether the record completed or was dropped.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self.outcome(), Outcome::Done { .. })
            || self.discarded.load(Ordering::Acquire) != 0
    }

    /// Called by the stream's worker when it drops the record unreached.
    pub(crate) fn discard(&self, code: aclError) {
        self.discarded.store(code, Ordering::Release);
        if let Some((shared, n)) = self.shared.get() {
            shared.drop_record(*n);
        }
        drop(lock(&self.hardware).take());
    }

    /// Why this record will never complete, if that is known: its stream dropped it, its
    /// device was lost, its context stopped on a failure, or its stream was aborted, stopped
    /// or force-destroyed.
    pub(crate) fn doom(&self) -> Option<aclError> {
        match self.discarded.load(Ordering::Acquire) {
            0 => self.stream.settled_doom(),
            code => Some(code),
        }
    }

    /// Blocks until the record completes (its captured error is returned), it is doomed, or
    /// `deadline` passes (`Ok(None)` then).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Res<Option<Option<aclError>>> {
        self.stream.refuse_self_wait(self.position())?;
        let outcome = wait_until(&self.listens(), deadline, || match self.outcome() {
            Outcome::Done { error, .. } => Some(Ok(error)),
            Outcome::Pending => self.doom().map(Err),
        });
        match outcome {
            None => Ok(None),
            Some(Ok(error)) => Ok(Some(error)),
            // A lost device still running a task at the deadline: not done yet.
            Some(Err(code)) => self.doom_error_by(code, deadline).map_or(Ok(None), Err),
        }
    }

    /// The error a caller sees for a doomed record.
    pub(crate) fn doom_error(&self, code: aclError) -> SimError {
        if code == ACL_ERROR_RT_LOST_HEARTBEAT {
            return self.device().loss_error();
        }
        self.unrunnable(code)
    }

    /// [`Self::doom_error`] waiting at most until `deadline` for a lost device's running
    /// task ([`crate::device::Device::loss_error_by`]); `None` if it still runs then.
    fn doom_error_by(&self, code: aclError, deadline: Option<Instant>) -> Option<SimError> {
        if code == ACL_ERROR_RT_LOST_HEARTBEAT {
            return self.device().loss_error_by(deadline);
        }
        Some(self.unrunnable(code))
    }

    fn unrunnable(&self, code: aclError) -> SimError {
        SimError::new(
            code,
            format!(
                "the work captured by the event can never complete: stream {} of device {} {}",
                self.stream.id,
                self.device().id,
                crate::stream::doom_reason(code)
            ),
        )
    }
}

/// What a wait issued while its legacy event was reset (or before its first record) waits
/// for: the event's next record, which the gate learns when that record is made. The reference has a reset event's later waits fail
/// to go on (its figure of two streams waiting, one resetting in between): a reset clears the
/// hardware event, which only a new record sets again.
pub(crate) struct ResetGate {
    /// Set once: the next record, or `None` if the event was destroyed before one was made
    /// (nothing can set the event then, and the wait is not held for ever).
    next: OnceLock<Option<Arc<Record>>>,
    bell: Bell,
}

impl ResetGate {
    fn new() -> Self {
        Self {
            next: OnceLock::new(),
            bell: Bell::new(),
        }
    }

    fn open(&self, next: Option<Arc<Record>>) {
        let _ = self.next.set(next);
        self.bell.ring();
    }

    /// What the gate opened on, once it has.
    pub(crate) fn next(&self) -> Option<&Option<Arc<Record>>> {
        self.next.get()
    }

    /// What a wait for the gate to open listens to.
    pub(crate) fn listen(&self) -> Listen<'_> {
        self.bell.any()
    }
}

/// [`Event::unrecorded`]'s answer.
pub(crate) enum Unrecorded {
    /// An Ex event never recorded, or a destroyed event (nothing can record it any more): no
    /// wait.
    Nothing,
    /// A legacy event never recorded, or reset since its last record: the wait is for the
    /// next record.
    Gate(Arc<ResetGate>),
    /// Recorded since the caller found no record: the wait is for that record.
    Recorded(Arc<Record>),
}

/// Events holding a hardware event that one device supports at once (Atlas A2).
pub(crate) const MAX_EVENTS_PER_DEVICE: u64 = 65536;

/// An event (aclrtCreateEvent*).
pub(crate) struct Event {
    pub(crate) device: Arc<Device>,
    /// Unique among the device's events (aclrtGetEventId).
    pub(crate) id: u32,
    pub(crate) flags: u32,
    /// Created with aclrtCreateEventExWithFlag ("new mode").
    pub(crate) ex: bool,
    current: Mutex<Option<Arc<Record>>>,
    /// Set from its creation for a waitable legacy event and by an executed reset of a
    /// recorded event, until its next record (locked after `current`).
    gate: Mutex<Option<Arc<ResetGate>>>,
    /// Set by aclrtDestroyEvent (under `gate`): a reset still queued then leaves no gate.
    destroyed: AtomicBool,
    /// The flags of the first aclrtRecordEventWithFlag and aclrtStreamWaitEventWithFlag on
    /// it: later calls must pass the same.
    pub(crate) record_flag: OnceLock<u32>,
    pub(crate) wait_flag: OnceLock<u32>,
    /// An ACL_EVENT_IPC event's record counters, shared with other processes since its first
    /// export (or since it was opened from another process's handle).
    shared: OnceLock<Arc<SharedEvent>>,
    /// The key its first export published (aclrtIpcGetEventHandle hands out the same one).
    key: OnceLock<String>,
    /// One more reference for each wait task on the event (aclrtStreamWaitEvent) still in its
    /// stream: the task drops it before it counts as finished (aclrtQueryEventWaitStatus).
    waits: Arc<()>,
    /// The hardware event it holds (waitable legacy and EXTERNAL events), shared with its
    /// records not completed yet.
    hardware: Option<Arc<HardwareEvent>>,
}

/// Where the latest record of an event is, for a wait, sync or query.
pub(crate) enum Latest {
    /// Never recorded (or reset).
    Never,
    /// A record this process made, the event's latest.
    Local(Arc<Record>),
    /// Record number `n` of a shared event, made by another process (or made here, but only
    /// the counters tell).
    Shared(Arc<SharedEvent>, u64),
}

impl Event {
    /// An event of `device`; a legacy one that can be waited on, or an EXTERNAL one, takes one
    /// of the device's [`MAX_EVENTS_PER_DEVICE`] hardware events (ACL_ERROR_RT_NO_EVENT_RESOURCE
    /// when none is left), as CANN limits only those. An Ex event takes none: the reference
    /// says its creation is not limited by the hardware (its SYNC resource is taken by each
    /// record, which the simulator does not count).
    pub(crate) fn new(device: Arc<Device>, flags: u32, ex: bool) -> Res<Self> {
        let hardware = match holds_hardware_event(flags, ex) {
            true => Some(HardwareEvent::take(&device)?),
            false => None,
        };
        device.live_events.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            id: device.next_event_id.fetch_add(1, Ordering::Relaxed),
            device,
            flags,
            ex,
            current: Mutex::new(None),
            // A legacy event starts as a reset leaves it (the reference's reset "restores the
            // initial state", after which a wait cannot go on): its waits are held until its
            // first record. An Ex event's wait before any record has no work to wait for.
            gate: Mutex::new((!ex && waitable(flags)).then(|| Arc::new(ResetGate::new()))),
            destroyed: AtomicBool::new(false),
            record_flag: OnceLock::new(),
            wait_flag: OnceLock::new(),
            shared: OnceLock::new(),
            key: OnceLock::new(),
            waits: Arc::new(()),
            hardware,
        })
    }

    /// An ACL_EVENT_IPC Ex event of `device` whose records are those of `shared`, opened from
    /// another process's handle.
    pub(crate) fn opened(device: Arc<Device>, shared: Arc<SharedEvent>) -> Res<Self> {
        let event = Self::new(device, ACL_EVENT_IPC, true)?;
        let _ = event.shared.set(shared);
        Ok(event)
    }

    /// The key the event is exported under: at the first call its shared record counters are
    /// made (unless it was opened from another process's, which it already has) and
    /// `publish` exports them under a new key, which every later call returns. Records made
    /// before the first export stay this process's own, which its waits still see.
    pub(crate) fn export(&self, publish: impl FnOnce(&SharedEvent) -> Res<String>) -> Res<String> {
        static EXPORTING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = lock(&EXPORTING);
        if let Some(key) = self.key.get() {
            return Ok(key.clone());
        }
        // Shared before it is published: a record made once another process can open the key
        // must be numbered in the counters that process sees.
        let shared = match self.shared.get() {
            Some(shared) => shared.clone(),
            None => {
                let shared = SharedEvent::create()?;
                let _ = self.shared.set(shared.clone());
                shared
            }
        };
        let key = publish(&shared)?;
        let _ = self.key.set(key.clone());
        Ok(key)
    }

    /// The shared record counters, if the event is shared.
    pub(crate) fn shared(&self) -> Option<&Arc<SharedEvent>> {
        self.shared.get()
    }

    /// The latest record. For a shared event that is this process's current record when that
    /// is the latest of all processes' records, else the counters' latest number.
    pub(crate) fn latest(&self) -> Latest {
        let current = self.current();
        if let Some(shared) = self.shared() {
            let n = shared.latest();
            if current
                .as_ref()
                .map_or(0, |record| record.number_in_shared())
                != n
            {
                return Latest::Shared(shared.clone(), n);
            }
        }
        current.map_or(Latest::Never, Latest::Local)
    }

    /// A reference a wait task on the event holds until it has left its stream.
    pub(crate) fn wait_ticket(&self) -> Arc<()> {
        self.waits.clone()
    }

    /// Whether a wait task on the event is still in its stream (queued, waiting or running).
    pub(crate) fn waits_pending(&self) -> bool {
        Arc::strong_count(&self.waits) > 1
    }

    /// Whether other streams may wait on it (and it may be reset).
    pub(crate) fn waitable(&self) -> bool {
        waitable(self.flags)
    }

    /// The record the event points at (`None`: never recorded, or reset).
    pub(crate) fn current(&self) -> Option<Arc<Record>> {
        lock(&self.current).clone()
    }

    /// Makes `record` the event's latest record; returns the one it replaces. It is the
    /// record the waits issued since a reset wait for, unless it went into a capture: that
    /// one never runs itself, and the waits wait for a record that does (one of its replays).
    pub(crate) fn set_current(&self, record: Arc<Record>) -> Option<Arc<Record>> {
        let mut current = lock(&self.current);
        if !record.is_captured()
            && let Some(gate) = lock(&self.gate).take()
        {
            gate.open(Some(record.clone()));
        }
        current.replace(record)
    }

    /// An executed aclrtResetEvent: no record any more, unless the event was recorded again
    /// after the reset was submitted. A reset of a recorded event leaves a gate for the waits
    /// issued until its next record.
    pub(crate) fn reset_if(&self, captured: Option<&Arc<Record>>) {
        let mut current = lock(&self.current);
        let unchanged = match (current.as_ref(), captured) {
            (Some(now), Some(then)) => Arc::ptr_eq(now, then),
            (None, None) => true,
            _ => false,
        };
        if unchanged && current.take().is_some() {
            let mut gate = lock(&self.gate);
            if !self.destroyed.load(Ordering::Relaxed) {
                gate.get_or_insert_with(|| Arc::new(ResetGate::new()));
            }
        }
    }

    /// aclrtDestroyEvent: nothing can record the event any more, so the waits held at its
    /// gate go on. Not left to the event's drop: a task still queued (a reset) may keep the
    /// event alive for as long as its stream is held.
    pub(crate) fn destroy(&self) {
        let mut gate = lock(&self.gate);
        self.destroyed.store(true, Ordering::Relaxed);
        if let Some(gate) = gate.take() {
            gate.open(None);
        }
    }

    /// What a wait issued now on the event, found without a record ([`Latest::Never`]),
    /// waits for: decided under the event's lock, since a record may have been made since.
    pub(crate) fn unrecorded(&self) -> Unrecorded {
        let current = lock(&self.current);
        match &*current {
            Some(record) => Unrecorded::Recorded(record.clone()),
            None => lock(&self.gate)
                .clone()
                .map_or(Unrecorded::Nothing, Unrecorded::Gate),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        self.device.live_events.fetch_sub(1, Ordering::Relaxed);
    }
}

fn waitable(flags: u32) -> bool {
    // Legacy aclrtCreateEvent events carry the internal DDSYNC flag; WithFlag/Ex events need
    // ACL_EVENT_SYNC, or ACL_EVENT_IPC, whose point is other processes' waits.
    flags & ACL_EVENT_SYNC != 0 || flags == LEGACY_DEFAULT_FLAGS || flags == ACL_EVENT_IPC
}

/// Whether an event with these flags, created by the Ex function or not, takes one of the
/// device's hardware events.
fn holds_hardware_event(flags: u32, ex: bool) -> bool {
    !ex && (waitable(flags) || flags & ACL_EVENT_EXTERNAL != 0)
}

/// Flags of a legacy aclrtCreateEvent event: the runtime's DDSYNC (0x4, internal) | TIME_LINE
/// | STREAM_MARK.
pub(crate) const LEGACY_DEFAULT_FLAGS: u32 =
    0x4 | ACL_EVENT_TIME_LINE | ACL_EVENT_CAPTURE_STREAM_PROGRESS;
