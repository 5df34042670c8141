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

/// Devices: 1 is lost while a kernel executes, 0 is the one it leaves unaffected, 2 is lost
/// under synchronous copies.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(3).install().unwrap();
    });
}

static STARTED: AtomicBool = AtomicBool::new(false);
static GO: AtomicBool = AtomicBool::new(false);

#[test]
fn a_loss_waits_for_the_executing_task_and_abandons_the_queue() {
    install();
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

/// A synchronous copy under a timing model holds its caller for the copy's simulated duration;
/// a loss of the device meanwhile ends the wait with 507010 (the simulator slept the whole
/// duration blind: an hour here, so the copies return only if the loss wakes them). Both
/// copies have done their memory work, seen in their destinations, before the loss.
#[test]
fn a_loss_wakes_synchronous_copies_held_for_their_simulated_duration() {
    use std::sync::atomic::AtomicU8;
    const BYTES: usize = 4096;
    install();
    set_device(2);
    let dev = malloc(BYTES);
    acl!(aclrtMemset(dev, BYTES, 0xAB, BYTES));
    let hour_ns = 3_600_000_000_000;
    control::set_timing(
        2,
        Some(npu_sim::TimingModel::default().min_task_ns(hour_ns)),
    )
    .unwrap();
    // Host memory the copies write and the test watches: atomics, as it is read while written.
    let hosts: [&'static [AtomicU8]; 2] =
        [(); 2].map(|()| &*Vec::from_iter((0..BYTES).map(|_| AtomicU8::new(0))).leak());
    let (src, dsts) = (dev as usize, hosts.map(|host| host.as_ptr() as usize));
    type Copy = fn(usize, usize) -> aclError;
    let copies: [(&str, Copy); 2] = [
        ("aclrtMemcpy", |dst, src| {
            code!(aclrtMemcpy(
                dst as *mut c_void,
                BYTES,
                src as *const c_void,
                BYTES,
                ACL_MEMCPY_DEVICE_TO_HOST
            ))
        }),
        ("aclrtMemcpy2d", |dst, src| {
            code!(aclrtMemcpy2d(
                dst as *mut c_void,
                64,
                src as *const c_void,
                64,
                64,
                BYTES / 64,
                ACL_MEMCPY_DEVICE_TO_HOST
            ))
        }),
    ];
    let (done_tx, done) = std::sync::mpsc::channel();
    for ((name, copy), dst) in copies.into_iter().zip(dsts) {
        let done_tx = done_tx.clone();
        thread::spawn(move || {
            set_device(2);
            done_tx.send((name, copy(dst, src))).unwrap();
        });
    }
    for host in hosts {
        while host[BYTES - 1].load(Ordering::SeqCst) != 0xAB {
            // A copy that returned before writing (refused, say) would leave this for ever.
            if let Ok((name, code)) = done.try_recv() {
                panic!("{name} returned {code} before the loss");
            }
            thread::yield_now();
        }
    }
    control::lose_device(2).unwrap();
    for _ in 0..2 {
        // Bounded only so that a copy the loss does not wake fails the test instead of
        // holding it for the hour.
        let (name, code) = done
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a synchronous copy woke on the loss");
        assert_eq!(code, ACL_ERROR_RT_LOST_HEARTBEAT, "{name}");
    }
}
