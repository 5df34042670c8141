//! Attacks on the two newest pieces of the completion path. The drain fence: the completion
//! event the next submission to a stream with drained work records before its own
//! (docs/cancellation.md, "Failures before submission complete at once; after submission,
//! drain first"): every operation resolves once with its own outcome, the drained fault is
//! reported by the next `synchronize` once (or discarded with the queue by an abort), nothing
//! leaks and nothing hangs. Failed operations claim their own faults, in submission order.
//! And the `CallbackThread` worker's per-stream table: many streams of one worker, aborts and
//! dropped streams. Every strategy; every wait is bounded (`run`, `until_released`).

mod common;

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::FailureMode;

use common::{
    STRATEGIES, drain_a_failing_memset, exclusive, in_a_fresh_context, last_task_id, live_objects,
    run, stream, synchronize_reports_the_drained_fault, take_every_event, until_released, within,
};

/// The simulator's devices in this process: 0 and 1 for the attacks, and one more for each
/// strategy for the attack that loses its device for good.
const DEVICES: u32 = 5;

/// Whether `buffer` holds `value` in every byte.
fn filled(buffer: &DeviceBuffer<u8>, value: u8) -> bool {
    buffer
        .to_vec_blocking()
        .unwrap()
        .iter()
        .all(|&b| b == value)
}

/// Its bytes, whether the memset resolved with them or failed with the refusal of its event
/// (drained, as an operation is when the fence before it took the only event): never the
/// drained fault.
fn written_or_refused(
    strategy: npu::stream::Strategy,
    result: Result<DeviceBuffer<u8>, npu::stream::OpError<DeviceBuffer<u8>>>,
    value: u8,
) {
    let buffer = result.unwrap_or_else(|failed| {
        let code = failed.error.acl_code();
        assert_eq!(
            code,
            Some(AclCode(207007)),
            "{strategy:?} {value}: {failed}"
        );
        failed.value.expect("the buffer comes back")
    });
    assert!(filled(&buffer, value), "{strategy:?} {value}");
}

/// Eight threads submit to one stream with drained work at once, with every event back or
/// only one: one of them fences it off, and every memset resolves with its own bytes (or, with
/// one event, the refusal of its event); none takes the drained fault, which the next
/// `synchronize` reports once.
#[test]
fn threads_submitting_after_drained_work_each_see_their_own_outcome() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        for one_event in [false, true] {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let (mut events, task) = drain_a_failing_memset(ctx, &s);
                if one_event {
                    drop(events.pop());
                } else {
                    events.clear();
                }
                std::thread::scope(|scope| {
                    for value in 1..=8u8 {
                        let s = &s;
                        scope.spawn(move || {
                            let buffer = DeviceBuffer::<u8>::new(ctx, 64).unwrap();
                            let done = run(s.memset(buffer, value));
                            if one_event {
                                written_or_refused(strategy, done, value);
                            } else {
                                let done = done
                                    .unwrap_or_else(|err| panic!("{strategy:?} {value}: {err}"));
                                assert!(filled(&done, value), "{strategy:?} {value}");
                            }
                        });
                    }
                });
                drop(events);
                synchronize_reports_the_drained_fault(&s, task);
            });
        }
    }
}

/// Events come back one at a time: the fence takes the only one, its operation is drained
/// (its work runs), and the next submission fences that drain off in turn. Each operation
/// resolves with its own bytes or the refusal of its event, never the drained fault, which
/// the next `synchronize` reports once.
#[test]
fn events_coming_back_one_at_a_time_never_hand_the_drained_fault_to_an_operation() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let (mut events, task) = drain_a_failing_memset(ctx, &s);
            for value in 1..=4u8 {
                drop(events.pop());
                let buffer = DeviceBuffer::<u8>::new(ctx, 64).unwrap();
                written_or_refused(strategy, run(s.memset(buffer, value)), value);
            }
            drop(events);
            let last = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 9));
            let last = last.unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
            assert!(filled(&last, 9), "{strategy:?}");
            synchronize_reports_the_drained_fault(&s, task);
        });
    }
}

/// The operation after drained work, queued behind its fence on a held device, is never handed
/// the drained fault: `Ok` with its bytes if it ran, or failed without a fault of an earlier
/// task, its buffer back.
fn resolved_with_its_own_outcome(
    strategy: npu::stream::Strategy,
    result: Result<DeviceBuffer<u8>, npu::stream::OpError<DeviceBuffer<u8>>>,
    task: u32,
) {
    match result {
        Ok(buffer) => assert!(filled(&buffer, 1), "{strategy:?}"),
        Err(failed) => {
            let task_of = failed.error.fault().map(|fault| fault.task_id);
            assert_ne!(task_of, Some(task), "{strategy:?}: {failed}");
            assert!(failed.value.is_some(), "{strategy:?}: {failed}");
        }
    }
}

/// The stream's `synchronize` reports the drained fault at most once (an abort that
/// discarded the fence before it ran discards what it would have captured), then nothing.
fn synchronize_reports_it_at_most_once(s: &npu::Stream, task: u32) {
    if let Err(failed) = run(s.synchronize()) {
        let fault = failed.error.fault();
        assert_eq!(fault.map(|fault| fault.task_id), Some(task), "{failed}");
    }
    run(s.synchronize()).unwrap();
}

/// A fence queued on a held device, with its operation, when the stream is aborted (the abort
/// racing the device's release) or stopped: every operation resolves once, none with the
/// drained fault; after the abort the stream runs new work and reports the drained fault at
/// most once.
#[test]
fn an_abort_or_a_stop_racing_the_fence_resolves_everything_once() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        for stop in [false, true] {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let (events, task) = drain_a_failing_memset(ctx, &s);
                let held = sim::hold(&device).unwrap();
                drop(events);
                let fenced = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
                if stop {
                    s.stop().unwrap();
                }
                let abort = s.abort();
                drop(held);
                run(abort).unwrap();
                resolved_with_its_own_outcome(strategy, run(fenced), task);
                let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2));
                let next = next.unwrap_or_else(|err| panic!("{strategy:?} {stop}: {err}"));
                assert!(filled(&next, 2), "{strategy:?} {stop}");
                synchronize_reports_it_at_most_once(&s, task);
            });
        }
    }
}

/// The stream and the operation after drained work dropped while its fence and work are
/// queued on a held device: once the device runs, every object the case made is released.
#[test]
fn a_stream_dropped_right_after_its_fence_is_released() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let baseline = live_objects(ctx);
            let s = stream(ctx, strategy);
            let (events, _) = drain_a_failing_memset(ctx, &s);
            let held = sim::hold(&device).unwrap();
            drop(events);
            let fenced = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
            drop((fenced, s));
            drop(held);
            until_released("the stream, its buffers and events", || {
                within(live_objects(ctx), baseline)
            });
        });
    }
}

/// Under `FailureMode::Stop` the drained task's fault stops the context, before the next
/// submission (whose fence is then refused) or, the device held, after its fence and work
/// were queued (which then never run): the next operation fails with the stopping fault,
/// naming the drained task (its buffer back), without hanging, so does `synchronize`, the
/// drained memset ends, and everything is released once the stream is dropped.
#[test]
fn a_fault_in_the_fence_window_under_stop_fails_the_next_operation_and_releases_everything() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        for queued_first in [false, true] {
            in_a_fresh_context(&device, |ctx| {
                let baseline = live_objects(ctx);
                let s = stream(ctx, strategy);
                s.set_failure_mode(FailureMode::Stop).unwrap();
                let events = take_every_event(ctx);
                let held = queued_first.then(|| sim::hold(&device).unwrap());
                sim::fail_task(&s, 1, AclCode(507015)).unwrap();
                let failing = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 8);
                let task = last_task_id(ctx);
                // Awaited now unless held: a drain ends only once the device has run it.
                let failing = match held {
                    None => Ok(run(failing).unwrap_err()),
                    Some(_) => Err(failing),
                };
                drop(events);
                let next = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
                drop(held);
                let failing = failing.unwrap_or_else(|failing| run(failing).unwrap_err());
                assert!(failing.value.is_some(), "{strategy:?}: {failing}");
                let failed = run(next).unwrap_err();
                assert!(failed.value.is_some(), "{strategy:?}: {failed}");
                for err in [&failed.error, &run(s.synchronize()).unwrap_err().error] {
                    let what = format!("{strategy:?} {queued_first}: {err}");
                    assert_eq!(err.acl_code(), Some(AclCode(507015)), "{what}");
                    assert_eq!(err.fault().map(|fault| fault.task_id), Some(task), "{what}");
                }
                drop((failing, failed, s));
                until_released("the stopped stream and its buffers", || {
                    within(live_objects(ctx), baseline)
                });
            });
        }
    }
}

/// How one memset of the callback attack resolved: with its bytes, or discarded by an abort
/// with its buffer back; nothing else.
fn written_or_aborted(
    result: Result<DeviceBuffer<u8>, npu::stream::OpError<DeviceBuffer<u8>>>,
    value: u8,
) {
    match result {
        Ok(buffer) => assert!(filled(&buffer, value), "{value}"),
        Err(failed) => {
            assert!(
                matches!(failed.error, npu::Error::Aborted { .. }),
                "{failed}"
            );
            assert!(failed.value.is_some(), "{failed}");
        }
    }
}

/// Four `CallbackThread` streams of one device (one callback worker), submitted to by three
/// threads at once, each memset on every stream in turn, while a fourth thread aborts the
/// streams one after another (covering part of each stream's operations while callbacks of
/// the rest fire): every operation resolves once, written or aborted; each thread's last
/// operation on a stream resolves only after all its earlier ones there (completions keep
/// submission order); and once the streams are dropped, every stream and buffer is released.
#[test]
fn callback_streams_of_one_worker_keep_order_under_interleaved_submissions_and_aborts() {
    const STREAMS: usize = 4;
    const ROUNDS: usize = 40;
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    in_a_fresh_context(&device, |ctx| {
        let baseline = live_objects(ctx);
        let streams: Vec<npu::Stream> = (0..STREAMS)
            .map(|_| stream(ctx, npu::stream::Strategy::CallbackThread))
            .collect();
        std::thread::scope(|scope| {
            for thread in 0..3u8 {
                let streams = &streams;
                scope.spawn(move || {
                    let mut ops: Vec<Vec<_>> = (0..STREAMS).map(|_| Vec::new()).collect();
                    for round in 0..ROUNDS {
                        for (s, queue) in streams.iter().zip(&mut ops) {
                            let value = thread * 50 + (round % 50) as u8;
                            let buffer = DeviceBuffer::<u8>::new(ctx, 256).unwrap();
                            queue.push((value, s.memset(buffer, value)));
                        }
                    }
                    for mut queue in ops {
                        let (value, last) = queue.pop().unwrap();
                        let last = run(last);
                        // One refused during an abort completes at once, ahead of earlier
                        // ones (the device never saw it); one that ran completes in order.
                        let ran = last.is_ok();
                        written_or_aborted(last, value);
                        let pending = queue.iter().filter(|(_, op)| !op.is_complete()).count();
                        assert!(
                            !ran || pending == 0,
                            "{pending} earlier operations pending after a later one ran"
                        );
                        for (value, op) in queue {
                            written_or_aborted(run(op), value);
                        }
                    }
                });
            }
            let (streams, device) = (&streams, &device);
            scope.spawn(move || {
                // Each abort covers what is queued behind a hold, while the callbacks of what
                // ran before it may still be on their way.
                for s in streams.iter().cycle().take(3 * STREAMS) {
                    let held = sim::hold(device).unwrap();
                    let aborting = s.abort();
                    drop(held);
                    run(aborting).unwrap();
                }
            });
        });
        for s in &streams {
            run(s.synchronize()).unwrap();
        }
        drop(streams);
        until_released("the callback streams and their buffers", || {
            within(live_objects(ctx), baseline)
        });
    });
}

/// `CallbackThread` streams of one worker dropped with operations queued on a held device,
/// their futures dropped too, beside a stream that keeps working: once the device runs, the
/// dropped streams are released and the other's operations complete.
#[test]
fn callback_streams_dropped_with_operations_outstanding_are_released() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    in_a_fresh_context(&device, |ctx| {
        let baseline = live_objects(ctx);
        let kept = stream(ctx, npu::stream::Strategy::CallbackThread);
        let held = sim::hold(&device).unwrap();
        for _ in 0..3 {
            let s = stream(ctx, npu::stream::Strategy::CallbackThread);
            for value in 0..8 {
                drop(s.memset(DeviceBuffer::<u8>::new(ctx, 256).unwrap(), value));
            }
        }
        let kept_op = kept.memset(DeviceBuffer::<u8>::new(ctx, 256).unwrap(), 7);
        drop(held);
        assert!(filled(&run(kept_op).unwrap(), 7));
        drop(kept);
        until_released("the dropped callback streams and their buffers", || {
            within(live_objects(ctx), baseline)
        });
    });
}

/// The submission that fences drained work off is a `synchronize`, and a second one is queued
/// behind it before either is awaited: the first reports the drained fault, the second
/// nothing, and a third nothing (the fault is reported once).
#[test]
fn a_synchronize_that_fences_drained_work_reports_its_fault_once() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let (events, task) = drain_a_failing_memset(ctx, &s);
            drop(events);
            let (first, second) = (s.synchronize(), s.synchronize());
            let err = run(first).unwrap_err().error;
            assert_eq!(err.acl_code(), Some(AclCode(507015)), "{strategy:?}: {err}");
            let fault = err.fault().map(|fault| fault.task_id);
            assert_eq!(fault, Some(task), "{strategy:?}: {err}");
            run(second).unwrap_or_else(|err| panic!("{strategy:?}: reported twice: {err}"));
            run(s.synchronize()).unwrap();
        });
    }
}

/// The device lost between the drain and the next submission, whose fence it refuses: that
/// operation fails (its buffer back) and `synchronize` fails, neither hanging. Devices 2 to 4,
/// one per strategy, lost for the rest of the process.
#[test]
fn a_device_lost_between_the_drain_and_the_fence_fails_the_next_operation_without_a_hang() {
    let _devices = exclusive(Some(DEVICES));
    for (strategy, id) in STRATEGIES.into_iter().zip(2..) {
        let device = Device::open(id).unwrap();
        let ctx = device.primary_context();
        let s = stream(ctx, strategy);
        let (events, _) = drain_a_failing_memset(ctx, &s);
        // Allocated first: a lost device allocates nothing.
        let buffer = DeviceBuffer::<u8>::new(ctx, 64).unwrap();
        sim::lose(&device).unwrap();
        drop(events);
        let failed = run(s.memset(buffer, 1)).unwrap_err();
        assert!(failed.value.is_some(), "{strategy:?}: {failed}");
        run(s.synchronize()).unwrap_err();
    }
}

/// Under `FailureMode::Continue` the operation after the fence fails on its own (its task
/// faults too): it reports its own task's fault, not the drained one's, and `synchronize`
/// reports the drained task's fault, once. Both faults are claimed when the fence's and the
/// operation's events report them: under `BlockingSync` their waits end on threads of their
/// own at about the same time, so the case runs in rounds.
#[test]
fn an_operation_failing_after_the_fence_reports_its_own_fault_not_the_drained_one() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        for round in 0..32 {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let (events, drained_task) = drain_a_failing_memset(ctx, &s);
                drop(events);
                sim::fail_task(&s, 1, AclCode(507015)).unwrap();
                // Held, so that both waits are under way when the device runs the two records.
                let held = sim::hold(&device).unwrap();
                let next = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
                // The last task of the submission is its completion record, after its memset.
                let last_of_its_own = last_task_id(ctx);
                let failed = run(async {
                    drop(held);
                    next.await
                })
                .unwrap_err();
                let fault = failed.error.fault().map(|fault| fault.task_id);
                let own = fault.is_some_and(|task| task > drained_task && task <= last_of_its_own);
                assert!(own, "{strategy:?}, round {round}: {failed}");
                assert!(failed.value.is_some(), "{strategy:?}: {failed}");
                synchronize_reports_the_drained_fault(&s, drained_task);
            });
        }
    }
}

/// Two consecutive memsets of one stream whose tasks both fail (`FailureMode::Continue`),
/// both waits under way when a hold is released, in rounds: each reports its own task's
/// fault, whichever wait ends first.
#[test]
fn consecutive_failing_operations_each_report_their_own_fault() {
    let (_devices, _, d1) = exclusive(Some(DEVICES));
    let device = d1.device();
    for strategy in STRATEGIES {
        let s = stream(&d1, strategy);
        for round in 0..32 {
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            sim::fail_task(&s, 2, AclCode(507015)).unwrap();
            let held = sim::hold(&device).unwrap();
            let first = s.memset(DeviceBuffer::<u8>::new(&d1, 64).unwrap(), 1);
            let last_of_first = last_task_id(&d1);
            let second = s.memset(DeviceBuffer::<u8>::new(&d1, 64).unwrap(), 2);
            let (first, second) = run(async {
                drop(held);
                (first.await, second.await)
            });
            let task = |failed: &npu::stream::OpError<DeviceBuffer<u8>>| {
                let fault = failed.error.fault();
                fault
                    .unwrap_or_else(|| panic!("{strategy:?}: {failed}"))
                    .task_id
            };
            let (first, second) = (first.unwrap_err(), second.unwrap_err());
            let what = format!("{strategy:?}, round {round}: {first} / {second}");
            assert!(task(&first) <= last_of_first, "{what}");
            assert!(task(&second) > last_of_first, "{what}");
            // Both failures were their operations' own; the record holds the first.
            run(s.synchronize()).unwrap_err();
        }
    }
}
