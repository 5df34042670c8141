//! The callback-thread completion strategy: `aclrtLaunchCallback` after each operation, run
//! by a per-device thread looping `aclrtProcessReport`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

use npu_core::ffi;
use npu_core::{Completer, Error, Result, acl_call};

use crate::event::event_complete;
use crate::event_pool::PooledEvent;
use crate::reactor::Pending;
use crate::sentinel::{self, Dead, Verdict};
use crate::strategy::{self, CompletionStrategy, OpInfo, Unwatched};
use crate::stream::StreamShared;
use table::{Entry, Ledger, Table};

#[cfg(test)]
mod model;
mod table;

/// Std-backed primitives for [`table`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

/// How long one `aclrtProcessReport` waits; also the fault-probe period.
const REPORT_TIMEOUT_MS: i32 = 50;
/// How often a worker whose reports keep arriving still checks its streams' health (a quiet
/// report timeout checks at once), and how late a callback may be before its operation's
/// event is asked instead.
const PROBE_EVERY: Duration = Duration::from_millis(REPORT_TIMEOUT_MS as u64);

/// How many aborts have discarded work on a `CallbackThread` stream. The callbacks of
/// discarded operations never run, so a worker that sees this change fails them before it
/// settles any callback that ran since: completions keep submission order, and a
/// synchronisation submitted after an abort resolves after the operations it discarded.
static ABORTS: AtomicU64 = AtomicU64::new(0);

/// Counts an abort that discarded work on a `CallbackThread` stream. Called before the abort
/// stops refusing submissions, so a callback of work submitted after it finds the count moved.
pub(crate) fn note_abort() {
    ABORTS.fetch_add(1, Ordering::AcqRel);
}

pub(crate) struct CallbackStrategy;

/// One subscribed thread per (loaded runtime, device): ACL lets a thread serve streams of
/// one device only.
pub(crate) struct Worker {
    /// `pthread_self()` of the worker, ACL's identity for subscriptions.
    tid: u64,
    /// The operations it waits on, and the events of those taken back ([`Ledger`]).
    outstanding: Ledger<Outstanding>,
    /// The counted teardown of the runtime started when its last subscribed stream went: the
    /// worker holds a handle of the runtime until it retires, about a report timeout later,
    /// and may then make the last drop, which `wait_for_teardowns` must see. Let go once the
    /// worker's handle is gone, or when a stream subscribes again (its own going counts then).
    retiring: Mutex<Option<npu_core::reaper::Counted>>,
}

/// The key of `stream`'s entries in a [`Table`].
fn key(stream: &Arc<StreamShared>) -> usize {
    Arc::as_ptr(stream) as usize
}

struct Outstanding {
    stream: Arc<StreamShared>,
    pending: Pending,
    since: Instant,
}

impl Entry for Outstanding {
    type Stream = Arc<StreamShared>;
    type Event = PooledEvent;
    type Handle = ffi::aclrtEvent;
    type Completer = Completer;

    /// The stream's address: the entry keeps the stream alive, so no other stream has it.
    fn stream_key(&self) -> usize {
        key(&self.stream)
    }

    fn stream(&self) -> &Arc<StreamShared> {
        &self.stream
    }

    fn since(&self) -> Instant {
        self.since
    }

    fn handle(&self) -> ffi::aclrtEvent {
        self.pending.event.handle()
    }

    fn into_parts(self) -> (PooledEvent, Completer, Arc<StreamShared>) {
        let (event, completer) = self.pending.into_parts();
        (event, completer, self.stream)
    }

    fn bury(event: PooledEvent) {
        event.discard();
    }
}

thread_local! {
    /// Operation ids whose callbacks ran during the current `aclrtProcessReport` on this
    /// worker thread. Callbacks must not call ACL, so they only note the id here.
    static FIRED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_callback(user_data: *mut c_void) {
    let id = user_data as usize as u64;
    FIRED.with(|fired| fired.borrow_mut().push(id));
}

/// Workers by (loaded runtime, device).
type Workers = Mutex<HashMap<(usize, u32), Arc<Worker>>>;

fn workers() -> &'static Workers {
    static WORKERS: OnceLock<Workers> = OnceLock::new();
    WORKERS.get_or_init(Default::default)
}

fn next_op_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The worker for the stream's device, started on first use.
fn worker_for(stream: &StreamShared) -> Result<Arc<Worker>> {
    let context = &stream.context;
    let key = (
        context.runtime().library_id(crate::SEAL),
        context.device_id(),
    );
    let mut workers = workers().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(worker) = workers.get(&key) {
        // Serving a stream again: it will not retire before that stream goes.
        worker.retiring().take();
        return Ok(worker.clone());
    }
    let (tx, rx) = mpsc::channel();
    let runtime = context.runtime().clone();
    std::thread::Builder::new()
        .name(format!("npu-callback-{}", key.1))
        .spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            let tid = unsafe { libc::pthread_self() } as u64;
            let worker = Arc::new(Worker {
                tid,
                outstanding: Ledger::default(),
                retiring: Mutex::default(),
            });
            if tx.send(worker.clone()).is_ok() {
                // Marked shared for its life: the last handle of a context may go here (a
                // taken-back event's pool), and its teardown must not hold up the callbacks.
                npu_core::reaper::as_shared_thread(crate::SEAL, || worker.run(&runtime, key));
            }
            // The runtime's last handle may be this one (ACL's finalisation, here: the
            // thread serves nothing any more); counted until it is gone.
            drop(runtime);
            drop(worker.retiring().take());
        })
        .map_err(|e| Error::invalid("Strategy::CallbackThread", "thread", e.to_string()))?;
    let worker = rx
        .recv()
        .map_err(|_| Error::invalid("Strategy::CallbackThread", "thread", "exited at start"))?;
    workers.insert(key, worker.clone());
    Ok(worker)
}

impl Worker {
    /// Serves the device's subscribed streams until nothing can reach the worker any more
    /// ([`Worker::retire_if_unused`]); returning lets go of the thread's handle of the
    /// runtime, so a runtime whose every other handle is gone is finalised then.
    fn run(self: &Arc<Self>, runtime: &npu_core::Runtime, key: (usize, u32)) {
        let mut probes = Probes::default();
        let mut aborts_seen = 0;
        let mut last_probe = Instant::now();
        loop {
            // Between two looks: no handle copied out of the table is in use.
            self.bury_taken_back();
            // SAFETY: plain integer argument; callbacks run inside this call on this thread.
            let code = unsafe { (runtime.api().aclrtProcessReport)(REPORT_TIMEOUT_MS) };
            // Checking takes the runtime's message off this thread at once: an idle timeout's
            // message would otherwise be attached to the next error settled here.
            let reported = runtime.check("aclrtProcessReport", code);
            let fired: Vec<u64> = FIRED.with(|fired| std::mem::take(&mut *fired.borrow_mut()));
            // The operations whose callbacks ran are taken out first: the device finished
            // them, so none may be taken for one an abort discarded.
            let mut done: Vec<(u64, Outstanding, Option<Error>)> = {
                let ran = self.outstanding.take_fired(&fired).into_iter();
                ran.map(|(id, entry)| (id, entry, None)).collect()
            };
            let aborts = ABORTS.load(Ordering::Acquire);
            // Also with no callback run: the next health check settles stale operations, which
            // must not overtake the ones an abort covered.
            if aborts != aborts_seen {
                aborts_seen = aborts;
                done.extend(self.take_aborted());
                // Ids grow with submission: on each stream, what an abort covered ends before
                // what was submitted after it completes.
                done.sort_unstable_by_key(|(id, ..)| *id);
            }
            // The streams go with their entries: a wait for the teardowns made by a task
            // woken here waits until they have (`holds::completing`).
            npu_core::holds::completing(crate::SEAL, || {
                for (_, entry, failure) in done {
                    entry.end(failure);
                }
            });
            if let Err(err) = reported
                && !matches!(
                    code,
                    ffi::ACL_ERROR_RT_REPORT_TIMEOUT | ffi::ACL_ERROR_RT_THREAD_SUBSCRIBE
                )
            {
                npu_core::log!(warn, %err, "aclrtProcessReport failed");
            }
            // A report that brought nothing (a timeout, no stream subscribed yet, an error) is
            // a quiet moment to check that the streams we wait on are healthy. A report
            // returns after each callback, so on a device whose other streams keep reporting a
            // quiet moment may never come: the check also runs once a report timeout has
            // passed since the last.
            let now = Instant::now();
            if code != ffi::ACL_SUCCESS || now.duration_since(last_probe) >= PROBE_EVERY {
                npu_core::holds::completing(crate::SEAL, || self.probe(&mut probes));
                last_probe = now;
            }
            if code != ffi::ACL_SUCCESS && self.retire_if_unused(key) {
                // No stream can take an operation back any more (each keeps the worker).
                self.bury_taken_back();
                return;
            }
            if code == ffi::ACL_ERROR_RT_THREAD_SUBSCRIBE {
                std::thread::sleep(PROBE_EVERY);
            }
        }
    }

    /// Takes the worker out of the table and says so when only the table and this thread
    /// hold it: every stream that subscribed keeps it (and every outstanding operation keeps
    /// its stream), so no stream is subscribed and nothing waits on a callback. Decided under
    /// the table's lock, the only place where new references are handed out ([`worker_for`],
    /// which holds it from the worker's start to its entry), so a stream arriving later
    /// starts a new worker. Without this, the thread's handle of its runtime kept a runtime
    /// the program had dropped entirely from ever being finalised (docs/ascend.md, teardown).
    fn retire_if_unused(self: &Arc<Self>, key: (usize, u32)) -> bool {
        let mut workers = workers().lock().unwrap_or_else(|e| e.into_inner());
        let listed = workers.get(&key).is_some_and(|w| Arc::ptr_eq(w, self));
        if !listed || Arc::strong_count(self) != 2 || !self.lock().is_empty() {
            return false;
        }
        workers.remove(&key);
        true
    }

    fn lock(&self) -> MutexGuard<'_, Table<Outstanding>> {
        self.outstanding.lock()
    }

    fn retiring(&self) -> MutexGuard<'_, Option<npu_core::reaper::Counted>> {
        self.retiring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Ledger::take_back`], for a submitter whose callback launch failed.
    fn take_back(&self, id: u64) -> Option<Completer> {
        self.outstanding.take_back(id)
    }

    /// [`Ledger::bury_taken_back`], between two looks.
    fn bury_taken_back(&self) {
        self.outstanding.bury_taken_back();
    }

    /// Fails the outstanding operations of streams the sentinel found dead, and those whose
    /// records a stream found idle had discarded; asks it about streams with an operation
    /// waiting for a while. Never waits: the lock is held only to look, and the checks
    /// themselves run on the sentinel.
    fn probe(&self, probes: &mut Probes) {
        let mut ended: Vec<(Outstanding, Option<Error>)> = Vec::new();
        let Answers {
            dead: answered,
            idle,
        } = probes.answered();
        let now = Instant::now();
        let stale: Vec<Arc<StreamShared>>;
        // Logged once the lock is released: a subscriber may call back into npu-rs.
        let mut dead_streams: Vec<(u64, usize, Error)> = Vec::new();
        // What an abort covered ends before any stale operation is settled: those may have
        // been submitted after it.
        let aborted = self.take_aborted();
        for (_, op, failure) in aborted {
            op.end(failure);
        }
        for (stream, through) in idle {
            for (_, op, failure) in self.take_discarded(&stream, through) {
                op.end(failure);
            }
            strategy::release_stream(stream);
        }
        self.settle_lost_callbacks(now);
        {
            let mut outstanding = self.lock();
            for (stream, dead) in answered {
                // In submission order, so that a failed synchronize sees the failures before
                // it. Only what was queued when the probe found the stream dead (the oldest
                // ones): an abort since may have revived it for what came after.
                let ops = outstanding.take_leading(key(&stream), |op| dead.covers(op.pending.op));
                dead_streams.push((stream.id, ops.len(), dead.error.clone()));
                ended.extend(
                    ops.into_iter()
                        .map(|(_, op)| (op, Some(dead.error.clone()))),
                );
                strategy::release_stream(stream);
            }
            // A stream's oldest operation has waited longest.
            let heads = outstanding.stale_heads(now, PROBE_EVERY).into_iter();
            stale = heads.map(|(stream, ..)| stream).collect();
        }
        for (stream, failed, err) in dead_streams {
            npu_core::log!(warn, %err, stream, failed, "stream failed");
        }
        for stream in stale {
            probes.ask(stream);
        }
        for (entry, failure) in ended {
            entry.end(failure);
        }
    }
}

impl Outstanding {
    /// Completes the operation, from its event (`None`: the device finished it) or with
    /// `failure`, and lets go of its stream.
    fn end(self, failure: Option<Error>) {
        match failure {
            None => self.pending.settle(&self.stream),
            Some(err) => self.pending.fail(&self.stream, err),
        }
        strategy::release_stream(self.stream);
    }
}

impl Worker {
    /// Takes out every operation an abort's mark covers, in submission order, each with its id
    /// and how it ends: `Some(Error::Aborted)` if the abort discarded it (its callback will never
    /// run), `None` (settled from its event) if the device finished it first.
    ///
    /// The mark covers every operation watched before the abort, including ones whose work and
    /// completion record the device ran before it: their callback may not have run yet, or the
    /// abort may have dropped it, and one left waiting for it would complete only once stale
    /// ([`Worker::settle_lost_callbacks`]), after operations submitted behind it, which breaks the
    /// order completions keep on a stream. A callback that still comes finds its entry gone. The
    /// abort confirmed the discard before its mark moved, so an event not complete now never
    /// completes. The query does not block.
    fn take_aborted(&self) -> Vec<(u64, Outstanding, Option<Error>)> {
        let ops: Vec<(u64, Outstanding)> = {
            // What an abort covers is the oldest operations of its stream.
            let mut covered = self
                .lock()
                .take_leading_everywhere(|op| op.stream.aborted(op.pending.op));
            covered.sort_unstable_by_key(|(id, _)| *id);
            covered
        };
        Self::discarded_unless_done(ops)
    }

    /// [`take_aborted`](Worker::take_aborted) for an abort npu-rs never heard of: takes out
    /// `stream`'s operations whose records were queued before a probe found the stream idle
    /// (`seq` up to `through`, see `sentinel::Alive`); those whose events are not complete
    /// now were discarded. The probe queried the stream before this queries their events.
    fn take_discarded(
        &self,
        stream: &Arc<StreamShared>,
        through: u64,
    ) -> Vec<(u64, Outstanding, Option<Error>)> {
        let covered = |op: &Outstanding| op.pending.op.seq != 0 && op.pending.op.seq <= through;
        let ops = self.lock().take_leading(key(stream), covered);
        Self::discarded_unless_done(ops)
    }

    /// Each of `ops` (a stream's oldest operations, covered by an abort), with how it ends:
    /// `Error::Aborted` unless its event has completed. Queried with the table's lock
    /// released: a query the runtime fails may run a tracing subscriber, which may submit to
    /// a stream of this worker (and take the lock).
    fn discarded_unless_done(
        ops: Vec<(u64, Outstanding)>,
    ) -> Vec<(u64, Outstanding, Option<Error>)> {
        ops.into_iter()
            .map(|(id, op)| {
                let runtime = op.stream.context.runtime();
                let finished = event_complete(runtime, op.pending.event.handle());
                let failure = (!finished).then_some(Error::Aborted {
                    api: op.pending.op.api,
                });
                (id, op, failure)
            })
            .collect()
    }

    /// Settles stale operations whose event has completed although their callback has not run
    /// within the report timeout (a callback held up behind others, or one the runtime never
    /// delivers), in submission order, querying their events with the lock released
    /// ([`Ledger::settle_lost_callbacks`]).
    fn settle_lost_callbacks(&self, now: Instant) {
        self.outstanding.settle_lost_callbacks(
            now,
            PROBE_EVERY,
            |stream, event| event_complete(stream.context.runtime(), event),
            |entry| entry.end(None),
            strategy::release_stream,
        );
    }
}

/// What a callback worker's answered probes found.
struct Answers {
    /// The streams found dead, with what doomed them.
    dead: Vec<(Arc<StreamShared>, Dead)>,
    /// The streams found idle with operations recorded before, with the `seq` of the last
    /// (`sentinel::Alive`).
    idle: Vec<(Arc<StreamShared>, u64)>,
}

/// The probes a callback worker has in flight, one per stream at most.
#[derive(Default)]
struct Probes {
    asked: Vec<(Arc<StreamShared>, Arc<Verdict>)>,
}

impl Probes {
    /// Asks the sentinel about `stream` unless a probe of it is in flight.
    fn ask(&mut self, stream: Arc<StreamShared>) {
        if self.asked.iter().any(|(s, _)| Arc::ptr_eq(s, &stream)) {
            strategy::release_stream(stream);
            return;
        }
        let verdict = sentinel::probe(&stream);
        self.asked.push((stream, verdict));
    }

    /// What the probes answered since the last look found; answered probes leave.
    fn answered(&mut self) -> Answers {
        let (mut dead, mut idle) = (Vec::new(), Vec::new());
        let mut still = Vec::new();
        for (stream, verdict) in self.asked.drain(..) {
            match verdict.take() {
                None => still.push((stream, verdict)),
                Some(Ok(alive)) if alive.idle_through() > 0 => {
                    idle.push((stream, alive.idle_through()));
                }
                Some(Ok(_)) => strategy::release_stream(stream),
                Some(Err(err)) => dead.push((stream, err)),
            }
        }
        self.asked = still;
        Answers { dead, idle }
    }
}

impl CompletionStrategy for CallbackStrategy {
    fn watch(
        &self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completer: Completer,
    ) -> std::result::Result<(), Unwatched> {
        // Subscribed once per stream; the worker is kept with the subscription so that the
        // hot path never takes the global worker table's lock.
        let subscription = stream.strategy_state.subscription.get_or_init(|| {
            let worker = worker_for(stream)?;
            let (tid, handle) = (worker.tid, stream.handle);
            // SAFETY: the stream is alive and its context is bound by the submitter.
            unsafe { acl_call!(stream.context.runtime(), aclrtSubscribeReport(tid, handle)) }?;
            Ok(worker)
        });
        let worker = match subscription {
            Ok(worker) => worker,
            Err(error) => {
                let error = error.clone();
                return Err(Unwatched { completer, error });
            }
        };
        let (event, completer) = strategy::record(stream, completer)?;
        let id = next_op_id();
        worker.lock().insert(
            id,
            Outstanding {
                stream: stream.clone(),
                pending: Pending::new(event, completer, op, None),
                since: Instant::now(),
            },
        );
        let handle = stream.handle;
        // SAFETY: `on_callback` only records the id; the stream is alive and bound.
        let launched = unsafe {
            acl_call!(
                stream.context.runtime(),
                aclrtLaunchCallback(
                    Some(on_callback),
                    id as usize as *mut c_void,
                    ffi::ACL_CALLBACK_NO_BLOCK,
                    handle
                )
            )
        };
        if let Err(error) = launched {
            // The operation itself was queued; hand its completion back so the submitter
            // drains the stream before releasing anything. The callback may have fired
            // already only if the launch succeeded, so the entry is still there.
            if let Some(completer) = worker.take_back(id) {
                return Err(Unwatched { completer, error });
            }
        }
        Ok(())
    }
}

/// Unsubscribes a stream being destroyed from its callback worker, if it ever subscribed
/// (only `Strategy::CallbackThread` streams do, on their first operation).
///
/// The last stream of a worker to go starts counting the worker's retirement as a teardown of
/// the runtime (see `Worker::retiring`): decided, and this stream's hold on the worker let go,
/// under the workers' lock, so that of two last streams going at once the second sees itself
/// last.
pub(crate) fn release(stream: &mut StreamShared) {
    let Some(Ok(worker)) = stream.strategy_state.subscription.take() else {
        return;
    };
    let tid = worker.tid;
    let runtime = stream.context.runtime();
    let result = stream.context.bind().and_then(|()| {
        // SAFETY: the stream is alive until this returns; its context is bound.
        unsafe { acl_call!(runtime, aclrtUnSubscribeReport(tid, stream.handle)) }
    });
    if let Err(err) = result {
        npu_core::log!(warn, %err, stream = stream.id, "unsubscribing the callback thread failed");
    }
    let workers = workers().lock().unwrap_or_else(|e| e.into_inner());
    // The workers' table, the worker's thread and this stream: no other stream keeps it.
    if Arc::strong_count(&worker) == 3 {
        let counted = npu_core::reaper::counted(crate::SEAL, runtime.library_id(crate::SEAL));
        *worker.retiring() = Some(counted);
    }
    drop(worker);
    drop(workers);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::task::{Context, Poll, Wake, Waker};

    use npu_core::Completion;

    use super::*;
    use crate::Stream;
    use crate::test_support::{hold, recorded, sim_stream};

    /// The places of the operations in the order their completions woke their tasks.
    type Order = Arc<Mutex<Vec<usize>>>;

    /// Notes its operation's place in the order when woken.
    struct Note {
        place: usize,
        order: Order,
    }

    impl Wake for Note {
        fn wake(self: Arc<Self>) {
            self.order.lock().unwrap().push(self.place);
        }
    }

    /// No public call holds a callback back past the report timeout, so the tests give a
    /// worker whose thread never starts operations whose callbacks never ran.
    fn worker() -> Worker {
        Worker {
            tid: 0,
            outstanding: Ledger::default(),
            retiring: Mutex::default(),
        }
    }

    /// Gives `worker` an operation of `stream` submitted long ago whose callback never ran,
    /// its event recorded on `recorded_on`, and returns its completion, polled once by a task
    /// noting `place` in `order`.
    fn lost(
        worker: &Worker,
        stream: &Stream,
        recorded_on: &Stream,
        place: usize,
        order: &Order,
    ) -> Completion {
        let (_, done) = stale(worker, stream, recorded_on);
        let note = Arc::new(Note {
            place,
            order: order.clone(),
        });
        let polled = done.poll_result(&mut Context::from_waker(&Waker::from(note)));
        assert!(polled.is_pending());
        done
    }

    /// Gives `worker` an operation of `stream` submitted long ago whose callback never ran,
    /// its event recorded on `recorded_on`: its id and completion.
    fn stale(worker: &Worker, stream: &Stream, recorded_on: &Stream) -> (u64, Completion) {
        // SAFETY: no memory stands behind the completion; its event is the work.
        let completer = unsafe { Completer::new() };
        let done = completer.completion();
        let (event, completer) = recorded(recorded_on, completer);
        let entry = Outstanding {
            stream: stream.shared.clone(),
            pending: Pending::new(event, completer, OpInfo::new("test"), None),
            since: Instant::now() - Duration::from_secs(1),
        };
        let id = next_op_id();
        worker.lock().insert(id, entry);
        (id, done)
    }

    fn synchronize(stream: &Stream) {
        futures::executor::block_on(stream.synchronize()).unwrap();
    }

    fn settle(worker: &Worker) {
        worker.settle_lost_callbacks(Instant::now());
    }

    fn succeeded(done: &Completion) {
        let polled = done.poll_result(&mut Context::from_waker(Waker::noop()));
        assert!(matches!(polled, Poll::Ready(Ok(()))), "{polled:?}");
    }

    #[test]
    fn operations_whose_callbacks_were_lost_settle_in_submission_order() {
        let (stream, worker, order) = (sim_stream(0), worker(), Order::default());
        let completions: Vec<Completion> = (0..32)
            .map(|place| lost(&worker, &stream, &stream, place, &order))
            .collect();
        synchronize(&stream);
        settle(&worker);
        assert!(worker.lock().is_empty());
        completions.iter().for_each(succeeded);
        assert_eq!(*order.lock().unwrap(), (0..32).collect::<Vec<_>>());
    }

    /// The event of a stream's first stale operation, not done at its query, may be done by
    /// the time the next one is queried; the next must not settle first. Its event is recorded
    /// on a held device's stream so that it is not done at its query while the second's is.
    #[test]
    fn a_lost_callback_not_yet_done_holds_back_the_later_ones_of_its_stream() {
        let (stream, held, worker, order) =
            (sim_stream(0), sim_stream(1), worker(), Order::default());
        let held_device = hold(1);
        let first = lost(&worker, &stream, &held, 0, &order);
        let second = lost(&worker, &stream, &stream, 1, &order);
        synchronize(&stream);
        settle(&worker);
        assert!(
            order.lock().unwrap().is_empty(),
            "the second waits for the first"
        );
        assert_eq!(worker.lock().len(), 2);
        held_device.release();
        synchronize(&held);
        settle(&worker);
        assert!(worker.lock().is_empty());
        [first, second].iter().for_each(succeeded);
        assert_eq!(*order.lock().unwrap(), [0, 1]);
    }

    /// A look costs the streams, not the operations in flight: with a stream's oldest stale
    /// operation not done, a look at the worker's operations (settling lost callbacks, and the
    /// whole health check around it) examines that one, not the 500 behind it. The break:
    /// every look collected, cloned and sorted every stale operation, and listed a held-back
    /// stream once per operation, which later streams' operations scanned.
    #[test]
    fn a_look_examines_each_streams_oldest_operation_not_every_one_in_flight() {
        let (stream, held, worker, order) =
            (sim_stream(0), sim_stream(1), worker(), Order::default());
        let held_device = hold(1);
        let mut completions = vec![lost(&worker, &stream, &held, 0, &order)];
        completions.extend((1..=500).map(|place| lost(&worker, &stream, &stream, place, &order)));
        synchronize(&stream);
        let before = worker.lock().examined;
        settle(&worker);
        let settling = worker.lock().examined - before;
        assert_eq!(
            settling, 1,
            "settling lost callbacks examined {settling} entries"
        );
        worker.probe(&mut Probes::default());
        let look = worker.lock().examined - before - settling;
        // The aborted ones, the lost callbacks, the stale streams: the oldest each time.
        assert!(look <= 3, "a health check examined {look} entries");
        assert_eq!(
            worker.lock().len(),
            501,
            "nothing settled behind the oldest"
        );
        held_device.release();
        synchronize(&held);
        settle(&worker);
        assert!(worker.lock().is_empty());
        completions.iter().for_each(succeeded);
        assert_eq!(*order.lock().unwrap(), (0..=500).collect::<Vec<_>>());
    }

    /// Takes operation `id` back when woken, as its submitter does when its callback cannot be
    /// launched: woken by the completion of the operation ahead of it, this runs inside the
    /// worker's look, after the look copied `id`'s event handle and before it queries it.
    struct TakeBack {
        worker: Arc<Worker>,
        id: u64,
        completer: Mutex<Option<Completer>>,
    }

    impl Wake for TakeBack {
        fn wake(self: Arc<Self>) {
            *self.completer.lock().unwrap() = self.worker.take_back(self.id);
        }
    }

    /// A look settling a stream's lost callbacks queries the next one's event through a
    /// handle it copied before it settled the one ahead, whose completion runs wakers; an
    /// operation its submitter takes back in that window (its callback could not be launched)
    /// keeps its event until the worker is between looks, and the worker then destroys it.
    /// The break: the submitter destroyed the event at once, so the look queried a destroyed
    /// event, a use after free on CANN (ACL forbids destroying an event another call uses),
    /// which the simulator refuses as an invalid handle, as the look's log shows.
    #[test]
    fn an_operation_taken_back_during_a_look_keeps_its_event_until_the_look_is_over() {
        let (stream, worker) = (sim_stream(0), Arc::new(worker()));
        let (_, first) = stale(&worker, &stream, &stream);
        let (second, _) = stale(&worker, &stream, &stream);
        let event = worker.lock().streams[&key(&stream.shared)][&second]
            .pending
            .event
            .handle();
        let take_back = Arc::new(TakeBack {
            worker: worker.clone(),
            id: second,
            completer: Mutex::new(None),
        });
        let waker = Waker::from(take_back.clone());
        assert!(
            first
                .poll_result(&mut Context::from_waker(&waker))
                .is_pending()
        );
        synchronize(&stream);
        // Without the deferral the look queried a destroyed event (and logged its 107017);
        // the event's own state below tells, where a scoped subscriber's log may miss a
        // callsite another test's thread hit first (tracing's interest cache).
        settle(&worker);
        succeeded(&first);
        let taken = take_back.completer.lock().unwrap().take();
        let taken = taken.expect("the second was taken back during the look");
        assert!(worker.lock().is_empty());
        let runtime = stream.shared.context.runtime();
        assert!(
            crate::event::query_event(runtime, event).is_ok(),
            "kept until the worker is between looks"
        );
        worker.bury_taken_back();
        assert!(
            crate::event::query_event(runtime, event).is_err(),
            "destroyed then, not pooled"
        );
        taken.complete(Ok(()));
    }
}
