//! What the synchronising frees wait for: aclrtFreeHostWithDevSync synchronises the current
//! device only, so work of another device does not hold it up.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use npu_sim::abi::*;

static GATE: AtomicBool = AtomicBool::new(false);

/// Holds its stream until GATE opens.
unsafe extern "C" fn hold_until_gate(_: *mut c_void) {
    while !GATE.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
}

#[test]
fn free_host_with_dev_sync_synchronises_the_current_device_only() {
    set_device(1);
    let busy = create_stream();
    acl!(aclrtLaunchHostFunc(
        busy,
        Some(hold_until_gate),
        ptr::null_mut()
    ));

    // Device 0 is current on this thread: device 1's held stream is not waited for.
    let freed = std::thread::spawn(|| {
        set_device(0);
        let pinned = malloc_host(4096);
        let other = create_stream();
        acl!(aclrtMemsetAsync(pinned, 4096, 7, 4096, other));
        acl!(aclrtFreeHostWithDevSync(pinned));
        acl!(aclrtDestroyStream(other));
    });
    freed.join().unwrap();

    // Device 1 is current here: its stream is waited for, once it can finish.
    let pinned = malloc_host(4096);
    GATE.store(true, Ordering::Release);
    acl!(aclrtFreeHostWithDevSync(pinned));
    let mut status = 0;
    acl!(aclrtStreamQuery(busy, &mut status));
    assert_eq!(status, npu_sys::ACL_STREAM_STATUS_COMPLETE);
    acl!(aclrtDestroyStream(busy));
}
