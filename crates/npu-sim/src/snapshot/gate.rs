//! The gate that blocks runtime calls while the process is snapshot-locked.
//!
//! A Dekker pair: a blocked-kind call counts itself in [`IN_FLIGHT`] and then reads
//! [`LOCKED`]; Lock sets [`LOCKED`] and then waits for [`IN_FLIGHT`] to fall to the count of
//! its own thread's calls. Both with SeqCst, so either the call sees the lock (and waits) or
//! Lock sees the call (and waits for it). Calls of other kinds pay one byte's comparison.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, MutexGuard};
use std::thread::ThreadId;
use std::time::Instant;

use super::{STATE, State};
use crate::sync::{Raised, lock};

/// Calls blocked while locked, by exact name.
const BLOCKED: &[&str] = &[
    "aclrtSetDevice",
    "aclrtResetDevice",
    "aclrtResetDeviceForce",
    "aclrtCreateContext",
    "aclrtDestroyContext",
    "aclrtCreateNotify",
    "aclrtDestroyNotify",
    "aclrtRecordNotify",
    "aclrtWaitAndResetNotify",
    "aclrtNotifyBatchReset",
    "aclrtCntNotifyCreate",
    "aclrtCntNotifyDestroy",
    "aclrtCntNotifyRecord",
    "aclrtCntNotifyWaitWithTimeout",
    "aclrtCntNotifyReset",
    "aclrtResetEvent",
    "aclrtIpcOpenEventHandle",
    "aclrtIpcMemImportByKey",
    "aclrtIpcMemClose",
    "aclrtHostUnregister",
];

/// Calls blocked while locked, by name prefix (every variant of the family): memory's
/// allocation, import, registration, mapping and freeing, copies and memsets, the creation and
/// destruction of streams and events, and everything that queues device work.
const BLOCKED_PREFIXES: &[&str] = &[
    "aclrtMalloc",
    "aclrtFree",
    "aclrtMemPool",
    "aclrtMemAllocManaged",
    "aclrtMemManagedPrefetch",
    "aclrtMemImportFromShareableHandle",
    "aclrtHostRegister",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMemcpy",
    "aclrtMemset",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtCreateEvent",
    "aclrtDestroyEvent",
    "aclrtRecordEvent",
    "aclrtStreamWaitEvent",
    "aclrtLaunch",
    "aclrtReduce",
    "aclrtRandomNum",
    "aclrtValueWrite",
    "aclrtValueWait",
    "aclrtCmo",
    "aclrtTaskUpdate",
    "aclmdlRIExecute",
];

/// The letters at index 5 of the blocked calls' names: the one after "aclrt", or the "l" of
/// "aclmdl".
const BLOCKED_INITIALS: &[u8] = b"CDFHILMNRSTUVWl";

/// Whether the snapshot lock blocks the call `api`. Every runtime call asks, so one byte rules
/// out most of the calls that are not blocked (queries, gets, synchronizations) before any name
/// is compared.
pub(super) fn blocks(api: &str) -> bool {
    if !api
        .as_bytes()
        .get(5)
        .is_some_and(|initial| BLOCKED_INITIALS.contains(initial))
    {
        return false;
    }
    BLOCKED.contains(&api) || BLOCKED_PREFIXES.iter().any(|p| api.starts_with(p))
}

/// Notified when the lock is released and when a blocked-kind call finishes while locked.
static CHANGED: Condvar = Condvar::new();
/// Whether the process is locked (LOCKED or BACKED_UP, or a Lock is draining).
static LOCKED: AtomicBool = AtomicBool::new(false);
/// Blocked-kind calls in progress.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's blocked-kind calls in progress: a Lock made from a callback that runs
    /// inside one (a device-state callback of aclrtSetDevice) does not wait for its own.
    static MINE: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread runs the callbacks of a snapshot step, whose calls pass.
    static STEPPING: Cell<bool> = const { Cell::new(false) };
}

/// A blocked-kind call admitted past the gate; counted until dropped.
pub(crate) struct Pass(());

impl Pass {
    /// Counts a call whose [`IN_FLIGHT`] increment is already made.
    fn counted() -> Pass {
        MINE.set(MINE.get() + 1);
        Pass(())
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        MINE.set(MINE.get() - 1);
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        if LOCKED.load(Ordering::SeqCst) {
            // Under the mutex, so a Lock between its check and its wait does not miss it.
            let _state = lock(&STATE);
            CHANGED.notify_all();
        }
    }
}

/// Marks the calling thread as running a step's callbacks until dropped.
pub(super) fn stepping() -> Raised {
    Raised::new(&STEPPING)
}

/// Admits the call `api`: waits while the process is locked if the lock blocks it. Never
/// blocked: host tasks (host functions, blocking callbacks, exception callbacks), which Lock
/// drains; the lock's holder and a thread running a step's callbacks, which would wait for
/// themselves; and a call made inside another blocked-kind call of the same thread (a
/// device-state callback of aclrtSetDevice), which a Lock still draining waits for, so that
/// blocking it would keep both waiting until the Lock gave up.
pub(crate) fn admit(api: &str) -> Option<Pass> {
    if !blocks(api) || crate::host_task::is_running() {
        return None;
    }
    loop {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        if !LOCKED.load(Ordering::SeqCst) || STEPPING.get() || MINE.get() > 0 {
            return Some(Pass::counted());
        }
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        let me = std::thread::current().id();
        let mut state = lock(&STATE);
        if state.holder == Some(me) {
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            return Some(Pass::counted());
        }
        // A Lock may be waiting for this call's count to go.
        CHANGED.notify_all();
        while LOCKED.load(Ordering::SeqCst) && state.holder != Some(me) {
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Closes the gate for everyone but `holder`.
pub(super) fn close(state: &mut State, holder: ThreadId) {
    state.holder = Some(holder);
    LOCKED.store(true, Ordering::SeqCst);
}

/// Opens the gate and wakes the calls it held.
pub(super) fn open(state: &mut State) {
    state.holder = None;
    LOCKED.store(false, Ordering::SeqCst);
    CHANGED.notify_all();
}

/// Waits, with the gate closed, until the blocked-kind calls of other threads in progress have
/// returned; gives the state back with `false` if `deadline` passed first.
pub(super) fn wait_for_calls(
    mut state: MutexGuard<'static, State>,
    deadline: Instant,
) -> (MutexGuard<'static, State>, bool) {
    let mine = MINE.get();
    while IN_FLIGHT.load(Ordering::SeqCst) > mine {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (state, false);
        }
        state = CHANGED
            .wait_timeout(state, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    (state, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_screen_lets_every_blocked_name_through() {
        for name in BLOCKED.iter().chain(BLOCKED_PREFIXES) {
            assert!(blocks(name), "{name}");
        }
        for name in [
            "aclrtMemcpy2dAsync",
            "aclrtLaunchKernelWithConfig",
            "aclrtRecordEventWithFlag",
            "aclrtStreamWaitEventWithTimeout",
            "aclrtMemPoolMallocAsync",
            "aclmdlRIExecuteAsync",
        ] {
            assert!(blocks(name), "{name}");
        }
        for name in [
            "aclrtQueryEventStatus",
            "aclrtSynchronizeStream",
            "aclrtGetDevice",
            "aclrtSetOpWaitTimeout",
            "aclrtSnapShotProcessLock",
            "aclmdlRIGetStreams",
            "aclInit",
        ] {
            assert!(!blocks(name), "{name}");
        }
    }
}
