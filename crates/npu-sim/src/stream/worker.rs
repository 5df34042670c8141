//! The stream's worker thread: takes tasks in order, runs them, and paces them to the timing
//! model.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::error::SimError;
use crate::memory::PtrClass;
use crate::sim::Sim;
use crate::sync::{Bell, lock, wait_until};
use crate::task::{Op, Source, Task};

use super::Stream;
use super::retire::Retired;

/// How long an idle worker spins for new work before parking.
const SPIN: Duration = Duration::from_micros(50);
/// How long before a task's simulated end its worker stops sleeping and yields the core
/// instead ([`Stream::pace_to`]).
const PACE_SPIN: Duration = Duration::from_micros(60);

/// Workers sleep until a task's simulated end; Linux lets such a sleep overrun by the thread's
/// timer slack, 50 µs by default, which would stretch a 10 µs simulated task to 60 µs of wall
/// time and make the timing model lie. A worker asks for 1 µs.
fn pace_precisely() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
    }
}

impl Stream {
    /// Marks a task that touches memory running, unless the stream is doomed (stopped,
    /// aborted, its context stopped, its device lost): a doomed stream's waits report the doom
    /// at once, so a task that started after it would touch memory its program freed on
    /// seeing it. Returns whether the task may start; a task that may not waits again, and
    /// gives up there if the doom discards the stream's work.
    pub(super) fn start_running(&self) -> bool {
        self.running.store(true, Ordering::SeqCst);
        if self.doom().is_none() {
            return true;
        }
        self.running.store(false, Ordering::SeqCst);
        // A wait that saw it running for a moment looks again.
        self.bell.ring();
        false
    }

    /// Records that the worker has taken the task at `position`.
    pub(super) fn begin(&self, position: u64) {
        if self.begun.fetch_max(position, Ordering::AcqRel) < position {
            self.begun_bell.ring_through(position);
        }
    }

    pub(super) fn run(self: Arc<Self>) {
        let Ok(sim) = crate::sim::sim() else { return };
        pace_precisely();
        while let Some(task) = self.next() {
            self.execute(sim, task);
        }
        // Destroyed: whatever is left (a stopped stream's queue) is dropped.
        let left: Vec<Task> = lock(&self.state).queue.drain(..).collect();
        for task in left {
            self.retire(task, Retired::Abandoned);
        }
    }

    fn next(&self) -> Option<Task> {
        let spin_until = Instant::now() + SPIN;
        while self.submitted.load(Ordering::Acquire) == self.finished.load(Ordering::Acquire)
            && !self.destroyed.load(Ordering::Acquire)
            && Instant::now() < spin_until
        {
            std::thread::yield_now();
        }
        let mut state = lock(&self.state);
        loop {
            let paused = self.stopped.load(Ordering::Acquire) && self.discarding().is_none();
            if !paused && let Some(task) = state.queue.pop_front() {
                self.started.fetch_add(1, Ordering::AcqRel);
                return Some(task);
            }
            if self.destroyed.load(Ordering::Acquire) && (paused || state.queue.is_empty()) {
                return None;
            }
            state.parked = true;
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.parked = false;
        }
    }

    /// Wakes the worker if it is parked (it re-checks the stream's state).
    pub(super) fn nudge(&self) {
        let state = lock(&self.state);
        if state.parked {
            self.wake.notify_one();
        }
    }

    /// Does the task's own work.
    fn perform(&self, sim: &Sim, task: &Task) -> Result<(), Option<SimError>> {
        if let Some(code) = task.inject {
            return Err(Some(SimError::new(
                code,
                format!(
                    "injected failure of a task on stream {} of device {}",
                    self.id, self.device.id
                ),
            )));
        }
        match &task.op {
            Op::Callback { func, data, block } => {
                sim.reports
                    .deliver(self, task.position, *func, *data, *block)
            }
            Op::HostFunc { func, data } => {
                crate::host_task::run(self.handle, task.position, || {
                    // SAFETY: the caller of aclrtLaunchHostFunc supplied a valid C function and
                    // the argument it expects; it runs on this runtime-owned thread, as on CANN.
                    unsafe { func(*data as *mut std::ffi::c_void) }
                });
                Ok(())
            }
            Op::Reset { event, captured } => {
                event.reset_if(captured.as_ref());
                Ok(())
            }
            Op::NotifySet(notify) => {
                notify.set();
                Ok(())
            }
            Op::Record(_)
            | Op::Wait { .. }
            | Op::ResetWait { .. }
            | Op::SharedWait { .. }
            | Op::NotifyWait { .. }
            | Op::ValueWait { .. }
            | Op::ProfMarker(_)
            // Run by run_program, never performed whole.
            | Op::Program(_) => Ok(()),
            Op::Copy { .. }
            | Op::Memset { .. }
            | Op::Kernel(_)
            | Op::IndirectCopy(_)
            | Op::Reduce { .. }
            | Op::ValueWrite { .. }
            | Op::Random(_)
            | Op::TaskUpdate(_) => {
                let Some(_admitted) = self.device.admit() else {
                    return Err(None);
                };
                self.check_peers(sim, task).map_err(Some)?;
                // Taken while admitted: a synchronous copy the submitter issues next passes
                // the device's fence only once this task is done with memory.
                self.begin(task.position);
                let result = task.run_memory(&sim.memory).map_err(Some);
                crate::device::MEMORY_BELL.ring();
                result
            }
        }
    }

    /// Fails a copy that reaches the memory of another device which is lost, as its submission
    /// would have been refused (507010): queued on this device before the loss, it must not
    /// write (or read) memory of a device that is gone, which on hardware no longer answers.
    fn check_peers(&self, sim: &Sim, task: &Task) -> Result<(), SimError> {
        let Op::Copy { dst, src, .. } = &task.op else {
            return Ok(());
        };
        // Every copy passes here: its pointers are looked up only while another device is
        // lost, not on the common path where none is.
        let others_lost = sim
            .devices
            .iter()
            .any(|d| d.id != self.device.id && d.is_lost());
        if !others_lost {
            return Ok(());
        }
        let src = match src {
            Source::Ptr(ptr) => Some(*ptr),
            Source::Staged(_) => None,
        };
        for ptr in [Some(*dst), src].into_iter().flatten() {
            if let PtrClass::Device(id) = sim.memory.locate(ptr).class
                && id != self.device.id
                && let Ok(peer) = sim.device(id.into())
            {
                peer.check_alive()?;
            }
        }
        Ok(())
    }

    fn execute(&self, sim: &Sim, mut task: Task) {
        if let Op::Program(program) = &task.op {
            let program = program.clone();
            return self.run_program(sim, task, &program);
        }
        match self.run_task(sim, &mut task) {
            Some(retired) => self.retire(task, retired),
            None => self.give_up(task),
        }
    }

    /// Runs a task: waits until it may start, does its work and paces it to the timing
    /// model. Returns how it left the stream, or `None` if the stream gives up on it.
    pub(super) fn run_task(&self, sim: &Sim, task: &mut Task) -> Option<Retired> {
        if self.discarding().is_some() || task.is_aborted() {
            return Some(Retired::Abandoned);
        }
        // Only work that touches memory holds back the report of a doom: a task that waits
        // (an event, a notify, a value) gives up as soon as the stream is doomed, and a host
        // function, which may wait for the program itself, does not hold it back either
        // (docs/simulator.md, aclrtStreamStop).
        let (ready_ns, failure) = loop {
            match self.wait_ready(sim, task) {
                // An abort while it waited: it does not start.
                Ok(_) if task.is_aborted() => return Some(Retired::Abandoned),
                // Stopped as it was about to start: it waits again, as a stopped task does.
                Ok(_) if task.touches_memory() && !self.start_running() => continue,
                Ok(ready_ns) => break (ready_ns, None),
                Err(None) => return None,
                Err(Some(error)) => {
                    if task.touches_memory() {
                        self.running.store(true, Ordering::SeqCst);
                    }
                    break (0, Some(error));
                }
            }
        };
        // A task of a model runtime instance starts with the fields its latest update gave.
        if let Some(slot) = &task.patch {
            slot.apply(&mut task.op);
        }
        let timing = self.device.clock.timing();
        let start_ns = match &timing {
            Some(_) => {
                let last_end = lock(&self.state).last_end_ns;
                last_end.max(ready_ns).max(task.submit_ns)
            }
            None => self.device.clock.now_ns(),
        };
        let result = match failure {
            Some(error) => Err(Some(error)),
            None => crate::error::contain(|| self.perform(sim, task)).unwrap_or_else(|_| {
                Err(Some(SimError::new(
                    ACL_ERROR_RT_INTERNAL_ERROR,
                    "a task panicked in the simulator",
                )))
            }),
        };
        let error = match result {
            Ok(()) => None,
            Err(None) => return None,
            Err(Some(error)) => Some(error),
        };
        // The device stops a kernel at the execute timeout; only a timing model gives a kernel
        // a duration to compare (host code runs as long as it runs).
        let (end_ns, error) = match &timing {
            Some(model) => {
                let duration_ns = task.duration_ns(model);
                let overrun = match error {
                    None => task.overrun(duration_ns, sim.config.op_timeout_interval_us),
                    Some(_) => None,
                };
                match overrun {
                    Some((limit_ns, overrun)) => (start_ns.saturating_add(limit_ns), Some(overrun)),
                    None => (start_ns.saturating_add(duration_ns), error),
                }
            }
            None => (self.device.clock.now_ns(), error),
        };
        if timing.is_some() && self.pace_to(self.device.clock.instant_of(end_ns)) {
            return Some(Retired::Abandoned);
        }
        Some(Retired::Completed {
            start_ns,
            end_ns,
            error,
        })
    }

    /// Waits until `deadline`, a task's simulated end; returns whether the stream discards
    /// its work meanwhile. A timed sleep wakes tens of µs late even with a 1 µs timer slack
    /// (the host's own wake-up latency: 40–50 µs on a small virtual machine), which would
    /// stretch every short task by that much and make the timing model lie; so the worker
    /// sleeps until [`PACE_SPIN`] before the deadline and yields the core from there.
    fn pace_to(&self, deadline: Instant) -> bool {
        if let Some(sleep_until) = deadline.checked_sub(PACE_SPIN)
            && sleep_until > Instant::now()
        {
            let listens = self.listens(Bell::RING_ONLY);
            if wait_until(&listens, Some(sleep_until), || self.discarding()).is_some() {
                return true;
            }
        }
        while Instant::now() < deadline {
            if self.discarding().is_some() {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }
}
