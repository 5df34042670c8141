//! Reactor counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the reactor's counters since the process started.
///
/// ```
/// let stats = npu_stream::reactor_stats();
/// assert!(stats.completed <= stats.registered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReactorStats {
    /// Operations handed to the reactor.
    pub registered: u64,
    /// Operations the reactor completed (successfully or not).
    pub completed: u64,
    /// `aclrtQueryEventStatus` calls made.
    pub queries: u64,
    /// Times the reactor thread parked (timed or until new work arrived).
    pub parks: u64,
}

impl ReactorStats {
    /// Operations registered but not yet completed.
    pub fn pending(&self) -> u64 {
        self.registered.saturating_sub(self.completed)
    }

    /// Event queries per completed operation: 1.0 is the floor (every query found its event
    /// done); larger values mean the reactor polled events that were still running.
    pub fn polls_per_completion(&self) -> f64 {
        if self.completed == 0 {
            0.0
        } else {
            self.queries as f64 / self.completed as f64
        }
    }
}

#[derive(Default)]
pub(super) struct Counters {
    registered: AtomicU64,
    completed: AtomicU64,
    queries: AtomicU64,
    parks: AtomicU64,
}

impl Counters {
    pub(super) fn registered(&self) {
        self.registered.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn completed(&self) {
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn queried(&self) {
        self.queries.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn parked(&self) {
        self.parks.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> ReactorStats {
        // Completed is read first so a snapshot never shows more completed than registered.
        let completed = self.completed.load(Ordering::Relaxed);
        ReactorStats {
            completed,
            registered: self.registered.load(Ordering::Relaxed).max(completed),
            queries: self.queries.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
        }
    }
}
