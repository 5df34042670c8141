//! Attacks from many threads at once through the C ABI. CANN's runtime is usable from several
//! threads: contexts are per thread, streams, events and memory are shared. Each test races
//! calls the reference allows on different threads (device lifecycle against stream creation,
//! destruction against queries and waits, frees against queued copies, report threads against
//! callbacks) and checks that every call returns a code, never a crash or a hang, and that the
//! device's counters end consistent. Interleavings come from a fixed-seed generator, so a failure
//! replays; every wait is bounded (`bounded`). Each test has a device of its own; the file is
//! meant to run under valgrind as well.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

/// The device's streams as the reference counts them (1,984 on an Atlas A2).
const MAX_STREAMS: u64 = 1984;

fn available_streams() -> u32 {
    let mut count = u32::MAX;
    acl!(aclrtGetStreamAvailableNum(&mut count));
    count
}

fn live_streams(device: i32) -> u64 {
    control::device_stats(device).unwrap().live_streams
}

/// Promise (docs, aclrtGetStreamAvailableNum; the reference's 1,984 streams per device): the
/// first explicit context of a device binds the device's default stream, and a primary context
/// created later takes that bound stream as its own default stream, so neither aclrtSetDevice
/// nor aclrtResetDevice changes how many streams the device holds. With an explicit context
/// filling the device to its limit, aclrtSetDevice / aclrtResetDevice cycles on one thread and
/// stream creations in the explicit context on three others: every set must succeed and every
/// creation must be refused (207008), the device never holding more than 1,984 streams.
#[test]
fn set_and_reset_device_racing_stream_creation_at_the_stream_limit() {
    install_eight_devices();
    const DEVICE: i32 = 0;
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, DEVICE));
    let mut streams = Vec::new();
    loop {
        let mut stream = ptr::null_mut();
        match code!(aclrtCreateStream(&mut stream)) {
            0 => streams.push(Raw::of(stream)),
            ACL_ERROR_RT_NO_STREAM_RESOURCE => break,
            code => panic!("aclrtCreateStream: {code}: {}", recent_message()),
        }
    }
    recent_message();
    assert_eq!(available_streams(), 0);
    assert_eq!(
        live_streams(DEVICE),
        MAX_STREAMS,
        "the device's bound default stream is one of its streams"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let shared = Raw::of(ctx);
    let racers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, start) = (stop.clone(), start.clone());
            thread::spawn(move || {
                acl!(aclrtSetCurrentContext(shared.ptr()));
                start.wait();
                let mut created = 0u32;
                let mut other = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let mut stream = ptr::null_mut();
                    match code!(aclrtCreateStream(&mut stream)) {
                        0 => {
                            created += 1;
                            acl!(aclrtDestroyStream(stream));
                        }
                        ACL_ERROR_RT_NO_STREAM_RESOURCE => {}
                        code => other.push(code),
                    }
                    recent_message();
                }
                (created, other)
            })
        })
        .collect();
    let cycles = bounded("aclrtSetDevice / aclrtResetDevice cycles", move || {
        start.wait();
        let mut failed = Vec::new();
        for _ in 0..300 {
            match code!(aclrtSetDevice(DEVICE)) {
                0 => acl!(aclrtResetDevice(DEVICE)),
                code => failed.push((code, recent_message())),
            }
        }
        stop.store(true, Ordering::Release);
        failed
    });
    let mut created = 0;
    for racer in racers {
        let (count, other) = bounded("stream creations", move || racer.join().unwrap());
        assert!(other.is_empty(), "unexpected codes: {other:?}");
        created += count;
    }
    assert!(
        cycles.is_empty(),
        "aclrtSetDevice failed {} times on a device whose bound default stream it takes, first: {:?}",
        cycles.len(),
        cycles.first()
    );
    assert_eq!(
        created, 0,
        "streams created beyond the limit while the device's default stream changed hands"
    );
    acl!(aclrtSetCurrentContext(ctx));
    assert_eq!(live_streams(DEVICE), MAX_STREAMS);
    assert_eq!(available_streams(), 0);
    for stream in streams {
        acl!(aclrtDestroyStream(stream.ptr()));
    }
    acl!(aclrtDestroyContext(ctx));
    assert_eq!(live_streams(DEVICE), 0, "every stream given back");
}
