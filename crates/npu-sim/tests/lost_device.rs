//! Losing a device while a kernel executes: the kernel finishes touching memory before anyone
//! sees the loss, queued work never runs, and every later call on the device reports
//! ACL_ERROR_RT_LOST_HEARTBEAT promptly.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

static STARTED: AtomicBool = AtomicBool::new(false);
static GO: AtomicBool = AtomicBool::new(false);

#[test]
fn a_loss_waits_for_the_executing_task_and_abandons_the_queue() {
    npu_sim::kernel::register("slow_store", |_, _, args: *mut c_void| {
        STARTED.store(true, Ordering::SeqCst);
        while !GO.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        // SAFETY: launched with the address of a u32 in device memory as its 8 argument bytes.
        unsafe { *(args.cast::<u64>().read_unaligned() as *mut u32) = 42 };
        0
    })
    .unwrap();
    set_device(1);
    let stream = create_stream();
    let (out, queued) = (malloc(4), malloc(64));
    let slow = function(registry_binary(&["slow_store"]), "slow_store");
    assert_eq!(launch(slow, 1, stream, &(out as u64), ptr::null_mut()), 0);
    acl!(aclrtMemsetAsync(queued, 64, 1, 64, stream));
    let after = create_event();
    acl!(aclrtRecordEvent(after, stream));
    let idle = create_stream();
    while !STARTED.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    let loser = thread::spawn(|| control::lose_device(1).unwrap());
    // The device is marked lost while the kernel is still running.
    while !control::device_stats(1).unwrap().lost {
        std::hint::spin_loop();
    }
    // Until the kernel returns, the loss is not reported, and the calls that do not wait (or
    // wait for a while) do not wait for the kernel either: queries report the work not done,
    // timed synchronisations time out. (Before, they waited for the kernel: a reactor polling
    // a lost device's events stalled every other device's work.)
    let mut status = 0;
    acl!(aclrtQueryEventStatus(after, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    acl!(aclrtStreamQuery(idle, &mut status));
    assert_eq!(status, ACL_STREAM_STATUS_NOT_READY);
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(idle, 10)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    assert_eq!(
        code!(aclrtSynchronizeEventWithTimeout(after, 10)),
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    );
    assert_eq!(
        code!(aclrtSynchronizeDeviceWithTimeout(10)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    recent_message();
    GO.store(true, Ordering::SeqCst);
    loser.join().unwrap();
    // lose_device returned only after the kernel stopped touching memory.
    let mut value = 0u32;
    // SAFETY: the kernel is done with `out`; it is host memory the simulator owns.
    unsafe { ptr::copy_nonoverlapping(out.cast::<u32>(), &mut value, 1) };
    assert_eq!(value, 42);
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtStreamQuery(stream, &mut status)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtQueryEventStatus(after, &mut status)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(idle, 10)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    recent_message();
    // SAFETY: nothing runs on the lost device any more.
    let untouched = unsafe { std::slice::from_raw_parts(queued.cast::<u8>(), 64) };
    assert!(
        untouched.iter().all(|&b| b == 0),
        "queued work was abandoned"
    );
    acl!(aclrtFree(out));
    acl!(aclrtFree(queued));
    // Device 0 is unaffected.
    set_device(0);
    let dev = malloc(64);
    acl!(aclrtMemset(dev, 64, 3, 64));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 3));
}
