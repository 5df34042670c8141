//! The overseer's queue of deadlines and its wake-up rule, written against `super::sync` so the
//! loom model (`blocking::model`) checks the very code the overseer runs.

use std::collections::VecDeque;

use super::sync::{Mutex, MutexGuard};

/// Items with deadlines, in the order they were pushed (their deadlines only grow).
///
/// The overseer's one untimed sleep is the park it takes when this is empty. A pusher that
/// makes it non-empty unparks it; a push to a queue that was not empty needs no wake-up,
/// because the overseer then sleeps only until a deadline it already knows. The thread's
/// park token closes the gap between the overseer finding the queue empty and parking: an
/// unpark in between makes the park return at once.
pub(crate) struct Deadlines<I, T> {
    queue: Mutex<VecDeque<(I, T)>>,
}

impl<I: Ord + Copy, T> Deadlines<I, T> {
    pub(crate) fn new() -> Self {
        Deadlines {
            queue: Mutex::new(VecDeque::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(I, T)>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` with the deadline `deadline(now)`, the clock read under the queue's lock
    /// so deadlines stay in order. Returns whether the queue was empty, in which case the
    /// caller must unpark the overseer.
    pub(crate) fn push(&self, deadline: impl FnOnce() -> I, item: T) -> bool {
        let mut queue = self.lock();
        queue.push_back((deadline(), item));
        queue.len() == 1
    }

    /// Takes the items whose deadline is at or before `now`; returns them with the next
    /// deadline still queued (`None`: park until a push to the empty queue).
    pub(crate) fn due(&self, now: I) -> (Vec<T>, Option<I>) {
        let mut queue = self.lock();
        let ready = queue.partition_point(|(deadline, _)| *deadline <= now);
        let due = queue.drain(..ready).map(|(_, item)| item).collect();
        (due, queue.front().map(|(deadline, _)| *deadline))
    }
}
