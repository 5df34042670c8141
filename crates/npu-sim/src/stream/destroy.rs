//! The stream's destruction (aclrtDestroyStream, aclrtDestroyStreamForce).

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::sim::Sim;
use crate::sync::{lock, wait_until};

use super::Stream;

impl Stream {
    /// Whether aclrtDestroyStream(Force) or its context's destruction has begun.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Destroys the stream. Without `force` it first waits for its work; with `force` it does
    /// not: the tasks not started are dropped (waits on their records fail with 107023), and
    /// this returns once the task running, which cannot be interrupted, has finished. Task
    /// errors are not reported either way. Returns false if another call destroyed it first.
    pub(crate) fn destroy(&self, sim: &Sim, force: bool) -> bool {
        // Marked under the state lock, so every submission either came before (and is
        // counted in `submitted`, which the waits below read) or sees the mark and is refused.
        let first = {
            let _state = lock(&self.state);
            !self.destroyed.swap(true, Ordering::AcqRel)
        };
        if !first {
            return false;
        }
        crate::stream_state::notify(self.handle, ACL_RT_STREAM_STATE_DESTROY_PRE);
        if let Some(capture) = self.leave_capture() {
            capture.leave(self);
        }
        self.abandon_update();
        if let Some(model) = self.bound_model() {
            // Not bound any more: the instance keeps the tasks it was given.
            let _ = model.unbind(self);
        }
        if force {
            // A task submitted to the idle stream before the destruction is running: it
            // finishes, as under an abort.
            self.await_taken();
            self.aborted.store(true, Ordering::SeqCst);
            self.draining.store(true, Ordering::Release);
            self.bell.ring();
            self.nudge();
            let target = self.submitted.load(Ordering::Acquire);
            let [progress, _, _] = self.listens(target);
            wait_until(&[progress], None, || {
                (self.finished.load(Ordering::Acquire) >= target
                    || self.stopped.load(Ordering::Acquire))
                .then_some(())
            });
        } else {
            // Errors were the owner's to collect; destruction proceeds either way.
            let _ = self.wait_idle(None);
        }
        // The tasks kept for a model go with the stream (a wait among them no longer keeps
        // its event's wait status NOT_READY); dropping them may release a kernel library:
        // outside the lock.
        let kept = std::mem::take(&mut lock(&self.state).persistent);
        drop(kept);
        sim.streams.remove(self.handle);
        sim.reports.forget(self.handle);
        self.device
            .give_stream_slot(self.device_default.load(Ordering::Acquire));
        self.nudge();
        // A task waiting for a stop to end gives up now.
        self.bell.ring();
        true
    }
}
