//! Where device faults and pooled memory are accounted for, through the `npu` facade: the
//! fault of work drained without a completion event (the device out of events), which a fence
//! hands to the stream's failure record, across an abort or a stop, beside a second drained
//! fault, and when the fence's own wait fails.
//!
//! The simulator of this process has five devices of 64 MiB (installed by the first test to
//! take the lock), so that a pool can fill a device; devices 2 to 4 are lost by the test that
//! loses a device. Every test takes the device lock; every wait is bounded (`run`, `until`,
//! `until_released`), so a hang fails its test.

mod common;

use common::*;
use npu::error::AclCode;
use npu::prelude::*;
use npu::{Stream, sim};

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// The device lock and device 0's primary context, on this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(5, DEVICE_MEMORY)
}

/// [`drain_a_failing_memset`], then the events given back and the next memset submitted, which
/// fences the drained work off and resolves with its own bytes. The failed task's id.
fn a_drained_fault_fenced_off(ctx: &Context, s: &Stream) -> u32 {
    let (events, task) = drain_a_failing_memset(ctx, s);
    drop(events);
    let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1));
    let next = next.unwrap_or_else(|err| panic!("{:?}: {err}", s.strategy()));
    assert_eq!(next.to_vec_blocking().unwrap(), [1; 64]);
    task
}

/// How the stream is reset after its fence reported the drained fault.
#[derive(Debug, Clone, Copy)]
enum Reset {
    Abort,
    StopThenAbort,
    /// An abort that discards a `synchronize` queued behind a held device.
    AbortDiscardingASynchronize,
}

/// A drained task's fault, captured by the fence and not yet read by a `synchronize`, is
/// reported by the next `synchronize` after an abort (alone, after a stop, or discarding a
/// queued `synchronize`, which fails `Aborted` and reports nothing): the abort discards work
/// not yet run, and that task ran and failed before it began. Its own operation reported only
/// the refusal of its completion event, so the record was the one place left. The break: the
/// abort cleared the stream's failure record whole, and the fault was reported nowhere.
#[test]
fn an_abort_keeps_a_drained_fault_the_fence_captured_before_it() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        for reset in [
            Reset::Abort,
            Reset::StopThenAbort,
            Reset::AbortDiscardingASynchronize,
        ] {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let task = a_drained_fault_fenced_off(ctx, &s);
                match reset {
                    Reset::Abort => run(s.abort()).unwrap(),
                    Reset::StopThenAbort => {
                        s.stop().unwrap();
                        run(s.abort()).unwrap();
                    }
                    Reset::AbortDiscardingASynchronize => {
                        let held = sim::hold(&device).unwrap();
                        let queued = s.synchronize();
                        run(s.abort()).unwrap();
                        drop(held);
                        let discarded = run(queued).unwrap_err();
                        assert!(
                            discarded.error.is_aborted(),
                            "{strategy:?} {reset:?}: {discarded}"
                        );
                    }
                }
                let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2));
                let next = next.unwrap_or_else(|err| panic!("{strategy:?} {reset:?}: {err}"));
                assert_eq!(next.to_vec_blocking().unwrap(), [2; 64]);
                synchronize_reports_the_drained_fault(&s, task);
            });
        }
    }
}

/// What an abort clears: the failures of the work it discarded and of the work a stop left
/// undone, which carry no fault of a task that ran. A stream stopped with a memset queued
/// behind a held device fails that memset; once aborted, its next `synchronize` succeeds.
#[test]
fn an_abort_clears_what_a_stop_left_undone() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let held = sim::hold(&device).unwrap();
            let stopped = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
            s.stop().unwrap();
            drop(held);
            let failed = run(stopped).unwrap_err();
            assert!(failed.error.fault().is_none(), "{strategy:?}: {failed}");
            run(s.abort()).unwrap();
            run(s.synchronize()).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        });
    }
}

/// Two drained tasks' faults before any `synchronize`: the first fenced off by the memset
/// after it, which one event given back lets record the fence but not its own event, so that
/// its task, which fails too, is drained in turn (or, had the fence's event come back in
/// time, fails on its own event); all the events back, the next memset fences that off. The
/// stream's failure record keeps the first failure since the last `synchronize`, as
/// `aclrtSynchronizeStream` reports the first task error: the next `synchronize` reports the
/// first drained task's fault (its `DeviceFault` names that task), and the one after it
/// nothing. A second drained operation reports the refusal of its event, and its task's fault
/// is reported nowhere else (by design: docs/cancellation.md).
#[test]
fn a_synchronize_reports_the_first_of_two_drained_faults() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let (mut events, first) = drain_a_failing_memset(ctx, &s);
            drop(events.pop());
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            let second = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2);
            // Its own record, if it got an event, is the last task of the submission.
            let last_of_its_own = last_task_id(ctx);
            let failed = run(second).unwrap_err();
            let own_fault = failed.error.fault().map(|fault| fault.task_id);
            let drained = failed.error.acl_code() == Some(AclCode(207007));
            let own = own_fault.is_some_and(|task| task > first && task <= last_of_its_own);
            assert!(drained || own, "{strategy:?}: {failed}");
            drop(events);
            let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 3));
            let next = next.unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
            assert_eq!(next.to_vec_blocking().unwrap(), [3; 64]);
            synchronize_reports_the_drained_fault(&s, first);
        });
    }
}

/// A fence whose own wait fails: queued with the operation after the drained work behind a
/// held device, which is then lost. The fence fails with the loss in place of what it
/// captured (its record never ran), as any operation's failed wait does; the operation fails
/// with its buffer back, and every `synchronize` reports the loss, which stands for every
/// fault of the stream from then on. Nothing hangs. Devices 2 to 4, lost for good.
#[test]
fn a_fence_whose_wait_fails_reports_the_device_loss() {
    let _devices = devices();
    for (strategy, id) in STRATEGIES.into_iter().zip(2..) {
        let device = Device::open(id).unwrap();
        let ctx = device.primary_context();
        let s = stream(ctx, strategy);
        let (events, _) = drain_a_failing_memset(ctx, &s);
        drop(events);
        let held = sim::hold(&device).unwrap();
        let fenced = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
        sim::lose(&device).unwrap();
        drop(held);
        let failed = run(fenced).unwrap_err();
        assert!(failed.value.is_some(), "{strategy:?}: {failed}");
        for _ in 0..2 {
            let err = run(s.synchronize()).unwrap_err().error;
            assert_eq!(
                err.acl_code(),
                Some(AclCode::DEVICE_LOST),
                "{strategy:?}: {err}"
            );
        }
    }
}
