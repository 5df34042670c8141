//! Fault detail: a task that fails on the device reports, through the runtime's exception
//! callback, its task id, stream, device, code and the device's error detail, and the error
//! of the operation that failed carries them. Checked under every completion strategy, in both
//! failure modes. The tests run one at a time: the device's error detail is the device's
//! latest fault, which a concurrent test would change.

mod common;

use common::{STRATEGIES, in_process, run, stream};
use npu_core::{AclCode, Context, DeviceFault, FaultKind, ffi};
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::{FailureMode, Strategy, Stream};

/// How many tasks each operation puts on its stream: the operation and its event record, and
/// the callback strategy's host callback.
fn tasks_per_operation(strategy: Strategy) -> u32 {
    match strategy {
        Strategy::CallbackThread => 3,
        _ => 2,
    }
}

/// The fault npu-sim reports when the `index`-th operation (0-based) of a fresh stream fails
/// with `code`: task ids are positions in the stream, the first task is 1.
fn expected(stream: &Stream, index: u32, code: i32, kind: FaultKind) -> DeviceFault {
    let mut fault = DeviceFault::new(AclCode(code));
    fault.task_id = index * tasks_per_operation(stream.strategy()) + 1;
    fault.stream_id = stream.id();
    fault.device_id = stream.context().device_id();
    // thread_id stays 0: the submitting thread is checked apart.
    fault.kind = Some(kind);
    fault
}

fn check(stream: &Stream, fault: Option<&DeviceFault>, want: &DeviceFault) {
    let strategy = stream.strategy();
    let fault = fault.unwrap_or_else(|| panic!("{strategy:?}: {want} is not carried"));
    assert_ne!(
        fault.thread_id, 0,
        "{strategy:?}: the submitting thread's id"
    );
    let mut fault = fault.clone();
    fault.thread_id = 0;
    assert_eq!(&fault, want, "{strategy:?}");
}

/// Held by every test (see the top of the file).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn memset(stream: &Stream, ctx: &Context, value: u8) -> npu_stream::Op<DeviceBuffer<u8>> {
    stream.memset(DeviceBuffer::<u8>::new(ctx, 256).unwrap(), value)
}

#[test]
fn a_failed_operation_carries_its_fault_in_continue_mode() {
    let _serial = serial();
    let ctx = in_process().device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let code = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
        control::fail_task(s.as_raw(), 2, code).unwrap();
        let (ok, failing, after) = (
            memset(&s, &ctx, 1),
            memset(&s, &ctx, 2),
            memset(&s, &ctx, 3),
        );
        run(async {
            ok.await.unwrap();
            let failed = failing.await.unwrap_err();
            let want = expected(&s, 1, code, FaultKind::Other);
            check(&s, failed.fault(), &want);
            let text = failed.error.to_string();
            assert!(text.starts_with("aclrtMemsetAsync failed"), "{text}");
            assert_eq!(text.matches("507015").count(), 1, "the code once: {text}");
            let place = format!(
                ", at task {} of stream {} on device 0",
                want.task_id,
                s.id()
            );
            assert!(text.contains(&place), "{text}");
            after.await.unwrap();
            // synchronize() reports the same failure, fault and all.
            let reported = s.synchronize().await.unwrap_err();
            check(
                &s,
                reported.fault(),
                &expected(&s, 1, code, FaultKind::Other),
            );
        });
    }
}

#[test]
fn a_memory_fault_reports_a_memory_error() {
    let _serial = serial();
    let ctx = in_process().device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let code = ffi::ACL_ERROR_RT_SYS_DMA;
        control::fail_task(s.as_raw(), 1, code).unwrap();
        let failing = memset(&s, &ctx, 1);
        run(async {
            let failed = failing.await.unwrap_err();
            check(
                &s,
                failed.fault(),
                &expected(&s, 0, code, FaultKind::Memory),
            );
        });
    }
}

#[test]
fn every_operation_a_fault_stopped_carries_the_fault_in_stop_mode() {
    let _serial = serial();
    for strategy in STRATEGIES {
        // A context of its own: STOP stops every stream of the context.
        let ctx = in_process().device(1).unwrap().create_context().unwrap();
        let s = stream(&ctx, strategy);
        s.set_failure_mode(FailureMode::Stop).unwrap();
        let code = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
        control::fail_task(s.as_raw(), 1, code).unwrap();
        let (failing, behind) = (memset(&s, &ctx, 1), memset(&s, &ctx, 2));
        run(async {
            let want = expected(&s, 0, code, FaultKind::Other);
            let failed = failing.await.unwrap_err();
            check(&s, failed.fault(), &want);
            let stopped = behind.await.unwrap_err();
            assert_eq!(stopped.acl_code(), Some(AclCode(code)), "{strategy:?}");
            check(&s, stopped.fault(), &want);
        });
    }
}

/// STOP stops the whole context: work on a second stream, which had no fault of its own, is
/// refused with the fault's code and carries the fault that stopped the context.
#[test]
fn a_stopped_contexts_other_streams_carry_the_fault_that_stopped_it() {
    let _serial = serial();
    for strategy in STRATEGIES {
        let ctx = in_process().device(1).unwrap().create_context().unwrap();
        let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
        s.set_failure_mode(FailureMode::Stop).unwrap();
        let code = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
        control::fail_task(s.as_raw(), 1, code).unwrap();
        run(async {
            let want = expected(&s, 0, code, FaultKind::Other);
            let failed = memset(&s, &ctx, 1).await.unwrap_err();
            check(&s, failed.fault(), &want);
            let refused = memset(&other, &ctx, 2).await.unwrap_err();
            assert_eq!(refused.acl_code(), Some(AclCode(code)), "{strategy:?}");
            check(&s, refused.fault(), &want);
        });
    }
}

/// The stream-state callback forgets a destroyed stream's faults, so a stream that gets its
/// id next does not inherit them. Raw ACL: npu-stream's own operations claim every fault.
#[test]
fn a_destroyed_stream_leaves_no_fault_behind() {
    let _serial = serial();
    let ctx = in_process().device(0).unwrap().primary_context().clone();
    let (rt, api) = (ctx.runtime(), ctx.runtime().api());
    let code = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
    let (mut raw, mut dev, mut id) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    ctx.bind().unwrap();
    // SAFETY: valid out-pointers; the context is current; `dev` holds 64 bytes.
    unsafe {
        rt.check(
            "aclrtCreateStreamWithConfig",
            (api.aclrtCreateStreamWithConfig)(&mut raw, 0, 0),
        )
        .unwrap();
        let get_id = api.aclrtStreamGetId.unwrap();
        rt.check("aclrtStreamGetId", get_id(raw, &mut id)).unwrap();
        rt.check("aclrtMalloc", (api.aclrtMalloc)(&mut dev, 64, 0))
            .unwrap();
        control::fail_task(raw, 1, code).unwrap();
        let memset = (api.aclrtMemsetAsync)(dev, 64, 0, 64, raw);
        rt.check("aclrtMemsetAsync", memset).unwrap();
        let _ = (api.aclrtSynchronizeStream)(raw); // the fault is recorded, unclaimed
        rt.check("aclrtDestroyStream", (api.aclrtDestroyStream)(raw))
            .unwrap();
        (api.aclrtFree)(dev);
    }
    // SAFETY: the raw stream was this test's own.
    assert_eq!(unsafe { rt.claim_fault(0, id as u64, AclCode(code)) }, None);
}

/// A fault on a stream whose work is all queued (held behind a notify) stops it in STOP mode;
/// every operation then resolves, the failed one and those behind it, with the fault. For
/// `EventPoll` the reactor counts the exception callback's notice: it looked at the stream
/// because of the callback, not because a planned query or probe came round.
#[test]
fn a_reported_fault_resolves_every_operation_of_a_stopped_stream() {
    let _serial = serial();
    for strategy in STRATEGIES {
        let ctx = in_process().device(1).unwrap().create_context().unwrap();
        let s = stream(&ctx, strategy);
        // Of another context: the fault stops every stream of `ctx`.
        let releaser = stream(in_process().device(1).unwrap().primary_context(), strategy);
        s.set_failure_mode(FailureMode::Stop).unwrap();
        let gate = npu_stream::Notify::new(&ctx).unwrap();
        let code = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
        let waited = s.wait_notify(&gate);
        // Counted from now: the memset is the next device task.
        control::fail_task(s.as_raw(), 1, code).unwrap();
        let failing = memset(&s, &ctx, 1);
        let behind: Vec<_> = (0..3).map(|i| memset(&s, &ctx, i)).collect();
        let before = npu_stream::reactor_stats();
        run(async {
            releaser.record_notify(&gate).await.unwrap();
            waited.await.unwrap();
            let want = expected(&s, 1, code, FaultKind::Other);
            let Err(failed) = failing.await else {
                panic!("{strategy:?}: the memset did not fail")
            };
            assert_eq!(failed.acl_code(), Some(AclCode(code)), "{strategy:?}");
            check(&s, failed.fault(), &want);
            for op in behind {
                let stopped = op.await.unwrap_err();
                check(&s, stopped.fault(), &want);
                assert!(stopped.value.is_some(), "{strategy:?}: handed back");
            }
        });
        if strategy == Strategy::EventPoll {
            let after = npu_stream::reactor_stats();
            assert!(after.fault_notices > before.fault_notices, "{after:?}");
        }
    }
}
