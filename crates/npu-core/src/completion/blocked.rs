//! The one wake-up that every thread blocked on an operation shares: how it is armed on the
//! operation's state and how a thread blocks on it. Written against `super::sync` and
//! `super::state`, so that the loom model (`completion::model`) checks the very code blocked
//! threads run; the clock is `super::sync`'s too, so that the model can let a bounded wait
//! time out.

use std::time::Duration;

use super::state::State;
use super::sync::{Arc, Condvar, Instant, Mutex, MutexGuard};

/// Raised once, when the operation completes or is abandoned. Every [`BlockingWaiter`] of the
/// operation waits on the same one, so however many waiters come and go while it is pending,
/// the operation holds one deferred wake-up for them.
///
/// [`BlockingWaiter`]: super::BlockingWaiter
#[derive(Default)]
pub(crate) struct Signal {
    raised: Mutex<bool>,
    changed: Condvar,
}

impl Signal {
    /// A signal raised when `state` completes or is abandoned: it defers the operation's one
    /// notification, a drop guard raising the signal, which the completer runs and an
    /// abandonment drops unrun (run here at once if the operation is done already).
    pub(crate) fn armed<T: Clone>(state: &State<T>) -> Arc<Signal> {
        let signal = Arc::new(Signal::default());
        let raise = RaiseOnDrop(signal.clone());
        state.defer_notify(Box::new(move || drop(raise)));
        signal
    }

    /// Blocks until the operation of `state`, which this signal was [armed](Signal::armed)
    /// on, completes or is abandoned, giving up after `timeout` (`None`: no bound); returns
    /// whether it did. A completer dropped without completing leaves the operation pending
    /// for ever: its drop raises the signal, and `is_abandoned` covers a completer gone
    /// before the signal was armed.
    pub(crate) fn wait_on<T: Clone>(&self, state: &State<T>, timeout: Option<Duration>) -> bool {
        state.is_abandoned() || self.wait(timeout)
    }

    fn raised(&self) -> MutexGuard<'_, bool> {
        self.raised.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn raise(&self) {
        *self.raised() = true;
        self.changed.notify_all();
    }

    /// Waits until the signal is raised, giving up after `timeout` (`None`: no bound);
    /// returns whether it was raised.
    fn wait(&self, timeout: Option<Duration>) -> bool {
        // A timeout too long to represent is no bound.
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        let mut raised = self.raised();
        while !*raised {
            raised = match deadline {
                None => self.changed.wait(raised).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    let waited = self.changed.wait_timeout(raised, left);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
        true
    }
}

/// Raises its signal when dropped: run by the completer as a deferred notification, or
/// dropped unrun when the operation is abandoned, either way waking the blocked threads.
struct RaiseOnDrop(Arc<Signal>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.raise();
    }
}
