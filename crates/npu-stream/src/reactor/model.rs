//! Loom model of the reactor's registration and wake-up protocol, on the reactor's own
//! `wakeup.rs`: a submitter publishes work and notifies; the reactor drains or sleeps. Also the
//! flag-then-notify paths (a fault notice, an abort's discard mark), and, on the reactor's
//! `roster.rs`, the stop path, which hands what a stopped reactor watched to the sentinel,
//! and a stream leaving the reactor while registrations race it.

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

// The point of the model is to check the very files the reactor compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "roster.rs"]
mod roster;
#[allow(clippy::duplicate_mod)]
#[path = "wakeup.rs"]
mod wakeup;

use std::collections::VecDeque;

use loom::sync::{Arc, Mutex, MutexGuard};
use roster::{Joined, Member, Queued, Roster};
use wakeup::Wakeup;

/// The reactor side: runs passes until it has seen `expected` items, sleeping (parking) when
/// `linger` passes in a row found nothing (the reactor keeps passing for a while after its
/// last stream went idle). loom reports a deadlock if it parks with work left unnoticed.
fn reactor_loop(
    wakeup: &Wakeup,
    inbox: &Mutex<Vec<u32>>,
    expected: usize,
    linger: usize,
) -> Vec<u32> {
    let mut seen = Vec::new();
    let drain = |seen: &mut Vec<u32>| seen.extend(inbox.lock().unwrap().drain(..));
    let mut idle = Idle::new(linger);
    loop {
        if wakeup.take_notification() {
            drain(&mut seen);
            idle.passes = 0;
        }
        if seen.len() == expected {
            return seen;
        }
        if idle.pass(wakeup) {
            drain(&mut seen);
        }
    }
}

/// The reactor between passes that found nothing: it yields for `linger` passes, then sleeps
/// through the `Wakeup` (parking), as the reactor's linger does.
struct Idle {
    passes: usize,
    linger: usize,
}

impl Idle {
    fn new(linger: usize) -> Self {
        Idle { passes: 0, linger }
    }

    /// One idle pass: a yield while lingering (false), else the sleep's answer (whether a
    /// notification came).
    fn pass(&mut self, wakeup: &Wakeup) -> bool {
        if self.passes < self.linger {
            self.passes += 1;
            loom::thread::yield_now();
            return false;
        }
        self.passes = 0;
        wakeup.sleep(loom::thread::park)
    }
}

fn submit(wakeup: &Wakeup, inbox: &Mutex<Vec<u32>>, reactor: &loom::thread::Thread, item: u32) {
    inbox.lock().unwrap().push(item);
    if wakeup.notify() {
        reactor.unpark();
    }
}

/// How many fruitless passes the modelled reactor makes before parking: at once, as when
/// streams are still active, and after lingering, as when the last stream just went idle.
const LINGERS: [usize; 2] = [0, 2];

/// A modelled reactor thread with its wake-up state and inbox.
struct Model {
    wakeup: Arc<Wakeup>,
    inbox: Arc<Mutex<Vec<u32>>>,
    reactor: loom::thread::JoinHandle<Vec<u32>>,
}

/// A reactor thread expecting `expected` items.
fn start_reactor(expected: usize, linger: usize) -> Model {
    let wakeup = Arc::new(Wakeup::new());
    let inbox = Arc::new(Mutex::new(Vec::new()));
    let (w, i) = (wakeup.clone(), inbox.clone());
    let reactor = loom::thread::spawn(move || reactor_loop(&w, &i, expected, linger));
    Model {
        wakeup,
        inbox,
        reactor,
    }
}

#[test]
fn a_submission_always_reaches_the_reactor() {
    for linger in LINGERS {
        loom::model(move || {
            let model = start_reactor(1, linger);
            submit(&model.wakeup, &model.inbox, model.reactor.thread(), 7);
            assert_eq!(model.reactor.join().unwrap(), vec![7]);
        });
    }
}

#[test]
fn two_concurrent_submitters_are_both_seen() {
    for linger in LINGERS {
        loom::model(move || {
            let model = start_reactor(2, linger);
            let handle = model.reactor.thread().clone();
            let (w2, i2) = (model.wakeup.clone(), model.inbox.clone());
            let other = loom::thread::spawn(move || submit(&w2, &i2, &handle, 2));
            submit(&model.wakeup, &model.inbox, model.reactor.thread(), 1);
            other.join().unwrap();
            let mut seen = model.reactor.join().unwrap();
            seen.sort();
            assert_eq!(seen, vec![1, 2]);
        });
    }
}

/// The exception callback's path: it flags the stream (no inbox), then notifies. A reactor
/// that checks the flag on every pass and sleeps through `Wakeup` must see it.
#[test]
fn a_fault_notice_always_reaches_the_reactor() {
    use loom::sync::atomic::{AtomicBool, Ordering};

    for linger in LINGERS {
        loom::model(move || {
            let wakeup = Arc::new(Wakeup::new());
            let noticed = Arc::new(AtomicBool::new(false));
            let (w, n) = (wakeup.clone(), noticed.clone());
            let reactor = loom::thread::spawn(move || {
                let mut idle = Idle::new(linger);
                loop {
                    w.take_notification();
                    // As `Reactor::poll_stream` reads and clears it.
                    if n.load(Ordering::Acquire) {
                        n.store(false, Ordering::Release);
                        return;
                    }
                    idle.pass(&w);
                }
            });
            // The exception callback (`stream::watch_faults`, `Reactor::nudge`).
            noticed.store(true, Ordering::Release);
            if wakeup.notify() {
                reactor.thread().unpark();
            }
            reactor.join().unwrap();
        });
    }
}

/// The abort's path (`AbortInProgress`'s drop, `Strategy::discarded`, `Reactor::nudge`): it
/// raises the stream's `aborted_through` mark (never cleared), then notifies. A reactor that
/// fails the discarded head on every pass (`Reactor::fail_aborted`) and sleeps through
/// `Wakeup` must see it, even when its only active stream is not due for a query.
#[test]
fn an_abort_mark_always_reaches_the_reactor() {
    use loom::sync::atomic::{AtomicU64, Ordering};

    for linger in LINGERS {
        loom::model(move || {
            let wakeup = Arc::new(Wakeup::new());
            let aborted_through = Arc::new(AtomicU64::new(0));
            // The stream's queue: one operation watched before the abort (seq 1).
            let queue = Arc::new(Mutex::new(vec![1u64]));
            let (w, a, q) = (wakeup.clone(), aborted_through.clone(), queue.clone());
            let reactor = loom::thread::spawn(move || {
                let mut idle = Idle::new(linger);
                loop {
                    w.take_notification();
                    // As `Reactor::fail_aborted`: the oldest operations up to the mark.
                    let through = a.load(Ordering::Acquire);
                    let mut pending = q.lock().unwrap();
                    pending.retain(|&seq| seq > through);
                    if pending.is_empty() {
                        return;
                    }
                    drop(pending);
                    idle.pass(&w);
                }
            });
            aborted_through.fetch_max(1, Ordering::AcqRel);
            if wakeup.notify() {
                reactor.thread().unpark();
            }
            reactor.join().unwrap();
        });
    }
}

/// A modelled stream: its queue of operations (numbers) under its lock.
#[derive(Default)]
struct Stream {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<u32>,
    in_reactor: bool,
}

impl Queued for Queue {
    type Op = u32;

    fn pending(&mut self) -> &mut VecDeque<u32> {
        &mut self.pending
    }

    fn in_reactor(&mut self) -> &mut bool {
        &mut self.in_reactor
    }
}

impl Member for Arc<Stream> {
    type Queue = Queue;

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap()
    }
}

impl Stream {
    /// A stream the reactor watches, with `ops` queued.
    fn watched(ops: impl IntoIterator<Item = u32>) -> Arc<Self> {
        let stream = Arc::new(Stream::default());
        {
            let mut queue = stream.queue();
            queue.pending.extend(ops);
            queue.in_reactor = true;
        }
        stream
    }
}

/// The stop path against registrations (`Reactor::stop`, `Reactor::register`, `hand_over`),
/// on `roster.rs`: what a stopped reactor held, and what a registrant told its stream was
/// orphaned, is handed over.
mod stop {
    use super::*;

    /// What the modelled reactor and its registrants share: the roster, and the operations
    /// handed to the sentinel.
    struct Shared {
        roster: Roster<Arc<Stream>>,
        handed: Mutex<Vec<u32>>,
    }

    impl Shared {
        /// `Reactor::register`: `None` if the operation was refused, else whether the
        /// registrant handed the stream over itself (orphaned).
        fn register(&self, stream: &Arc<Stream>, item: u32) -> Option<bool> {
            match self.roster.register(stream, item, || ()) {
                Err(_) => None,
                Ok(Joined::Orphaned) => {
                    self.hand_over(stream);
                    Some(true)
                }
                Ok(Joined::Queued | Joined::Activated) => Some(false),
            }
        }

        /// `Reactor::stop`, with the reactor's active streams.
        fn stop(&self, active: Vec<Arc<Stream>>) {
            let inboxed = self.roster.stop();
            active
                .iter()
                .chain(&inboxed)
                .for_each(|s| self.hand_over(s));
        }

        /// `hand_over`: the stream's operations go to the sentinel.
        fn hand_over(&self, stream: &Arc<Stream>) {
            let drained = roster::evict(&mut *stream.queue());
            self.handed.lock().unwrap().extend(drained);
        }
    }

    /// Two registrations race the stop; the stream is either idle or already watched (in the
    /// reactor's `active`, with one operation queued). Every accepted operation must reach the
    /// sentinel, and none may stay queued. A watched stream is handed over by the stop alone:
    /// a registration racing it is queued before the hand-over or refused, never left to its
    /// registrant to hand over (which `stopped` read under the queue lock ensures; read
    /// before it, a registration landed after the hand-over, and only its registrant's own
    /// hand-over kept it from being stranded).
    #[test]
    fn a_stop_strands_no_registered_operation() {
        for active in [false, true] {
            loom::model(move || {
                let shared = Arc::new(Shared {
                    roster: Roster::new(),
                    handed: Mutex::new(Vec::new()),
                });
                let stream = match active {
                    true => Stream::watched([0]),
                    false => Arc::new(Stream::default()),
                };
                let registrant = |item| {
                    let (shared, stream) = (shared.clone(), stream.clone());
                    loom::thread::spawn(move || {
                        shared
                            .register(&stream, item)
                            .map(|orphaned| (item, orphaned))
                    })
                };
                let (one, two) = (registrant(1), registrant(2));
                shared.stop(active.then(|| stream.clone()).into_iter().collect());
                let registered: Vec<(u32, bool)> = [one, two]
                    .into_iter()
                    .filter_map(|thread| thread.join().unwrap())
                    .collect();
                if active {
                    assert!(
                        registered.iter().all(|&(_, orphaned)| !orphaned),
                        "a registrant handed over a stream the stop held: {registered:?}"
                    );
                }
                let mut accepted: Vec<u32> = registered.iter().map(|&(item, _)| item).collect();
                if active {
                    accepted.push(0);
                }
                accepted.sort();
                let mut handed = shared.handed.lock().unwrap().clone();
                handed.sort();
                assert_eq!(handed, accepted);
                assert!(stream.queue().pending.is_empty());
            });
        }
    }
}

/// A stream leaving the reactor against a registration (`head`, `advance`, `Reactor::register`,
/// `Reactor::adopt`), on `roster.rs`: the reactor finds the stream's queue empty and clears
/// `in_reactor` under the queue lock, dropping the stream from its active list; a registration
/// pushes under the same lock and, if it found `in_reactor` clear, puts the stream in the
/// inbox and notifies. The registration must never land in a queue no one watches.
mod leave {
    use super::*;

    /// The modelled reactor's roster and wake-up, and its one stream.
    struct Shared {
        roster: Roster<Arc<Stream>>,
        wakeup: Wakeup,
        stream: Arc<Stream>,
    }

    impl Shared {
        /// `Reactor::register` and its nudge.
        fn register(&self, item: u32, reactor: &loom::thread::Thread) {
            let joined = self.roster.register(&self.stream, item, || ());
            match joined {
                Ok(Joined::Activated) => {
                    if self.wakeup.notify() {
                        reactor.unpark();
                    }
                }
                Ok(Joined::Queued) => {}
                Ok(Joined::Orphaned) | Err(_) => unreachable!("the reactor never stops"),
            }
        }

        /// `adopt`: whether the inbox held the stream.
        fn adopt(&self) -> bool {
            let adopted = self.roster.adopt();
            assert!(adopted.len() <= 1, "a stream is in the inbox once");
            !adopted.is_empty()
        }

        /// The reactor until it has completed `expected` operations; the stream starts active.
        fn reactor(&self, expected: usize, linger: usize) -> Vec<u32> {
            let (mut seen, mut active, mut idle) = (Vec::new(), true, Idle::new(linger));
            loop {
                if self.wakeup.take_notification() && self.adopt() {
                    assert!(!active, "a stream is adopted only once it left");
                    active = true;
                    idle.passes = 0;
                }
                if active {
                    // The query runs with no lock held; every head is found done.
                    let mut next = roster::head(&mut *self.stream.queue()).is_some();
                    while next {
                        // `advance`: the head taken off, the next one found, under one lock.
                        let mut queue = self.stream.queue();
                        seen.extend(queue.pending.pop_front());
                        next = roster::head(&mut *queue).is_some();
                    }
                    active = false;
                }
                if seen.len() == expected {
                    return seen;
                }
                if idle.pass(&self.wakeup) && self.adopt() {
                    active = true;
                }
            }
        }
    }

    /// One or two registrations race a stream that is leaving (its queue empty, or holding
    /// one operation the reactor completes first): every registered operation is completed.
    #[test]
    fn a_registration_racing_a_stream_leaving_is_never_stranded() {
        for linger in LINGERS {
            for (queued, registrants) in [(0, 1), (1, 1), (1, 2)] {
                loom::model(move || {
                    let shared = Arc::new(Shared {
                        roster: Roster::new(),
                        wakeup: Wakeup::new(),
                        stream: Stream::watched((0..queued).map(|i| 100 + i)),
                    });
                    let expected = (queued + registrants) as usize;
                    let reactor = {
                        let shared = shared.clone();
                        loom::thread::spawn(move || shared.reactor(expected, linger))
                    };
                    let others: Vec<_> = (1..registrants)
                        .map(|item| {
                            let (shared, handle) = (shared.clone(), reactor.thread().clone());
                            loom::thread::spawn(move || shared.register(item, &handle))
                        })
                        .collect();
                    shared.register(0, reactor.thread());
                    others.into_iter().for_each(|t| t.join().unwrap());
                    let mut seen = reactor.join().unwrap();
                    seen.sort();
                    let mut want: Vec<u32> = (0..registrants)
                        .chain((0..queued).map(|i| 100 + i))
                        .collect();
                    want.sort();
                    assert_eq!(seen, want);
                    assert!(shared.stream.queue().pending.is_empty());
                });
            }
        }
    }
}
