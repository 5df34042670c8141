//! The reactor's sleep/wake handshake, written against `super::sync` so the loom model
//! (`reactor::model`) checks the very code the reactor runs.

use super::sync::{AtomicU8, Ordering};

const RUNNING: u8 = 0;
const SLEEPING: u8 = 1;
const NOTIFIED: u8 = 2;

/// Lets submitters wake the reactor exactly when it might be asleep, without a lock.
///
/// The reactor announces `SLEEPING` before every park and parks only if no notification came
/// in between; a submitter first publishes its work (the inbox), then swaps in `NOTIFIED` and
/// unparks only if it saw `SLEEPING`. Either the reactor sees the notification before parking,
/// or the submitter sees the reactor asleep and unparks it: work is never left unnoticed.
pub(crate) struct Wakeup {
    state: AtomicU8,
}

impl Wakeup {
    pub(crate) fn new() -> Self {
        Wakeup {
            state: AtomicU8::new(RUNNING),
        }
    }

    /// Submitter side, after publishing work. Returns whether the reactor must be unparked.
    pub(crate) fn notify(&self) -> bool {
        self.state.swap(NOTIFIED, Ordering::AcqRel) == SLEEPING
    }

    /// Reactor side: parks with `park` unless notified since the last pass. Returns whether
    /// a notification arrived (so the inbox must be drained).
    pub(crate) fn sleep(&self, park: impl FnOnce()) -> bool {
        if self
            .state
            .compare_exchange(RUNNING, SLEEPING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            park();
        }
        self.state.swap(RUNNING, Ordering::AcqRel) == NOTIFIED
    }

    /// Reactor side, at the start of a pass: clears a pending notification. Returns whether
    /// there was one.
    pub(crate) fn take_notification(&self) -> bool {
        self.state.swap(RUNNING, Ordering::AcqRel) == NOTIFIED
    }
}
