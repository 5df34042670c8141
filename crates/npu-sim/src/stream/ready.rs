//! What a task waits for before it starts: the event, notify or value it waits on, and the
//! device's hold gate.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::error::SimError;
use crate::sim::Sim;
use crate::sync::{Bell, Listen, wait_until_every};
use crate::task::{Op, Task, read_value};

use super::Stream;

/// How often a value wait reads again a word that may be written behind the runtime's back.
const REREAD_SHARED: Duration = Duration::from_millis(1);

impl Stream {
    /// Blocks a task until `poll` gives its outcome (`Ok(ready_ns)` or a failure), or the
    /// stream gives up (`Err(None)`: the task is dropped), or `timeout` passes since the wait
    /// began (ACL_ERROR_RT_WAIT_TIMEOUT, naming `what`). Marks the task taken when it blocks,
    /// and waiting ([`Stream::wait_quiescent`]) until it returns. A stopped stream's task does
    /// not poll (a value wait does not read memory its program may free meanwhile) until the
    /// abort that ends the stop.
    pub(super) fn block_on(
        &self,
        task: &Task,
        extra: &[Listen<'_>],
        timeout: Option<Duration>,
        what: &str,
        poll: impl FnMut() -> Option<Result<u64, SimError>>,
    ) -> Result<u64, Option<SimError>> {
        self.block_on_every(task, extra, timeout, || None, what, poll)
    }

    /// [`Self::block_on`] that also polls once per `every()` (asked before each park), if set,
    /// for what rings no bell.
    fn block_on_every(
        &self,
        task: &Task,
        extra: &[Listen<'_>],
        timeout: Option<Duration>,
        mut every: impl FnMut() -> Option<Duration>,
        what: &str,
        mut poll: impl FnMut() -> Option<Result<u64, SimError>>,
    ) -> Result<u64, Option<SimError>> {
        let mut listens = extra.to_vec();
        listens.extend(self.listens(Bell::RING_ONLY));
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let mut wait = || {
            // Not waiting while it polls: a wait for the stream to be quiescent must not
            // return while a poll reads memory.
            self.waiting.store(false, Ordering::SeqCst);
            if self.discarding().is_some() {
                return Some(Err(None));
            }
            let polled = match self.stopped.load(Ordering::SeqCst) {
                true => None,
                false => poll(),
            };
            match polled {
                Some(outcome) => Some(outcome.map_err(Some)),
                // Force-destroyed, or destroyed while stopped (the queue of a stopped stream is
                // dropped with it, the task waiting for the stop to end with it).
                None if self.draining.load(Ordering::Acquire)
                    || (self.destroyed.load(Ordering::Acquire)
                        && self.stopped.load(Ordering::SeqCst)) =>
                {
                    Some(Err(None))
                }
                None => {
                    self.begin(task.position);
                    self.waiting.store(true, Ordering::SeqCst);
                    // A wait for the stream to be quiescent, which reads the flag only once
                    // the stream is doomed, looks again (on a bell this wait does not listen
                    // to, or it would wake itself).
                    if self.doom().is_some() {
                        self.waiting_bell.ring();
                    }
                    None
                }
            }
        };
        let mut outcome = wait_until_every(&listens, deadline, &mut every, &mut wait);
        // A stop holds a timed wait's clock too: one whose time ran out while its stream was
        // stopped waits for the abort that ends the stop (it would not have polled meanwhile).
        if outcome.is_none() && self.stopped.load(Ordering::SeqCst) {
            outcome = wait_until_every(&listens, None, &mut every, &mut wait);
        }
        self.waiting.store(false, Ordering::SeqCst);
        outcome.unwrap_or_else(|| {
            Err(Some(SimError::new(
                ACL_ERROR_RT_WAIT_TIMEOUT,
                format!(
                    "{what} on stream {} of device {} timed out",
                    self.id, self.device.id
                ),
            )))
        })
    }

    /// Waits while the stream is stopped (aclrtStreamStop), for a program between two of its
    /// tasks: until the stop ends, or the stream gives up its work (`Err`).
    pub(super) fn wait_unstopped(&self, task: &Task) -> Result<u64, Option<SimError>> {
        let listens = [self.device.hold_bell.any()];
        self.block_on(task, &listens, None, "a stop", || {
            (!self.stopped.load(Ordering::SeqCst)).then_some(Ok(0))
        })
    }

    /// Blocks `task` until `record` completes (its simulated timestamp) or is doomed.
    fn wait_for_record(
        &self,
        task: &Task,
        record: &crate::event::Record,
        timeout: Option<Duration>,
    ) -> Result<u64, Option<SimError>> {
        self.block_on(
            task,
            &record.listens(),
            timeout,
            "an event wait",
            || match record.outcome() {
                crate::event::Outcome::Done { ts_ns, .. } => Some(Ok(ts_ns)),
                crate::event::Outcome::Pending => {
                    record.doom().map(|code| Err(record.doom_error(code)))
                }
            },
        )
    }

    /// Waits for what must happen before the task may start: what it waits for and the
    /// device's hold gate. Returns the simulated time it became ready, or how it failed.
    pub(super) fn wait_ready(&self, sim: &Sim, task: &Task) -> Result<u64, Option<SimError>> {
        let ready_ns =
            match &task.op {
                Op::Wait { record, timeout } => self.wait_for_record(task, record, *timeout)?,
                Op::ResetWait { gate, timeout } => {
                    let began = Instant::now();
                    self.block_on(task, &[gate.listen()], *timeout, "an event wait", || {
                        gate.next().map(|_| Ok(0))
                    })?;
                    match gate.next() {
                        // The timeout counts from the wait's start, through both stages.
                        Some(Some(record)) => {
                            let left = timeout.map(|t| t.saturating_sub(began.elapsed()));
                            self.wait_for_record(task, record, left)?
                        }
                        _ => 0,
                    }
                }
                Op::SharedWait { shared, n, timeout } => {
                    let wait = "an IPC event wait";
                    self.block_on(task, &[shared.listen()], *timeout, wait, || {
                        shared.reached(*n).map(|reached| match reached {
                            crate::ipc::Reached::Done => Ok(self.device.clock.now_ns()),
                            crate::ipc::Reached::Dropped => Err(SimError::new(
                                ACL_ERROR_RT_STREAM_ABORT,
                                "the record of the IPC event this wait waits for was dropped \
                                 (its stream was aborted) before it was reached",
                            )),
                        })
                    })?
                }
                Op::NotifyWait { notify, timeout } => {
                    self.block_on(task, &[notify.listen()], *timeout, "a notify wait", || {
                        notify.take().then(|| Ok(self.device.clock.now_ns()))
                    })?
                }
                Op::ValueWait { src, value, cmp } => {
                    let listens = [crate::device::MEMORY_BELL.any()];
                    // Another process's writes, and the host's own to managed memory, ring
                    // nothing: the word is read again every so often, as the device reads it
                    // whoever writes. Asked again before each park: an export while the wait
                    // waits (which rings the memory bell) makes the memory written elsewhere.
                    let every = || sim.memory.written_elsewhere(*src).then_some(REREAD_SHARED);
                    self.block_on_every(task, &listens, None, every, "a value wait", || {
                        match read_value(&sim.memory, *src) {
                            Ok(memory) => cmp
                                .holds(memory, *value)
                                .then(|| Ok(self.device.clock.now_ns())),
                            Err(error) => Some(Err(error)),
                        }
                    })?
                }
                _ => 0,
            };
        // A stopped stream's task does not start (aclrtStreamStop halts the stream's work and
        // keeps it queued) until an abort drops it, which ends the wait.
        let listens = [self.device.hold_bell.any()];
        let released_ns = self.block_on(task, &listens, None, "the hold gate", || {
            match self.stopped.load(Ordering::SeqCst) {
                true => None,
                false => self.device.hold_state().map(Ok),
            }
        })?;
        Ok(ready_ns.max(released_ns))
    }
}
