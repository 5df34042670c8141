//! Loom model of the callback worker's table, on the worker's own `table.rs`: a submitter
//! registers an operation and takes it back when its callback cannot be launched, while the
//! worker takes out the operations whose callbacks ran, settles lost callbacks from their
//! events with the lock released, and destroys the taken-back events between two looks.
//! Checked: every operation ends exactly once (settled by the worker or handed back to its
//! submitter), a stream's operations settle in submission order, no look queries an event
//! that was destroyed (a use after free on CANN), and every taken-back event is destroyed.

mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

// The point of the model is to check the very file the worker compiles, under loom.
// The model exercises the protocol, not every helper the worker calls.
#[allow(clippy::duplicate_mod, dead_code)]
#[path = "table.rs"]
mod table;

use std::time::{Duration, Instant};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use table::{Entry, Ledger};

/// Every operation is late for its callback at once: each look may settle any of them.
const LATE: Duration = Duration::ZERO;

/// A modelled device event.
#[derive(Default)]
struct Event {
    /// The device ran its record.
    done: AtomicBool,
    /// It was destroyed: a query now is a use after free.
    destroyed: AtomicBool,
}

/// What the model's operations share: their events (by index, which is the handle a look
/// copies out of the table), how often each operation ended, and the order the worker ended
/// them in (its callback ran, or a look settled it).
struct World {
    events: Vec<Event>,
    ended: Vec<AtomicUsize>,
    settled: Mutex<Vec<u64>>,
}

impl World {
    fn new(operations: usize) -> Arc<Self> {
        Arc::new(World {
            events: (0..operations).map(|_| Event::default()).collect(),
            ended: (0..operations).map(|_| AtomicUsize::new(0)).collect(),
            settled: Mutex::new(Vec::new()),
        })
    }

    /// A query of event `index` (`event_complete`), which must still exist.
    fn query(&self, index: usize) -> bool {
        let event = &self.events[index];
        assert!(
            !event.destroyed.load(Ordering::Acquire),
            "a look queried event {index} after it was destroyed"
        );
        event.done.load(Ordering::Acquire)
    }

    fn end(&self, index: usize) {
        self.ended[index].fetch_add(1, Ordering::AcqRel);
    }
}

/// The model's operation `index` (also its id), on the one stream of the model.
struct Op {
    index: usize,
    world: Arc<World>,
    since: Instant,
}

/// An operation's event, owned: dropped (back to the pool) unless buried.
struct OwnedEvent {
    index: usize,
    world: Arc<World>,
}

/// The completer of a taken-back operation: its submitter drains the stream and ends it.
struct Completer {
    index: usize,
    world: Arc<World>,
}

impl Entry for Op {
    type Stream = usize;
    type Event = OwnedEvent;
    type Handle = usize;
    type Completer = Completer;

    fn stream_key(&self) -> usize {
        0
    }

    fn stream(&self) -> &usize {
        &0
    }

    fn since(&self) -> Instant {
        self.since
    }

    fn handle(&self) -> usize {
        self.index
    }

    fn into_parts(self) -> (OwnedEvent, Completer, usize) {
        let event = OwnedEvent {
            index: self.index,
            world: self.world.clone(),
        };
        let completer = Completer {
            index: self.index,
            world: self.world,
        };
        (event, completer, 0)
    }

    fn bury(event: OwnedEvent) {
        let destroyed = &event.world.events[event.index].destroyed;
        assert!(
            !destroyed.swap(true, Ordering::AcqRel),
            "event {} destroyed twice",
            event.index
        );
    }
}

/// Registers operation `index`, its event recorded (and, if `done`, run by the device).
fn register(ledger: &Ledger<Op>, world: &Arc<World>, index: usize, done: bool) {
    world.events[index].done.store(done, Ordering::Release);
    let op = Op {
        index,
        world: world.clone(),
        since: Instant::now(),
    };
    ledger.lock().insert(index as u64, op);
}

/// A submitter whose callback launch failed: takes its operation back and, if it got it,
/// ends it itself (`CallbackStrategy::watch` hands it back, the stream is drained).
fn take_back(ledger: &Ledger<Op>, index: usize) {
    if let Some(completer) = ledger.take_back(index as u64) {
        completer.world.end(completer.index);
    }
}

/// One turn of the worker's loop (`Worker::run`): taken-back events destroyed between two
/// looks, the operations whose callbacks ran (`fired`) ended, then a look settling lost
/// callbacks.
fn worker_turn(ledger: &Ledger<Op>, world: &World, fired: &[u64]) {
    ledger.bury_taken_back();
    for (id, op) in ledger.take_fired(fired) {
        assert!(world.query(op.index), "operation {id}'s callback ran");
        world.settled.lock().unwrap().push(op.index as u64);
        world.end(op.index);
    }
    ledger.settle_lost_callbacks(
        Instant::now(),
        LATE,
        |_, event| world.query(event),
        |op| {
            world.settled.lock().unwrap().push(op.index as u64);
            world.end(op.index);
        },
        drop,
    );
}

/// Each operation ended once, those the worker ended in submission order (one whose callback
/// ran after a later one was settled would show here), and what was taken back
/// destroyed once the worker is between looks again.
fn check(ledger: &Ledger<Op>, world: &World, taken_back: usize) {
    ledger.bury_taken_back();
    assert!(ledger.lock().is_empty());
    for (index, ended) in world.ended.iter().enumerate() {
        let ended = ended.load(Ordering::Acquire);
        assert_eq!(ended, 1, "operation {index} ended {ended} times");
    }
    let settled = world.settled.lock().unwrap().clone();
    assert!(settled.is_sorted(), "ended out of order: {settled:?}");
    let destroyed = world.events[taken_back].destroyed.load(Ordering::Acquire);
    let was_taken_back = !settled.contains(&(taken_back as u64));
    assert_eq!(destroyed, was_taken_back);
}

/// The break this guards: a submitter taking its operation back destroyed the event at once,
/// while a look that had copied its handle before (to query it after settling the one ahead)
/// then queried a destroyed event.
#[test]
fn an_operation_taken_back_during_a_look_keeps_its_event_until_the_look_is_over() {
    loom::model(|| {
        let (ledger, world) = (Arc::new(Ledger::default()), World::new(2));
        register(&ledger, &world, 0, true);
        register(&ledger, &world, 1, true);
        let submitter = {
            let ledger = ledger.clone();
            loom::thread::spawn(move || take_back(&ledger, 1))
        };
        worker_turn(&ledger, &world, &[]);
        submitter.join().unwrap();
        worker_turn(&ledger, &world, &[]);
        check(&ledger, &world, 1);
    });
}

/// A submitter registers while the worker's callbacks and looks run: its operation ends once
/// however its take-back interleaves with a look that settles it, and the operations of the
/// stream settle in submission order. The one ahead is not done at the first look (it holds
/// back the ones behind it), and its callback runs at the second turn.
#[test]
fn a_registered_operation_ends_once_whoever_takes_it() {
    loom::model(|| {
        let (ledger, world) = (Arc::new(Ledger::default()), World::new(3));
        register(&ledger, &world, 0, false);
        register(&ledger, &world, 1, true);
        let submitter = {
            let (ledger, world) = (ledger.clone(), world.clone());
            loom::thread::spawn(move || {
                register(&ledger, &world, 2, true);
                take_back(&ledger, 2);
            })
        };
        worker_turn(&ledger, &world, &[]);
        world.events[0].done.store(true, Ordering::Release);
        worker_turn(&ledger, &world, &[0]);
        submitter.join().unwrap();
        worker_turn(&ledger, &world, &[]);
        check(&ledger, &world, 2);
    });
}
