//! Tests of a stream's bell: each wait woken once, and a free waiting for the running task of
//! a stopped stream.

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
    let freer = std::thread::spawn(move || unsafe { aclrtFreeWithDevSync(address as *mut c_void) });
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
