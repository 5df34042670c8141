//! Operations the device may run that no strategy watches: their submission panicked, or
//! recording their event (or launching their callback) failed. The sentinel ends each once
//! the stream has drained; on a stream that never drains (work always queued) that would
//! never happen, so each also ends as soon as an operation submitted after it finishes, and
//! before that operation's own completion: the device runs a stream's work in order, so a
//! later operation's end says the drained one's work has run or never will.
//!
//! A drained operation's work has no completion event recorded after it, and a runtime event
//! captures every task of its stream since the previous record: the next operation's own
//! event would capture the drained tasks' failures, and that operation would fail with an
//! earlier task's fault although its own work ran. So the next submission to a stream with
//! drained work first records a fence of its own ([`Drains::fence_due`]), which reports what
//! it captured to the stream's failure record, for the next `synchronize`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use npu_core::{Completer, Error};

/// A drained operation's completer and the error it ends with, taken by whichever of the
/// sentinel and a later operation's end comes first.
pub(crate) type Drain = Mutex<Option<(Completer, Error)>>;

/// The drains of one stream still waiting, each with the stream's `watched` count when it
/// began: every operation numbered above it was submitted after the drained one.
#[derive(Default)]
pub(crate) struct Drains {
    /// How many are in `waiting`, so that finishing an operation takes no lock when none is.
    count: AtomicUsize,
    /// Oldest first: the sentinel ends a stream's drains in that order, and finds each one at
    /// the front. (Removal by a search of the whole list made 40,000 drains end in 40 s of
    /// the sentinel's time, during which it answered no probe of any stream.)
    waiting: Mutex<VecDeque<(u64, Arc<Drain>)>>,
    /// Whether work was drained since the last fence: read by every submission, so that a
    /// stream that never drained pays one load and nothing more.
    unfenced: AtomicBool,
    /// The ACL function of the first operation drained since the last fence, which the
    /// fence's failure names.
    first_unfenced: Mutex<Option<&'static str>>,
}

impl Drains {
    /// Adds a drain that an operation numbered above `through` ends.
    pub(crate) fn add(&self, through: u64, completer: Completer, error: Error) -> Arc<Drain> {
        let drain = Arc::new(Mutex::new(Some((completer, error))));
        let mut waiting = self.lock();
        waiting.push_back((through, drain.clone()));
        self.count.store(waiting.len(), Ordering::Release);
        drain
    }

    /// Ends every drain that the operation numbered `seq` finishing shows to be over.
    pub(crate) fn end_before(&self, seq: u64) {
        if seq == 0 || self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let over: Vec<Arc<Drain>> = {
            let mut waiting = self.lock();
            let (over, still): (VecDeque<_>, VecDeque<_>) =
                waiting.drain(..).partition(|(through, _)| *through < seq);
            *waiting = still;
            self.count.store(waiting.len(), Ordering::Release);
            over.into_iter().map(|(_, drain)| drain).collect()
        };
        // Completed with no lock held: a completion runs what was deferred on it.
        for drain in over {
            end(&drain);
        }
    }

    /// Notes that an operation submitting `api` was drained: the next submission fences it
    /// off. Called under the stream's submission lock.
    pub(crate) fn unfence(&self, api: &'static str) {
        let mut first = self
            .first_unfenced
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(api);
        self.unfenced.store(true, Ordering::Release);
    }

    /// Whether a fence must be recorded before the next submission's work, and the ACL
    /// function it names: that of the first operation drained since the last fence. Called
    /// under the stream's submission lock, as [`unfence`](Drains::unfence) and
    /// [`fenced`](Drains::fenced) are, so the answer holds until the submission is done.
    pub(crate) fn fence_due(&self) -> Option<&'static str> {
        if !self.unfenced.load(Ordering::Acquire) {
            return None;
        }
        *self
            .first_unfenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that a fence watched by a strategy now follows every operation drained so far.
    pub(crate) fn fenced(&self) {
        *self
            .first_unfenced
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.unfenced.store(false, Ordering::Release);
    }

    /// Forgets a drain the sentinel ended.
    pub(crate) fn remove(&self, drain: &Arc<Drain>) {
        let mut waiting = self.lock();
        if let Some(at) = waiting
            .iter()
            .position(|(_, waiting)| Arc::ptr_eq(waiting, drain))
        {
            waiting.remove(at);
        }
        self.count.store(waiting.len(), Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<Drain>)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Completes the drained operation with its error, unless that was done already.
pub(crate) fn end(drain: &Drain) {
    let taken = drain.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((completer, error)) = taken {
        completer.complete(Err(error));
    }
}

/// Whether the drained operation has been completed.
pub(crate) fn ended(drain: &Drain) -> bool {
    drain.lock().unwrap_or_else(|e| e.into_inner()).is_none()
}

#[cfg(test)]
mod tests {
    use npu_core::Completion;

    use super::*;

    fn drain(drains: &Drains, through: u64) -> (Arc<Drain>, Completion) {
        // SAFETY: no memory stands behind the completion.
        let completer = unsafe { Completer::new() };
        let done = completer.completion();
        let error = Error::invalid("test", "self", "could not be watched");
        (drains.add(through, completer, error), done)
    }

    #[test]
    fn a_drain_ends_when_an_operation_submitted_after_it_finishes_and_only_then() {
        let drains = Drains::default();
        let (first, first_done) = drain(&drains, 3);
        let (second, second_done) = drain(&drains, 5);
        // Operations up to the one it followed say nothing about it; 0 is no operation.
        for seq in [0, 1, 3] {
            drains.end_before(seq);
        }
        assert!(!first_done.is_complete() && !second_done.is_complete());
        drains.end_before(4);
        assert!(ended(&first) && !ended(&second));
        let failed = first_done.result().unwrap().unwrap_err();
        assert!(
            failed.to_string().contains("could not be watched"),
            "{failed}"
        );
        assert!(!second_done.is_complete());
        // The sentinel finding the stream drained ends it once; a later operation finds it
        // gone.
        end(&second);
        drains.remove(&second);
        assert!(second_done.result().unwrap().is_err());
        drains.end_before(9);
        assert_eq!(drains.count.load(Ordering::Acquire), 0);
        assert!(drains.lock().is_empty());
    }

    /// A fence is due from the first drain on until one is recorded, and names the first
    /// drained operation's function, whichever drains followed it.
    #[test]
    fn a_fence_is_due_after_a_drain_and_names_the_first_drained_function() {
        let drains = Drains::default();
        assert_eq!(drains.fence_due(), None, "a stream that never drained");
        drains.unfence("aclrtMemsetAsync");
        drains.unfence("aclrtMemcpyAsync");
        assert_eq!(drains.fence_due(), Some("aclrtMemsetAsync"));
        drains.fenced();
        assert_eq!(drains.fence_due(), None);
        drains.unfence("aclrtMemcpyAsync");
        assert_eq!(drains.fence_due(), Some("aclrtMemcpyAsync"));
    }
}
