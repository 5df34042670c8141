//! Exception callbacks (process-wide and per binary), the info getters, aclrtGetErrorVerbose,
//! and the host-function APIs the Atlas A2 lacks. The callbacks are process-wide, so each test
//! keeps to its own device and reads only the reports of that device.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// Installs the simulator once and gives the calling test its turn. The tests take turns:
/// `a_dma_fault_is_a_memory_error_of_a_task_that_is_no_kernel` frees memory that a queued task
/// still uses, and an allocation by a test running beside it could be given that address and
/// make the task's memory valid again.
fn install() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static TURN: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(5).install().unwrap();
        register_test_kernels();
    });
    take_turn(&TURN)
}

/// What a callback read through the getters.
#[derive(Debug, Clone, PartialEq)]
struct Report {
    task: u32,
    stream: u32,
    thread: u32,
    device: u32,
    code: u32,
    /// (args pointer, args length, function handle) or the getters' code for a non-kernel task.
    kernel: Result<(usize, u32, usize), aclError>,
}

type Reports = Mutex<Vec<Report>>;

static TRAP_REPORTS: Reports = Mutex::new(Vec::new());
static DMA_REPORTS: Reports = Mutex::new(Vec::new());

/// Reads every field of the info being delivered into `reports`.
///
/// # Safety
/// `info` must be the info of an exception callback being run.
unsafe fn collect(reports: &Reports, info: *mut aclrtExceptionInfo) {
    let (mut args, mut len, mut func) = (ptr::null_mut(), 0, ptr::null_mut());
    // SAFETY: `info` is the info being delivered; the out pointers are valid.
    let report = unsafe {
        let code = aclrtGetArgsFromExceptionInfo(info, &mut args, &mut len);
        let kernel = if code == 0 {
            assert_eq!(aclrtGetFuncHandleFromExceptionInfo(info, &mut func), 0);
            Ok((args as usize, len, func as usize))
        } else {
            Err(code)
        };
        Report {
            task: aclrtGetTaskIdFromExceptionInfo(info),
            stream: aclrtGetStreamIdFromExceptionInfo(info),
            thread: aclrtGetThreadIdFromExceptionInfo(info),
            device: aclrtGetDeviceIdFromExceptionInfo(info),
            code: aclrtGetErrorCodeFromExceptionInfo(info),
            kernel,
        }
    };
    reports.lock().unwrap().push(report);
}

// One callback per test: registrations are process-wide and the tests run in parallel.
unsafe extern "C" fn collect_trap(info: *mut aclrtExceptionInfo) {
    // SAFETY: called as an exception callback.
    unsafe { collect(&TRAP_REPORTS, info) }
}

unsafe extern "C" fn collect_dma(info: *mut aclrtExceptionInfo) {
    // SAFETY: called as an exception callback.
    unsafe { collect(&DMA_REPORTS, info) }
}

fn reports_of(reports: &Reports, device: u32) -> Vec<Report> {
    reports
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.device == device)
        .cloned()
        .collect()
}

fn error_type(device: i32) -> aclrtErrorType {
    // SAFETY: aclrtErrorInfo is plain integers.
    let mut info: aclrtErrorInfo = unsafe { std::mem::zeroed() };
    info.errorType = 0x1234;
    acl!(aclrtGetErrorVerbose(device, &mut info));
    assert_eq!((info.tryRepair, info.hasDetail), (0, 0));
    info.errorType
}

fn stream_id(stream: aclrtStream) -> u32 {
    let mut id = 0;
    acl!(aclrtStreamGetId(stream, &mut id));
    id as u32
}

#[test]
fn a_trapping_kernel_is_reported_to_every_callback() {
    let _turn = install();
    set_device(0);
    acl!(aclrtExceptionInfoCallbackRegister(Some(collect_trap)));
    assert_eq!(error_type(0), ACL_RT_NO_ERROR);
    let bin = registry_binary(&["trap", "add_one_u32"]);
    let trap = function(bin, "trap");
    let stream = create_stream();
    let dev = malloc(64);
    acl!(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    let mut args = [7u64, 8];
    acl!(aclrtLaunchKernelWithHostArgs(
        trap,
        2,
        stream,
        ptr::null_mut(),
        args.as_mut_ptr().cast(),
        16,
        ptr::null_mut(),
        0
    ));
    let mut task = 0;
    acl!(aclrtGetThreadLastTaskId(&mut task));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    recent_message();
    let reports = reports_of(&TRAP_REPORTS, 0);
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = &reports[0];
    assert_eq!(
        (report.task, report.stream, report.device, report.code),
        (
            task,
            stream_id(stream),
            0,
            ACL_ERROR_RT_AICORE_EXCEPTION as u32
        )
    );
    // SAFETY: no preconditions.
    assert_eq!(report.thread, unsafe { libc::gettid() } as u32);
    let (args_ptr, args_len, func) = report.kernel.unwrap();
    assert_eq!((args_len, func), (16, trap as usize));
    assert_ne!(args_ptr, 0);
    assert_eq!(error_type(0), ACL_RT_ERROR_OTHERS);
    acl!(aclrtExceptionInfoCallbackUnregister(Some(collect_trap)));
    acl!(aclrtDestroyStream(stream));
}

/// What a binary's exception callback saw: which callback, its user data, the failed
/// function and the error code.
type BinaryReport = (&'static str, usize, usize, u32);

static BINARY_REPORTS: Mutex<Vec<BinaryReport>> = Mutex::new(Vec::new());

/// # Safety
/// `info` must be the info of an exception callback being run.
unsafe fn collect_binary(which: &'static str, info: *mut aclrtExceptionInfo, user: *mut c_void) {
    let mut func = ptr::null_mut();
    // SAFETY: `info` is the info being delivered; the out pointer is valid.
    let code = unsafe {
        assert_eq!(aclrtGetFuncHandleFromExceptionInfo(info, &mut func), 0);
        aclrtGetErrorCodeFromExceptionInfo(info)
    };
    let report = (which, user as usize, func as usize, code);
    BINARY_REPORTS.lock().unwrap().push(report);
}

unsafe extern "C" fn binary_first(info: *mut aclrtExceptionInfo, user: *mut c_void) {
    // SAFETY: called as an exception callback.
    unsafe { collect_binary("first", info, user) }
}

unsafe extern "C" fn binary_second(info: *mut aclrtExceptionInfo, user: *mut c_void) {
    // SAFETY: called as an exception callback.
    unsafe { collect_binary("second", info, user) }
}

#[test]
fn a_binary_exception_callback_gets_its_own_kernels_failures() {
    let _turn = install();
    set_device(3);
    let (watched, other) = (
        registry_binary(&["trap", "add_one_u32"]),
        registry_binary(&["trap"]),
    );
    let mut user_data = 0u8;
    let user = (&raw mut user_data).cast::<c_void>();
    acl!(aclrtBinarySetExceptionCallback(
        watched,
        Some(binary_first),
        ptr::null_mut()
    ));
    // The last callback set wins.
    acl!(aclrtBinarySetExceptionCallback(
        watched,
        Some(binary_second),
        user
    ));
    let (trap, foreign_trap) = (function(watched, "trap"), function(other, "trap"));
    let fail_once = |func: aclrtFuncHandle, cfg: *mut aclrtLaunchKernelCfg| {
        let stream = create_stream();
        acl!(aclrtLaunchKernelV2(func, 2, ptr::null(), 0, cfg, stream));
        let code = code!(aclrtSynchronizeStream(stream));
        recent_message();
        acl!(aclrtDestroyStream(stream));
        code
    };
    // Another binary's failure is not reported to it.
    let code = fail_once(foreign_trap, ptr::null_mut());
    assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION);
    assert!(BINARY_REPORTS.lock().unwrap().is_empty());
    // Its own kernel's, launched on the vector engine, is.
    let mut attr = aiv_attr();
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: &mut attr,
        numAttrs: 1,
    };
    let code = fail_once(trap, &mut cfg);
    assert_eq!(code, ACL_ERROR_RT_VECTOR_CORE_EXCEPTION);
    let reports = BINARY_REPORTS.lock().unwrap().clone();
    let expected = (
        "second",
        user as usize,
        trap as usize,
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION as u32,
    );
    assert_eq!(reports, [expected]);
}

#[test]
fn a_dma_fault_is_a_memory_error_of_a_task_that_is_no_kernel() {
    let _turn = install();
    set_device(1);
    acl!(aclrtExceptionInfoCallbackRegister(Some(collect_dma)));
    // Registering twice keeps one entry: the fault is reported once.
    acl!(aclrtExceptionInfoCallbackRegister(Some(collect_dma)));
    let stream = create_stream();
    let notify = {
        let mut notify = ptr::null_mut();
        acl!(aclrtCreateNotify(&mut notify, 0));
        notify
    };
    let dev = malloc(64);
    acl!(aclrtWaitAndResetNotify(notify, stream, 0));
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    acl!(aclrtFree(dev));
    acl!(aclrtRecordNotify(notify, ptr::null_mut()));
    assert_eq!(code!(aclrtSynchronizeStream(stream)), ACL_ERROR_RT_SYS_DMA);
    recent_message();
    let reports = reports_of(&DMA_REPORTS, 1);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].kernel, Err(ACL_ERROR_RT_PARAM_INVALID));
    assert_eq!(error_type(1), ACL_RT_ERROR_MEMORY);
    acl!(aclrtExceptionInfoCallbackUnregister(Some(collect_dma)));
    acl!(aclrtDestroyStream(stream));
}

/// The id of the stream (on device 4) whose failure `wait_for_own_stream` acts on, the stream
/// itself, and what its wait returned.
static SELF_WAIT_ID: AtomicI32 = AtomicI32::new(-1);
static SELF_WAIT_STREAM: AtomicUsize = AtomicUsize::new(0);
static SELF_WAIT_CODE: AtomicI32 = AtomicI32::new(i32::MIN);

/// Synchronizes the stream whose task failed, from inside the callback its worker runs.
unsafe extern "C" fn wait_for_own_stream(info: *mut aclrtExceptionInfo) {
    // SAFETY: the info being delivered.
    let (device, id) = unsafe {
        (
            aclrtGetDeviceIdFromExceptionInfo(info),
            aclrtGetStreamIdFromExceptionInfo(info),
        )
    };
    // Stream ids are per device, and the other tests' failures are reported here too.
    if device != 4 || id as i32 != SELF_WAIT_ID.load(Ordering::SeqCst) {
        return;
    }
    let stream = SELF_WAIT_STREAM.load(Ordering::SeqCst) as aclrtStream;
    // A C program binds the worker's thread to the device first, as any thread must.
    set_device(4);
    // SAFETY: the test's live stream.
    let code = unsafe { aclrtSynchronizeStream(stream) };
    SELF_WAIT_CODE.store(code, Ordering::SeqCst);
}

/// An exception callback runs on the failing stream's worker, which cannot pass the failed
/// task until it returns: a wait for that stream from inside gets 207000, as from a host
/// function, instead of waiting for itself, and the stream goes on.
#[test]
fn a_callback_waiting_for_its_own_stream_gets_a_code_and_the_stream_goes_on() {
    let _turn = install();
    set_device(4);
    let stream = create_stream();
    let mut id = -1;
    acl!(aclrtStreamGetId(stream, &mut id));
    SELF_WAIT_ID.store(id, Ordering::SeqCst);
    SELF_WAIT_STREAM.store(stream as usize, Ordering::SeqCst);
    acl!(aclrtExceptionInfoCallbackRegister(Some(
        wait_for_own_stream
    )));
    let dev = malloc(64);
    npu_sim::control::fail_task(stream, 1, ACL_ERROR_RT_AICORE_EXCEPTION).unwrap();
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    recent_message();
    assert_eq!(
        SELF_WAIT_CODE.load(Ordering::SeqCst),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "the callback's wait for its own stream"
    );
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 64), vec![2; 64]);
    acl!(aclrtExceptionInfoCallbackUnregister(Some(
        wait_for_own_stream
    )));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

static DEPRECATED_CALLS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

unsafe extern "C" fn count_deprecated(info: *mut aclrtExceptionInfo) {
    // SAFETY: the info being delivered.
    let device = unsafe { aclrtGetDeviceIdFromExceptionInfo(info) };
    DEPRECATED_CALLS.lock().unwrap().push(device);
}

#[test]
#[allow(deprecated)]
fn the_deprecated_callback_is_one_per_process() {
    let _turn = install();
    set_device(2);
    acl!(aclrtSetExceptionInfoCallback(Some(count_deprecated)));
    let stream = create_stream();
    let trap = function(registry_binary(&["trap"]), "trap");
    let launch = || {
        acl!(aclrtLaunchKernelWithHostArgs(
            trap,
            1,
            stream,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            0
        ));
        assert_eq!(
            code!(aclrtSynchronizeStream(stream)),
            ACL_ERROR_RT_AICORE_EXCEPTION
        );
        recent_message();
    };
    launch();
    acl!(aclrtSetExceptionInfoCallback(None));
    launch();
    let calls = DEPRECATED_CALLS.lock().unwrap();
    assert_eq!(calls.iter().filter(|&&d| d == 2).count(), 1);
    acl!(aclrtDestroyStream(stream));
}

fn info_outside_a_callback() -> *const aclrtExceptionInfo {
    let mut word = 0u64;
    (&raw mut word).cast::<aclrtExceptionInfo>()
}

#[test]
fn getters_refuse_infos_that_are_not_being_delivered() {
    let _turn = install();
    for info in [ptr::null(), info_outside_a_callback()] {
        // SAFETY: the getters check the pointer before reading it.
        let values = unsafe {
            [
                aclrtGetTaskIdFromExceptionInfo(info),
                aclrtGetStreamIdFromExceptionInfo(info),
                aclrtGetThreadIdFromExceptionInfo(info),
                aclrtGetDeviceIdFromExceptionInfo(info),
                aclrtGetErrorCodeFromExceptionInfo(info),
            ]
        };
        assert_eq!(values, [u32::MAX; 5]);
        recent_message();
    }
}

/// A stream of the thread's context, which then makes another context current.
fn stream_of_other_context() -> aclrtStream {
    let stream = create_stream();
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 0));
    stream
}

#[test]
fn every_error_path() {
    let _turn = install();
    run_table(&[
        case(
            "register NULL",
            "aclrtExceptionInfoCallbackRegister",
            100000,
            0,
            || code!(aclrtExceptionInfoCallbackRegister(None)),
        ),
        case(
            "unregister NULL",
            "aclrtExceptionInfoCallbackUnregister",
            100000,
            0,
            || code!(aclrtExceptionInfoCallbackUnregister(None)),
        ),
        case(
            "binary callback of NULL binary",
            "aclrtBinarySetExceptionCallback",
            100000,
            0,
            || {
                let callback = Some(binary_first as _);
                code!(aclrtBinarySetExceptionCallback(
                    ptr::null_mut(),
                    callback,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "binary callback NULL",
            "aclrtBinarySetExceptionCallback",
            100000,
            0,
            || {
                let bin = registry_binary(&["trap"]);
                code!(aclrtBinarySetExceptionCallback(bin, None, ptr::null_mut()))
            },
        ),
        case(
            "binary callback of an unloaded binary",
            "aclrtBinarySetExceptionCallback",
            107017,
            0,
            || {
                let bin = registry_binary(&["trap"]);
                acl!(aclrtBinaryUnLoad(bin));
                let callback = Some(binary_first as _);
                code!(aclrtBinarySetExceptionCallback(
                    bin,
                    callback,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "task id of an unknown info",
            "aclrtGetTaskIdFromExceptionInfo",
            107000,
            0,
            || {
                // SAFETY: the getter checks the pointer before reading it.
                let id = unsafe { aclrtGetTaskIdFromExceptionInfo(info_outside_a_callback()) };
                assert_eq!(id, u32::MAX);
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case(
            "args of NULL info",
            "aclrtGetArgsFromExceptionInfo",
            100000,
            0,
            || {
                let (mut args, mut len) = (ptr::null_mut(), 0);
                code!(aclrtGetArgsFromExceptionInfo(
                    ptr::null(),
                    &mut args,
                    &mut len
                ))
            },
        ),
        case(
            "args NULL out",
            "aclrtGetArgsFromExceptionInfo",
            100000,
            0,
            || {
                let mut len = 0;
                code!(aclrtGetArgsFromExceptionInfo(
                    info_outside_a_callback(),
                    ptr::null_mut(),
                    &mut len
                ))
            },
        ),
        case(
            "args of an unknown info",
            "aclrtGetArgsFromExceptionInfo",
            107000,
            0,
            || {
                let (mut args, mut len) = (ptr::null_mut::<c_void>(), 0);
                code!(aclrtGetArgsFromExceptionInfo(
                    info_outside_a_callback(),
                    &mut args,
                    &mut len
                ))
            },
        ),
        case(
            "args length of an unknown info into NULL",
            "aclrtGetArgsFromExceptionInfo",
            100000,
            0,
            || {
                let mut args = ptr::null_mut();
                code!(aclrtGetArgsFromExceptionInfo(
                    info_outside_a_callback(),
                    &mut args,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "func of an unknown info into NULL",
            "aclrtGetFuncHandleFromExceptionInfo",
            100000,
            0,
            || {
                code!(aclrtGetFuncHandleFromExceptionInfo(
                    info_outside_a_callback(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "func of NULL info",
            "aclrtGetFuncHandleFromExceptionInfo",
            100000,
            0,
            || {
                let mut func = ptr::null_mut();
                code!(aclrtGetFuncHandleFromExceptionInfo(ptr::null(), &mut func))
            },
        ),
        case(
            "func of an unknown info",
            "aclrtGetFuncHandleFromExceptionInfo",
            107000,
            0,
            || {
                let mut func = ptr::null_mut();
                code!(aclrtGetFuncHandleFromExceptionInfo(
                    info_outside_a_callback(),
                    &mut func
                ))
            },
        ),
        case(
            "verbose of device 99",
            "aclrtGetErrorVerbose",
            107001,
            0,
            || {
                // SAFETY: plain integers.
                let mut info: aclrtErrorInfo = unsafe { std::mem::zeroed() };
                code!(aclrtGetErrorVerbose(99, &mut info))
            },
        ),
        case("verbose NULL", "aclrtGetErrorVerbose", 100000, 0, || {
            code!(aclrtGetErrorVerbose(0, ptr::null_mut()))
        }),
        case(
            "verbose NULL of device 99",
            "aclrtGetErrorVerbose",
            100000,
            0,
            || code!(aclrtGetErrorVerbose(99, ptr::null_mut())),
        ),
        case(
            "subscribe NULL",
            "aclrtSubscribeHostFunc",
            100000,
            0,
            || code!(aclrtSubscribeHostFunc(this_thread(), ptr::null_mut())),
        ),
        case(
            "subscribe on A2",
            "aclrtSubscribeHostFunc",
            207000,
            0,
            || code!(aclrtSubscribeHostFunc(this_thread(), create_stream())),
        ),
        // The stream is checked before the feature is refused, as the timeout is.
        case(
            "subscribe a destroyed stream",
            "aclrtSubscribeHostFunc",
            107017,
            0,
            || code!(aclrtSubscribeHostFunc(this_thread(), destroyed_stream())),
        ),
        case(
            "subscribe another context's stream",
            "aclrtSubscribeHostFunc",
            107003,
            0,
            || {
                code!(aclrtSubscribeHostFunc(
                    this_thread(),
                    stream_of_other_context()
                ))
            },
        ),
        case(
            "process timeout 0",
            "aclrtProcessHostFunc",
            100000,
            0,
            || code!(aclrtProcessHostFunc(0)),
        ),
        case("process on A2", "aclrtProcessHostFunc", 207000, 0, || {
            code!(aclrtProcessHostFunc(-1))
        }),
        case(
            "unsubscribe NULL",
            "aclrtUnSubscribeHostFunc",
            100000,
            0,
            || code!(aclrtUnSubscribeHostFunc(this_thread(), ptr::null_mut())),
        ),
        case(
            "unsubscribe a destroyed stream",
            "aclrtUnSubscribeHostFunc",
            107017,
            0,
            || code!(aclrtUnSubscribeHostFunc(this_thread(), destroyed_stream())),
        ),
        case(
            "unsubscribe another context's stream",
            "aclrtUnSubscribeHostFunc",
            107003,
            0,
            || {
                code!(aclrtUnSubscribeHostFunc(
                    this_thread(),
                    stream_of_other_context()
                ))
            },
        ),
        case(
            "unsubscribe on A2",
            "aclrtUnSubscribeHostFunc",
            207000,
            0,
            || code!(aclrtUnSubscribeHostFunc(this_thread(), create_stream())),
        ),
    ]);
}
