//! Submission: a task queued on the stream (or recorded into a capture, a bound instance, a
//! task group being updated or a PERSISTENT stream's kept tasks), and the dispatch mark a
//! submitter leaves for what must wait until the worker has taken it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::capture::{Capture, LastCaptured};
use crate::error::{Res, ensure};
use crate::handle::Handle;
use crate::model_ri::{GroupWork, Step, check_groupable};
use crate::sync::{Bell, lock, wait_until};
use crate::task::{Op, Task};

use super::{State, Stream};

/// How long [`Stream::await_taken`] yields to the worker before sleeping until the worker has
/// taken the task.
const DISPATCH_SPIN: Duration = Duration::from_micros(20);

thread_local! {
    /// The id of the last task the thread submitted to a stream it created (its position in
    /// its stream).
    static LAST_TASK_ID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// aclrtGetThreadLastTaskId: the id of the last task the calling thread submitted to a stream
/// it created, not a default stream (0 if none).
pub(crate) fn last_task_id() -> u32 {
    LAST_TASK_ID.get()
}

impl Stream {
    /// The furthest position of stream `other` this stream's submitted work waits for (0:
    /// none), which orders the work after everything `other` had queued up to there.
    pub(crate) fn waited_through(&self, other: Handle) -> u64 {
        lock(&self.state).waited.get(&other).copied().unwrap_or(0)
    }

    /// Queues a task. The caller has checked ownership and that the context is usable.
    ///
    /// A task's position in the stream (1 for its first task) is the count of finished tasks
    /// at which it is finished; a record is told its position here. A task touching memory
    /// submitted to an idle stream is marked for [`Self::await_taken`]: the submitter does not
    /// wait for the worker (a thread switch per submission on a small host), the operations
    /// that observe what the device has taken do.
    pub(crate) fn submit(self: &Arc<Self>, mut task: Task) -> Res<()> {
        ensure!(
            !self.device.is_aborting_tasks(),
            ACL_ERROR_RT_DEVICE_TASK_ABORT,
            "device {} is aborting its tasks (aclrtDeviceTaskAbort)",
            self.device.id
        );
        ensure!(
            !self.aborting.load(Ordering::Acquire),
            ACL_ERROR_RT_STREAM_ABORT,
            "stream {} is being aborted (aclrtStreamAbort)",
            self.id
        );
        task.submit_ns = self.device.clock.now_ns();
        // SAFETY: gettid has no preconditions.
        task.thread_id = unsafe { libc::gettid() } as u32;
        let mut state = lock(&self.state);
        // Checked under the state lock, where destruction marks the stream: a task queued
        // after the destroyer read the submission count would never run (its worker gone).
        self.check_alive(&state)?;
        if let Some(capture) = state.capture.clone() {
            return self.capture_step(&mut state, &capture, Step::Run(task.op));
        }
        if let Some(GroupWork::Updating { staged, .. }) = &mut state.group {
            if !matches!(task.op, Op::Kernel(_)) {
                return check_groupable(&Step::Run(task.op));
            }
            staged.push(task.op);
            crate::capture::note_submission(None);
            return Ok(());
        }
        if let Some(model) = state.bound.clone() {
            model.check_accepts(self)?;
            let (index, seq) = model.push(self, Step::Run(task.op));
            LAST_TASK_ID.set(seq + 1);
            crate::capture::note_submission(Some(LastCaptured {
                model: Arc::downgrade(&model),
                index,
                capture: None,
            }));
            return Ok(());
        }
        // A PERSISTENT stream's task is kept, never run, so it is no task (or launch) to fail.
        if task.is_device_work() && !self.is_persistent() {
            state.device_seq += 1;
            let seq = state.device_seq;
            if let Some(at) = state.injections.iter().position(|&(n, _)| n == seq) {
                task.inject = Some(state.injections.swap_remove(at).1);
            }
            // Counted even when the stream's own fault fails the task: the launch was made.
            if let Op::Kernel(launch) = &task.op
                && let Some(code) = self.device.kernel_faults.launch(launch.name())
            {
                task.inject.get_or_insert(code);
            }
        }
        if self.is_persistent() {
            state.persistent.push(task);
            LAST_TASK_ID.set(state.persistent.len() as u32);
            crate::capture::note_submission(None);
            return Ok(());
        }
        let position = self.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        let mut displaced = Vec::new();
        task.position = position;
        match &task.op {
            Op::Record(record) => displaced.extend(record.queued(position)),
            Op::Program(program) => {
                displaced.extend(program.records.iter().filter_map(|r| r.queued(position)));
            }
            Op::Wait { record, .. } => {
                let waited = state.waited.entry(record.stream().handle).or_default();
                *waited = (*waited).max(record.position());
            }
            _ => {}
        }
        match &task.op {
            Op::Callback { block: true, .. } => {
                state.block_callbacks.insert(position);
            }
            Op::Program(program) if program.blocks => {
                state.block_programs.insert(position);
            }
            _ => {}
        }
        // A program's tasks touch memory as it runs them; it is taken as it starts.
        let dispatch = (task.touches_memory() || matches!(task.op, Op::Program(_)))
            && self.finished.load(Ordering::Acquire) + 1 == position
            && !self.stopped.load(Ordering::Acquire);
        if dispatch {
            self.dispatch_mark.fetch_max(position, Ordering::AcqRel);
        }
        state.queue.push_back(task);
        if state.parked {
            self.wake.notify_one();
        }
        drop(state);
        drop(displaced);
        // The reference counts tasks of streams the user created, not of a default stream.
        if !self.is_default {
            LAST_TASK_ID.set(position as u32);
        }
        crate::capture::note_submission(None);
        Ok(())
    }

    /// Adds a task that is captured only (a conditional task) to `capture`, which the stream
    /// must still be in (else ACL_ERROR_RT_STREAM_NOT_CAPTURED), as [`Self::submit`] captures
    /// the others.
    pub(crate) fn submit_captured(&self, capture: &Arc<Capture>, step: Step) -> Res<()> {
        let mut state = lock(&self.state);
        ensure!(
            state
                .capture
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, capture)),
            ACL_ERROR_RT_STREAM_NOT_CAPTURED,
            "stream {} is not in the capture it was in (it ended meanwhile)",
            self.id
        );
        self.capture_step(&mut state, capture, step)
    }

    /// Puts `step` into `capture`'s instance instead of the queue: into the task group the
    /// stream records, if any (kernel launches only); it becomes the thread's last task.
    fn capture_step(&self, state: &mut State, capture: &Arc<Capture>, step: Step) -> Res<()> {
        capture.check_valid()?;
        let recording = match &mut state.group {
            Some(GroupWork::Recording(indexes)) => Some(indexes),
            _ => None,
        };
        if recording.is_some() {
            check_groupable(&step)?;
        } else {
            ensure!(
                !capture.model.is_recording_a_group(),
                ACL_ERROR_STREAM_TASK_GROUP_INTR,
                "another stream of the capture is recording a task group, and stream {} \
                 is not (aclmdlRICaptureTaskGrpBegin on it first)",
                self.id
            );
        }
        if let Step::Run(Op::Record(record)) = &step {
            record.mark_captured(capture);
        }
        let (index, seq) = capture.model.push(self, step);
        if let Some(indexes) = recording {
            indexes.push(index);
        }
        LAST_TASK_ID.set(seq + 1);
        crate::capture::note_submission(Some(LastCaptured {
            model: Arc::downgrade(&capture.model),
            index,
            capture: Some(Arc::downgrade(capture)),
        }));
        Ok(())
    }

    /// Waits until the worker has taken the latest task marked at its submission (it runs,
    /// waits for what it depends on, or is done) or can no longer take it (the stream is
    /// doomed). Covers every submission that returned before this began: the mark only grows,
    /// and a worker takes tasks in order. A forced destruction does not end the wait: its
    /// worker takes the task at once, to run it or to drop it.
    pub(crate) fn await_taken(&self) {
        let mark = self.dispatch_mark.load(Ordering::Acquire);
        let taken = || self.begun.load(Ordering::Acquire) >= mark || self.doom().is_some();
        // A worker that ran recently is still spinning for work and takes the task within
        // microseconds: yield to it for a moment before paying for a sleep and a wake-up.
        let spin_until = Instant::now() + DISPATCH_SPIN;
        while Instant::now() < spin_until {
            if taken() {
                return;
            }
            std::thread::yield_now();
        }
        let [doomed, stopped, lost] = self.listens(Bell::RING_ONLY);
        let listens = [self.begun_bell.at(mark), doomed, stopped, lost];
        wait_until(&listens, None, || taken().then_some(()));
    }
}
