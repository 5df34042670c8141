//! The dispatch fence: a submission to an idle stream returns without waiting for the worker,
//! and [`Device::fence`] (every synchronous copy and memset), aclrtStreamStop and
//! aclrtStreamAbort wait for the worker to take it instead. Each test holds its tasks between
//! submission and being taken by stalling its device's admission, on a device of its own
//! (outside the simulator's device list, so no other test shares or loses it). The rig also
//! serves a test of a synchronisation an abort clears.

use std::sync::{Arc, RwLockWriteGuard};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use npu_sys::*;

use crate::abi::run_now;
use crate::context::Health;
use crate::device::Device;
use crate::sim::sim;
use crate::stream::{Kind, Stream};
use crate::task::{Op, Task};

const LEN: usize = 64;
const FILL: u8 = 0x5a;

/// Streams of a private device, each with a host buffer its memset fills.
struct Rig {
    device: Arc<Device>,
    health: Arc<Health>,
    streams: Vec<Arc<Stream>>,
    targets: Vec<[u8; LEN]>,
}

impl Rig {
    fn new(streams: usize) -> Self {
        let sim = sim().unwrap();
        let device = Arc::new(Device::new(1000, 1 << 20, Instant::now(), None));
        let health = Arc::new(Health::default());
        let targets = vec![[0; LEN]; streams];
        let streams = (0..streams)
            .map(|_| Stream::create(sim, 0, &device, &health, 0, 0, Kind::Created).unwrap())
            .collect();
        Rig {
            device,
            health,
            streams,
            targets,
        }
    }

    /// Submits a memset of its buffer to every (idle) stream.
    fn memset_all(&mut self) {
        for (stream, target) in self.streams.iter().zip(&mut self.targets) {
            stream.submit(fill(target)).unwrap();
        }
    }

    /// Whether a fence of the device waits for a task of one of its streams to be taken.
    fn fence_waits(&self) -> bool {
        self.streams.iter().any(|s| s.begun_bell.waiters() > 0)
    }

    /// Starts a fence of the device; returns once it waits for a task not taken yet.
    fn fence<'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
    ) -> ScopedJoinHandle<'scope, ()> {
        let fence = scope.spawn(|| self.device.fence(sim().unwrap()));
        while !self.fence_waits() {
            std::thread::yield_now();
        }
        fence
    }

    /// Whether every memset has filled its buffer, once no task can touch memory any more.
    fn all_filled(&self) -> bool {
        for stream in &self.streams {
            stream.wait_quiescent();
        }
        self.targets.iter().all(|t| t.iter().all(|&b| b == FILL))
    }

    fn none_filled(&self) -> bool {
        for stream in &self.streams {
            stream.wait_quiescent();
        }
        self.targets.iter().all(|t| t.iter().all(|&b| b == 0))
    }
}

/// A memset filling `target` with [`FILL`].
fn fill(target: &mut [u8; LEN]) -> Task {
    Task::new(Op::Memset {
        dst: target.as_mut_ptr() as usize,
        len: LEN,
        value: u32::from(FILL),
        width: 1,
        owned: false,
    })
}

impl Drop for Rig {
    fn drop(&mut self) {
        let sim = sim().unwrap();
        for stream in &self.streams {
            stream.destroy(sim, true);
        }
    }
}

/// The device's admission, stalled until the guard drops.
type Stall<'a> = RwLockWriteGuard<'a, ()>;

/// Submits a memset to each of `streams` idle streams of a private device whose admission is
/// stalled, starts a fence, and runs `body` while the fence waits for the untaken tasks, with
/// the stall (dropping it lets the workers take them) and the fence's thread.
fn while_a_fence_waits(
    streams: usize,
    body: impl for<'a> FnOnce(&'a Rig, Stall<'a>, ScopedJoinHandle<'a, ()>),
) -> Rig {
    let mut rig = Rig::new(streams);
    let device = rig.device.clone();
    let stall = device.stall_admission();
    // The submissions return although no worker can take its task.
    rig.memset_all();
    std::thread::scope(|scope| {
        let fence = rig.fence(scope);
        body(&rig, stall, fence);
    });
    rig
}

#[test]
fn a_fence_waits_for_the_tasks_submitted_to_idle_streams_to_be_taken_and_done() {
    let rig = while_a_fence_waits(3, |_, stall, fence| {
        assert!(!fence.is_finished(), "the fence passed untaken tasks");
        drop(stall);
        fence.join().unwrap();
    });
    assert!(rig.all_filled());
}

#[test]
fn a_fence_does_not_wait_for_a_lost_device() {
    let rig = while_a_fence_waits(2, |rig, stall, fence| {
        std::thread::scope(|scope| {
            // The loss returns only once no task touches memory: after the stall.
            let lose = scope.spawn(|| rig.device.lose());
            fence.join().unwrap();
            drop(stall);
            lose.join().unwrap();
        });
    });
    assert!(
        rig.none_filled(),
        "a lost device ran the tasks it had not taken"
    );
}

#[test]
fn a_fence_does_not_wait_for_a_stopped_context() {
    while_a_fence_waits(2, |rig, stall, fence| {
        // As a task failing on another stream of the context in ACL_STOP_ON_FAILURE mode.
        rig.health.stop(ACL_ERROR_RT_AICORE_EXCEPTION);
        fence.join().unwrap();
        drop(stall);
    });
}

/// Stopping, aborting or force-destroying the stream while a fence waits: neither the fence
/// nor the call hangs, and the task submitted before the call, taken by then on a device, ran.
#[test]
fn a_fence_and_a_stop_abort_or_forced_destruction_both_return_once_the_task_is_taken() {
    type Action = fn(&Stream);
    let actions: [(&str, Action); 3] = [
        ("stop", |stream| stream.stop()),
        ("abort", |stream| stream.abort()),
        ("destroy force", |stream| {
            assert!(stream.destroy(sim().unwrap(), true));
        }),
    ];
    for (name, action) in actions {
        let rig = while_a_fence_waits(1, |rig, stall, fence| {
            std::thread::scope(|scope| {
                let acting = scope.spawn(|| action(&rig.streams[0]));
                drop(stall);
                fence.join().unwrap();
                acting.join().unwrap();
            });
        });
        assert!(rig.all_filled(), "{name}: the taken task did not run");
    }
}

/// A synchronous memset waiting at the fence for a task an idle stream has not taken yet when
/// an aclrtDeviceTaskAbort of the device begins dropping work is work not started, which the
/// abort drops: it fails with 107023 and writes nothing, while the task it waited for, taken
/// before the abort could drop it, runs.
#[test]
fn a_device_task_abort_begun_while_a_synchronous_memset_waits_at_the_fence_stops_it() {
    let mut rig = Rig::new(1);
    let device = rig.device.clone();
    let stall = device.stall_admission();
    rig.memset_all();
    let mut target = [0; LEN];
    let memset = fill(&mut target);
    let result = std::thread::scope(|scope| {
        let synchronous = scope.spawn(|| run_now(sim().unwrap(), &device, None, memset));
        while !rig.fence_waits() {
            std::thread::yield_now();
        }
        device.begin_task_abort();
        drop(stall);
        synchronous.join().unwrap()
    });
    assert_eq!(result.unwrap_err().code, ACL_ERROR_RT_STREAM_ABORT);
    assert!(
        rig.all_filled(),
        "the task the fence waited for did not run"
    );
    assert_eq!(target, [0; LEN], "the stopped memset wrote");
}

/// A synchronisation in progress when an abort clears its stream fails with 107023, also when
/// it looks only once the abort is over and the stream, its work dropped, is idle again (it
/// returned 0 then, as a waiter woken late did); one begun after the abort succeeds.
/// A wait whose work had all finished when an abort began was not cleared by it: it succeeds
/// however late it looks, also with work submitted after the abort still to run.
#[test]
fn a_wait_whose_work_finished_before_an_abort_succeeds_when_it_looks_after_it() {
    let mut rig = Rig::new(1);
    rig.memset_all();
    assert!(rig.all_filled());
    let stream = &rig.streams[0];
    let began = stream.abort_count();
    stream.abort();
    stream.wait_idle_since(began, None).unwrap();
}

#[test]
fn a_wait_an_abort_cleared_fails_even_when_it_looks_after_the_abort() {
    let mut rig = Rig::new(1);
    // The memset waits at the closed hold gate: taken, not started, so the abort drops it.
    rig.device.hold();
    rig.memset_all();
    let stream = &rig.streams[0];
    let began = stream.abort_count();
    stream.abort();
    let error = stream.wait_idle_since(began, None).unwrap_err();
    assert_eq!(error.code, ACL_ERROR_RT_STREAM_ABORT);
    stream.wait_idle(None).unwrap();
    rig.device.release();
    assert!(rig.none_filled(), "the abort ran the memset it dropped");
}
