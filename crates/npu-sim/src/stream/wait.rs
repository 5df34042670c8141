//! Host waits for and queries of the stream's work: synchronisation, quiescence, queries.

use std::sync::atomic::Ordering;
use std::time::Instant;

use npu_sys::*;

use crate::error::{Res, SimError};
use crate::sync::{lock, wait_until};

use super::{Stream, UNSYNCED_FLAGS};

impl Stream {
    /// Whether the host does not synchronise the stream (PERSISTENT, DEVICE_USE_ONLY or
    /// CPU_SCHEDULE): aclrtSynchronizeStream(WithTimeout) returns success at once.
    pub(crate) fn host_unsynced(&self) -> bool {
        self.flags & UNSYNCED_FLAGS != 0
    }

    /// Waits for every task submitted so far, leaving task errors in place. Fails if the
    /// stream is doomed, or with ACL_ERROR_RT_STREAM_SYNC_TIMEOUT at the deadline.
    pub(crate) fn wait_idle(&self, deadline: Option<Instant>) -> Res<()> {
        self.wait_idle_since(self.abort_count(), deadline)
    }

    /// [`Self::wait_idle`] for a wait that began when the stream's abort count was `aborts`.
    /// An abort begun since, while some of the waited-for work was unfinished, clears the
    /// stream while the wait is in progress, which fails the wait with
    /// ACL_ERROR_RT_STREAM_ABORT, as the reference says of aclrtStreamAbort and a synchronous
    /// wait: also when the waiter wakes only after the abort has finished, and the stream, its
    /// work dropped, looks idle (it returned 0 then). Reported once every waited-for task has
    /// finished or been dropped (what the abort lets run to its end included), whatever was
    /// submitted after. A wait whose work had all finished when the abort began succeeds.
    /// (Of several aborts begun since, the latest decides.)
    pub(super) fn wait_idle_since(&self, aborts: u64, deadline: Option<Instant>) -> Res<()> {
        if let Some(code) = self.settled_doom() {
            return Err(self.doom_error_by(code, deadline)?);
        }
        if self.flags & UNSYNCED_FLAGS != 0 {
            return Ok(());
        }
        let target = self.submitted.load(Ordering::Acquire);
        self.refuse_self_wait(target)?;
        let outcome = wait_until(&self.listens(target), deadline, || {
            if let Some(code) = self.settled_doom() {
                return Some(Err(code));
            }
            if self.finished.load(Ordering::Acquire) < target {
                return None;
            }
            let cleared = self.abort_count() != aborts
                && self.finished_at_abort.load(Ordering::Acquire) < target;
            Some(match cleared {
                true => Err(ACL_ERROR_RT_STREAM_ABORT),
                false => Ok(()),
            })
        });
        match outcome {
            None => Err(self.sync_timeout()),
            Some(Err(code)) => Err(self.doom_error_by(code, deadline)?),
            Some(Ok(())) => Ok(()),
        }
    }

    fn sync_timeout(&self) -> SimError {
        SimError::new(
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
            format!(
                "stream {} of device {} did not finish its work in time",
                self.id, self.device.id
            ),
        )
    }

    /// [`Self::doom_error`] for a synchronisation with `deadline`: the sync's timeout error
    /// if a lost device still runs a task then ([`crate::device::Device::loss_error_by`]).
    fn doom_error_by(&self, code: aclError, deadline: Option<Instant>) -> Res<SimError> {
        if code == ACL_ERROR_RT_LOST_HEARTBEAT {
            return self
                .device
                .loss_error_by(deadline)
                .ok_or_else(|| self.sync_timeout());
        }
        Ok(self.doom_error(code))
    }

    /// Waits until no task submitted so far can still touch memory, leaving task errors in
    /// place: until they have all finished, or, once the stream is doomed (its queued tasks
    /// will never run), until the task running then has finished or waits (for an event, at
    /// the hold gate, at a stop: a doomed stream's waiting task never starts its work, and a
    /// program stopped between two of its tasks never finishes before an abort).
    pub(crate) fn wait_quiescent(&self) {
        let target = self.submitted.load(Ordering::Acquire);
        let drained = wait_until(&self.listens(target), None, || {
            if self.doom().is_some() {
                return Some(false);
            }
            (self.finished.load(Ordering::Acquire) >= target).then_some(true)
        });
        if drained != Some(true) {
            // Taken under the queue lock, so a task is counted before it can start; once it
            // is counted, a doomed stream abandons it at once or it is the one running.
            let running = self.started.load(Ordering::Acquire);
            wait_until(
                &[self.bell.at(running), self.waiting_bell.any()],
                None,
                || {
                    let finished = self.finished.load(Ordering::Acquire) >= running;
                    (finished || self.waiting.load(Ordering::SeqCst)).then_some(())
                },
            );
        }
    }

    /// Waits until every task submitted so far has finished, or the stream is doomed (its
    /// queued tasks will never run) and no task of it is still running; false if `deadline`
    /// passed first.
    pub(crate) fn drained_by(&self, deadline: Instant) -> bool {
        let target = self.submitted.load(Ordering::Acquire);
        wait_until(&self.listens(target), Some(deadline), || {
            let done = self.finished.load(Ordering::Acquire) >= target;
            (done || self.settled_doom().is_some()).then_some(())
        })
        .is_some()
    }

    /// Waits for every task submitted so far; returns (and clears) the first task error.
    pub(crate) fn synchronize(&self, deadline: Option<Instant>) -> Res<()> {
        self.wait_idle(deadline)?;
        if let Ok(sim) = crate::sim::sim() {
            crate::pool::after_sync(sim, &self.device);
        }
        match lock(&self.state).sticky.take() {
            Some(error) => Err(self.task_error(error)),
            None => Ok(()),
        }
    }

    /// Whether all submitted work is done. Task errors are left to the synchronisations;
    /// only a doom (the work cannot complete) fails the query.
    pub(crate) fn query(&self) -> Res<bool> {
        if let Some(code) = self.settled_doom() {
            // A lost device's task still running elsewhere: not done yet (a query never
            // waits for it).
            return match self.doom_error_by(code, Some(Instant::now())) {
                Ok(error) => Err(error),
                Err(_) => Ok(false),
            };
        }
        Ok(self.finished.load(Ordering::Acquire) >= self.submitted.load(Ordering::Acquire))
    }

    fn task_error(&self, error: SimError) -> SimError {
        SimError::new(
            error.code,
            format!(
                "a task on stream {} of device {} failed: {}",
                self.id, self.device.id, error.msg
            ),
        )
    }
}
