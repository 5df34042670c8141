//! Work discarded by an abort npu-rs never hears of: `aclrtStreamAbort` called through the raw
//! API on a stream's handle, `aclrtDeviceTaskAbort` on a runtime that never calls npu-rs's
//! device task abort callback, and one that outlives its timeout (PRE, but no POST). The
//! discarded operations' completion records are gone with them and their stream is alive and
//! idle, so nothing reaches their events: each must still end, `Error::Aborted`, its buffer
//! handed back, under every strategy, and the stream must run new work. And the marks of a
//! device task abort another registrant refused, which no POST confirms or clears.
//!
//! Every test takes the device lock (the hold gate and the device-wide aborts are the
//! simulator's); every wait is bounded (`run`), so a hang fails its test.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use npu::error::AclCode;
use npu::prelude::*;
use npu::stream::{Op, OpError};
use npu::{Stream, ffi, sim};

/// Set in the child process that runs [`child`]'s case.
const CHILD_ENV: &str = "NPU_UNSEEN_ABORTS_CHILD";

/// The name npu-core registers its device task abort callback under.
const NPU_RS_CALLBACK: &std::ffi::CStr = c"npu-rs device task abort";

/// A memset queued on `s` behind a held device, after one that completed: its completion
/// event is taken from the stream's pool, where the first memset's, complete, is usually back
/// by then, so a discarded record that read as that old completion would pass for success
/// (npu-sim's answer for a reused event is pinned in its own `tests/events.rs`).
fn queued_behind_a_hold(
    ctx: &Context,
    s: &Stream,
    device: &Device,
) -> (sim::Hold, Op<DeviceBuffer<u8>>) {
    a_memset_writes(ctx, s, 3, &format!("{:?}", s.strategy()));
    let held = sim::hold(device).unwrap();
    (held, s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1))
}

/// The operation ended `Error::Aborted`; what it handed back.
fn aborted<T>(result: Result<T, OpError<T>>, what: &str) -> T {
    let Err(discarded) = result else {
        panic!("{what}: the discarded operation succeeded");
    };
    let is_aborted = matches!(discarded.error, npu::Error::Aborted { .. });
    assert!(is_aborted, "{what}: {}", discarded.error);
    discarded
        .value
        .unwrap_or_else(|| panic!("{what}: no value handed back"))
}

/// `aclrtStreamAbort` of `s`'s handle through the raw API, as a program holding
/// `Stream::as_raw` may call it.
fn raw_stream_abort(ctx: &Context, s: &Stream) -> AclCode {
    ctx.bind().unwrap();
    let abort = ctx.runtime().api().aclrtStreamAbort;
    let abort = abort.expect("npu-sim exports aclrtStreamAbort");
    // SAFETY: the stream is alive (`s`) and its context is bound.
    AclCode(unsafe { abort(s.as_raw()) })
}

/// A program's own `aclrtStreamAbort` of a stream npu-rs made (`Stream::as_raw`) discards a
/// memset queued behind a held device and its completion record, telling npu-rs nothing: the
/// memset fails `Aborted` with its buffer, and the stream runs new work. The break: the record
/// was never reached, the stream was alive and idle, and the memset stayed pending for ever
/// under every strategy.
#[test]
fn a_raw_stream_abort_fails_the_work_it_discarded() {
    let (_guard, d0, _d1) = exclusive(None);
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let (held, queued) = queued_behind_a_hold(&d0, &s, &device);
        assert_eq!(raw_stream_abort(&d0, &s), AclCode(0), "{what}");
        drop(held);
        assert_eq!(aborted(run(queued), &what).len(), 64, "{what}");
        a_memset_writes(&d0, &s, 2, &what);
        run(s.synchronize()).unwrap_or_else(|err| panic!("{what}: {err}"));
    }
}

/// A device task abort npu-rs's callback never hears of (a runtime without
/// `aclrtSetDeviceTaskAbortCallback`, which the child process stands for by removing npu-rs's
/// registration) discards a queued memset and its record: the memset fails `Aborted` with its
/// buffer. The break: it stayed pending for ever under every strategy.
#[test]
fn a_device_task_abort_without_npu_rs_callback_fails_the_work_it_discarded() {
    in_child_test("child", CHILD_ENV, "without_callback");
}

/// The cases that must run in a process of their own; does nothing unless [`CHILD_ENV`] is
/// set.
#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "without_callback" => without_callback(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD OK");
}

fn without_callback() {
    let (_guard, d0, _d1) = exclusive(None);
    let device = Device::open(0).unwrap();
    // Stands for a runtime without the function: npu-rs hears of no device task abort.
    set_device_task_abort_callback(&d0, NPU_RS_CALLBACK, None);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let (held, queued) = queued_behind_a_hold(&d0, &s, &device);
        assert_eq!(device_task_abort(&d0, 1000), AclCode(0), "{what}");
        drop(held);
        assert_eq!(aborted(run(queued), &what).len(), 64, "{what}");
        a_memset_writes(&d0, &s, 2, &what);
        run(s.synchronize()).unwrap_or_else(|err| panic!("{what}: {err}"));
    }
}

/// A device task abort that outlives its timeout (107020: npu-rs's callback got PRE, and no
/// POST follows) while a gated kernel runs: once the kernel returns, the runtime finishes the
/// abort, discarding the memset queued behind it and both completion records. The kernel's
/// launch and the memset fail `Aborted`, the kernel's buffer coming back only once it has
/// returned, and the stream runs new work. The break: both stayed pending for ever under every
/// strategy, their marks never confirmed.
#[test]
fn a_device_task_abort_past_its_timeout_fails_the_work_it_discarded() {
    let (_guard, d0, _d1) = exclusive(None);
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let (running, queued) = a_held_fill_and_behind_it(&d0, &s, &fill, &what, || {
            s.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 1)
        });
        let code = device_task_abort(&d0, 1);
        assert_eq!(code, AclCode(ffi::ACL_ERROR_RT_TASK_TIMEOUT), "{what}");
        set_gate(|gate| gate.1 = true);
        let running = run(running);
        assert!(
            RETURNED.load(Ordering::Acquire),
            "{what}: the kernel's buffer came back before it returned"
        );
        assert_eq!(aborted(running, &what).0.len(), 256, "{what}");
        assert_eq!(aborted(run(queued), &what).len(), 64, "{what}");
        a_memset_writes(&d0, &s, 2, &what);
        run(s.synchronize()).unwrap_or_else(|err| panic!("{what}: {err}"));
    }
}

/// A device task abort another registrant's PRE callback refuses (107035) discards nothing,
/// yet npu-rs's callback had marked each stream's work at PRE, and no POST confirms or clears
/// that mark. A wait queued before it on stream `a`, for a record queued on stream `b` behind
/// a notify wait, then runs and fails when `b`'s own abort drops that record: the runtime's
/// `ACL_ERROR_RT_STREAM_ABORT`, the wait's own failure (it ran: its completion event was
/// reached), never `Error::Aborted`, which says the work was discarded. Held under every
/// strategy: the mark the refused abort left does make npu-rs take that code for a possible
/// discard of `a`'s work, but the runtime reports the failed wait as a task fault, and an
/// error carrying the operation's own fault is never taken for a discard.
#[test]
fn a_wait_failed_by_another_streams_abort_after_a_refused_device_abort_keeps_its_error() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (a, b) = (stream(&d0, strategy), stream(&d0, strategy));
        let gate = npu::stream::Notify::new(&d0).unwrap();
        let blocked = b.wait_notify(&gate);
        let ready = Event::new(&d0).unwrap();
        ready.record(&b).unwrap();
        let waiting = a.wait_event_timeout(&ready, std::time::Duration::from_secs(600));
        let refused = refused_device_task_abort(&d0, 1000);
        assert_eq!(
            refused,
            AclCode(ffi::ACL_ERROR_RT_TASK_ABORT_STOP),
            "{what}"
        );
        run(b.abort()).unwrap_or_else(|err| panic!("{what}: {err}"));
        assert!(run(blocked).unwrap_err().error.is_aborted(), "{what}");
        let failed = run(waiting).expect_err(&what).error;
        let code = failed.acl_code();
        assert_eq!(
            code,
            Some(AclCode(ffi::ACL_ERROR_RT_STREAM_ABORT)),
            "{what}: {failed}"
        );
        assert!(
            failed.fault().is_some(),
            "{what}: the wait ran and failed: {failed}"
        );
        a_memset_writes(&d0, &a, 2, &what);
        a_memset_writes(&d0, &b, 2, &what);
    }
}
