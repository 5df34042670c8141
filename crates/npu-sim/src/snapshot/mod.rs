//! Process snapshots (aclrtSnapShotProcess*): the process state machine and the host-side
//! backup of device memory; the gate that blocks runtime calls while the process is locked
//! ([`gate`]) and the per-stage callbacks ([`callbacks`]).

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::memory::SavedAllocation;
use crate::sim::Sim;
use crate::sync::lock;

mod callbacks;
mod gate;

use callbacks::run_stage;
pub(crate) use callbacks::{register, unregister};
pub(crate) use gate::admit;

/// How long Lock waits for blocked-kind calls in progress and queued device work to finish
/// before it gives up with ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT; Backup and Restore wait as long
/// for the work the lock's holder queued since.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The process's snapshot state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// A Lock is waiting for calls in progress and queued work: the gate is closed, but the
    /// process is not LOCKED yet (no other snapshot step may start).
    Locking,
    Locked,
    BackedUp,
}

struct State {
    phase: Phase,
    /// The thread whose Lock closed the gate: its own calls pass.
    holder: Option<std::thread::ThreadId>,
    /// The last backup.
    backup: Option<Vec<SavedAllocation>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    phase: Phase::Running,
    holder: None,
    backup: None,
});

/// Checks the pid (this process's only) and the reserved pointer (NULL only).
pub(crate) fn check_call(pid: i32, reserved: *const c_void, what: &str) -> Res<()> {
    ensure!(
        i64::from(pid) == i64::from(std::process::id()),
        ACL_ERROR_INVALID_PARAM,
        "pid {pid} is not the calling process ({})",
        std::process::id()
    );
    ensure!(
        reserved.is_null(),
        ACL_ERROR_INVALID_PARAM,
        "{what} must be NULL (the only value supported)"
    );
    Ok(())
}

fn wrong_phase(code: aclError, call: &str, phase: Phase, needed: &str) -> Res<()> {
    fail!(
        code,
        "{call} needs the process {needed}, but it is {phase:?}"
    )
}

/// A snapshot step that needs the process in one state, and the code it fails with otherwise.
struct Step {
    call: &'static str,
    needs: Phase,
    needs_name: &'static str,
    code: aclError,
}

const LOCK: Step = Step {
    call: "Lock",
    needs: Phase::Running,
    needs_name: "RUNNING",
    code: ACL_ERROR_SNAPSHOT_LOCK_FAILED,
};
const BACKUP: Step = Step {
    call: "Backup",
    needs: Phase::Locked,
    needs_name: "LOCKED",
    code: ACL_ERROR_SNAPSHOT_BACKUP_FAILED,
};
const RESTORE: Step = Step {
    call: "Restore",
    needs: Phase::BackedUp,
    needs_name: "BACKED_UP",
    code: ACL_ERROR_SNAPSHOT_RESTORE_FAILED,
};

impl Step {
    /// Fails unless the process is in the state the step needs.
    fn check(&self, phase: Phase) -> Res<()> {
        if phase != self.needs {
            return wrong_phase(self.code, self.call, phase, self.needs_name);
        }
        Ok(())
    }
}

/// Waits until every stream's queued work has finished or can never run (nothing of it still
/// running), or `deadline` passes: then says which stream kept running.
fn drain(sim: &Sim, deadline: Instant) -> Result<(), String> {
    for stream in sim.streams.live() {
        if !stream.drained_by(deadline) {
            return Err(format!(
                "stream {} of device {} kept running",
                stream.id, stream.device.id
            ));
        }
    }
    Ok(())
}

/// aclrtSnapShotProcessLock: LOCK_PRE callbacks (a failure leaves the process RUNNING), then
/// blocks new calls and waits, at most [`DRAIN_TIMEOUT`], for calls in progress and for every
/// stream's queued work.
pub(crate) fn process_lock(sim: &Sim) -> Res<()> {
    ensure!(
        !crate::host_task::is_running(),
        ACL_ERROR_SNAPSHOT_LOCK_FAILED,
        "called from a host task, whose own stream could never drain"
    );
    LOCK.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_LOCK_PRE)?;
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut state = lock(&STATE);
    // Again: another thread may have locked while the callbacks ran.
    LOCK.check(state.phase)?;
    state.phase = Phase::Locking;
    gate::close(&mut state, std::thread::current().id());
    let (state, returned) = gate::wait_for_calls(state, deadline);
    if !returned {
        return Err(abandon(state, "runtime calls in progress did not finish"));
    }
    drop(state);
    if let Err(why) = drain(sim, deadline) {
        return Err(abandon(lock(&STATE), &why));
    }
    lock(&STATE).phase = Phase::Locked;
    Ok(())
}

/// Gives a timed-out Lock up: back to RUNNING, releasing the calls it blocked. Only the Lock
/// in progress can be here: no other step starts while the process is LOCKING.
fn abandon(mut state: MutexGuard<'_, State>, why: &str) -> SimError {
    state.phase = Phase::Running;
    gate::open(&mut state);
    SimError::new(
        ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT,
        format!(
            "{why} within {} ms; the process stays RUNNING",
            DRAIN_TIMEOUT.as_millis()
        ),
    )
}

/// Waits for the work queued since the lock (by its holder, whose calls pass the gate) before
/// a step touches device memory.
fn drain_for(sim: &Sim, step: &Step) -> Res<()> {
    drain(sim, Instant::now() + DRAIN_TIMEOUT).map_err(|why| {
        SimError::new(
            step.code,
            format!(
                "{why} within {} ms; {} did nothing",
                DRAIN_TIMEOUT.as_millis(),
                step.call
            ),
        )
    })
}

/// aclrtSnapShotProcessBackup: BACKUP_PRE callbacks (a failure backs nothing up), the copy of
/// every device allocation once queued work has finished (replacing an earlier backup),
/// BACKED_UP, BACKUP_POST callbacks.
pub(crate) fn process_backup(sim: &Sim) -> Res<()> {
    BACKUP.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_BACKUP_PRE)?;
    drain_for(sim, &BACKUP)?;
    let contents = sim.memory.device_contents()?;
    {
        let mut state = lock(&STATE);
        BACKUP.check(state.phase)?;
        state.backup = Some(contents);
        state.phase = Phase::BackedUp;
    }
    run_stage(sim, ACL_RT_SNAPSHOT_BACKUP_POST)
}

/// aclrtSnapShotProcessRestore: RESTORE_PRE callbacks (a failure restores nothing), the last
/// backup written back once queued work has finished, LOCKED, RESTORE_POST callbacks.
pub(crate) fn process_restore(sim: &Sim) -> Res<()> {
    RESTORE.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_RESTORE_PRE)?;
    drain_for(sim, &RESTORE)?;
    {
        let mut state = lock(&STATE);
        RESTORE.check(state.phase)?;
        let saved = state.backup.as_deref().unwrap_or_default();
        sim.memory.restore_contents(saved)?;
        // The restore wrote device memory: value waits re-read it.
        crate::device::MEMORY_BELL.ring();
        state.phase = Phase::Locked;
    }
    run_stage(sim, ACL_RT_SNAPSHOT_RESTORE_POST)
}

/// aclrtSnapShotProcessUnlock: RUNNING, the blocked calls released, UNLOCK_POST callbacks.
pub(crate) fn process_unlock(sim: &Sim) -> Res<()> {
    {
        let mut state = lock(&STATE);
        if !matches!(state.phase, Phase::Locked | Phase::BackedUp) {
            return wrong_phase(
                ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
                "Unlock",
                state.phase,
                "LOCKED or BACKED_UP",
            );
        }
        state.phase = Phase::Running;
        gate::open(&mut state);
    }
    run_stage(sim, ACL_RT_SNAPSHOT_UNLOCK_POST)
}
