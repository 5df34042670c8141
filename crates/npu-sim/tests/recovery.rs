//! Recovering a device after a fault: aclrtDeviceTaskAbort with its callbacks and timeout,
//! and uncorrectable memory errors (npusimInjectMemUce, aclrtGetMemUceInfo, aclrtMemUceRepair,
//! aclrtRepairError, aclrtGetErrorVerbose's detail). An abort acts on a whole device and its
//! callbacks are process-wide, so every test has a device of its own and every callback acts
//! on its test's device only.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(7).install().unwrap();
        // One recording callback for the process: two would record every abort twice.
        register("recovery-stages", Some(record_stage));
    });
}

/// The calls of the abort callbacks: (device, stage, timeout).
static STAGES: Mutex<Vec<(i32, aclrtDeviceTaskAbortStage, u32)>> = Mutex::new(Vec::new());

unsafe extern "C" fn record_stage(
    device: i32,
    stage: aclrtDeviceTaskAbortStage,
    timeout: u32,
    _: *mut c_void,
) -> i32 {
    STAGES.lock().unwrap().push((device, stage, timeout));
    0
}

fn stages_of(device: i32) -> Vec<(aclrtDeviceTaskAbortStage, u32)> {
    STAGES
        .lock()
        .unwrap()
        .iter()
        .filter(|&&(d, _, _)| d == device)
        .map(|&(_, stage, timeout)| (stage, timeout))
        .collect()
}

fn register(name: &str, callback: aclrtDeviceTaskAbortCallback) {
    let name = c_string(name);
    acl!(aclrtSetDeviceTaskAbortCallback(
        name.as_ptr(),
        callback,
        ptr::null_mut()
    ));
}

fn create_notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut notify, 0));
    notify
}

/// Queues on `stream` a wait that nothing satisfies, then a memset of `dev` behind it.
fn queue_blocked_memset(stream: aclrtStream, notify: aclrtNotify, dev: *mut c_void, len: usize) {
    acl!(aclrtWaitAndResetNotify(notify, stream, 0));
    acl!(aclrtMemsetAsync(dev, len, 0xAB, len, stream));
}

#[test]
fn a_device_task_abort_drops_the_queued_work_of_every_stream_of_every_context() {
    install();
    set_device(0);
    let notify = create_notify();
    let primary_stream = create_stream();
    let event = create_event();
    // A second context on the same device, with a stream of its own.
    let mut primary = ptr::null_mut();
    acl!(aclrtGetCurrentContext(&mut primary));
    let mut other = ptr::null_mut();
    acl!(aclrtCreateContext(&mut other, 0));
    let other_stream = create_stream();
    let dev = malloc(3 * 256);
    let part = |i: usize| dev.cast::<u8>().wrapping_add(i * 256).cast::<c_void>();
    queue_blocked_memset(other_stream, notify, part(1), 256);
    acl!(aclrtSetCurrentContext(primary));
    queue_blocked_memset(primary_stream, notify, part(0), 256);
    acl!(aclrtRecordEvent(event, primary_stream));
    queue_blocked_memset(ptr::null_mut(), notify, part(2), 256);

    acl!(aclrtDeviceTaskAbort(0, 0));

    assert_eq!(
        stages_of(0),
        [
            (ACL_RT_DEVICE_TASK_ABORT_PRE, 0),
            (ACL_RT_DEVICE_TASK_ABORT_POST, 0)
        ]
    );
    // Nothing queued ran, and the dropped record fails its waits.
    assert_eq!(download::<u8>(dev, 3 * 256), vec![0; 3 * 256]);
    assert_eq!(
        code!(aclrtSynchronizeEvent(event)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    recent_message();
    // Every stream is empty, without errors, and runs new work.
    for (context, stream) in [
        (primary, primary_stream),
        (primary, ptr::null_mut()),
        (other, other_stream),
    ] {
        acl!(aclrtSetCurrentContext(context));
        acl!(aclrtSynchronizeStream(stream));
        acl!(aclrtMemsetAsync(part(0), 256, 7, 256, stream));
        acl!(aclrtSynchronizeStream(stream));
    }
    assert_eq!(download::<u8>(dev, 256), vec![7; 256]);
    acl!(aclrtDestroyStream(other_stream));
    acl!(aclrtSetCurrentContext(primary));
    acl!(aclrtDestroyContext(other));
    acl!(aclrtDestroyStream(primary_stream));
    acl!(aclrtFree(dev));
}

/// Set while the veto test wants device 2's aborts stopped before they start.
static VETO: AtomicBool = AtomicBool::new(false);
/// What a submission to device 2 returned from inside its PRE callback.
static SUBMITTED_DURING_ABORT: Mutex<Vec<aclError>> = Mutex::new(Vec::new());

unsafe extern "C" fn veto_device_2(
    device: i32,
    stage: aclrtDeviceTaskAbortStage,
    _: u32,
    _: *mut c_void,
) -> i32 {
    if device != 2 || stage != ACL_RT_DEVICE_TASK_ABORT_PRE {
        return 0;
    }
    // The callback runs on the aborting thread, which is bound to device 2.
    let mut word = ptr::null_mut();
    // SAFETY: a valid out pointer.
    let code = unsafe {
        let code = aclrtMalloc(&mut word, 64, ACL_MEM_MALLOC_HUGE_FIRST);
        assert_eq!(code, 0);
        let code = aclrtMemsetAsync(word, 64, 1, 64, ptr::null_mut());
        assert_eq!(aclrtFree(word), 0);
        code
    };
    SUBMITTED_DURING_ABORT.lock().unwrap().push(code);
    i32::from(VETO.load(Ordering::Acquire))
}

#[test]
fn a_pre_callback_failing_stops_the_abort_and_submissions_meanwhile_are_refused() {
    install();
    set_device(2);
    register("recovery-veto", Some(veto_device_2));
    let notify = create_notify();
    let stream = create_stream();
    let dev = malloc(64);
    queue_blocked_memset(stream, notify, dev, 64);

    VETO.store(true, Ordering::Release);
    assert_eq!(
        code!(aclrtDeviceTaskAbort(2, 1000)),
        ACL_ERROR_RT_TASK_ABORT_STOP
    );
    assert!(recent_message().contains("recovery-veto"));
    // Nothing was aborted: the queued memset runs once its wait is satisfied.
    acl!(aclrtRecordNotify(notify, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 64), vec![0xAB; 64]);

    VETO.store(false, Ordering::Release);
    acl!(aclrtDeviceTaskAbort(2, 1000));
    assert_eq!(
        *SUBMITTED_DURING_ABORT.lock().unwrap(),
        [ACL_ERROR_RT_DEVICE_TASK_ABORT; 2]
    );
    register("recovery-veto", None);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// What an aclrtDeviceTaskAbort of device 6 returned from inside device 6's PRE callback.
static NESTED_ABORTS: Mutex<Vec<aclError>> = Mutex::new(Vec::new());

/// Device 6's callback: its PRE stage aborts the device again, its POST stage fails.
unsafe extern "C" fn nest_then_fail_on_device_6(
    device: i32,
    stage: aclrtDeviceTaskAbortStage,
    _: u32,
    _: *mut c_void,
) -> i32 {
    if device != 6 {
        return 0;
    }
    if stage == ACL_RT_DEVICE_TASK_ABORT_PRE {
        // SAFETY: no preconditions.
        let code = unsafe { aclrtDeviceTaskAbort(6, 0) };
        NESTED_ABORTS.lock().unwrap().push(code);
        return 0;
    }
    1
}

#[test]
fn an_abort_inside_an_abort_is_refused_and_a_failing_post_callback_fails_a_finished_abort() {
    install();
    set_device(6);
    register("recovery-nest", Some(nest_then_fail_on_device_6));
    let notify = create_notify();
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclrtMemset(dev, 64, 0, 64));
    queue_blocked_memset(stream, notify, dev, 64);

    assert_eq!(
        code!(aclrtDeviceTaskAbort(6, 1000)),
        ACL_ERROR_RT_TASK_ABORT_STOP
    );
    let message = recent_message();
    assert!(
        message.contains("recovery-nest") && message.contains("after the abort"),
        "{message}"
    );
    // The abort already running refused the second one, which aborted nothing of its own.
    assert_eq!(
        *NESTED_ABORTS.lock().unwrap(),
        [ACL_ERROR_RT_DEVICE_TASK_ABORT]
    );
    // The POST callback's failure comes after the abort: the queued memset was dropped.
    acl!(aclrtRecordNotify(notify, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 64), vec![0; 64]);
    register("recovery-nest", None);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

static HOLD_STARTED: AtomicBool = AtomicBool::new(false);
static HOLD_GATE: AtomicBool = AtomicBool::new(false);

/// A host function that runs until the test opens HOLD_GATE.
unsafe extern "C" fn hold_until_gate(_: *mut c_void) {
    HOLD_STARTED.store(true, Ordering::Release);
    while !HOLD_GATE.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
}

#[test]
fn an_abort_whose_running_task_outlives_the_timeout_fails_and_its_stream_finishes_later() {
    install();
    set_device(3);
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclrtLaunchHostFunc(
        stream,
        Some(hold_until_gate),
        ptr::null_mut()
    ));
    acl!(aclrtMemsetAsync(dev, 64, 0xAB, 64, stream));
    while !HOLD_STARTED.load(Ordering::Acquire) {
        std::thread::yield_now();
    }

    // The host function cannot be interrupted and does not return before the gate opens.
    assert_eq!(code!(aclrtDeviceTaskAbort(3, 1)), ACL_ERROR_RT_TASK_TIMEOUT);
    assert!(recent_message().contains("still running"));
    assert_eq!(stages_of(3), [(ACL_RT_DEVICE_TASK_ABORT_PRE, 1)]);
    // The stream is still being aborted: it refuses work.
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 64, 1, 64, stream)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    recent_message();

    HOLD_GATE.store(true, Ordering::Release);
    // Once the running task returns, the stream completes the abort; an aclrtStreamAbort waits
    // for that just as well.
    acl!(aclrtStreamAbort(stream));
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        download::<u8>(dev, 64),
        vec![2; 64],
        "the queued memset was dropped"
    );
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// The code of the synchronous copy [`copy_inside_device_5s_abort`] made.
static COPY_DURING_ABORT: AtomicI32 = AtomicI32::new(-1);

/// A PRE callback making a synchronous copy on device 5 while its abort runs.
unsafe extern "C" fn copy_inside_device_5s_abort(
    device: i32,
    stage: aclrtDeviceTaskAbortStage,
    _: u32,
    _: *mut c_void,
) -> i32 {
    if device == 5 && stage == ACL_RT_DEVICE_TASK_ABORT_PRE {
        let (mut host, dev) = ([0u8; 8], HELD_COPY_SRC.load(Ordering::Acquire));
        let code = code!(aclrtMemcpy(
            host.as_mut_ptr().cast(),
            8,
            dev as *const c_void,
            8,
            ACL_MEMCPY_DEVICE_TO_HOST
        ));
        COPY_DURING_ABORT.store(code, Ordering::Release);
    }
    0
}

/// The device memory [`copy_inside_device_5s_abort`] copies from.
static HELD_COPY_SRC: AtomicUsize = AtomicUsize::new(0);

/// Host memory a synchronous copy writes while the test watches it: atomics, as it is read
/// while written.
fn watched(bytes: usize) -> &'static [AtomicU8] {
    Vec::from_iter((0..bytes).map(|_| AtomicU8::new(0))).leak()
}

/// Starts `copy` on a thread of device 5 and returns once it has written `host` (its work is
/// done, and its simulated duration holds it); `done` gets its code.
fn start_held_copy(
    name: &'static str,
    host: &'static [AtomicU8],
    copy: impl FnOnce() -> aclError + Send + 'static,
    done: &mpsc::Sender<(&'static str, aclError)>,
) {
    let done_tx = done.clone();
    thread::spawn(move || {
        set_device(5);
        done_tx.send((name, copy())).unwrap();
    });
    while host[host.len() - 1].load(Ordering::SeqCst) != 0xAB {
        thread::yield_now();
    }
}

/// Bounded only so that a copy the abort does not stop fails the test instead of holding it
/// for the hour.
fn held_copy_ends(done: &mpsc::Receiver<(&'static str, aclError)>) -> (&'static str, aclError) {
    done.recv_timeout(std::time::Duration::from_secs(60))
        .expect("an abort stopped the synchronous copy held for its simulated duration")
}

/// A synchronous copy held for its simulated duration (an hour) is device work an abort
/// stops: aclrtDeviceTaskAbort of its device ends aclrtMemcpy and aclrtMemcpy2d, and
/// aclrtStreamAbort ends the synchronous fallback of an aclrtMemcpyAsync of pageable memory
/// on the aborted stream, each with 107023, the code the reference gives a synchronous wait an
/// abort ends (they slept the hour: only a loss woke them). A synchronous copy made while the
/// device's abort runs (from its PRE callback) is refused with 107022, as submissions are.
#[test]
fn aborts_stop_synchronous_copies_held_for_their_simulated_duration() {
    const BYTES: usize = 4096;
    install();
    register("recovery-copy-inside", Some(copy_inside_device_5s_abort));
    set_device(5);
    let stream = create_stream();
    let dev = malloc(BYTES);
    acl!(aclrtMemset(dev, BYTES, 0xAB, BYTES));
    HELD_COPY_SRC.store(dev as usize, Ordering::Release);
    let hour_ns = 3_600_000_000_000;
    control::set_timing(
        5,
        Some(npu_sim::TimingModel::default().min_task_ns(hour_ns)),
    )
    .unwrap();
    let (src, raw_stream) = (dev as usize, stream as usize);
    let (done_tx, done) = mpsc::channel();

    // The stream's abort stops the copy done synchronously for it.
    let host = watched(BYTES);
    let dst = host.as_ptr() as usize;
    start_held_copy(
        "aclrtMemcpyAsync of pageable memory",
        host,
        move || {
            code!(aclrtMemcpyAsync(
                dst as *mut c_void,
                BYTES,
                src as *const c_void,
                BYTES,
                ACL_MEMCPY_DEVICE_TO_HOST,
                raw_stream as aclrtStream
            ))
        },
        &done_tx,
    );
    acl!(aclrtStreamAbort(stream));
    assert_eq!(held_copy_ends(&done).1, ACL_ERROR_RT_STREAM_ABORT);

    // The device's abort stops the synchronous copies.
    let hosts = [watched(BYTES), watched(BYTES)];
    let dsts = hosts.map(|host| host.as_ptr() as usize);
    start_held_copy(
        "aclrtMemcpy",
        hosts[0],
        move || {
            code!(aclrtMemcpy(
                dsts[0] as *mut c_void,
                BYTES,
                src as *const c_void,
                BYTES,
                ACL_MEMCPY_DEVICE_TO_HOST
            ))
        },
        &done_tx,
    );
    start_held_copy(
        "aclrtMemcpy2d",
        hosts[1],
        move || {
            code!(aclrtMemcpy2d(
                dsts[1] as *mut c_void,
                64,
                src as *const c_void,
                64,
                64,
                BYTES / 64,
                ACL_MEMCPY_DEVICE_TO_HOST
            ))
        },
        &done_tx,
    );
    acl!(aclrtDeviceTaskAbort(5, 0));
    for _ in 0..2 {
        let (name, code) = held_copy_ends(&done);
        assert_eq!(code, ACL_ERROR_RT_STREAM_ABORT, "{name}");
    }
    assert_eq!(
        COPY_DURING_ABORT.load(Ordering::Acquire),
        ACL_ERROR_RT_DEVICE_TASK_ABORT,
        "a synchronous copy made while the abort ran"
    );
    register("recovery-copy-inside", None);

    // Without the model the device copies as before.
    control::set_timing(5, None).unwrap();
    assert_eq!(download::<u8>(dev, BYTES), vec![0xAB; BYTES]);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

fn error_verbose(device: i32) -> aclrtErrorInfo {
    // SAFETY: aclrtErrorInfo is plain integers and pointers, for which all-zero is valid.
    let mut info: aclrtErrorInfo = unsafe { std::mem::zeroed() };
    acl!(aclrtGetErrorVerbose(device, &mut info));
    info
}

fn inject_uce(ptr: *mut c_void, len: usize) {
    acl!(npusimInjectMemUce(ptr, len));
}

#[test]
fn a_memory_error_fails_the_tasks_touching_it_until_aclrt_repair_error_repairs_it() {
    install();
    set_device(1);
    let stream = create_stream();
    let dev = malloc(4096);
    upload(dev, &[0x5Au8; 4096]);
    let bad = dev.cast::<u8>().wrapping_add(1024).cast::<c_void>();
    inject_uce(bad, 256);
    assert_eq!(uce_ranges(1), [(bad as usize, 256)]);

    // A task touching the range fails; one touching other memory of the allocation does not.
    acl!(aclrtMemsetAsync(dev, 1024, 1, 1024, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtMemsetAsync(dev, 4096, 2, 4096, stream));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_DEVICE_MEM_ERROR
    );
    assert!(recent_message().contains("uncorrectable"));

    let info = error_verbose(1);
    assert_eq!(info.errorType, ACL_RT_ERROR_MEMORY);
    assert_eq!((info.tryRepair, info.hasDetail), (1, 1));
    // SAFETY: a MEMORY error's detail is the UCE array.
    let uce = unsafe { info.detail.uceInfo };
    assert_eq!(uce.arraySize, 1);
    assert_eq!(
        (uce.memUceInfoArray[0].addr, uce.memUceInfoArray[0].len),
        (bad, 256)
    );

    // The documented order: abort the device's tasks, then repair.
    acl!(aclrtDeviceTaskAbort(1, 0));
    acl!(aclrtRepairError(1, &info));
    assert!(uce_ranges(1).is_empty());
    assert_eq!(error_verbose(1).errorType, ACL_RT_NO_ERROR);
    // The repaired memory lost its contents; the rest kept the first memset's bytes.
    let bytes = download::<u8>(dev, 4096);
    assert_eq!(bytes[..1024], [1; 1024]);
    assert_eq!(bytes[1024..1280], [0; 256]);
    assert_eq!(bytes[1280..], [0x5A; 4096 - 1280]);
    acl!(aclrtMemsetAsync(dev, 4096, 3, 4096, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// Marking part of a bad range again, from its start, leaves the whole range bad: the
/// simulator keeps the longer of two ranges that start at one address.
#[test]
fn marking_a_range_again_from_its_start_keeps_the_longer_one() {
    install();
    set_device(4);
    let dev = malloc(4096);
    inject_uce(dev, 64);
    inject_uce(dev, 16);
    assert_eq!(uce_ranges(4), [(dev as usize, 64)]);
    let tail = dev.cast::<u8>().wrapping_add(32).cast::<c_void>();
    assert_eq!(
        code!(aclrtMemset(tail, 16, 0, 16)),
        ACL_ERROR_RT_DEVICE_MEM_ERROR
    );
    recent_message();
    acl!(aclrtFree(dev));
    assert!(uce_ranges(4).is_empty());
}

#[test]
fn mem_uce_repair_repairs_the_ranges_it_is_given_and_a_free_forgets_them() {
    install();
    set_device(4);
    let dev = malloc(4096);
    let at = |offset: usize| dev.cast::<u8>().wrapping_add(offset).cast::<c_void>();
    inject_uce(at(0), 64);
    inject_uce(at(2048), 128);
    assert_eq!(
        uce_ranges(4),
        [(at(0) as usize, 64), (at(2048) as usize, 128)]
    );
    // A synchronous copy touching a range fails too.
    let mut host = [0u8; 64];
    assert_eq!(
        code!(aclrtMemcpy(
            host.as_mut_ptr().cast(),
            64,
            at(0),
            64,
            ACL_MEMCPY_DEVICE_TO_HOST
        )),
        ACL_ERROR_RT_DEVICE_MEM_ERROR
    );
    recent_message();
    // A one-entry array receives the first range.
    // SAFETY: aclrtMemUceInfo is plain integers and pointers.
    let mut first: aclrtMemUceInfo = unsafe { std::mem::zeroed() };
    let mut count = 0;
    acl!(aclrtGetMemUceInfo(4, &mut first, 1, &mut count));
    assert_eq!((count, first.addr, first.len), (1, at(0), 64));
    // With one entry that names no error range, nothing is repaired.
    let mut mixed = [first, uce_info(at(64) as usize, 64)];
    assert_eq!(
        code!(aclrtMemUceRepair(4, mixed.as_mut_ptr(), 2)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    recent_message();
    assert_eq!(uce_ranges(4).len(), 2);
    acl!(aclrtMemUceRepair(4, &mut first, 1));
    assert_eq!(uce_ranges(4), [(at(2048) as usize, 128)]);
    acl!(aclrtMemcpy(
        host.as_mut_ptr().cast(),
        64,
        at(0),
        64,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    // An indirect copy (its addresses read on the device) touching a range fails as well.
    let stream = create_stream();
    let (src, bases) = (malloc(64), malloc(16));
    upload(bases, &[at(2048) as u64, src as u64]);
    acl!(aclrtMemcpyAsyncWithOffset(
        bases.cast(),
        64,
        0,
        bases.wrapping_byte_add(8).cast(),
        64,
        0,
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
        stream
    ));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_DEVICE_MEM_ERROR
    );
    recent_message();
    acl!(aclrtDestroyStream(stream));
    for ptr in [src, bases, dev] {
        acl!(aclrtFree(ptr));
    }
    assert!(
        uce_ranges(4).is_empty(),
        "freed memory takes its errors along"
    );
}

/// An aclrtErrorInfo asking for a repair of `error_type`.
fn repair_info(error_type: aclrtErrorType, has_detail: u8, entries: usize) -> aclrtErrorInfo {
    // SAFETY: aclrtErrorInfo is plain integers and pointers, for which all-zero is valid.
    let mut info: aclrtErrorInfo = unsafe { std::mem::zeroed() };
    info.tryRepair = 1;
    info.hasDetail = has_detail;
    info.errorType = error_type;
    info.detail.uceInfo.arraySize = entries;
    info
}

fn uce_info(addr: usize, len: usize) -> aclrtMemUceInfo {
    // SAFETY: aclrtMemUceInfo is plain integers and pointers.
    let mut info: aclrtMemUceInfo = unsafe { std::mem::zeroed() };
    info.addr = addr as *mut c_void;
    info.len = len;
    info
}

unsafe extern "C" fn never_called(
    _: i32,
    _: aclrtDeviceTaskAbortStage,
    _: u32,
    _: *mut c_void,
) -> i32 {
    0
}

#[test]
fn every_error_path() {
    install();
    run_table(&[
        case(
            "abort callback with NULL name",
            "aclrtSetDeviceTaskAbortCallback",
            100000,
            -1,
            || {
                code!(aclrtSetDeviceTaskAbortCallback(
                    ptr::null(),
                    Some(never_called),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "abort callback with an empty name",
            "aclrtSetDeviceTaskAbortCallback",
            100000,
            -1,
            || {
                let name = c_string("");
                code!(aclrtSetDeviceTaskAbortCallback(
                    name.as_ptr(),
                    Some(never_called),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "abort callback registered twice",
            "aclrtSetDeviceTaskAbortCallback",
            107000,
            -1,
            || {
                register("recovery-twice", Some(never_called));
                let name = c_string("recovery-twice");
                code!(aclrtSetDeviceTaskAbortCallback(
                    name.as_ptr(),
                    Some(never_called),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "removing an abort callback never registered",
            "aclrtSetDeviceTaskAbortCallback",
            107000,
            -1,
            || {
                let name = c_string("recovery-unknown");
                code!(aclrtSetDeviceTaskAbortCallback(
                    name.as_ptr(),
                    None,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "abort of an unknown device",
            "aclrtDeviceTaskAbort",
            107001,
            -1,
            || code!(aclrtDeviceTaskAbort(99, 0)),
        ),
        case(
            "abort timeout above 36 minutes",
            "aclrtDeviceTaskAbort",
            100000,
            -1,
            || code!(aclrtDeviceTaskAbort(5, 36 * 60 * 1000 + 1)),
        ),
        case(
            "UCE info of an unknown device",
            "aclrtGetMemUceInfo",
            107001,
            -1,
            || {
                let mut info = uce_info(0, 0);
                let mut count = 0;
                code!(aclrtGetMemUceInfo(-1, &mut info, 1, &mut count))
            },
        ),
        case(
            "UCE info into NULL",
            "aclrtGetMemUceInfo",
            100000,
            -1,
            || {
                let mut count = 0;
                code!(aclrtGetMemUceInfo(5, ptr::null_mut(), 1, &mut count))
            },
        ),
        case(
            "UCE info into 0 entries",
            "aclrtGetMemUceInfo",
            100000,
            -1,
            || {
                let mut info = uce_info(0, 0);
                let mut count = 0;
                code!(aclrtGetMemUceInfo(5, &mut info, 0, &mut count))
            },
        ),
        case(
            "UCE info with NULL retSize",
            "aclrtGetMemUceInfo",
            100000,
            -1,
            || {
                let mut info = uce_info(0, 0);
                code!(aclrtGetMemUceInfo(5, &mut info, 1, ptr::null_mut()))
            },
        ),
        case(
            "UCE repair of an unknown device",
            "aclrtMemUceRepair",
            107001,
            -1,
            || {
                let mut info = uce_info(0, 0);
                code!(aclrtMemUceRepair(99, &mut info, 1))
            },
        ),
        case(
            "UCE repair of NULL",
            "aclrtMemUceRepair",
            100000,
            -1,
            || code!(aclrtMemUceRepair(5, ptr::null_mut(), 1)),
        ),
        case(
            "UCE repair of 0 entries",
            "aclrtMemUceRepair",
            100000,
            -1,
            || {
                let mut info = uce_info(0, 0);
                code!(aclrtMemUceRepair(5, &mut info, 0))
            },
        ),
        case(
            "UCE repair of a range without an error",
            "aclrtMemUceRepair",
            107000,
            5,
            || {
                let dev = malloc(4096);
                inject_uce(dev, 64);
                let mut info = uce_info(dev as usize, 65);
                code!(aclrtMemUceRepair(5, &mut info, 1))
            },
        ),
        case(
            "repair of an unknown device",
            "aclrtRepairError",
            107001,
            -1,
            || {
                let info = repair_info(ACL_RT_NO_ERROR, 0, 0);
                code!(aclrtRepairError(99, &info))
            },
        ),
        case("repair of NULL", "aclrtRepairError", 100000, -1, || {
            code!(aclrtRepairError(5, ptr::null()))
        }),
        // The pointer and size arguments are checked before the device is looked up.
        case(
            "repair of NULL on an unknown device",
            "aclrtRepairError",
            100000,
            -1,
            || code!(aclrtRepairError(99, ptr::null())),
        ),
        case(
            "UCE info into NULL on an unknown device",
            "aclrtGetMemUceInfo",
            100000,
            -1,
            || {
                let mut count = 0;
                code!(aclrtGetMemUceInfo(99, ptr::null_mut(), 1, &mut count))
            },
        ),
        case(
            "UCE info with a NULL retSize on an unknown device",
            "aclrtGetMemUceInfo",
            100000,
            -1,
            || {
                let mut info = uce_info(0, 0);
                code!(aclrtGetMemUceInfo(99, &mut info, 1, ptr::null_mut()))
            },
        ),
        case(
            "UCE repair of 0 entries on an unknown device",
            "aclrtMemUceRepair",
            100000,
            -1,
            || {
                let mut info = uce_info(0, 0);
                code!(aclrtMemUceRepair(99, &mut info, 0))
            },
        ),
        case(
            "repair of an unknown error type",
            "aclrtRepairError",
            100000,
            -1,
            || {
                let info = repair_info(7, 0, 0);
                code!(aclrtRepairError(5, &info))
            },
        ),
        case(
            "repair of an error an Atlas A2 cannot repair",
            "aclrtRepairError",
            207000,
            -1,
            || {
                let info = repair_info(ACL_RT_ERROR_OTHERS, 0, 0);
                code!(aclrtRepairError(5, &info))
            },
        ),
        case(
            "repair of a memory error without detail",
            "aclrtRepairError",
            100000,
            -1,
            || {
                let info = repair_info(ACL_RT_ERROR_MEMORY, 0, 0);
                code!(aclrtRepairError(5, &info))
            },
        ),
        case(
            "repair of more UCE entries than the detail holds",
            "aclrtRepairError",
            100000,
            -1,
            || {
                let info = repair_info(ACL_RT_ERROR_MEMORY, 1, 21);
                code!(aclrtRepairError(5, &info))
            },
        ),
        case(
            "UCE injected at NULL",
            "npusimInjectMemUce",
            100000,
            -1,
            || code!(npusimInjectMemUce(ptr::null_mut(), 64)),
        ),
        case("UCE of 0 bytes", "npusimInjectMemUce", 100000, -1, || {
            code!(npusimInjectMemUce(ptr::dangling_mut(), 0))
        }),
        case(
            "UCE in host memory",
            "npusimInjectMemUce",
            107000,
            5,
            || {
                let mut word = 0u64;
                code!(npusimInjectMemUce((&raw mut word).cast(), 8))
            },
        ),
        case(
            "UCE past an allocation",
            "npusimInjectMemUce",
            107000,
            5,
            || code!(npusimInjectMemUce(malloc(4096), 1 << 30)),
        ),
    ]);
}
