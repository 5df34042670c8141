//! Stream control through the C ABI: dispatch latency, forced destruction, stop and abort,
//! timed and flagged event waits, persistent and device-use-only streams, configuration
//! handles, attributes, state callbacks and task ids. Work that must stay pending waits on a
//! notify nobody has recorded yet. Each test that needs a device of its own has one.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;

use common::cases::{case, run_table};
use common::install_eight_devices as install;
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn create_notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut notify,
        u64::from(ACL_NOTIFY_DEFAULT)
    ));
    notify
}

/// Queues on `stream` a wait that holds it until `notify` is recorded.
fn block(stream: aclrtStream, notify: aclrtNotify) {
    acl!(aclrtWaitAndResetNotify(notify, stream, 0));
}

fn stream_with_flags(flags: u32) -> aclrtStream {
    let mut stream = ptr::null_mut();
    acl!(aclrtCreateStreamWithConfig(&mut stream, 0, flags));
    stream
}

fn memset_async(dev: *mut c_void, len: usize, value: i32, stream: aclrtStream) {
    acl!(aclrtMemsetAsync(dev, len, value, len, stream));
}

fn launch_add_one(func: aclrtFuncHandle, target: *mut c_void, stream: aclrtStream) {
    let mut args = [target as u64];
    acl!(aclrtLaunchKernelWithHostArgs(
        func,
        1,
        stream,
        ptr::null_mut(),
        args.as_mut_ptr().cast(),
        8,
        ptr::null_mut(),
        0
    ));
}

/// A record of a counted notify (unsupported on an Atlas A2) in `mode` on `stream`.
fn record_counted(stream: aclrtStream, mode: aclrtCntNotifyRecordMode) -> aclError {
    record_counted_notify(ptr::dangling_mut(), stream, mode)
}

/// A record of `notify` in `mode` on `stream`, adding 1.
fn record_counted_notify(
    notify: aclrtCntNotify,
    stream: aclrtStream,
    mode: aclrtCntNotifyRecordMode,
) -> aclError {
    let mut info = aclrtCntNotifyRecordInfo { mode, value: 1 };
    code!(aclrtCntNotifyRecord(notify, stream, &mut info))
}

/// A wait on a counted notify (unsupported on an Atlas A2) in `mode` on `stream`.
fn wait_counted(stream: aclrtStream, mode: aclrtCntNotifyWaitMode, is_clear: u8) -> aclError {
    let mut info = aclrtCntNotifyWaitInfo {
        mode,
        value: 1,
        timeout: 0,
        isClear: is_clear,
        rsv: [0; 3],
    };
    code!(aclrtCntNotifyWaitWithTimeout(
        ptr::dangling_mut(),
        stream,
        &mut info
    ))
}

fn status(stream: aclrtStream) -> aclrtStreamStatus {
    let mut status = ACL_STREAM_STATUS_RESERVED;
    acl!(aclrtStreamQuery(stream, &mut status));
    status
}

/// CANN's samples launch a kernel and read its output with a synchronous aclrtMemcpy at once.
#[test]
fn a_synchronous_copy_right_after_a_launch_sees_the_kernels_output() {
    install();
    set_device(0);
    let func = function(registry_binary(&["add_one_u32"]), "add_one_u32");
    let dev = malloc(4);
    for round in 1..=200u32 {
        // A new stream each round: its worker is idle when the kernel arrives.
        let stream = create_stream();
        launch_add_one(func, dev, stream);
        assert_eq!(download::<u32>(dev, 1), [round], "round {round}");
        acl!(aclrtDestroyStream(stream));
    }
}

/// The copy covers every launch that returned before it began: to several idle streams, and
/// from another thread that hands over once its launch has returned.
#[test]
fn a_synchronous_copy_sees_the_output_of_launches_on_several_streams_and_threads() {
    const STREAMS: usize = 4;
    install();
    set_device(0);
    let func = function(registry_binary(&["add_one_u32"]), "add_one_u32");
    let dev = malloc(4 * (STREAMS + 1));
    let word = |i: usize| (dev as usize + 4 * i) as *mut c_void;
    for round in 1..=100u32 {
        let streams: Vec<aclrtStream> = (0..=STREAMS).map(|_| create_stream()).collect();
        for (i, &stream) in streams[..STREAMS].iter().enumerate() {
            launch_add_one(func, word(i), stream);
        }
        let (other, target) = (streams[STREAMS] as usize, word(STREAMS) as usize);
        let func_addr = func as usize;
        std::thread::spawn(move || {
            set_device(0);
            let func = func_addr as aclrtFuncHandle;
            launch_add_one(func, target as *mut c_void, other as aclrtStream);
        })
        .join()
        .unwrap();
        assert_eq!(
            download::<u32>(dev, STREAMS + 1),
            [round; STREAMS + 1],
            "round {round}"
        );
        for stream in streams {
            acl!(aclrtDestroyStream(stream));
        }
    }
}

/// aclrtDestroyStreamForce does not wait for the stream's unfinished tasks: those not started
/// are dropped (waits on their records fail with 107023), and the call returns once the task
/// running, which the simulator cannot interrupt, has finished.
#[test]
fn destroy_force_drops_the_work_not_started_and_returns_once_the_running_task_ends() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STARTED: AtomicBool = AtomicBool::new(false);
    static RELEASE: AtomicBool = AtomicBool::new(false);
    static FINISHED: AtomicBool = AtomicBool::new(false);
    unsafe extern "C" fn hold(_: *mut c_void) {
        STARTED.store(true, Ordering::Release);
        while !RELEASE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        FINISHED.store(true, Ordering::Release);
    }
    install();
    set_device(1);
    let func = function(registry_binary(&["add_one_u32"]), "add_one_u32");
    let dev = malloc(4096);
    let stream = create_stream();
    let done = create_event();
    acl!(aclrtLaunchHostFunc(stream, Some(hold), ptr::null_mut()));
    while !STARTED.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    for value in 1..=8 {
        memset_async(dev, 4096, value, stream);
    }
    launch_add_one(func, dev, stream);
    acl!(aclrtRecordEvent(done, stream));
    let handle = stream as usize;
    let destroyer = std::thread::spawn(move || {
        set_device(1);
        code!(aclrtDestroyStreamForce(handle as aclrtStream))
    });
    // The record behind the running host function is dropped as soon as the destruction has
    // begun: the wait on it fails while the host function still runs. (A regression waits for
    // the host function, which only this thread releases: the bound makes that a failure.)
    assert_eq!(
        code!(aclrtSynchronizeEventWithTimeout(done, 60_000)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    assert!(!FINISHED.load(Ordering::Acquire));
    RELEASE.store(true, Ordering::Release);
    assert_eq!(destroyer.join().unwrap(), 0);
    assert!(
        FINISHED.load(Ordering::Acquire),
        "the running task finished first"
    );
    assert!(
        download::<u8>(dev, 4096).iter().all(|&b| b == 0),
        "no task behind the running one ran"
    );

    // A task that cannot run (it waits for a notify) is dropped with the work behind it.
    let blocked = create_stream();
    let notify = create_notify();
    let after = create_event();
    block(blocked, notify);
    memset_async(dev, 4096, 0x55, blocked);
    acl!(aclrtRecordEvent(after, blocked));
    acl!(aclrtDestroyStreamForce(blocked));
    assert_eq!(
        code!(aclrtSynchronizeEvent(after)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    assert!(recent_message().contains("aborted"));
    assert!(download::<u8>(dev, 4096).iter().all(|&b| b == 0));
    // Submissions to the destroyed stream are refused.
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 64, 0, 64, blocked)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    recent_message();
}

#[test]
fn abort_discards_queued_work_and_leaves_the_stream_usable() {
    install();
    set_device(2);
    let dev = malloc(64);
    let stream = create_stream();
    let notify = create_notify();
    let event = create_event();
    block(stream, notify);
    memset_async(dev, 64, 9, stream);
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(status(stream), ACL_STREAM_STATUS_NOT_READY);
    acl!(aclrtStreamAbort(stream));
    assert_eq!(status(stream), ACL_STREAM_STATUS_COMPLETE);
    assert_eq!(
        code!(aclrtSynchronizeEvent(event)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    recent_message();
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0), "discarded");
    memset_async(dev, 64, 3, stream);
    acl!(aclrtSynchronizeStream(stream));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 3));
    // The default stream can be aborted too.
    acl!(aclrtStreamAbort(ptr::null_mut()));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn stop_pauses_the_stream_until_an_abort() {
    install();
    set_device(3);
    let dev = malloc(64);
    let notify = create_notify();
    for flags in [0, ACL_STREAM_DEVICE_USE_ONLY, ACL_STREAM_CPU_SCHEDULE] {
        let stream = stream_with_flags(flags);
        block(stream, notify);
        memset_async(dev, 64, 4, stream);
        acl!(aclrtStreamStop(stream));
        for _ in 0..2 {
            if flags != 0 {
                // The reference: the host does not synchronise a device-use-only or
                // CPU-schedule stream; its sync returns success at once, stopped or not.
                acl!(aclrtSynchronizeStream(stream));
                acl!(aclrtSynchronizeStreamWithTimeout(stream, 10));
                continue;
            }
            assert_eq!(
                code!(aclrtSynchronizeStream(stream)),
                ACL_ERROR_RT_INTERNAL_ERROR
            );
            assert!(recent_message().contains("aclrtStreamStop"));
        }
        let mut st = 0;
        assert_eq!(
            code!(aclrtStreamQuery(stream, &mut st)),
            ACL_ERROR_RT_INTERNAL_ERROR
        );
        recent_message();
        acl!(aclrtStreamAbort(stream));
        acl!(aclrtSynchronizeStream(stream));
        assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0), "never ran");
        acl!(aclrtDestroyStream(stream));
    }
    // A stopped stream can still be destroyed (its queued work is dropped).
    let stream = create_stream();
    block(stream, notify);
    acl!(aclrtStreamStop(stream));
    acl!(aclrtDestroyStream(stream));
    let stream = create_stream();
    block(stream, notify);
    acl!(aclrtStreamStop(stream));
    acl!(aclrtDestroyStreamForce(stream));
}

/// The reference excludes streams bound to a model runtime instance (aclmdlRIBindStream) from
/// aclrtStreamStop and aclrtStreamAbort: while bound, before and after the instance is built,
/// both refuse it with 207000 and leave it as it was; once unbound it takes both again.
#[test]
fn stop_and_abort_refuse_a_stream_bound_to_a_model() {
    install();
    set_device(0);
    let stream = stream_with_flags(ACL_STREAM_PERSISTENT);
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    // Flag 0 is ACL_MODEL_STREAM_FLAG_HEAD.
    acl!(aclmdlRIBindStream(model, stream, 0));
    for built in [false, true] {
        if built {
            acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
        }
        fails!(
            aclrtStreamStop(stream),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "aclrtStreamStop"
        );
        fails!(
            aclrtStreamAbort(stream),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "aclrtStreamAbort"
        );
    }
    // Not stopped by the refused call: the instance still runs on another stream.
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    acl!(aclmdlRIUnbindStream(model, stream));
    acl!(aclrtStreamStop(stream));
    acl!(aclrtStreamAbort(stream));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtDestroyStream(exec));
}

#[test]
fn persistent_streams_keep_their_tasks_for_a_model() {
    install();
    set_device(4);
    let dev = malloc(64);
    let stream = stream_with_flags(ACL_STREAM_PERSISTENT);
    memset_async(dev, 64, 1, stream);
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(status(stream), ACL_STREAM_STATUS_COMPLETE);
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0), "not run");
    let event = create_event();
    assert_eq!(
        code!(aclrtRecordEvent(event, stream)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    assert!(recent_message().contains("PERSISTENT"));
    // Cleaning drops the kept tasks: task ids start again at 1.
    memset_async(dev, 64, 2, stream);
    let mut id = 0;
    acl!(aclrtGetThreadLastTaskId(&mut id));
    assert_eq!(id, 2);
    acl!(aclrtPersistentTaskClean(stream));
    memset_async(dev, 64, 3, stream);
    acl!(aclrtGetThreadLastTaskId(&mut id));
    assert_eq!(id, 1);
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0), "never run");
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn timed_event_waits_fail_the_waiting_stream_at_the_timeout() {
    install();
    set_device(5);
    let (producer, consumer) = (create_stream(), create_stream());
    let notify = create_notify();
    let event = create_event();
    block(producer, notify);
    acl!(aclrtRecordEvent(event, producer));
    acl!(aclrtStreamWaitEventWithTimeout(consumer, event, 1));
    assert_eq!(
        code!(aclrtSynchronizeStream(consumer)),
        ACL_ERROR_RT_WAIT_TIMEOUT
    );
    assert!(recent_message().contains("timed out"));
    // Satisfied waits in every form, on a stream without the failure (a record reports the
    // failures since the stream's previous record).
    acl!(aclrtRecordNotify(notify, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(producer));
    let consumer = create_stream();
    acl!(aclrtStreamWaitEventWithTimeout(consumer, event, 0));
    acl!(aclrtStreamWaitEventWithFlag(
        consumer,
        event,
        5,
        ACL_EVENT_WAIT_DEFAULT
    ));
    acl!(aclrtRecordEventWithFlag(
        event,
        consumer,
        ACL_EVENT_RECORD_DEFAULT
    ));
    acl!(aclrtSynchronizeEvent(event));
    acl!(aclrtSynchronizeStream(consumer));
}

#[test]
fn notifies_order_streams() {
    install();
    set_device(6);
    let dev = malloc(64);
    let (first, second) = (create_stream(), create_stream());
    let notify = create_notify();
    let mut id = u32::MAX;
    acl!(aclrtGetNotifyId(notify, &mut id));
    assert_ne!(id, u32::MAX);
    block(second, notify);
    memset_async(dev, 64, 7, second);
    assert_eq!(status(second), ACL_STREAM_STATUS_NOT_READY);
    memset_async(dev, 64, 1, first);
    acl!(aclrtRecordNotify(notify, first));
    acl!(aclrtSynchronizeStream(second));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 7));
    // The wait reset the notify: a second wait blocks until the next record.
    block(second, notify);
    assert_eq!(status(second), ACL_STREAM_STATUS_NOT_READY);
    acl!(aclrtRecordNotify(notify, first));
    acl!(aclrtSynchronizeStream(second));
    // A record nobody waited for is forgotten by a batch reset: the next wait times out, and
    // a wait that times out fails its stream.
    acl!(aclrtRecordNotify(notify, first));
    acl!(aclrtSynchronizeStream(first));
    let other = create_notify();
    let mut both = [notify, other];
    acl!(aclrtNotifyBatchReset(both.as_mut_ptr(), 2));
    acl!(aclrtWaitAndResetNotify(notify, second, 1));
    assert_eq!(
        code!(aclrtSynchronizeStream(second)),
        ACL_ERROR_RT_WAIT_TIMEOUT
    );
    recent_message();
    acl!(aclrtDestroyNotify(notify));
    acl!(aclrtDestroyNotify(other));
}

#[test]
fn value_waits_release_when_the_word_matches() {
    install();
    set_device(7);
    let (writer, waiter) = (create_stream(), create_stream());
    let word = malloc(8);
    let out = malloc(64);
    for (flag, initial, value, wanted) in [
        (ACL_STREAM_WAIT_VALUE_EQ, 0u64, 5u64, 5u64),
        (ACL_STREAM_WAIT_VALUE_GEQ, 0, 10, 12),
        (ACL_STREAM_WAIT_VALUE_AND, 0, 0b100, 0b110),
        (ACL_STREAM_WAIT_VALUE_NOR, u64::MAX, 0xff, 0xff00),
    ] {
        upload(word, &[initial]);
        acl!(aclrtValueWait(word, value, flag, waiter));
        memset_async(out, 64, flag as i32 + 1, waiter);
        assert_eq!(status(waiter), ACL_STREAM_STATUS_NOT_READY, "flag {flag}");
        acl!(aclrtValueWrite(word, wanted, 0, writer));
        acl!(aclrtSynchronizeStream(waiter));
        assert!(download::<u8>(out, 64).iter().all(|&b| b == flag as u8 + 1));
    }
    // A synchronous copy of the word releases a wait too.
    acl!(aclrtValueWait(word, 99, ACL_STREAM_WAIT_VALUE_EQ, waiter));
    upload(word, &[99u64]);
    acl!(aclrtSynchronizeStream(waiter));
}

#[test]
fn stream_configuration_handles_are_not_supported_on_an_atlas_a2() {
    install();
    set_device(0);
    // SAFETY: no preconditions.
    let config = unsafe { aclrtCreateStreamConfigHandle() };
    assert!(config.is_null());
    let message = recent_message();
    assert!(
        message.contains("aclrtCreateStreamConfigHandle"),
        "{message}"
    );
    assert!(message.contains("not supported"), "{message}");
    let (handle, value) = (any_config(), 3u32);
    let value = (&value as *const u32).cast();
    let code = code!(aclrtSetStreamConfigOpt(
        handle,
        ACL_RT_STREAM_PRIORITY,
        value,
        4
    ));
    assert_eq!(code, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    let mut stream = ptr::null_mut();
    let code = code!(aclrtCreateStreamV2(&mut stream, handle));
    assert_eq!(code, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    assert!(stream.is_null());
    let code = code!(aclrtDestroyStreamConfigHandle(handle));
    assert_eq!(code, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    recent_message();
}

#[test]
fn attributes_round_trip() {
    install();
    // A context of its own: choosing STOP makes every stream of the context stop on failure.
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 1));
    let stream = create_stream();
    let set = |attr, value: aclrtStreamAttrValue| {
        let mut value = value;
        acl!(aclrtSetStreamAttribute(stream, attr, &mut value));
        let mut back = aclrtStreamAttrValue::default();
        acl!(aclrtGetStreamAttribute(stream, attr, &mut back));
        // SAFETY: every union member is plain integers over the same bytes.
        unsafe { back.reserve }
    };
    let value = |f: fn(&mut aclrtStreamAttrValue)| {
        let mut v = aclrtStreamAttrValue::default();
        f(&mut v);
        v
    };
    assert_eq!(
        set(
            ACL_STREAM_ATTR_FAILURE_MODE,
            value(|v| v.failureMode = u64::from(ACL_STOP_ON_FAILURE))
        )[0],
        1
    );
    assert_eq!(
        set(
            ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK,
            value(|v| v.overflowSwitch = 1)
        )[0],
        1
    );
    assert_eq!(
        set(
            ACL_STREAM_ATTR_USER_CUSTOM_TAG,
            value(|v| v.userCustomTag = 77)
        )[0],
        77
    );
    // The operator information cache switch reads on only while the stream is being captured
    // (tests/capture.rs `the_cache_switch_reads_on_only_in_a_capture_and_joined_streams_share_it`).
    assert_eq!(
        set(
            ACL_STREAM_ATTR_CACHE_OP_INFO,
            value(|v| v.cacheOpInfoSwitch = 1)
        )[0],
        0
    );
    assert_eq!(
        set(ACL_STREAM_ATTR_PRIORITY, value(|v| v.streamPriority = 6))[0],
        6
    );
    let mut priority = 0;
    acl!(aclrtStreamGetPriority(stream, &mut priority));
    assert_eq!(priority, 6);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtDestroyContext(ctx));
}

type Seen = Mutex<Vec<(usize, aclrtStreamState)>>;

unsafe extern "C" fn on_state(stream: aclrtStream, state: aclrtStreamState, args: *mut c_void) {
    // SAFETY: registered with a pointer to a static `Seen`.
    let seen = unsafe { &*args.cast::<Seen>() };
    seen.lock().unwrap().push((stream as usize, state));
}

#[test]
fn state_callbacks_see_creation_and_destruction() {
    static SEEN: Seen = Mutex::new(Vec::new());
    install();
    set_device(2);
    let name = c_string("streams-test");
    let args = (&SEEN as *const Seen).cast_mut().cast();
    acl!(aclrtRegStreamStateCallback(
        name.as_ptr(),
        Some(on_state),
        args
    ));
    let stream = create_stream();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtRegStreamStateCallback(name.as_ptr(), None, args));
    let later = create_stream();
    acl!(aclrtDestroyStream(later));
    let seen = SEEN.lock().unwrap();
    let ours: Vec<_> = seen.iter().filter(|(s, _)| *s == stream as usize).collect();
    assert_eq!(
        ours,
        [
            &(stream as usize, ACL_RT_STREAM_STATE_CREATE_POST),
            &(stream as usize, ACL_RT_STREAM_STATE_DESTROY_PRE)
        ]
    );
    assert!(
        !seen.iter().any(|(s, _)| *s == later as usize),
        "unregistered"
    );
}

#[test]
fn the_last_task_id_counts_the_threads_submissions() {
    install();
    set_device(3);
    let stream = create_stream();
    let dev = malloc(64);
    for n in 1..=3 {
        memset_async(dev, 64, n, stream);
        let mut id = 0;
        acl!(aclrtGetThreadLastTaskId(&mut id));
        assert_eq!(id, n as u32);
    }
    // Only streams the user created count: work on the default stream leaves the id alone.
    memset_async(dev, 64, 9, ptr::null_mut());
    let mut id = 0;
    acl!(aclrtGetThreadLastTaskId(&mut id));
    assert_eq!(id, 3);
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    acl!(aclrtDestroyStream(stream));
}

fn dropped_notify() -> aclrtNotify {
    let notify = create_notify();
    acl!(aclrtDestroyNotify(notify));
    notify
}

fn device_only_notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut notify,
        u64::from(ACL_NOTIFY_DEVICE_USE_ONLY)
    ));
    notify
}

/// A handle pointer for the unsupported configuration functions, which never read it (no call
/// can make a real one).
fn any_config() -> *mut aclrtStreamConfigHandle {
    ptr::NonNull::dangling().as_ptr()
}

/// The current context's default stream, by its own handle rather than NULL.
fn default_stream() -> aclrtStream {
    let mut stream = ptr::null_mut();
    acl!(aclrtCtxGetCurrentDefaultStream(&mut stream));
    stream
}

fn set_attribute(stream: aclrtStream, attr: aclrtStreamAttr, raw: u64) -> aclError {
    let mut value = aclrtStreamAttrValue { failureMode: raw };
    code!(aclrtSetStreamAttribute(stream, attr, &mut value))
}

#[test]
fn every_error_path() {
    install();
    run_table(&[
        case("stop NULL", "aclrtStreamStop", 100000, 0, || {
            code!(aclrtStreamStop(ptr::null_mut()))
        }),
        case(
            "stop the default stream's handle",
            "aclrtStreamStop",
            107000,
            0,
            || code!(aclrtStreamStop(default_stream())),
        ),
        case(
            "clean the default stream's handle",
            "aclrtPersistentTaskClean",
            107000,
            0,
            || code!(aclrtPersistentTaskClean(default_stream())),
        ),
        case("stop stale", "aclrtStreamStop", 107017, 0, || {
            let stream = create_stream();
            acl!(aclrtDestroyStream(stream));
            code!(aclrtStreamStop(stream))
        }),
        case("stop foreign", "aclrtStreamStop", 107003, 1, || {
            let stream = create_stream();
            set_device(0);
            code!(aclrtStreamStop(stream))
        }),
        case("abort stale", "aclrtStreamAbort", 107017, 0, || {
            let stream = create_stream();
            acl!(aclrtDestroyStream(stream));
            code!(aclrtStreamAbort(stream))
        }),
        case(
            "profiling marker of NULL",
            "aclrtProfTrace",
            100000,
            0,
            || code!(aclrtProfTrace(ptr::null_mut(), 4, ptr::null_mut())),
        ),
        case(
            "profiling marker of 19 bytes",
            "aclrtProfTrace",
            100000,
            0,
            || {
                let mut data = [0u8; 19];
                code!(aclrtProfTrace(
                    data.as_mut_ptr().cast(),
                    19,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "profiling marker of a negative length",
            "aclrtProfTrace",
            100000,
            0,
            || {
                let mut data = [0u8; 4];
                code!(aclrtProfTrace(
                    data.as_mut_ptr().cast(),
                    -1,
                    ptr::null_mut()
                ))
            },
        ),
        // userdata and length are checked before the stream is looked up.
        case(
            "profiling marker of NULL on a foreign stream",
            "aclrtProfTrace",
            100000,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                code!(aclrtProfTrace(ptr::null_mut(), 4, stream))
            },
        ),
        case(
            "profiling marker of 19 bytes on a destroyed stream",
            "aclrtProfTrace",
            100000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                let mut data = [0u8; 19];
                code!(aclrtProfTrace(data.as_mut_ptr().cast(), 19, stream))
            },
        ),
        case(
            "profiling marker on a foreign stream",
            "aclrtProfTrace",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                let mut data = [0u8; 4];
                code!(aclrtProfTrace(data.as_mut_ptr().cast(), 4, stream))
            },
        ),
        case(
            "batch reset of NULL",
            "aclrtNotifyBatchReset",
            100000,
            0,
            || code!(aclrtNotifyBatchReset(ptr::null_mut(), 1)),
        ),
        case(
            "batch reset of 0 notifies",
            "aclrtNotifyBatchReset",
            100000,
            0,
            || {
                let mut notifies = [create_notify()];
                code!(aclrtNotifyBatchReset(notifies.as_mut_ptr(), 0))
            },
        ),
        case(
            "batch reset with a NULL entry",
            "aclrtNotifyBatchReset",
            100000,
            0,
            || {
                let mut notifies = [create_notify(), ptr::null_mut()];
                code!(aclrtNotifyBatchReset(notifies.as_mut_ptr(), 2))
            },
        ),
        case(
            "batch reset with a destroyed notify",
            "aclrtNotifyBatchReset",
            107017,
            0,
            || {
                let stale = create_notify();
                acl!(aclrtDestroyNotify(stale));
                let mut notifies = [create_notify(), stale];
                code!(aclrtNotifyBatchReset(notifies.as_mut_ptr(), 2))
            },
        ),
        case(
            "batch reset with a destroyed notify before a NULL entry: every entry is checked \
             for NULL before any is looked up",
            "aclrtNotifyBatchReset",
            100000,
            0,
            || {
                let stale = create_notify();
                acl!(aclrtDestroyNotify(stale));
                let mut notifies = [stale, ptr::null_mut()];
                code!(aclrtNotifyBatchReset(notifies.as_mut_ptr(), 2))
            },
        ),
        case(
            "persistent clean of NULL",
            "aclrtPersistentTaskClean",
            100000,
            0,
            || code!(aclrtPersistentTaskClean(ptr::null_mut())),
        ),
        case(
            "persistent clean of a plain stream",
            "aclrtPersistentTaskClean",
            107000,
            0,
            || code!(aclrtPersistentTaskClean(create_stream())),
        ),
        case(
            "persistent clean of a foreign stream",
            "aclrtPersistentTaskClean",
            107003,
            1,
            || {
                let stream = stream_with_flags(ACL_STREAM_PERSISTENT);
                set_device(0);
                code!(aclrtPersistentTaskClean(stream))
            },
        ),
        case(
            "counted notify into NULL",
            "aclrtCntNotifyCreate",
            100000,
            0,
            || code!(aclrtCntNotifyCreate(ptr::null_mut(), 0)),
        ),
        case(
            "counted notify on an Atlas A2",
            "aclrtCntNotifyCreate",
            207000,
            0,
            || {
                let mut notify = ptr::null_mut();
                code!(aclrtCntNotifyCreate(&mut notify, 0))
            },
        ),
        case(
            "record a NULL counted notify",
            "aclrtCntNotifyRecord",
            100000,
            0,
            || {
                record_counted_notify(
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE,
                )
            },
        ),
        case(
            "record a counted notify with NULL info",
            "aclrtCntNotifyRecord",
            100000,
            0,
            || {
                code!(aclrtCntNotifyRecord(
                    ptr::dangling_mut(),
                    ptr::null_mut(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "record a counted notify on an Atlas A2",
            "aclrtCntNotifyRecord",
            207000,
            0,
            || {
                let mut info = aclrtCntNotifyRecordInfo {
                    mode: ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE,
                    value: 1,
                };
                code!(aclrtCntNotifyRecord(
                    ptr::dangling_mut(),
                    ptr::null_mut(),
                    &mut info
                ))
            },
        ),
        case(
            "wait on a counted notify with NULL info",
            "aclrtCntNotifyWaitWithTimeout",
            100000,
            0,
            || {
                code!(aclrtCntNotifyWaitWithTimeout(
                    ptr::dangling_mut(),
                    ptr::null_mut(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "wait on a NULL counted notify",
            "aclrtCntNotifyWaitWithTimeout",
            100000,
            0,
            || {
                // SAFETY: plain integers.
                let mut info: aclrtCntNotifyWaitInfo = unsafe { std::mem::zeroed() };
                code!(aclrtCntNotifyWaitWithTimeout(
                    ptr::null_mut(),
                    ptr::null_mut(),
                    &mut info
                ))
            },
        ),
        case(
            "wait on a counted notify on an Atlas A2",
            "aclrtCntNotifyWaitWithTimeout",
            207000,
            0,
            || {
                // SAFETY: plain integers.
                let mut info: aclrtCntNotifyWaitInfo = unsafe { std::mem::zeroed() };
                code!(aclrtCntNotifyWaitWithTimeout(
                    ptr::dangling_mut(),
                    ptr::null_mut(),
                    &mut info
                ))
            },
        ),
        case(
            "reset a NULL counted notify",
            "aclrtCntNotifyReset",
            100000,
            0,
            || code!(aclrtCntNotifyReset(ptr::null_mut(), ptr::null_mut())),
        ),
        case(
            "reset a counted notify on an Atlas A2",
            "aclrtCntNotifyReset",
            207000,
            0,
            || code!(aclrtCntNotifyReset(ptr::dangling_mut(), ptr::null_mut())),
        ),
        case(
            "id of a counted notify into NULL",
            "aclrtCntNotifyGetId",
            100000,
            0,
            || code!(aclrtCntNotifyGetId(ptr::dangling_mut(), ptr::null_mut())),
        ),
        case(
            "id of a NULL counted notify",
            "aclrtCntNotifyGetId",
            100000,
            0,
            || {
                let mut id = 7;
                let code = code!(aclrtCntNotifyGetId(ptr::null_mut(), &mut id));
                assert_eq!(id, 7, "a refused query wrote its output");
                code
            },
        ),
        case(
            "id of a counted notify on an Atlas A2",
            "aclrtCntNotifyGetId",
            207000,
            0,
            || {
                let mut id = 0;
                code!(aclrtCntNotifyGetId(ptr::dangling_mut(), &mut id))
            },
        ),
        case(
            "destroy a NULL counted notify",
            "aclrtCntNotifyDestroy",
            100000,
            0,
            || code!(aclrtCntNotifyDestroy(ptr::null_mut())),
        ),
        case(
            "destroy a counted notify on an Atlas A2",
            "aclrtCntNotifyDestroy",
            207000,
            0,
            || code!(aclrtCntNotifyDestroy(ptr::dangling_mut())),
        ),
        // The counted notify functions check NULL pointers, then values, then look their
        // stream up as every stream-taking call does, before refusing the feature.
        case(
            "counted notify with flag 1",
            "aclrtCntNotifyCreate",
            107000,
            0,
            || {
                let mut notify = ptr::null_mut();
                let code = code!(aclrtCntNotifyCreate(&mut notify, 1));
                assert!(notify.is_null(), "a refused creation wrote its output");
                code
            },
        ),
        case(
            "record a counted notify in mode 3 on a destroyed stream",
            "aclrtCntNotifyRecord",
            107000,
            0,
            || record_counted(destroyed_stream(), 3),
        ),
        case(
            "record a NULL counted notify on a destroyed stream",
            "aclrtCntNotifyRecord",
            100000,
            0,
            || {
                record_counted_notify(
                    ptr::null_mut(),
                    destroyed_stream(),
                    ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE,
                )
            },
        ),
        case(
            "record a counted notify on a destroyed stream",
            "aclrtCntNotifyRecord",
            107017,
            0,
            || record_counted(destroyed_stream(), ACL_RT_CNT_NOTIFY_RECORD_BIT_AND_MODE),
        ),
        case(
            "record a counted notify on another context's stream",
            "aclrtCntNotifyRecord",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                record_counted(stream, ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE)
            },
        ),
        case(
            "record a counted notify without a context",
            "aclrtCntNotifyRecord",
            107002,
            -1,
            || record_counted(ptr::null_mut(), ACL_RT_CNT_NOTIFY_RECORD_SET_VALUE_MODE),
        ),
        case(
            "wait on a counted notify in mode 5 on a destroyed stream",
            "aclrtCntNotifyWaitWithTimeout",
            107000,
            0,
            || wait_counted(destroyed_stream(), 5, 0),
        ),
        case(
            "wait on a counted notify with isClear 2 on a destroyed stream",
            "aclrtCntNotifyWaitWithTimeout",
            107000,
            0,
            || wait_counted(destroyed_stream(), ACL_RT_CNT_NOTIFY_WAIT_EQUAL_MODE, 2),
        ),
        case(
            "wait on a counted notify on a destroyed stream",
            "aclrtCntNotifyWaitWithTimeout",
            107017,
            0,
            || {
                let mode = ACL_RT_CNT_NOTIFY_WAIT_EQUAL_WITH_BITMASK_MODE;
                wait_counted(destroyed_stream(), mode, 1)
            },
        ),
        case(
            "wait on a counted notify on another context's stream",
            "aclrtCntNotifyWaitWithTimeout",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                wait_counted(stream, ACL_RT_CNT_NOTIFY_WAIT_LESS_MODE, 0)
            },
        ),
        case(
            "wait on a counted notify without a context",
            "aclrtCntNotifyWaitWithTimeout",
            107002,
            -1,
            || wait_counted(ptr::null_mut(), ACL_RT_CNT_NOTIFY_WAIT_LESS_MODE, 0),
        ),
        case(
            "reset a NULL counted notify on a destroyed stream",
            "aclrtCntNotifyReset",
            100000,
            0,
            || code!(aclrtCntNotifyReset(ptr::null_mut(), destroyed_stream())),
        ),
        case(
            "reset a counted notify on a destroyed stream",
            "aclrtCntNotifyReset",
            107017,
            0,
            || code!(aclrtCntNotifyReset(ptr::dangling_mut(), destroyed_stream())),
        ),
        case(
            "reset a counted notify on another context's stream",
            "aclrtCntNotifyReset",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                code!(aclrtCntNotifyReset(ptr::dangling_mut(), stream))
            },
        ),
        case(
            "reset a counted notify without a context",
            "aclrtCntNotifyReset",
            107002,
            -1,
            || code!(aclrtCntNotifyReset(ptr::dangling_mut(), ptr::null_mut())),
        ),
        case(
            "abort without context",
            "aclrtStreamAbort",
            107002,
            -1,
            || code!(aclrtStreamAbort(ptr::null_mut())),
        ),
        case(
            "state callback NULL name",
            "aclrtRegStreamStateCallback",
            100000,
            0,
            || {
                code!(aclrtRegStreamStateCallback(
                    ptr::null(),
                    Some(on_state),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "state callback empty name",
            "aclrtRegStreamStateCallback",
            100000,
            0,
            || {
                let name = c_string("");
                code!(aclrtRegStreamStateCallback(
                    name.as_ptr(),
                    Some(on_state),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "state callback registered twice",
            "aclrtRegStreamStateCallback",
            107000,
            0,
            || {
                static SEEN: Seen = Mutex::new(Vec::new());
                let args = (&SEEN as *const Seen).cast_mut().cast();
                let name = c_string("registered twice");
                acl!(aclrtRegStreamStateCallback(
                    name.as_ptr(),
                    Some(on_state),
                    args
                ));
                code!(aclrtRegStreamStateCallback(
                    name.as_ptr(),
                    Some(on_state),
                    args
                ))
            },
        ),
        case(
            "unregister an unknown name",
            "aclrtRegStreamStateCallback",
            107000,
            0,
            || {
                let name = c_string("never registered");
                code!(aclrtRegStreamStateCallback(
                    name.as_ptr(),
                    None,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "task id NULL",
            "aclrtGetThreadLastTaskId",
            100000,
            0,
            || code!(aclrtGetThreadLastTaskId(ptr::null_mut())),
        ),
        case(
            "wait timeout negative",
            "aclrtStreamWaitEventWithTimeout",
            107000,
            0,
            || {
                code!(aclrtStreamWaitEventWithTimeout(
                    ptr::null_mut(),
                    create_event(),
                    -1
                ))
            },
        ),
        case(
            "wait on a stale event",
            "aclrtStreamWaitEventWithTimeout",
            107017,
            0,
            || {
                let event = create_event();
                acl!(aclrtDestroyEvent(event));
                code!(aclrtStreamWaitEventWithTimeout(ptr::null_mut(), event, 1))
            },
        ),
        case(
            "record flag unknown",
            "aclrtRecordEventWithFlag",
            100000,
            0,
            || code!(aclrtRecordEventWithFlag(create_event(), ptr::null_mut(), 7)),
        ),
        case(
            "record flag EXTERNAL of a legacy event",
            "aclrtRecordEventWithFlag",
            107000,
            0,
            || {
                code!(aclrtRecordEventWithFlag(
                    create_event(),
                    ptr::null_mut(),
                    ACL_EVENT_RECORD_EXTERNAL
                ))
            },
        ),
        case(
            "wait flag unknown",
            "aclrtStreamWaitEventWithFlag",
            100000,
            0,
            || {
                code!(aclrtStreamWaitEventWithFlag(
                    ptr::null_mut(),
                    create_event(),
                    0,
                    3
                ))
            },
        ),
        case(
            "wait flag EXTERNAL of a legacy event",
            "aclrtStreamWaitEventWithFlag",
            107000,
            0,
            || {
                code!(aclrtStreamWaitEventWithFlag(
                    ptr::null_mut(),
                    create_event(),
                    0,
                    ACL_EVENT_WAIT_EXTERNAL
                ))
            },
        ),
        case("notify out NULL", "aclrtCreateNotify", 100000, 0, || {
            code!(aclrtCreateNotify(ptr::null_mut(), 0))
        }),
        case("notify flag 2", "aclrtCreateNotify", 107000, 0, || {
            let mut notify = ptr::null_mut();
            code!(aclrtCreateNotify(&mut notify, 2))
        }),
        case(
            "notify without context",
            "aclrtCreateNotify",
            107002,
            -1,
            || {
                let mut notify = ptr::null_mut();
                code!(aclrtCreateNotify(&mut notify, 0))
            },
        ),
        case(
            "destroy notify NULL",
            "aclrtDestroyNotify",
            100000,
            0,
            || code!(aclrtDestroyNotify(ptr::null_mut())),
        ),
        case(
            "destroy notify twice",
            "aclrtDestroyNotify",
            107017,
            0,
            || code!(aclrtDestroyNotify(dropped_notify())),
        ),
        case(
            "record a stale notify",
            "aclrtRecordNotify",
            107017,
            0,
            || code!(aclrtRecordNotify(dropped_notify(), ptr::null_mut())),
        ),
        case(
            "record a device-only notify",
            "aclrtRecordNotify",
            107000,
            0,
            || code!(aclrtRecordNotify(device_only_notify(), ptr::null_mut())),
        ),
        case(
            "notify of another device",
            "aclrtWaitAndResetNotify",
            107003,
            1,
            || {
                let notify = create_notify();
                set_device(0);
                code!(aclrtWaitAndResetNotify(notify, ptr::null_mut(), 0))
            },
        ),
        case(
            "wait on a foreign stream",
            "aclrtWaitAndResetNotify",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                code!(aclrtWaitAndResetNotify(create_notify(), stream, 0))
            },
        ),
        case("notify id NULL", "aclrtGetNotifyId", 100000, 0, || {
            code!(aclrtGetNotifyId(create_notify(), ptr::null_mut()))
        }),
        case(
            "notify id of a destroyed notify into NULL",
            "aclrtGetNotifyId",
            100000,
            0,
            || {
                let notify = create_notify();
                acl!(aclrtDestroyNotify(notify));
                code!(aclrtGetNotifyId(notify, ptr::null_mut()))
            },
        ),
        case("notify id of NULL", "aclrtGetNotifyId", 100000, 0, || {
            let mut id = 0;
            code!(aclrtGetNotifyId(ptr::null_mut(), &mut id))
        }),
        case("value write NULL", "aclrtValueWrite", 100000, 0, || {
            code!(aclrtValueWrite(ptr::null_mut(), 1, 0, ptr::null_mut()))
        }),
        case("value write flag", "aclrtValueWrite", 100000, 0, || {
            code!(aclrtValueWrite(malloc(8), 1, 1, ptr::null_mut()))
        }),
        case(
            "value write misaligned",
            "aclrtValueWrite",
            107000,
            0,
            || {
                let dev = malloc(16).cast::<u8>();
                code!(aclrtValueWrite(
                    dev.wrapping_add(4).cast(),
                    1,
                    0,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "value wait misaligned on a destroyed stream: the address is checked first",
            "aclrtValueWait",
            107000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                let dev = malloc(16).cast::<u8>();
                code!(aclrtValueWait(dev.wrapping_add(4).cast(), 1, 0, stream))
            },
        ),
        case(
            "value write host memory",
            "aclrtValueWrite",
            107000,
            0,
            || code!(aclrtValueWrite(malloc_host(8), 1, 0, ptr::null_mut())),
        ),
        case(
            "value write past the allocation",
            "aclrtValueWrite",
            107000,
            0,
            || {
                let dev = malloc(64).cast::<u8>();
                // aclrtMalloc pads 32 bytes; the last word of the padding's end overruns.
                code!(aclrtValueWrite(
                    dev.wrapping_add(96).cast(),
                    1,
                    0,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "value write to another device",
            "aclrtValueWrite",
            107000,
            1,
            || {
                let dev = malloc(8);
                set_device(0);
                code!(aclrtValueWrite(dev, 1, 0, ptr::null_mut()))
            },
        ),
        case("value wait NULL", "aclrtValueWait", 100000, 0, || {
            code!(aclrtValueWait(ptr::null_mut(), 1, 0, ptr::null_mut()))
        }),
        case("value wait flag 4", "aclrtValueWait", 100000, 0, || {
            code!(aclrtValueWait(malloc(8), 1, 4, ptr::null_mut()))
        }),
        case(
            "value wait without context",
            "aclrtValueWait",
            107002,
            -1,
            || {
                let mut word = 0u64;
                code!(aclrtValueWait(
                    (&mut word as *mut u64).cast(),
                    1,
                    0,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "destroy config NULL",
            "aclrtDestroyStreamConfigHandle",
            100000,
            0,
            || code!(aclrtDestroyStreamConfigHandle(ptr::null_mut())),
        ),
        case(
            "destroy config",
            "aclrtDestroyStreamConfigHandle",
            207000,
            0,
            || code!(aclrtDestroyStreamConfigHandle(any_config())),
        ),
        case(
            "config opt NULL handle",
            "aclrtSetStreamConfigOpt",
            100000,
            0,
            || {
                let value = 0u32;
                code!(aclrtSetStreamConfigOpt(
                    ptr::null_mut(),
                    ACL_RT_STREAM_FLAG,
                    (&value as *const u32).cast(),
                    4
                ))
            },
        ),
        case(
            "config opt NULL value",
            "aclrtSetStreamConfigOpt",
            100000,
            0,
            || {
                code!(aclrtSetStreamConfigOpt(
                    any_config(),
                    ACL_RT_STREAM_FLAG,
                    ptr::null(),
                    4
                ))
            },
        ),
        case("config opt", "aclrtSetStreamConfigOpt", 207000, 0, || {
            let value = 0u32;
            code!(aclrtSetStreamConfigOpt(
                any_config(),
                ACL_RT_STREAM_FLAG,
                (&value as *const u32).cast(),
                4
            ))
        }),
        case("V2 NULL stream", "aclrtCreateStreamV2", 100000, 0, || {
            code!(aclrtCreateStreamV2(ptr::null_mut(), any_config()))
        }),
        case("V2 NULL config", "aclrtCreateStreamV2", 100000, 0, || {
            let mut stream = ptr::null_mut();
            code!(aclrtCreateStreamV2(&mut stream, ptr::null()))
        }),
        case("V2", "aclrtCreateStreamV2", 207000, 0, || {
            let mut stream = ptr::null_mut();
            code!(aclrtCreateStreamV2(&mut stream, any_config()))
        }),
        case(
            "available NULL",
            "aclrtGetStreamAvailableNum",
            100000,
            0,
            || code!(aclrtGetStreamAvailableNum(ptr::null_mut())),
        ),
        case(
            "available without context",
            "aclrtGetStreamAvailableNum",
            107002,
            -1,
            || {
                let mut count = 0;
                code!(aclrtGetStreamAvailableNum(&mut count))
            },
        ),
        case(
            "set attribute NULL",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || {
                code!(aclrtSetStreamAttribute(
                    ptr::null_mut(),
                    ACL_STREAM_ATTR_PRIORITY,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "set attribute unknown",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || set_attribute(ptr::null_mut(), 42, 0),
        ),
        case(
            "failure mode of the default stream",
            "aclrtSetStreamAttribute",
            107000,
            0,
            || set_attribute(ptr::null_mut(), ACL_STREAM_ATTR_FAILURE_MODE, 1),
        ),
        case(
            "failure mode of the default stream's handle",
            "aclrtSetStreamAttribute",
            107000,
            0,
            || set_attribute(default_stream(), ACL_STREAM_ATTR_FAILURE_MODE, 1),
        ),
        case(
            "failure mode 2",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || set_attribute(create_stream(), ACL_STREAM_ATTR_FAILURE_MODE, 2),
        ),
        case(
            "failure mode set twice",
            "aclrtSetStreamFailureMode",
            107000,
            0,
            || {
                let stream = create_stream();
                // CONTINUE both times: a STOP would reach every stream of the context.
                acl!(aclrtSetStreamFailureMode(
                    stream,
                    u64::from(ACL_CONTINUE_ON_FAILURE)
                ));
                code!(aclrtSetStreamFailureMode(
                    stream,
                    u64::from(ACL_CONTINUE_ON_FAILURE)
                ))
            },
        ),
        case(
            "overflow switch 2",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || set_attribute(ptr::null_mut(), ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, 2),
        ),
        case(
            "cache switch 2",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || set_attribute(ptr::null_mut(), ACL_STREAM_ATTR_CACHE_OP_INFO, 2),
        ),
        case("priority 8", "aclrtSetStreamAttribute", 107000, 0, || {
            set_attribute(ptr::null_mut(), ACL_STREAM_ATTR_PRIORITY, 8)
        }),
        case(
            "set attribute stale",
            "aclrtSetStreamAttribute",
            107017,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                set_attribute(stream, ACL_STREAM_ATTR_PRIORITY, 1)
            },
        ),
        case(
            "set attribute unknown on a stale stream: the attribute is checked first",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                set_attribute(stream, 0, 1)
            },
        ),
        case(
            "overflow switch 2 on a stale stream: the value is checked first",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                set_attribute(stream, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, 2)
            },
        ),
        case(
            "priority 8 on a stale stream: the value is checked first",
            "aclrtSetStreamAttribute",
            107000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                set_attribute(stream, ACL_STREAM_ATTR_PRIORITY, 8)
            },
        ),
        case(
            "failure mode 2 of the default stream: the mode is checked first",
            "aclrtSetStreamAttribute",
            100000,
            0,
            || set_attribute(ptr::null_mut(), ACL_STREAM_ATTR_FAILURE_MODE, 2),
        ),
        case(
            "overflow switch flag 2 on a stale stream: the flag is checked first",
            "aclrtSetStreamOverflowSwitch",
            100000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                code!(aclrtSetStreamOverflowSwitch(stream, 2))
            },
        ),
        case(
            "get attribute NULL",
            "aclrtGetStreamAttribute",
            100000,
            0,
            || {
                code!(aclrtGetStreamAttribute(
                    ptr::null_mut(),
                    ACL_STREAM_ATTR_PRIORITY,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "get attribute unknown",
            "aclrtGetStreamAttribute",
            100000,
            0,
            || {
                let mut value = aclrtStreamAttrValue::default();
                code!(aclrtGetStreamAttribute(ptr::null_mut(), 0, &mut value))
            },
        ),
        case(
            "get attribute unknown of a stale stream: the attribute is checked first",
            "aclrtGetStreamAttribute",
            100000,
            0,
            || {
                let stream = create_stream();
                acl!(aclrtDestroyStream(stream));
                let mut value = aclrtStreamAttrValue::default();
                code!(aclrtGetStreamAttribute(stream, 0, &mut value))
            },
        ),
        case(
            "submission during an abort",
            "aclrtMemsetAsync",
            107023,
            0,
            submission_during_an_abort,
        ),
    ]);
}

/// Submits to a stream while another thread aborts it: the abort waits for the host function
/// running on the stream, which holds it until the submission has been refused.
fn submission_during_an_abort() -> aclError {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STARTED: AtomicBool = AtomicBool::new(false);
    static RELEASE: AtomicBool = AtomicBool::new(false);
    unsafe extern "C" fn hold(_: *mut c_void) {
        STARTED.store(true, Ordering::Release);
        while !RELEASE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclrtLaunchHostFunc(stream, Some(hold), ptr::null_mut()));
    // An abort that came before the worker took the host function would discard it, and
    // nothing would then hold the abort open for the submission below.
    while !STARTED.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let handle = stream as usize;
    let aborter = std::thread::spawn(move || {
        set_device(0);
        acl!(aclrtStreamAbort(handle as aclrtStream));
    });
    // The abort is under way once the stream's query fails with 107023.
    let mut st = 0;
    while code!(aclrtStreamQuery(stream, &mut st)) != ACL_ERROR_RT_STREAM_ABORT {
        std::thread::yield_now();
    }
    recent_message();
    let code = code!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    RELEASE.store(true, Ordering::Release);
    aborter.join().unwrap();
    code
}

/// A synchronous copy waits for the kernels already running, but never keeps a kernel from
/// starting: here the running kernel waits for one launched after the copy began.
#[test]
fn a_synchronous_copy_does_not_keep_later_kernels_from_starting() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static FLAG: AtomicBool = AtomicBool::new(false);
    install();
    set_device(4);
    npu_sim::kernel::register("wait_for_flag", |_, _, _| {
        while !FLAG.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        0
    })
    .unwrap();
    npu_sim::kernel::register("set_flag", |_, _, _| {
        FLAG.store(true, Ordering::Release);
        0
    })
    .unwrap();
    let bin = registry_binary(&["wait_for_flag", "set_flag"]);
    let (waiter, setter) = (function(bin, "wait_for_flag"), function(bin, "set_flag"));
    let (first, second) = (create_stream(), create_stream());
    let launch = |func, stream| {
        acl!(aclrtLaunchKernelWithHostArgs(
            func,
            1,
            stream,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            0
        ));
    };
    let dev = malloc(64) as usize;
    launch(waiter, first);
    let copy = std::thread::spawn(move || {
        set_device(4);
        download::<u8>(dev as *const c_void, 64)
    });
    launch(setter, second);
    assert!(copy.join().unwrap().iter().all(|&b| b == 0));
    acl!(aclrtSynchronizeStream(first));
    acl!(aclrtSynchronizeStream(second));
}
