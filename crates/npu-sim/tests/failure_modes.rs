//! Task failures: CONTINUE and STOP modes (CANN's 1_stream_with_failure_mode example), error
//! attribution to events, the stream's sticky error, and fault injection. Each test has its
//! own device, because STOP stops a whole context.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(5).install().unwrap();
        register_test_kernels();
    });
}

struct Kernels {
    add_one: aclrtFuncHandle,
    trap: aclrtFuncHandle,
}

fn kernels() -> Kernels {
    let bin = registry_binary(&["add_one_u32", "trap"]);
    Kernels {
        add_one: function(bin, "add_one_u32"),
        trap: function(bin, "trap"),
    }
}

/// Easy(+1), Error(trap on the vector core), Easy(+1) — the failure-mode example's sequence.
fn easy_error_easy(k: &Kernels, stream: aclrtStream, value: *mut c_void) -> aclError {
    let address = value as u64;
    let mut attr = aiv_attr();
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: &mut attr,
        numAttrs: 1,
    };
    assert_eq!(launch(k.add_one, 1, stream, &address, ptr::null_mut()), 0);
    assert_eq!(launch(k.trap, 1, stream, &address, &mut cfg), 0);
    launch(k.add_one, 1, stream, &address, ptr::null_mut())
}

fn status(event: aclrtEvent) -> aclrtEventRecordedStatus {
    let mut status = 0;
    acl!(aclrtQueryEventStatus(event, &mut status));
    status
}

#[test]
fn continue_mode_runs_later_tasks_and_reports_the_failure() {
    install();
    set_device(0);
    let k = kernels();
    let stream = create_stream();
    let value = malloc(4);
    acl!(aclrtSetStreamFailureMode(
        stream,
        u64::from(ACL_CONTINUE_ON_FAILURE)
    ));
    assert_eq!(easy_error_easy(&k, stream, value), 0);
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert!(recent_message().contains("trapped on the vector core"));
    assert_eq!(download::<u32>(value, 1), [2]);
    // The error was reported; the stream carries on.
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(easy_error_easy(&k, stream, value), 0);
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert_eq!(download::<u32>(value, 1), [4]);
}

#[test]
fn stop_mode_stops_the_context_and_never_hangs() {
    install();
    set_device(1);
    let k = kernels();
    let (stream, sibling) = (create_stream(), create_stream());
    let value = malloc(4);
    let (after, sibling_event) = (create_event(), create_event());
    acl!(aclrtSetStreamFailureMode(
        stream,
        u64::from(ACL_STOP_ON_FAILURE)
    ));
    control::hold(1).unwrap();
    assert_eq!(easy_error_easy(&k, stream, value), 0);
    acl!(aclrtRecordEvent(after, stream));
    acl!(aclrtRecordEvent(sibling_event, sibling));
    control::release(1).unwrap();
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert_eq!(
        download::<u32>(value, 1),
        [1],
        "the task after the failure never ran"
    );
    // Every stream of the context is stopped: queries report it, syncs return it at once,
    // events that can never complete stay NOT_READY, and new work is refused.
    let mut st = 0;
    assert_eq!(
        code!(aclrtStreamQuery(sibling, &mut st)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert_eq!(
        code!(aclrtSynchronizeStream(sibling)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert_eq!(
        code!(aclrtSynchronizeEvent(after)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert_eq!(status(after), ACL_EVENT_RECORDED_STATUS_NOT_READY);
    assert_eq!(
        code!(aclrtMemsetAsync(value, 4, 0, 4, sibling)),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );
    assert!(recent_message().contains("no more work is accepted"));
    assert_eq!(
        code!(aclrtSynchronizeDevice()),
        ACL_ERROR_RT_VECTOR_CORE_EXCEPTION
    );

    // Another context on the same device is unaffected.
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 1));
    let fresh = create_stream();
    acl!(aclrtMemsetAsync(value, 4, 0, 4, fresh));
    acl!(aclrtSynchronizeStream(fresh));
    acl!(aclrtDestroyContext(ctx));
    set_device(1);
    acl!(aclrtResetDeviceForce(1));
}

#[test]
fn events_report_the_errors_of_the_work_they_captured() {
    install();
    set_device(2);
    let stream = create_stream();
    let dev = malloc(64);
    let events: Vec<aclrtEvent> = (0..3).map(|_| create_event()).collect();
    control::fail_task(stream, 2, ACL_ERROR_RT_AICORE_EXCEPTION).unwrap();
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    acl!(aclrtRecordEvent(events[0], stream));
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream)); // fails (injected)
    acl!(aclrtRecordEvent(events[1], stream));
    acl!(aclrtMemsetAsync(dev, 64, 3, 64, stream));
    acl!(aclrtRecordEvent(events[2], stream));
    acl!(aclrtSynchronizeEvent(events[0]));
    assert_eq!(
        code!(aclrtSynchronizeEvent(events[1])),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    acl!(aclrtSynchronizeEvent(events[2]));
    // A query reports the stream's status, not its task error; a sync returns and clears it.
    let mut st = ACL_STREAM_STATUS_RESERVED;
    acl!(aclrtStreamQuery(stream, &mut st));
    assert_eq!(st, ACL_STREAM_STATUS_COMPLETE);
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtStreamQuery(stream, &mut st));
    assert_eq!(st, ACL_STREAM_STATUS_COMPLETE);
    assert!(
        download::<u8>(dev, 64).iter().all(|&b| b == 3),
        "the injected task wrote nothing"
    );
}

/// Injected faults strike device tasks only: event operations and host functions (which run
/// on a host thread, where no device fault can strike) are not counted and still run.
#[test]
fn fault_injection_counts_device_tasks_only() {
    static HOST_RAN: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn host_func(_: *mut c_void) {
        HOST_RAN.fetch_add(1, Ordering::SeqCst);
    }
    install();
    set_device(3);
    let stream = create_stream();
    let dev = malloc(64);
    let event = create_event();
    control::fail_task(stream, 2, 507899).unwrap();
    // SAFETY: a live stream; the function takes no data.
    let host = || unsafe { aclrtLaunchHostFunc(stream, Some(host_func), ptr::null_mut()) };
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    acl!(aclrtRecordEvent(event, stream)); // not counted
    acl!(aclrtStreamWaitEvent(stream, event)); // not counted
    assert_eq!(host(), 0); // not counted
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream)); // the 2nd device task: fails
    assert_eq!(host(), 0); // runs (CONTINUE)
    acl!(aclrtMemsetAsync(dev, 4, 3, 4, stream));
    assert_eq!(code!(aclrtSynchronizeStream(stream)), 507899);
    assert_eq!(&download::<u8>(dev, 8)[..], &[3, 3, 3, 3, 1, 1, 1, 1]);
    assert_eq!(
        HOST_RAN.load(Ordering::SeqCst),
        2,
        "both host functions ran"
    );
}

#[test]
fn a_panicking_rust_kernel_is_a_trap() {
    install();
    set_device(4);
    npu_sim::kernel::register(
        "panics",
        |block, _, _| if block == 3 { panic!("kernel bug") } else { 0 },
    )
    .unwrap();
    let panics = function(registry_binary(&["panics"]), "panics");
    assert_eq!(
        launch(panics, 8, ptr::null_mut(), &0u64, ptr::null_mut()),
        0
    );
    assert_eq!(
        code!(aclrtSynchronizeStream(ptr::null_mut())),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    assert!(recent_message().contains("block 3 of 8"));
}

/// Choosing ACL_STOP_ON_FAILURE for one stream makes the other streams of its context stop on
/// failure too (the reference's constraint): a failure on a sibling that chose nothing stops
/// the context, and the siblings report the mode in effect.
#[test]
fn a_stop_choice_on_one_stream_makes_its_siblings_stop_on_failure() {
    install();
    // A context of its own (the choice lasts for the context's life).
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 2));
    let (chooser, sibling) = (create_stream(), create_stream());
    acl!(aclrtSetStreamFailureMode(
        chooser,
        u64::from(ACL_STOP_ON_FAILURE)
    ));
    let mut mode = aclrtStreamAttrValue::default();
    acl!(aclrtGetStreamAttribute(
        sibling,
        ACL_STREAM_ATTR_FAILURE_MODE,
        &mut mode
    ));
    // SAFETY: the attribute's member.
    assert_eq!(unsafe { mode.failureMode }, u64::from(ACL_STOP_ON_FAILURE));
    let value = malloc(4);
    control::fail_task(sibling, 1, 507015).unwrap();
    acl!(aclrtMemsetAsync(value, 4, 1, 4, sibling));
    assert_eq!(code!(aclrtSynchronizeStream(sibling)), 507015);
    // The context stopped: the chooser takes no more work.
    assert_eq!(code!(aclrtMemsetAsync(value, 4, 2, 4, chooser)), 507015);
    recent_message();
    acl!(aclrtFree(value));
    acl!(aclrtDestroyContext(ctx));
}
