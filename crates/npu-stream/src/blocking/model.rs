//! Loom model of the overseer's wake-up rule, on the overseer's own `deadlines.rs`: pushers
//! queue waits and unpark the overseer only when the queue was empty; the overseer takes what
//! is due and parks when nothing is left. A wait queued and never seen would leave the overseer
//! parked for good, which loom reports as a deadlock.

mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

// The point of the model is to check the very file the overseer compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "deadlines.rs"]
mod deadlines;

use deadlines::Deadlines;
use loom::sync::Arc;

/// Every deadline is due as soon as it is queued (the model has no clock), so the overseer's
/// timed sleeps never happen: what is checked is its one untimed sleep, on an empty queue.
const NOW: u32 = 0;

/// The overseer side: takes what is due until it has seen `expected` waits, parking whenever
/// the queue is empty.
fn overseer(queue: &Deadlines<u32, u32>, expected: usize) -> Vec<u32> {
    let mut seen = Vec::new();
    loop {
        let (due, next) = queue.due(NOW);
        seen.extend(due);
        if seen.len() == expected {
            return seen;
        }
        assert_eq!(next, None, "every queued deadline is due at once");
        loom::thread::park();
    }
}

fn push(queue: &Deadlines<u32, u32>, overseer: &loom::thread::Thread, item: u32) {
    if queue.push(|| NOW, item) {
        overseer.unpark();
    }
}

#[test]
fn every_queued_wait_reaches_the_overseer() {
    loom::model(|| {
        let queue = Arc::new(Deadlines::new());
        let watcher = {
            let queue = queue.clone();
            loom::thread::spawn(move || overseer(&queue, 3))
        };
        let thread = watcher.thread().clone();
        let pusher = {
            let (queue, thread) = (queue.clone(), thread.clone());
            loom::thread::spawn(move || {
                push(&queue, &thread, 1);
                push(&queue, &thread, 2);
            })
        };
        push(&queue, &thread, 3);
        pusher.join().unwrap();
        let mut seen = watcher.join().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3]);
    });
}
