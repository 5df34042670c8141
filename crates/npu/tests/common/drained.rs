//! Work drained without a completion event (the device out of events), and the fault the
//! stream's next `synchronize` reports for it: shared by the attacks on the drain fence.

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;

use super::{run, take_every_event, until_released};

/// Runs `case` in a fresh context of `device` (its event pool has no event to reuse), then
/// waits until the device has every event of that context back: one the reaper destroyed
/// during the next case would let that case's drained operation record an event after all.
pub(crate) fn in_a_fresh_context(device: &npu::Device, case: impl FnOnce(&Context)) {
    let baseline = sim::device_stats(device).unwrap().live_events;
    let ctx = device.create_context().unwrap();
    case(&ctx);
    drop(ctx);
    until_released("the case's completion events are destroyed", || {
        sim::device_stats(device).unwrap().live_events <= baseline
    });
}

/// The drained memset fails with the runtime's refusal of its completion event, its buffer
/// handed back.
pub(crate) fn drained_without_an_event(failed: npu::stream::OpError<DeviceBuffer<u8>>) {
    assert_eq!(failed.error.acl_code(), Some(AclCode(207007)), "{failed}");
    assert!(failed.value.is_some(), "the buffer comes back: {failed}");
}

/// Drains a memset whose task fails on `s` (every event of `ctx`'s device taken): it fails
/// with the refusal of its event once the device has run it. The events, still taken, and the
/// failed task's id.
pub(crate) fn drain_a_failing_memset(ctx: &Context, s: &npu::Stream) -> (Vec<Event>, u32) {
    let events = take_every_event(ctx);
    sim::fail_task(s, 1, AclCode(507015)).unwrap();
    let failing = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 8);
    let task = last_task_id(ctx);
    drained_without_an_event(run(failing).unwrap_err());
    (events, task)
}

/// The id the runtime gave the last task this thread submitted (`aclrtGetThreadLastTaskId`),
/// as a `DeviceFault` names a failed task.
pub(crate) fn last_task_id(ctx: &Context) -> u32 {
    let runtime = ctx.runtime();
    let query = runtime
        .api()
        .aclrtGetThreadLastTaskId
        .expect("npu-sim has it");
    let mut id = 0;
    // SAFETY: `id` is a valid out-pointer for the duration of the call.
    let code = unsafe { query(&mut id) };
    runtime.check("aclrtGetThreadLastTaskId", code).unwrap();
    id
}

/// The stream's next `synchronize` reports the drained task's fault (the task `task`), under
/// the drained operation's function, once.
pub(crate) fn synchronize_reports_the_drained_fault(s: &npu::Stream, task: u32) {
    let err = run(s.synchronize()).unwrap_err().error;
    assert_eq!(err.acl_code(), Some(AclCode(507015)), "{err}");
    assert!(
        err.to_string().starts_with("aclrtMemsetAsync failed"),
        "{err}"
    );
    let fault = err.fault().unwrap_or_else(|| panic!("no fault: {err}"));
    assert_eq!((fault.stream_id, fault.task_id), (s.id(), task), "{err}");
    run(s.synchronize()).unwrap();
}
