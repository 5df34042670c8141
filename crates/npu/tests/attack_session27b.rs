//! The twenty-seventh session's second helper: streams, events, kernels and the reactor.
//! Each test names the strategies it runs under; every wait is bounded (`run`, `until`,
//! `watchdog`), so a hang fails its test.

mod common;

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;

use common::{exclusive, run, stream, until};

/// Rule 5 ("the reactor never waits on device work") and the reactor's pacing for a stream
/// that once had a fault: a `BlockingSync` stream's task fails (the runtime's exception
/// callback flags the stream), then, the device held, an operation of that stream is handed
/// to the reactor (outside Tokio it goes there at once). The reactor must go on parking
/// between its queries of the held head, as for any stream, rather than take the old fault
/// for a fresh one and spin on the stream until the device is released.
#[test]
fn a_fault_long_settled_does_not_make_the_reactor_spin_on_held_work() {
    let (_devices, ctx, _) = exclusive(None);
    for strategy in [Strategy::EventPoll, Strategy::BlockingSync] {
        let s = stream(&ctx, strategy);
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let failed = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(run(failed).is_err(), "{strategy:?}: the armed task fails");
        // The stream is healthy again: a memset after the fault succeeds.
        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)).unwrap();

        let held = sim::hold(&ctx.device()).unwrap();
        let before = npu::stream::reactor_stats();
        // Outside Tokio a `BlockingSync` wait runs on a plain thread, which hands the
        // operation to the reactor after its 100 ms bound; EventPoll registers at once.
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
        until("the reactor takes the held memset", || {
            npu::stream::reactor_stats().registered > before.registered
        });
        let taken = npu::stream::reactor_stats();
        // A reactor with one held head queries it at most every millisecond and parks in
        // between; one that spins never parks again.
        until("the reactor parks again while the head is held", || {
            npu::stream::reactor_stats().parks >= taken.parks + 20
        });
        if strategy == Strategy::BlockingSync {
            assert!(
                npu::stream::reactor_stats().fault_notices > before.fault_notices,
                "the reactor read the stream's old fault notice when it took the memset over"
            );
        }
        assert!(!op.is_complete());
        held.release().unwrap();
        run(op).unwrap();
    }
}

/// The same rule while the fault is fresh: a task fails in `FailureMode::Continue` with a
/// notify wait queued behind it that only the host satisfies, and the host satisfies it only
/// once it has seen the failure (as a program reacting to a fault would). Meanwhile the
/// stream's head waits for as long as the host likes; the reactor must park between its
/// queries of it, and the work behind it run once the notify is recorded.
#[test]
fn a_fault_followed_by_a_wait_the_host_ends_does_not_make_the_reactor_spin() {
    let (_devices, ctx, _) = exclusive(None);
    for strategy in [Strategy::EventPoll, Strategy::BlockingSync] {
        let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = npu::stream::Notify::new(&ctx).unwrap();
        let before = npu::stream::reactor_stats();
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let failed = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        let waiting = s.wait_notify(&notify);
        let after = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
        let err = run(failed).unwrap_err();
        assert_eq!(err.error.acl_code(), Some(AclCode(507015)), "{strategy:?}");
        // A `BlockingSync` wait hands the notify wait to the reactor after 100 ms.
        until("the reactor watches the notify wait", || {
            npu::stream::reactor_stats().registered > before.registered
        });
        let taken = npu::stream::reactor_stats();
        until("the reactor parks while the notify wait is pending", || {
            npu::stream::reactor_stats().parks >= taken.parks + 20
        });
        assert!(!waiting.is_complete() && !after.is_complete());
        run(other.record_notify(&notify)).unwrap();
        run(waiting).unwrap();
        assert_eq!(run(after).unwrap().to_vec_blocking().unwrap(), [2; 64]);
        run(s.synchronize()).unwrap_err();
        run(s.synchronize()).unwrap();
    }
}

/// "Nothing leaks" for the device's hardware events: a burst of operations in flight on one
/// long-lived stream (the device held, so every operation takes a completion event of its
/// own, until the device has none left) must not keep the device out of events once the burst
/// is over and nothing is in flight: a user event is then made again, and a stream of another
/// context of the device gets a completion event of its own.
#[test]
fn a_burst_of_operations_in_flight_does_not_keep_the_device_out_of_events() {
    let (_devices, _, ctx) = exclusive(None);
    let device = ctx.device();
    // The pool is the context's, whatever the strategy; `BlockingSync` would take a thread per
    // operation of the burst.
    for strategy in [Strategy::EventPoll, Strategy::CallbackThread] {
        let s = stream(&ctx, strategy);
        run(s.synchronize()).unwrap();
        let held = sim::hold(&device).unwrap();
        // Synchronisations own nothing; each one records a completion event after it. Once
        // the device has no event left, the later ones are drained instead and fail with the
        // runtime's error once the stream has run them, as documented.
        let mut burst = Vec::new();
        while Event::new(&ctx).is_ok() {
            burst.extend((0..256).map(|_| s.synchronize()));
            assert!(burst.len() <= 1 << 18, "the device never ran out of events");
        }
        burst.extend((0..16).map(|_| s.synchronize()));
        held.release().unwrap();
        run(async {
            for op in burst {
                if let Err(err) = op.await {
                    assert_eq!(err.error.acl_code(), Some(AclCode(207007)), "{err}");
                }
            }
        });
        // Nothing is in flight and the stream is idle, but kept: the device serves events.
        let event = Event::new(&ctx).unwrap_or_else(|err| {
            panic!(
                "{strategy:?}: {err}; live events {}",
                sim::device_stats(&device).unwrap().live_events
            )
        });
        event.record(&s).unwrap();
        run(event.wait()).unwrap();
        // An operation that could not record its completion event would fail with the
        // runtime's 207007 once drained.
        let other = stream(&device.create_context().unwrap(), strategy);
        run(other.synchronize()).unwrap();
        drop((s, other));
    }
}

/// Rule 5 for wakers on the completing threads (the reactor, a callback worker, a blocking
/// waiter) that reach into another device's held stream: the waker records an event behind
/// the held work, makes a third stream wait on it, stops the held stream and starts an abort
/// of it. None of it may wait for the held device, so the waker returns and the completing
/// thread goes on serving; the held work fails unwritten (stopped, then discarded), so does
/// the event's wait, and once the device is released every stream runs again.
#[test]
fn a_waker_stopping_and_aborting_a_held_stream_returns_at_once() {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::task::Wake;

    struct Reaching {
        victim: npu::Stream,
        event: Event,
        waiter: npu::Stream,
        done: Mutex<Option<mpsc::Sender<[bool; 3]>>>,
    }

    impl Wake for Reaching {
        fn wake(self: Arc<Self>) {
            let Some(done) = self.done.lock().unwrap().take() else {
                return;
            };
            let recorded = self.event.record(&self.victim).is_ok();
            let waited = self.waiter.wait_event(&self.event).is_ok();
            let stopped = self.victim.stop().is_ok();
            drop(self.victim.abort());
            done.send([recorded, waited, stopped]).unwrap();
        }
    }

    let (_devices, d0, d1) = exclusive(None);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let (s0, victim, waiter) = (
            stream(&d0, strategy),
            stream(&d1, strategy),
            stream(&d1, strategy),
        );
        let held = sim::hold(&d1.device()).unwrap();
        let queued = victim.memset(DeviceBuffer::<u8>::new(&d1, 64).unwrap(), 1);
        let (tx, rx) = mpsc::channel();
        let reaching = Arc::new(Reaching {
            victim: victim.clone(),
            event: Event::new(&d1).unwrap(),
            waiter: waiter.clone(),
            done: Mutex::new(Some(tx)),
        });
        // Submitted outside Tokio (a `BlockingSync` wait runs on a plain thread of its own),
        // on device 0 held until the waker is registered.
        let held0 = sim::hold(&d0.device()).unwrap();
        let mut op = s0.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 2);
        let waker = std::task::Waker::from(reaching.clone());
        let polled = std::pin::Pin::new(&mut op).poll(&mut std::task::Context::from_waker(&waker));
        assert!(polled.is_pending());
        held0.release().unwrap();
        let done = common::watchdog("the waker returns", || rx.recv().unwrap());
        assert_eq!(done, [true; 3], "{strategy:?}");
        run(op).unwrap();
        // The completing thread goes on serving device 0 while device 1 stays held.
        run(s0.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 3)).unwrap();
        // The abort discards the queued memset without the device: it never started.
        held.release().unwrap();
        let buffer = run(queued).unwrap_err().value.unwrap();
        assert_eq!(
            buffer.to_vec_blocking().unwrap(),
            [0; 64],
            "{strategy:?}: never ran"
        );
        assert!(
            run(reaching.event.wait()).is_err(),
            "{strategy:?}: its record was discarded"
        );
        let _ = run(waiter.synchronize());
        run(victim.abort()).unwrap();
        for s in [&victim, &waiter] {
            let filled = run(s.memset(DeviceBuffer::<u8>::new(&d1, 64).unwrap(), 4)).unwrap();
            assert_eq!(filled.to_vec_blocking().unwrap(), [4; 64], "{strategy:?}");
        }
    }
}
