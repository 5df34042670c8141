//! A task leaving the stream: its outcome recorded (errors, its record, its trace), then
//! counted as finished.

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::error::SimError;
use crate::sync::lock;
use crate::task::{Op, Task};
use crate::trace;

use super::Stream;

/// How a task left the stream.
pub(super) enum Retired {
    Completed {
        start_ns: u64,
        end_ns: u64,
        error: Option<SimError>,
    },
    Abandoned,
}

impl Stream {
    /// Drops a task that could not run. Under a forced destruction, what follows it is
    /// dropped too: it would have run after a task that never did.
    pub(super) fn give_up(&self, task: Task) {
        if self.draining.load(Ordering::Acquire) {
            self.aborted.store(true, Ordering::SeqCst);
        }
        self.retire(task, Retired::Abandoned);
    }

    pub(super) fn retire(&self, mut task: Task, retired: Retired) {
        match &task.op {
            // Dropped without running (one that ran was unregistered by its report thread).
            Op::Callback { block: true, .. } => self.block_callback_ran(task.position),
            Op::Program(program) if program.blocks => {
                lock(&self.state).block_programs.remove(&task.position);
            }
            _ => {}
        }
        self.settle(&task, retired);
        self.begin(task.position);
        // Whoever sees the wait finished sees it gone from its event's pending waits.
        drop(task.wait_ticket.take());
        let finished = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        // Dropping the task may release a kernel library or staged data: outside every lock.
        drop(task);
        self.bell.ring_through(finished);
    }

    /// Records how a task left the stream (its errors, its record, its trace) without
    /// counting it finished: a program's tasks are settled one by one as it runs them, and
    /// the program is counted once, when it ends.
    pub(super) fn settle(&self, task: &Task, retired: Retired) {
        // Whoever saw the doom before this saw it unsettled; ring them to look again.
        if self.running.swap(false, Ordering::SeqCst) && self.doom().is_some() {
            self.bell.ring();
        }
        match retired {
            Retired::Completed {
                start_ns,
                end_ns,
                error,
            } => {
                let mut state = lock(&self.state);
                state.last_end_ns = state.last_end_ns.max(end_ns);
                let mut stop = None;
                let failure = error.clone();
                if let Some(error) = error {
                    if self.failure_mode() == u64::from(ACL_STOP_ON_FAILURE) {
                        stop = Some(error.code);
                    }
                    state.since_record.get_or_insert_with(|| error.clone());
                    state.sticky.get_or_insert(error);
                }
                if let Op::Record(record) = &task.op {
                    record.complete(state.since_record.take().map(|e| e.code), end_ns);
                }
                drop(state);
                // Before the task counts as finished: whoever sees it finished sees the stop
                // and the exception callbacks have run.
                if let Some(error) = &failure {
                    crate::exception::raise(self, task, error);
                }
                if let Some(code) = stop {
                    self.health.stop(code);
                }
                trace::record_task(
                    self.device.id,
                    self.id,
                    task,
                    start_ns,
                    end_ns,
                    failure.is_some(),
                );
            }
            Retired::Abandoned => {
                let code = self.discarding().unwrap_or(ACL_ERROR_RT_STREAM_ABORT);
                match &task.op {
                    Op::Record(record) => record.discard(code),
                    // Dropped before it ran (or as it ran): none of its records will complete.
                    Op::Program(program) => program
                        .records
                        .iter()
                        .filter(|r| !r.is_settled())
                        .for_each(|r| r.discard(code)),
                    _ => {}
                }
            }
        }
    }
}
