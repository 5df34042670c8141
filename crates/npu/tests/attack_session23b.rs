//! Attacks of the twenty-third session's second helper, through the `npu` facade: the
//! callback worker's new handling of aborts (`take_aborted`) with other streams of the device
//! firing callbacks meanwhile, aborts after a device fault, events recorded on aborted,
//! stopped and faulted streams, launches on a stream being aborted, and the paused clock with
//! several runtimes and strategies at once.
//!
//! Each test names the promise it attacks. The simulator's hold gate is process-wide, so every
//! test takes the file's device lock; every wait is bounded (`run`), so a hang fails its test.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use npu::prelude::*;
use npu::sim;
use npu::stream::{Completion, Strategy};
use npu::{AclCode, Error, FailureMode, Op, Stream};

/// Waits (spinning on the raw query, which does not block) until the device has stopped `s`
/// on a fault: `aclrtStreamQuery` then fails. npu-rs's strategies may or may not have noticed.
fn until_the_device_stopped(ctx: &Context, s: &Stream) {
    ctx.bind().unwrap();
    let query = ctx
        .runtime()
        .api()
        .aclrtStreamQuery
        .expect("npu-sim has it");
    let mut status = 0;
    // SAFETY: the stream is alive (`s`); the status is a valid out-pointer.
    while unsafe { query(s.as_raw(), &mut status) } == 0 {
        std::thread::yield_now();
    }
}

/// "`Error::Aborted` only for work an abort discarded": a `FailureMode::Stop` stream whose
/// first memset faults (507015) stops there; the abort that follows discards the memset the
/// fault stopped. The faulted memset ran and failed, and the other could no longer run once
/// the fault stopped the stream: both must report the fault (with its `DeviceFault`), and so
/// must an event recorded behind them, whether or not the strategy noticed the fault before
/// the abort won the race. Ten rounds under every strategy.
///
/// Broke under every strategy (in 20 rounds: `CallbackThread` 19, `BlockingSync` 12,
/// `EventPoll` 7): both came back `Error::Aborted`, the fault lost, whenever the abort's mark
/// moved before the strategy had failed them; the abort now checks the stream first.
#[test]
fn work_a_fault_stopped_before_an_abort_reports_the_fault_not_aborted() {
    a_fault_then(|_, s| run(s.abort()).unwrap());
}

/// The same promise when the abort is the device's, made through the raw API
/// (`aclrtDeviceTaskAbort`): npu-rs's device task abort callback asks each stream's query
/// before the discard, finds the fault that stopped it, and keeps it for the work it marked.
#[test]
fn work_a_fault_stopped_before_a_raw_device_task_abort_reports_the_fault_not_aborted() {
    a_fault_then(|ctx, _| {
        let abort = ctx.runtime().api().aclrtDeviceTaskAbort;
        let abort = abort.expect("npu-sim exports aclrtDeviceTaskAbort");
        // SAFETY: a plain call on a device this test opened, with a bounded timeout.
        let code = unsafe { abort(ctx.device_id() as i32, 1000) };
        assert_eq!(AclCode(code), AclCode(0), "the device task abort");
    });
}

/// Ten rounds under every strategy of [`two_memsets_the_first_to_stop_on_a_fault`], the
/// device released until it stopped the stream, then `abort`: both memsets and an event
/// recorded behind them report the fault.
fn a_fault_then(abort: impl Fn(&Context, &Stream)) {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        for round in 0..10 {
            let what = format!("{strategy:?} round {round}");
            let ctx = d0.device().create_context().unwrap();
            let (s, faulted, stopped, hold) =
                two_memsets_the_first_to_stop_on_a_fault(&ctx, strategy);
            // Held, so that the record is queued before the fault stops the context (which
            // then refuses records).
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            hold.release().unwrap();
            until_the_device_stopped(&ctx, &s);
            abort(&ctx, &s);
            for (name, op) in [("faulted", faulted), ("stopped", stopped)] {
                let err = run(op).unwrap_err();
                assert!(err.value.is_some(), "{what}: {name}'s buffer handed back");
                assert_the_fault(&format!("{what}: {name}"), &err.error);
            }
            let waited = run(event.wait()).unwrap_err();
            assert!(
                !matches!(waited, Error::Aborted { .. }),
                "{what}: the event behind them reported {waited}"
            );
        }
    }
}

/// A `FailureMode::Stop` stream of `ctx` whose first memset will fault (507015), with that
/// memset and a second one queued behind it while the device is held (the hold is returned).
fn two_memsets_the_first_to_stop_on_a_fault(
    ctx: &Context,
    strategy: Strategy,
) -> (
    Stream,
    Op<DeviceBuffer<u8>>,
    Op<DeviceBuffer<u8>>,
    sim::Hold,
) {
    let s = stream(ctx, strategy);
    s.set_failure_mode(FailureMode::Stop).unwrap();
    sim::fail_task(&s, 1, AclCode(507015)).unwrap();
    let hold = sim::hold(&ctx.device()).unwrap();
    let faulted = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
    let stopped = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2);
    (s, faulted, stopped, hold)
}

/// Asserts that `error` is the injected fault (507015) with its `DeviceFault`.
fn assert_the_fault(what: &str, error: &Error) {
    match error {
        Error::Acl(acl) => {
            assert_eq!(acl.code, AclCode(507015), "{what}");
            assert!(acl.fault.is_some(), "{what}: the fault lost");
        }
        other => panic!("{what}: reported {other}, not the fault"),
    }
}

/// The same promise with a second abort right behind the first: the first abort found the
/// fault and kept it for the work it discarded; the second finds the stream healthy again.
/// Whichever order the strategy fails the first abort's work in (the callback worker only on
/// its next pass, up to its report timeout later), the faulted memset and the one it stopped
/// still report the fault. Found by the session's last read: the stream kept one fault, which
/// the second abort replaced with none.
#[test]
fn a_second_abort_does_not_hide_the_fault_the_first_one_kept() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        for round in 0..5 {
            let what = format!("{strategy:?} round {round}");
            let ctx = d0.device().create_context().unwrap();
            let (s, faulted, stopped, hold) =
                two_memsets_the_first_to_stop_on_a_fault(&ctx, strategy);
            hold.release().unwrap();
            until_the_device_stopped(&ctx, &s);
            run(s.abort()).unwrap();
            run(s.abort()).unwrap();
            for (name, op) in [("faulted", faulted), ("stopped", stopped)] {
                assert_the_fault(&format!("{what}: {name}"), &run(op).unwrap_err().error);
            }
        }
    }
}

/// The same promise in the default `FailureMode::Continue`: the memset whose task faults runs
/// and fails, its record completing with the fault, and the stream goes on. An abort called
/// right after the record completed (seen through the raw event query, before the strategy
/// may have settled the memset) covers the memset with its mark, but discards nothing of it:
/// it must report the fault, and the memset behind it its success. Ten rounds under every
/// strategy. Found by the session's last read: the mark turned any error of a covered
/// operation into `Error::Aborted`.
#[test]
fn a_task_that_faulted_in_continue_mode_before_an_abort_reports_the_fault() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        for round in 0..10 {
            let what = format!("{strategy:?} round {round}");
            let ctx = d0.device().create_context().unwrap();
            let s = stream(&ctx, strategy);
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            let faulted = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let after = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
            let ran = Event::new(&ctx).unwrap();
            ran.record(&s).unwrap();
            until_recorded(&ctx, &ran);
            run(s.abort()).unwrap();
            let err = run(faulted).unwrap_err();
            match &err.error {
                Error::Acl(acl) => {
                    assert_eq!(acl.code, AclCode(507015), "{what}");
                    assert!(acl.fault.is_some(), "{what}: the fault lost");
                }
                other => panic!("{what}: the faulted memset reported {other}, not its fault"),
            }
            let written = run(after).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            assert_eq!(written.to_vec_blocking().unwrap(), [2; 64], "{what}");
        }
    }
}

/// Waits (spinning on the raw query, which does not block) until `event`'s record has
/// completed on the device; npu-rs's strategies may or may not have settled what came before.
fn until_recorded(ctx: &Context, event: &Event) {
    ctx.bind().unwrap();
    let query = ctx
        .runtime()
        .api()
        .aclrtQueryEventStatus
        .expect("npu-sim has it");
    let mut status = npu::ffi::ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: the event is alive (`event`); the status is a valid out-pointer.
    while unsafe { query(event.as_raw(), &mut status) } != 0
        || status != npu::ffi::ACL_EVENT_RECORDED_STATUS_COMPLETE
    {
        std::thread::yield_now();
    }
}

/// Waits until the runtime's abort of `s` has begun: it then refuses a raw submission (npu-rs
/// refuses its own from just before the call, so a raw one tells). `scratch` must outlive the
/// stream's work.
fn until_the_abort_began(ctx: &Context, s: &Stream, scratch: &DeviceBuffer<u8>) {
    ctx.bind().unwrap();
    let api = ctx.runtime().api();
    loop {
        // SAFETY: `scratch` holds 64 bytes and outlives the stream's work (the caller keeps
        // it until the stream is synchronized); the stream is `s`'s, its context current.
        let code = unsafe { (api.aclrtMemsetAsync)(scratch.as_raw(), 64, 0, 64, s.as_raw()) };
        if code != 0 {
            return;
        }
        std::thread::yield_now();
    }
}

/// Order, errors and liveness for the per-device callback worker (`take_aborted`), and the
/// same for the other strategies: stream `a` runs a gated kernel with memsets queued behind
/// it; while `a`'s abort waits for the kernel, a second stream `b` of the same device (and the
/// same strategy, so the same worker) queues sixteen memsets, whose callbacks fire as soon as
/// the kernel returns, racing the abort's end. A launch on `a` while the abort runs is refused
/// at once, its arguments handed back; after the abort a memset and a synchronize on `a`.
///
/// Every `b` operation must succeed, complete in submission order and write its value; `a`'s
/// queued memsets fail `Error::Aborted` with their buffers unwritten, the kernel's launch
/// fails `Aborted` once it has returned (its buffer written whole); `a`'s synchronize resolves
/// only after every discarded operation, and nothing stays pending. Five rounds per strategy.
#[test]
fn an_abort_while_another_streams_callbacks_fire_ends_its_work_in_order_and_spares_the_other() {
    let (_guard, d0, _d1) = exclusive(None);
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&d0, strategy), stream(&d0, strategy));
        for round in 0..5 {
            let what = format!("{strategy:?} round {round}");
            let x = run(a.memset(DeviceBuffer::<u8>::new(&d0, 256).unwrap(), 0)).unwrap();
            let zeroed: Vec<_> = (0..4)
                .map(|_| run(a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 0)).unwrap())
                .collect();
            set_gate(|gate| *gate = (false, false));
            // SAFETY: the kernel writes the 256 bytes of `x`, which the launch keeps.
            let running = unsafe { a.launch(&fill, 1, (x, 256u64)) };
            let queued: Vec<_> = zeroed.into_iter().map(|buf| a.memset(buf, 9)).collect();
            let discarded: Vec<Completion> =
                queued.iter().map(|op| op.completion().clone()).collect();
            wait_gate(|gate| gate.0);
            let aborting = a.abort();
            let scratch = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
            until_the_abort_began(&d0, &a, &scratch);
            // `b`'s callbacks fire while `a`'s abort waits for the kernel.
            let mut ours = Vec::new();
            for i in 0..16u8 {
                let op = b.memset(DeviceBuffer::<u8>::new(&d0, 32).unwrap(), i + 1);
                let completion = op.completion().clone();
                ours.push((i + 1, completion, op));
            }
            // A launch while the abort runs: refused, arguments back untouched.
            let late = DeviceBuffer::<u8>::new(&d0, 16).unwrap();
            // SAFETY: as above, 16 bytes.
            let refused = run(unsafe { a.launch(&fill, 1, (late, 16u64)) }).unwrap_err();
            assert!(refused.error.is_aborted(), "{what}: {}", refused.error);
            assert!(
                refused.value.is_some(),
                "{what}: the late launch's arguments back"
            );
            // The device runs one task at a time, so `b`'s work and callbacks come once the
            // kernel returns, racing the abort's end and its mark.
            set_gate(|gate| gate.1 = true);
            let mut results = Vec::new();
            run(async {
                for (value, completion, op) in ours.drain(..) {
                    let buffer = op.await.unwrap();
                    assert!(completion.is_complete());
                    results.push((value, buffer));
                }
            });
            // Submission order on `b`: each operation's completion saw every earlier one's.
            for (value, buffer) in results {
                assert_eq!(buffer.to_vec_blocking().unwrap(), [value; 32], "{what}");
            }
            run(aborting).unwrap();
            let after = a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 4);
            run(a.synchronize()).unwrap();
            let pending = discarded.iter().filter(|c| !c.is_complete()).count();
            assert_eq!(
                pending, 0,
                "{what}: discarded work pending after a later synchronize"
            );
            assert_eq!(
                run(after).unwrap().to_vec_blocking().unwrap(),
                [4; 64],
                "{what}"
            );
            for op in queued {
                let err = run(op).unwrap_err();
                assert!(
                    matches!(err.error, Error::Aborted { .. }),
                    "{what}: {}",
                    err.error
                );
                let buffer = err.value.expect("the buffer handed back");
                assert_eq!(buffer.to_vec_blocking().unwrap(), [0; 64], "{what}");
            }
            let err = run(running).unwrap_err();
            assert!(
                matches!(err.error, Error::Aborted { .. }),
                "{what}: {}",
                err.error
            );
            let (x, _) = err.value.expect("the arguments handed back");
            assert_eq!(x.to_vec_blocking().unwrap(), [0x5B; 256], "{what}");
            run(a.synchronize()).unwrap();
            drop(scratch);
        }
    }
}

/// Events across strategies: a record discarded by an abort (the abort confirmed while the
/// device is held) waits `Error::Aborted`; a record on a stopped stream fails with the stop's
/// error; an event dropped while its record is still queued, and its stream aborted, neither
/// hangs nor breaks a later record; timing across an aborted record is a typed error, and a
/// fresh pair records and times after the abort. Under every strategy.
#[test]
fn events_recorded_on_aborted_stopped_and_dropped_paths_wait_with_the_right_error() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let start = Event::new(&d0).unwrap();
        start.record(&s).unwrap();
        run(start.wait()).unwrap();
        let hold = sim::hold(&d0.device()).unwrap();
        let memset = s.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 1);
        let discarded = Event::new(&d0).unwrap();
        discarded.record(&s).unwrap();
        let dropped = Event::new(&d0).unwrap();
        dropped.record(&s).unwrap();
        drop(dropped);
        run(s.abort()).unwrap();
        hold.release().unwrap();
        let err = run(discarded.wait()).unwrap_err();
        assert!(matches!(err, Error::Aborted { .. }), "{strategy:?}: {err}");
        assert!(run(memset).unwrap_err().error.is_aborted(), "{strategy:?}");
        // A timestamp the device never wrote: refused, not a number.
        assert!(Event::elapsed(&start, &discarded).is_err(), "{strategy:?}");
        let end = Event::new(&d0).unwrap();
        end.record(&s).unwrap();
        run(end.wait()).unwrap();
        Event::elapsed(&start, &end).unwrap();
        // A stop: the record never runs, and says why.
        let hold = sim::hold(&d0.device()).unwrap();
        let stopped = Event::new(&d0).unwrap();
        stopped.record(&s).unwrap();
        s.stop().unwrap();
        hold.release().unwrap();
        let err = run(stopped.wait()).unwrap_err();
        assert!(!matches!(err, Error::Aborted { .. }), "{strategy:?}: {err}");
        run(s.abort()).unwrap();
        run(s.synchronize()).unwrap();
    }
}

/// Typed errors naming the API for launches with bad configurations, never a panic: 0 blocks
/// (through `launch`; `LaunchConfig` cannot hold 0), a function of another device, on every
/// strategy; the arguments come back untouched. And rule 2 for a launch dropped mid-flight on
/// a stream then aborted: the kernel still writes its buffer, which nothing else owns by then.
#[test]
fn bad_launches_are_refused_by_name_and_a_dropped_launch_survives_an_abort() {
    let (_guard, d0, d1) = exclusive(None);
    let fill = gated_fill(&d0);
    let other = gated_fill(&d1);
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let x = DeviceBuffer::<u8>::new(&d0, 16).unwrap();
        // SAFETY: refused before the device sees it.
        let err = run(unsafe { s.launch(&fill, 0, (x, 16u64)) }).unwrap_err();
        assert!(
            matches!(
                &err.error,
                Error::InvalidArgument {
                    api: "Stream::launch",
                    argument: "blocks",
                    ..
                }
            ),
            "{strategy:?}: {}",
            err.error
        );
        let (x, _) = err.value.expect("arguments back");
        // SAFETY: refused before the device sees it.
        let err = run(unsafe { s.launch(&other, 1, (x, 16u64)) }).unwrap_err();
        assert!(
            matches!(
                &err.error,
                Error::InvalidArgument {
                    argument: "function",
                    ..
                }
            ),
            "{strategy:?}: {}",
            err.error
        );
        assert!(err.value.is_some());
        // Dropped mid-flight, then the stream aborted while the kernel runs.
        set_gate(|gate| *gate = (false, false));
        let y = DeviceBuffer::<u8>::new(&d0, 4096).unwrap();
        // SAFETY: the kernel writes the 4096 bytes of `y`, which the launch keeps.
        drop(unsafe { s.launch(&fill, 2, (y, 4096u64)) });
        wait_gate(|gate| gate.0);
        let aborting = s.abort();
        set_gate(|gate| gate.1 = true);
        run(aborting).unwrap();
        run(s.synchronize()).unwrap();
    }
}

/// The paused clock with several runtimes and strategies at once: three threads, each with
/// its own paused runtime, wait on held work of a stream of another strategy (an `Op`, an
/// `Event::wait`, a `Completion::wait`), each raced against a one-hour timer; the device is released once every thread has polled. No
/// timer may fire.
#[test]
fn paused_clocks_of_several_runtimes_wait_for_work_of_every_strategy() {
    let (_guard, d0, _d1) = exclusive(None);
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&st| stream(&d0, st)).collect();
    let hold = sim::hold(&d0.device()).unwrap();
    let polled = Arc::new(Barrier::new(STRATEGIES.len() + 1));
    let fired = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = streams
        .iter()
        .cloned()
        .map(|s| {
            let (polled, fired, ctx) = (polled.clone(), fired.clone(), d0.clone());
            std::thread::spawn(move || {
                let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
                let completion = op.completion().clone();
                let event = Event::new(&ctx).unwrap();
                event.record(&s).unwrap();
                let told = AtomicBool::new(false);
                paused_runtime().block_on(async {
                    let all = async {
                        let buffer = op.await.unwrap();
                        event.wait().await.unwrap();
                        completion.wait().await.unwrap();
                        buffer
                    };
                    tokio::pin!(all);
                    let hour = tokio::time::sleep(Duration::from_secs(3600));
                    tokio::pin!(hour);
                    let buffer = loop {
                        tokio::select! {
                            biased;
                            buffer = &mut all => break buffer,
                            () = &mut hour => {
                                fired.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            () = std::future::ready(()), if !told.swap(true, Ordering::SeqCst) => {
                                polled.wait();
                            }
                        }
                    };
                    assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64]);
                });
            })
        })
        .collect();
    polled.wait();
    hold.release().unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(
        fired.load(Ordering::SeqCst),
        0,
        "a paused clock advanced over device work"
    );
}
