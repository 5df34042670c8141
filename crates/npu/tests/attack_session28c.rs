//! The twenty-eighth session's third helper: streams, events, kernels and the reactor, through
//! the public API only. Each test names the strategies it runs under; every wait is bounded
//! (`run`, `until`, `watchdog`), so a hang fails its test.

mod common;

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;

use common::{
    STRATEGIES, exclusive, live_memory, live_objects, run, stream, take_every_event, until,
    until_released, watchdog, within,
};

/// "Nothing leaks" for the device's hardware events, across contexts: the completion events
/// are pooled per context, but the hardware events are the device's (65,536 on npu-sim). A
/// burst of operations in flight on each of many contexts of one device (the device held, so
/// every operation takes an event of its own, as many as the device has) must not leave the
/// device without an event once every burst is over and nothing is in flight, even though
/// every context and its stream is kept. Once they are dropped, no event is left behind.
#[test]
fn idle_completion_events_of_many_contexts_never_keep_the_device_out_of_events() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    // One burst per context, each no larger than what one context's pool may keep idle: a cap
    // per context alone keeps every event of the burst, and 65 contexts take them all.
    const CONTEXTS: usize = 65;
    const BURST: usize = 1024;
    let baseline = sim::device_stats(&device).unwrap().live_events;
    let streams: Vec<npu::Stream> = (0..CONTEXTS)
        .map(|_| stream(&device.create_context().unwrap(), Strategy::EventPoll))
        .collect();
    let held = sim::hold(&device).unwrap();
    let burst: Vec<_> = streams
        .iter()
        .flat_map(|s| (0..BURST).map(|_| s.synchronize()))
        .collect();
    held.release().unwrap();
    run(async {
        for op in burst {
            // Once the device has no event left, the later ones are drained and fail with the
            // runtime's error, as documented.
            if let Err(err) = op.await {
                assert_eq!(err.error.acl_code(), Some(AclCode(207007)), "{err}");
            }
        }
    });
    // Nothing is in flight, every stream is idle and kept: the device serves events.
    let event = Event::new(&d1).unwrap_or_else(|err| {
        panic!(
            "{err}; live events {}",
            sim::device_stats(&device).unwrap().live_events
        )
    });
    event.record(&streams[0]).unwrap();
    run(event.wait()).unwrap();
    drop((event, streams));
    until_released("every event of the contexts' pools is destroyed", || {
        sim::device_stats(&device).unwrap().live_events <= baseline
    });
}

/// The bound on idle completion events holds for the device as a whole when its contexts
/// return events at once: bursts on contexts of one device, completed by the reactor and by
/// the device's callback worker and awaited on a thread each, leave at most 1,024 idle events
/// behind between them (docs/architecture.md), however their returns interleave.
#[test]
fn contexts_returning_events_at_once_keep_at_most_the_device_bound_idle() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    let baseline = sim::device_stats(&device).unwrap().live_events;
    let streams: Vec<npu::Stream> = [Strategy::EventPoll, Strategy::CallbackThread]
        .into_iter()
        .cycle()
        .take(4)
        .map(|strategy| stream(&device.create_context().unwrap(), strategy))
        .collect();
    let held = sim::hold(&device).unwrap();
    let bursts: Vec<Vec<_>> = streams
        .iter()
        .map(|s| (0..1024).map(|_| s.synchronize()).collect())
        .collect();
    held.release().unwrap();
    std::thread::scope(|scope| {
        for burst in bursts {
            scope.spawn(|| {
                run(async {
                    for op in burst {
                        op.await.unwrap();
                    }
                })
            });
        }
    });
    // A completion's task may be woken before its event is back in the pool: waited for.
    until_released("the idle events fall within the device's bound", || {
        sim::device_stats(&device).unwrap().live_events <= baseline + 1024
    });
    drop(streams);
}

/// Rules 2 and 3 for operations the device accepted but no strategy could watch: the device
/// out of events (every one held by the user), a fresh context's stream cannot record the
/// completion event of its work, which then waits for the stream to drain. On a held device,
/// one such memset's future is dropped at once and another's kept, with a task failing in
/// `FailureMode::Continue` between them: the kept one resolves only after its memset ran
/// (its buffer handed back written), the dropped one's buffer is freed only after the device
/// is done with it, nothing leaks, and once the user's events are gone the stream is watched
/// again. Every strategy.
#[test]
fn work_the_device_accepted_without_a_completion_event_keeps_its_memory_until_it_ran() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        let baseline = live_memory(&ctx);
        let events = take_every_event(&ctx);
        let held = sim::hold(&device).unwrap();
        let dropped = s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 7);
        drop(dropped);
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let failing = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8);
        let kept = s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 9);
        assert!(
            !kept.is_complete(),
            "{strategy:?}: resolved before the device ran it"
        );
        held.release().unwrap();
        let failed = run(failing).unwrap_err();
        assert!(failed.error.acl_code().is_some(), "{strategy:?}: {failed}");
        drop(failed);
        match run(kept) {
            Ok(buffer) => assert_eq!(buffer.to_vec_blocking().unwrap(), [9; 4096]),
            Err(err) => {
                assert_eq!(err.error.acl_code(), Some(AclCode(207007)), "{err}");
                let buffer = err.value.expect("the buffer comes back");
                assert_eq!(buffer.to_vec_blocking().unwrap(), [9; 4096], "{strategy:?}");
            }
        }
        drop(events);
        // Events again. The first record since the failed task captures its failure (no
        // completion event was recorded after it): a synchronisation reports it, once.
        if let Err(err) = run(s.synchronize()) {
            assert_eq!(
                err.error.acl_code(),
                Some(AclCode(507015)),
                "{strategy:?}: {err}"
            );
        }
        // The stream's work is watched as usual.
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 64]);
        drop(buffer);
        until_released("the dropped memset's buffer is freed", || {
            within(live_memory(&ctx), baseline)
        });
        run(s.synchronize()).unwrap();
    }
}

/// Rule 5 and "a faulted stream costs the reactor O(1) per pass" with many faulted streams at
/// once: on each of 16 contexts of one device, a stream in `FailureMode::Continue` whose task
/// fails (the exception callback flags it) with a notify wait behind it that the host records
/// only after every failure was seen, then a memset behind that. The reactor must park again
/// between its queries of the 16 held heads once their suspicions ran out, rather than spin,
/// and every memset runs once the notifies are recorded.
#[test]
fn many_faulted_streams_held_behind_waits_do_not_make_the_reactor_spin() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    let recorder = stream(&d1, Strategy::EventPoll);
    let streams: Vec<(npu::Stream, npu::stream::Notify)> = (0..16)
        .map(|_| {
            let ctx = device.create_context().unwrap();
            let notify = npu::stream::Notify::new(&ctx).unwrap();
            (stream(&ctx, Strategy::EventPoll), notify)
        })
        .collect();
    let before = npu::stream::reactor_stats();
    let mut waits = Vec::new();
    let mut afters = Vec::new();
    let mut failures = Vec::new();
    for (s, notify) in &streams {
        sim::fail_task(s, 1, AclCode(507015)).unwrap();
        let ctx = s.context();
        failures.push(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1));
        waits.push(s.wait_notify(notify));
        afters.push(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2));
    }
    for failed in failures {
        let err = run(failed).unwrap_err();
        assert_eq!(err.error.acl_code(), Some(AclCode(507015)), "{err}");
    }
    let seen = npu::stream::reactor_stats();
    assert!(
        seen.fault_notices > before.fault_notices,
        "no fault was noticed"
    );
    until("the reactor parks while every wait is pending", || {
        npu::stream::reactor_stats().parks >= seen.parks + 20
    });
    assert!(waits.iter().all(|wait| !wait.is_complete()));
    for (_, notify) in &streams {
        run(recorder.record_notify(notify)).unwrap();
    }
    for wait in waits {
        run(wait).unwrap();
    }
    for after in afters {
        assert_eq!(run(after).unwrap().to_vec_blocking().unwrap(), [2; 64]);
    }
    for (s, _) in &streams {
        run(s.synchronize()).unwrap_err();
        run(s.synchronize()).unwrap();
    }
}

/// Rule 5's bound on the sentinel ("each wait is at most 1 ms, so one slow stream delays the
/// others by at most that much per round"), for a stream with many operations no strategy
/// could watch: device 1 out of events (every one held by the user) and held, a memset and
/// 40,000 synchronisations on one stream of it are each drained by the sentinel. A stream of
/// device 0 stopped with a memset queued fails only once the sentinel has probed it and found
/// it stopped: the probe must be answered within a round that gives the drained stream one
/// slice, not one per drained operation (40 s), both while device 1 is held and while the
/// sentinel ends the 40,000 drains once it is released. Every strategy for the stopped stream.
#[test]
fn many_drained_operations_of_one_stream_do_not_hold_up_the_sentinel() {
    let (_devices, d0, d1) = exclusive(None);
    let found_out = |strategy| {
        let s0 = stream(&d0, strategy);
        let held0 = sim::hold(&d0.device()).unwrap();
        let stopped = s0.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 1);
        s0.stop().unwrap();
        held0.release().unwrap();
        let err = run(stopped).unwrap_err();
        assert!(err.value.is_some(), "{strategy:?}: {err}");
        run(s0.abort()).unwrap();
        let again = run(s0.memset(DeviceBuffer::<u8>::new(&d0, 8).unwrap(), 2)).unwrap();
        assert_eq!(again.to_vec_blocking().unwrap(), [2; 8], "{strategy:?}");
    };
    let ctx = d1.device().create_context().unwrap();
    let s1 = stream(&ctx, Strategy::EventPoll);
    let events = take_every_event(&ctx);
    let held1 = sim::hold(&d1.device()).unwrap();
    let queued = s1.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
    let drained: Vec<_> = (0..40_000).map(|_| s1.synchronize()).collect();
    STRATEGIES.into_iter().for_each(found_out);
    held1.release().unwrap();
    // The sentinel now ends the drains, one after the other.
    found_out(Strategy::EventPoll);
    let err = run(queued).unwrap_err();
    assert_eq!(err.error.acl_code(), Some(AclCode(207007)), "{err}");
    assert_eq!(err.value.unwrap().to_vec_blocking().unwrap(), [5; 64]);
    run(async {
        for op in drained {
            op.await.unwrap_err();
        }
    });
    drop(events);
    run(s1.synchronize()).unwrap();
}

/// Rules 2, 3 and 5 for drained work whose stream, context and futures are all dropped: on a
/// held device out of events, memsets no strategy could watch are dropped with their stream
/// and its context (every handle gone, nothing waits); once the device is released and the
/// user's events dropped, the sentinel ends the drains, and the buffers, the stream and every
/// completion event are released after the device ran the memsets. Every strategy.
#[test]
fn drained_work_dropped_with_its_stream_and_context_is_released_after_it_ran() {
    let (_devices, _, d1) = exclusive(None);
    let device = d1.device();
    for strategy in STRATEGIES {
        let baseline = live_objects(&d1);
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        let events = take_every_event(&ctx);
        let held = sim::hold(&device).unwrap();
        let ops: Vec<_> = (0..64)
            .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), i))
            .collect();
        watchdog("dropping drained work, its stream and its context", || {
            drop((ops, s, ctx))
        });
        // The device may still run every memset: none of their buffers is freed yet.
        assert!(
            live_memory(&d1)[0] >= baseline[0] + 64,
            "{strategy:?}: a buffer of queued work was freed"
        );
        held.release().unwrap();
        drop(events);
        until_released(
            "the drained work, its stream and its events are released",
            || within(live_objects(&d1), baseline),
        );
    }
}
