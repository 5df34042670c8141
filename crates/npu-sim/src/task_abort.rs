//! aclrtDeviceTaskAbort: every stream of a device, in every context, drops the work it has not
//! run, between the PRE and POST calls of aclrtSetDeviceTaskAbortCallback's callbacks.
//!
//! The simulator cannot interrupt a task that is running (a kernel is host code), so the abort
//! waits for the running tasks to return; `timeout` bounds that wait. A stream whose running
//! task outlives the timeout completes its abort when the task returns, on a thread of its
//! own: meanwhile it refuses submissions with 107023, like any stream being aborted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::device::Device;
use crate::error::{Res, ensure, fail};
use crate::sim::Sim;
use crate::stream_state::notify_abort;

/// The longest timeout the reference allows: 36 minutes, in milliseconds.
pub(crate) const MAX_TIMEOUT_MS: u32 = 36 * 60 * 1000;

/// Aborts every task of `device` not run yet; `timeout_ms` 0 waits for the running tasks as
/// long as they take.
pub(crate) fn abort_device(sim: &Sim, device: &Arc<Device>, timeout_ms: u32) -> Res<()> {
    device.check_alive()?;
    // The abort waits for each stream's running task, which for a host function calling it
    // is the caller's own: refused (207000) before anything is aborted, as aclrtStreamAbort of
    // its own stream is. A BLOCK callback's stream is not held: the abort drops the callback.
    for stream in sim.streams_of(device.id) {
        stream.refuse_wait_for_caller(u64::MAX)?;
    }
    ensure!(
        device.set_aborting_tasks(true),
        ACL_ERROR_RT_DEVICE_TASK_ABORT,
        "an aclrtDeviceTaskAbort of device {} is already running",
        device.id
    );
    /// Ends the device's abort however the abort returns.
    struct Aborting<'a>(&'a Device);
    impl Drop for Aborting<'_> {
        fn drop(&mut self) {
            self.0.set_aborting_tasks(false);
        }
    }
    let _aborting = Aborting(device);
    abort_streams(sim, device, timeout_ms)
}

fn abort_streams(sim: &Sim, device: &Arc<Device>, timeout_ms: u32) -> Res<()> {
    let id = device.id;
    if let Some((name, status)) = notify_abort(id, ACL_RT_DEVICE_TASK_ABORT_PRE, timeout_ms) {
        fail!(
            ACL_ERROR_RT_TASK_ABORT_STOP,
            "the device task abort callback \"{name}\" returned {status} before the abort of \
             device {id}: nothing was aborted"
        );
    }
    device.begin_task_abort();
    let deadline =
        (timeout_ms != 0).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
    let aborting: Vec<_> = sim
        .streams_of(id)
        .into_iter()
        .map(|stream| {
            let target = stream.begin_abort();
            (stream, target)
        })
        .collect();
    let late: Vec<_> = aborting
        .into_iter()
        .filter(|(stream, target)| !stream.finish_abort(*target, deadline))
        .collect();
    if !late.is_empty() {
        let ids: Vec<i32> = late.iter().map(|(stream, _)| stream.id).collect();
        std::thread::spawn(move || {
            for (stream, target) in late {
                stream.finish_abort(target, None);
            }
        });
        fail!(
            ACL_ERROR_RT_TASK_TIMEOUT,
            "aclrtDeviceTaskAbort of device {id}: tasks of streams {ids:?} were still running \
             after {timeout_ms} ms (their streams finish aborting when those tasks return)"
        );
    }
    if let Some((name, status)) = notify_abort(id, ACL_RT_DEVICE_TASK_ABORT_POST, timeout_ms) {
        fail!(
            ACL_ERROR_RT_TASK_ABORT_STOP,
            "the device task abort callback \"{name}\" returned {status} after the abort of \
             device {id} (the tasks were aborted)"
        );
    }
    Ok(())
}
