//! The reactor: one thread that polls the oldest pending event of every active stream and
//! completes the operations whose events have completed.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use npu_core::{Completion, Error, Result};

use crate::event::query_event;
use crate::event_pool::PooledEvent;
use crate::strategy::{self, CompletionStrategy, OpInfo};
use crate::stream::{Queue, StreamShared};

mod backoff;
mod stats;
mod wakeup;

#[cfg(test)]
mod model;

use backoff::Backoff;
use stats::Counters;
pub use stats::ReactorStats;
use wakeup::Wakeup;

/// Std-backed primitives for [`wakeup`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::atomic::{AtomicU8, Ordering};
}

/// A stream without progress for this long is health-checked (see [`stream_failure`]).
const PROBE_AFTER: Duration = Duration::from_millis(10);
/// Probes of a stream that keeps running without progress grow apart up to this interval:
/// each one may wait [`CONFIRM_MS`] on the reactor thread.
const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(160);
/// How long a probe waits for a stream's oldest pending event to tell a dead stream (the wait
/// fails at once) from one that still runs (the wait times out). ACL's minimum timeout.
const CONFIRM_MS: i32 = 1;

/// One operation the reactor is waiting for.
pub(crate) struct Pending {
    event: PooledEvent,
    completion: Completion,
    op: OpInfo,
}

/// The process-wide reactor, once an `EventPoll` operation has started it.
static REACTOR: OnceLock<&'static Reactor> = OnceLock::new();

/// The process-wide reactor.
pub(crate) struct Reactor {
    /// Streams that went from no pending operation to one, not yet picked up by the thread.
    inbox: Mutex<Vec<Arc<StreamShared>>>,
    wakeup: Wakeup,
    thread: OnceLock<Thread>,
    counters: Counters,
}

impl Reactor {
    /// The reactor, starting its thread on first use.
    pub(crate) fn get() -> &'static Reactor {
        REACTOR.get_or_init(|| {
            let reactor: &'static Reactor = Box::leak(Box::new(Reactor {
                inbox: Mutex::new(Vec::new()),
                wakeup: Wakeup::new(),
                thread: OnceLock::new(),
                counters: Counters::default(),
            }));
            match std::thread::Builder::new()
                .name("npu-reactor".into())
                .spawn(|| {
                    precise_timers();
                    reactor.run()
                }) {
                Ok(handle) => {
                    let _ = reactor.thread.set(handle.thread().clone());
                }
                Err(err) => tracing::error!(%err, "cannot start the npu-reactor thread"),
            }
            reactor
        })
    }

    /// A snapshot of the reactor's counters; all zero if it never started (asking does not
    /// start it).
    pub(crate) fn stats() -> ReactorStats {
        REACTOR
            .get()
            .map_or_else(ReactorStats::default, |reactor| reactor.counters.snapshot())
    }

    fn register(&self, stream: &Arc<StreamShared>, pending: Pending) -> Result<()> {
        if self.thread.get().is_none() {
            return Err(Error::invalid(
                "Strategy::EventPoll",
                "reactor",
                "the reactor thread could not be started",
            ));
        }
        self.counters.registered();
        let activate = {
            let mut queue = lock_queue(stream);
            queue.pending.push_back(pending);
            !std::mem::replace(&mut queue.in_reactor, true)
        };
        if activate {
            self.inbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(stream.clone());
            if self.wakeup.notify() {
                if let Some(thread) = self.thread.get() {
                    thread.unpark();
                }
            }
        }
        Ok(())
    }

    fn run(&self) {
        let mut active: Vec<Active> = Vec::new();
        let mut finished: Vec<(Completion, Result<()>)> = Vec::new();
        let mut retired: Vec<Arc<StreamShared>> = Vec::new();
        let mut backoff = Backoff::new();
        loop {
            if self.wakeup.take_notification() {
                self.adopt(&mut active);
            }
            let now = Instant::now();
            let mut progressed = false;
            active.retain_mut(|stream| {
                let keep = self.poll_stream(stream, now, &mut finished, &mut progressed);
                if !keep {
                    retired.push(stream.stream.clone());
                }
                keep
            });
            // Wake tasks with no lock held; their buffers are released on the reaper.
            for (completion, result) in finished.drain(..) {
                completion.complete(result);
            }
            retire(&mut retired);
            if active.is_empty() {
                self.counters.parked();
                if self.wakeup.sleep(std::thread::park) {
                    self.adopt(&mut active);
                }
                backoff.reset();
            } else if progressed {
                backoff.reset();
            } else if let Some(timeout) = backoff.next() {
                self.counters.parked();
                if self.wakeup.sleep(|| std::thread::park_timeout(timeout)) {
                    self.adopt(&mut active);
                }
            }
        }
    }

    fn adopt(&self, active: &mut Vec<Active>) {
        let now = Instant::now();
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        active.extend(inbox.drain(..).map(|stream| Active {
            stream,
            health: Health::new(now),
        }));
    }

    /// Completes what finished on one stream. Returns whether the stream stays active.
    fn poll_stream(
        &self,
        active: &mut Active,
        now: Instant,
        finished: &mut Vec<(Completion, Result<()>)>,
        progressed: &mut bool,
    ) -> bool {
        let Active { stream, health } = active;
        let mut next = head(&mut lock_queue(stream));
        while let Some(oldest) = next {
            self.counters.queried();
            next = match query_event(stream.context.runtime(), oldest) {
                Ok(true) => {
                    let (done, next) = advance(stream);
                    if let Some(pending) = done {
                        let result = strategy::settle(pending.event, pending.op.api);
                        finished.push((pending.completion, stream.finish(pending.op, result)));
                        self.counters.completed();
                    }
                    health.progressed(now);
                    *progressed = true;
                    next
                }
                Ok(false) => {
                    if let Err(err) = health.probe(stream, now, oldest) {
                        self.fail_all(stream, err, finished);
                    }
                    return true;
                }
                // A failing query means the event or the whole stream is broken; the stream's
                // own status tells which.
                Err(err) => match stream_failure(stream, oldest) {
                    Err(stream_err) => {
                        self.fail_all(stream, stream_err, finished);
                        head(&mut lock_queue(stream))
                    }
                    Ok(()) => {
                        let (done, next) = advance(stream);
                        if let Some(pending) = done {
                            let result = Err(strategy::fail(pending.event, err, pending.op.api));
                            finished.push((pending.completion, stream.finish(pending.op, result)));
                            self.counters.completed();
                        }
                        next
                    }
                },
            };
        }
        false
    }

    /// Fails every pending operation of a stream whose device work can no longer complete.
    fn fail_all(
        &self,
        stream: &StreamShared,
        err: Error,
        finished: &mut Vec<(Completion, Result<()>)>,
    ) {
        let drained: Vec<Pending> = { lock_queue(stream).pending.drain(..).collect() };
        tracing::warn!(%err, stream = stream.id, failed = drained.len(), "stream failed");
        for pending in drained {
            let result = Err(strategy::fail(pending.event, err.clone(), pending.op.api));
            finished.push((pending.completion, stream.finish(pending.op, result)));
            self.counters.completed();
        }
    }
}

impl CompletionStrategy for Reactor {
    fn watch(&self, stream: &Arc<StreamShared>, op: OpInfo, completion: Completion) -> Result<()> {
        let event = strategy::record(stream)?;
        self.register(
            stream,
            Pending {
                event,
                completion,
                op,
            },
        )
    }
}

/// A stream the reactor is watching.
struct Active {
    stream: Arc<StreamShared>,
    health: Health,
}

/// When a stream without progress is next health-checked. Apart from the stream so that
/// probing (`&mut Health`) and the stream (`&StreamShared`) borrow separately.
struct Health {
    last_progress: Instant,
    last_probe: Option<Instant>,
    /// The current probe interval: [`PROBE_AFTER`], doubled after each probe that found the
    /// stream alive, back to [`PROBE_AFTER`] on progress.
    probe_every: Duration,
}

impl Health {
    fn new(now: Instant) -> Self {
        Health {
            last_progress: now,
            last_probe: None,
            probe_every: PROBE_AFTER,
        }
    }

    fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
        self.probe_every = PROBE_AFTER;
    }

    /// Health-checks a stream that has made no progress for a while; `head` is its oldest
    /// pending event.
    fn probe(
        &mut self,
        stream: &StreamShared,
        now: Instant,
        head: npu_core::ffi::aclrtEvent,
    ) -> Result<()> {
        let every = self.probe_every;
        let due = now.duration_since(self.last_progress) >= every
            && self
                .last_probe
                .is_none_or(|at| now.duration_since(at) >= every);
        if !due {
            return Ok(());
        }
        self.last_probe = Some(now);
        stream_failure(stream, head)?;
        self.probe_every = (every * 2).min(MAX_PROBE_INTERVAL);
        Ok(())
    }
}

fn lock_queue(stream: &StreamShared) -> MutexGuard<'_, Queue> {
    stream.queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// The event of the oldest pending operation; with none, the stream leaves the reactor (under
/// the same lock, so a registration after it re-activates the stream).
fn head(queue: &mut Queue) -> Option<npu_core::ffi::aclrtEvent> {
    let head = queue.pending.front().map(|pending| pending.event.handle());
    if head.is_none() {
        queue.in_reactor = false;
    }
    head
}

/// Takes the oldest pending operation, which has finished, and returns it with the next head,
/// under one lock.
fn advance(stream: &StreamShared) -> (Option<Pending>, Option<npu_core::ffi::aclrtEvent>) {
    let mut queue = lock_queue(stream);
    let done = queue.pending.pop_front();
    (done, head(&mut queue))
}

/// `Err` when the work pending on a stream can never complete (device lost, context stopped on
/// a failure), with the device's error; `oldest` is the stream's oldest pending event.
///
/// aclrtStreamQuery alone cannot tell: a runtime may report the stream's first task failure
/// through it until aclrtSynchronizeStream clears it (the reference leaves this open; npu-sim
/// fails the query only for work that can never complete), and in ACL_CONTINUE_ON_FAILURE
/// mode the work queued after a failed task still runs. Failing the futures of that work would release their buffers
/// while the device still uses them. So an error from the query is confirmed on the oldest
/// pending event: a short wait for it fails at once if the work is dead, and succeeds or
/// times out if it completed or still runs. Runtimes without the timed wait fall back to
/// trusting the query.
pub(crate) fn stream_failure(
    stream: &StreamShared,
    oldest: npu_core::ffi::aclrtEvent,
) -> Result<()> {
    use npu_core::ffi;
    let err = match stream_status(stream) {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    let runtime = stream.context.runtime();
    let Some(wait) = runtime.api().aclrtSynchronizeEventWithTimeout else {
        return Err(err);
    };
    // SAFETY: the event is alive (owned by its pending entry); no context is needed.
    let code = unsafe { wait(oldest, CONFIRM_MS) };
    // `check` also takes the runtime's message about an expected timeout off this thread, so
    // that it is not attached to a later, unrelated error.
    match runtime.check("aclrtSynchronizeEventWithTimeout", code) {
        Err(_) if code == ffi::ACL_ERROR_RT_EVENT_SYNC_TIMEOUT => Ok(()),
        // The wait also fails for a completed event whose captured work failed: that
        // operation is settled by the next pass like any other.
        Err(_) if query_event(runtime, oldest).unwrap_or(false) => Ok(()),
        result => result,
    }
}

/// The stream's status: `Err` with its first unreported task failure, if any.
fn stream_status(stream: &StreamShared) -> Result<()> {
    let runtime = stream.context.runtime();
    let Some(stream_query) = runtime.api().aclrtStreamQuery else {
        return Ok(());
    };
    let mut status = npu_core::ffi::ACL_STREAM_STATUS_NOT_READY;
    // SAFETY: the stream is alive (`stream`); aclrtStreamQuery checks no context.
    let code = unsafe { stream_query(stream.handle, &mut status) };
    runtime.check("aclrtStreamQuery", code)
}

/// Linux lets a timed sleep overrun by the thread's timer slack, 50 µs by default: more than
/// the first parks themselves. The reactor's parks are its latency, so it asks for 1 µs.
fn precise_timers() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
        let result = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong) };
        if result != 0 {
            tracing::debug!("the reactor keeps the default timer slack");
        }
    }
}

/// Drops streams the reactor no longer watches. The last reference destroys the ACL stream,
/// which may wait for the device, so that happens on the reaper thread, not here.
fn retire(retired: &mut Vec<Arc<StreamShared>>) {
    for stream in retired.drain(..) {
        if Arc::strong_count(&stream) == 1 {
            npu_core::reaper::release_later(move || drop(stream));
        }
    }
}
