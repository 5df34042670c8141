//! Attacks of the seventeenth session, through the `npu` facade: events at the edges of their
//! models (Ex events, events that cannot be waited on or timed, a device out of hardware
//! events), streams built with odd configurations and streams up to the device's limit, and a
//! Tokio clock paused while an operation is already in flight.
//!
//! Each test is named for the promise it attacks and asserts it, under all three strategies
//! where a stream is involved. The simulator's hold gate and live counters are process-wide,
//! so every test takes the file's lock; every wait is bounded, so a hang fails its test with a
//! message instead of stalling the suite.

mod common;

use std::future::Future;
use std::time::Duration;

use common::*;
use npu::ffi;
use npu::prelude::*;
use npu::sim;
use npu::stream::{EventKind, StreamPool};
use npu::{Error, Stream};

/// The simulator's devices for this file: 0 and 1 (`exclusive`), 2 and 3 for the tests that
/// exhaust a device's resources.
const DEVICES: u32 = 4;

fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    exclusive(Some(DEVICES))
}

/// A round trip through `stream`: upload `data`, download it again.
async fn round_trip(ctx: &Context, stream: &Stream, data: &[u32]) -> npu::Result<Vec<u32>> {
    let host = PinnedBuffer::from_slice(ctx, data)?;
    let device = DeviceBuffer::<u32>::new(ctx, data.len())?;
    let (host, device) = stream.copy_h2d(host, device).await?;
    let back = PinnedBuffer::<u32>::new(ctx, data.len())?;
    let (_, back) = stream.copy_d2h(device, back).await?;
    drop(host);
    Ok(back.to_vec())
}

/// Bad input and exhausted resources are typed errors, never a hang: once a device has no
/// hardware event left (the user's own events took them all), a stream of a context whose
/// completion-event pool is still empty cannot record the event that watches its operations.
/// Each operation must still resolve (drained by the sentinel) with its buffers handed back,
/// and once the user's events are dropped the same stream works again and no event is left.
#[test]
fn operations_resolve_when_the_device_has_no_hardware_event_left() {
    let (_guard, _d0, _d1) = devices();
    let device = Device::open(2).unwrap();
    let baseline = sim::device_stats(&device).unwrap().live_events;
    let hog = device.create_context().unwrap();
    let mut events = Vec::new();
    let exhausted = loop {
        match Event::new(&hog) {
            Ok(event) => events.push(event),
            Err(err) => break err,
        }
        assert!(
            events.len() <= 1 << 20,
            "the device never ran out of events"
        );
    };
    assert!(
        matches!(exhausted, Error::Acl(_)),
        "a typed ACL error: {exhausted:?}"
    );
    for strategy in STRATEGIES {
        // A context of its own: its event pool has no event to reuse.
        let ctx = device.create_context().unwrap();
        let stream = stream(&ctx, strategy);
        let data: Vec<u32> = (0..1024).collect();
        let host = PinnedBuffer::from_slice(&ctx, &data).unwrap();
        let dst = DeviceBuffer::<u32>::new(&ctx, data.len()).unwrap();
        match run(stream.copy_h2d(host, dst)) {
            Ok((host, dst)) => assert_eq!((host.len(), dst.len()), (1024, 1024)),
            Err(err) => {
                let (host, dst) = err.value.expect("a failed copy hands its buffers back");
                assert_eq!((host.len(), dst.len()), (1024, 1024), "{strategy:?}");
            }
        }
        // A user event can neither be made nor, for the same reason, watched.
        assert!(Event::new(&ctx).is_err());
        run(stream.synchronize()).ok();
        drop(stream);
        drop(ctx);
    }
    drop(events);
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let stream = stream(&ctx, strategy);
        let data: Vec<u32> = (0..1024).map(|i| i * 3).collect();
        assert_eq!(run(round_trip(&ctx, &stream, &data)).unwrap(), data);
    }
    drop(hog);
    // The completion events of the contexts above were pooled and are destroyed with the
    // last of their streams, which the reaper destroys after their last completion.
    until("no event or allocation is left", || {
        sim::flush_releases();
        let stats = sim::device_stats(&device).unwrap();
        stats.live_allocations == 0 && stats.live_events <= baseline
    });
}

/// Bad input is a typed error naming the API, never a panic: every single stream flag and
/// extreme priorities either build a stream that runs work to completion under each strategy,
/// or are refused with an error naming `StreamBuilder::build` (the unwatchable flags) or the
/// ACL call.
#[test]
fn streams_of_every_flag_and_extreme_priorities_work_or_are_refused() {
    let (_guard, ctx, _) = devices();
    let unwatchable =
        ffi::ACL_STREAM_PERSISTENT | ffi::ACL_STREAM_CPU_SCHEDULE | ffi::ACL_STREAM_DEVICE_USE_ONLY;
    let data: Vec<u32> = (0..256).collect();
    for strategy in STRATEGIES {
        for bit in 0..32 {
            let flags = 1u32 << bit;
            for priority in [0, 7, i32::MAX as u32, u32::MAX] {
                let built = Stream::builder(&ctx)
                    .strategy(strategy)
                    .flags(flags)
                    .priority(priority)
                    .build();
                match built {
                    Ok(stream) => {
                        assert_eq!(
                            flags & unwatchable,
                            0,
                            "flag {flags:#x} makes a stream the host cannot watch"
                        );
                        let back = run(round_trip(&ctx, &stream, &data)).unwrap_or_else(|err| {
                            panic!("{strategy:?} flags {flags:#x} priority {priority}: {err}")
                        });
                        assert_eq!(back, data);
                        run(stream.synchronize()).unwrap();
                    }
                    Err(err) if flags & unwatchable != 0 => {
                        assert_eq!(invalid(&err), ("StreamBuilder::build", "flags"));
                    }
                    Err(err) => {
                        assert!(
                            matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
                            "flags {flags:#x} priority {priority}: {err:?}"
                        );
                    }
                }
            }
        }
        // A pool of such streams: a count of zero is refused, a huge one stops at the
        // device's stream limit with a typed error instead of exhausting memory.
        let err = StreamPool::new(&ctx, 0).unwrap_err();
        assert_eq!(invalid(&err).1, "count");
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// Nothing hangs and no shared thread waits: a device's whole budget of streams (the pool of
/// a huge count stops at it with a typed error), all of them running work at once under every
/// strategy, then dropped with work in flight on a held device. The device's live streams
/// return to their baseline once the device is released.
#[test]
fn a_device_full_of_streams_runs_and_releases_them_all() {
    let (_guard, _d0, _d1) = devices();
    let device = Device::open(3).unwrap();
    let ctx = device.primary_context().clone();
    let baseline = sim::device_stats(&device).unwrap().live_streams;
    let err = watchdog("a pool of usize::MAX streams", || {
        StreamPool::new(&ctx, usize::MAX).unwrap_err()
    });
    assert!(matches!(err, Error::Acl(_)), "{err:?}");
    until("the pool's streams are destroyed", || {
        sim::flush_releases();
        sim::device_stats(&device).unwrap().live_streams <= baseline
    });
    let mut streams = Vec::new();
    let mut turn = 0usize;
    loop {
        let strategy = STRATEGIES[turn % STRATEGIES.len()];
        turn += 1;
        match Stream::builder(&ctx).strategy(strategy).build() {
            Ok(stream) => streams.push(stream),
            Err(err) => {
                assert!(matches!(err, Error::Acl(_)), "{err:?}");
                break;
            }
        }
        assert!(streams.len() < 100_000, "no stream limit");
    }
    // Every stream memsets a buffer of its own; all are awaited together.
    let ops: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(i, s)| s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), i as u8))
        .collect();
    let done = run(futures::future::join_all(ops));
    for (i, result) in done.into_iter().enumerate() {
        assert_eq!(result.unwrap().to_vec_blocking().unwrap(), [i as u8; 16]);
    }
    // Dropped with work queued behind a hold: the drops must not wait for the device.
    let hold = sim::hold(&device).unwrap();
    let mut completions = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), i as u8);
        completions.push(op.completion().clone());
        drop(op);
    }
    watchdog("dropping a device full of streams with held work", || {
        drop(streams)
    });
    hold.release().unwrap();
    all_completed(&completions);
    // The completing threads let go of each stream right after its last completion, then the
    // reaper destroys it: not ordered with this thread, so looked at until it is done.
    until("every stream is destroyed", || {
        sim::flush_releases();
        let stats = sim::device_stats(&device).unwrap();
        stats.live_streams <= baseline && stats.live_allocations == 0
    });
}

/// Misuse of events is a typed error naming the API, never a panic or a hang: Ex events
/// (complete before any record), events without ACL_EVENT_SYNC waited on by a stream, events
/// without a timeline timed, timing never-recorded events, events of two devices, and an
/// end recorded before its start. Legal uses work: Ex and legacy events mixed in one timing,
/// a stream waiting on an Ex event recorded on a held stream resolves only after it.
#[test]
fn events_of_every_kind_and_flag_are_used_or_refused_with_typed_errors() {
    let (_guard, ctx, other) = devices();
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let ex = Event::builder(&ctx).kind(EventKind::Ex).build().unwrap();
        assert!(ex.is_complete().unwrap());
        run(ex.wait()).unwrap();
        // A stream may wait on a never-recorded Ex event: it is complete.
        b.wait_event(&ex).unwrap();
        run(b.synchronize()).unwrap();
        for kind in [EventKind::Legacy, EventKind::Ex] {
            for flags in [
                0,
                ffi::ACL_EVENT_SYNC,
                ffi::ACL_EVENT_TIME_LINE,
                ffi::ACL_EVENT_SYNC | ffi::ACL_EVENT_TIME_LINE,
                u32::MAX,
            ] {
                let event = match Event::builder(&ctx).kind(kind).flags(flags).build() {
                    Ok(event) => event,
                    Err(err) => {
                        assert!(
                            matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
                            "{kind:?} {flags:#x}: {err:?}"
                        );
                        continue;
                    }
                };
                // Timing an event never recorded, or without a timeline: typed.
                match Event::elapsed(&event, &event) {
                    Ok(d) => assert!(d < Duration::from_secs(3600)),
                    Err(err) => assert!(
                        matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
                        "{kind:?} {flags:#x}: {err:?}"
                    ),
                }
                let hold = sim::hold(&ctx.device()).unwrap();
                let copy = a.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9);
                let recorded = event.record(&a);
                let waited = b.wait_event(&event);
                let after = b.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                if recorded.is_ok() && waited.is_ok() {
                    assert!(
                        !after.is_complete(),
                        "{kind:?} {flags:#x}: work behind a wait ran before the record"
                    );
                }
                hold.release().unwrap();
                run(copy).unwrap();
                match run(after) {
                    Ok(buffer) => assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 64]),
                    Err(err) => panic!("{kind:?} {flags:#x}: work after a wait failed: {err}"),
                }
                run(event.wait()).ok();
                match Event::elapsed(&event, &event) {
                    Ok(d) => assert_eq!(d, Duration::ZERO, "{kind:?} {flags:#x}"),
                    Err(err) => assert!(
                        matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
                        "{kind:?} {flags:#x}: {err:?}"
                    ),
                }
            }
        }
        // An end recorded before its start: a typed error, not a panic on a negative time.
        let (start, end) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());
        end.record(&a).unwrap();
        run(a.memset(DeviceBuffer::<u8>::new(&ctx, 1 << 20).unwrap(), 0)).unwrap();
        start.record(&a).unwrap();
        run(start.wait()).unwrap();
        match Event::elapsed(&start, &end) {
            Ok(d) => assert_eq!(d, Duration::ZERO, "a reversed pair timed as {d:?}"),
            Err(Error::Acl(acl)) => assert_eq!(acl.api, "aclrtEventElapsedTime"),
            Err(err) => assert_eq!(invalid(&err).0, "Event::elapsed"),
        }
        // Ex and legacy events in one timing.
        let ex_start = Event::builder(&ctx).kind(EventKind::Ex).build().unwrap();
        ex_start.record(&a).unwrap();
        end.record(&a).unwrap();
        run(end.wait()).unwrap();
        Event::elapsed(&ex_start, &end).unwrap();
        // Events of two devices.
        let elsewhere = Event::new(&other).unwrap();
        let there = self::stream(&other, strategy);
        elsewhere.record(&there).unwrap();
        run(elsewhere.wait()).unwrap();
        // Each device has its own clock: no duration between them (it was a number before).
        let err = Event::elapsed(&start, &elsewhere).unwrap_err();
        assert_eq!(invalid(&err), ("Event::elapsed", "end"));
        let err = Event::elapsed(&elsewhere, &start).unwrap_err();
        assert_eq!(invalid(&err), ("Event::elapsed", "end"));
        let err = elsewhere.record(&a).unwrap_err();
        assert!(
            matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
            "{err:?}"
        );
        let err = a.wait_event(&elsewhere).unwrap_err();
        assert!(
            matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
            "{err:?}"
        );
    }
    assert_eq!(live_allocations(&ctx), 0);
}

/// The paused-clock promise (an operation in flight keeps a paused Tokio clock from jumping)
/// for a clock paused after the operation was first polled: `tokio::time::pause()` called
/// inside a test once the work is already submitted and awaited. A one-hour timer raced
/// against the operation must not fire while the device is still copying (device 0 copies at
/// 1 GB/s meanwhile: 8 MiB take about 8 ms of real time).
#[test]
fn a_clock_paused_while_an_operation_is_in_flight_still_waits_for_it() {
    const SIZE: usize = 8 << 20;
    const HOUR: Duration = Duration::from_secs(3600);
    let (_guard, ctx, _) = devices();
    let model = sim::TimingModel::default().h2d_bandwidth(1_000_000_000);
    sim::set_timing(&ctx.device(), Some(model)).unwrap();
    for strategy in STRATEGIES {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let fired = runtime.block_on(async {
            let stream = stream(&ctx, strategy);
            let host = PinnedBuffer::from_slice(&ctx, &vec![7u8; SIZE]).unwrap();
            let mut copy = stream.copy_h2d(host, DeviceBuffer::<u8>::new(&ctx, SIZE).unwrap());
            // First polled under a running clock...
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::pin::Pin::new(&mut copy).poll(cx).is_pending())
            })
            .await;
            assert!(first, "8 MiB at 1 GB/s cannot be done yet");
            // ... then the test pauses time and races the copy against a timer.
            tokio::time::pause();
            let fired = tokio::select! {
                copied = &mut copy => {
                    copied.unwrap();
                    false
                }
                () = tokio::time::sleep(HOUR) => true,
            };
            if fired {
                tokio::time::resume();
                tokio::time::timeout(HANG, copy).await.unwrap().unwrap();
            }
            fired
        });
        assert!(
            !fired,
            "{strategy:?}: the one-hour timer fired while the copy was in flight"
        );
    }
    sim::set_timing(&ctx.device(), None).unwrap();
}
