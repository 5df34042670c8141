//! Attacks on the capture and model-instance machinery for the use-after-free family: memory
//! the simulator frees or reuses while a queued or running execution, a captured task or a
//! handle still refers to it. Host memory unregistered and freed between the capture and an
//! execution, task groups updated and instances aborted or destroyed while executions are
//! held, destroy callbacks and captured host functions calling back into the API, handles of
//! destroyed instances, events destroyed under a captured instance, operator information set
//! from the bytes a query gave, and group updates racing executions. Every test asserts the
//! promise it attacks; the file is meant to run under valgrind as well. Tests that close a hold
//! gate use a device of their own.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

const RELAXED: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;

fn add_one() -> aclrtFuncHandle {
    function(registry_binary(&["add_one_u32"]), "add_one_u32")
}

fn read_u32(dev: *const c_void) -> u32 {
    download::<u32>(dev, 1)[0]
}

/// Launches `read_through` on `stream` with host-packed arguments whose placeholder (at 8)
/// points at `value` in the launch's own copy; the kernel stores it to `out`.
fn launch_read_through(stream: aclrtStream, value: u64, out: *mut c_void) -> aclError {
    let mut args = [value, 0, out as u64];
    let mut holder = aclrtPlaceHolderInfo {
        addrOffset: 8,
        dataOffset: 0,
    };
    code!(aclrtLaunchKernelWithHostArgs(
        read_through(),
        1,
        stream,
        ptr::null_mut(),
        args.as_mut_ptr().cast(),
        24,
        &mut holder,
        1
    ))
}

/// Host memory of the C allocator, page-aligned (as aclrtHostRegister asks), zeroed.
struct HostPage(*mut u8);

const PAGE: usize = 4096;

impl HostPage {
    fn new() -> Self {
        // SAFETY: the layout has a non-zero size.
        let page = unsafe { alloc_zeroed(Layout::from_size_align(PAGE, PAGE).unwrap()) };
        assert!(!page.is_null());
        HostPage(page)
    }

    fn free(self) {
        // SAFETY: allocated by `new` with this layout, freed once (`self` is consumed).
        unsafe { dealloc(self.0, Layout::from_size_align(PAGE, PAGE).unwrap()) };
    }
}

/// Promise (docs/simulator.md, model runtime instances point 7): every replay reads the memory
/// as it is when it runs, and memory freed since the capture fails the task with 507013. Host
/// memory registered for the device (aclrtHostRegister), captured as a copy's source and as
/// another's destination and a memset's, then unregistered and given back to the C allocator,
/// is no memory of the runtime's any more: the replayed tasks must fault instead of reading and
/// writing the freed block.
#[test]
fn captured_copies_of_host_memory_unregistered_since_fault() {
    install_eight_devices();
    set_device(0);
    let stream = create_stream();
    let (dev, out) = (malloc(64), malloc(64));
    upload::<u64>(dev, &[0; 8]);
    upload::<u64>(out, &[0x5a5a; 8]);
    let host = HostPage::new();
    let mut mapped = ptr::null_mut();
    acl!(aclrtHostRegister(
        host.0.cast(),
        PAGE as u64,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    // SAFETY: the page is ours and 4096 bytes long.
    unsafe { host.0.cast::<u64>().write(7) };
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    h2d_async(dev, host.0.cast(), 64, stream);
    acl!(aclrtMemcpyAsync(
        host.0.wrapping_add(1024).cast(),
        64,
        out,
        64,
        ACL_MEMCPY_DEVICE_TO_HOST,
        stream
    ));
    acl!(aclrtMemsetAsync(
        host.0.wrapping_add(2048).cast(),
        64,
        0xab,
        64,
        stream
    ));
    let model = capture_end(stream);
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(read_u64(dev), 7, "the replay read the registered memory");
    // SAFETY: as above; the copy wrote 64 bytes at 1024.
    assert_eq!(unsafe { host.0.add(1024).cast::<u64>().read() }, 0x5a5a);
    // SAFETY: as above; the memset wrote 64 bytes at 2048.
    assert_eq!(unsafe { host.0.add(2048).read() }, 0xab);

    acl!(aclrtHostUnregister(host.0.cast()));
    host.free();
    acl!(aclmdlRIExecuteAsync(model, stream));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_SYS_DMA,
        "a replayed copy of host memory unregistered since the capture"
    );
    assert_eq!(read_u64(dev), 7, "nothing was read from the freed block");
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
    acl!(aclrtFree(out));
}

/// What the destroy callbacks saw, by test.
static CALLBACK_CODES: Mutex<Vec<(&str, aclError)>> = Mutex::new(Vec::new());
/// The instance the callbacks call back into, and another one the first callback destroys.
static DESTROYED: AtomicUsize = AtomicUsize::new(0);
static OTHER: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn calls_back(data: *mut c_void) {
    let model = DESTROYED.load(Ordering::Acquire) as aclmdlRI;
    let stream = data as aclrtStream;
    let mut id = 0;
    let codes = [
        ("destroy itself", code!(aclmdlRIDestroy(model))),
        ("get its id", code!(aclmdlRIGetId(model, &mut id))),
        ("execute it", code!(aclmdlRIExecuteAsync(model, stream))),
        (
            "register another callback",
            code!(aclmdlRIDestroyRegisterCallback(
                model,
                Some(calls_back),
                ptr::null_mut()
            )),
        ),
        ("abort it", code!(aclmdlRIAbort(model))),
        (
            "destroy another instance",
            code!(aclmdlRIDestroy(OTHER.load(Ordering::Acquire) as aclmdlRI)),
        ),
    ];
    CALLBACK_CODES.lock().unwrap().extend(codes);
}

/// Promise: aclmdlRIDestroy runs the destroy callbacks once the instance is gone, so a callback
/// calling back into the API with its handle gets 107017 (and may use other instances).
#[test]
fn destroy_callbacks_calling_back_into_the_api_get_codes() {
    install_eight_devices();
    set_device(1);
    let stream = create_stream();
    let a = malloc(4);
    upload(a, &[0u32]);
    let address = a as u64;
    let mut models = Vec::new();
    for _ in 0..2 {
        acl!(aclmdlRICaptureBegin(stream, RELAXED));
        assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
        models.push(capture_end(stream));
    }
    DESTROYED.store(models[0] as usize, Ordering::Release);
    OTHER.store(models[1] as usize, Ordering::Release);
    acl!(aclmdlRIDestroyRegisterCallback(
        models[0],
        Some(calls_back),
        stream
    ));
    acl!(aclmdlRIDestroy(models[0]));
    let codes = CALLBACK_CODES.lock().unwrap().clone();
    assert_eq!(
        codes,
        [
            ("destroy itself", ACL_ERROR_RT_INVALID_HANDLE),
            ("get its id", ACL_ERROR_RT_INVALID_HANDLE),
            ("execute it", ACL_ERROR_RT_INVALID_HANDLE),
            ("register another callback", ACL_ERROR_RT_INVALID_HANDLE),
            ("abort it", ACL_ERROR_RT_INVALID_HANDLE),
            ("destroy another instance", ACL_SUCCESS),
        ]
    );
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(read_u32(a), 0, "nothing executed");
    assert_eq!(
        code!(aclmdlRIExecuteAsync(models[1], stream)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(a));
}

/// Promise (point 15, point 8): an abort drops the tasks not started of every execution queued
/// before it, on every stream; the instance cannot be destroyed or updated while they are on
/// their streams, and once they are gone it can.
///
/// A stream drops an aborted task as soon as it reaches it, held gate or not (the task never
/// starts): each stream's executions queue behind a memset of its own, which waits at the
/// gate, so that they are still on their streams when the destroy and the update come. Without
/// it, whether they were depended on each worker having taken its first task before the abort.
#[test]
fn an_instance_executed_on_many_streams_then_aborted_runs_nothing() {
    install_eight_devices();
    set_device(2);
    let head = persistent_stream();
    let (a, word) = (malloc(4), malloc(8));
    upload(a, &[0u32]);
    upload(word, &[0u64]);
    let address = a as u64;
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    acl!(aclmdlRIBindStream(model, head, 0));
    assert_eq!(launch(add_one(), 1, head, &address, ptr::null_mut()), 0);
    acl!(aclrtValueWrite(word, 9, 0, head));
    acl!(aclmdlRIEndTask(model, head));
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    let streams: Vec<aclrtStream> = (0..4).map(|_| create_stream()).collect();
    let before = malloc(64);
    control::hold(2).unwrap();
    for &stream in &streams {
        acl!(aclrtMemsetAsync(before, 64, 1, 64, stream));
        acl!(aclmdlRIExecuteAsync(model, stream));
        acl!(aclmdlRIExecuteAsync(model, stream));
    }
    acl!(aclmdlRIAbort(model));
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_MODEL_RUNNING);
    assert_eq!(
        code!(aclmdlRIUpdate(model)),
        ACL_ERROR_RT_MODEL_UPDATE_FAILED
    );
    control::release(2).unwrap();
    for &stream in &streams {
        acl!(aclrtSynchronizeStream(stream));
    }
    assert_eq!((read_u32(a), read_u64(word)), (0, 0), "all eight dropped");
    assert_eq!(download::<u8>(before, 64), vec![1; 64], "the memsets ran");
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!((read_u32(a), read_u64(word)), (1, 9));
    acl!(aclmdlRIDestroy(model));
    assert_eq!(
        code!(aclmdlRIExecuteAsync(model, streams[0])),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(code!(aclmdlRIAbort(model)), ACL_ERROR_RT_INVALID_HANDLE);
    for stream in streams.into_iter().chain([head]) {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(a));
    acl!(aclrtFree(word));
    acl!(aclrtFree(before));
}

/// Promise (point 12): an execution queued before a task-group update runs the old launches,
/// whose host-packed arguments (a placeholder pointing into them) the update replaced; later
/// executions run the new ones.
#[test]
fn a_group_updated_under_a_held_execution_runs_the_replaced_launch_in_it() {
    install_eight_devices();
    set_device(3);
    let (stream, updater, exec) = (create_stream(), create_stream(), create_stream());
    let outs = malloc(16);
    upload::<u64>(outs, &[0, 0]);
    let (first, second) = (outs, outs.wrapping_byte_add(8));
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch_read_through(stream, 0x0123, first), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    let model = capture_end(stream);
    control::hold(3).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclmdlRICaptureTaskUpdateBegin(updater, group));
    assert_eq!(launch_read_through(updater, 0x4567, second), 0);
    acl!(aclmdlRICaptureTaskUpdateEnd(updater));
    // Churn the allocator, so memory the update freed is likely reused.
    let churn: Vec<Vec<u64>> = (0..64).map(|i| vec![i; 4]).collect();
    control::release(3).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    drop(churn);
    assert_eq!(download::<u64>(outs, 2), [0x0123, 0], "the held execution");
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<u64>(outs, 2), [0x0123, 0x4567], "the next one");
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, updater, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(outs));
}

/// Promise: an instance destroyed while one of its groups is being updated leaves the update
/// to fail with 107017 at its end; the launches it collected never run, and the updating
/// stream runs its later tasks again.
#[test]
fn an_instance_destroyed_during_a_group_update() {
    install_eight_devices();
    set_device(4);
    let (stream, updater) = (create_stream(), create_stream());
    let outs = malloc(16);
    upload::<u64>(outs, &[0, 0]);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch_read_through(stream, 1, outs), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    let model = capture_end(stream);
    acl!(aclmdlRICaptureTaskUpdateBegin(updater, group));
    acl!(aclmdlRIDestroy(model));
    assert_eq!(launch_read_through(updater, 2, outs), 0);
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateEnd(updater)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclmdlRICaptureTaskUpdateBegin(updater, group)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    acl!(aclrtSynchronizeStream(updater));
    assert_eq!(read_u64(outs), 0, "the collected launch did not run");
    assert_eq!(launch_read_through(updater, 3, outs), 0);
    acl!(aclrtSynchronizeStream(updater));
    assert_eq!(read_u64(outs), 3, "the stream runs its tasks again");
    for stream in [stream, updater] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(outs));
}

static HOST_FUNC_MODEL: AtomicUsize = AtomicUsize::new(0);
static HOST_FUNC_CODES: Mutex<Vec<aclError>> = Mutex::new(Vec::new());

unsafe extern "C" fn destroys_its_instance(_: *mut c_void) {
    let model = HOST_FUNC_MODEL.load(Ordering::Acquire) as aclmdlRI;
    let codes = [code!(aclmdlRIDestroy(model)), code!(aclmdlRIUpdate(model))];
    HOST_FUNC_CODES.lock().unwrap().extend(codes);
}

/// Promise (point 8, 11): a host function of an execution that destroys or updates its own
/// instance while the execution runs is refused (107037, 107040), and the rest of the
/// execution runs.
#[test]
fn a_captured_host_function_destroying_its_running_instance_is_refused() {
    install_eight_devices();
    set_device(5);
    let stream = create_stream();
    let a = malloc(4);
    upload(a, &[0u32]);
    let address = a as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtLaunchHostFunc(
        stream,
        Some(destroys_its_instance),
        ptr::null_mut()
    ));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    HOST_FUNC_MODEL.store(model as usize, Ordering::Release);
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(
        *HOST_FUNC_CODES.lock().unwrap(),
        [ACL_ERROR_RT_MODEL_RUNNING, ACL_ERROR_RT_MODEL_UPDATE_FAILED]
    );
    assert_eq!(read_u32(a), 1);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(a));
}

/// Promise: events destroyed after the capture leave the captured record and wait working
/// (each execution records and waits on a record of its own), and the tasks' parameters
/// report NULL for them.
#[test]
fn events_destroyed_under_a_captured_instance() {
    install_eight_devices();
    set_device(6);
    let (stream, side) = (create_stream(), create_stream());
    let (fork, join) = (create_event(), create_event());
    let a = malloc(4);
    upload(a, &[0u32]);
    let address = a as u64;
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtRecordEvent(fork, stream));
    acl!(aclrtStreamWaitEvent(side, fork));
    assert_eq!(launch(add_one(), 1, side, &address, ptr::null_mut()), 0);
    acl!(aclrtRecordEvent(join, side));
    acl!(aclrtStreamWaitEvent(stream, join));
    assert_eq!(launch(add_one(), 1, stream, &address, ptr::null_mut()), 0);
    let model = capture_end(stream);
    acl!(aclrtDestroyEvent(fork));
    acl!(aclrtDestroyEvent(join));
    let exec = create_stream();
    control::hold(6).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    control::release(6).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(a), 2);
    for model_stream in instance_streams(model) {
        for task in stream_tasks(model_stream) {
            // SAFETY: plain data, for which all-zero is valid.
            let mut params: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
            acl!(aclmdlRITaskGetParams(task, &mut params));
            if params.type_ == ACL_MODEL_RI_TASK_EVENT_RECORD {
                // SAFETY: a record's parameters are eventRecordTaskParams.
                let event = unsafe { params.__bindgen_anon_1.eventRecordTaskParams.event };
                assert!(event.is_null(), "a destroyed event is reported NULL");
            }
        }
    }
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, side, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtFree(a));
}

/// Promise (point 11): operator information set from the very bytes a query gave (the
/// instance's own, which the set replaces) is copied before the old bytes go.
#[test]
fn operator_information_set_from_the_queried_bytes() {
    install_eight_devices();
    set_device(7);
    let stream = create_stream();
    let mut on = aclrtStreamAttrValue {
        cacheOpInfoSwitch: 1,
    };
    acl!(aclrtSetStreamAttribute(
        stream,
        ACL_STREAM_ATTR_CACHE_OP_INFO,
        &mut on
    ));
    let word = malloc(8);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclrtValueWrite(word, 1, 0, stream));
    let info: Vec<u8> = (0..200u8).collect();
    acl!(aclrtCacheLastTaskOpInfo(info.as_ptr().cast(), info.len()));
    let model = capture_end(stream);
    let task = stream_tasks(instance_streams(model)[0])[0];
    // SAFETY: plain data, for which all-zero is valid.
    let mut params: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
    acl!(aclmdlRITaskGetParams(task, &mut params));
    assert_eq!(params.opInfoSize, 200);
    // Set back with the instance's bytes, shortened: the new information is their prefix.
    params.opInfoSize = 100;
    acl!(aclmdlRITaskSetParams(task, &mut params));
    // SAFETY: as above.
    let mut again: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
    acl!(aclmdlRITaskGetParams(task, &mut again));
    // SAFETY: the instance's bytes, valid until replaced or the instance is destroyed.
    let kept =
        unsafe { std::slice::from_raw_parts(again.opInfoPtr.cast::<u8>(), again.opInfoSize) };
    assert_eq!(kept, &info[..100]);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(word));
}

/// A handle sent to another thread (the simulator's handles are opaque tokens).
#[derive(Clone, Copy)]
struct Raw(usize);

/// Promise: group updates racing executions of the instance on another thread never expose
/// freed arguments: every execution stores one of the values some update (or the capture)
/// gave, and the instance is destroyed cleanly once both are done.
#[test]
fn group_updates_racing_executions_never_expose_freed_arguments() {
    install_eight_devices();
    set_device(0);
    let stream = create_stream();
    let out = malloc(8);
    upload::<u64>(out, &[0]);
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch_read_through(stream, 1000, out), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    let model = capture_end(stream);
    const ROUNDS: u64 = 40;
    let (model_raw, group_raw, out_raw) =
        (Raw(model as usize), Raw(group as usize), Raw(out as usize));
    let updater = thread::spawn(move || {
        set_device(0);
        let updater = create_stream();
        for round in 1..=ROUNDS {
            acl!(aclmdlRICaptureTaskUpdateBegin(
                updater,
                group_raw.0 as aclrtTaskGrp
            ));
            assert_eq!(
                launch_read_through(updater, 1000 + round, out_raw.0 as *mut c_void),
                0
            );
            acl!(aclmdlRICaptureTaskUpdateEnd(updater));
        }
        acl!(aclrtDestroyStream(updater));
    });
    let executor = thread::spawn(move || {
        set_device(0);
        let exec = create_stream();
        let mut seen = Vec::new();
        for _ in 0..ROUNDS {
            acl!(aclmdlRIExecuteAsync(model_raw.0 as aclmdlRI, exec));
            acl!(aclrtSynchronizeStream(exec));
            seen.push(read_u64(out_raw.0 as *const c_void));
        }
        acl!(aclrtDestroyStream(exec));
        seen
    });
    updater.join().unwrap();
    let seen = executor.join().unwrap();
    assert!(
        seen.iter().all(|v| (1000..=1000 + ROUNDS).contains(v)),
        "{seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "updates only go forward: {seen:?}"
    );
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(read_u64(out), 1000 + ROUNDS);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}
