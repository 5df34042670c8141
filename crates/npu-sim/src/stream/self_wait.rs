//! Refusals of waits that would wait for the calling thread itself (a host task or a BLOCK
//! callback's report thread of the stream).

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::error::{Res, fail};
use crate::sync::lock;

use super::{Stream, UNSYNCED_FLAGS};

impl Stream {
    /// The BLOCK callback at `position` has run or will never run: nothing waits at it for its
    /// report thread any more.
    pub(crate) fn block_callback_ran(&self, position: u64) {
        lock(&self.state).block_callbacks.remove(&position);
    }

    /// Fails if the calling thread runs a host task of this stream at or before `position`:
    /// even a wait that drops blocked tasks (an abort, a forced destruction) waits for the task
    /// running, which would be the caller's own.
    pub(crate) fn refuse_wait_for_caller(&self, position: u64) -> Res<()> {
        crate::host_task::refuse_self_wait(self.handle, self.id, position)
    }

    /// Fails if waiting for the stream to reach `position` would wait for the calling thread
    /// itself: it runs a host task of this stream at or before `position`, or it is the report
    /// thread of a BLOCK callback there, which only its own aclrtProcessReport can run (an
    /// abort or a forced destruction drops such a callback instead of waiting for it).
    pub(crate) fn refuse_self_wait(&self, position: u64) -> Res<()> {
        self.refuse_wait_for_caller(position)?;
        let first_block = {
            let state = lock(&self.state);
            let callback = state.block_callbacks.first().copied();
            let program = state.block_programs.first().copied();
            callback.into_iter().chain(program).min()
        };
        if let Some(at) = first_block.filter(|&at| at <= position)
            && let Ok(sim) = crate::sim::sim()
            && sim
                .reports
                .serves(crate::report::current_thread_id(), self.handle)
        {
            fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "stream {} waits at its task {at} for a blocking callback that only the calling \
                 thread, its report thread, can run (aclrtProcessReport); waiting for the stream \
                 here would never return",
                self.id
            );
        }
        Ok(())
    }

    /// Fails as [`Self::wait_idle`] would for waiting for the calling thread itself, without
    /// waiting: a call that synchronises several streams checks them all first, since one
    /// of them may wait (through an event) for the stream whose host task the caller runs,
    /// and would hold the caller before its own stream's refusal was reached.
    pub(crate) fn refuse_sync_self_wait(&self) -> Res<()> {
        // The streams wait_idle returns from at once: their waits never hold the caller.
        if self.flags & UNSYNCED_FLAGS != 0 || self.settled_doom().is_some() {
            return Ok(());
        }
        self.refuse_self_wait(self.submitted.load(Ordering::Acquire))
    }
}
