//! The sentinel: one thread that makes the short, bounded waits on device work that the
//! reactor, the callback workers and the submitting threads must not make themselves.
//!
//! - **Probes.** Is a stream that makes no progress still alive? `aclrtStreamQuery` alone
//!   cannot tell (it keeps reporting a task failure until the stream is synchronised, and in
//!   `ACL_CONTINUE_ON_FAILURE` mode the work behind a failure still runs), so an error from it
//!   is confirmed with a 1 ms `aclrtSynchronizeStreamWithTimeout`. A probe posts its verdict
//!   into a [`Verdict`] slot that the asking thread reads on a later pass, so a faulted stream
//!   costs the reactor O(1) per pass, however many there are.
//! - **Drains.** An operation the device accepted but nothing watches (recording its event
//!   failed, or the submission's user code panicked) must not complete before the stream has
//!   run it: the sentinel waits for the stream in 1 ms slices, round-robin with every other
//!   stream's drains and probes (a stream's drains share one slice a round), then completes
//!   it, unless an operation submitted after it finished first and ended it
//!   (`stream::drains`).
//! - **Watches.** An operation whose strategy could not hand it to the reactor (its thread
//!   could not start) is waited for on its own event the same way.
//!
//! Each wait is at most [`SLICE_MS`], so one slow stream delays the others by at most that
//! much per round.

use std::collections::{HashSet, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use npu_core::holds::completing;
use npu_core::{Error, Result, ffi};

use crate::reactor::Pending;
use crate::strategy::{self, OpInfo};
use crate::stream::StreamShared;
use crate::stream::drains::{self, Drain};

/// The longest single wait the sentinel makes (ACL's smallest timeout).
pub(crate) const SLICE_MS: i32 = 1;

/// What a probe found: `Err` if the stream is dead, `Ok` if alive.
pub(crate) type Found = std::result::Result<Alive, Dead>;

/// The answer to a probe: `Some` once the sentinel has given it.
#[derive(Default)]
pub(crate) struct Verdict {
    slot: Mutex<Option<Found>>,
}

impl Verdict {
    /// The verdict, once the sentinel has given it; taking it makes room for the next probe.
    pub(crate) fn take(&self) -> Option<Found> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A verdict already given, for tests.
    #[cfg(test)]
    pub(crate) fn given(verdict: Found) -> Arc<Self> {
        let given = Arc::new(Verdict::default());
        given.give(verdict);
        given
    }

    fn give(&self, verdict: Found) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict);
    }
}

/// A probe's finding that a stream can still run its work, and whether it had none left.
///
/// `aclrtStreamQuery` reporting the stream complete means that every task submitted before
/// the query has run or was discarded (an abort npu-rs made, or one it never heard of: a
/// program's own `aclrtStreamAbort` of the raw handle, an `aclrtDeviceTaskAbort` without
/// npu-rs's callback or past its timeout). So an operation whose completion record was queued
/// before the query, and whose event is not complete when asked after it, had its record
/// discarded: the event will never complete, and the device is done with the operation's
/// memory. The event is asked only after the stream: the other way round, a record reached
/// between the two queries would pass for a discarded one.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Alive {
    /// Found idle: every operation up to this `seq` had its record queued before the query
    /// (0: not found idle, or the horizon could not be read without waiting).
    idle_through: u64,
}

impl Alive {
    /// A finding of a stream idle after its operations up to `through` were recorded, for
    /// tests.
    #[cfg(test)]
    pub(crate) fn idle(through: u64) -> Self {
        Alive {
            idle_through: through,
        }
    }

    /// The `seq` of the last operation whose record the stream had reached or discarded when
    /// the probe looked (0: none known): any of them whose event is not complete now was
    /// discarded.
    pub(crate) fn idle_through(self) -> u64 {
        self.idle_through
    }
}

/// A probe's finding that a stream was dead, and which operations that dooms.
///
/// Only those watched before the check began: the verdict is read later (on the asking
/// thread's next pass), and an abort in between revives the stream, so an operation submitted
/// after it will run and must not be failed on the old stream's word (its memory would be
/// handed back while the device still uses it).
pub(crate) struct Dead {
    pub(crate) error: Error,
    /// `OpInfo::seq` of the last operation watched before the check.
    through: u64,
}

impl Dead {
    /// A finding covering the operations up to `through`, for tests that post a verdict.
    #[cfg(test)]
    pub(crate) fn new(error: Error, through: u64) -> Self {
        Dead { error, through }
    }

    /// Whether `op` was queued on the stream the probe found dead.
    pub(crate) fn covers(&self, op: OpInfo) -> bool {
        op.seq <= self.through
    }
}

enum Job {
    Probe {
        stream: Arc<StreamShared>,
        verdict: Arc<Verdict>,
    },
    Drain {
        stream: Arc<StreamShared>,
        drain: Arc<Drain>,
    },
    Watch {
        stream: Arc<StreamShared>,
        pending: Pending,
    },
}

impl Job {
    /// Whether the job's runtime can bound its waits, which the sentinel's slices need.
    fn timed(&self) -> bool {
        let (Job::Probe { stream, .. } | Job::Drain { stream, .. } | Job::Watch { stream, .. }) =
            self;
        let api = stream.context.runtime().api();
        api.aclrtSynchronizeStreamWithTimeout.is_some()
            && api.aclrtSynchronizeEventWithTimeout.is_some()
    }
}

/// The sentinel's queue, starting its thread on first use (`None` inside if it could not
/// start); `None` in a forked child whose parent had not started it (see
/// `npu_core::fork::start_once`).
fn sender() -> Option<&'static Mutex<Option<Sender<Job>>>> {
    static SENDER: OnceLock<Mutex<Option<Sender<Job>>>> = OnceLock::new();
    npu_core::fork::start_once(crate::SEAL, &SENDER, || {
        #[cfg(test)]
        crate::test_support::held::here();
        let (tx, rx) = channel();
        let spawned = std::thread::Builder::new()
            .name("npu-sentinel".into())
            // Marked shared for its life, as the reactor.
            .spawn(move || npu_core::reaper::as_shared_thread(crate::SEAL, || run(rx)));
        match spawned {
            Ok(_) => Mutex::new(Some(tx)),
            Err(err) => {
                npu_core::log!(error, %err, "cannot start the npu-sentinel thread");
                Mutex::new(None)
            }
        }
    })
}

/// Hands a job to the sentinel; gives it back if the sentinel thread is not running, or if the
/// runtime lacks the timed waits the sentinel's slices need.
fn send(job: Job) -> std::result::Result<(), Job> {
    if !matches!(job, Job::Probe { .. }) && !job.timed() {
        return Err(job);
    }
    let Some(sender) = sender() else {
        // As a child whose sentinel the parent started finds it: a thread it does not have,
        // so the job is never run (what it holds is leaked, as the rule for a forked child
        // has it; a wait for its operation polled in the child is `Error::Forked`).
        std::mem::forget(job);
        return Ok(());
    };
    let sender = sender.lock().unwrap_or_else(|e| e.into_inner());
    match sender.as_ref() {
        Some(tx) => tx.send(job).map_err(|e| e.0),
        None => Err(job),
    }
}

/// Asks whether `stream`, whose query reported trouble or which makes no progress, can still
/// complete its work. Without a sentinel the stream is taken to be alive: its operations then
/// wait rather than release memory the device might still use.
pub(crate) fn probe(stream: &Arc<StreamShared>) -> Arc<Verdict> {
    let verdict = Arc::new(Verdict::default());
    let job = Job::Probe {
        stream: stream.clone(),
        verdict: verdict.clone(),
    };
    if send(job).is_err() {
        verdict.give(Ok(Alive::default()));
    }
    verdict
}

/// Ends `drain` (one of `stream`'s `drains`) once the work queued on `stream` so far has
/// finished (or can never run), unless an operation submitted after it finishes first
/// (`stream::drains`).
pub(crate) fn drain(stream: Arc<StreamShared>, drain: Arc<Drain>) {
    if let Some((_, error)) = drain.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        npu_core::log!(warn, %error, stream = stream.id, "cannot watch an operation; draining the stream");
    }
    let job = Job::Drain { stream, drain };
    if let Err(job) = send(job) {
        // No sentinel: a thread of the operation's own is the only sound way left.
        spawn_fallback(job);
    }
}

/// Waits for `pending` on its own event, for a strategy that could not hand it to the reactor.
pub(crate) fn watch(stream: Arc<StreamShared>, pending: Pending) {
    if let Err(job) = send(Job::Watch { stream, pending }) {
        spawn_fallback(job);
    }
}

/// Runs one job to its end on a thread of its own, with unbounded waits in slices.
fn spawn_fallback(job: Job) {
    spawn_fallback_on(std::thread::Builder::new(), job);
}

/// [`spawn_fallback`] with `builder`, which the tests make unable to start its thread.
///
/// If the thread cannot start, `spawn` drops the closure, and the job with it: the stream
/// reference would be dropped here (the last one destroys the stream under work the device may
/// still run), and a watched operation's event would go back to the pool with its record still
/// queued, where the next operation's record could pass for it. So the job travels in an
/// [`Unstarted`], whose drop, on a thread that never started, gives the job up instead.
fn spawn_fallback_on(builder: std::thread::Builder, job: Job) {
    let unstarted = Unstarted(Some(job));
    let spawned = builder.name("npu-drain".into()).spawn(move || {
        let mut unstarted = unstarted;
        let Some(mut job) = unstarted.0.take() else {
            return;
        };
        loop {
            // In slices where the runtime can bound its waits: a drain may end meanwhile,
            // through an operation submitted after it, which one unbounded wait would miss.
            let timeout = if job.timed() { SLICE_MS } else { -1 };
            match completing(crate::SEAL, || step(job, timeout)) {
                Some(again) => job = again,
                None => return,
            }
        }
    });
    if let Err(err) = spawned {
        npu_core::log!(error, %err, "no thread to drain a stream; its operation is abandoned");
    }
}

/// A job on its way to a thread of its own; dropped with the job still in it, the thread never
/// started.
struct Unstarted(Option<Job>);

impl Drop for Unstarted {
    /// Gives the job up: its completion is abandoned (nothing it holds is released, so its
    /// memory stays allocated, and a thread blocked on it wakes with an error; a future stays
    /// pending), and what the device may still use (the stream, a watched operation's event)
    /// is leaked.
    fn drop(&mut self) {
        match self.0.take() {
            None => {}
            // Only drains and watches take a thread of their own (`spawn_fallback`); a probe
            // is given up as `probe` does without a sentinel, should one ever come here.
            Some(Job::Probe { stream, verdict }) => {
                // As without a sentinel: taken to be alive. A probe holds no device work.
                verdict.give(Ok(Alive::default()));
                strategy::release_stream(stream);
            }
            Some(Job::Drain { stream, drain }) => {
                stream.drains.remove(&drain);
                let taken = drain.lock().unwrap_or_else(|e| e.into_inner()).take();
                drop(taken);
                StreamShared::leak(stream);
            }
            Some(Job::Watch { stream, pending }) => {
                pending.abandon();
                StreamShared::leak(stream);
            }
        }
    }
}

fn run(rx: Receiver<Job>) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    loop {
        // With nothing in progress, sleep until a job arrives; otherwise take what arrived
        // and go round the jobs in progress once more.
        let arrived = if waiting.is_empty() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(Duration::ZERO)
        };
        match arrived {
            Ok(job) => {
                waiting.push_back(job);
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if waiting.is_empty() => return,
            Err(RecvTimeoutError::Disconnected) => {}
        }
        round(&mut waiting);
    }
}

/// Advances every job in progress once, each by at most one slice.
///
/// A stream's watched operations arrive oldest first. One not found done in a round holds back
/// the later ones of its stream until the next (their events may complete meanwhile), so that
/// completions keep submission order.
///
/// A stream's drains all wait for the same thing, the stream's work: one slice a round for the
/// stream answers them all. Once one has waited a slice without the stream draining, the
/// others of that stream only look whether an operation submitted after them ended them, and
/// wait in a later round. A slice for each of them put a round (and every probe of any other
/// stream queued behind it) a slice per drained operation away: 40 s for 40,000 operations
/// that could not record their completion event on a device out of events.
fn round(waiting: &mut VecDeque<Job>) {
    // Streams are told apart by address: each one held back stays referenced by its job for
    // the round.
    let mut behind: Vec<*const StreamShared> = Vec::new();
    let mut undrained: HashSet<*const StreamShared> = HashSet::new();
    for _ in 0..waiting.len() {
        let Some(job) = waiting.pop_front() else {
            break;
        };
        let watched = match &job {
            Job::Watch { stream, .. } => Some(Arc::as_ptr(stream)),
            _ => None,
        };
        if watched.is_some_and(|stream| behind.contains(&stream)) {
            waiting.push_back(job);
            continue;
        }
        let draining = match &job {
            Job::Drain { stream, .. } => Some(Arc::as_ptr(stream)),
            _ => None,
        };
        // Each step a completing one (`holds::completing`): a job that completes its
        // operation lets go of the stream before the step returns, and a wait for the
        // teardowns waits for that, not for the slices the step waited before.
        let job = match draining {
            Some(stream) if undrained.contains(&stream) => {
                match completing(crate::SEAL, || end_if_ended(job)) {
                    Some(job) => job,
                    None => continue,
                }
            }
            _ => match completing(crate::SEAL, || step(job, SLICE_MS)) {
                Some(job) => {
                    behind.extend(watched);
                    undrained.extend(draining);
                    job
                }
                None => continue,
            },
        };
        waiting.push_back(job);
    }
}

/// Finishes a drain that an operation submitted after it ended; gives back any other job.
fn end_if_ended(job: Job) -> Option<Job> {
    match job {
        Job::Drain { stream, drain } if drains::ended(&drain) => {
            finish_drain(stream, &drain);
            None
        }
        job => Some(job),
    }
}

/// Ends `drain` (if an operation submitted after it has not already), forgets it, and lets go
/// of its stream.
fn finish_drain(stream: Arc<StreamShared>, drain: &Arc<drains::Drain>) {
    stream.drains.remove(drain);
    drains::end(drain);
    strategy::release_stream(stream);
}

/// Advances a job by at most one wait of `timeout` ms (-1: as long as needed, on a thread of
/// the job's own); returns it if it is not finished.
fn step(job: Job, timeout: i32) -> Option<Job> {
    match job {
        Job::Probe { stream, verdict } => {
            // Read before the check: every operation up to it was on the device by then (for
            // a dead stream), and had its record queued (for an idle one).
            let through = stream.watched.load(std::sync::atomic::Ordering::Acquire);
            let recorded = stream.watched_and_recorded();
            let found = examine(&stream).map(|idle| Alive {
                idle_through: recorded.filter(|_| idle).unwrap_or(0),
            });
            verdict.give(found.map_err(|error| Dead { error, through }));
            strategy::release_stream(stream);
            None
        }
        Job::Drain { stream, drain } => {
            // Ended by an operation submitted after it: nothing left to wait for.
            if !drains::ended(&drain) && drained(&stream, timeout).is_none() {
                return Some(Job::Drain { stream, drain });
            }
            finish_drain(stream, &drain);
            None
        }
        Job::Watch { stream, pending } => {
            // What an abort discarded never completes, and its event's wait fails at once
            // without the event completing: failed as the reactor fails it, or it would come
            // round for ever. The abort confirmed the discard before marking it.
            let aborted = stream.aborted(pending.op);
            let Some(pending) = fail_if_discarded(&stream, pending, aborted) else {
                strategy::release_stream(stream);
                return None;
            };
            // A watched operation's record was queued on its stream before the stream is
            // examined, so a stream found idle then has reached or discarded it (see `Alive`).
            let unfinished = pending
                .wait_for(&stream, timeout)
                .map(|pending| (pending, examine(&stream)));
            match unfinished {
                Some((pending, Ok(idle))) => {
                    let covered = idle && pending.op.seq != 0;
                    if let Some(pending) = fail_if_discarded(&stream, pending, covered) {
                        return Some(Job::Watch { stream, pending });
                    }
                }
                Some((pending, Err(err))) => pending.fail(&stream, err),
                None => {}
            }
            // Like every other job's, the stream reference goes to the reaper: it may be the
            // last one, and destroying a stream is no work for this thread.
            strategy::release_stream(stream);
            None
        }
    }
}

/// Fails `pending` with `Error::Aborted` when `covered` (an abort marked it, or the stream was
/// found idle after its record was queued) and its event has not completed: its record was
/// discarded, and the device is done with its memory. Gives it back otherwise. The query does
/// not block.
fn fail_if_discarded(
    stream: &Arc<StreamShared>,
    pending: Pending,
    covered: bool,
) -> Option<Pending> {
    let runtime = stream.context.runtime();
    if covered && !crate::event::event_complete(runtime, pending.event.handle()) {
        let api = pending.op.api;
        pending.fail(stream, Error::Aborted { api });
        return None;
    }
    Some(pending)
}

/// `Err` when the work pending on `stream` can never complete (device lost, context stopped
/// on a failure, stream aborted), with the device's error.
///
/// An error from `aclrtStreamQuery` is confirmed with a 1 ms `aclrtSynchronizeStreamWithTimeout`:
/// a dead stream fails it at once; a live stream that is busy times out; a live stream that
/// is idle returns its task failure and clears it, so the query that follows succeeds (and the
/// next probe of that stream costs nothing). The failure itself has already reached the failed
/// operation's future and the stream's failure record through that operation's event.
/// Runtimes without the timed wait leave the stream taken to be alive.
pub(crate) fn confirm(stream: &StreamShared) -> Result<()> {
    examine(stream).map(drop)
}

/// [`confirm`], and whether the stream's query found it idle (`aclrtStreamQuery` reported it
/// complete, with no error): every task submitted before the query has run or was discarded.
/// A stream whose query failed is not taken for idle even once the failure is cleared (the
/// next probe may find it so), nor is one of a runtime without the query.
fn examine(stream: &StreamShared) -> Result<bool> {
    match query_stream(stream) {
        None => Ok(false),
        Some((Ok(()), status)) => Ok(status == ffi::ACL_STREAM_STATUS_COMPLETE),
        Some((Err(_), _)) => match sync_stream(stream, SLICE_MS) {
            None | Some(Ok(())) => Ok(false),
            Some(Err(_)) => stream_status(stream).map(|()| false),
        },
    }
}

/// `Some(())` once everything submitted to `stream` so far has finished or can never run: the
/// synchronisation returned (with a task failure, which it clears, or the stream's doom)
/// rather than timing out.
///
/// A context that cannot be made current counts as not finished yet: that failure says
/// nothing about the stream, and taking it for the synchronisation's own error would let the
/// drain complete (and release its memory) while the device may still run the stream's work.
/// The thread rests for one slice first, so that a bind failing every time makes the sentinel
/// (or a drain's own thread) retry at the slice's pace instead of spinning; the operation stays
/// pending, and its memory allocated, until a bind succeeds.
fn drained(stream: &StreamShared, timeout_ms: i32) -> Option<()> {
    if let Err(err) = stream.context.bind() {
        npu_core::log!(debug, %err, stream = stream.id, "cannot bind the stream's context to drain it");
        std::thread::sleep(Duration::from_millis(SLICE_MS as u64));
        return None;
    }
    sync_stream(stream, timeout_ms).map(drop)
}

/// `aclrtSynchronizeStreamWithTimeout`: `None` if it timed out, `Some(result)` otherwise. A
/// timeout of -1 waits as long as needed, with `aclrtSynchronizeStream` on runtimes without
/// the timed call; with a bounded timeout such a runtime counts as never finishing in time.
/// A context that cannot be made current is the call's error (a probe then asks the stream's
/// query, which needs no context; a drain never gets here with one).
fn sync_stream(stream: &StreamShared, timeout_ms: i32) -> Option<Result<()>> {
    let runtime = stream.context.runtime();
    if let Err(err) = stream.context.bind() {
        return Some(Err(err));
    }
    let code = match runtime.api().aclrtSynchronizeStreamWithTimeout {
        // SAFETY: the stream is alive (`stream`) and its context is bound on this thread.
        Some(sync) => unsafe { sync(stream.handle, timeout_ms) },
        // SAFETY: as above.
        None if timeout_ms < 0 => unsafe { (runtime.api().aclrtSynchronizeStream)(stream.handle) },
        None => return None,
    };
    let checked = runtime.check("aclrtSynchronizeStreamWithTimeout", code);
    (code != ffi::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT).then_some(checked)
}

/// The stream's status: `Err` with its first unreported task failure or its doom, if any.
pub(crate) fn stream_status(stream: &StreamShared) -> Result<()> {
    query_stream(stream).map_or(Ok(()), |(checked, _)| checked)
}

/// Whether the stream may hold work that has not finished: its query fails or says not done.
/// A runtime without `aclrtStreamQuery` cannot say, and its streams are taken to be idle.
pub(crate) fn stream_unfinished(stream: &StreamShared) -> bool {
    query_stream(stream).is_some_and(|(checked, status)| {
        checked.is_err() || status != ffi::ACL_STREAM_STATUS_COMPLETE
    })
}

/// `aclrtStreamQuery`'s checked result and status, if the runtime has it.
fn query_stream(stream: &StreamShared) -> Option<(Result<()>, ffi::aclrtStreamStatus)> {
    let runtime = stream.context.runtime();
    let stream_query = runtime.api().aclrtStreamQuery?;
    let mut status = ffi::ACL_STREAM_STATUS_NOT_READY;
    // SAFETY: the stream is alive (`stream`); aclrtStreamQuery checks no context.
    let code = unsafe { stream_query(stream.handle, &mut status) };
    Some((runtime.check("aclrtStreamQuery", code), status))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::event_pool::EventPool;
    use npu_core::Completer;

    /// A thread no host can start: its stack does not fit in the address space.
    fn unstartable() -> std::thread::Builder {
        std::thread::Builder::new().stack_size(1 << 62)
    }

    /// "A forked child is refused, never hung" for the sentinel's start: a thread is held
    /// inside it (across its thread's spawn), in a process where no runtime started yet, while
    /// this thread forks. In the child, asking for the sentinel's queue returns none at once
    /// (bounded by the child's alarm): it is never started there, and a job for it is leaked.
    ///
    /// The break: the child waited on the sentinel's start, which the holder never completes
    /// there (killed by its alarm).
    #[test]
    fn a_child_forked_inside_the_sentinels_start_is_refused_not_hung() {
        crate::test_support::held::in_a_fresh_process(
            "sentinel::tests::a_child_forked_inside_the_sentinels_start_is_refused_not_hung",
            || {
                crate::test_support::held::forked_inside_a_start(
                    || sender().is_some(),
                    npu_core::forked,
                )
            },
        );
    }

    /// Sets its flag when dropped: stands for memory an operation's completion releases.
    struct Released(Arc<AtomicBool>);

    impl Drop for Released {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A completer standing for work queued on a stream, with a release recorded against it.
    fn pending_with_release() -> (Completer, npu_core::Completion, Arc<AtomicBool>) {
        // SAFETY: no device work stands behind it; the release is a flag.
        let completer = unsafe { Completer::new() };
        let done = completer.completion();
        let released = Arc::new(AtomicBool::new(false));
        // SAFETY: setting a flag does not block.
        unsafe { done.drop_after(Released(released.clone())) };
        (completer, done, released)
    }

    /// What a waiter sees of an abandoned operation: no result, a blocked thread's error.
    fn abandoned(done: &npu_core::Completion, released: &AtomicBool) {
        assert!(done.result().is_none(), "never completed");
        let woken = done.blocking_waiter().wait_for(Duration::ZERO);
        let err = woken.expect("a blocked thread is woken").unwrap_err();
        assert!(err.to_string().contains("abandoned"), "{err}");
        assert!(
            !released.load(Ordering::SeqCst),
            "its memory stays allocated"
        );
    }

    /// An operation the sentinel watches (the reactor could not take it), queued on a held
    /// device's stream, that `abort` discarded fails `Aborted` and lets its memory go.
    fn a_watched_operation_discarded_by(abort: impl FnOnce(&crate::Stream)) {
        let stream = crate::test_support::sim_stream(1);
        let held_device = crate::test_support::hold(1);
        let (completer, done, released) = pending_with_release();
        let (event, completer) = crate::test_support::recorded(&stream, completer);
        let op = OpInfo {
            seq: stream.shared.watched.fetch_add(1, Ordering::AcqRel) + 1,
            ..OpInfo::new("test")
        };
        let pending = Pending::new(event, completer, op, None);
        abort(&stream);
        held_device.release();
        let job = Job::Watch {
            stream: stream.shared.clone(),
            pending,
        };
        assert!(step(job, SLICE_MS).is_none(), "the job is over");
        let failed = done.result().expect("completed").unwrap_err();
        assert!(matches!(failed, Error::Aborted { .. }), "{failed}");
        npu_core::reaper::flush();
        assert!(released.load(Ordering::SeqCst), "its memory is let go");
    }

    /// An abort of the stream npu-rs makes (`Stream::abort`). The break: its event's wait
    /// failed at once and the stream was alive again, so the job came round for ever, the
    /// operation never completed and the sentinel never rested.
    #[test]
    fn a_watched_operation_an_abort_discarded_fails_instead_of_coming_round_for_ever() {
        a_watched_operation_discarded_by(|stream| {
            futures::executor::block_on(stream.abort()).unwrap();
        });
    }

    /// An abort npu-rs never hears of: the program's own `aclrtStreamAbort` of the stream's
    /// raw handle. The job finds the stream idle and then the operation's event not complete:
    /// its record was discarded. The break: the job came round for ever, as above.
    #[test]
    fn a_watched_operation_an_unseen_abort_discarded_fails_instead_of_coming_round_for_ever() {
        a_watched_operation_discarded_by(|stream| {
            let api = stream.shared.context.runtime().api();
            let abort = api
                .aclrtStreamAbort
                .expect("npu-sim exports aclrtStreamAbort");
            // SAFETY: the stream is alive and its context is bound (by `recorded`, on this
            // thread).
            assert_eq!(unsafe { abort(stream.shared.handle) }, ffi::ACL_SUCCESS);
        });
    }

    /// Two operations of one stream that the sentinel watches: the first not done when its
    /// round looks, the second done by then. The second waits for the next round. The break:
    /// jobs were served in turn, each on its own, so the second completed first. The first's
    /// event is recorded on a held device's stream so that only it is not done.
    #[test]
    fn a_watched_operation_not_done_holds_back_the_later_ones_of_its_stream() {
        let (stream, held) = (
            crate::test_support::sim_stream(0),
            crate::test_support::sim_stream(1),
        );
        let held_device = crate::test_support::hold(1);
        let mut waiting = VecDeque::new();
        let mut completions = Vec::new();
        for recorded_on in [&held, &stream] {
            let (completer, done, _) = pending_with_release();
            let (event, completer) = crate::test_support::recorded(recorded_on, completer);
            let pending = Pending::new(event, completer, OpInfo::new("test"), None);
            waiting.push_back(Job::Watch {
                stream: stream.shared.clone(),
                pending,
            });
            completions.push(done);
        }
        futures::executor::block_on(stream.synchronize()).unwrap();
        round(&mut waiting);
        assert_eq!(waiting.len(), 2);
        assert!(
            !completions[1].is_complete(),
            "the second waits for the first"
        );
        held_device.release();
        // A hang bound, not a synchronisation: each round waits at most a slice per job.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !waiting.is_empty() && std::time::Instant::now() < deadline {
            round(&mut waiting);
        }
        assert!(
            completions
                .iter()
                .all(|done| done.result().unwrap().is_ok())
        );
    }

    /// A drain on a thread of its own (no sentinel) on a stream that never drains ends as
    /// soon as an operation submitted after it finishes. The break: the thread made one
    /// unbounded synchronisation, which a stream with work it cannot finish never ends, so the
    /// thread and the stream it holds stayed for ever after the drain had ended.
    #[test]
    fn a_drain_on_a_thread_of_its_own_notices_it_ended() {
        let stream = crate::test_support::sim_stream(0);
        let gate = crate::Notify::new(stream.context()).unwrap();
        let blocked = stream.wait_notify(&gate);
        let (completer, done, _) = pending_with_release();
        let through = stream.shared.watched.load(Ordering::Acquire);
        let error = Error::invalid("test", "self", "could not be watched");
        let drain = Job::Drain {
            stream: stream.shared.clone(),
            drain: stream.shared.drains.add(through, completer, error),
        };
        let before = Arc::strong_count(&stream.shared);
        spawn_fallback_on(std::thread::Builder::new(), drain);
        // Ended once the thread waits on the stream (asleep, as the OS says), as an operation
        // submitted after it ends it when it finishes.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !a_drain_thread_sleeps() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        stream.shared.drains.end_before(through + 1);
        assert!(done.result().unwrap().is_err());
        // A hang bound, not a synchronisation: the thread lets go within a slice.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while Arc::strong_count(&stream.shared) >= before && std::time::Instant::now() < deadline {
            npu_core::reaper::flush();
            std::thread::yield_now();
        }
        assert!(
            Arc::strong_count(&stream.shared) < before,
            "the drain's thread let go"
        );
        let signaller = crate::test_support::sim_stream(0);
        futures::executor::block_on(signaller.record_notify(&gate)).unwrap();
        futures::executor::block_on(blocked).unwrap();
    }

    /// Whether a thread of the process named `npu-drain` is asleep (`/proc`'s state `S`).
    fn a_drain_thread_sleeps() -> bool {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return true; // no way to tell: the test checks less
        };
        tasks.flatten().any(|task| {
            let path = task.path();
            let named = std::fs::read_to_string(path.join("comm"))
                .is_ok_and(|name| name.trim() == "npu-drain");
            // The state follows the name, which is in parentheses: "tid (name) S ...".
            let asleep = std::fs::read_to_string(path.join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
            });
            named && asleep
        })
    }

    /// A drain or a watch whose own thread cannot start (the sentinel gone, threads exhausted)
    /// is abandoned, not dropped: a thread blocked on its operation wakes with an error instead
    /// of waiting for ever, the memory recorded against it is never released, the stream it
    /// references is never destroyed (the device may still run the operation), and a watched
    /// operation's event, whose record may still be queued, never goes back to the pool. The
    /// break: `spawn` dropped the job, so the stream reference went (the last one destroying
    /// the stream) and the event was handed to the next operation.
    #[test]
    fn a_job_whose_thread_cannot_start_is_abandoned_and_leaks_what_the_device_may_use() {
        let stream = crate::test_support::sim_stream(0);
        let ctx = stream.context().clone();

        let (completer, done, released) = pending_with_release();
        let error = Error::invalid("test", "stream", "cannot watch");
        let before = Arc::strong_count(&stream.shared);
        let drain = Job::Drain {
            stream: stream.shared.clone(),
            drain: stream.shared.drains.add(0, completer, error),
        };
        spawn_fallback_on(unstartable(), drain);
        abandoned(&done, &released);
        assert_eq!(
            Arc::strong_count(&stream.shared),
            before + 1,
            "the stream is leaked"
        );

        let pool = EventPool::for_context(&ctx);
        let event = pool.take().unwrap();
        let handle = event.handle();
        let (completer, done, released) = pending_with_release();
        let pending = Pending::new(event, completer, OpInfo::new("test"), None);
        let watch = Job::Watch {
            stream: stream.shared.clone(),
            pending,
        };
        spawn_fallback_on(unstartable(), watch);
        abandoned(&done, &released);
        // The pool hands out the event freed last: this one, had it gone back.
        let next = pool.take().unwrap();
        assert_ne!(next.handle(), handle, "the event is not reused");
        assert_eq!(Arc::strong_count(&stream.shared), before + 2);
    }
}
