//! Process snapshots through the C ABI: the state machine and its error paths, the blocking of
//! runtime calls while locked, the backup/restore round trip, the lock timeout and the stage
//! callbacks. The snapshot state is process-wide, so the tests take one lock in turn.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time: the snapshot state is the process's.
struct Serial {
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Serial {
    /// A test that fails while the process is locked must not leave it locked: every later
    /// test would block in its first runtime call. Runs before the turn passes on.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = unlock();
        }
    }
}

fn serial() -> Serial {
    Serial {
        _turn: SERIAL.lock().unwrap_or_else(|e| e.into_inner()),
    }
}

fn pid() -> i32 {
    std::process::id() as i32
}

/// Asserts a snapshot call (already made) succeeded, showing the simulator's message otherwise.
fn ok(code: aclError) {
    assert_eq!(code, ACL_SUCCESS, "{}", recent_message());
}

fn lock() -> aclError {
    // SAFETY: NULL reserve.
    unsafe { aclrtSnapShotProcessLock(pid(), ptr::null_mut()) }
}

fn unlock() -> aclError {
    // SAFETY: NULL reserve.
    unsafe { aclrtSnapShotProcessUnlock(pid(), ptr::null_mut()) }
}

/// Waits until a Lock another thread makes has taken the process out of RUNNING, and says
/// which state it found, as an Unlock's refusal names it.
fn state_after_running() -> String {
    loop {
        assert_eq!(
            unlock(),
            ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
            "an Unlock of no lock"
        );
        let found = recent_message();
        if !found.contains("Running") {
            return found;
        }
        std::thread::yield_now();
    }
}

fn backup() -> aclError {
    // SAFETY: NULL args.
    unsafe { aclrtSnapShotProcessBackup(pid(), ptr::null_mut()) }
}

fn restore() -> aclError {
    // SAFETY: NULL args.
    unsafe { aclrtSnapShotProcessRestore(pid(), ptr::null_mut()) }
}

#[test]
fn wrong_arguments_and_wrong_states_fail_with_their_codes() {
    let _serial = serial();
    set_device(0);
    let other = pid() + 1;
    let mut word = 0u32;
    let reserve = (&mut word as *mut u32).cast::<c_void>();
    let mut bargs = aclrtSnapShotBackupArgs {
        backupFlags: 0,
        reserved: [0; 60],
    };
    let mut rargs = aclrtSnapShotRestoreArgs {
        restoreFlags: 0,
        reserved: [0; 60],
    };
    // SAFETY: every pointer is valid or NULL.
    unsafe {
        let lock_api = "aclrtSnapShotProcessLock";
        let unlock_api = "aclrtSnapShotProcessUnlock";
        let backup_api = "aclrtSnapShotProcessBackup";
        let restore_api = "aclrtSnapShotProcessRestore";
        fails(
            aclrtSnapShotProcessLock(other, ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            lock_api,
        );
        fails(
            aclrtSnapShotProcessLock(pid(), reserve),
            ACL_ERROR_INVALID_PARAM,
            lock_api,
        );
        fails(
            aclrtSnapShotProcessUnlock(other, ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            unlock_api,
        );
        fails(
            aclrtSnapShotProcessUnlock(pid(), reserve),
            ACL_ERROR_INVALID_PARAM,
            unlock_api,
        );
        fails(
            aclrtSnapShotProcessBackup(other, ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            backup_api,
        );
        fails(
            aclrtSnapShotProcessBackup(pid(), &mut bargs),
            ACL_ERROR_INVALID_PARAM,
            backup_api,
        );
        fails(
            aclrtSnapShotProcessRestore(other, ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            restore_api,
        );
        fails(
            aclrtSnapShotProcessRestore(pid(), &mut rargs),
            ACL_ERROR_INVALID_PARAM,
            restore_api,
        );
        // RUNNING.
        fails(unlock(), ACL_ERROR_SNAPSHOT_UNLOCK_FAILED, unlock_api);
        fails(backup(), ACL_ERROR_SNAPSHOT_BACKUP_FAILED, backup_api);
        fails(restore(), ACL_ERROR_SNAPSHOT_RESTORE_FAILED, restore_api);
        // LOCKED.
        ok(lock());
        fails(lock(), ACL_ERROR_SNAPSHOT_LOCK_FAILED, lock_api);
        fails(restore(), ACL_ERROR_SNAPSHOT_RESTORE_FAILED, restore_api);
        // BACKED_UP.
        ok(backup());
        fails(lock(), ACL_ERROR_SNAPSHOT_LOCK_FAILED, lock_api);
        fails(backup(), ACL_ERROR_SNAPSHOT_BACKUP_FAILED, backup_api);
        // Unlock from BACKED_UP, then from LOCKED.
        ok(unlock());
        ok(lock());
        ok(unlock());
        fails(unlock(), ACL_ERROR_SNAPSHOT_UNLOCK_FAILED, unlock_api);
    }
}

#[test]
fn restore_writes_the_last_backup_back() {
    let _serial = serial();
    set_device(0);
    let dev = malloc(4096);
    upload(dev, &[0x11u8; 4096]);
    ok(lock());
    ok(backup());
    // The lock's holder passes the gate: it may change memory between backup and restore.
    upload(dev, &[0x22u8; 4096]);
    ok(unlock());
    // A second cycle's backup replaces the first.
    ok(lock());
    ok(backup());
    upload(dev, &[0x33u8; 4096]);
    ok(restore());
    ok(unlock());
    assert!(download::<u8>(dev, 4096).iter().all(|&b| b == 0x22));
    // A backed-up allocation freed since the backup: nothing is restored.
    let gone = malloc(64);
    ok(lock());
    ok(backup());
    acl!(aclrtFree(gone));
    upload(dev, &[0x44u8; 4096]);
    fails(
        restore(),
        ACL_ERROR_SNAPSHOT_RESTORE_FAILED,
        "aclrtSnapShotProcessRestore",
    );
    ok(unlock());
    assert!(download::<u8>(dev, 4096).iter().all(|&b| b == 0x44));
    // One freed and another made in its place, at its address: not the allocation that was
    // backed up. Managed memory is placed at the first gap of its window, so the second takes
    // the first one's address once the simulator stops holding that address back from reuse
    // (it holds the ranges of the last 1,024 frees back, so that queued tasks fault).
    let managed = || {
        let mut ptr = ptr::null_mut();
        acl!(aclrtMemAllocManaged(
            &mut ptr,
            2 << 20,
            ACL_RT_MEM_ATTACH_GLOBAL
        ));
        ptr
    };
    let first = managed();
    ok(lock());
    ok(backup());
    acl!(aclrtFree(first));
    for _ in 0..1024 {
        acl!(aclrtFree(malloc(4096)));
    }
    let second = managed();
    assert_eq!(
        first, second,
        "managed memory reuses the first gap of its window"
    );
    fails(
        restore(),
        ACL_ERROR_SNAPSHOT_RESTORE_FAILED,
        "aclrtSnapShotProcessRestore",
    );
    ok(unlock());
    acl!(aclrtFree(second));
    acl!(aclrtFree(dev));
}

#[test]
fn a_call_blocked_while_locked_returns_only_after_the_unlock() {
    let _serial = serial();
    set_device(0);
    let unlocking = std::sync::Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (ready_tx2, go_rx) = mpsc::channel::<()>();
    let (returned_tx, returned_rx) = mpsc::channel::<()>();
    let seen = unlocking.clone();
    let blocked = std::thread::spawn(move || {
        set_device(0);
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        let mut dev = ptr::null_mut();
        // SAFETY: valid out pointer.
        let code = unsafe { aclrtMalloc(&mut dev, 256, ACL_MEM_MALLOC_HUGE_FIRST) };
        let after_unlock = seen.load(Ordering::SeqCst);
        let _ = returned_tx.send(());
        (code, after_unlock, dev as usize)
    });
    ready_rx.recv().unwrap();
    ok(lock());
    ready_tx2.send(()).unwrap();
    // Queries do not block.
    let mut device = -1;
    acl!(aclrtGetDevice(&mut device));
    // Without the gate the allocation returns within microseconds; with it, it cannot return
    // before the unlock below, so this wait only ever ends by its bound.
    let early = returned_rx.recv_timeout(std::time::Duration::from_millis(200));
    unlocking.store(true, Ordering::SeqCst);
    ok(unlock());
    assert!(
        early.is_err(),
        "aclrtMalloc returned while the process was locked"
    );
    let (code, after_unlock, dev) = blocked.join().unwrap();
    assert_eq!(code, ACL_SUCCESS);
    assert!(
        after_unlock,
        "aclrtMalloc returned while the process was locked"
    );
    acl!(aclrtFree(dev as *mut c_void));
}

#[test]
fn lock_times_out_on_work_that_never_finishes_and_leaves_the_process_running() {
    let _serial = serial();
    set_device(0);
    let stream = create_stream();
    let dev = malloc(64);
    // The held device keeps the memset queued.
    acl!(npusimHold(0));
    acl!(aclrtMemsetAsync(dev, 64, 5, 64, stream));
    let refused = lock();
    // Released before any assertion, so that a failure here cannot leave the device held.
    acl!(npusimRelease(0));
    if refused == ACL_SUCCESS {
        ok(unlock());
    }
    assert_eq!(
        refused, ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT,
        "aclrtSnapShotProcessLock"
    );
    // Still RUNNING: unlocking fails and calls pass.
    fails(
        unlock(),
        ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
        "aclrtSnapShotProcessUnlock",
    );
    acl!(aclrtSynchronizeStream(stream));
    ok(lock());
    ok(unlock());
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

static ORDER: Mutex<Vec<(u32, i32)>> = Mutex::new(Vec::new());

/// Records its stage (its `args`) and device, if the runtime calls it makes succeed: a query
/// and, past the gate, an allocation and a free. (A panic here would abort the test binary:
/// the test compares what was recorded instead.)
extern "C" fn record_stage(device: i32, args: *mut c_void) -> u32 {
    let mut current = -1;
    let mut dev = ptr::null_mut();
    // SAFETY: valid out pointers; `dev` is freed only if it was allocated.
    let calls_passed = unsafe {
        aclrtGetDevice(&mut current) == ACL_SUCCESS
            && aclrtMalloc(&mut dev, 64, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS
            && aclrtFree(dev) == ACL_SUCCESS
    };
    if calls_passed {
        ORDER.lock().unwrap().push((args as usize as u32, device));
    }
    0
}

extern "C" fn refuse(_device: i32, _args: *mut c_void) -> u32 {
    7
}

#[test]
fn callbacks_run_at_their_stages_in_order_with_the_device_and_args() {
    let _serial = serial();
    set_device(0);
    ORDER.lock().unwrap().clear();
    let stages = [
        ACL_RT_SNAPSHOT_LOCK_PRE,
        ACL_RT_SNAPSHOT_BACKUP_PRE,
        ACL_RT_SNAPSHOT_BACKUP_POST,
        ACL_RT_SNAPSHOT_RESTORE_PRE,
        ACL_RT_SNAPSHOT_RESTORE_POST,
        ACL_RT_SNAPSHOT_UNLOCK_POST,
    ];
    let reg = "aclrtSnapShotCallbackRegister";
    let unreg = "aclrtSnapShotCallbackUnregister";
    // SAFETY: the callbacks have the declared type; args are plain tags.
    unsafe {
        for stage in stages {
            ok(aclrtSnapShotCallbackRegister(
                stage,
                Some(record_stage),
                stage as usize as *mut c_void,
            ));
        }
        fails(
            aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_LOCK_PRE, Some(refuse), ptr::null_mut()),
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            reg,
        );
        fails(
            aclrtSnapShotCallbackRegister(6, Some(refuse), ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            reg,
        );
        fails(
            aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_LOCK_PRE, None, ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM,
            reg,
        );
        ok(lock());
        ok(backup());
        ok(restore());
        ok(unlock());
        let order = ORDER.lock().unwrap().clone();
        let expected: Vec<(u32, i32)> = stages.iter().map(|&s| (s, 0)).collect();
        assert_eq!(order, expected);
        fails(
            aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_LOCK_PRE, Some(refuse)),
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            unreg,
        );
        fails(
            aclrtSnapShotCallbackUnregister(6, Some(record_stage)),
            ACL_ERROR_INVALID_PARAM,
            unreg,
        );
        fails(
            aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_LOCK_PRE, None),
            ACL_ERROR_INVALID_PARAM,
            unreg,
        );
        for stage in stages {
            ok(aclrtSnapShotCallbackUnregister(stage, Some(record_stage)));
        }
        fails(
            aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_LOCK_PRE, Some(record_stage)),
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            unreg,
        );
        // A failing PRE callback: the operation does not happen.
        ok(aclrtSnapShotCallbackRegister(
            ACL_RT_SNAPSHOT_LOCK_PRE,
            Some(refuse),
            ptr::null_mut(),
        ));
        fails(
            lock(),
            ACL_ERROR_SNAPSHOT_CALLBACK_FAILED,
            "aclrtSnapShotProcessLock",
        );
        fails(
            unlock(),
            ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
            "aclrtSnapShotProcessUnlock",
        );
        ok(aclrtSnapShotCallbackUnregister(
            ACL_RT_SNAPSHOT_LOCK_PRE,
            Some(refuse),
        ));
        // A failing POST callback: the operation has happened.
        ok(aclrtSnapShotCallbackRegister(
            ACL_RT_SNAPSHOT_UNLOCK_POST,
            Some(refuse),
            ptr::null_mut(),
        ));
        ok(lock());
        fails(
            unlock(),
            ACL_ERROR_SNAPSHOT_CALLBACK_FAILED,
            "aclrtSnapShotProcessUnlock",
        );
        ok(aclrtSnapShotCallbackUnregister(
            ACL_RT_SNAPSHOT_UNLOCK_POST,
            Some(refuse),
        ));
        fails(
            unlock(),
            ACL_ERROR_SNAPSHOT_UNLOCK_FAILED,
            "aclrtSnapShotProcessUnlock",
        );
    }
}

static FROM_HOST_TASK: Mutex<Option<aclError>> = Mutex::new(None);

unsafe extern "C" fn lock_from_host_task(_: *mut c_void) {
    *FROM_HOST_TASK.lock().unwrap() = Some(lock());
}

#[test]
fn a_lock_from_a_host_task_fails_and_a_stopped_stream_does_not_hold_the_lock_up() {
    let _serial = serial();
    set_device(0);
    let stream = create_stream();
    // A host function's own stream could never drain under it.
    acl!(aclrtLaunchHostFunc(
        stream,
        Some(lock_from_host_task),
        ptr::null_mut()
    ));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        *FROM_HOST_TASK.lock().unwrap(),
        Some(ACL_ERROR_SNAPSHOT_LOCK_FAILED)
    );
    // Work on a stopped stream never runs: it counts as drained, not as a lock timeout.
    let dev = malloc(64);
    acl!(aclrtStreamStop(stream));
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    ok(lock());
    ok(unlock());
    acl!(aclrtStreamAbort(stream));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn a_lock_still_draining_is_no_lock_yet_for_the_other_steps() {
    let _serial = serial();
    set_device(0);
    let stream = create_stream();
    let dev = malloc(64);
    acl!(npusimHold(0));
    acl!(aclrtMemsetAsync(dev, 64, 5, 64, stream));
    let locker = std::thread::spawn(lock);
    let draining = state_after_running().contains("Locking");
    let other_steps = (backup(), lock());
    acl!(npusimRelease(0));
    let locked = locker.join().unwrap();
    assert!(
        draining,
        "the process left RUNNING only for a state other than LOCKING"
    );
    assert_eq!(
        other_steps,
        (
            ACL_ERROR_SNAPSHOT_BACKUP_FAILED,
            ACL_ERROR_SNAPSHOT_LOCK_FAILED
        ),
        "steps during the drain"
    );
    ok(locked);
    // Unlocking from another thread than the Lock's is allowed.
    ok(unlock());
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn backup_and_restore_wait_for_the_work_the_holder_queued() {
    let _serial = serial();
    set_device(0);
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclrtMemset(dev, 64, 0x11, 64));
    ok(lock());
    // The holder's calls pass the gate; its memset stays queued while the device is held.
    acl!(npusimHold(0));
    acl!(aclrtMemsetAsync(dev, 64, 0x33, 64, stream));
    let refused = backup();
    acl!(npusimRelease(0));
    assert_eq!(
        refused,
        ACL_ERROR_SNAPSHOT_BACKUP_FAILED,
        "{}",
        recent_message()
    );
    // Once it can finish, Backup waits for it: the backup holds its bytes.
    ok(backup());
    acl!(aclrtMemset(dev, 64, 0x44, 64));
    acl!(npusimHold(0));
    acl!(aclrtMemsetAsync(dev, 64, 0x55, 64, stream));
    let refused = restore();
    acl!(npusimRelease(0));
    assert_eq!(
        refused,
        ACL_ERROR_SNAPSHOT_RESTORE_FAILED,
        "{}",
        recent_message()
    );
    // Restore writes the backup over what the queued memset wrote, not under it.
    ok(restore());
    assert_eq!(download::<u8>(dev, 64), vec![0x33; 64]);
    ok(unlock());
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

const GATED: &str = "npu_sim_snapshot_test_gated";

/// Whether the gated kernel has started, and whether it may return.
static GATE: (Mutex<(bool, bool)>, std::sync::Condvar) =
    (Mutex::new((false, false)), std::sync::Condvar::new());

fn set_gate(update: impl FnOnce(&mut (bool, bool))) {
    update(&mut GATE.0.lock().unwrap());
    GATE.1.notify_all();
}

fn wait_gate(until: impl Fn(&(bool, bool)) -> bool) {
    let state = GATE.0.lock().unwrap();
    drop(GATE.1.wait_while(state, |state| !until(state)).unwrap());
}

#[test]
fn a_stopped_stream_holds_the_lock_up_until_its_running_kernel_returns() {
    let _serial = serial();
    set_device(0);
    npu_sim::kernel::register(GATED, |_, _, _| {
        set_gate(|gate| gate.0 = true);
        wait_gate(|gate| gate.1);
        0
    })
    .unwrap();
    let func = function(registry_binary(&[GATED]), GATED);
    let stream = create_stream();
    assert_eq!(launch(func, 1, stream, &0u64, ptr::null_mut()), ACL_SUCCESS);
    wait_gate(|gate| gate.0);
    // The stop returns with the kernel still running; its stream's queue can never run.
    acl!(aclrtStreamStop(stream));
    let locker = std::thread::spawn(lock);
    let state_seen = state_after_running();
    set_gate(|gate| gate.1 = true);
    ok(locker.join().unwrap());
    assert!(
        state_seen.contains("Locking"),
        "the Lock did not wait for the running kernel: {state_seen}"
    );
    ok(unlock());
    acl!(aclrtStreamAbort(stream));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn the_callbacks_of_a_step_called_by_another_thread_than_the_locks_may_call_the_runtime() {
    let _serial = serial();
    set_device(0);
    ORDER.lock().unwrap().clear();
    // SAFETY: a callback of the declared type; args is a plain tag.
    ok(unsafe {
        aclrtSnapShotCallbackRegister(
            ACL_RT_SNAPSHOT_BACKUP_PRE,
            Some(record_stage),
            ACL_RT_SNAPSHOT_BACKUP_PRE as usize as *mut c_void,
        )
    });
    let (done_tx, done_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let stepper = std::thread::spawn(move || {
        // Before the lock: setting a device is a call it blocks.
        set_device(0);
        done_tx.send(None).unwrap();
        go_rx.recv().unwrap();
        done_tx.send(Some(backup())).unwrap();
    });
    assert_eq!(done_rx.recv().unwrap(), None);
    ok(lock());
    go_tx.send(()).unwrap();
    // On a regression the callback's allocation waits for an unlock only this thread makes:
    // the bound turns that into a failure.
    let backed_up = done_rx.recv_timeout(std::time::Duration::from_secs(30));
    ok(unlock());
    stepper.join().unwrap();
    // SAFETY: the callback registered above.
    ok(unsafe { aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, Some(record_stage)) });
    assert_eq!(
        backed_up,
        Ok(Some(ACL_SUCCESS)),
        "the other thread's Backup"
    );
    assert_eq!(
        *ORDER.lock().unwrap(),
        [(ACL_RT_SNAPSHOT_BACKUP_PRE, 0)],
        "its callback's runtime calls passed the gate"
    );
}

/// What the exception callback below frees when a task fails, and what its free returned.
static SCRATCH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static FREED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MIN);

/// An exception callback that frees a scratch buffer: a call the lock blocks.
unsafe extern "C" fn free_on_fault(_info: *mut aclrtExceptionInfo) {
    let scratch = SCRATCH.swap(0, Ordering::SeqCst);
    if scratch != 0 {
        // SAFETY: an allocation the test made for this callback.
        FREED.store(
            unsafe { aclrtFree(scratch as *mut c_void) },
            Ordering::SeqCst,
        );
    }
}

/// The lock's holder queues work that fails and synchronizes its stream. The exception
/// callback runs on the stream's worker before the stream can go on, so if the gate held its
/// aclrtFree until an Unlock, the holder would wait for the worker and the worker for the
/// holder, for ever. (Found by the eighth review.)
#[test]
fn an_exception_callback_passes_the_gate_that_its_streams_holder_waits_behind() {
    let _serial = serial();
    set_device(0);
    acl!(aclrtExceptionInfoCallbackRegister(Some(free_on_fault)));
    SCRATCH.store(malloc(64) as usize, Ordering::SeqCst);
    let (synchronized_tx, synchronized) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        set_device(0);
        let stream = create_stream();
        let dev = malloc(64);
        ok(lock());
        // The holder's own calls pass the gate.
        acl!(npusimFailTask(stream, 1, ACL_ERROR_RT_AICORE_EXCEPTION));
        acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
        synchronized_tx
            .send(code!(aclrtSynchronizeStream(stream)))
            .unwrap();
        (stream as usize, dev as usize)
    });
    // A bound, so that a regression fails here instead of hanging: the Unlock below, from
    // this thread, would release the callback.
    let synchronized = synchronized.recv_timeout(std::time::Duration::from_secs(30));
    let freed_while_locked = FREED.load(Ordering::SeqCst);
    ok(unlock());
    let (stream, dev) = holder.join().unwrap();
    acl!(aclrtExceptionInfoCallbackUnregister(Some(free_on_fault)));
    acl!(aclrtFree(dev as *mut c_void));
    acl!(aclrtDestroyStream(stream as aclrtStream));
    assert_eq!(
        synchronized,
        Ok(ACL_ERROR_RT_AICORE_EXCEPTION),
        "the holder's synchronization returns the task's failure"
    );
    assert_eq!(
        freed_while_locked, ACL_SUCCESS,
        "the callback's aclrtFree passed the gate"
    );
}

/// Tells the device-state callback below that it has been entered, then waits for the word
/// to allocate; what its allocation returned.
static ENTERED: Mutex<Option<mpsc::Sender<()>>> = Mutex::new(None);
static GO: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);
static INNER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MIN);

/// A device-state callback that allocates inside the aclrtSetDevice(1) that sets device 1
/// (SET_PRE), once armed, in the context the thread had before.
unsafe extern "C" fn allocate_on_set(device: i32, state: aclrtDeviceState, _args: *mut c_void) {
    if device != 1 || state != ACL_RT_DEVICE_STATE_SET_PRE {
        return;
    }
    let Some(entered) = ENTERED.lock().unwrap().take() else {
        return;
    };
    entered.send(()).unwrap();
    if let Some(go) = GO.lock().unwrap().take() {
        go.recv().unwrap();
    }
    let mut dev = ptr::null_mut();
    // SAFETY: a valid out pointer; the allocation is freed at once.
    let code = unsafe { aclrtMalloc(&mut dev, 64, ACL_MEM_MALLOC_HUGE_FIRST) };
    INNER.store(code, Ordering::SeqCst);
    if code == ACL_SUCCESS {
        // SAFETY: the allocation just made.
        unsafe { aclrtFree(dev) };
    }
}

/// A Lock that starts while another thread is inside aclrtSetDevice, whose device-state
/// callback then allocates: the Lock waits for the aclrtSetDevice around the allocation, so
/// the allocation passes (held, it would keep both waiting until the Lock timed out).
/// (Found by the eighth review.)
#[test]
fn a_call_inside_a_call_that_a_draining_lock_waits_for_passes_the_gate() {
    let _serial = serial();
    set_device(0);
    let name = c_string("npu-sim-snapshot-test-allocate-on-set");
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        Some(allocate_on_set),
        ptr::null_mut()
    ));
    let (entered_tx, entered) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    *ENTERED.lock().unwrap() = Some(entered_tx);
    *GO.lock().unwrap() = Some(go_rx);
    let setter = std::thread::spawn(|| {
        // A context for the callback's allocation: device 1's is not current before SET_PRE.
        set_device(0);
        // The callbacks are told only of a set that changes the device's state: no other test
        // leaves device 1 set.
        let code = code!(aclrtSetDevice(1));
        // Device 1 in use would change which devices the stage callbacks of other tests see.
        acl!(aclrtResetDevice(1));
        code
    });
    entered.recv().unwrap();
    let locker = std::thread::spawn(lock);
    let draining = state_after_running().contains("Locking");
    go.send(()).unwrap();
    let locked = locker.join().unwrap();
    if locked == ACL_SUCCESS {
        ok(unlock());
    }
    assert_eq!(setter.join().unwrap(), ACL_SUCCESS);
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        None,
        ptr::null_mut()
    ));
    assert!(
        draining,
        "the Lock was draining when the callback allocated"
    );
    assert_eq!(locked, ACL_SUCCESS, "the Lock: {}", recent_message());
    assert_eq!(
        INNER.load(Ordering::SeqCst),
        ACL_SUCCESS,
        "the callback's allocation"
    );
}
