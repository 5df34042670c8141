//! Process snapshots (aclrtSnapShotProcess*): the process state machine, the gate that blocks
//! runtime calls while the process is locked, the host-side backup of device memory and the
//! per-stage callbacks.
//!
//! The gate is a Dekker pair: a blocked-kind call counts itself in [`IN_FLIGHT`] and then reads
//! [`LOCKED`]; Lock sets [`LOCKED`] and then waits for [`IN_FLIGHT`] to fall to zero. Both with
//! SeqCst, so either the call sees the lock (and waits) or Lock sees the call (and waits for
//! it). Calls of other kinds pay one string match.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::error::{Res, ensure, fail};
use crate::sim::Sim;
use crate::sync::lock;

/// How long Lock waits for blocked-kind calls in progress and queued device work to finish
/// before it gives up with ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT.
pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// Calls blocked while locked, by exact name.
const BLOCKED: &[&str] = &[
    "aclrtSetDevice",
    "aclrtResetDevice",
    "aclrtResetDeviceForce",
    "aclrtCreateContext",
    "aclrtDestroyContext",
    "aclrtDestroyEvent",
    "aclrtCreateNotify",
    "aclrtDestroyNotify",
    "aclrtRecordEvent",
    "aclrtStreamWaitEvent",
    "aclrtRecordNotify",
    "aclrtWaitAndResetNotify",
    "aclrtLaunchCallback",
    "aclrtLaunchHostFunc",
];

/// Calls blocked while locked, by name prefix (every variant of the family).
const BLOCKED_PREFIXES: &[&str] = &[
    "aclrtMalloc",
    "aclrtFree",
    "aclrtMemcpy",
    "aclrtMemset",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtCreateEvent",
    "aclrtLaunchKernel",
];

/// The letters that follow "aclrt" in the blocked calls' names.
const BLOCKED_INITIALS: &[u8] = b"CDFLMRSW";

/// Whether the snapshot lock blocks the call `api`. Every runtime call asks, so one byte (the
/// letter after "aclrt") rules out most of the calls that are not blocked, queries, gets and
/// synchronizations among them, before any name is compared.
pub(crate) fn blocks(api: &str) -> bool {
    if !api
        .as_bytes()
        .get(5)
        .is_some_and(|initial| BLOCKED_INITIALS.contains(initial))
    {
        return false;
    }
    BLOCKED.contains(&api) || BLOCKED_PREFIXES.iter().any(|p| api.starts_with(p))
}

/// The process's snapshot state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Locked,
    BackedUp,
}

struct State {
    phase: Phase,
    /// The thread whose Lock succeeded: its own calls (and so the callbacks it runs) pass.
    holder: Option<ThreadId>,
    /// The last backup: (base, device, contents) of every device allocation.
    backup: Option<Vec<(usize, i32, Vec<u8>)>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    phase: Phase::Running,
    holder: None,
    backup: None,
});
/// Notified when the lock is released and when a blocked-kind call finishes while locked.
static CHANGED: Condvar = Condvar::new();
/// Whether the process is locked (LOCKED or BACKED_UP, or a Lock is draining).
static LOCKED: AtomicBool = AtomicBool::new(false);
/// Blocked-kind calls in progress.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A blocked-kind call admitted past the gate; counted until dropped.
pub(crate) struct Pass;

impl Drop for Pass {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        if LOCKED.load(Ordering::SeqCst) {
            // Under the mutex, so a Lock between its check and its wait does not miss it.
            let _state = lock(&STATE);
            CHANGED.notify_all();
        }
    }
}

/// Admits the call `api`: waits while the process is locked if the lock blocks it. Host tasks
/// (host functions, blocking callbacks) and the lock's holder are never blocked: Lock drains
/// the former, and the latter would wait for itself.
pub(crate) fn admit(api: &str) -> Option<Pass> {
    if !blocks(api) || crate::host_task::is_running() {
        return None;
    }
    let me = std::thread::current().id();
    loop {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        if !LOCKED.load(Ordering::SeqCst) {
            return Some(Pass);
        }
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        let mut state = lock(&STATE);
        if state.holder == Some(me) {
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            return Some(Pass);
        }
        CHANGED.notify_all();
        while LOCKED.load(Ordering::SeqCst) && state.holder != Some(me) {
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The callbacks, one per stage at most: (callback, user args as an address).
static CALLBACKS: Mutex<[Option<(aclrtSnapShotCallBack, usize)>; 6]> = Mutex::new([None; 6]);

/// The index of a valid stage, for a registration or unregistration of a non-NULL callback.
fn stage_index(stage: aclrtSnapShotStage, callback: aclrtSnapShotCallBack) -> Res<usize> {
    ensure!(
        stage <= ACL_RT_SNAPSHOT_UNLOCK_POST,
        ACL_ERROR_INVALID_PARAM,
        "stage {stage} is no aclrtSnapShotStage"
    );
    ensure!(
        callback.is_some(),
        ACL_ERROR_INVALID_PARAM,
        "callback is NULL"
    );
    Ok(stage as usize)
}

/// aclrtSnapShotCallbackRegister: one callback per stage (a second → 507913).
pub(crate) fn register(
    stage: aclrtSnapShotStage,
    callback: aclrtSnapShotCallBack,
    args: *mut c_void,
) -> Res<()> {
    let index = stage_index(stage, callback)?;
    let mut callbacks = lock(&CALLBACKS);
    ensure!(
        callbacks[index].is_none(),
        ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
        "stage {stage} already has a callback (repeated registration is not supported)"
    );
    callbacks[index] = Some((callback, args as usize));
    Ok(())
}

/// aclrtSnapShotCallbackUnregister: the stage's callback must be `callback` (else 507913).
pub(crate) fn unregister(stage: aclrtSnapShotStage, callback: aclrtSnapShotCallBack) -> Res<()> {
    let index = stage_index(stage, callback)?;
    let mut callbacks = lock(&CALLBACKS);
    match callbacks[index] {
        // Compared as addresses: the C caller passes the same pointer it registered.
        Some((registered, _)) if registered.map(|f| f as usize) == callback.map(|f| f as usize) => {
            callbacks[index] = None;
            Ok(())
        }
        Some(_) => fail!(
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            "stage {stage} has a different callback registered"
        ),
        None => fail!(
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            "stage {stage} has no callback registered"
        ),
    }
}

/// The devices in use: those with a live context, in id order.
fn devices_in_use(sim: &Sim) -> Vec<i32> {
    let mut ids: Vec<i32> = sim.contexts.live().iter().map(|c| c.device.id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Calls the stage's callback once per device in use, outside every simulator lock, so that
/// it may call the runtime. The first non-zero return → 507912 (the others still run).
fn run_stage(sim: &Sim, stage: aclrtSnapShotStage) -> Res<()> {
    let entry = lock(&CALLBACKS)[stage as usize];
    let Some((Some(callback), args)) = entry else {
        return Ok(());
    };
    let mut failed = None;
    for device in devices_in_use(sim) {
        // SAFETY: the user registered a function of this type and is responsible for `args`.
        let code = unsafe { callback(device, args as *mut c_void) };
        if code != 0 && failed.is_none() {
            failed = Some((device, code));
        }
    }
    match failed {
        Some((device, code)) => fail!(
            ACL_ERROR_SNAPSHOT_CALLBACK_FAILED,
            "the callback of stage {stage} returned {code} for device {device}"
        ),
        None => Ok(()),
    }
}

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

/// aclrtSnapShotProcessLock: LOCK_PRE callbacks (a failure leaves the process RUNNING), then
/// blocks new calls and waits, at most [`LOCK_TIMEOUT`], for calls in progress and for every
/// stream's queued work.
pub(crate) fn process_lock(sim: &Sim) -> Res<()> {
    ensure!(
        !crate::host_task::is_running(),
        ACL_ERROR_SNAPSHOT_LOCK_FAILED,
        "called from a host task, whose own stream could never drain"
    );
    LOCK.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_LOCK_PRE)?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    let mut state = lock(&STATE);
    // Again: another thread may have locked while the callbacks ran.
    LOCK.check(state.phase)?;
    state.phase = Phase::Locked;
    state.holder = Some(std::thread::current().id());
    LOCKED.store(true, Ordering::SeqCst);
    while IN_FLIGHT.load(Ordering::SeqCst) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(abandon(state, "runtime calls in progress did not finish"));
        }
        state = CHANGED
            .wait_timeout(state, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    drop(state);
    for stream in sim.streams.live() {
        if !stream.drained_by(deadline) {
            let state = lock(&STATE);
            let why = format!(
                "stream {} of device {} kept running",
                stream.id, stream.device.id
            );
            return Err(abandon(state, &why));
        }
    }
    Ok(())
}

/// Gives a timed-out Lock up: back to RUNNING, releasing the calls it blocked.
fn abandon(mut state: std::sync::MutexGuard<'_, State>, why: &str) -> crate::error::SimError {
    release(&mut state);
    crate::error::SimError::new(
        ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT,
        format!(
            "{why} within {} ms; the process stays RUNNING",
            LOCK_TIMEOUT.as_millis()
        ),
    )
}

fn release(state: &mut State) {
    state.phase = Phase::Running;
    state.holder = None;
    LOCKED.store(false, Ordering::SeqCst);
    CHANGED.notify_all();
}

/// aclrtSnapShotProcessBackup: BACKUP_PRE callbacks (a failure backs nothing up), the copy of
/// every device allocation (replacing an earlier backup), BACKED_UP, BACKUP_POST callbacks.
pub(crate) fn process_backup(sim: &Sim) -> Res<()> {
    BACKUP.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_BACKUP_PRE)?;
    let contents = sim.memory.device_contents();
    {
        let mut state = lock(&STATE);
        BACKUP.check(state.phase)?;
        state.backup = Some(contents);
        state.phase = Phase::BackedUp;
    }
    run_stage(sim, ACL_RT_SNAPSHOT_BACKUP_POST)
}

/// aclrtSnapShotProcessRestore: RESTORE_PRE callbacks (a failure restores nothing), the last
/// backup written back, LOCKED, RESTORE_POST callbacks.
pub(crate) fn process_restore(sim: &Sim) -> Res<()> {
    RESTORE.check(lock(&STATE).phase)?;
    run_stage(sim, ACL_RT_SNAPSHOT_RESTORE_PRE)?;
    {
        let mut state = lock(&STATE);
        RESTORE.check(state.phase)?;
        let saved = state.backup.as_deref().unwrap_or_default();
        sim.memory.restore_contents(saved)?;
        state.phase = Phase::Locked;
    }
    run_stage(sim, ACL_RT_SNAPSHOT_RESTORE_POST)
}

/// aclrtSnapShotProcessUnlock: RUNNING, the blocked calls released, UNLOCK_POST callbacks.
pub(crate) fn process_unlock(sim: &Sim) -> Res<()> {
    {
        let mut state = lock(&STATE);
        if state.phase == Phase::Running {
            return wrong_phase(
                ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
                "Unlock",
                state.phase,
                "LOCKED or BACKED_UP",
            );
        }
        release(&mut state);
    }
    run_stage(sim, ACL_RT_SNAPSHOT_UNLOCK_POST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_screen_lets_every_blocked_name_through() {
        for name in BLOCKED.iter().chain(BLOCKED_PREFIXES) {
            assert!(name.starts_with("aclrt"), "{name}");
            assert!(blocks(name), "{name}");
        }
        assert!(blocks("aclrtMemcpy2dAsync") && blocks("aclrtLaunchKernelWithConfig"));
        for name in [
            "aclrtQueryEventStatus",
            "aclrtSynchronizeStream",
            "aclrtGetDevice",
            "aclrtSetOpWaitTimeout",
            "aclrtSnapShotProcessLock",
            "aclInit",
        ] {
            assert!(!blocks(name), "{name}");
        }
    }
}
