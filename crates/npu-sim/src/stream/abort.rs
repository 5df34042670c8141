//! aclrtStreamStop and aclrtStreamAbort.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::sync::{lock, wait_until};

use super::Stream;

impl Stream {
    /// aclrtStreamStop: the worker takes no further task (the one running finishes); the
    /// queued work stays until aclrtStreamAbort or the stream's destruction.
    pub(crate) fn stop(&self) {
        // A task submitted to the idle stream before the stop has started on a device.
        self.await_taken();
        // SeqCst: see `settled_doom`.
        self.stopped.store(true, Ordering::SeqCst);
        self.bell.ring();
    }

    /// aclrtStreamAbort: drops every task not run yet (the one running finishes), clears the
    /// stream's errors and a stop, and leaves the stream usable. Waits of other threads on the
    /// dropped work fail with ACL_ERROR_RT_STREAM_ABORT.
    pub(crate) fn abort(&self) {
        let target = self.begin_abort();
        self.finish_abort(target, None);
    }

    /// How many aborts have begun on the stream: one began since the count was `count` if it
    /// differs.
    pub(crate) fn abort_count(&self) -> u64 {
        self.aborts.load(Ordering::Acquire)
    }

    /// The first half of an abort: marks the stream aborting (submissions are refused, the
    /// worker drops what it takes) and returns the count of tasks to see finished or dropped.
    pub(crate) fn begin_abort(&self) -> u64 {
        // A task submitted to the idle stream before the abort is running: it finishes.
        self.await_taken();
        self.aborting.store(true, Ordering::SeqCst);
        // Before the count moves: whoever sees the count moved sees this too.
        let finished = self.finished.load(Ordering::Acquire);
        self.finished_at_abort.store(finished, Ordering::Release);
        self.aborts.fetch_add(1, Ordering::AcqRel);
        self.bell.ring();
        self.nudge();
        self.submitted.load(Ordering::Acquire)
    }

    /// The second half of an abort: once the worker has finished or dropped the first
    /// `target` tasks, clears the stream's errors and a stop and makes it usable again.
    /// Returns `false`, with the stream still aborting, if `deadline` passes first (a running
    /// task has not returned): a later call completes the abort.
    pub(crate) fn finish_abort(&self, target: u64, deadline: Option<Instant>) -> bool {
        let [progress, _, _] = self.listens(target);
        let drained = wait_until(&[progress], deadline, || {
            (self.finished.load(Ordering::Acquire) >= target).then_some(())
        });
        if drained.is_none() {
            return false;
        }
        let kept = {
            let mut state = lock(&self.state);
            state.sticky = None;
            state.since_record = None;
            std::mem::take(&mut state.persistent)
        };
        // Dropping tasks may release a kernel library: outside the lock.
        drop(kept);
        self.stopped.store(false, Ordering::Release);
        self.aborting.store(false, Ordering::Release);
        true
    }
}
