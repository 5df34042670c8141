//! Loom model of the reactor's registration and wake-up protocol, on the reactor's own
//! `wakeup.rs`: a submitter publishes work and notifies; the reactor drains or sleeps. Also the
//! flag-then-notify paths (a fault notice, an abort's discard mark), the stop path, which
//! hands what a stopped reactor watched to the sentinel, and a stream leaving the reactor
//! while registrations race it.

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicU8, Ordering};
}

// The point of the model is to check the very file the reactor compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "wakeup.rs"]
mod wakeup;

use loom::sync::{Arc, Mutex};
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

/// The stop path against registrations (`Reactor::stop`, `Reactor::register`, `hand_over`):
/// a stream's queue and `in_reactor` flag, the inbox, the `stopped` flag, and the operations
/// handed to the sentinel.
mod stop {
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Queue {
        pending: Vec<u32>,
        in_reactor: bool,
    }

    #[derive(Default)]
    struct Shared {
        queue: Mutex<Queue>,
        /// Holds the one stream's id when it is in the inbox.
        inbox: Mutex<Vec<()>>,
        stopped: AtomicBool,
        handed: Mutex<Vec<u32>>,
    }

    impl Shared {
        fn register(&self, item: u32) -> bool {
            let activate = {
                let mut queue = self.queue.lock().unwrap();
                if self.stopped.load(Ordering::SeqCst) {
                    return false;
                }
                queue.pending.push(item);
                !std::mem::replace(&mut queue.in_reactor, true)
            };
            if activate {
                let mut inbox = self.inbox.lock().unwrap();
                if self.stopped.load(Ordering::SeqCst) {
                    drop(inbox);
                    self.hand_over();
                    return true;
                }
                inbox.push(());
            }
            true
        }

        fn stop(&self, active: bool) {
            self.stopped.store(true, Ordering::SeqCst);
            let inboxed = std::mem::take(&mut *self.inbox.lock().unwrap());
            if active {
                self.hand_over();
            }
            inboxed.iter().for_each(|_| self.hand_over());
        }

        fn hand_over(&self) {
            let drained: Vec<u32> = {
                let mut queue = self.queue.lock().unwrap();
                queue.in_reactor = false;
                queue.pending.drain(..).collect()
            };
            self.handed.lock().unwrap().extend(drained);
        }
    }

    /// Two registrations race the stop; the stream is either idle or already watched (in the
    /// reactor's `active`, with one operation queued). Every accepted operation must reach the
    /// sentinel, and none may stay queued.
    #[test]
    fn a_stop_strands_no_registered_operation() {
        for active in [false, true] {
            loom::model(move || {
                let shared = Arc::new(Shared::default());
                if active {
                    let mut queue = shared.queue.lock().unwrap();
                    queue.pending.push(0);
                    queue.in_reactor = true;
                }
                let registrant = |item| {
                    let shared = shared.clone();
                    loom::thread::spawn(move || shared.register(item).then_some(item))
                };
                let (one, two) = (registrant(1), registrant(2));
                shared.stop(active);
                let mut accepted: Vec<u32> = [one, two]
                    .into_iter()
                    .filter_map(|thread| thread.join().unwrap())
                    .collect();
                if active {
                    accepted.push(0);
                }
                accepted.sort();
                let mut handed = shared.handed.lock().unwrap().clone();
                handed.sort();
                assert_eq!(handed, accepted);
                assert!(shared.queue.lock().unwrap().pending.is_empty());
            });
        }
    }
}

/// A stream leaving the reactor against a registration (`head`, `advance`, `Reactor::register`,
/// `Reactor::adopt`): the reactor finds the stream's queue empty and clears `in_reactor` under
/// the queue lock, dropping the stream from its active list; a registration pushes under the
/// same lock and, if it found `in_reactor` clear, puts the stream in the inbox and notifies.
/// The registration must never land in a queue no one watches.
mod leave {
    use std::collections::VecDeque;

    use loom::sync::{Arc, Mutex};

    use super::{Idle, LINGERS, wakeup::Wakeup};

    #[derive(Default)]
    struct Queue {
        pending: VecDeque<u32>,
        in_reactor: bool,
    }

    #[derive(Default)]
    struct Shared {
        queue: Mutex<Queue>,
        /// Holds the one stream when it is in the inbox.
        inbox: Mutex<Vec<()>>,
        wakeup: Wakeup,
    }

    impl Default for Wakeup {
        fn default() -> Self {
            Wakeup::new()
        }
    }

    impl Shared {
        fn register(&self, item: u32, reactor: &loom::thread::Thread) {
            let activate = {
                let mut queue = self.queue.lock().unwrap();
                queue.pending.push_back(item);
                !std::mem::replace(&mut queue.in_reactor, true)
            };
            if activate {
                self.inbox.lock().unwrap().push(());
                if self.wakeup.notify() {
                    reactor.unpark();
                }
            }
        }

        /// `head`: the oldest operation, or the stream leaves (same lock).
        fn head(queue: &mut Queue) -> Option<u32> {
            let head = queue.pending.front().copied();
            if head.is_none() {
                queue.in_reactor = false;
            }
            head
        }

        /// `adopt`: whether the inbox held the stream.
        fn adopt(&self) -> bool {
            !std::mem::take(&mut *self.inbox.lock().unwrap()).is_empty()
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
                    let mut next = Self::head(&mut self.queue.lock().unwrap());
                    while next.is_some() {
                        let mut queue = self.queue.lock().unwrap();
                        seen.extend(queue.pending.pop_front());
                        next = Self::head(&mut queue);
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
                    let shared = Arc::new(Shared::default());
                    {
                        let mut queue = shared.queue.lock().unwrap();
                        queue.pending.extend((0..queued).map(|i| 100 + i));
                        queue.in_reactor = true;
                    }
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
                    assert!(shared.queue.lock().unwrap().pending.is_empty());
                });
            }
        }
    }
}
