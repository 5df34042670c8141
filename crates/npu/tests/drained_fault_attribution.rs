//! A task that fails among work drained without a completion event (the device out of
//! events): its fault is reported where docs/cancellation.md's rules say (the stream's next
//! `synchronize`), never by a later operation whose own work ran. A runtime event captures
//! every task of its stream since the previous record, so the first completion event recorded
//! after the drained work captured its failure, and that operation failed with an earlier
//! task's fault. Every strategy; every wait is bounded (`run`).

mod common;

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;

use common::{
    STRATEGIES, drained_without_an_event, exclusive, in_a_fresh_context, last_task_id, run, stream,
    synchronize_reports_the_drained_fault, take_every_event,
};

/// The next operation after the events are back succeeds with its value, whether the drain
/// ended before it was submitted (the sentinel found the stream drained) or only after (the
/// device held meanwhile, so an operation submitted after it ends it).
#[test]
fn the_operation_after_drained_work_reports_only_its_own_outcome() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    for strategy in STRATEGIES {
        for drained_first in [true, false] {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let events = take_every_event(ctx);
                let held = (!drained_first).then(|| sim::hold(&device).unwrap());
                sim::fail_task(&s, 1, AclCode(507015)).unwrap();
                let failing = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 8);
                let failing_task = last_task_id(ctx);
                if drained_first {
                    drained_without_an_event(run(failing).unwrap_err());
                    drop(events);
                    let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1));
                    let next = next.unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
                    assert_eq!(next.to_vec_blocking().unwrap(), [1; 64]);
                } else {
                    drop(events);
                    let next = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
                    drop(held);
                    let next = run(next).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
                    assert_eq!(next.to_vec_blocking().unwrap(), [1; 64]);
                    drained_without_an_event(run(failing).unwrap_err());
                }
                synchronize_reports_the_drained_fault(&s, failing_task);
            });
        }
    }
}

/// With one hardware event free when the next operation is submitted, the fence takes it: the
/// operation, whose own event would capture the drained task, is drained too (its memset
/// runs; its buffer comes back written), unless the fence's event came back to the pool in
/// time for its record. Either way it never reports the earlier task's fault, and the stream's
/// next `synchronize` does, once.
#[test]
fn with_one_event_free_the_next_operation_never_takes_the_drained_fault() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let mut events = take_every_event(ctx);
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            let failing = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 8);
            let failing_task = last_task_id(ctx);
            drained_without_an_event(run(failing).unwrap_err());
            drop(events.pop());
            let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1));
            let buffer = next.unwrap_or_else(|failed| {
                assert_eq!(
                    failed.error.acl_code(),
                    Some(AclCode(207007)),
                    "{strategy:?}: {failed}"
                );
                failed.value.expect("the buffer comes back")
            });
            assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 64], "{strategy:?}");
            drop(events);
            synchronize_reports_the_drained_fault(&s, failing_task);
        });
    }
}
