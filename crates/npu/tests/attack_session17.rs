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
use npu::Error;
use npu::ffi;
use npu::prelude::*;
use npu::sim;
use npu::stream::EventKind;

/// The simulator's devices for this file: 0 and 1 (`exclusive`), 2 and 3 for the tests that
/// exhaust a device's resources.
const DEVICES: u32 = 4;

fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    exclusive(Some(DEVICES))
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
