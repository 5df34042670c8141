//! Attacks of the twenty-sixth session's helper, through the `npu` facade: device work that
//! can never finish on its own (a cycle of notify waits between two streams), the callback
//! worker's own device's streams and pools let go of from a waker it runs, and the other
//! angles listed with each test.
//!
//! Each test names the promise it attacks. The simulator's hold gate is process-wide, so every
//! test takes the file's device lock; every wait is bounded (`run`, `until`, `watchdog`), so a
//! hang fails its test.

mod common;

use std::any::Any;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use common::*;
use npu::Error;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Notify, Strategy};

fn pinned(ctx: &Context, data: &[u8]) -> PinnedBuffer<u8> {
    PinnedBuffer::from_slice(ctx, data).unwrap()
}

/// Rules 2, 3 and 5 and "a wait nothing will satisfy is cancelled by `Stream::abort`" for a
/// deadlock on the device itself: stream `a` waits for a notify that only `b` records after
/// its own wait, and `b` waits for one that only `a` records after its wait; a pinned copy and
/// a memset are queued behind each. A Tokio runtime whose tasks await all of it is dropped
/// (it must not wait), every future is dropped, and the copy's `Arc`-shared source must stay
/// shared. Aborting `a` must fail `a`'s work with `Error::Aborted` while `b` stays blocked
/// (the record that would release it was discarded); aborting `b` then ends the rest. Both
/// streams run again afterwards and everything is released.
#[test]
fn a_notify_cycle_deadlocked_on_the_device_is_broken_by_aborts_and_leaks_nothing() {
    let (_guard, ctx, _d1) = exclusive(None);
    let baseline = live_objects(&ctx);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let (n1, n2) = (Notify::new(&ctx).unwrap(), Notify::new(&ctx).unwrap());
        let source = Arc::new(pinned(&ctx, &[9; 4096]));
        let wait_a = a.wait_notify(&n1);
        let wait_b = b.wait_notify(&n2);
        let release_b = a.record_notify(&n2);
        let release_a = b.record_notify(&n1);
        let copy_a = a.copy_h2d(source.clone(), DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        let set_b = b.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 3);
        let (a_side, b_side): (Vec<Completion>, Vec<Completion>) = (
            vec![
                wait_a.completion().clone(),
                release_b.completion().clone(),
                copy_a.completion().clone(),
            ],
            vec![
                wait_b.completion().clone(),
                release_a.completion().clone(),
                set_b.completion().clone(),
            ],
        );
        // A runtime whose tasks await the deadlocked work, polled once and dropped.
        let tokio_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        for done in a_side.iter().chain(&b_side) {
            let (waiting, started) = (done.wait(), started_tx.clone());
            tokio_rt.spawn(async move {
                let _ = started.send(());
                let _ = waiting.await;
            });
        }
        for _ in 0..6 {
            started_rx.recv_timeout(HANG).expect("the tasks started");
        }
        watchdog("dropping a runtime awaiting deadlocked work", || {
            drop(tokio_rt)
        });
        drop((wait_a, wait_b, release_a, release_b, copy_a, set_b));
        // A round trip on a third stream: the device runs other work meanwhile.
        let other = stream(&ctx, strategy);
        run(other.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
        assert!(
            a_side.iter().chain(&b_side).all(|d| !d.is_complete()),
            "{strategy:?}: nothing of the cycle can run"
        );
        let mut source = source;
        assert!(
            Arc::get_mut(&mut source).is_none(),
            "{strategy:?}: the queued copy still shares its source"
        );

        run(a.abort()).unwrap();
        for done in &a_side {
            let err = run(done.wait()).unwrap_err();
            assert!(
                matches!(err, Error::Aborted { .. }),
                "{strategy:?}: a's work is discarded: {err:?}"
            );
        }
        until_released("the copy's source comes back", || {
            Arc::get_mut(&mut source).is_some()
        });
        assert!(
            b_side.iter().all(|d| !d.is_complete()),
            "{strategy:?}: b still waits for a record that was discarded"
        );
        run(b.abort()).unwrap();
        for done in &b_side {
            assert!(
                run(done.wait()).is_err(),
                "{strategy:?}: b's work is discarded"
            );
        }
        // Both streams run again.
        for s in [&a, &b] {
            let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64]);
        }
        drop((a, b, other, n1, n2, source));
        until_released(&format!("{strategy:?}: everything"), || {
            within(live_objects(&ctx), baseline)
        });
    }
}

/// A waker that runs `act` (once) when it is first woken, and counts its wakes.
fn acting_waker(act: Box<dyn FnOnce() + Send>, woken: Arc<AtomicUsize>) -> Waker {
    struct Actor {
        act: Mutex<Option<Box<dyn FnOnce() + Send>>>,
        woken: Arc<AtomicUsize>,
    }
    impl std::task::Wake for Actor {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let act = self.act.lock().unwrap().take();
            if let Some(act) = act {
                act();
            }
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }
    Waker::from(Arc::new(Actor {
        act: Mutex::new(Some(act)),
        woken,
    }))
}

/// Rule 5 on the completing thread's own device: the waker of an operation of device 0 runs
/// on the thread that completes it (the reactor, device 0's callback worker, a blocking
/// waiter) and there drops the last handles of idle streams of the same device under every
/// strategy, primary and explicit context (a `CallbackThread` stream is then unsubscribed
/// from the callback worker by that very worker), of a device pool of each backend with a
/// block cached, of a stream with its staging pool, and submits a `CallbackThread` memset and
/// an abort of a fresh stream, dropping both. The completing thread must go on: later work of
/// every strategy on device 0 completes, and everything is released.
#[test]
fn a_completing_thread_letting_go_of_its_own_devices_streams_goes_on() {
    let (_guard, ctx, _d1) = exclusive(None);
    let baseline = live_objects(&ctx);
    for strategy in STRATEGIES {
        let explicit = ctx.device().create_context().unwrap();
        let mut kept: Vec<Box<dyn Any + Send>> = Vec::new();
        for context in [&ctx, &explicit] {
            for other in STRATEGIES {
                let s = stream(context, other);
                // Each has run work (a callback stream is subscribed by then).
                run(s.memset(DeviceBuffer::<u8>::new(context, 64).unwrap(), 1)).unwrap();
                kept.push(Box::new(s));
            }
        }
        let staging = stream(&ctx, strategy);
        let data = run(staging.download(run(staging.upload(&[4u8; 100])).unwrap())).unwrap();
        assert_eq!(data, [4; 100]);
        kept.push(Box::new(staging));
        for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
            drop(run(pool.alloc::<u8>(&s, 4096)).unwrap());
            kept.push(Box::new((pool, s)));
        }
        let submitted: Arc<Mutex<Vec<Completion>>> = Arc::default();
        let (ctx_, explicit_, submitted_) = (ctx.clone(), explicit.clone(), submitted.clone());
        let act = Box::new(move || {
            drop(kept);
            let fresh = stream(&ctx_, Strategy::CallbackThread);
            let op = fresh.memset(DeviceBuffer::<u8>::new(&ctx_, 64).unwrap(), 2);
            submitted_.lock().unwrap().push(op.completion().clone());
            drop((op, fresh));
            let doomed = stream(&explicit_, Strategy::CallbackThread);
            drop(doomed.abort());
            drop((doomed, explicit_));
        });
        drop(explicit);
        let woken = Arc::new(AtomicUsize::new(0));
        let waker = acting_waker(act, woken.clone());
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let mut op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8);
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
        drop(waker);
        drop(held);
        until("the waker ran on the completing thread", || {
            woken.load(Ordering::SeqCst) > 0
        });
        for later in STRATEGIES {
            let t = stream(&ctx, later);
            let buffer = run(t.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 6)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [6; 64], "{later:?}");
        }
        assert_eq!(run(op).unwrap().to_vec_blocking().unwrap(), [8; 64]);
        all_completed(&submitted.lock().unwrap());
        drop(s);
        until_released(&format!("{strategy:?}: everything"), || {
            within(live_objects(&ctx), baseline)
        });
    }
}

// Keeps `Future::poll` in scope for the tests above.
use npu::stream::Completion;
use std::future::Future as _;

/// docs/ascend.md's teardown promise ("a program that wants ACL finalised ... drops every
/// npu-rs object ... the last drop ... calls `aclFinalizeReference` or `aclFinalize`. A
/// dropped runtime may be built again later"), under every strategy: a runtime of its own
/// (npu-sim's cdylib, which nothing else in this process uses) runs a memset on a stream, and
/// everything of it is dropped. ACL must then be finalised: a new runtime of that library
/// with a configuration file applies it (a runtime still initialised refuses the file, naming
/// `acl_config`). A break: a shared thread keeping a handle of the dropped runtime, so that
/// ACL is never finalised and the library's state lives on.
#[test]
fn a_runtime_of_its_own_is_finalised_once_everything_of_it_is_dropped() {
    let (_guard, _d0, _d1) = exclusive(None);
    let own = OwnRuntime::new("attack26");
    for strategy in STRATEGIES {
        let runtime = own.build();
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, strategy);
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 64]);
        drop((buffer, s, ctx, runtime));
        own.when_finalised(&format!("{strategy:?}"), |applied| {
            // Built again, it serves the same strategy (a new callback worker, for one).
            let ctx = applied.device(0).unwrap().primary_context().clone();
            let s = stream(&ctx, strategy);
            let set = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8));
            assert_eq!(set.unwrap().to_vec_blocking().unwrap(), [8; 64]);
        });
    }
}
