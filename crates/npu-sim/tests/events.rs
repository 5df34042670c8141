//! Event models: legacy vs Ex events, their (inverted) status numbering, reset, and what a
//! never-recorded event reports. Each test has its own device (some use the hold gate).

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::{Mutex, Once};

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| npu_sim::SimConfig::default().devices(7).install().unwrap());
}

fn ex_event(flags: u32) -> aclrtEvent {
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut event, flags));
    event
}

/// (aclrtQueryEventStatus, deprecated aclrtQueryEvent, aclrtQueryEventWaitStatus); the last two
/// are `None` for Ex events, which reject them.
fn statuses(
    event: aclrtEvent,
) -> (
    aclrtEventRecordedStatus,
    Option<aclrtEventStatus>,
    Option<aclrtEventWaitStatus>,
) {
    let (mut recorded, mut legacy, mut wait) = (9, 9, 9);
    acl!(aclrtQueryEventStatus(event, &mut recorded));
    let legacy = (code!(aclrtQueryEvent(event, &mut legacy)) == 0).then_some(legacy);
    let wait = (code!(aclrtQueryEventWaitStatus(event, &mut wait)) == 0).then_some(wait);
    recent_message();
    (recorded, legacy, wait)
}

const NOT_RECORDED: aclrtEventRecordedStatus = ACL_EVENT_RECORDED_STATUS_NOT_READY;
const RECORDED: aclrtEventRecordedStatus = ACL_EVENT_RECORDED_STATUS_COMPLETE;

#[test]
fn legacy_events_through_their_life() {
    install();
    set_device(0);
    let stream = create_stream();
    let event = create_event();
    // Never recorded: NOT_READY (0) in the new numbering, COMPLETE (0) in the deprecated one.
    assert_eq!(
        statuses(event),
        (
            NOT_RECORDED,
            Some(ACL_EVENT_STATUS_COMPLETE),
            Some(ACL_EVENT_WAIT_STATUS_NOT_READY)
        )
    );
    acl!(aclrtSynchronizeEvent(event)); // returns at once
    control::hold(0).unwrap();
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(
        statuses(event),
        (
            NOT_RECORDED,
            Some(ACL_EVENT_STATUS_NOT_READY),
            Some(ACL_EVENT_WAIT_STATUS_NOT_READY)
        )
    );
    control::release(0).unwrap();
    acl!(aclrtSynchronizeEvent(event));
    assert_eq!(
        statuses(event),
        (
            RECORDED,
            Some(ACL_EVENT_STATUS_COMPLETE),
            Some(ACL_EVENT_WAIT_STATUS_COMPLETE)
        )
    );
    // Reset is a stream task; afterwards the event is as never recorded.
    acl!(aclrtResetEvent(event, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(statuses(event).0, NOT_RECORDED);
}

#[test]
fn ex_events_through_their_life() {
    install();
    set_device(1);
    let stream = create_stream();
    let event = ex_event(ACL_EVENT_SYNC);
    // Never recorded: COMPLETE; the deprecated and wait-status queries are not supported.
    assert_eq!(statuses(event), (RECORDED, None, None));
    control::hold(1).unwrap();
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(statuses(event).0, NOT_RECORDED);
    control::release(1).unwrap();
    acl!(aclrtSynchronizeEvent(event));
    assert_eq!(statuses(event).0, RECORDED);
    // Every record overwrites the capture.
    control::hold(1).unwrap();
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(statuses(event).0, NOT_RECORDED);
    control::release(1).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(statuses(event).0, RECORDED);
    // The Ex creation knows SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE and IPC only: the legacy
    // creation's EXTERNAL and DEVICE_USE_ONLY are unknown bits to it.
    for flag in [
        ACL_EVENT_EXTERNAL,
        ACL_EVENT_DEVICE_USE_ONLY,
        ACL_EVENT_SYNC | ACL_EVENT_DEVICE_USE_ONLY,
    ] {
        let mut refused = ptr::null_mut();
        let code = code!(aclrtCreateEventExWithFlag(&mut refused, flag));
        assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "flag {flag:#x}");
        assert!(refused.is_null());
        let message = recent_message();
        assert!(message.contains("unknown bits"), "{message}");
    }
    let progress = ex_event(ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE);
    acl!(aclrtDestroyEvent(progress));
}

#[test]
fn a_wait_uses_the_capture_current_when_it_was_issued() {
    install();
    set_device(2);
    let (first, second, waiter) = (create_stream(), create_stream(), create_stream());
    let event = ex_event(ACL_EVENT_SYNC);
    let dev = malloc(64);
    acl!(aclrtRecordEvent(event, first));
    acl!(aclrtSynchronizeStream(first));
    acl!(aclrtStreamWaitEvent(waiter, event)); // captures the completed record
    control::hold(2).unwrap();
    acl!(aclrtRecordEvent(event, second)); // a new capture, held
    acl!(aclrtMemsetAsync(dev, 64, 7, 64, waiter));
    // The waiter's memset depends only on the first capture, but the whole device is held:
    // release and check everything ran.
    control::release(2).unwrap();
    acl!(aclrtSynchronizeStream(waiter));
    acl!(aclrtSynchronizeStream(second));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 7));
}

#[test]
fn flags_decide_what_an_event_supports() {
    install();
    set_device(3);
    let mut timeline = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(&mut timeline, ACL_EVENT_TIME_LINE));
    assert_eq!(
        code!(aclrtStreamWaitEvent(ptr::null_mut(), timeline)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    assert_eq!(
        code!(aclrtResetEvent(timeline, ptr::null_mut())),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    let mut device_only = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(
        &mut device_only,
        ACL_EVENT_DEVICE_USE_ONLY
    ));
    assert_eq!(
        code!(aclrtRecordEvent(device_only, ptr::null_mut())),
        ACL_ERROR_RT_PARAM_INVALID
    );
    // It combines with the other flags (EXTERNAL alone stands alone) and stays the device's.
    let mut device_sync = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(
        &mut device_sync,
        ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE
    ));
    assert_eq!(
        code!(aclrtRecordEvent(device_sync, ptr::null_mut())),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclrtDestroyEvent(device_sync));
    let ipc = ex_event(ACL_EVENT_IPC);
    acl!(aclrtRecordEvent(ipc, ptr::null_mut()));
    acl!(aclrtSynchronizeEvent(ipc));
    let mut ts = 0;
    assert_eq!(
        code!(aclrtEventGetTimestamp(ipc, &mut ts)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    let mut sync = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(
        &mut sync,
        ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE
    ));
    acl!(aclrtRecordEvent(sync, ptr::null_mut()));
    acl!(aclrtStreamWaitEvent(ptr::null_mut(), sync));
    acl!(aclrtResetEvent(sync, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    // Only ACL_EVENT_TIME_LINE makes a record write its timestamp.
    let mut sync_only = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(&mut sync_only, ACL_EVENT_SYNC));
    let ex_sync_only = ex_event(ACL_EVENT_SYNC);
    let ex_timed = ex_event(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE);
    let mut elapsed = 0.0f32;
    assert_eq!(
        code!(aclrtEventGetTimestamp(sync_only, &mut ts)),
        ACL_ERROR_RT_INTERNAL_ERROR,
        "never recorded"
    );
    for event in [sync_only, ex_sync_only, ex_timed] {
        acl!(aclrtRecordEvent(event, ptr::null_mut()));
    }
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    for untimed in [sync_only, ex_sync_only] {
        assert_eq!(
            code!(aclrtEventGetTimestamp(untimed, &mut ts)),
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
        );
        assert!(recent_message().contains("ACL_EVENT_TIME_LINE"));
        assert_eq!(
            code!(aclrtEventElapsedTime(&mut elapsed, ex_timed, untimed)),
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
        );
        recent_message();
    }
    acl!(aclrtEventGetTimestamp(ex_timed, &mut ts));
    acl!(aclrtEventElapsedTime(&mut elapsed, ex_timed, ex_timed));
    assert_eq!(elapsed, 0.0);
    let stats = control::device_stats(3).unwrap();
    let events = [
        timeline,
        device_only,
        ipc,
        sync,
        sync_only,
        ex_sync_only,
        ex_timed,
    ];
    for event in events {
        acl!(aclrtDestroyEvent(event));
    }
    assert_eq!(
        control::device_stats(3).unwrap().live_events,
        stats.live_events - events.len() as u64
    );
}

unsafe extern "C" fn nothing(_: *mut c_void) {}

/// The reference: aclrtQueryEventWaitStatus tells whether the wait tasks issued on the event
/// (aclrtStreamWaitEvent) have all executed, not only whether its record completed.
#[test]
fn the_wait_status_waits_for_the_wait_tasks() {
    install();
    set_device(4);
    let (recorder, waiter) = (create_stream(), create_stream());
    let event = create_event();
    let wait_status = |event| {
        let mut status = 9;
        acl!(aclrtQueryEventWaitStatus(event, &mut status));
        status
    };
    acl!(aclrtRecordEvent(event, recorder));
    acl!(aclrtSynchronizeStream(recorder));
    assert_eq!(
        wait_status(event),
        ACL_EVENT_WAIT_STATUS_COMPLETE,
        "no wait issued"
    );
    // The wait task queues behind a BLOCK callback nobody has processed yet.
    acl!(aclrtSubscribeReport(this_thread(), waiter));
    acl!(aclrtLaunchCallback(
        Some(nothing),
        ptr::null_mut(),
        ACL_CALLBACK_BLOCK,
        waiter
    ));
    acl!(aclrtStreamWaitEvent(waiter, event));
    assert_eq!(
        wait_status(event),
        ACL_EVENT_WAIT_STATUS_NOT_READY,
        "the record completed, the wait task has not executed"
    );
    acl!(aclrtProcessReport(5_000));
    acl!(aclrtSynchronizeStream(waiter));
    assert_eq!(wait_status(event), ACL_EVENT_WAIT_STATUS_COMPLETE);
    acl!(aclrtUnSubscribeReport(this_thread(), waiter));
}

/// The reference frees an event destroyed before its record completed only when the record
/// completes: until then its hardware event stays taken (it was given back at the destroy).
#[test]
fn a_destroyed_event_keeps_its_hardware_event_until_its_record_is_settled() {
    install();
    set_device(5);
    let available = || {
        let mut count = u32::MAX;
        acl!(aclrtGetEventAvailNum(&mut count));
        count
    };
    let stream = create_stream();
    let before = available();
    control::hold(5).unwrap();
    let completed = create_event();
    acl!(aclrtRecordEvent(completed, stream));
    acl!(aclrtDestroyEvent(completed));
    assert_eq!(available(), before - 1, "its record is held at the gate");
    control::release(5).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(available(), before, "its record completed");
    // A record the stream drops gives it back too.
    control::hold(5).unwrap();
    let dropped = create_event();
    acl!(aclrtRecordEvent(dropped, stream));
    acl!(aclrtDestroyEvent(dropped));
    assert_eq!(available(), before - 1);
    acl!(aclrtStreamAbort(stream));
    assert_eq!(available(), before, "its record was dropped");
    control::release(5).unwrap();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtResetDevice(5));
}

/// Device 6's turn: the two tests on it take turns, since one holds and aborts the device's
/// work, which the other's streams must not see.
static DEVICE_6: Mutex<()> = Mutex::new(());

/// The reference: an event's status is that of the tasks its latest record captured, and an
/// abort (aclrtStreamAbort, aclrtDeviceTaskAbort) discards the tasks not run yet. So a record
/// the abort discarded never reads as complete, even on an event (legacy or Ex) whose previous
/// record had completed, as a reused completion event's has: its status stays NOT_READY, a
/// synchronisation on it fails rather than succeeds, while the stream itself reports complete.
/// npu-rs tells a discarded record from a late one by exactly this (the stream queried first).
#[test]
fn a_record_an_abort_discarded_never_reads_as_its_events_earlier_completion() {
    install();
    let _turn = DEVICE_6.lock().unwrap_or_else(|e| e.into_inner());
    const DEVICE: i32 = 6;
    set_device(DEVICE);
    let stream = create_stream();
    for (kind, event) in [("legacy", create_event()), ("Ex", ex_event(ACL_EVENT_SYNC))] {
        for abort in ["aclrtStreamAbort", "aclrtDeviceTaskAbort"] {
            let what = format!("{kind} event, {abort}");
            acl!(aclrtRecordEvent(event, stream));
            acl!(aclrtSynchronizeStream(stream));
            assert_eq!(statuses(event).0, RECORDED, "{what}: the earlier record");
            control::hold(DEVICE).unwrap();
            acl!(aclrtRecordEvent(event, stream));
            let code = match abort {
                "aclrtStreamAbort" => code!(aclrtStreamAbort(stream)),
                _ => code!(aclrtDeviceTaskAbort(DEVICE, 0)),
            };
            control::release(DEVICE).unwrap();
            assert_eq!(code, 0, "{what}: {}", recent_message());
            let mut stream_status = 9;
            acl!(aclrtStreamQuery(stream, &mut stream_status));
            assert_eq!(stream_status, ACL_STREAM_STATUS_COMPLETE, "{what}");
            assert_eq!(
                statuses(event).0,
                ACL_EVENT_RECORDED_STATUS_NOT_READY,
                "{what}: the discarded record"
            );
            let synced = code!(aclrtSynchronizeEventWithTimeout(event, 1));
            recent_message();
            assert_ne!(
                synced, ACL_SUCCESS,
                "{what}: a sync on the discarded record"
            );
            assert_ne!(
                synced, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
                "{what}: it never completes"
            );
            // The next record completes as usual.
            acl!(aclrtRecordEvent(event, stream));
            acl!(aclrtSynchronizeStream(stream));
            assert_eq!(statuses(event).0, RECORDED, "{what}: the next record");
        }
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtResetDevice(DEVICE));
}

/// How long a synchronisation that must end waits before the test calls it a hang (ms).
const BOUND_MS: i32 = 10_000;

/// A wait issued on `event` before its first record, then a memset of 7 on the waiting
/// stream, while a stream held by a notify memsets 1 and then records the event. `held`: the
/// waiter cannot finish before the notify is recorded (a synchronisation of it times out),
/// else it finishes first. Returns the byte the two memsets leave once both are done.
fn byte_after_a_wait_before_the_first_record(event: aclrtEvent, held: bool) -> u8 {
    let (recorder, waiter, opener) = (create_stream(), create_stream(), create_stream());
    let dev = malloc(64);
    let mut gate = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut gate, 0));
    acl!(aclrtWaitAndResetNotify(gate, recorder, 0));
    acl!(aclrtStreamWaitEvent(waiter, event));
    acl!(aclrtMemsetAsync(dev, 64, 7, 64, waiter));
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, recorder));
    acl!(aclrtRecordEvent(event, recorder));
    let (timeout, expected) = match held {
        // Held until a record that cannot come yet: the timeout decides nothing but how long
        // the test looks.
        true => (200, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT),
        false => (BOUND_MS, ACL_SUCCESS),
    };
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(waiter, timeout)),
        expected,
        "held {held}: {}",
        recent_message()
    );
    acl!(aclrtRecordNotify(gate, opener));
    for stream in [opener, recorder, waiter] {
        acl!(aclrtSynchronizeStreamWithTimeout(stream, BOUND_MS));
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
    let byte = download::<u8>(dev, 64)[0];
    acl!(aclrtFree(dev));
    byte
}

/// The reference: aclrtResetEvent restores a legacy event's initial state, after which a wait
/// cannot go on until the event is recorded again, so a wait issued on a legacy event never
/// recorded (aclrtCreateEvent, aclrtCreateEventWithFlag(SYNC)) holds its stream until the
/// first record completes. An Ex event holds no work before its first record (its status is
/// COMPLETE): a wait on it imposes none. The simulator let every such wait through at once.
#[test]
fn a_wait_before_the_first_record_holds_a_legacy_event_s_stream_only() {
    install();
    let _turn = DEVICE_6.lock().unwrap_or_else(|e| e.into_inner());
    set_device(6);
    let mut with_flag = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(&mut with_flag, ACL_EVENT_SYNC));
    for (name, event) in [
        ("aclrtCreateEvent", create_event()),
        ("WithFlag(SYNC)", with_flag),
    ] {
        assert_eq!(
            byte_after_a_wait_before_the_first_record(event, true),
            7,
            "{name}: the waiter's memset ran before the first record"
        );
        acl!(aclrtDestroyEvent(event));
    }
    let ex = ex_event(ACL_EVENT_SYNC);
    assert_eq!(byte_after_a_wait_before_the_first_record(ex, false), 1);
    acl!(aclrtDestroyEvent(ex));
    // Destroying a never-recorded legacy event ends the waits held on it: nothing can record
    // it any more.
    let waiter = create_stream();
    let never = create_event();
    acl!(aclrtStreamWaitEvent(waiter, never));
    acl!(aclrtDestroyEvent(never));
    acl!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS));
    acl!(aclrtDestroyStream(waiter));
}
