//! Model runtime instances through the C ABI: stream capture and replay (aclmdlRICapture*,
//! aclmdlRIExecuteAsync, aclmdlRIExecute, aclmdlRIDestroy and what an instance tells about
//! itself) and explicit builds (aclmdlRIBuildBegin, BindStream, EndTask, BuildEnd, Unbind).
//!
//! Every capture here is RELAXED or THREAD_LOCAL, which restrict nothing on other threads:
//! tests run in parallel and copy synchronously. The capture modes' restrictions are in
//! `tests/capture_modes.rs`, a process of their own.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::cases::{Case, case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

const RELAXED: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
const THREAD_LOCAL: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Devices 7 and 8 are held only by the tests of streams being destroyed.
        npu_sim::SimConfig::default().devices(9).install().unwrap();
        register_test_kernels();
    });
}

fn add_one() -> aclrtFuncHandle {
    function(registry_binary(&["add_one_u32"]), "add_one_u32")
}

fn capture_info(stream: aclrtStream) -> (aclmdlRICaptureStatus, aclmdlRI) {
    let (mut status, mut model) = (0, ptr::null_mut());
    acl!(aclmdlRICaptureGetInfo(stream, &mut status, &mut model));
    (status, model)
}

fn read_u32(dev: *const c_void) -> u32 {
    download::<u32>(dev, 1)[0]
}

/// The shape of CANN's capture samples: a memset, a copy in and a kernel captured once, then
/// replayed several times; every replay redoes all three, on the memory as it is then.
#[test]
fn a_captured_pipeline_replays_on_every_execution() {
    install();
    set_device(0);
    let func = add_one();
    let stream = create_stream();
    let dev = malloc(64);
    let host = malloc_host(64);
    upload(dev, &[7u32]);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    let (status, during) = capture_info(stream);
    assert_eq!(status, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    h2d_async(dev, host, 4, stream);
    let address = dev as u64;
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    assert_eq!(model, during);
    assert_eq!(
        capture_info(stream),
        (ACL_MODEL_RI_CAPTURE_STATUS_NONE, ptr::null_mut())
    );
    // Nothing ran during the capture.
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(read_u32(dev), 7);
    for round in 1..=3u32 {
        // SAFETY: pinned memory of 64 bytes; no task of the stream is pending.
        unsafe { host.cast::<u32>().write(round * 10) };
        acl!(aclmdlRIExecuteAsync(model, stream));
        acl!(aclrtSynchronizeStream(stream));
        assert_eq!(read_u32(dev), round * 10 + 1, "replay {round}");
    }
    // The instance replays on any stream of its context, the capturing one back to normal.
    let other = create_stream();
    acl!(aclmdlRIExecuteAsync(model, other));
    acl!(aclrtSynchronizeStream(other));
    assert_eq!(read_u32(dev), 31);
    acl!(aclmdlRIDestroy(model));
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_INVALID_HANDLE);
    acl!(aclrtDestroyStream(other));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
    acl!(aclrtFreeHost(host));
}

/// A replay is work on the executing stream like any other: events recorded after it complete
/// after it, and its records are records of their events.
#[test]
fn a_replay_is_ordered_like_the_streams_other_work() {
    install();
    set_device(1);
    let func = add_one();
    let (stream, exec) = (create_stream(), create_stream());
    let (inside, after) = (create_event(), create_event());
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(inside, stream));
    assert_eq!(
        code!(aclrtSynchronizeEvent(inside)),
        ACL_ERROR_RT_EVENT_CAPTURED
    );
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    // After the capture, the event counts as never recorded until a replay records it.
    acl!(aclrtSynchronizeEvent(inside));
    control::hold(1).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtRecordEvent(after, exec));
    let mut state = 0;
    acl!(aclrtQueryEventStatus(after, &mut state));
    assert_eq!(state, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    acl!(aclrtQueryEventStatus(inside, &mut state));
    assert_eq!(state, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    // Not over: it cannot be destroyed yet.
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_MODEL_RUNNING);
    control::release(1).unwrap();
    acl!(aclrtSynchronizeEvent(after));
    assert_eq!(read_u32(dev), 2);
    acl!(aclrtQueryEventStatus(inside, &mut state));
    assert_eq!(state, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    // The replayed record is a record of `inside`: another stream can wait on it.
    acl!(aclrtStreamWaitEvent(stream, inside));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclmdlRIDestroy(model));
    for event in [inside, after] {
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// Captured work that fails, or touches memory freed since the capture, fails its replay the
/// way such a task fails anywhere; an abort drops a replay like other queued work.
#[test]
fn replayed_tasks_fail_and_abort_like_other_tasks() {
    install();
    set_device(2);
    let func = add_one();
    let stream = create_stream();
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let scratch = malloc(64);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtMemsetAsync(scratch, 64, 1, 64, stream));
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    // Fault injection counts the replayed tasks as the stream's work.
    control::fail_task(stream, 1, 507899).unwrap();
    acl!(aclmdlRIExecuteAsync(model, stream));
    assert_eq!(code!(aclrtSynchronizeStream(stream)), 507899);
    assert_eq!(
        read_u32(dev),
        1,
        "the kernel after the failed memset still ran"
    );
    // Memory freed before the replay: a DMA fault, nothing touched.
    acl!(aclrtFree(scratch));
    acl!(aclmdlRIExecuteAsync(model, stream));
    assert_eq!(code!(aclrtSynchronizeStream(stream)), ACL_ERROR_RT_SYS_DMA);
    assert_eq!(read_u32(dev), 2);
    // An abort discards a replay not run yet; the instance is then no longer running.
    control::hold(2).unwrap();
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtStreamAbort(stream));
    control::release(2).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(read_u32(dev), 2);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// A stream that waits on an event recorded in a capture joins it; the capture ends once every
/// joined stream has returned (its last task a record the capturing stream waits on).
#[test]
fn streams_join_a_capture_through_events_and_must_return() {
    install();
    set_device(3);
    let func = add_one();
    let (main, side, exec) = (create_stream(), create_stream(), create_stream());
    let (fork, join) = (create_event(), create_event());
    let (a, b) = (malloc(64), malloc(64));
    upload(a, &[0u32]);
    upload(b, &[0u32]);
    let (address_a, address_b) = (a as u64, b as u64);
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    assert_eq!(launch(func, 1, main, &address_a, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(fork, main));
    acl!(aclrtStreamWaitEvent(side, fork));
    let (status, model) = capture_info(side);
    assert_eq!(status, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    assert_eq!(model, capture_info(main).1);
    assert_eq!(launch(func, 1, side, &address_b, ptr::null_mut()), 0);
    assert_eq!(launch(func, 1, side, &address_b, ptr::null_mut()), 0);
    // Only the stream that began the capture ends it.
    let mut out = ptr::null_mut();
    assert_eq!(
        code!(aclmdlRICaptureEnd(side, &mut out)),
        ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED
    );
    acl!(aclrtRecordEvent(join, side));
    acl!(aclrtStreamWaitEvent(main, join));
    let model = capture_end(main);
    assert_eq!(capture_info(side).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    for _ in 0..2 {
        acl!(aclmdlRIExecuteAsync(model, exec));
    }
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!((read_u32(a), read_u32(b)), (2, 4));
    acl!(aclmdlRIDestroy(model));

    // A joined stream that never returns: the capture ends without an instance.
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    acl!(aclrtRecordEvent(fork, main));
    acl!(aclrtStreamWaitEvent(side, fork));
    assert_eq!(launch(func, 1, side, &address_b, ptr::null_mut()), 0);
    let lost = capture_info(main).1;
    assert_eq!(
        code!(aclmdlRICaptureEnd(main, &mut out)),
        ACL_ERROR_RT_STREAM_UNJOINED
    );
    assert_eq!(capture_info(side).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    assert_eq!(code!(aclmdlRIDestroy(lost)), ACL_ERROR_RT_INVALID_HANDLE);
    acl!(aclrtSynchronizeStream(side));
    assert_eq!(
        read_u32(b),
        4,
        "the unjoined stream's captured task never ran"
    );
    for event in [fork, join] {
        acl!(aclrtDestroyEvent(event));
    }
    for stream in [main, side, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
}

/// EXTERNAL records and waits synchronise an instance with work outside it: each execution
/// records the event for outside streams, or waits for the event's record current then.
#[test]
fn external_records_and_waits_cross_the_instances_boundary() {
    install();
    set_device(4);
    let func = add_one();
    let (stream, outside) = (create_stream(), create_stream());
    let (done, ready) = (sync_event(), sync_event());
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtStreamWaitEventWithFlag(
        stream,
        ready,
        0,
        ACL_EVENT_WAIT_EXTERNAL
    ));
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEventWithFlag(
        done,
        stream,
        ACL_EVENT_RECORD_EXTERNAL
    ));
    // An outside stream waiting on `done` does not join the capture.
    acl!(aclrtStreamWaitEvent(outside, done));
    assert_eq!(capture_info(outside).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    let model = capture_end(stream);
    // `ready` is recorded on an outside stream held by the hold gate: the replay waits for it.
    control::hold(4).unwrap();
    acl!(aclrtMemsetAsync(dev, 4, 0, 4, outside));
    acl!(aclrtRecordEvent(ready, outside));
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtStreamWaitEvent(outside, done));
    assert_eq!(launch(func, 1, outside, &address, ptr::null_mut()), 0);
    control::release(4).unwrap();
    acl!(aclrtSynchronizeStream(outside));
    // memset, then the replay's +1 after `ready`, then the outside +1 after `done`.
    assert_eq!(read_u32(dev), 2);
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclmdlRIDestroy(model));
    for event in [done, ready] {
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtDestroyStream(outside));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

const HEAD: u32 = 0;
const ACTIVATED: u32 = 0x7FFF_FFFF;

/// A built instance: the tasks submitted to its bound PERSISTENT streams; each execution runs
/// those of its HEAD streams, synchronously (aclmdlRIExecute) or on a stream.
#[test]
fn a_built_instance_runs_the_tasks_of_its_head_streams() {
    install();
    set_device(5);
    let func = add_one();
    let (head, second, activated) = (
        persistent_stream(),
        persistent_stream(),
        persistent_stream(),
    );
    let exec = create_stream();
    let event = create_event();
    let (a, b) = (malloc(64), malloc(64));
    upload(a, &[0u32]);
    upload(b, &[0u32]);
    let (address_a, address_b) = (a as u64, b as u64);
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    acl!(aclmdlRIBindStream(model, head, HEAD));
    acl!(aclmdlRIBindStream(model, second, HEAD));
    acl!(aclmdlRIBindStream(model, activated, ACTIVATED));
    assert_eq!(launch(func, 1, head, &address_a, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(event, head));
    // The second HEAD stream waits for the first one's record at each execution.
    acl!(aclrtStreamWaitEvent(second, event));
    assert_eq!(launch(func, 1, second, &address_a, ptr::null_mut()), 0);
    assert_eq!(launch(func, 1, activated, &address_b, ptr::null_mut()), 0);
    acl!(aclmdlRIEndTask(model, head));
    assert_eq!(
        launch(func, 1, head, &address_a, ptr::null_mut()),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(
        code!(aclmdlRIExecute(model, -1)),
        ACL_ERROR_RT_MODEL_CAPTURED
    );
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    assert_eq!(
        launch(func, 1, activated, &address_b, ptr::null_mut()),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclmdlRIExecute(model, -1));
    acl!(aclmdlRIExecute(model, 1000));
    assert_eq!((read_u32(a), read_u32(b)), (4, 0));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(a), 6);
    // The synchronous execution waits at most `timeout` ms.
    control::hold(5).unwrap();
    assert_eq!(
        code!(aclmdlRIExecute(model, 10)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    control::release(5).unwrap();
    acl!(aclrtSynchronizeDevice());
    assert_eq!(read_u32(a), 8);
    acl!(aclmdlRIUnbindStream(model, head));
    assert_eq!(
        code!(aclmdlRIUnbindStream(model, head)),
        ACL_ERROR_RT_STREAM_MODEL
    );
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    for stream in [head, second, activated, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
}

/// An execution runs each stream aclrtActiveStream activates where the activation stands
/// among the activating stream's tasks, activations nested in it too; activating a HEAD
/// stream, the stream itself or one that activated it does nothing.
#[test]
fn activated_streams_run_where_they_are_activated() {
    install();
    set_device(5);
    let func = add_one();
    let [head, first, second, third] = [(); 4].map(|()| persistent_stream());
    let [a, b, c, d] = [(); 4].map(|()| malloc(4));
    for dev in [a, b, c, d] {
        upload(dev, &[0u32]);
    }
    let (address_a, address_c) = (a as u64, c as u64);
    let copy = |dst, src, stream| {
        acl!(aclrtMemcpyAsync(
            dst,
            4,
            src,
            4,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            stream
        ))
    };
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    acl!(aclmdlRIBindStream(model, head, HEAD));
    for stream in [first, second, third] {
        acl!(aclmdlRIBindStream(model, stream, ACTIVATED));
    }
    assert_eq!(launch(func, 1, head, &address_a, ptr::null_mut()), 0);
    acl!(aclrtActiveStream(first, head));
    assert_eq!(launch(func, 1, head, &address_a, ptr::null_mut()), 0);
    acl!(aclrtActiveStream(second, head));
    acl!(aclrtActiveStream(head, head));
    copy(b, a, first);
    acl!(aclrtActiveStream(first, first));
    acl!(aclrtActiveStream(third, second));
    assert_eq!(launch(func, 1, second, &address_c, ptr::null_mut()), 0);
    copy(d, a, third);
    acl!(aclrtActiveStream(second, third));
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    assert_eq!(
        describe(&stream_tasks(head))
            .iter()
            .map(|&(kind, _)| kind)
            .collect::<Vec<_>>(),
        [
            ACL_MODEL_RI_TASK_KERNEL,
            ACL_MODEL_RI_TASK_DEFAULT,
            ACL_MODEL_RI_TASK_KERNEL,
            ACL_MODEL_RI_TASK_DEFAULT,
            ACL_MODEL_RI_TASK_DEFAULT,
        ]
    );
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!(
        [a, b, c, d].map(|dev| read_u32(dev)),
        [2, 1, 1, 2],
        "first ran after one launch, third (from second) after both"
    );
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!([a, b, c, d].map(|dev| read_u32(dev)), [4, 3, 2, 4]);
    acl!(aclmdlRIDestroy(model));
    for stream in [head, first, second, third] {
        acl!(aclrtDestroyStream(stream));
    }
    for dev in [a, b, c, d] {
        acl!(aclrtFree(dev));
    }
}

/// aclmdlRIAbort drops the tasks of a built instance's executions queued so far that have
/// not started (the stream's other work runs); the next execution runs in full.
#[test]
fn an_abort_drops_the_executions_not_started() {
    install();
    // The device no other test holds.
    set_device(6);
    let func = add_one();
    let head = persistent_stream();
    let exec = create_stream();
    let (event, recorded) = (create_event(), create_event());
    let a = malloc(4);
    upload(a, &[0u32]);
    let address = a as u64;
    let model = building(head);
    for _ in 0..2 {
        assert_eq!(launch(func, 1, head, &address, ptr::null_mut()), 0);
    }
    acl!(aclrtRecordEvent(recorded, head));
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    control::hold(6).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtRecordEvent(event, exec));
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_MODEL_RUNNING);
    acl!(aclmdlRIAbort(model));
    control::release(6).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    acl!(aclrtSynchronizeEvent(event));
    assert_eq!(read_u32(a), 0, "both executions were dropped");
    assert_eq!(
        code!(aclrtSynchronizeEvent(recorded)),
        ACL_ERROR_RT_STREAM_ABORT,
        "the instance's record was dropped"
    );
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!(read_u32(a), 2, "an execution after the abort runs in full");
    acl!(aclmdlRIDestroy(model));
    for event in [event, recorded] {
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(head));
    acl!(aclrtFree(a));
}

/// (type, sequence id) of each task.
fn describe(tasks: &[aclmdlRITask]) -> Vec<(aclmdlRITaskType, u32)> {
    tasks
        .iter()
        .map(|&task| {
            let (mut kind, mut seq) = (0, 0);
            acl!(aclmdlRITaskGetType(task, &mut kind));
            acl!(aclmdlRITaskGetSeqId(task, &mut seq));
            (kind, seq)
        })
        .collect()
}

/// A captured instance has a model stream of its own per stream it captured, and lists their
/// tasks; a built one lists its bound streams.
#[test]
fn instances_list_their_streams_and_tasks() {
    install();
    set_device(4);
    let func = add_one();
    let (main, side) = (create_stream(), create_stream());
    let (fork, join) = (create_event(), create_event());
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    acl!(aclrtMemsetAsync(dev, 4, 0, 4, main));
    acl!(aclrtRecordEvent(fork, main));
    acl!(aclrtStreamWaitEvent(side, fork));
    assert_eq!(launch(func, 1, side, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(join, side));
    acl!(aclrtStreamWaitEvent(main, join));
    assert_eq!(launch(func, 1, main, &address, ptr::null_mut()), 0);
    let model = capture_end(main);
    let streams = instance_streams(model);
    assert_eq!(streams.len(), 2);
    assert!(!streams.contains(&main) && !streams.contains(&side));
    let main_tasks = stream_tasks(streams[0]);
    assert_eq!(
        describe(&main_tasks),
        [
            (ACL_MODEL_RI_TASK_DEFAULT, 0),
            (ACL_MODEL_RI_TASK_EVENT_RECORD, 1),
            (ACL_MODEL_RI_TASK_EVENT_WAIT, 2),
            (ACL_MODEL_RI_TASK_KERNEL, 3),
        ]
    );
    assert_eq!(
        describe(&stream_tasks(streams[1])),
        [
            (ACL_MODEL_RI_TASK_EVENT_WAIT, 0),
            (ACL_MODEL_RI_TASK_KERNEL, 1),
            (ACL_MODEL_RI_TASK_EVENT_RECORD, 2),
        ]
    );
    // The same task has the same handle. An array shorter than the count is refused with
    // 107039 (ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY), nothing written.
    let mut two = [ptr::null_mut(); 2];
    let mut count = 2;
    fails!(
        aclmdlRIGetTasksByStream(streams[0], two.as_mut_ptr(), &mut count),
        ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY,
        "aclmdlRIGetTasksByStream"
    );
    assert_eq!((count, two), (2, [ptr::null_mut(); 2]));
    let mut one = [ptr::null_mut(); 1];
    let mut count = 1;
    fails!(
        aclmdlRIGetStreams(model, one.as_mut_ptr(), &mut count),
        ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY,
        "aclmdlRIGetStreams"
    );
    let mut four = [ptr::null_mut(); 4];
    let mut count = 4;
    acl!(aclmdlRIGetTasksByStream(
        streams[0],
        four.as_mut_ptr(),
        &mut count
    ));
    assert_eq!((count, four.to_vec()), (4, main_tasks.to_vec()));
    // The model streams take no tasks of their own, and the replay is as captured.
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 4, 0, 4, streams[0])),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclmdlRIExecuteAsync(model, main));
    acl!(aclrtSynchronizeStream(main));
    assert_eq!(read_u32(dev), 2);
    acl!(aclmdlRIDestroy(model));
    let mut kind = 0;
    assert_eq!(
        code!(aclmdlRITaskGetType(main_tasks[0], &mut kind)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclmdlRIGetTasksByStream(
            streams[0],
            ptr::null_mut(),
            &mut count
        )),
        ACL_ERROR_RT_INVALID_HANDLE
    );

    let (head, event) = (persistent_stream(), create_event());
    let mut built = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut built, 0));
    acl!(aclmdlRIBindStream(built, head, HEAD));
    assert_eq!(launch(func, 1, head, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(event, head));
    acl!(aclmdlRIBuildEnd(built, ptr::null_mut()));
    assert_eq!(instance_streams(built), [head]);
    assert_eq!(
        describe(&stream_tasks(head)),
        [
            (ACL_MODEL_RI_TASK_KERNEL, 0),
            (ACL_MODEL_RI_TASK_EVENT_RECORD, 1)
        ]
    );
    acl!(aclmdlRIDestroy(built));
    acl!(aclrtDestroyEvent(event));
    for event in [fork, join] {
        acl!(aclrtDestroyEvent(event));
    }
    for stream in [main, side, head] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(dev));
}

/// aclmdlRIKernelTaskGetAttribute reads back what a captured launch's configuration gave (0 for
/// what it did not give); the attributes the reference says cannot be queried, an unknown one and
/// a task that is no kernel launch are refused, each with its message.
#[test]
fn kernel_tasks_report_their_launch_attributes() {
    install();
    set_device(6);
    let func = add_one();
    let stream = create_stream();
    let dev = malloc(64);
    let address = dev as u64;
    let mut attrs = [
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE,
            value: aclrtLaunchKernelAttrValue { schemMode: 1 },
        },
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP,
            value: aclrtLaunchKernelAttrValue { isDataDump: 1 },
        },
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US,
            value: aclrtLaunchKernelAttrValue {
                timeoutUs: aclrtTimeoutUs {
                    timeoutLow: 5,
                    timeoutHigh: 2,
                },
            },
        },
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING,
            value: aclrtLaunchKernelAttrValue { enableProfiling: 1 },
        },
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
            value: aclrtLaunchKernelAttrValue {
                engineType: ACL_RT_ENGINE_TYPE_AIV,
            },
        },
    ];
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len(),
    };
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtMemsetAsync(dev, 4, 0, 4, stream));
    assert_eq!(launch(func, 1, stream, &address, &mut cfg), 0);
    assert_eq!(launch(func, 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    let tasks = stream_tasks(instance_streams(model)[0]);
    let (memset, configured, plain) = (tasks[0], tasks[1], tasks[2]);
    let get = |task: aclmdlRITask, id: aclrtLaunchKernelAttrId| {
        let mut value = aclrtLaunchKernelAttrValue { rsv: [7; 4] };
        acl!(aclmdlRIKernelTaskGetAttribute(task, id, &mut value));
        // SAFETY: every member of the union is plain data.
        unsafe { value.rsv }
    };
    let byte = |value: u8| [u32::from(value), 0, 0, 0];
    assert_eq!(
        get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE),
        byte(1)
    );
    assert_eq!(
        get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP),
        byte(1)
    );
    assert_eq!(
        get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US),
        [5, 2, 0, 0]
    );
    assert_eq!(get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT), [0; 4]);
    assert_eq!(
        get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING),
        byte(1)
    );
    assert_eq!(
        get(configured, ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE),
        [0; 4]
    );
    for id in [
        ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE,
        ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP,
        ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US,
        ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING,
    ] {
        assert_eq!(
            get(plain, id),
            [0; 4],
            "attribute {id} of a launch without one"
        );
    }
    let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
    let value: *mut aclrtLaunchKernelAttrValue = &mut value;
    // The code, and the message naming the API and the problem.
    let refused = |task: aclmdlRITask, id: aclrtLaunchKernelAttrId, out, code, problem: &str| {
        assert_eq!(code!(aclmdlRIKernelTaskGetAttribute(task, id, out)), code);
        let message = recent_message();
        assert!(
            message.contains("aclmdlRIKernelTaskGetAttribute failed") && message.contains(problem),
            "{message}"
        );
    };
    for id in [
        ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
        ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET,
        ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH,
    ] {
        refused(
            configured,
            id,
            value,
            ACL_ERROR_RT_PARAM_INVALID,
            "cannot be queried",
        );
    }
    let schem = ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE;
    refused(
        configured,
        99,
        value,
        ACL_ERROR_RT_PARAM_INVALID,
        "unknown launch attribute 99",
    );
    refused(
        memset,
        schem,
        value,
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
        "no kernel task",
    );
    refused(
        configured,
        schem,
        ptr::null_mut(),
        ACL_ERROR_INVALID_PARAM,
        "attrValue is NULL",
    );
    refused(
        ptr::null_mut(),
        schem,
        value,
        ACL_ERROR_INVALID_PARAM,
        "task is NULL",
    );
    acl!(aclmdlRIDestroy(model));
    refused(
        configured,
        schem,
        value,
        ACL_ERROR_RT_INVALID_HANDLE,
        "destroyed",
    );
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

/// While one stream of a capture records a task group, a task submitted to another stream of
/// the same capture interrupts the recording: it is refused with 107034, and once the group
/// ends that stream takes tasks again; a capture of its own is not disturbed.
#[test]
fn a_task_on_another_stream_of_the_capture_interrupts_a_group_recording() {
    install();
    set_device(3);
    let func = add_one();
    let (main, side, other, exec) = (
        create_stream(),
        create_stream(),
        create_stream(),
        create_stream(),
    );
    let (fork, join) = (create_event(), create_event());
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    acl!(aclrtRecordEvent(fork, main));
    acl!(aclrtStreamWaitEvent(side, fork));
    acl!(aclmdlRICaptureBegin(other, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(main));
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 4, 0, 4, side)),
        ACL_ERROR_STREAM_TASK_GROUP_INTR
    );
    let message = recent_message();
    assert!(message.contains("recording a task group"), "{message}");
    assert_eq!(
        launch(func, 1, side, &address, ptr::null_mut()),
        ACL_ERROR_STREAM_TASK_GROUP_INTR
    );
    recent_message();
    acl!(aclrtMemsetAsync(dev, 4, 0, 4, other));
    assert_eq!(launch(func, 1, main, &address, ptr::null_mut()), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(main, &mut group));
    assert_eq!(launch(func, 1, side, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(join, side));
    acl!(aclrtStreamWaitEvent(main, join));
    let model = capture_end(main);
    acl!(aclmdlRIDestroy(capture_end(other)));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(dev), 2, "the group's launch and the one after it");
    acl!(aclmdlRIDestroy(model));
    for event in [fork, join] {
        acl!(aclrtDestroyEvent(event));
    }
    for stream in [main, side, other, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(dev));
}

/// A capture ended while one of its streams still records a task group (no
/// aclmdlRICaptureTaskGrpEnd) fails with 107033 and leaves no instance, and the recording ends
/// with it: the stream is captured again and records a group as if the first never began.
#[test]
fn a_capture_ended_with_a_group_open_fails_and_frees_the_stream() {
    install();
    set_device(3);
    let (stream, exec) = (create_stream(), create_stream());
    let dev = malloc(64);
    upload(dev, &[0u32]);
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    let (_, first) = capture_info(stream);
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let mut model = ptr::null_mut();
    assert_eq!(
        code!(aclmdlRICaptureEnd(stream, &mut model)),
        ACL_ERROR_STREAM_TASK_GROUP_STATUS
    );
    let message = recent_message();
    assert!(message.contains("aclmdlRICaptureTaskGrpEnd"), "{message}");
    assert!(model.is_null());
    assert_eq!(capture_info(stream).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    assert_eq!(code!(aclmdlRIDestroy(first)), ACL_ERROR_RT_INVALID_HANDLE);
    recent_message();

    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    let model = capture_end(stream);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(dev), 1, "the second capture's one launch, once");
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(dev));
}

/// Attacks the instance's count of the groups being recorded: a capture ended with a group
/// open clears the stream's recording, and must uncount it too. A branch instance
/// (aclmdlRICaptureToModelRIBegin) survives such a failed capture, cleared, and is captured
/// again: a stale count made every plain task of the new capture fail with 107034 and its end
/// with 107033.
#[test]
fn a_branch_captured_again_after_a_group_left_open_still_counts_the_group() {
    install();
    set_device(1);
    let (parent, model, _handle, branches) =
        common::flow::capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
    let branch = branches[0];
    let dev = malloc(64);
    let address = dev as u64;

    let stream = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(stream, branch, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let mut out = ptr::null_mut();
    assert_eq!(
        code!(aclmdlRICaptureEnd(stream, &mut out)),
        ACL_ERROR_STREAM_TASK_GROUP_STATUS
    );
    recent_message();

    // The branch, cleared, is captured again with one plain memset: no group anywhere.
    acl!(aclmdlRICaptureToModelRIBegin(stream, branch, RELAXED));
    let code = code!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    let message = recent_message();
    let mut out = ptr::null_mut();
    let end = code!(aclmdlRICaptureEnd(stream, &mut out));
    let end_message = recent_message();
    assert_eq!(
        (code, end),
        (0, 0),
        "memset: {message} / end: {end_message}"
    );
    assert_eq!(capture_end(parent), model);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, parent] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(dev));
}

/// What a stream-state callback watches for: the destruction of one stream beginning.
struct DestroyWatch {
    stream: usize,
    begun: AtomicBool,
}

unsafe extern "C" fn on_destroy_pre(
    stream: aclrtStream,
    state: aclrtStreamState,
    args: *mut c_void,
) {
    // SAFETY: registered with a pointer to a leaked `DestroyWatch`, which lives for ever (a
    // callback may still run just after its registration is removed).
    let watch = unsafe { &*args.cast::<DestroyWatch>() };
    if stream as usize == watch.stream && state == ACL_RT_STREAM_STATE_DESTROY_PRE {
        watch.begun.store(true, Ordering::Release);
    }
}

/// Destroys `stream` (of `device`, current) on another thread while the device is held, a
/// memset of `dev` queued on the stream so that the destruction waits for it; returns once
/// the destruction has begun. Its stream-state callback (DESTROY_PRE) follows the mark that
/// makes the stream refuse new work, so from then on the outcome is decided; the short wait
/// after it only lets the destruction leave the stream's capture and abandon its update, as
/// the defects this serves reproduced. The handle resolves until [`finish_destroying`].
fn begin_destroying(device: i32, stream: aclrtStream, dev: *mut c_void) -> JoinHandle<aclError> {
    let watch: &'static DestroyWatch = Box::leak(Box::new(DestroyWatch {
        stream: stream as usize,
        begun: AtomicBool::new(false),
    }));
    let args = (watch as *const DestroyWatch).cast_mut().cast();
    let name = c_string(&format!("capture-destroying-{}", stream as usize));
    acl!(aclrtRegStreamStateCallback(
        name.as_ptr(),
        Some(on_destroy_pre),
        args
    ));
    control::hold(device).unwrap();
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    let raw = Raw::of(stream);
    let destroyer = std::thread::spawn(move || {
        set_device(device);
        // SAFETY: a live stream handle.
        unsafe { aclrtDestroyStream(raw.ptr()) }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !watch.begun.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the destruction never began");
        std::thread::yield_now();
    }
    acl!(aclrtRegStreamStateCallback(name.as_ptr(), None, args));
    // Not a synchronisation: the refusals the callers test are decided by the mark the
    // callback came after. The pause only gives the destruction time to reach the steps
    // (leaving the capture, abandoning an update) that a missing refusal would race with, so
    // that such a regression shows.
    std::thread::sleep(Duration::from_millis(50));
    destroyer
}

/// Lets the destruction begun by [`begin_destroying`] finish.
fn finish_destroying(device: i32, destroyer: JoinHandle<aclError>) {
    control::release(device).unwrap();
    assert_eq!(destroyer.join().unwrap(), 0);
}

/// Attacks aclmdlRICaptureTaskUpdateBegin on a stream whose destruction has begun (it waits
/// for the stream's work): the destruction abandoned the stream's update already, so an
/// update begun then would never be, and the group would stay "being updated" for good. It
/// is refused with 107017, as a submission to the stream is, and the group is free.
#[test]
fn an_update_begun_on_a_stream_being_destroyed_keeps_the_group_busy_for_ever() {
    install();
    const DEVICE: i32 = 7;
    set_device(DEVICE);
    let dev = malloc(64);
    let address = dev as u64;
    let capturing = create_stream();
    acl!(aclmdlRICaptureBegin(capturing, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(capturing));
    assert_eq!(
        launch(add_one(), 1, capturing, &address, ptr::null_mut()),
        0
    );
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(capturing, &mut group));
    let model = capture_end(capturing);

    let doomed = create_stream();
    let destroyer = begin_destroying(DEVICE, doomed, dev);
    let begun = code!(aclmdlRICaptureTaskUpdateBegin(doomed, group));
    let begun_message = recent_message();
    finish_destroying(DEVICE, destroyer);

    let other = create_stream();
    let again = code!(aclmdlRICaptureTaskUpdateBegin(other, group));
    let again_message = recent_message();
    assert_eq!(
        (begun, again),
        (ACL_ERROR_RT_INVALID_HANDLE, 0),
        "update begin on the dying stream: {begun_message}; a later update from a live \
         stream: {again_message}"
    );
    // Destroying the updating stream abandons its update.
    for stream in [other, capturing] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtFree(dev));
}

/// Attacks aclmdlRICaptureBegin on a stream whose destruction has begun and already left its
/// capture: a capture begun then would never end, and stay active for good. It is refused with
/// 107017, as a submission to the stream is. THREAD_LOCAL, whose restriction shows the capture
/// still active, confines it to this test's thread had it been accepted (a GLOBAL one would
/// refuse the other tests' synchronous copies).
#[test]
fn a_capture_begun_on_a_stream_being_destroyed_stays_active_for_ever() {
    install();
    const DEVICE: i32 = 8;
    set_device(DEVICE);
    let dev = malloc(64);
    let doomed = create_stream();
    let destroyer = begin_destroying(DEVICE, doomed, dev);
    let begun = code!(aclmdlRICaptureBegin(doomed, THREAD_LOCAL));
    let begun_message = recent_message();
    finish_destroying(DEVICE, destroyer);
    let mut host = [0u8; 64];
    let copied = code!(aclrtMemcpy(
        host.as_mut_ptr().cast(),
        64,
        dev,
        64,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    let copied_message = recent_message();
    assert_eq!(
        (begun, copied),
        (ACL_ERROR_RT_INVALID_HANDLE, 0),
        "capture begin on the dying stream: {begun_message}; a later synchronous copy on the \
         thread: {copied_message}"
    );
    acl!(aclrtFree(dev));
}

/// What a stream-state callback does once the destruction of `stream` has begun: binds it to
/// `model` (being built) and keeps the result.
struct BindOnDestroy {
    stream: usize,
    model: usize,
    code: AtomicI32,
}

unsafe extern "C" fn bind_on_destroy_pre(
    stream: aclrtStream,
    state: aclrtStreamState,
    args: *mut c_void,
) {
    // SAFETY: registered with a pointer to a leaked `BindOnDestroy`, which lives for ever (a
    // callback may still run just after its registration is removed).
    let bind = unsafe { &*args.cast::<BindOnDestroy>() };
    if stream as usize == bind.stream && state == ACL_RT_STREAM_STATE_DESTROY_PRE {
        // SAFETY: the instance is alive (the test destroys it after the stream) and the
        // stream's handle resolves until its destruction ends.
        let code = unsafe { aclmdlRIBindStream(bind.model as aclmdlRI, stream, HEAD) };
        bind.code.store(code, Ordering::Release);
    }
}

/// Attacks aclmdlRIBindStream on a PERSISTENT stream whose destruction has begun (from the
/// stream's DESTROY_PRE callback, which follows the mark): the destruction unbinds the stream
/// from its instance only if it finds it bound, so a bind accepted then, or racing that
/// step, left an instance listing a destroyed stream. It is refused with 107017, as a
/// submission to the stream is, and the instance builds and executes without it.
#[test]
fn a_stream_bound_once_its_destruction_has_begun_is_refused() {
    install();
    set_device(6);
    let doomed = persistent_stream();
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    let bind: &'static BindOnDestroy = Box::leak(Box::new(BindOnDestroy {
        stream: doomed as usize,
        model: model as usize,
        code: AtomicI32::new(i32::MIN),
    }));
    let args = (bind as *const BindOnDestroy).cast_mut().cast();
    let name = c_string("capture-bind-on-destroy");
    acl!(aclrtRegStreamStateCallback(
        name.as_ptr(),
        Some(bind_on_destroy_pre),
        args
    ));
    acl!(aclrtDestroyStream(doomed));
    acl!(aclrtRegStreamStateCallback(name.as_ptr(), None, args));
    let bound = bind.code.load(Ordering::Acquire);
    let bound_message = recent_message();
    assert_eq!(
        bound, ACL_ERROR_RT_INVALID_HANDLE,
        "bind of the stream being destroyed: {bound_message}"
    );
    // The instance has no stream of its own: it builds and runs nothing.
    let exec = create_stream();
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    acl!(aclrtDestroyStream(exec));
    acl!(aclmdlRIDestroy(model));
}

/// A stream destroyed while it collects a task group's update abandons the update: the group
/// is updated from another stream afterwards, and its executions run that update.
#[test]
fn a_stream_destroyed_during_an_update_frees_the_group() {
    install();
    set_device(3);
    let (stream, exec) = (create_stream(), create_stream());
    let (first, second) = (malloc(64), malloc(64));
    upload(first, &[0u32]);
    upload(second, &[0u32]);
    let (first_address, second_address) = (first as u64, second as u64);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(
        launch(add_one(), 1, stream, &first_address, ptr::null_mut()),
        0
    );
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    let model = capture_end(stream);

    let abandoned = create_stream();
    acl!(aclmdlRICaptureTaskUpdateBegin(abandoned, group));
    acl!(aclrtDestroyStream(abandoned));
    acl!(aclmdlRICaptureTaskUpdateBegin(stream, group));
    assert_eq!(
        launch(add_one(), 1, stream, &second_address, ptr::null_mut()),
        0
    );
    acl!(aclmdlRICaptureTaskUpdateEnd(stream));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!((read_u32(first), read_u32(second)), (0, 1));
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    for dev in [first, second] {
        acl!(aclrtFree(dev));
    }
}

/// A task group's launches, updated after the capture by launches submitted between
/// aclmdlRICaptureTaskUpdateBegin and End (which do not run), run as updated from then on.
#[test]
fn task_groups_update_captured_launches() {
    install();
    set_device(3);
    let func = add_one();
    let (stream, updater) = (create_stream(), create_stream());
    let (a, b, c) = (malloc(64), malloc(64), malloc(64));
    for dev in [a, b, c] {
        upload(dev, &[0u32]);
    }
    let (address_a, address_b, address_c) = (a as u64, b as u64, c as u64);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(func, 1, stream, &address_a, ptr::null_mut()), 0);
    assert_eq!(
        code!(aclrtMemsetAsync(a, 4, 0, 4, stream)),
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT
    );
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    assert_eq!(launch(func, 1, stream, &address_b, ptr::null_mut()), 0);
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateBegin(updater, group)),
        ACL_ERROR_RT_MODEL_CAPTURED
    );
    let model = capture_end(stream);
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b), read_u32(c)), (1, 1, 0));

    acl!(aclmdlRICaptureTaskUpdateBegin(updater, group));
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateBegin(create_stream(), group)),
        ACL_ERROR_STREAM_TASK_GROUP_STATUS
    );
    assert_eq!(launch(func, 1, updater, &address_c, ptr::null_mut()), 0);
    acl!(aclmdlRICaptureTaskUpdateEnd(updater));
    acl!(aclrtSynchronizeStream(updater));
    assert_eq!(read_u32(c), 0, "the update's launch does not run");
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b), read_u32(c)), (1, 2, 1));

    // An update with another number of tasks changes nothing.
    acl!(aclmdlRICaptureTaskUpdateBegin(updater, group));
    assert_eq!(launch(func, 1, updater, &address_a, ptr::null_mut()), 0);
    assert_eq!(launch(func, 1, updater, &address_a, ptr::null_mut()), 0);
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateEnd(updater)),
        ACL_ERROR_STREAM_TASK_GROUP_STATUS
    );
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b), read_u32(c)), (1, 3, 2));
    // The updater runs its tasks again.
    assert_eq!(launch(func, 1, updater, &address_a, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(updater));
    assert_eq!(read_u32(a), 2);
    acl!(aclmdlRIDestroy(model));
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateBegin(updater, group)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    for stream in [stream, updater] {
        acl!(aclrtDestroyStream(stream));
    }
    for dev in [a, b, c] {
        acl!(aclrtFree(dev));
    }
}

/// aclmdlRITaskDisable marks a task; from the next aclmdlRIUpdate on, executions skip it.
#[test]
fn disabled_tasks_are_skipped_after_an_update() {
    install();
    set_device(0);
    let func = add_one();
    let stream = create_stream();
    let (a, b) = (malloc(64), malloc(64));
    upload(a, &[0u32]);
    upload(b, &[0u32]);
    let (address_a, address_b) = (a as u64, b as u64);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    assert_eq!(launch(func, 1, stream, &address_a, ptr::null_mut()), 0);
    assert_eq!(launch(func, 1, stream, &address_b, ptr::null_mut()), 0);
    let model = capture_end(stream);
    let tasks = stream_tasks(instance_streams(model)[0]);
    acl!(aclmdlRITaskDisable(tasks[1]));
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b)), (1, 1), "not before the update");
    control::hold(0).unwrap();
    acl!(aclmdlRIExecuteAsync(model, stream));
    assert_eq!(
        code!(aclmdlRIUpdate(model)),
        ACL_ERROR_RT_MODEL_UPDATE_FAILED
    );
    control::release(0).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b)), (2, 2));
    acl!(aclmdlRIUpdate(model));
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!((read_u32(a), read_u32(b)), (3, 2));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
}

/// aclmdlRIDestroy of an instance whose build never ended: the build is abandoned, the
/// destroy callbacks run, and the bound stream is free for another instance (it was refused
/// with 107026 until aclmdlRIBuildEnd, which a program whose build failed half way may not
/// want to call).
#[test]
fn an_instance_still_being_built_may_be_destroyed() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn count(_: *mut c_void) {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }
    install();
    set_device(0);
    let stream = persistent_stream();
    let dev = malloc(64);
    let model = building(stream);
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    acl!(aclmdlRIDestroyRegisterCallback(
        model,
        Some(count),
        ptr::null_mut()
    ));
    acl!(aclmdlRIDestroy(model));
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(
        code!(aclmdlRIBuildEnd(model, ptr::null_mut())),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_INVALID_HANDLE);
    // Its stream is bound to nothing now.
    let other = building(stream);
    acl!(aclmdlRIBuildEnd(other, ptr::null_mut()));
    acl!(aclmdlRIDestroy(other));
    // A capture still going on is refused, as the error table says.
    let captured = create_stream();
    acl!(aclmdlRICaptureBegin(captured, RELAXED));
    let (_, instance) = capture_info(captured);
    assert_eq!(
        code!(aclmdlRIDestroy(instance)),
        ACL_ERROR_RT_MODEL_CAPTURED
    );
    acl!(aclmdlRIDestroy(capture_end(captured)));
    acl!(aclrtDestroyStream(captured));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// An instance being built (device 0), with `stream` bound as its HEAD stream if not NULL.
fn building(stream: aclrtStream) -> aclmdlRI {
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    if !stream.is_null() {
        acl!(aclmdlRIBindStream(model, stream, HEAD));
    }
    model
}

/// An operation refused because of a capture invalidates it: later submissions and the end
/// fail with 507903, and the end leaves no instance.
#[test]
fn a_refused_operation_invalidates_the_capture() {
    install();
    set_device(0);
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_STREAM_CAPTURED
    );
    let (status, model) = capture_info(stream);
    assert_eq!(status, ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 64, 0, 64, stream)),
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    );
    let mut out = ptr::null_mut();
    assert_eq!(
        code!(aclmdlRICaptureEnd(stream, &mut out)),
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    );
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_INVALID_HANDLE);
    // The stream runs its tasks again.
    acl!(aclrtMemsetAsync(dev, 64, 5, 64, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 1)[0], 5);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

static DESTROYED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_destroy(data: *mut c_void) {
    DESTROYED.fetch_add(data as usize, Ordering::SeqCst);
}

unsafe extern "C" fn never_called(_: *mut c_void) {
    panic!("an unregistered destroy callback ran");
}

#[test]
fn names_ids_prints_and_destroy_callbacks() {
    install();
    set_device(1);
    let stream = create_stream();
    let dev = malloc(64);
    let func = add_one();
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, THREAD_LOCAL));
    let during = capture_info(stream).1;
    assert_eq!(
        code!(aclmdlRIDebugPrint(during)),
        ACL_ERROR_RT_MODEL_CAPTURED
    );
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    assert_eq!(launch(func, 2, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    let second = {
        acl!(aclmdlRICaptureBegin(stream, RELAXED));
        capture_end(stream)
    };
    let (mut id, mut other_id) = (0, 0);
    acl!(aclmdlRIGetId(model, &mut id));
    acl!(aclmdlRIGetId(second, &mut other_id));
    assert_ne!(id, other_id);

    let mut name = [0 as std::ffi::c_char; 16];
    acl!(aclmdlRIGetName(model, 16, name.as_mut_ptr()));
    assert_eq!(name[0], 0, "never named: the empty string");
    acl!(aclmdlRISetName(model, c_string("first").as_ptr()));
    acl!(aclmdlRISetName(model, c_string("pipeline").as_ptr()));
    acl!(aclmdlRIGetName(model, 16, name.as_mut_ptr()));
    // SAFETY: NUL-terminated by aclmdlRIGetName.
    let text = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    assert_eq!(text.to_str().unwrap(), "pipeline");
    assert_eq!(
        code!(aclmdlRIGetName(model, 8, name.as_mut_ptr())),
        ACL_ERROR_RT_PARAM_INVALID
    );
    let long = "x".repeat(600);
    acl!(aclmdlRISetName(second, c_string(&long).as_ptr()));
    let mut big = vec![0 as std::ffi::c_char; 1024];
    acl!(aclmdlRIGetName(second, 1024, big.as_mut_ptr()));
    // SAFETY: NUL-terminated by aclmdlRIGetName.
    let kept = unsafe { std::ffi::CStr::from_ptr(big.as_ptr()) };
    assert_eq!(kept.to_bytes().len(), 511);

    acl!(aclmdlRIDebugPrint(model));
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("model_ri.json");
    let c_path = c_string(path.to_str().unwrap());
    acl!(aclmdlRIDebugJsonPrint(
        model,
        c_path.as_ptr(),
        ACL_MDLRI_DEBUG_JSON_PRINT_VERBOSE
    ));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let slices: Vec<_> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["ph"] == "X")
        .collect();
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[0]["name"], "memset");
    assert_eq!(slices[1]["name"], "add_one_u32");
    assert_eq!(slices[1]["args"]["kernel_args"], hex_le(address));
    assert_eq!(json["otherData"]["name"], "pipeline");
    assert_eq!(json["otherData"]["model_id"], id);
    acl!(aclmdlRIDebugJsonPrint(
        model,
        c_path.as_ptr(),
        ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY
    ));
    let summary = std::fs::read_to_string(&path).unwrap();
    assert!(!summary.contains("kernel_args"));
    // A Linux path is bytes: one that is not UTF-8 is written to as any other.
    let odd = {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let mut bytes = dir.as_os_str().as_bytes().to_vec();
        bytes.extend_from_slice(b"/model_ri_\xff.json");
        std::ffi::CString::new(bytes).unwrap()
    };
    acl!(aclmdlRIDebugJsonPrint(
        model,
        odd.as_ptr(),
        ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY
    ));
    let written = {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(odd.as_bytes()).to_owned()
    };
    assert_eq!(std::fs::read_to_string(&written).unwrap(), summary);

    acl!(aclmdlRIDestroyRegisterCallback(
        model,
        Some(count_destroy),
        3 as *mut c_void
    ));
    // Registering again replaces the user data.
    acl!(aclmdlRIDestroyRegisterCallback(
        model,
        Some(count_destroy),
        10 as *mut c_void
    ));
    acl!(aclmdlRIDestroyRegisterCallback(
        model,
        Some(never_called),
        ptr::null_mut()
    ));
    acl!(aclmdlRIDestroyUnregisterCallback(model, Some(never_called)));
    acl!(aclmdlRIDestroyUnregisterCallback(model, Some(never_called)));
    let before = DESTROYED.load(Ordering::SeqCst);
    acl!(aclmdlRIDestroy(model));
    assert_eq!(DESTROYED.load(Ordering::SeqCst) - before, 10);
    acl!(aclmdlRIDestroy(second));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

fn hex_le(value: u64) -> String {
    value
        .to_le_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A capturing stream of device 0's primary context (a leftover RELAXED capture restricts
/// nothing).
fn capturing() -> aclrtStream {
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    stream
}

/// An instance captured (empty) on device 0, from a thread of its own.
fn empty_model() -> aclmdlRI {
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    capture_end(stream)
}

/// An aclrtCreateEventExWithFlag(ACL_EVENT_SYNC) event, the kind EXTERNAL records and waits
/// take.
fn sync_event() -> aclrtEvent {
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut event, ACL_EVENT_SYNC));
    event
}

/// The one task of an instance captured from a memset (device 0).
fn one_task() -> aclmdlRITask {
    let (stream, dev) = (create_stream(), malloc(64));
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    stream_tasks(instance_streams(capture_end(stream))[0])[0]
}

/// A task group of one launch, of an instance captured on device 0.
fn one_group() -> aclrtTaskGrp {
    let (stream, dev) = (create_stream(), malloc(64));
    let address = dev as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    capture_end(stream);
    group
}

fn stale_model() -> aclmdlRI {
    let model = empty_model();
    acl!(aclmdlRIDestroy(model));
    model
}

fn garbage() -> aclmdlRI {
    0x1234 as aclmdlRI
}

fn null_out() -> *mut aclmdlRI {
    ptr::null_mut()
}

const CASES: &[Case] = &[
    // A NULL pointer argument is the ACL layer's refusal (100000), made before the runtime
    // looks a handle up (107017) or checks the instance's state (107026, 107000).
    case(
        "set NULL name of a stale instance",
        "aclmdlRISetName",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRISetName(stale_model(), ptr::null())),
    ),
    case(
        "get name of a stale instance into NULL",
        "aclmdlRIGetName",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIGetName(stale_model(), 8, ptr::null_mut())),
    ),
    // maxLen 0 is a value, checked (107000) before the instance is looked up (107017).
    case(
        "get name of a stale instance with maxLen 0",
        "aclmdlRIGetName",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let mut name = [0 as std::ffi::c_char; 1];
            code!(aclmdlRIGetName(stale_model(), 0, name.as_mut_ptr()))
        },
    ),
    case(
        "get id of garbage into NULL",
        "aclmdlRIGetId",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIGetId(garbage(), ptr::null_mut())),
    ),
    case(
        "json of an instance being captured to NULL",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIDebugJsonPrint(
                capture_info(capturing()).1,
                ptr::null(),
                0
            ))
        },
    ),
    case(
        "bind NULL to a stale instance",
        "aclmdlRIBindStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIBindStream(stale_model(), ptr::null_mut(), HEAD)),
    ),
    case(
        "bind with flag 5 to a stale instance: the flag is checked first",
        "aclmdlRIBindStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIBindStream(stale_model(), persistent_stream(), 5)),
    ),
    case(
        "register NULL callback on a stale instance",
        "aclmdlRIDestroyRegisterCallback",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIDestroyRegisterCallback(
                stale_model(),
                None,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "unregister NULL callback on a stale instance",
        "aclmdlRIDestroyUnregisterCallback",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIDestroyUnregisterCallback(stale_model(), None)),
    ),
    case(
        "streams of a stale instance into a NULL count",
        "aclmdlRIGetStreams",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIGetStreams(
                stale_model(),
                ptr::null_mut(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "build end of a stale instance with reserve: reserve is checked first",
        "aclmdlRIBuildEnd",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut reserve = 0u8;
            code!(aclmdlRIBuildEnd(stale_model(), (&raw mut reserve).cast()))
        },
    ),
    case(
        "json flags 2 of a stale instance: the flags are checked first",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let path = c_string(concat!(env!("CARGO_TARGET_TMPDIR"), "/model_ri_stale.json"));
            code!(aclmdlRIDebugJsonPrint(stale_model(), path.as_ptr(), 2))
        },
    ),
    case(
        "run a stale instance with timeout 0: the timeout is checked first",
        "aclmdlRIExecute",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || code!(aclmdlRIExecute(stale_model(), 0)),
    ),
    case(
        "ENGINE_TYPE of garbage: the attribute is checked first",
        "aclmdlRIKernelTaskGetAttribute",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
            code!(aclmdlRIKernelTaskGetAttribute(
                garbage(),
                ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
                &mut value
            ))
        },
    ),
    case(
        "type of garbage into NULL",
        "aclmdlRITaskGetType",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskGetType(garbage(), ptr::null_mut())),
    ),
    case(
        "sequence id of garbage into NULL",
        "aclmdlRITaskGetSeqId",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskGetSeqId(garbage(), ptr::null_mut())),
    ),
    case(
        "kernel attribute of garbage into NULL",
        "aclmdlRIKernelTaskGetAttribute",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIKernelTaskGetAttribute(
                garbage(),
                ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "params of garbage into NULL",
        "aclmdlRITaskGetParams",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskGetParams(garbage(), ptr::null_mut())),
    ),
    case(
        "set NULL params of garbage",
        "aclmdlRITaskSetParams",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskSetParams(garbage(), ptr::null_mut())),
    ),
    case(
        "update a NULL group from a garbage stream",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRICaptureTaskUpdateBegin(garbage(), ptr::null_mut())),
    ),
    case(
        "begin mode 3",
        "aclmdlRICaptureBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRICaptureBegin(create_stream(), 3)),
    ),
    case(
        "begin a stream collecting an update",
        "aclmdlRICaptureBegin",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || {
            let stream = create_stream();
            acl!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()));
            code!(aclmdlRICaptureBegin(stream, RELAXED))
        },
    ),
    case(
        "begin the default stream",
        "aclmdlRICaptureBegin",
        ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
        0,
        || code!(aclmdlRICaptureBegin(ptr::null_mut(), RELAXED)),
    ),
    case(
        "begin twice",
        "aclmdlRICaptureBegin",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || code!(aclmdlRICaptureBegin(capturing(), RELAXED)),
    ),
    case(
        "begin without context",
        "aclmdlRICaptureBegin",
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || code!(aclmdlRICaptureBegin(ptr::null_mut(), RELAXED)),
    ),
    case(
        "info NULL status",
        "aclmdlRICaptureGetInfo",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut model = ptr::null_mut();
            code!(aclmdlRICaptureGetInfo(
                create_stream(),
                ptr::null_mut(),
                &mut model
            ))
        },
    ),
    case(
        "info NULL model",
        "aclmdlRICaptureGetInfo",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut status = 0;
            code!(aclmdlRICaptureGetInfo(
                create_stream(),
                &mut status,
                null_out()
            ))
        },
    ),
    case(
        "end NULL model",
        "aclmdlRICaptureEnd",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRICaptureEnd(capturing(), null_out())),
    ),
    case(
        "end a stream not captured",
        "aclmdlRICaptureEnd",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || {
            let mut model = ptr::null_mut();
            code!(aclmdlRICaptureEnd(create_stream(), &mut model))
        },
    ),
    case(
        "end with a task group open",
        "aclmdlRICaptureEnd",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || {
            let stream = capturing();
            acl!(aclmdlRICaptureTaskGrpBegin(stream));
            let mut model = ptr::null_mut();
            code!(aclmdlRICaptureEnd(stream, &mut model))
        },
    ),
    case(
        "end on another thread",
        "aclmdlRICaptureEnd",
        ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
        0,
        || {
            let stream = create_stream() as usize;
            std::thread::spawn(move || {
                set_device(0);
                acl!(aclmdlRICaptureBegin(stream as aclrtStream, THREAD_LOCAL));
            })
            .join()
            .unwrap();
            let mut model = ptr::null_mut();
            code!(aclmdlRICaptureEnd(stream as aclrtStream, &mut model))
        },
    ),
    case(
        "exchange NULL",
        "aclmdlRICaptureThreadExchangeMode",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRICaptureThreadExchangeMode(ptr::null_mut())),
    ),
    case(
        "exchange mode 7",
        "aclmdlRICaptureThreadExchangeMode",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut mode = 7;
            code!(aclmdlRICaptureThreadExchangeMode(&mut mode))
        },
    ),
    case(
        "sync a capturing stream",
        "aclrtSynchronizeStream",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || code!(aclrtSynchronizeStream(capturing())),
    ),
    case(
        "query a capturing stream",
        "aclrtStreamQuery",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || {
            let mut status = 0;
            code!(aclrtStreamQuery(capturing(), &mut status))
        },
    ),
    case(
        "destroy a capturing stream",
        "aclrtDestroyStream",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || code!(aclrtDestroyStream(capturing())),
    ),
    case(
        "sync an event recorded in a capture",
        "aclrtSynchronizeEvent",
        ACL_ERROR_RT_EVENT_CAPTURED,
        0,
        || {
            let event = create_event();
            acl!(aclrtRecordEvent(event, capturing()));
            code!(aclrtSynchronizeEvent(event))
        },
    ),
    case(
        "wait on an event recorded outside",
        "aclrtStreamWaitEvent",
        ACL_ERROR_RT_CAPTURE_DEPENDENCY,
        0,
        || {
            let event = create_event();
            acl!(aclrtRecordEvent(event, create_stream()));
            code!(aclrtStreamWaitEvent(capturing(), event))
        },
    ),
    case(
        "wait on another capture's event",
        "aclrtStreamWaitEvent",
        ACL_ERROR_STREAM_CAPTURE_CONFLICT,
        0,
        || {
            let event = create_event();
            acl!(aclrtRecordEvent(event, capturing()));
            code!(aclrtStreamWaitEvent(capturing(), event))
        },
    ),
    case(
        "the default stream joins",
        "aclrtStreamWaitEvent",
        ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
        0,
        || {
            let event = create_event();
            acl!(aclrtRecordEvent(event, capturing()));
            code!(aclrtStreamWaitEvent(ptr::null_mut(), event))
        },
    ),
    case(
        "pageable copy on a capturing stream",
        "aclrtMemcpyAsync",
        ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
        0,
        || {
            let dev = malloc(64);
            code!(aclrtMemcpyAsync(
                dev,
                64,
                pageable(64),
                64,
                ACL_MEMCPY_HOST_TO_DEVICE,
                capturing()
            ))
        },
    ),
    case(
        "build into NULL",
        "aclmdlRIBuildBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIBuildBegin(null_out(), 0)),
    ),
    case(
        "build flag 1",
        "aclmdlRIBuildBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut model = ptr::null_mut();
            code!(aclmdlRIBuildBegin(&mut model, 1))
        },
    ),
    case(
        "build without context",
        "aclmdlRIBuildBegin",
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || {
            let mut model = ptr::null_mut();
            code!(aclmdlRIBuildBegin(&mut model, 0))
        },
    ),
    case(
        "bind NULL",
        "aclmdlRIBindStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIBindStream(
                building(ptr::null_mut()),
                ptr::null_mut(),
                HEAD
            ))
        },
    ),
    case(
        "bind to NULL with flag 5",
        "aclmdlRIBindStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIBindStream(ptr::null_mut(), create_stream(), 5)),
    ),
    case(
        "bind flag 5",
        "aclmdlRIBindStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIBindStream(
                building(ptr::null_mut()),
                persistent_stream(),
                5
            ))
        },
    ),
    case(
        "bind a stream not PERSISTENT",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclmdlRIBindStream(
                building(ptr::null_mut()),
                create_stream(),
                HEAD
            ))
        },
    ),
    case(
        "bind a stream bound already",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            code!(aclmdlRIBindStream(building(ptr::null_mut()), stream, HEAD))
        },
    ),
    case(
        "bind to a captured instance",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || code!(aclmdlRIBindStream(empty_model(), persistent_stream(), HEAD)),
    ),
    case(
        "bind after the build",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let model = building(ptr::null_mut());
            acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
            code!(aclmdlRIBindStream(model, persistent_stream(), HEAD))
        },
    ),
    case(
        "bind a capturing stream",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            acl!(aclmdlRICaptureBegin(stream, RELAXED));
            code!(aclmdlRIBindStream(building(ptr::null_mut()), stream, HEAD))
        },
    ),
    // A stream in two instances at once: its launches would go both into the instance it is
    // bound to and into the group's update.
    case(
        "bind a stream collecting an update",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            acl!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()));
            code!(aclmdlRIBindStream(building(ptr::null_mut()), stream, HEAD))
        },
    ),
    case(
        "update from a stream bound to a built instance",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            code!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()))
        },
    ),
    case(
        "begin a stream bound to a built instance",
        "aclmdlRICaptureBegin",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            code!(aclmdlRICaptureBegin(stream, RELAXED))
        },
    ),
    case(
        "begin a captured instance's model stream",
        "aclmdlRICaptureBegin",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclmdlRICaptureBegin(
                instance_streams(empty_model())[0],
                RELAXED
            ))
        },
    ),
    case(
        "bind a stream of another context",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_STREAM_CONTEXT,
        0,
        || {
            code!(aclmdlRIBindStream(
                building(ptr::null_mut()),
                stream_of_device(1),
                HEAD
            ))
        },
    ),
    case(
        "bind to an instance of another context",
        "aclmdlRIBindStream",
        ACL_ERROR_RT_MODEL_CONTEXT,
        0,
        || {
            let model = std::thread::spawn(|| {
                set_device(1);
                building(ptr::null_mut()) as usize
            })
            .join()
            .unwrap();
            code!(aclmdlRIBindStream(
                model as aclmdlRI,
                persistent_stream(),
                HEAD
            ))
        },
    ),
    case(
        "end tasks of a stream not bound",
        "aclmdlRIEndTask",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            code!(aclmdlRIEndTask(
                building(ptr::null_mut()),
                persistent_stream()
            ))
        },
    ),
    case(
        "build end reserve",
        "aclmdlRIBuildEnd",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut reserve = 0u8;
            code!(aclmdlRIBuildEnd(
                building(ptr::null_mut()),
                (&raw mut reserve).cast()
            ))
        },
    ),
    case(
        "build end twice",
        "aclmdlRIBuildEnd",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let model = building(ptr::null_mut());
            acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
            code!(aclmdlRIBuildEnd(model, ptr::null_mut()))
        },
    ),
    case(
        "unbind a stream not bound",
        "aclmdlRIUnbindStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            code!(aclmdlRIUnbindStream(
                building(ptr::null_mut()),
                persistent_stream()
            ))
        },
    ),
    case(
        "unbind a captured instance's model stream",
        "aclmdlRIUnbindStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let model = empty_model();
            code!(aclmdlRIUnbindStream(model, instance_streams(model)[0]))
        },
    ),
    case(
        "activate from a stream not bound",
        "aclrtActiveStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            let active = persistent_stream();
            building(active);
            code!(aclrtActiveStream(active, create_stream()))
        },
    ),
    case(
        "activate from a capturing stream",
        "aclrtActiveStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            let active = persistent_stream();
            building(active);
            code!(aclrtActiveStream(active, capturing()))
        },
    ),
    case(
        "activate a stream not bound",
        "aclrtActiveStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            code!(aclrtActiveStream(persistent_stream(), stream))
        },
    ),
    case(
        "activate a stream of another instance",
        "aclrtActiveStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            let (active, stream) = (persistent_stream(), persistent_stream());
            building(active);
            building(stream);
            code!(aclrtActiveStream(active, stream))
        },
    ),
    case(
        "activate from a stream whose tasks ended",
        "aclrtActiveStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let (active, stream) = (persistent_stream(), persistent_stream());
            let model = building(stream);
            acl!(aclmdlRIBindStream(model, active, ACTIVATED));
            acl!(aclmdlRIEndTask(model, stream));
            code!(aclrtActiveStream(active, stream))
        },
    ),
    case(
        "activate a stream of another context",
        "aclrtActiveStream",
        ACL_ERROR_RT_STREAM_CONTEXT,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            code!(aclrtActiveStream(stream_of_device(1), stream))
        },
    ),
    case(
        "record on an unbound PERSISTENT stream",
        "aclrtRecordEvent",
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        0,
        || code!(aclrtRecordEvent(create_event(), persistent_stream())),
    ),
    case(
        "run NULL",
        "aclmdlRIExecute",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIExecute(ptr::null_mut(), -1)),
    ),
    case(
        "run with timeout 0",
        "aclmdlRIExecute",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || code!(aclmdlRIExecute(empty_model(), 0)),
    ),
    case(
        "run while built",
        "aclmdlRIExecute",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || code!(aclmdlRIExecute(building(persistent_stream()), -1)),
    ),
    case(
        "run in another context",
        "aclmdlRIExecute",
        ACL_ERROR_RT_MODEL_CONTEXT,
        0,
        || {
            let model = std::thread::spawn(|| {
                set_device(1);
                empty_model() as usize
            })
            .join()
            .unwrap();
            code!(aclmdlRIExecute(model as aclmdlRI, -1))
        },
    ),
    case(
        "EXTERNAL record outside a capture",
        "aclrtRecordEventWithFlag",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || {
            code!(aclrtRecordEventWithFlag(
                sync_event(),
                create_stream(),
                ACL_EVENT_RECORD_EXTERNAL
            ))
        },
    ),
    case(
        "EXTERNAL record of a legacy event",
        "aclrtRecordEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclrtRecordEventWithFlag(
                create_event(),
                capturing(),
                ACL_EVENT_RECORD_EXTERNAL
            ))
        },
    ),
    case(
        "EXTERNAL twice in a capture",
        "aclrtStreamWaitEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let (event, stream) = (sync_event(), capturing());
            acl!(aclrtRecordEventWithFlag(
                event,
                stream,
                ACL_EVENT_RECORD_EXTERNAL
            ));
            code!(aclrtStreamWaitEventWithFlag(
                stream,
                event,
                0,
                ACL_EVENT_WAIT_EXTERNAL
            ))
        },
    ),
    case(
        "record flag switched",
        "aclrtRecordEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let event = sync_event();
            acl!(aclrtRecordEventWithFlag(
                event,
                create_stream(),
                ACL_EVENT_RECORD_DEFAULT
            ));
            code!(aclrtRecordEventWithFlag(
                event,
                capturing(),
                ACL_EVENT_RECORD_EXTERNAL
            ))
        },
    ),
    case(
        "EXTERNAL wait outside a capture",
        "aclrtStreamWaitEventWithFlag",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || {
            code!(aclrtStreamWaitEventWithFlag(
                create_stream(),
                sync_event(),
                0,
                ACL_EVENT_WAIT_EXTERNAL
            ))
        },
    ),
    case(
        "EXTERNAL wait with a timeout",
        "aclrtStreamWaitEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclrtStreamWaitEventWithFlag(
                capturing(),
                sync_event(),
                5,
                ACL_EVENT_WAIT_EXTERNAL
            ))
        },
    ),
    case(
        "EXTERNAL wait with a timeout on a destroyed stream: the timeout is checked first",
        "aclrtStreamWaitEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = create_stream();
            acl!(aclrtDestroyStream(stream));
            code!(aclrtStreamWaitEventWithFlag(
                stream,
                sync_event(),
                5,
                ACL_EVENT_WAIT_EXTERNAL
            ))
        },
    ),
    case(
        "wait flag switched",
        "aclrtStreamWaitEventWithFlag",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let event = sync_event();
            acl!(aclrtStreamWaitEventWithFlag(
                capturing(),
                event,
                0,
                ACL_EVENT_WAIT_EXTERNAL
            ));
            code!(aclrtStreamWaitEventWithFlag(
                create_stream(),
                event,
                0,
                ACL_EVENT_WAIT_DEFAULT
            ))
        },
    ),
    case(
        "streams into NULL count",
        "aclmdlRIGetStreams",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIGetStreams(
                empty_model(),
                ptr::null_mut(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "streams while captured",
        "aclmdlRIGetStreams",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || {
            let mut count = 0;
            code!(aclmdlRIGetStreams(
                capture_info(capturing()).1,
                ptr::null_mut(),
                &mut count
            ))
        },
    ),
    case(
        "tasks of a stream of no instance",
        "aclmdlRIGetTasksByStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            let mut count = 0;
            code!(aclmdlRIGetTasksByStream(
                create_stream(),
                ptr::null_mut(),
                &mut count
            ))
        },
    ),
    case(
        "tasks into NULL count",
        "aclmdlRIGetTasksByStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIGetTasksByStream(
                create_stream(),
                ptr::null_mut(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "tasks while built",
        "aclmdlRIGetTasksByStream",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || {
            let stream = persistent_stream();
            building(stream);
            let mut count = 0;
            code!(aclmdlRIGetTasksByStream(
                stream,
                ptr::null_mut(),
                &mut count
            ))
        },
    ),
    case(
        "type of NULL",
        "aclmdlRITaskGetType",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut kind = 0;
            code!(aclmdlRITaskGetType(ptr::null_mut(), &mut kind))
        },
    ),
    case(
        "type of garbage",
        "aclmdlRITaskGetType",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let mut kind = 0;
            code!(aclmdlRITaskGetType(garbage(), &mut kind))
        },
    ),
    case(
        "type into NULL",
        "aclmdlRITaskGetType",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskGetType(one_task(), ptr::null_mut())),
    ),
    case(
        "sequence id into NULL",
        "aclmdlRITaskGetSeqId",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskGetSeqId(one_task(), ptr::null_mut())),
    ),
    case(
        "sequence id of garbage",
        "aclmdlRITaskGetSeqId",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let mut id = 0;
            code!(aclmdlRITaskGetSeqId(garbage(), &mut id))
        },
    ),
    case(
        "group on a stream not captured",
        "aclmdlRICaptureTaskGrpBegin",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || code!(aclmdlRICaptureTaskGrpBegin(create_stream())),
    ),
    case(
        "group begun twice",
        "aclmdlRICaptureTaskGrpBegin",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || {
            let stream = capturing();
            acl!(aclmdlRICaptureTaskGrpBegin(stream));
            code!(aclmdlRICaptureTaskGrpBegin(stream))
        },
    ),
    case(
        "group ended unbegun",
        "aclmdlRICaptureTaskGrpEnd",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || {
            let mut group = ptr::null_mut();
            code!(aclmdlRICaptureTaskGrpEnd(capturing(), &mut group))
        },
    ),
    case(
        "group end into NULL",
        "aclmdlRICaptureTaskGrpEnd",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRICaptureTaskGrpEnd(capturing(), ptr::null_mut())),
    ),
    case(
        "group end not captured",
        "aclmdlRICaptureTaskGrpEnd",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || {
            let mut group = ptr::null_mut();
            code!(aclmdlRICaptureTaskGrpEnd(create_stream(), &mut group))
        },
    ),
    case(
        "update NULL group",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICaptureTaskUpdateBegin(
                create_stream(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "update a garbage group",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRICaptureTaskUpdateBegin(create_stream(), garbage())),
    ),
    case(
        "update from a capturing stream",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || code!(aclmdlRICaptureTaskUpdateBegin(capturing(), one_group())),
    ),
    case(
        "update while recording",
        "aclmdlRICaptureTaskUpdateBegin",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || {
            let (group, stream) = (one_group(), create_stream());
            acl!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()));
            code!(aclmdlRICaptureTaskUpdateBegin(stream, group))
        },
    ),
    case(
        "update end unbegun",
        "aclmdlRICaptureTaskUpdateEnd",
        ACL_ERROR_STREAM_TASK_GROUP_STATUS,
        0,
        || code!(aclmdlRICaptureTaskUpdateEnd(create_stream())),
    ),
    case(
        "memset in an update",
        "aclrtMemsetAsync",
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
        0,
        || {
            let stream = create_stream();
            acl!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()));
            code!(aclrtMemsetAsync(malloc(64), 64, 0, 64, stream))
        },
    ),
    case(
        "execute on a stream collecting an update",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
        0,
        || {
            let stream = create_stream();
            acl!(aclmdlRICaptureTaskUpdateBegin(stream, one_group()));
            code!(aclmdlRIExecuteAsync(empty_model(), stream))
        },
    ),
    case(
        "update NULL",
        "aclmdlRIUpdate",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIUpdate(ptr::null_mut())),
    ),
    case(
        "update while captured",
        "aclmdlRIUpdate",
        ACL_ERROR_RT_MODEL_UPDATE_FAILED,
        0,
        || code!(aclmdlRIUpdate(capture_info(capturing()).1)),
    ),
    case(
        "disable NULL",
        "aclmdlRITaskDisable",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRITaskDisable(ptr::null_mut())),
    ),
    case(
        "disable garbage",
        "aclmdlRITaskDisable",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRITaskDisable(garbage())),
    ),
    case(
        "abort NULL",
        "aclmdlRIAbort",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIAbort(ptr::null_mut())),
    ),
    case(
        "abort a captured instance",
        "aclmdlRIAbort",
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        0,
        || code!(aclmdlRIAbort(empty_model())),
    ),
    case(
        "abort a destroyed instance",
        "aclmdlRIAbort",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRIAbort(stale_model())),
    ),
    case(
        "execute NULL",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIExecuteAsync(ptr::null_mut(), create_stream())),
    ),
    case(
        "execute garbage",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRIExecuteAsync(garbage(), create_stream())),
    ),
    case(
        "execute while captured",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || {
            let model = capture_info(capturing()).1;
            code!(aclmdlRIExecuteAsync(model, create_stream()))
        },
    ),
    case(
        "execute on a capturing stream",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_STREAM_CAPTURED,
        0,
        || code!(aclmdlRIExecuteAsync(empty_model(), capturing())),
    ),
    case(
        "execute in another context",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_MODEL_CONTEXT,
        0,
        || {
            let model = std::thread::spawn(|| {
                set_device(1);
                empty_model() as usize
            })
            .join()
            .unwrap();
            code!(aclmdlRIExecuteAsync(model as aclmdlRI, create_stream()))
        },
    ),
    case(
        "execute on a stream of another context",
        "aclmdlRIExecuteAsync",
        ACL_ERROR_RT_STREAM_CONTEXT,
        0,
        || code!(aclmdlRIExecuteAsync(empty_model(), stream_of_device(1))),
    ),
    case(
        "destroy NULL",
        "aclmdlRIDestroy",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIDestroy(ptr::null_mut())),
    ),
    case(
        "destroy twice",
        "aclmdlRIDestroy",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRIDestroy(stale_model())),
    ),
    case(
        "destroy while captured",
        "aclmdlRIDestroy",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || code!(aclmdlRIDestroy(capture_info(capturing()).1)),
    ),
    case(
        "set name NULL",
        "aclmdlRISetName",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRISetName(empty_model(), ptr::null())),
    ),
    case(
        "set name of a stale instance",
        "aclmdlRISetName",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRISetName(stale_model(), c_string("x").as_ptr())),
    ),
    case(
        "get name of NULL",
        "aclmdlRIGetName",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut name = [0 as std::ffi::c_char; 8];
            code!(aclmdlRIGetName(ptr::null_mut(), 8, name.as_mut_ptr()))
        },
    ),
    case(
        "get id of NULL",
        "aclmdlRIGetId",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut id = 0;
            code!(aclmdlRIGetId(ptr::null_mut(), &mut id))
        },
    ),
    case(
        "json of NULL with flags 2",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let path = c_string(concat!(env!("CARGO_TARGET_TMPDIR"), "/model_ri_null.json"));
            code!(aclmdlRIDebugJsonPrint(ptr::null_mut(), path.as_ptr(), 2))
        },
    ),
    case(
        "get name into NULL",
        "aclmdlRIGetName",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIGetName(empty_model(), 8, ptr::null_mut())),
    ),
    case(
        "get name maxLen 0",
        "aclmdlRIGetName",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let mut name = [0 as std::ffi::c_char; 1];
            code!(aclmdlRIGetName(empty_model(), 0, name.as_mut_ptr()))
        },
    ),
    case(
        "get id into NULL",
        "aclmdlRIGetId",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIGetId(empty_model(), ptr::null_mut())),
    ),
    case(
        "get id of garbage",
        "aclmdlRIGetId",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let mut id = 0;
            code!(aclmdlRIGetId(garbage(), &mut id))
        },
    ),
    case(
        "print a stale instance",
        "aclmdlRIDebugPrint",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclmdlRIDebugPrint(stale_model())),
    ),
    case(
        "json to NULL",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIDebugJsonPrint(empty_model(), ptr::null(), 0)),
    ),
    case(
        "json flags 2",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let path = c_string(concat!(env!("CARGO_TARGET_TMPDIR"), "/model_ri_flags.json"));
            code!(aclmdlRIDebugJsonPrint(empty_model(), path.as_ptr(), 2))
        },
    ),
    case(
        "json into a missing directory",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_RT_FILE_WRITE,
        0,
        || {
            let path = c_string("/nonexistent-npu-sim-dir/model.json");
            code!(aclmdlRIDebugJsonPrint(empty_model(), path.as_ptr(), 0))
        },
    ),
    case(
        "json while captured",
        "aclmdlRIDebugJsonPrint",
        ACL_ERROR_RT_MODEL_CAPTURED,
        0,
        || {
            let path = c_string(concat!(
                env!("CARGO_TARGET_TMPDIR"),
                "/model_ri_captured.json"
            ));
            code!(aclmdlRIDebugJsonPrint(
                capture_info(capturing()).1,
                path.as_ptr(),
                0
            ))
        },
    ),
    case(
        "register NULL callback",
        "aclmdlRIDestroyRegisterCallback",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIDestroyRegisterCallback(
                empty_model(),
                None,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "register on NULL",
        "aclmdlRIDestroyRegisterCallback",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRIDestroyRegisterCallback(
                ptr::null_mut(),
                Some(count_destroy),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "unregister NULL callback",
        "aclmdlRIDestroyUnregisterCallback",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclmdlRIDestroyUnregisterCallback(empty_model(), None)),
    ),
    case(
        "unregister on a stale instance",
        "aclmdlRIDestroyUnregisterCallback",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            code!(aclmdlRIDestroyUnregisterCallback(
                stale_model(),
                Some(count_destroy)
            ))
        },
    ),
];

#[test]
fn every_error_path() {
    install();
    run_table(CASES);
}

fn cache_op_info_switch(stream: aclrtStream, on: u32) {
    let mut value = aclrtStreamAttrValue {
        cacheOpInfoSwitch: on,
    };
    acl!(aclrtSetStreamAttribute(
        stream,
        ACL_STREAM_ATTR_CACHE_OP_INFO,
        &mut value
    ));
}

fn cache_extend_info(text: &[u8]) -> aclError {
    code!(aclrtCacheLastTaskExtendInfo(
        text.as_ptr().cast(),
        text.len()
    ))
}

fn cache_op_info(bytes: &[u8]) -> aclError {
    code!(aclrtCacheLastTaskOpInfo(bytes.as_ptr().cast(), bytes.len()))
}

#[track_caller]
fn ok(code: aclError) {
    assert_eq!(code, ACL_SUCCESS, "{}", recent_message());
}

/// The sliced tasks of an instance's aclmdlRIDebugJsonPrint (SUMMARY).
fn printed_tasks(model: aclmdlRI, name: &str) -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let c_path = c_string(path.to_str().unwrap());
    acl!(aclmdlRIDebugJsonPrint(
        model,
        c_path.as_ptr(),
        ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY
    ));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["ph"] == "X")
        .cloned()
        .collect()
}

/// The switch as aclrtGetStreamAttribute(ACL_STREAM_ATTR_CACHE_OP_INFO) reads it on `stream`.
fn cache_op_info_read(stream: aclrtStream) -> u32 {
    let mut value = aclrtStreamAttrValue { reserve: [7; 4] };
    acl!(aclrtGetStreamAttribute(
        stream,
        ACL_STREAM_ATTR_CACHE_OP_INFO,
        &mut value
    ));
    // SAFETY: every union member is plain integers over the same bytes.
    unsafe { value.cacheOpInfoSwitch }
}

/// The reference's flow for aclrtCacheLastTaskOpInfo: aclrtGetStreamAttribute reads the
/// operator information cache switch as on only while the stream is being captured with the
/// switch set, and a stream that joins the capture reads the switch of the stream that began
/// it. The simulator read back whatever had been set on the stream itself (on outside captures,
/// off on a joined stream whose capture cached the information).
#[test]
fn the_cache_switch_reads_on_only_in_a_capture_and_joined_streams_share_it() {
    install();
    set_device(3);
    let (main, side) = (create_stream(), create_stream());
    let (fork, join) = (create_event(), create_event());
    cache_op_info_switch(main, 1);
    assert_eq!(cache_op_info_read(main), 0, "set, but no capture");
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    assert_eq!(cache_op_info_read(main), 1);
    assert_eq!(cache_op_info_read(side), 0, "not in the capture yet");
    acl!(aclrtRecordEvent(fork, main));
    acl!(aclrtStreamWaitEvent(side, fork));
    assert_eq!(
        cache_op_info_read(side),
        1,
        "joined: the main stream's switch"
    );
    cache_op_info_switch(main, 0);
    assert_eq!((cache_op_info_read(main), cache_op_info_read(side)), (0, 0));
    cache_op_info_switch(main, 1);
    acl!(aclrtRecordEvent(join, side));
    acl!(aclrtStreamWaitEvent(main, join));
    let model = capture_end(main);
    assert_eq!((cache_op_info_read(main), cache_op_info_read(side)), (0, 0));
    // The switch stays set: the next capture reads it on again.
    acl!(aclmdlRICaptureBegin(main, RELAXED));
    assert_eq!(cache_op_info_read(main), 1);
    let again = capture_end(main);
    for model in [model, again] {
        acl!(aclmdlRIDestroy(model));
    }
    for event in [fork, join] {
        acl!(aclrtDestroyEvent(event));
    }
    for stream in [main, side] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// aclrtCacheLastTaskOpInfo and aclrtCacheLastTaskExtendInfo attach information to the thread's
/// last captured (or built) task, which aclmdlRIDebugJsonPrint then shows; operator information
/// only while the capture's stream has ACL_STREAM_ATTR_CACHE_OP_INFO on.
#[test]
fn information_cached_on_the_last_task_stays_with_it() {
    install();
    set_device(3);
    let dev = malloc(64);
    let stream = create_stream();

    // Outside a capture: extended information is refused, operator information ignored.
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    assert_eq!(cache_extend_info(b"{}"), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    assert!(recent_message().contains("aclrtCacheLastTaskExtendInfo"));
    ok(cache_op_info(&[1]));

    acl!(aclmdlRICaptureBegin(stream, THREAD_LOCAL));
    cache_op_info_switch(stream, 1);
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    ok(cache_op_info(&[9]));
    ok(cache_op_info(&[1, 2, 0xab]));
    ok(cache_extend_info(br#"{"layer": "conv1"}"#));
    let address = dev as u64;
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let long = vec![b'a'; 5000];
    ok(cache_extend_info(&long));
    ok(cache_op_info(&vec![7; 64 << 10]));
    cache_op_info_switch(stream, 0);
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream));
    ok(cache_op_info(&[5]));
    let model = capture_end(stream);
    // The capture is over: its tasks take no more information.
    assert_eq!(cache_extend_info(b"{}"), ACL_ERROR_RT_STREAM_NOT_CAPTURED);

    let tasks = printed_tasks(model, "cached_info.json");
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[0]["args"]["op_info"], "0102ab", "the last call wins");
    assert_eq!(
        tasks[0]["args"]["extend_info"],
        serde_json::json!({"layer": "conv1"})
    );
    assert_eq!(
        tasks[1]["args"]["extend_info"],
        "a".repeat(4096),
        "4 KiB kept; not JSON: shown as text"
    );
    assert_eq!(tasks[1]["args"]["op_info"].as_str().unwrap().len(), 2 << 16);
    assert!(
        tasks[2]["args"].get("op_info").is_none(),
        "the switch was off"
    );
    assert!(tasks[2]["args"].get("extend_info").is_none());
    acl!(aclmdlRIDestroy(model));

    // A built instance takes extended information; operator information is for captures.
    let persistent = persistent_stream();
    let built = building(persistent);
    acl!(aclrtMemsetAsync(dev, 64, 3, 64, persistent));
    ok(cache_extend_info(br#"[1, 2]"#));
    ok(cache_op_info(&[4]));
    acl!(aclmdlRIEndTask(built, persistent));
    acl!(aclmdlRIBuildEnd(built, ptr::null_mut()));
    assert_eq!(cache_extend_info(b"{}"), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    let tasks = printed_tasks(built, "cached_info_built.json");
    assert_eq!(tasks[0]["args"]["extend_info"], serde_json::json!([1, 2]));
    assert!(tasks[0]["args"].get("op_info").is_none());
    acl!(aclmdlRIUnbindStream(built, persistent));
    acl!(aclmdlRIDestroy(built));
    acl!(aclrtDestroyStream(persistent));

    // Arguments first, whatever the last task.
    let too_much = vec![0; (64 << 10) + 1];
    let cases: [(&str, &dyn Fn() -> aclError); 5] = [
        ("aclrtCacheLastTaskOpInfo", &|| {
            code!(aclrtCacheLastTaskOpInfo(ptr::null(), 4))
        }),
        ("aclrtCacheLastTaskOpInfo", &|| cache_op_info(&[])),
        ("aclrtCacheLastTaskOpInfo", &|| cache_op_info(&too_much)),
        ("aclrtCacheLastTaskExtendInfo", &|| {
            code!(aclrtCacheLastTaskExtendInfo(ptr::null(), 4))
        }),
        ("aclrtCacheLastTaskExtendInfo", &|| cache_extend_info(b"")),
    ];
    for (api, call) in cases {
        assert_eq!(call(), ACL_ERROR_INVALID_PARAM, "{api}");
        let message = recent_message();
        assert!(
            message.contains(&format!("{api} failed with 100000")),
            "{message}"
        );
    }
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// The first flagged wait or record of an event fixes its flag at the call's entry, and what
/// the call returns does not undo it (the reference's rule for both functions): one refused
/// for its destroyed stream still fixes EXTERNAL, so a DEFAULT call afterwards is refused with
/// 107000. A call whose flag is no flag (100000) has nothing to fix.
#[test]
fn a_refused_first_flagged_call_still_fixes_the_events_flag() {
    set_device(0);
    let (event, stream) = (sync_event(), create_stream());
    acl!(aclrtDestroyStream(stream));
    let unknown = code!(aclrtStreamWaitEventWithFlag(create_stream(), event, 0, 2));
    assert_eq!(unknown, ACL_ERROR_INVALID_PARAM, "an unknown wait flag");
    let refused = code!(aclrtStreamWaitEventWithFlag(
        stream,
        event,
        0,
        ACL_EVENT_WAIT_EXTERNAL
    ));
    assert_eq!(refused, ACL_ERROR_RT_INVALID_HANDLE, "the destroyed stream");
    let switched = code!(aclrtStreamWaitEventWithFlag(
        create_stream(),
        event,
        0,
        ACL_EVENT_WAIT_DEFAULT
    ));
    assert_eq!(
        switched, ACL_ERROR_RT_PARAM_INVALID,
        "the wait flag was fixed"
    );
    let unknown = code!(aclrtRecordEventWithFlag(event, create_stream(), 2));
    assert_eq!(unknown, ACL_ERROR_INVALID_PARAM, "an unknown record flag");
    let refused = code!(aclrtRecordEventWithFlag(
        event,
        stream,
        ACL_EVENT_RECORD_EXTERNAL
    ));
    assert_eq!(refused, ACL_ERROR_RT_INVALID_HANDLE, "the destroyed stream");
    let switched = code!(aclrtRecordEventWithFlag(
        event,
        create_stream(),
        ACL_EVENT_RECORD_DEFAULT
    ));
    assert_eq!(
        switched, ACL_ERROR_RT_PARAM_INVALID,
        "the record flag was fixed"
    );
    // Another event, whose first calls were refused for their flag value only, is still free.
    let other = sync_event();
    assert_eq!(
        code!(aclrtRecordEventWithFlag(other, create_stream(), 2)),
        ACL_ERROR_INVALID_PARAM
    );
    acl!(aclrtRecordEventWithFlag(
        other,
        create_stream(),
        ACL_EVENT_RECORD_DEFAULT
    ));
}
