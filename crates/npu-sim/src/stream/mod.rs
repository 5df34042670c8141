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
use std::sync::{Arc, Condvar, Mutex};

use npu_sys::*;

use crate::capture::Capture;
use crate::context::Health;
use crate::device::Device;
use crate::error::{Res, SimError, fail};
use crate::handle::Handle;
use crate::model_ri::{GroupWork, ModelRi};
use crate::sim::Sim;
use crate::sync::Bell;
use crate::task::Task;

mod abort;
mod capture;
mod destroy;
mod doom;
mod failure;
mod program;
mod ready;
mod retire;
mod self_wait;
mod submit;
mod wait;
mod worker;

pub(crate) use doom::doom_reason;
pub(crate) use submit::last_task_id;

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
    /// Device tasks submitted so far (fault injection counts these).
    device_seq: u64,
    /// Injected failures: (device-task sequence number, code).
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
    /// Positions of the BLOCK callbacks submitted that have not run (or been dropped): the
    /// stream waits at each for its report thread, so that thread must not wait for the
    /// stream to pass one.
    block_callbacks: BTreeSet<u64>,
    /// Positions of the programs holding BLOCK callbacks, until they retire: every callback of
    /// a program shares its position, and one that ran does not end the others.
    block_programs: BTreeSet<u64>,
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
    /// The primary context's default stream, which is the device's default stream: it shares
    /// that stream's slot with the device's explicit contexts ([`Device::take_stream_slot`])
    /// until its context is released ([`Stream::detach_from_device_default`]).
    device_default: AtomicBool,
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
    /// Aborts begun on the stream (its own, its device's), which outlive `aborting`: a
    /// synchronous copy done for the stream learns of one it slept through
    /// ([`Self::abort_count`]).
    aborts: AtomicU64,
    /// The stream's finished count when its latest abort began: a wait whose work had all
    /// finished by then was not cleared by it.
    finished_at_abort: AtomicU64,
    /// Whether a task that touches memory is in its work right now (see
    /// [`Stream::settled_doom`]).
    running: AtomicBool,
    /// Whether the task the worker holds is waiting in [`Stream::block_on`] (for an event, a
    /// notify, a value, at the hold gate or a stop), not in its work
    /// ([`Stream::wait_quiescent`]). A BLOCK callback waiting for its report thread and a
    /// running host function are in their work.
    waiting: AtomicBool,
    /// Rung when the task starts waiting on a doomed stream.
    waiting_bell: Bell,
    /// aclrtStreamStop: the worker takes no task until aclrtStreamAbort.
    stopped: AtomicBool,
}

/// What a stream is to its context, for [`Stream::create`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Created by aclrtCreateStream(WithConfig).
    Created,
    /// An explicit context's default stream.
    ContextDefault,
    /// The primary context's default stream: the device's default stream.
    DeviceDefault,
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
        kind: Kind,
    ) -> Res<Arc<Stream>> {
        let (is_default, device_default) = match kind {
            Kind::Created => (false, false),
            Kind::ContextDefault => (true, false),
            Kind::DeviceDefault => (true, true),
        };
        device.take_stream_slot(device_default)?;
        let handle = match sim.streams.reserve() {
            Ok(handle) => handle,
            Err(error) => {
                device.give_stream_slot(device_default);
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
            device_default: AtomicBool::new(device_default),
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
            aborts: AtomicU64::new(0),
            finished_at_abort: AtomicU64::new(0),
            running: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            waiting_bell: Bell::new(),
            stopped: AtomicBool::new(false),
        });
        // Started now, so that the first task does not pay for a thread start.
        let worker = stream.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("npu-sim-d{}-s{}", device.id, stream.id))
            .spawn(move || worker.run());
        if let Err(error) = spawned {
            sim.streams.remove(handle);
            device.give_stream_slot(device_default);
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

    /// The primary context holding this default stream was released: the stream is no longer
    /// the device's default stream, and counts as a stream of its own until it is destroyed.
    pub(crate) fn detach_from_device_default(&self) {
        if self.device_default.swap(false, Ordering::AcqRel) {
            self.device.detach_default_stream();
        }
    }

    pub(crate) fn priority(&self) -> u32 {
        self.priority.load(Ordering::Acquire) as u32
    }

    pub(crate) fn set_priority(&self, priority: u32) {
        self.priority.store(u64::from(priority), Ordering::Release);
    }
}

#[cfg(test)]
mod dispatch_tests;

#[cfg(test)]
mod tests;
