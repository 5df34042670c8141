//! Attacks of the thirty-first session, through the `npu` facade: events of the flags no
//! earlier attack created (`ACL_EVENT_EXTERNAL`, `ACL_EVENT_IPC`, `ACL_EVENT_DEVICE_USE_ONLY`,
//! `ACL_EVENT_CAPTURE_STREAM_PROGRESS`) recorded, waited on and timed by npu-rs's streams;
//! pitched (2D) copies at the arithmetic extremes of their pitches; and the angles listed
//! with each test.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`),
//! so a hang fails its test.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::ffi;
use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::sim::{self, TimingModel};
use npu::stream::{Completion, Copy2d, EventKind, Notify, ValueCondition, ValueWord};
use npu::{Error, Stream};

fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    exclusive(Some(2))
}

/// An error npu-rs may give for a misused event: the runtime's, or a refusal naming the API.
fn typed(err: &Error, what: &str) {
    assert!(
        matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
        "{what}: {err:?}"
    );
}

/// Events of every single flag and both models are recorded on a held stream, waited on by a
/// second stream (with and without a timeout), awaited and timed: each use works or is a
/// typed error, work behind a wait that was accepted never runs before the record, and every
/// operation resolves once the device is released.
#[test]
fn events_of_every_single_flag_order_streams_or_are_refused() {
    let (_guard, ctx, _other) = devices();
    let flags = [
        ffi::ACL_EVENT_SYNC,
        ffi::ACL_EVENT_CAPTURE_STREAM_PROGRESS,
        ffi::ACL_EVENT_TIME_LINE,
        ffi::ACL_EVENT_DEVICE_USE_ONLY,
        ffi::ACL_EVENT_EXTERNAL,
        ffi::ACL_EVENT_IPC,
        ffi::ACL_EVENT_IPC | ffi::ACL_EVENT_SYNC,
        ffi::ACL_EVENT_EXTERNAL | ffi::ACL_EVENT_SYNC | ffi::ACL_EVENT_TIME_LINE,
    ];
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        for kind in [EventKind::Legacy, EventKind::Ex] {
            for flags in flags {
                let what = format!("{strategy:?} {kind:?} {flags:#x}");
                let event = match Event::builder(&ctx).kind(kind).flags(flags).build() {
                    Ok(event) => event,
                    Err(err) => {
                        typed(&err, &what);
                        continue;
                    }
                };
                if let Err(err) = event.is_complete() {
                    typed(&err, &what);
                }
                let hold = sim::hold(&ctx.device()).unwrap();
                let first = a.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9);
                let recorded = event.record(&a);
                let waited = b.wait_event(&event);
                let timed_wait = b.wait_event_timeout(&event, Duration::from_secs(30));
                let after = b.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                if recorded.is_ok() && waited.is_ok() {
                    assert!(!after.is_complete(), "{what}: ran before the record");
                }
                let event_wait = event.wait();
                hold.release().unwrap();
                run(first).unwrap();
                if let Err(err) = &recorded {
                    typed(err, &what);
                }
                if let Err(err) = &waited {
                    typed(err, &what);
                }
                if let Err(err) = run(timed_wait) {
                    typed(&err.error, &what);
                }
                match run(after) {
                    Ok(buffer) => assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 64]),
                    Err(err) => panic!("{what}: work after the waits failed: {err}"),
                }
                if let Err(err) = run(event_wait) {
                    typed(&err, &what);
                }
                match Event::elapsed(&event, &event) {
                    Ok(d) => assert_eq!(d, Duration::ZERO, "{what}"),
                    Err(err) => typed(&err, &what),
                }
                if let Err(err) = event.timestamp_us() {
                    typed(&err, &what);
                }
                run(a.synchronize()).unwrap();
                run(b.synchronize()).unwrap();
            }
        }
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// Pitched copies whose pitch is as large as a `usize` allows (one row, so no row is ever
/// reached through it) copy exactly their one row in every direction, or are refused with a
/// typed error naming the API; pitches one step past what a byte count can hold, and extents
/// that overflow only through the row count, are refused, never a panic.
#[test]
fn pitched_copies_at_the_largest_pitches_copy_one_row_or_are_refused() {
    let (_guard, ctx, _other) = devices();
    let data: Vec<u32> = (1..=8).collect();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            for pitch in [8, usize::MAX / 4, usize::MAX / 4 + 1, usize::MAX] {
                let shape = Copy2d {
                    width: 8,
                    height: 1,
                    src_pitch: pitch,
                    dst_pitch: pitch,
                };
                let host = PinnedBuffer::from_slice(&ctx, &data).unwrap();
                let dst = DeviceBuffer::<u32>::new(&ctx, 8).unwrap();
                match s.copy_2d_h2d(host, dst, shape).await {
                    Ok((_, dst)) => {
                        assert_eq!(dst.to_vec_blocking().unwrap(), data, "{pitch}");
                        let back = PinnedBuffer::<u32>::new(&ctx, 8).unwrap();
                        let (dev, back) = s.copy_2d_d2h(dst, back, shape).await.unwrap();
                        assert_eq!(back[..], data[..], "{pitch}");
                        let other = DeviceBuffer::<u32>::new(&ctx, 8).unwrap();
                        let (_, other) = s.copy_2d_d2d(dev, other, shape).await.unwrap();
                        assert_eq!(other.to_vec_blocking().unwrap(), data, "{pitch}");
                    }
                    Err(err) => {
                        assert!(pitch > usize::MAX / 4, "{pitch}: {}", err.error);
                        assert_eq!(invalid(&err.error).0, "Stream::copy_2d_h2d");
                    }
                }
                // Two rows: the second row's start overflows.
                let two = Copy2d { height: 2, ..shape };
                let host = PinnedBuffer::from_slice(&ctx, &data).unwrap();
                let dst = DeviceBuffer::<u32>::new(&ctx, 8).unwrap();
                if pitch > 8 {
                    let err = s.copy_2d_h2d(host, dst, two).await.unwrap_err();
                    assert_eq!(invalid(&err.error).0, "Stream::copy_2d_h2d");
                }
            }
            // Zero-width copies of many rows with a zero pitch touch nothing.
            let shape = Copy2d {
                width: 0,
                height: npu::stream::MAX_2D_HEIGHT,
                src_pitch: 0,
                dst_pitch: 0,
            };
            let host = PinnedBuffer::from_slice(&ctx, &data).unwrap();
            let dst = s
                .memset(DeviceBuffer::<u32>::new(&ctx, 8).unwrap(), 0xAB)
                .await
                .unwrap();
            match s
                .copy_2d_h2d(host.view(8..).unwrap(), dst.view(..0).unwrap(), shape)
                .await
            {
                Ok((_, dst)) => {
                    let dst = dst.into_inner();
                    assert_eq!(dst.to_vec_blocking().unwrap(), [0xABAB_ABAB; 8]);
                }
                Err(err) => typed(&err.error, "zero width"),
            }
        });
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// A value whose drop waits for its stream with `futures::executor::block_on`, as teardown
/// code of a user's own may: it records that the drop began, and what the wait returned.
struct WaitsWhenDropped {
    stream: Stream,
    began: Arc<AtomicBool>,
    waited: Arc<Mutex<Option<npu::Result<()>>>>,
}

impl Drop for WaitsWhenDropped {
    fn drop(&mut self) {
        self.began.store(true, Ordering::SeqCst);
        let waited = futures::executor::block_on(self.stream.synchronize()).map_err(|e| e.error);
        *self.waited.lock().unwrap() = Some(waited);
    }
}

/// The runtimes a test suite or a service drops with tasks still awaiting device work.
#[derive(Debug, Clone, Copy)]
enum Shape {
    CurrentThread,
    Paused,
    MultiThread,
}

impl Shape {
    fn build(self) -> tokio::runtime::Runtime {
        match self {
            Shape::CurrentThread => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            Shape::Paused => paused_runtime(),
            Shape::MultiThread => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        }
    }
}

/// "No drop waits on device work" is npu-rs's promise, not its users': a task owning a value
/// whose drop blocks on a synchronisation of the held device (`block_on` from a drop) is
/// dropped with its runtime (current-thread, paused, multi-thread), the device released by
/// another thread once that drop began. The wait ends with the device's work, under every
/// strategy, on a runtime that is shutting down (its blocking pool and its paused clock's
/// keepers refused): the drop returns `Ok`, the runtime's drop returns, nothing leaks.
#[test]
fn a_drop_blocking_on_a_synchronisation_while_its_runtime_shuts_down_returns() {
    let (_guard, ctx, _other) = devices();
    for strategy in STRATEGIES {
        for shape in [Shape::CurrentThread, Shape::Paused, Shape::MultiThread] {
            let what = format!("{strategy:?} {shape:?}");
            let s = stream(&ctx, strategy);
            let hold = sim::hold(&ctx.device()).unwrap();
            let began = Arc::new(AtomicBool::new(false));
            let waited = Arc::new(Mutex::new(None));
            let runtime = shape.build();
            let (polled, polled_rx) = tokio::sync::oneshot::channel();
            let guard = WaitsWhenDropped {
                stream: s.clone(),
                began: began.clone(),
                waited: waited.clone(),
            };
            let memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
            runtime.spawn(async move {
                let _guard = guard;
                let _ = polled.send(());
                let _ = memset.await;
            });
            runtime.block_on(polled_rx).unwrap();
            let releaser = {
                let began = began.clone();
                std::thread::spawn(move || {
                    until("the drop began", || began.load(Ordering::SeqCst));
                    hold.release().unwrap();
                })
            };
            watchdog(&what, move || drop(runtime));
            releaser.join().unwrap();
            let waited = waited.lock().unwrap().take();
            assert!(matches!(waited, Some(Ok(()))), "{what}: {waited:?}");
            run(s.synchronize()).unwrap();
        }
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// One thread's share of [`aborts_stops_and_holds_racing_submissions_end_everything`]: memsets
/// (kept, dropped, or forgotten... never: forgetting leaks by design), event records, waits of
/// one stream on another's events, and synchronisations, on streams chosen at random. Returns
/// the completions of everything it submitted.
fn racing_submitter(
    ctx: &Context,
    streams: &[Stream],
    events: &[Event],
    seed: u64,
) -> Vec<Completion> {
    let mut rng = Rng(seed);
    let mut done = Vec::new();
    let mut kept = Vec::new();
    for _ in 0..300 {
        let s = &streams[rng.below(streams.len())];
        match rng.below(6) {
            0..=2 => {
                let memset = s.memset(DeviceBuffer::<u8>::new(ctx, 256).unwrap(), 7);
                done.push(memset.completion().clone());
                if rng.below(2) == 0 {
                    kept.push(memset);
                }
            }
            3 => {
                let _ = events[rng.below(events.len())].record(s);
            }
            4 => {
                let other = &streams[rng.below(streams.len())];
                let _ = other.wait_event(&events[rng.below(events.len())]);
            }
            _ => done.push(s.synchronize().completion().clone()),
        }
    }
    done
}

/// "Every operation ends, nothing leaks, and the streams work again" under three threads
/// submitting at random to three streams (one per strategy) while a fourth aborts, stops and
/// holds at random: `Stream::abort` (its mark and confirmation shared with the device task
/// abort's since the last session), `Stream::stop` followed later by an abort, the device held
/// and released. Once the racers are done, every stream is aborted (clearing its stop) and the
/// device released: every completion ends, every stream then runs a memset, and the device's
/// allocations return to none.
#[test]
fn aborts_stops_and_holds_racing_submissions_end_everything() {
    let (_guard, ctx, _other) = devices();
    for round in 0..8u64 {
        let streams: Vec<Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
        let events: Vec<Event> = (0..3).map(|_| Event::new(&ctx).unwrap()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let disruptor = {
            let (streams, stop, device) = (streams.clone(), stop.clone(), ctx.device());
            std::thread::spawn(move || {
                let mut rng = Rng((0x5eed ^ (round << 8)) | 1);
                let mut hold = None;
                while !stop.load(Ordering::SeqCst) {
                    let s = &streams[rng.below(streams.len())];
                    match rng.below(6) {
                        0 => drop(futures::executor::block_on(s.abort())),
                        // Not awaited: the abort runs all the same.
                        1 => drop(s.abort()),
                        2 => drop(s.stop()),
                        3 => drop(sim::fail_task(s, 1 + rng.below(3) as u64, AclCode(507015))),
                        4 => hold = Some(sim::hold(&device).unwrap()),
                        _ => drop(hold.take()),
                    }
                    std::thread::yield_now();
                }
                drop(hold);
            })
        };
        let submitters: Vec<_> = (0..3u64)
            .map(|i| {
                let (ctx, streams, events) = (ctx.clone(), streams.clone(), events.clone());
                std::thread::spawn(move || {
                    racing_submitter(&ctx, &streams, &events, ((round * 3 + i) * 0x9e37) | 1)
                })
            })
            .collect();
        let done: Vec<Completion> = submitters
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        stop.store(true, Ordering::SeqCst);
        disruptor.join().unwrap();
        let what = format!("round {round}");
        run(async {
            for s in &streams {
                s.abort().await.unwrap();
            }
            for completion in &done {
                let _ = completion.wait().await;
            }
            // A fault armed for a task the racers never submitted fails one of these with
            // its code; nothing else may.
            for s in &streams {
                let mut tries = 0;
                let buffer = loop {
                    tries += 1;
                    match s
                        .memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 1)
                        .await
                    {
                        Ok(buffer) => break buffer,
                        Err(err) if tries < 8 => {
                            assert_eq!(err.error.acl_code(), Some(AclCode(507015)), "{what}")
                        }
                        Err(err) => panic!("{what}: the stream never worked again: {err}"),
                    }
                };
                assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 16], "{what}");
            }
        });
    }
    until_released("the racing rounds' buffers", || live_allocations(&ctx) == 0);
}

/// A device-side wait nothing will satisfy, queued on `waiter` (with `helper` for the kinds
/// that need a second stream): a value wait for a word no one writes, a notify wait for a
/// notify no one records, or an event wait for a record queued behind such a value wait.
/// Returns the wait's completion; the objects it waits on live in `keep`.
fn unsatisfied_wait(
    kind: usize,
    ctx: &Context,
    waiter: &Stream,
    helper: &Stream,
    keep: &mut Vec<Box<dyn std::any::Any>>,
) -> Completion {
    match kind {
        0 => {
            let word = Arc::new(ValueWord::new(ctx, 0).unwrap());
            let wait = waiter.wait_value(word.clone(), 1, ValueCondition::Equal);
            keep.push(Box::new(word));
            let done = wait.completion().clone();
            keep.push(Box::new(wait));
            done
        }
        1 => {
            let notify = Notify::new(ctx).unwrap();
            let wait = waiter.wait_notify(&notify);
            keep.push(Box::new(notify));
            let done = wait.completion().clone();
            keep.push(Box::new(wait));
            done
        }
        _ => {
            let done = unsatisfied_wait(0, ctx, helper, helper, keep);
            let event = Event::new(ctx).unwrap();
            event.record(helper).unwrap();
            waiter.wait_event(&event).unwrap();
            keep.push(Box::new(event));
            done
        }
    }
}

/// `Stream::stop` of a stream whose running task is a device-side wait nothing will satisfy
/// (a value wait, a notify wait, an event wait for a record behind such a wait): the stop
/// returns, the stream's queued work fails instead of staying pending for ever, an abort then
/// makes the stream work again, and aborting the helper stream ends the rest; nothing leaks.
#[test]
fn stopping_a_stream_inside_a_wait_nothing_satisfies_ends_its_work() {
    let (_guard, ctx, _other) = devices();
    for strategy in STRATEGIES {
        for kind in 0..3 {
            let what = format!("{strategy:?} wait kind {kind}");
            let (waiter, helper) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let mut keep = Vec::new();
            let waiting = unsatisfied_wait(kind, &ctx, &waiter, &helper, &mut keep);
            let behind = waiter.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
            waiter.stop().unwrap();
            run(async {
                let behind = behind.await;
                assert!(behind.is_err(), "{what}: work behind the stopped wait ran");
                if kind < 2 {
                    assert!(waiting.wait().await.is_err(), "{what}: the wait passed");
                }
                waiter.abort().await.unwrap();
                helper.abort().await.unwrap();
                for s in [&waiter, &helper] {
                    let buffer = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 2).await;
                    assert_eq!(buffer.unwrap().to_vec_blocking().unwrap(), [2; 8], "{what}");
                }
            });
            drop(keep);
        }
    }
    until_released("the waits' memory", || live_allocations(&ctx) == 0);
}

/// An event recorded on a stream that is then stopped, with another stream's wait queued on
/// that record: `Event::wait` ends once the stop is reported (the record will never be
/// reached), without an abort; the waiting stream's work goes on once the stopped stream is
/// aborted (the record discarded), and a record of the same event afterwards orders streams
/// again.
#[test]
fn a_record_on_a_stopped_stream_ends_event_waits_and_its_abort_frees_the_waiting_stream() {
    let (_guard, ctx, _other) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let event = Event::new(&ctx).unwrap();
        let hold = sim::hold(&ctx.device()).unwrap();
        let first = a.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        event.record(&a).unwrap();
        let waiting = event.wait();
        b.wait_event(&event).unwrap();
        let behind = b.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
        a.stop().unwrap();
        hold.release().unwrap();
        run(async {
            assert!(first.await.is_err(), "{what}: a stopped stream's work ran");
            assert!(
                waiting.await.is_err(),
                "{what}: a record never reached passed"
            );
            a.abort().await.unwrap();
            let behind = behind.await.unwrap();
            assert_eq!(behind.to_vec_blocking().unwrap(), [2; 64], "{what}");
            // The event orders the two streams again.
            let hold = sim::hold(&ctx.device()).unwrap();
            let fill = a.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
            event.record(&a).unwrap();
            b.wait_event(&event).unwrap();
            let after = b.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4);
            assert!(!after.is_complete(), "{what}");
            hold.release().unwrap();
            fill.await.unwrap();
            after.await.unwrap();
            event.wait().await.unwrap();
        });
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// `npu::sim::fail_task` with the codes ACL reserves for a synchronisation whose wait ran out
/// (`ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`, `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT`) is refused by the
/// control with a typed error (`Error::InvalidArgument` naming it, the argument and the code),
/// and fails no task: no task of a real device fails with them, and a task failed with one
/// made every wait on its completion event answer "still running", so its operation stayed
/// pending for ever under every strategy (the `EVENT_SYNC_TIMEOUT` case hung; a drained operation's next `synchronize` lost the fault and
/// its context's events were never given back). Any other code is still injected: the next
/// memset fails with it, and the one after runs.
#[test]
fn a_wait_timeout_code_is_refused_as_an_injected_task_failure() {
    let (_guard, ctx, _other) = devices();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for code in [AclCode::STREAM_SYNC_TIMEOUT, AclCode::EVENT_SYNC_TIMEOUT] {
            let what = format!("{strategy:?} {code}");
            let err = sim::fail_task(&s, 1, code).expect_err(&what);
            assert!(
                matches!(
                    err,
                    npu::Error::InvalidArgument {
                        api: "npu::sim::fail_task",
                        argument: "code",
                        ..
                    }
                ),
                "{what}: {err}"
            );
            let shown = err.to_string();
            assert!(shown.contains(&code.0.to_string()), "{what}: {shown}");
            assert!(shown.contains("not a task failure"), "{what}: {shown}");
        }
        run(async {
            let buffer = s
                .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)
                .await;
            assert_eq!(
                buffer.unwrap().to_vec_blocking().unwrap(),
                [1; 64],
                "{strategy:?}"
            );
            sim::fail_task(&s, 1, AclCode::WAIT_TIMEOUT).unwrap();
            let failed = s
                .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)
                .await;
            let code = failed.unwrap_err().error.acl_code();
            assert_eq!(code, Some(AclCode::WAIT_TIMEOUT), "{strategy:?}");
            assert!(
                s.synchronize().await.is_err(),
                "{strategy:?}: the failure is reported"
            );
            s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3)
                .await
                .unwrap();
        });
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// Every error code ACL's ranges hold (parameter, runtime, resource and device codes), injected
/// with `npu::sim::fail_task` into a memset of a plain buffer and of a `DevicePool` block (both
/// backends) under every strategy: the injection is refused (the wait-timeout codes only), or
/// the operation ends with exactly that code, as the control promises; none is taken for a
/// lost device, an abort or a wait still running. The stream's `synchronize` ends, the next
/// memset and pool block work, and the pool has nothing allocated once its blocks are back.
#[test]
fn a_task_failed_with_any_code_ends_its_operation_with_that_code() {
    let (_guard, ctx, _other) = devices();
    let codes: Vec<i32> = (100000..100050)
        .chain(107000..107050)
        .chain(207000..207020)
        .chain(500000..500010)
        .chain(507000..507100)
        .chain(507890..507920)
        .collect();
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
            for &code in &codes {
                let what = format!("{backend:?} {strategy:?} {code}");
                if let Err(err) = sim::fail_task(&s, 1, AclCode(code)) {
                    assert!(AclCode(code).is_timeout(), "{what}: refused: {err}");
                    continue;
                }
                run(async {
                    let plain = s
                        .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)
                        .await;
                    let failed = plain.map(drop).unwrap_err().error;
                    assert_eq!(failed.acl_code(), Some(AclCode(code)), "{what}: {failed}");
                    let _ = s.synchronize().await;
                    sim::fail_task(&s, 1, AclCode(code)).unwrap();
                    let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                    let failed = s.memset(block, 2).await.map(drop).unwrap_err().error;
                    assert_eq!(failed.acl_code(), Some(AclCode(code)), "{what}: {failed}");
                    let _ = s.synchronize().await;
                    let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                    let block = s.memset(block, 3).await.unwrap();
                    assert_eq!(s.download(block).await.unwrap(), [3; 4096], "{what}");
                });
            }
            until_released("the pool's blocks", || pool.stats().cache.allocated == 0);
        }
    }
    // A dropped pool gives its memory back on a thread of its own, which the reaper's flush
    // does not wait for.
    until_released("the pools' memory", || live_allocations(&ctx) == 0);
}

/// A timing model whose every task lasts for centuries (`min_task_ns` near `u64::MAX / 2`,
/// a kernel duration of `Duration::MAX`): the controls take it (or refuse it by name); an
/// asynchronous memset then paces on the device, and `Stream::abort` ends it at once with
/// `Error::Aborted` instead of after its simulated duration; with the model cleared the
/// stream works again. Every strategy.
#[test]
fn an_abort_ends_a_task_paced_for_centuries() {
    let (_guard, _ctx, ctx) = devices();
    let device = ctx.device();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let century = TimingModel::default().min_task_ns(u64::MAX / 2);
        sim::set_timing(&device, Some(century)).unwrap();
        if let Err(err) = sim::set_kernel_duration(&device, "scale_f32", Duration::MAX) {
            assert!(matches!(err, Error::Acl(_)), "{what}: {err:?}");
        }
        let paced = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        run(async {
            s.abort().await.unwrap();
            let err = paced.await.map(drop).unwrap_err().error;
            assert!(matches!(err, Error::Aborted { .. }), "{what}: {err:?}");
            sim::set_timing(&device, None).unwrap();
            let buffer = s
                .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)
                .await;
            assert_eq!(
                buffer.unwrap().to_vec_blocking().unwrap(),
                [2; 64],
                "{what}"
            );
        });
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// Rules 2 and 3 for `Arc` clones raced across threads: eight threads copy out of clones of
/// one device buffer on streams of their own (every strategy among them), dropping some
/// futures unpolled, while the main thread waits for the buffer to be its alone
/// (`Arc::try_unwrap`) and only then rewrites it. A clone inside a pending or dropped copy
/// keeps the buffer shared until the device is done, so every copy reads one round's bytes
/// whole, never a rewrite's; nothing leaks.
#[test]
fn arc_clones_raced_across_threads_keep_a_buffer_shared_until_every_copy_ends() {
    let (_guard, ctx, _other) = devices();
    let mut buffer = DeviceBuffer::from_host_blocking(&ctx, &[0u8; 4096]).unwrap();
    for round in 1..=6u8 {
        let shared = Arc::new(buffer);
        let readers: Vec<_> = (0..8usize)
            .map(|i| {
                let (ctx, shared) = (ctx.clone(), shared.clone());
                std::thread::spawn(move || {
                    let s = stream(&ctx, STRATEGIES[i % 3]);
                    let mut seen = Vec::new();
                    for j in 0..4 {
                        let host = PinnedBuffer::<u8>::new(&ctx, 4096).unwrap();
                        let copy = s.copy_d2h(shared.clone(), host);
                        if (i + j) % 3 == 0 {
                            drop(copy); // the clone goes with the copy, after the device
                            continue;
                        }
                        let (_, host) = futures::executor::block_on(copy).unwrap();
                        seen.push(host.to_vec());
                    }
                    seen
                })
            })
            .collect();
        let (mut shared, deadline) = (shared, std::time::Instant::now() + HANG);
        let owned = loop {
            match Arc::try_unwrap(shared) {
                Ok(owned) => break owned,
                Err(again) => shared = again,
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: a clone was never let go"
            );
            sim::flush_releases();
            std::thread::yield_now();
        };
        for reader in readers {
            for bytes in reader.join().unwrap() {
                assert!(
                    bytes.iter().all(|&b| b == round - 1),
                    "round {round}: torn read"
                );
            }
        }
        let s = stream(&ctx, STRATEGIES[round as usize % 3]);
        buffer = run(s.memset(owned, round)).unwrap();
    }
    assert_eq!(buffer.to_vec_blocking().unwrap(), [6; 4096]);
    drop(buffer);
    assert_eq!(live_allocations(&ctx), 0);
}
