//! The reactor: one thread that polls the oldest pending event of every active stream and
//! completes the operations whose events have completed.

use std::collections::VecDeque;
use std::sync::{Arc, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use npu_core::{Completer, Completion, Error};

use crate::event::{event_complete, query_event};
use crate::event_pool::PooledEvent;
use crate::sentinel::{self, Dead, Found, Verdict};
use crate::strategy::{self, CompletionStrategy, OpInfo, Unwatched};
use crate::stream::{Queue, StreamShared};

mod pace;
mod roster;
mod stats;
mod wakeup;

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

pub(crate) use pace::Pace;
use pace::Plan;
use roster::{Joined, Member, Queued, Roster};
use stats::Counters;
pub use stats::ReactorStats;
use wakeup::Wakeup;

/// Std-backed primitives for [`wakeup`] and [`roster`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

/// A stream without progress for this long is health-checked by the sentinel.
const PROBE_AFTER: Duration = Duration::from_millis(10);
/// The longest a fault notice keeps a stream suspect (queried on every pass, probed as soon as
/// the last probe answered) without progress or a dead verdict. The notice names no operation:
/// the failed one may have completed long before the reactor reads it (a `BlockingSync` wait
/// completed it, and the notice waited until the reactor took a later operation of the stream
/// over), or its stream may then be held up by work that takes as long as it likes. Past this,
/// the stream is an ordinary one without progress, which the sentinel probes from
/// [`PROBE_AFTER`] on anyway.
const SUSPECT_FOR: Duration = PROBE_AFTER;
/// Probes of a stream that keeps running without progress grow apart up to this interval.
const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(160);
/// A query due within this long is waited for by yielding the core rather than parking: a
/// timed park wakes tens of µs late on a busy host, a yield hands the core to whatever else
/// wants it and returns at once when nothing does. Longer waits park until this long before
/// the query is due.
const YIELD_WINDOW: Duration = Duration::from_micros(50);
/// How long the reactor keeps passing (yielding between passes) after its last stream went
/// idle, before it parks until woken. A caller awaiting one operation at a time submits the
/// next one within a few µs of the last completion; a reactor still passing picks it up on
/// its next pass, while a parked one must first be woken, which costs tens of µs on a busy
/// host. Bounded, so an idle reactor still costs nothing.
const LINGER: Duration = Duration::from_micros(50);
/// The bound on the synchronisation that reads a completed event's result: the least
/// timeout the runtime takes (0 is refused). It is reached only when the device was lost
/// after the event completed.
const SETTLE_MS: i32 = 1;

/// One operation waiting for its event.
pub(crate) struct Pending {
    pub(crate) event: PooledEvent,
    completer: Completer,
    pub(crate) op: OpInfo,
    /// The operation submitted before it, when strategies may finish them out of order
    /// (`BlockingSync`): this one completes only after it.
    after: Option<Completion>,
    /// When the reactor took it on: on an idle stream, when it became the stream's head.
    registered: Instant,
}

impl Pending {
    pub(crate) fn new(
        event: PooledEvent,
        completer: Completer,
        op: OpInfo,
        after: Option<Completion>,
    ) -> Self {
        Pending {
            event,
            completer,
            op,
            after,
            registered: Instant::now(),
        }
    }

    /// The operation submitted before it, if it has not completed yet.
    pub(crate) fn unfinished_predecessor(&self) -> Option<Completion> {
        self.after.clone().filter(|after| !after.is_complete())
    }

    /// Gives the operation up with no thread left to watch it (see `sentinel::spawn_fallback`):
    /// its event is leaked, since its record may still be queued, and its completion abandoned,
    /// which leaves every release recorded against it undone and wakes a thread blocked on it
    /// with an error.
    pub(crate) fn abandon(self) {
        self.event.leak();
        drop(self.completer);
    }

    /// Completes an operation whose event a query (or its callback) found complete, with the
    /// result the event captured.
    ///
    /// The synchronisation that reads that result returns at once for a completed event, but
    /// a device lost since the query may make the runtime wait for the lost device's running
    /// work first (the simulator does, and CANN's untimed wait is not bounded either): on the
    /// reactor that would stall every device. So the wait is bounded, and an operation it
    /// runs out on goes to the sentinel, which waits in bounded slices and fails it once its
    /// stream is found dead.
    pub(crate) fn settle(self, stream: &Arc<StreamShared>) {
        if let Some(pending) = self.wait_for(stream, SETTLE_MS) {
            sentinel::watch(stream.clone(), pending);
        }
    }

    /// Fails an operation whose stream can no longer run it (or whose event reported `err`).
    pub(crate) fn fail(self, stream: &Arc<StreamShared>, err: Error) {
        // Its event captured the failure: not recycled.
        self.event.discard();
        strategy::fail_after(stream, self.op, self.completer, err, self.after);
    }

    /// The completer of an operation no strategy took on (the stream is drained instead); its
    /// event, recorded but never to be waited on, is not recycled.
    pub(crate) fn into_completer(self) -> Completer {
        let (event, completer) = self.into_parts();
        event.discard();
        completer
    }

    /// [`into_completer`](Pending::into_completer) for a caller that may not destroy the event
    /// yet (another thread may be using its handle): the event, to be discarded once nothing
    /// uses it, and the completer.
    pub(crate) fn into_parts(self) -> (PooledEvent, Completer) {
        (self.event, self.completer)
    }

    /// Waits up to `timeout_ms` for the event: completes the operation and returns `None` if
    /// it completed, gives it back if not.
    ///
    /// A failed wait fails the operation only once the event's record is done (the failure is
    /// then the one the record captured). A wait can fail before that, for reasons that are
    /// not the operation's (the runtime's view of the thread, an earlier asynchronous error):
    /// failing it then would hand its buffers back while the device may still use them, so it
    /// is given back, and whoever takes it (the reactor, the sentinel) fails it only once its
    /// stream is found dead, as for a failing query.
    pub(crate) fn wait_for(self, stream: &Arc<StreamShared>, timeout_ms: i32) -> Option<Self> {
        match strategy::wait_event(&self.event, timeout_ms) {
            None => Some(self),
            Some(Ok(())) => {
                strategy::complete_after(stream, self.op, self.completer, Ok(()), self.after);
                None
            }
            Some(Err(err)) => {
                let runtime = stream.context.runtime();
                if !event_complete(runtime, self.event.handle()) {
                    return Some(self);
                }
                self.fail(stream, err);
                None
            }
        }
    }
}

/// What the reactor found out about an operation in a pass, acted on outside every lock.
enum Outcome {
    /// Its event completed.
    Done,
    /// Its stream can no longer run it.
    Failed(Error),
}

impl Outcome {
    fn apply(self, pending: Pending, stream: &Arc<StreamShared>) {
        match self {
            Outcome::Done => pending.settle(stream),
            Outcome::Failed(err) => pending.fail(stream, err),
        }
    }
}

/// Operations found done or failed in a pass, completed at its end.
type Finished = VecDeque<(Arc<StreamShared>, Pending, Outcome)>;

/// What the reactor thread holds. Owned outside its loop, so that a panic in the loop leaves
/// it to [`Reactor::stop`] instead of dropping it.
#[derive(Default)]
struct Watched {
    active: Vec<Active>,
    finished: Finished,
    /// Streams that left the reactor in a pass, released at its end.
    retired: Vec<Arc<StreamShared>>,
}

/// The process-wide reactor, once an `EventPoll` operation has started it.
static REACTOR: OnceLock<&'static Reactor> = OnceLock::new();

/// The process-wide reactor.
pub(crate) struct Reactor {
    /// The streams activated for the thread to pick up, and whether it stopped.
    roster: Roster<Arc<StreamShared>>,
    wakeup: Wakeup,
    thread: OnceLock<Thread>,
    counters: Counters,
}

impl Reactor {
    /// The reactor, starting its thread on first use; `None` in a forked child whose parent
    /// had not started it (see `npu_core::fork::start_once`).
    pub(crate) fn get() -> Option<&'static Reactor> {
        let started = npu_core::fork::start_once(crate::SEAL, &REACTOR, || {
            #[cfg(test)]
            crate::test_support::held::here();
            let reactor: &'static Reactor = Box::leak(Box::new(Reactor::unstarted()));
            match std::thread::Builder::new()
                .name("npu-reactor".into())
                .spawn(|| {
                    precise_timers();
                    // Outside the containment, so that what the thread watched survives it.
                    let mut watched = Watched::default();
                    // Wakers and completions are contained where they run; this is the last
                    // line: a reactor that stopped hands over what it watched and refuses new
                    // work, instead of stranding it.
                    // Marked shared for its life: a context or runtime whose last handle
                    // goes here (a subscriber's callback, say) is torn down elsewhere.
                    let run = || reactor.run(&mut watched);
                    let stopped = npu_core::contain::contained(crate::SEAL, || {
                        npu_core::reaper::as_shared_thread(crate::SEAL, run)
                    });
                    if stopped {
                        npu_core::log!(
                            error,
                            "the npu-reactor thread panicked; EventPoll is unavailable"
                        );
                    }
                    // Completes and hands over what it watched: still a shared thread.
                    npu_core::reaper::as_shared_thread(crate::SEAL, || reactor.stop(watched));
                }) {
                Ok(handle) => {
                    let _ = reactor.thread.set(handle.thread().clone());
                }
                Err(err) => {
                    reactor.stop(Watched::default());
                    npu_core::log!(error, %err, "cannot start the npu-reactor thread");
                }
            }
            reactor
        });
        started.copied()
    }

    /// A reactor whose thread has not started.
    fn unstarted() -> Reactor {
        Reactor {
            roster: Roster::new(),
            wakeup: Wakeup::new(),
            thread: OnceLock::new(),
            counters: Counters::default(),
        }
    }

    /// Marks the reactor stopped and hands over what it held: the operations it had found
    /// done or failed are completed, and every operation queued on its streams (active or in
    /// the inbox) goes to the sentinel, which waits for each on its own event.
    ///
    /// Nothing is stranded: see [`Roster::register`] (the protocol, in `roster.rs`, is
    /// modelled in `model.rs`).
    fn stop(&self, watched: Watched) {
        let inboxed = self.roster.stop();
        let Watched {
            active,
            finished,
            retired,
        } = watched;
        npu_core::holds::completing(crate::SEAL, || {
            for (stream, pending, outcome) in finished {
                // If completing panics again, the operation is abandoned: its memory leaks.
                npu_core::contain::contained(crate::SEAL, || outcome.apply(pending, &stream));
                strategy::release_stream(stream);
            }
            let streams = active.into_iter().map(|active| active.stream);
            streams.chain(inboxed).for_each(hand_over);
            retired.into_iter().for_each(strategy::release_stream);
        });
    }

    /// A snapshot of the reactor's counters; all zero if it never started (asking does not
    /// start it).
    pub(crate) fn stats() -> ReactorStats {
        REACTOR
            .get()
            .map_or_else(ReactorStats::default, |reactor| reactor.counters.snapshot())
    }

    /// Hands an operation to the reactor; gives it back if the reactor thread is not running.
    fn register(
        &self,
        stream: &Arc<StreamShared>,
        mut pending: Pending,
    ) -> std::result::Result<(), Pending> {
        // An operation another strategy waited for first became the head long ago; timing it
        // from then would teach the stream's pace the other strategy's wait. Read before the
        // queue lock, which the reactor takes on every query.
        pending.registered = Instant::now();
        match self
            .roster
            .register(stream, pending, || self.counters.registered())?
        {
            Joined::Queued => {}
            Joined::Activated => self.nudge(),
            Joined::Orphaned => hand_over(stream.clone()),
        }
        Ok(())
    }

    /// Wakes the reactor if it was ever started; for the runtime's exception callback, which
    /// must not start a thread.
    pub(crate) fn nudge_if_running() {
        if let Some(reactor) = REACTOR.get() {
            reactor.nudge();
        }
    }

    /// Makes the reactor look at its streams now (after an abort marked operations discarded,
    /// or a fault was reported).
    pub(crate) fn nudge(&self) {
        if self.wakeup.notify()
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    /// Takes over an operation another strategy was waiting for (a blocking wait that ran out
    /// of time, or never ran); the sentinel waits for it if the reactor cannot.
    pub(crate) fn adopt_pending(stream: &Arc<StreamShared>, pending: Pending) {
        let Some(reactor) = Reactor::get() else {
            // As a child whose reactor the parent started finds it: a thread it does not
            // have, so the operation is never watched (a wait for it polled in the child is
            // `Error::Forked`, and what it holds is leaked, as the rule for a forked child
            // has it).
            std::mem::forget(pending);
            return;
        };
        if let Err(pending) = reactor.register(stream, pending) {
            sentinel::watch(stream.clone(), pending);
        }
    }

    /// The reactor thread's loop, over what the caller holds (so that [`stop`](Reactor::stop)
    /// can hand it over if the loop ever panics).
    fn run(&self, watched: &mut Watched) {
        let Watched {
            active,
            finished,
            retired,
        } = watched;
        let mut busy_until = Instant::now();
        loop {
            if self.wakeup.take_notification() {
                self.adopt(active);
            }
            let watching = !active.is_empty();
            active.retain_mut(|stream| {
                let keep = self.poll_stream(stream, finished);
                if !keep {
                    retired.push(stream.stream.clone());
                }
                keep
            });
            // Complete with no lock held; buffers are released on the reaper. Counted first,
            // so that a task woken by its completion sees it in the reactor's stats. Taken one
            // at a time, so that a panic leaves the rest to `stop`. One hold for the pass,
            // until its streams are let go.
            npu_core::holds::completing(crate::SEAL, || {
                while let Some((stream, pending, outcome)) = finished.pop_front() {
                    self.counters.completed();
                    outcome.apply(pending, &stream);
                    strategy::release_stream(stream);
                }
                while let Some(stream) = retired.pop() {
                    strategy::release_stream(stream);
                }
            });
            let now = Instant::now();
            // The linger runs from the last pass that had a stream to watch, including one
            // that found its only operation done at once: the reactor woken for that
            // operation is then still passing when its caller submits the next.
            if watching {
                busy_until = now + LINGER;
            }
            let due = active.iter().map(|stream| match stream.health.suspect {
                true => now,
                false => stream.plan.due,
            });
            let Some(due) = due.min() else {
                if now < busy_until {
                    std::thread::yield_now();
                    continue;
                }
                self.counters.parked();
                if self.wakeup.sleep(std::thread::park) {
                    self.adopt(active);
                }
                continue;
            };
            let wait = due.saturating_duration_since(now);
            if wait > YIELD_WINDOW {
                self.counters.parked();
                if self
                    .wakeup
                    .sleep(|| std::thread::park_timeout(wait - YIELD_WINDOW))
                {
                    self.adopt(active);
                }
            } else if !wait.is_zero() {
                std::thread::yield_now();
            }
        }
    }

    fn adopt(&self, active: &mut Vec<Active>) {
        let streams = self.roster.adopt();
        let now = Instant::now();
        active.extend(streams.into_iter().map(|stream| {
            let plan = {
                let queue = lock_queue(&stream);
                let since = queue.pending.front().map_or(now, |head| head.registered);
                Plan::new(since, queue.pace)
            };
            Active {
                stream,
                health: Health::new(now),
                plan,
            }
        }));
    }

    /// Collects what finished on one stream, querying its head only when its plan says so.
    /// Returns whether the stream stays active.
    fn poll_stream(&self, active: &mut Active, finished: &mut Finished) -> bool {
        let Active {
            stream,
            health,
            plan,
        } = active;
        let failed = match health.verdict() {
            Some(Err(dead)) => {
                self.fail_dead(stream, dead, finished);
                health.suspect = false;
                true
            }
            Some(Ok(alive)) => {
                health.idle_through = health.idle_through.max(alive.idle_through());
                false
            }
            None => false,
        };
        // What an abort discarded fails at once, due or not: the abort woke the reactor for it.
        // So does what a probe found discarded by an abort npu-rs never heard of.
        self.fail_aborted(stream, &mut health.idle_through, finished);
        let mut now = Instant::now();
        // A fault the exception callback reported: look now, and keep looking (and asking
        // the sentinel) until the stream progresses or is found dead, for `SUSPECT_FOR` at
        // most.
        // Read, then cleared: a notice landing in between finds the stream suspect already.
        // (The wake-up it rides on is modelled in `model.rs`.)
        if stream.fault_noticed.load(sync::Ordering::Acquire) {
            stream.fault_noticed.store(false, sync::Ordering::Release);
            self.counters.fault_noticed();
            health.suspect = true;
            health.suspected_at = now;
        } else if health.suspect && now.duration_since(health.suspected_at) >= SUSPECT_FOR {
            // A suspect stream is never parked for: the suspicion must end, or the reactor
            // spins for as long as the stream's head is held up.
            health.suspect = false;
        }
        if !failed && !health.suspect && !plan.is_due(now) {
            return true;
        }
        let mut next = head(&mut lock_queue(stream));
        while let Some(oldest) = next {
            self.counters.queried();
            match query_event(stream.context.runtime(), oldest) {
                Ok(true) => {
                    let (done, after) = advance(stream, plan);
                    if let Some(pending) = done {
                        finished.push_back((stream.clone(), pending, Outcome::Done));
                    }
                    health.progressed(now);
                    next = after;
                    // The next head may be done already (the device ran ahead of the
                    // reactor); its plan says whether to look now.
                    now = Instant::now();
                    if !plan.is_due(now) {
                        return next.is_some();
                    }
                }
                // Not done yet. A query that fails says the event or the stream is broken;
                // either way the operation completes only once its event does or the sentinel
                // finds the stream dead, never on the query's word alone.
                Ok(false) | Err(_) => {
                    plan.missed(now);
                    health.probe_if_due(stream, now);
                    return true;
                }
            }
        }
        false
    }

    /// Fails the operations an abort discarded: the oldest ones, up to the abort's mark, or up
    /// to `idle_through`, what a probe found the stream idle after (see `sentinel::Alive`: an
    /// abort npu-rs never heard of), which goes back to 0 once no operation it covers is left.
    ///
    /// The mark covers every operation watched before the abort, including ones whose work
    /// and completion record the device ran before it (this reactor had not looked yet): an
    /// operation whose event has completed was not discarded, so the failing stops there and
    /// the ordinary path settles it with the device's result. The abort has confirmed the
    /// discard before its mark moves (and the probe found the stream idle after the records
    /// up to its horizon were queued), so an event not complete now never completes. The
    /// query does not block.
    fn fail_aborted(
        &self,
        stream: &Arc<StreamShared>,
        idle_through: &mut u64,
        finished: &mut Finished,
    ) {
        if stream.aborted_through.load(sync::Ordering::Acquire) == 0 && *idle_through == 0 {
            return; // never aborted nor found idle with work: no lock on the common path
        }
        let idle = *idle_through;
        let covers = |op: OpInfo| stream.aborted(op) || (op.seq != 0 && op.seq <= idle);
        // Queried with no lock held: a query the runtime fails may run a tracing subscriber,
        // which may submit to this stream, and a registration takes the queue's lock.
        let covered: Vec<npu_core::ffi::aclrtEvent> = lock_queue(stream)
            .pending
            .iter()
            .take_while(|pending| covers(pending.op))
            .map(|pending| pending.event.handle())
            .collect();
        let runtime = stream.context.runtime();
        let discarded = covered
            .iter()
            .take_while(|&&event| !event_complete(runtime, event))
            .count();
        let mut queue = lock_queue(stream);
        // Only this thread takes operations off the front; the check keeps it so.
        for event in &covered[..discarded] {
            if queue.pending.front().map(|pending| pending.event.handle()) != Some(*event) {
                break;
            }
            if let Some(pending) = queue.pending.pop_front() {
                let err = Error::Aborted {
                    api: pending.op.api,
                };
                finished.push_back((stream.clone(), pending, Outcome::Failed(err)));
            }
        }
        // A stream's queue is in submission order: with its head past the horizon, nothing
        // queued is covered. One it covers that joins later (a `BlockingSync` hand-over) waits
        // for the next probe, which finds the stream idle again.
        if queue.pending.front().is_none_or(|head| head.op.seq > idle) {
            *idle_through = 0;
        }
    }

    /// Fails the pending operations that a probe found queued on a dead stream; those
    /// submitted since (after an abort revived it) stay.
    fn fail_dead(&self, stream: &Arc<StreamShared>, dead: Dead, finished: &mut Finished) {
        let doomed: VecDeque<Pending> = {
            let mut queue = lock_queue(stream);
            let (doomed, kept) = std::mem::take(&mut queue.pending)
                .into_iter()
                .partition(|pending: &Pending| dead.covers(pending.op));
            queue.pending = kept;
            doomed
        };
        let err = dead.error;
        npu_core::log!(warn, %err, stream = stream.id, failed = doomed.len(), "stream failed");
        for pending in doomed {
            finished.push_back((stream.clone(), pending, Outcome::Failed(err.clone())));
        }
    }
}

impl CompletionStrategy for Reactor {
    fn watch(
        &self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completer: Completer,
    ) -> std::result::Result<(), Unwatched> {
        let (event, completer) = strategy::record(stream, completer)?;
        self.register(stream, Pending::new(event, completer, op, None))
            .map_err(|pending| Unwatched {
                completer: pending.into_completer(),
                error: Error::invalid(
                    "Strategy::EventPoll",
                    "reactor",
                    "the reactor thread is not running",
                ),
            })
    }
}

/// A stream the reactor is watching.
struct Active {
    stream: Arc<StreamShared>,
    health: Health,
    /// When its head is next queried.
    plan: Plan,
}

/// When a stream without progress is next health-checked, and the check in flight. Apart from
/// the stream so that probing (`&mut Health`) and the stream (`&StreamShared`) borrow
/// separately.
struct Health {
    last_progress: Instant,
    last_probe: Option<Instant>,
    /// The current probe interval: [`PROBE_AFTER`], doubled after each probe that found the
    /// stream alive, back to [`PROBE_AFTER`] on progress.
    probe_every: Duration,
    /// The sentinel's answer to the probe in flight, if one is.
    asked: Option<Arc<Verdict>>,
    /// A fault was reported on the stream: it is queried on every pass and probed as soon as
    /// the previous probe answered, until it progresses or is found dead, or [`SUSPECT_FOR`]
    /// has passed.
    suspect: bool,
    /// The horizon of the latest probe that found the stream idle (`sentinel::Alive`), while
    /// an operation it covers is queued; 0 otherwise.
    idle_through: u64,
    /// When the latest fault notice made the stream suspect; the suspicion ends
    /// [`SUSPECT_FOR`] later.
    suspected_at: Instant,
}

impl Health {
    fn new(now: Instant) -> Self {
        Health {
            last_progress: now,
            last_probe: None,
            probe_every: PROBE_AFTER,
            asked: None,
            suspect: false,
            suspected_at: now,
            idle_through: 0,
        }
    }

    fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
        self.probe_every = PROBE_AFTER;
        self.suspect = false;
    }

    /// The verdict of the probe in flight, once given: one lock, no ACL call.
    fn verdict(&mut self) -> Option<Found> {
        let verdict = self.asked.as_ref()?.take()?;
        self.asked = None;
        if verdict.is_ok() {
            self.probe_every = (self.probe_every * 2).min(MAX_PROBE_INTERVAL);
        }
        Some(verdict)
    }

    /// Asks the sentinel about a stream that has made no progress for a while, unless a probe
    /// is in flight or was made too recently.
    fn probe_if_due(&mut self, stream: &Arc<StreamShared>, now: Instant) {
        let every = self.probe_every;
        let due = self.asked.is_none() && self.suspect
            || self.asked.is_none()
                && now.duration_since(self.last_progress) >= every
                && self
                    .last_probe
                    .is_none_or(|at| now.duration_since(at) >= every);
        if due {
            self.last_probe = Some(now);
            self.asked = Some(sentinel::probe(stream));
        }
    }
}

/// Hands every operation queued on `stream` to the sentinel, and the stream out of the
/// reactor, for a reactor that has stopped.
fn hand_over(stream: Arc<StreamShared>) {
    let drained = roster::evict(&mut *lock_queue(&stream));
    for pending in drained {
        sentinel::watch(stream.clone(), pending);
    }
    strategy::release_stream(stream);
}

fn lock_queue(stream: &StreamShared) -> MutexGuard<'_, Queue> {
    stream.queue.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queued for Queue {
    type Op = Pending;

    fn pending(&mut self) -> &mut VecDeque<Pending> {
        &mut self.pending
    }

    fn in_reactor(&mut self) -> &mut bool {
        &mut self.in_reactor
    }
}

impl Member for Arc<StreamShared> {
    type Queue = Queue;

    fn queue(&self) -> MutexGuard<'_, Queue> {
        lock_queue(self)
    }
}

/// The event of the oldest pending operation; with none, the stream leaves the reactor
/// ([`roster::head`]).
fn head(queue: &mut Queue) -> Option<npu_core::ffi::aclrtEvent> {
    roster::head(queue).map(|pending| pending.event.handle())
}

/// Takes the oldest pending operation, found done, and returns it with the next head, under
/// one lock; the stream's pace learns from it and `plan` becomes the next head's.
///
/// The next head is taken to have started when the query that found this one done was due
/// (or when it was registered, if later), not when the reactor got to the query: a reactor
/// that fell behind then finds the heads the device finished meanwhile on its next queries,
/// instead of waiting a whole operation time for each.
fn advance(
    stream: &StreamShared,
    plan: &mut Plan,
) -> (Option<Pending>, Option<npu_core::ffi::aclrtEvent>) {
    let mut queue = lock_queue(stream);
    plan.hit(&mut queue.pace);
    let done = queue.pending.pop_front();
    let since = queue
        .pending
        .front()
        .map_or(plan.due, |next| next.registered.max(plan.due));
    *plan = Plan::new(since, queue.pace);
    (done, head(&mut queue))
}

/// Linux lets a timed sleep overrun by the thread's timer slack, 50 µs by default: more than
/// the first parks themselves. The reactor's parks are its latency, so it asks for 1 µs.
fn precise_timers() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
        let result = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong) };
        if result != 0 {
            npu_core::log!(debug, "the reactor keeps the default timer slack");
        }
    }
}
