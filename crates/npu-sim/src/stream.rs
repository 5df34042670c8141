//! Streams: a FIFO of tasks run by the stream's own worker thread.
//!
//! The worker is spawned when the stream is created, runs tasks in order, spins briefly when
//! its queue empties (cheap back-to-back submissions) and then parks. Streams run truly in
//! parallel with each other; StreamWaitEvent orders them.
//!
//! Dispatch latency: a device takes a task submitted to an idle stream within microseconds, and
//! programs rely on it (a synchronous aclrtMemcpy right after a kernel launch reads the
//! kernel's output). A submission does not wait for the worker: it marks the task as one the
//! worker must take promptly ([`Stream::await_taken`]), and what observes whether a task has
//! been taken waits for the marked tasks instead: [`Device::fence`], which every synchronous
//! copy and memset passes first, and aclrtStreamStop and aclrtStreamAbort.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::capture::{Capture, LastCaptured};
use crate::context::Health;
use crate::device::Device;
use crate::error::{Res, SimError, ensure, fail};
use crate::handle::Handle;
use crate::model_ri::{GroupWork, ModelRi, Step, TaskGroup, check_groupable};
use crate::sim::Sim;
use crate::sync::{Bell, Listen, lock, wait_until};
use crate::task::{Op, Task, read_value};
use crate::trace;

/// How long an idle worker spins for new work before parking.
const SPIN: Duration = Duration::from_micros(50);
/// How long before a task's simulated end its worker stops sleeping and yields the core
/// instead ([`Stream::pace_to`]).
const PACE_SPIN: Duration = Duration::from_micros(60);
/// How long [`Stream::await_taken`] yields to the worker before sleeping until the worker has
/// taken the task.
const DISPATCH_SPIN: Duration = Duration::from_micros(20);
/// Streams per device, default streams included (Ascend 910B).
pub(crate) const MAX_STREAMS_PER_DEVICE: u64 = 1984;
/// Stream flags whose streams the host does not synchronise: syncs return at once, as the
/// reference documents.
const UNSYNCED_FLAGS: u32 =
    ACL_STREAM_PERSISTENT | ACL_STREAM_DEVICE_USE_ONLY | ACL_STREAM_CPU_SCHEDULE;

#[derive(Default)]
struct State {
    queue: VecDeque<Task>,
    parked: bool,
    /// The first task error not yet returned by a stream synchronisation.
    sticky: Option<SimError>,
    /// The first task error since the last event record reached by the worker.
    since_record: Option<SimError>,
    /// Simulated end of the last task.
    last_end_ns: u64,
    /// Work tasks submitted so far (fault injection counts these).
    work_seq: u64,
    /// Injected failures: (work sequence number, code).
    injections: Vec<(u64, aclError)>,
    /// For each stream this one was made to wait on: the furthest position waited for.
    waited: HashMap<Handle, u64>,
    /// Tasks of a PERSISTENT stream: kept for a model, never run by the stream itself.
    persistent: Vec<Task>,
    /// The capture the stream's tasks go into instead of the queue.
    capture: Option<Arc<Capture>>,
    /// The built instance the stream is bound to (aclmdlRIBindStream): its tasks go into it.
    bound: Option<Arc<ModelRi>>,
    /// A task group being recorded (while captured) or updated on the stream.
    group: Option<GroupWork>,
    /// Positions of the BLOCK callbacks submitted and not yet retired: the stream waits at each
    /// for its report thread, so that thread must not wait for the stream to pass one.
    block_callbacks: BTreeSet<u64>,
}

/// The stream attributes the simulator stores without acting on them
/// (aclrtSetStreamAttribute).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Attributes {
    pub(crate) overflow_switch: u32,
    pub(crate) user_custom_tag: u32,
    pub(crate) cache_op_info: u32,
}

pub(crate) struct Stream {
    pub(crate) handle: Handle,
    pub(crate) id: i32,
    pub(crate) ctx: Handle,
    pub(crate) device: Arc<Device>,
    pub(crate) health: Arc<Health>,
    priority: AtomicU64,
    pub(crate) flags: u32,
    pub(crate) is_default: bool,
    failure_mode: AtomicU64,
    /// Whether aclrtSetStreamFailureMode was called on it: once per stream.
    failure_mode_chosen: AtomicBool,
    pub(crate) attributes: Mutex<Attributes>,
    /// aclrtSetStreamResLimit's core limits (unset: the device's).
    pub(crate) res_limits: crate::res_limit::ResLimits,
    state: Mutex<State>,
    wake: Condvar,
    /// Rung through the count of finished tasks as they finish, and fully when the stream is
    /// force-destroyed, aborted or stopped.
    bell: Bell,
    submitted: AtomicU64,
    /// Tasks the worker has taken from the queue (the one it holds is running, or about to be
    /// abandoned).
    started: AtomicU64,
    finished: AtomicU64,
    /// Position of the latest task the worker has taken: running, blocked, or done.
    begun: AtomicU64,
    /// Rung through [`Self::begun`] as it grows.
    begun_bell: Bell,
    /// Position of the latest task the worker must take promptly: one touching memory,
    /// submitted while the stream had nothing unfinished and was not stopped (0: none yet).
    dispatch_mark: AtomicU64,
    destroyed: AtomicBool,
    /// aclrtDestroyStreamForce: the queued work runs, but a task that would block is dropped
    /// with everything after it.
    draining: AtomicBool,
    /// Every task not run yet is dropped for good (a forced destruction gave up on a blocked
    /// task).
    aborted: AtomicBool,
    /// aclrtStreamAbort in progress: queued work is dropped, submissions are refused.
    aborting: AtomicBool,
    /// Whether a task that touches memory is in its work right now (see
    /// [`Stream::settled_doom`]).
    running: AtomicBool,
    /// aclrtStreamStop: the worker takes no task until aclrtStreamAbort.
    stopped: AtomicBool,
}

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

/// How a task left the stream.
enum Retired {
    Completed {
        start_ns: u64,
        end_ns: u64,
        error: Option<SimError>,
    },
    Abandoned,
}

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

/// Why work of a doomed stream cannot complete, for messages.
pub(crate) fn doom_reason(code: aclError) -> String {
    match code {
        ACL_ERROR_RT_STREAM_ABORT => {
            "was aborted (aclrtStreamAbort or aclrtDestroyStreamForce)".to_owned()
        }
        ACL_ERROR_RT_INTERNAL_ERROR => "was stopped with aclrtStreamStop".to_owned(),
        _ => {
            format!("stopped: a task of its context failed with {code} in ACL_STOP_ON_FAILURE mode")
        }
    }
}

impl Stream {
    /// Creates a stream in context `ctx`, registers its handle and starts its worker.
    pub(crate) fn create(
        sim: &Sim,
        ctx: Handle,
        device: &Arc<Device>,
        health: &Arc<Health>,
        priority: u32,
        flags: u32,
        is_default: bool,
    ) -> Res<Arc<Stream>> {
        device.take_slot(
            &device.live_streams,
            MAX_STREAMS_PER_DEVICE,
            ACL_ERROR_RT_NO_STREAM_RESOURCE,
            "streams",
        )?;
        let handle = match sim.streams.reserve() {
            Ok(handle) => handle,
            Err(error) => {
                device.live_streams.fetch_sub(1, Ordering::AcqRel);
                return Err(error);
            }
        };
        let stream = Arc::new(Stream {
            handle,
            id: device.next_stream_id(),
            ctx,
            device: device.clone(),
            health: health.clone(),
            priority: AtomicU64::new(u64::from(priority)),
            flags,
            is_default,
            failure_mode: AtomicU64::new(u64::from(ACL_CONTINUE_ON_FAILURE)),
            failure_mode_chosen: AtomicBool::new(false),
            attributes: Mutex::new(Attributes::default()),
            res_limits: Default::default(),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            bell: Bell::new(),
            submitted: AtomicU64::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            begun: AtomicU64::new(0),
            begun_bell: Bell::new(),
            dispatch_mark: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            aborting: AtomicBool::new(false),
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        // Started now, so that the first task does not pay for a thread start.
        let worker = stream.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("npu-sim-d{}-s{}", device.id, stream.id))
            .spawn(move || worker.run());
        if let Err(error) = spawned {
            sim.streams.remove(handle);
            device.live_streams.fetch_sub(1, Ordering::AcqRel);
            fail!(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                "could not start the worker thread of stream {}: {error}",
                stream.id
            );
        }
        sim.streams.fill(handle, stream.clone());
        // A default stream is announced by its context's creator, once no lock is held: the
        // callbacks may call the runtime, and aclrtSetDevice creates the primary context under
        // the device's lock, which the calls naming the current device take too.
        if !is_default {
            crate::stream_state::notify(handle, ACL_RT_STREAM_STATE_CREATE_POST);
        }
        Ok(stream)
    }

    /// The furthest position of stream `other` this stream's submitted work waits for (0:
    /// none), which orders the work after everything `other` had queued up to there.
    pub(crate) fn waited_through(&self, other: Handle) -> u64 {
        lock(&self.state).waited.get(&other).copied().unwrap_or(0)
    }

    pub(crate) fn set_failure_mode(&self, mode: u64) {
        if mode == u64::from(ACL_STOP_ON_FAILURE) {
            self.health.stop_on_failure();
        }
        self.failure_mode.store(mode, Ordering::Release);
    }

    /// aclrtSetStreamFailureMode's choice, which the reference allows once per stream.
    pub(crate) fn choose_failure_mode(&self, mode: u64) -> Res<()> {
        ensure!(
            !self.failure_mode_chosen.swap(true, Ordering::AcqRel),
            ACL_ERROR_RT_PARAM_INVALID,
            "the failure mode of stream {} was set already (once per stream)",
            self.id
        );
        self.set_failure_mode(mode);
        Ok(())
    }

    /// The stream's failure mode in effect: its own choice, or STOP once any stream of its
    /// context chose STOP.
    pub(crate) fn failure_mode(&self) -> u64 {
        if self.health.stops_on_failure() {
            return u64::from(ACL_STOP_ON_FAILURE);
        }
        self.failure_mode.load(Ordering::Acquire)
    }

    pub(crate) fn priority(&self) -> u32 {
        self.priority.load(Ordering::Acquire) as u32
    }

    pub(crate) fn set_priority(&self, priority: u32) {
        self.priority.store(u64::from(priority), Ordering::Release);
    }

    /// Why work on this stream cannot complete: device lost, context stopped, the stream
    /// aborted (being aborted, or force-destroyed past a blocked task) or stopped.
    pub(crate) fn doom(&self) -> Option<aclError> {
        if let Some(code) = self.discarding() {
            Some(code)
        } else if self.stopped.load(Ordering::SeqCst) {
            Some(ACL_ERROR_RT_INTERNAL_ERROR)
        } else {
            None
        }
    }

    /// Why the worker drops the tasks it has not run: the stream's doom, except a stop, which
    /// only pauses it.
    fn discarding(&self) -> Option<aclError> {
        if self.device.is_lost() {
            Some(ACL_ERROR_RT_LOST_HEARTBEAT)
        } else if let Some(code) = self.health.stopped() {
            Some(code)
        } else if self.aborted.load(Ordering::SeqCst) || self.aborting.load(Ordering::SeqCst) {
            Some(ACL_ERROR_RT_STREAM_ABORT)
        } else {
            None
        }
    }

    /// The stream's doom as the host may see it: only once no task of it is running.
    ///
    /// On hardware a stopped stream's running task is halted before the runtime reports the
    /// stop; here a task is a host function (a kernel, a copy) that cannot be interrupted, so
    /// until it returns the stream counts as still running, and nothing waiting on the stream
    /// learns of the doom. This is what keeps a program that frees memory once its waits have
    /// failed from freeing it under a kernel that is still writing.
    ///
    /// The doom is read before `running` (its flags with `SeqCst`, as the worker sets `running`
    /// and then reads the doom in [`Self::start_running`]): either this sees the task running,
    /// or the worker sees the doom this reports and does not start the task.
    pub(crate) fn settled_doom(&self) -> Option<aclError> {
        let doom = self.doom()?;
        (!self.running.load(Ordering::SeqCst)).then_some(doom)
    }

    /// Marks a task that touches memory running, unless the stream is doomed (stopped,
    /// aborted, its context stopped, its device lost): a doomed stream's waits report the doom
    /// at once, so a task that started after it would touch memory its program freed on
    /// seeing it. Returns whether the task may start; a task that may not waits again, and
    /// gives up there if the doom discards the stream's work.
    fn start_running(&self) -> bool {
        self.running.store(true, Ordering::SeqCst);
        if self.doom().is_none() {
            return true;
        }
        self.running.store(false, Ordering::SeqCst);
        // A wait that saw it running for a moment looks again.
        self.bell.ring();
        false
    }

    /// Whether a task that must wait gives up instead: the stream is discarding its work or
    /// being force-destroyed (which runs only the work that can run).
    pub(crate) fn gives_up_waiting(&self) -> bool {
        self.discarding().is_some() || self.draining.load(Ordering::Acquire)
    }

    /// What a wait for this stream's first `mark` tasks listens to (with
    /// [`Bell::RING_ONLY`]: a wait for the stream's doom alone): the stream finishing them
    /// (or being force-destroyed, aborted or stopped), its context stopping, its device being
    /// lost. Every state change [`Self::doom`] reports rings one of them.
    pub(crate) fn listens(&self, mark: u64) -> [Listen<'_>; 3] {
        [
            self.bell.at(mark),
            self.health.bell.any(),
            self.device.lost_bell.any(),
        ]
    }

    /// Injects a failure into the `nth` work task submitted from now on (1 = the next one).
    pub(crate) fn inject_failure(&self, nth: u64, code: aclError) {
        let mut state = lock(&self.state);
        let target = state.work_seq + nth;
        state.injections.push((target, code));
    }

    /// aclrtPersistentTaskClean: drops the tasks kept for a model.
    pub(crate) fn clean_persistent(&self) -> Res<()> {
        ensure!(
            self.is_persistent(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is not an ACL_STREAM_PERSISTENT stream: it keeps no tasks to clean",
            self.id
        );
        let kept = std::mem::take(&mut lock(&self.state).persistent);
        // Dropping tasks may release a kernel library: outside the lock.
        drop(kept);
        Ok(())
    }

    /// Whether tasks on this stream are kept for a model instead of run (ACL_STREAM_PERSISTENT).
    pub(crate) fn is_persistent(&self) -> bool {
        self.flags & ACL_STREAM_PERSISTENT != 0
    }

    /// The capture the stream takes part in, if it is being captured.
    pub(crate) fn capture(&self) -> Option<Arc<Capture>> {
        lock(&self.state).capture.clone()
    }

    /// Makes the stream's tasks go into `capture` (one capturing already →
    /// ACL_ERROR_RT_STREAM_CAPTURED).
    pub(crate) fn enter_capture(&self, capture: &Arc<Capture>) -> Res<()> {
        let mut state = lock(&self.state);
        ensure!(
            state.capture.is_none(),
            ACL_ERROR_RT_STREAM_CAPTURED,
            "stream {} is being captured already",
            self.id
        );
        state.capture = Some(capture.clone());
        Ok(())
    }

    /// The built instance the stream is bound to.
    pub(crate) fn bound_model(&self) -> Option<Arc<ModelRi>> {
        lock(&self.state).bound.clone()
    }

    /// Binds the stream to a built instance: a PERSISTENT stream (ACL_ERROR_RT_PARAM_INVALID
    /// otherwise) bound to none yet (ACL_ERROR_RT_PARAM_INVALID).
    pub(crate) fn bind(&self, model: &Arc<ModelRi>) -> Res<()> {
        ensure!(
            self.is_persistent(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} was not created with ACL_STREAM_PERSISTENT, so it cannot be bound to a model runtime instance",
            self.id
        );
        let mut state = lock(&self.state);
        ensure!(
            state.bound.is_none(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is bound to a model runtime instance already",
            self.id
        );
        state.bound = Some(model.clone());
        Ok(())
    }

    pub(crate) fn unbind(&self) {
        lock(&self.state).bound = None;
    }

    /// Starts group work on the stream (one at a time: ACL_ERROR_STREAM_TASK_GROUP_STATUS).
    pub(crate) fn begin_group_work(&self, work: GroupWork) -> Res<()> {
        let mut state = lock(&self.state);
        ensure!(
            state.group.is_none(),
            ACL_ERROR_STREAM_TASK_GROUP_STATUS,
            "stream {} is recording or updating a task group already",
            self.id
        );
        state.group = Some(work);
        Ok(())
    }

    /// Ends the recording of a task group: the indexes of its tasks in the instance (not
    /// recording → ACL_ERROR_STREAM_TASK_GROUP_STATUS).
    pub(crate) fn end_group(&self) -> Res<Vec<usize>> {
        let mut state = lock(&self.state);
        match state.group.take() {
            Some(GroupWork::Recording(indexes)) => Ok(indexes),
            other => {
                state.group = other;
                fail!(
                    ACL_ERROR_STREAM_TASK_GROUP_STATUS,
                    "stream {} is not recording a task group (aclmdlRICaptureTaskGrpBegin)",
                    self.id
                )
            }
        }
    }

    /// Ends the update of a task group: the group and the tasks staged for it (not updating
    /// → ACL_ERROR_STREAM_TASK_GROUP_STATUS).
    pub(crate) fn end_update(&self) -> Res<(Arc<TaskGroup>, Vec<Op>)> {
        let mut state = lock(&self.state);
        match state.group.take() {
            Some(GroupWork::Updating { group, staged }) => Ok((group, staged)),
            other => {
                state.group = other;
                fail!(
                    ACL_ERROR_STREAM_TASK_GROUP_STATUS,
                    "stream {} is not updating a task group (aclmdlRICaptureTaskUpdateBegin)",
                    self.id
                )
            }
        }
    }

    /// Back to running its tasks; returns the capture it was in.
    pub(crate) fn leave_capture(&self) -> Option<Arc<Capture>> {
        lock(&self.state).capture.take()
    }

    /// Fails with ACL_ERROR_RT_STREAM_CAPTURED if the stream is being captured, and makes
    /// its capture invalid: `what` cannot be done to a capturing stream.
    pub(crate) fn check_not_captured(&self, what: &str) -> Res<()> {
        if let Some(capture) = self.capture() {
            let error = SimError::new(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!(
                    "{what} is not possible while stream {} is being captured (end the capture \
                     with aclmdlRICaptureEnd first)",
                    self.id
                ),
            );
            return capture.refuse(error);
        }
        Ok(())
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
        ensure!(
            !self.destroyed.load(Ordering::Acquire),
            ACL_ERROR_RT_INVALID_HANDLE,
            "stream {} is being destroyed",
            self.id
        );
        if let Some(capture) = state.capture.clone() {
            capture.check_valid()?;
            let recording = match &mut state.group {
                Some(GroupWork::Recording(indexes)) => Some(indexes),
                _ => None,
            };
            if recording.is_some() {
                check_groupable(&task.op)?;
            } else {
                ensure!(
                    !capture.model.is_recording_a_group(),
                    ACL_ERROR_STREAM_TASK_GROUP_INTR,
                    "another stream of the capture is recording a task group, and stream {} \
                     is not (aclmdlRICaptureTaskGrpBegin on it first)",
                    self.id
                );
            }
            if let Op::Record(record) = &task.op {
                record.mark_captured(&capture);
            }
            let (index, seq) = capture.model.push(self, Step::Run(task.op));
            if let Some(indexes) = recording {
                indexes.push(index);
            }
            LAST_TASK_ID.set(seq + 1);
            crate::capture::note_submission(Some(LastCaptured {
                model: Arc::downgrade(&capture.model),
                index,
                capture: Some(Arc::downgrade(&capture)),
            }));
            return Ok(());
        }
        if let Some(GroupWork::Updating { staged, .. }) = &mut state.group {
            check_groupable(&task.op)?;
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
        if task.is_work() {
            state.work_seq += 1;
            let seq = state.work_seq;
            if let Some(at) = state.injections.iter().position(|&(n, _)| n == seq) {
                task.inject = Some(state.injections.swap_remove(at).1);
            }
        }
        if self.is_persistent() {
            state.persistent.push(task);
            LAST_TASK_ID.set(state.persistent.len() as u32);
            crate::capture::note_submission(None);
            return Ok(());
        }
        let position = self.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        task.position = position;
        match &task.op {
            Op::Record(record) => record.place(position),
            Op::Wait { record, .. } => {
                let waited = state.waited.entry(record.stream().handle).or_default();
                *waited = (*waited).max(record.position());
            }
            _ => {}
        }
        if matches!(task.op, Op::Callback { block: true, .. }) {
            state.block_callbacks.insert(position);
        }
        let dispatch = task.touches_memory()
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
        // The reference counts tasks of streams the user created, not of a default stream.
        if !self.is_default {
            LAST_TASK_ID.set(position as u32);
        }
        crate::capture::note_submission(None);
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

    /// Records that the worker has taken the task at `position`.
    fn begin(&self, position: u64) {
        if self.begun.fetch_max(position, Ordering::AcqRel) < position {
            self.begun_bell.ring_through(position);
        }
    }

    fn run(self: Arc<Self>) {
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
    fn nudge(&self) {
        let state = lock(&self.state);
        if state.parked {
            self.wake.notify_one();
        }
    }

    /// Blocks a task until `poll` gives its outcome (`Ok(ready_ns)` or a failure), or the
    /// stream gives up (`Err(None)`: the task is dropped), or `timeout` passes since the wait
    /// began (ACL_ERROR_RT_WAIT_TIMEOUT, naming `what`). Marks the task taken when it blocks.
    fn block_on(
        &self,
        task: &Task,
        extra: &[Listen<'_>],
        timeout: Option<Duration>,
        what: &str,
        mut poll: impl FnMut() -> Option<Result<u64, SimError>>,
    ) -> Result<u64, Option<SimError>> {
        let mut listens = extra.to_vec();
        listens.extend(self.listens(Bell::RING_ONLY));
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let outcome = wait_until(&listens, deadline, || {
            if self.discarding().is_some() {
                return Some(Err(None));
            }
            match poll() {
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
                    None
                }
            }
        });
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

    /// Waits for what must happen before the task may start: what it waits for and the
    /// device's hold gate. Returns the simulated time it became ready, or how it failed.
    fn wait_ready(&self, sim: &Sim, task: &Task) -> Result<u64, Option<SimError>> {
        let ready_ns =
            match &task.op {
                Op::Wait { record, timeout } => {
                    self.block_on(task, &record.listens(), *timeout, "an event wait", || {
                        match record.outcome() {
                            crate::event::Outcome::Done { ts_ns, .. } => Some(Ok(ts_ns)),
                            crate::event::Outcome::Pending => {
                                record.doom().map(|code| Err(record.doom_error(code)))
                            }
                        }
                    })?
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
                    self.block_on(task, &listens, None, "a value wait", || {
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
            | Op::SharedWait { .. }
            | Op::NotifyWait { .. }
            | Op::ValueWait { .. }
            | Op::ProfMarker(_) => Ok(()),
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
                // Taken while admitted: a synchronous copy the submitter issues next passes
                // the device's fence only once this task is done with memory.
                self.begin(task.position);
                let result = task.run_memory(&sim.memory).map_err(Some);
                crate::device::MEMORY_BELL.ring();
                result
            }
        }
    }

    fn execute(&self, sim: &Sim, mut task: Task) {
        if self.discarding().is_some() || task.is_aborted() {
            return self.retire(task, Retired::Abandoned);
        }
        // Only work that touches memory holds back the report of a doom: a task that waits
        // (an event, a notify, a value) gives up as soon as the stream is doomed, and a host
        // function, which may wait for the program itself, does not hold it back either
        // (docs/simulator.md, aclrtStreamStop).
        let (ready_ns, failure) = loop {
            match self.wait_ready(sim, &task) {
                // An abort while it waited: it does not start.
                Ok(_) if task.is_aborted() => return self.retire(task, Retired::Abandoned),
                // Stopped as it was about to start: it waits again, as a stopped task does.
                Ok(_) if task.touches_memory() && !self.start_running() => continue,
                Ok(ready_ns) => break (ready_ns, None),
                Err(None) => return self.give_up(task),
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
            None => crate::error::contain(|| self.perform(sim, &task)).unwrap_or_else(|_| {
                Err(Some(SimError::new(
                    ACL_ERROR_RT_INTERNAL_ERROR,
                    "a task panicked in the simulator",
                )))
            }),
        };
        let error = match result {
            Ok(()) => None,
            Err(None) => return self.give_up(task),
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
            return self.retire(task, Retired::Abandoned);
        }
        self.retire(
            task,
            Retired::Completed {
                start_ns,
                end_ns,
                error,
            },
        );
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

    /// Drops a task that could not run. Under a forced destruction, what follows it is
    /// dropped too: it would have run after a task that never did.
    fn give_up(&self, task: Task) {
        if self.draining.load(Ordering::Acquire) {
            self.aborted.store(true, Ordering::SeqCst);
        }
        self.retire(task, Retired::Abandoned);
    }

    fn retire(&self, mut task: Task, retired: Retired) {
        if matches!(task.op, Op::Callback { block: true, .. }) {
            self.block_callback_ran(task.position);
        }
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
                    crate::exception::raise(self, &task, error);
                }
                if let Some(code) = stop {
                    self.health.stop(code);
                }
                trace::record_task(self.device.id, self.id, &task, start_ns, end_ns);
            }
            Retired::Abandoned => {
                if let Op::Record(record) = &task.op {
                    record.discard(self.discarding().unwrap_or(ACL_ERROR_RT_STREAM_ABORT));
                }
            }
        }
        self.begin(task.position);
        // Whoever sees the wait finished sees it gone from its event's pending waits.
        drop(task.wait_ticket.take());
        let finished = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        // Dropping the task may release a kernel library or staged data: outside every lock.
        drop(task);
        self.bell.ring_through(finished);
    }

    /// Waits for every task submitted so far, leaving task errors in place. Fails if the
    /// stream is doomed, or with ACL_ERROR_RT_STREAM_SYNC_TIMEOUT at the deadline.
    pub(crate) fn wait_idle(&self, deadline: Option<Instant>) -> Res<()> {
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
            (self.finished.load(Ordering::Acquire) >= target).then_some(Ok(()))
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
    /// will never run), until the task running then has finished.
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
            wait_until(&[self.bell.at(running)], None, || {
                (self.finished.load(Ordering::Acquire) >= running).then_some(())
            });
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

    /// Whether aclrtDestroyStream(Force) or its context's destruction has begun.
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

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
        let first_block = lock(&self.state).block_callbacks.first().copied();
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

    /// The error for a doomed stream.
    pub(crate) fn doom_error(&self, code: aclError) -> SimError {
        if code == ACL_ERROR_RT_LOST_HEARTBEAT {
            return self.device.loss_error();
        }
        SimError::new(
            code,
            format!(
                "stream {} of device {} {}",
                self.id,
                self.device.id,
                doom_reason(code)
            ),
        )
    }

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

    /// The first half of an abort: marks the stream aborting (submissions are refused, the
    /// worker drops what it takes) and returns the count of tasks to see finished or dropped.
    pub(crate) fn begin_abort(&self) -> u64 {
        // A task submitted to the idle stream before the abort is running: it finishes.
        self.await_taken();
        self.aborting.store(true, Ordering::SeqCst);
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
        self.device.live_streams.fetch_sub(1, Ordering::AcqRel);
        self.nudge();
        // A task waiting for a stop to end gives up now.
        self.bell.ring();
        true
    }
}

#[cfg(test)]
mod dispatch_tests;

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::abi::*;
    use crate::handle;

    static GATE: AtomicBool = AtomicBool::new(false);

    /// A host function that holds its stream until GATE opens (without using a bell, so the
    /// stream's bell only has the test's waiters).
    unsafe extern "C" fn wait_for_gate(_: *mut c_void) {
        while !GATE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn event_syncs_on_one_stream_are_each_woken_once() {
        const WAITERS: usize = 32;
        let mut stream = ptr::null_mut();
        // SAFETY: valid out pointers, a host function that ignores its argument.
        unsafe {
            assert_eq!(aclrtSetDevice(1), 0);
            assert_eq!(aclrtCreateStream(&mut stream), 0);
            assert_eq!(
                aclrtLaunchHostFunc(stream, Some(wait_for_gate), ptr::null_mut()),
                0
            );
        }
        let events: Vec<usize> = (0..WAITERS)
            .map(|_| {
                let mut event = ptr::null_mut();
                // SAFETY: a valid out pointer; the stream is live.
                unsafe {
                    assert_eq!(aclrtCreateEvent(&mut event), 0);
                    assert_eq!(aclrtRecordEvent(event, stream), 0);
                }
                event as usize
            })
            .collect();
        let sim = crate::sim::sim().unwrap();
        let held = sim.streams.resolve(handle::from_ptr(stream)).unwrap();
        let syncs: Vec<_> = events
            .iter()
            .map(|&event| {
                // SAFETY: the event is live until the test ends.
                std::thread::spawn(move || unsafe { aclrtSynchronizeEvent(event as aclrtEvent) })
            })
            .collect();
        while held.bell.waiters() < WAITERS {
            std::thread::yield_now();
        }
        GATE.store(true, Ordering::Release);
        for sync in syncs {
            assert_eq!(sync.join().unwrap(), 0);
        }
        // Each record finishing woke the one thread waiting for it; with one bell for every
        // wait, each would have woken all the threads still waiting.
        assert_eq!(held.bell.woken(), WAITERS);
        // SAFETY: live handles.
        unsafe { assert_eq!(aclrtDestroyStream(stream), 0) };
    }

    static RUNNING: AtomicBool = AtomicBool::new(false);
    static FREE_GATE: AtomicBool = AtomicBool::new(false);

    /// Marks itself running, then holds its stream until FREE_GATE opens.
    unsafe extern "C" fn run_until_free_gate(_: *mut c_void) {
        RUNNING.store(true, Ordering::Release);
        while !FREE_GATE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn free_with_dev_sync_waits_for_the_running_task_of_a_stopped_stream() {
        let (mut ctx, mut failing, mut busy, mut buf) = (
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        );
        // SAFETY: valid out pointers and live handles; the host function ignores its argument.
        unsafe {
            assert_eq!(aclrtCreateContext(&mut ctx, 0), 0);
            assert_eq!(aclrtCreateStream(&mut failing), 0);
            assert_eq!(aclrtCreateStream(&mut busy), 0);
            assert_eq!(aclrtMalloc(&mut buf, 4096, 0), 0);
            assert_eq!(
                aclrtSetStreamFailureMode(failing, npu_sys::ACL_STOP_ON_FAILURE.into()),
                0
            );
            assert_eq!(
                aclrtLaunchHostFunc(busy, Some(run_until_free_gate), ptr::null_mut()),
                0
            );
        }
        while !RUNNING.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // A failure in STOP mode stops the context: `busy` can run nothing more, but its
        // host function is still running.
        // SAFETY: live handles and a live allocation.
        unsafe {
            assert_eq!(crate::abi::npusimFailTask(failing, 1, 507899), 0);
            assert_eq!(aclrtMemsetAsync(buf, 64, 0, 64, failing), 0);
            assert_eq!(aclrtSynchronizeStream(failing), 507899);
        }
        let held = crate::sim::sim()
            .unwrap()
            .streams
            .resolve(handle::from_ptr(busy))
            .unwrap();
        assert!(held.doom().is_some());
        let address = buf as usize;
        // SAFETY: a live allocation, freed once.
        let freer =
            std::thread::spawn(move || unsafe { aclrtFreeWithDevSync(address as *mut c_void) });
        while held.bell.waiters() == 0 && !freer.is_finished() {
            std::thread::yield_now();
        }
        assert!(
            !freer.is_finished(),
            "the free did not wait for the running task"
        );
        FREE_GATE.store(true, Ordering::Release);
        assert_eq!(freer.join().unwrap(), 0);
        // SAFETY: live handles.
        unsafe {
            assert_eq!(aclrtDestroyStream(busy), 0);
            assert_eq!(aclrtDestroyStream(failing), 0);
            assert_eq!(aclrtDestroyContext(ctx), 0);
        }
    }
}
