//! Concurrency shown, not assumed: streams overlap in simulated time (and really run in
//! parallel), tasks of one stream never overlap, and events order streams. Every test uses its
//! own device, because the hold gate and the timing model are per device.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Barrier, Once};

use common::*;
use npu_sim::abi::*;
use npu_sim::{TimingModel, control};
use npu_sys::*;

/// A 1 MiB memset at 1 GB/s takes MEMSET_NS of simulated time.
const MIB: usize = 1 << 20;
const BANDWIDTH: u64 = 1_000_000_000;
const MEMSET_NS: u64 = MIB as u64 * 1_000_000_000 / BANDWIDTH;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(6).install().unwrap();
    });
}

/// Binds the thread to `device` with a timing model where a 1 MiB memset takes MEMSET_NS.
fn timed_device(device: i32) {
    install();
    control::set_timing(
        device,
        Some(TimingModel::default().d2d_bandwidth(BANDWIDTH)),
    )
    .unwrap();
    set_device(device);
}

fn timestamp_ns(event: aclrtEvent) -> u64 {
    let mut us = 0;
    acl!(aclrtEventGetTimestamp(event, &mut us));
    us * 1000
}

fn elapsed_ms(start: aclrtEvent, end: aclrtEvent) -> f32 {
    let mut ms = 0.0;
    acl!(aclrtEventElapsedTime(&mut ms, start, end));
    ms
}

/// Queues "record start; memset 1 MiB; record end" on a stream; returns the events.
fn timed_memset(stream: aclrtStream, dev: *mut c_void) -> (aclrtEvent, aclrtEvent) {
    let (start, end) = (create_event(), create_event());
    acl!(aclrtRecordEvent(start, stream));
    acl!(aclrtMemsetAsync(dev, MIB, 1, MIB, stream));
    acl!(aclrtRecordEvent(end, stream));
    (start, end)
}

#[test]
fn two_streams_overlap_in_simulated_time() {
    timed_device(0);
    let (a, b) = (create_stream(), create_stream());
    let (dev_a, dev_b) = (malloc(MIB), malloc(MIB));
    control::hold(0).unwrap();
    let (a_start, a_end) = timed_memset(a, dev_a);
    let (b_start, b_end) = timed_memset(b, dev_b);
    control::release(0).unwrap();
    acl!(aclrtSynchronizeStream(a));
    acl!(aclrtSynchronizeStream(b));
    // Both became ready at the release instant and ran side by side.
    assert_eq!(timestamp_ns(a_start), timestamp_ns(b_start));
    assert_eq!(timestamp_ns(a_end), timestamp_ns(b_end));
    let (start, end) = (timestamp_ns(a_start), timestamp_ns(a_end));
    assert!(end > start, "the memsets took simulated time");
    assert!(
        timestamp_ns(b_start) < end && timestamp_ns(b_end) > start,
        "the intervals overlap"
    );
    assert_eq!(elapsed_ms(a_start, a_end), MEMSET_NS as f32 / 1e6);
    assert_eq!(elapsed_ms(b_start, b_end), MEMSET_NS as f32 / 1e6);
}

#[test]
fn tasks_of_one_stream_never_overlap() {
    timed_device(1);
    let stream = create_stream();
    let dev = malloc(MIB);
    let events: Vec<aclrtEvent> = (0..5).map(|_| create_event()).collect();
    control::hold(1).unwrap();
    acl!(aclrtRecordEvent(events[0], stream));
    for &event in &events[1..] {
        acl!(aclrtMemsetAsync(dev, MIB, 2, MIB, stream));
        acl!(aclrtRecordEvent(event, stream));
    }
    control::release(1).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    for pair in events.windows(2) {
        // Each memset starts where the previous one ended: back to back, never overlapping.
        assert_eq!(elapsed_ms(pair[0], pair[1]), MEMSET_NS as f32 / 1e6);
    }
    assert_eq!(
        elapsed_ms(events[0], events[4]),
        4.0 * MEMSET_NS as f32 / 1e6
    );
}

#[test]
fn a_kernel_takes_its_configured_duration() {
    install();
    control::set_kernel_duration(2, "vector_add_f32", std::time::Duration::from_micros(1500))
        .unwrap();
    set_device(2);
    let add = function(registry_binary(&[]), "vector_add_f32");
    let stream = create_stream();
    let (start, end) = (create_event(), create_event());
    let args = npu_sim::kernel::VectorAddArgs {
        a: 0,
        b: 0,
        c: 0,
        n: 0,
    };
    // Held, so that submission times do not count: the tasks start when released.
    control::hold(2).unwrap();
    acl!(aclrtRecordEvent(start, stream));
    assert_eq!(launch(add, 2, stream, &args, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(end, stream));
    control::release(2).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(elapsed_ms(start, end), 1.5);
}

#[test]
fn a_waiting_stream_starts_after_the_recorded_work() {
    timed_device(3);
    let (producer, consumer) = (create_stream(), create_stream());
    let (src, dst) = (malloc(MIB), malloc(MIB));
    let (ready, consumer_done) = (create_event(), create_event());
    control::hold(3).unwrap();
    acl!(aclrtMemsetAsync(src, MIB, 0x5a, MIB, producer));
    acl!(aclrtRecordEvent(ready, producer));
    acl!(aclrtStreamWaitEvent(consumer, ready));
    acl!(aclrtMemcpyAsync(
        dst,
        MIB,
        src,
        MIB,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        consumer
    ));
    acl!(aclrtRecordEvent(consumer_done, consumer));
    control::release(3).unwrap();
    acl!(aclrtSynchronizeStream(consumer));
    // The copy saw the producer's data, and started only when it was ready.
    assert!(download::<u8>(dst, MIB).iter().all(|&b| b == 0x5a));
    assert_eq!(elapsed_ms(ready, consumer_done), MEMSET_NS as f32 / 1e6);
}

unsafe extern "C" fn meet(barrier: *mut c_void) {
    // SAFETY: the test passes a pointer to a Barrier it keeps alive until both streams finish.
    unsafe { &*barrier.cast::<Barrier>() }.wait();
}

#[test]
fn streams_really_run_in_parallel() {
    install();
    set_device(4);
    // Each stream's host function waits for the other's: they can only both finish if the two
    // streams run at the same time.
    let barrier = Arc::new(Barrier::new(2));
    let data = Arc::as_ptr(&barrier).cast_mut().cast::<c_void>();
    let (a, b) = (create_stream(), create_stream());
    acl!(aclrtLaunchHostFunc(a, Some(meet), data));
    acl!(aclrtLaunchHostFunc(b, Some(meet), data));
    acl!(aclrtSynchronizeStream(a));
    acl!(aclrtSynchronizeStream(b));
}

#[test]
fn without_a_timing_model_event_times_follow_the_host_clock() {
    install();
    set_device(5);
    let stream = create_stream();
    let (start, end) = (create_event(), create_event());
    let before = control::now_ns(5).unwrap();
    acl!(aclrtRecordEvent(start, stream));
    acl!(aclrtMemsetAsync(malloc(MIB), MIB, 0, MIB, stream));
    acl!(aclrtRecordEvent(end, stream));
    acl!(aclrtSynchronizeStream(stream));
    let after = control::now_ns(5).unwrap();
    assert!(before / 1000 <= timestamp_ns(start) / 1000);
    assert!(timestamp_ns(start) <= timestamp_ns(end));
    assert!(timestamp_ns(end) / 1000 <= after / 1000);
}
