//! Process snapshots (experimental in CANN, supported on an Atlas A2): lock, backup, restore,
//! unlock and the per-stage callbacks. The state machine and the gate live in
//! `crate::snapshot`; docs/simulator.md lists the calls the lock blocks.

use std::ffi::c_void;

use npu_sys::*;

use crate::error::guard;
use crate::sim::sim;
use crate::snapshot;

/// RUNNING → LOCKED: blocks the listed runtime calls of other threads and waits (2 s at most,
/// then 507905) for those in progress and for queued device work. Wrong state → 507906; a
/// foreign pid or a non-NULL `reserve` → 100000; a LOCK_PRE callback failing → 507912 (still
/// RUNNING).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotProcessLock(pid: i32, reserve: *mut c_void) -> aclError {
    guard("aclrtSnapShotProcessLock", || {
        snapshot::check_call(pid, reserve, "reserve")?;
        snapshot::process_lock(sim()?)
    })
}

/// LOCKED or BACKED_UP → RUNNING, releasing the blocked calls; otherwise 507907. A failing
/// UNLOCK_POST callback → 507912 (the process is unlocked all the same).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotProcessUnlock(pid: i32, reserve: *mut c_void) -> aclError {
    guard("aclrtSnapShotProcessUnlock", || {
        snapshot::check_call(pid, reserve, "reserve")?;
        snapshot::process_unlock(sim()?)
    })
}

/// LOCKED → BACKED_UP: saves every device allocation's contents on the host (replacing an
/// earlier backup). Other states → 507908; non-NULL `args` → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotProcessBackup(
    pid: i32,
    args: *mut aclrtSnapShotBackupArgs,
) -> aclError {
    guard("aclrtSnapShotProcessBackup", || {
        snapshot::check_call(pid, args.cast(), "args")?;
        snapshot::process_backup(sim()?)
    })
}

/// BACKED_UP → LOCKED: writes the last backup back. Other states, or a backed-up allocation
/// freed since → 507909; non-NULL `args` → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotProcessRestore(
    pid: i32,
    args: *mut aclrtSnapShotRestoreArgs,
) -> aclError {
    guard("aclrtSnapShotProcessRestore", || {
        snapshot::check_call(pid, args.cast(), "args")?;
        snapshot::process_restore(sim()?)
    })
}

/// Registers the stage's callback; invalid stage or NULL callback → 100000; a stage that has
/// one → 507913.
///
/// # Safety
/// `callback` must be a function of the declared type; `args` is passed to it unchanged.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotCallbackRegister(
    stage: aclrtSnapShotStage,
    callback: aclrtSnapShotCallBack,
    args: *mut c_void,
) -> aclError {
    guard("aclrtSnapShotCallbackRegister", || {
        snapshot::register(stage, callback, args)
    })
}

/// Removes the stage's callback; invalid stage or NULL callback → 100000; none registered or
/// a different one → 507913.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSnapShotCallbackUnregister(
    stage: aclrtSnapShotStage,
    callback: aclrtSnapShotCallBack,
) -> aclError {
    guard("aclrtSnapShotCallbackUnregister", || {
        snapshot::unregister(stage, callback)
    })
}
