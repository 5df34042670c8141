//! Attacks of the thirty-seventh session through the `npu` facade, on the last session's new
//! code first: blocking waits (`Completion::wait_blocking`, a `BlockingWaiter`'s bounded wait,
//! `Context::synchronize_blocking` and the blocking copies beside a running kernel) and a
//! flush of the reaper (`npu::sim::flush_releases`) from the wakers a pool's return path runs
//! on the reaper and from wakers on the completing threads, and the same waits on threads of
//! the program's own where they must still be made; waits in children forked from a waker and from a subscriber's callback under a
//! submission lock; a device pool's `allocating` room across cancelled, failed and orphaned
//! allocations, pinned allocations failed by racing host faults, and a pool request of a
//! Tokio runtime dropped as its block returns; cross-device copies while their peer access's
//! guards are dropped on other threads (`PeerAccess::device`), and while the peer is lost.
//!
//! Each test names the promise it attacks and its outcome. The simulator's hold gate and its
//! fault tables are shared by every test of this process, so every test takes the file's
//! device lock; every wait is bounded (`run`, a child process's bound), so a hang fails its
//! test. Device 3 is lost for the rest of the process by one test.

mod common;

use std::pin::Pin;
use std::sync::{Arc, Barrier, Mutex};

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::stream::FailureMode;
use npu::{Completion, Error, Stream, sim};

/// The memory of each of the file's four simulated devices.
const MEMORY: u64 = 64 << 20;

/// The environment variable that picks the child process's case.
const CHILD_ENV: &str = "NPU_ATTACK37_CHILD";

/// The bytes of the blocks the pool tests ask for (a size class of its own).
const BLOCK: usize = 4096;

/// The device lock and device 0's primary context, of this file's four-device simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(4, MEMORY)
}

/// A zeroed device buffer of `n` bytes.
fn dev(ctx: &Context, n: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, n).unwrap()
}

/// The child process's cases: run only when the parent's test sets [`CHILD_ENV`].
#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "pool wakers" => blocking_waits_in_a_pools_wakers_on_the_reaper(),
        "fork in a waker" => waits_in_a_child_forked_from_a_waker(),
        "fork under a lock" => a_child_forked_from_a_subscriber_under_a_submission_lock(),
        "fork under the runtime lock" => a_child_forked_from_a_subscriber_under_the_runtime_lock(),
        "synchronize in a waker" => a_context_synchronized_in_a_waker(),
        "copies in a waker" => blocking_copies_in_a_waker(),
        "flush in a waker" => a_flush_in_a_waker_on_the_completing_thread(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// Polls `future` once with `waker`.
fn polled_with<F: std::future::Future + ?Sized>(
    future: Pin<&mut F>,
    waker: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(waker))
}

/// A pending operation (a wait on a notify of `ctx` that `setting` sets when the caller
/// records it) on a stream of its own, and a complete one.
fn a_pending_and_a_complete_operation(
    ctx: &Context,
) -> (
    Stream,
    npu::stream::Notify,
    npu::Op<npu::stream::Notify>,
    Completion,
) {
    let (waiting, setting) = (Stream::new(ctx).unwrap(), Stream::new(ctx).unwrap());
    let notify = npu::stream::Notify::new(ctx).unwrap();
    let pending = waiting.wait_notify(&notify);
    let complete = setting.synchronize();
    let done = complete.completion().clone();
    run(complete).unwrap();
    (setting, notify, pending, done)
}

/// Promise: no npu-rs wait called back from code npu-rs runs on the reaper waits for work the
/// reaper or the device still has to do (rules 5 and 6), for the wakers a pool's return path
/// runs there: a request queued for room in a bounded device pool (both backends), served by
/// a block that comes back on the reaper once the memset that used it completes (its future
/// dropped while the device held it); and a task waiting for the pool to settle
/// (`DevicePool::settled`), woken there by the last block's return. Each waker flushes the
/// reaper (`npu::sim::flush_releases`) and makes both blocking waits for an operation still
/// pending (a wait on a notify set afterwards), a zero-timeout look, and a wait for one
/// complete.
///
/// Outcome: held. Each waker runs on the reaper (`npu-reaper`); the flush returns at once, both
/// waits are refused with `InvalidArgument` naming the wait and `thread`, the look says
/// pending and the complete operation's wait returns `Ok`; the queued request gets its block,
/// the settling task is woken, and the pending operation completes once the notify is set.
#[test]
fn blocking_waits_in_a_pools_wakers_on_the_reaper_are_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "pool wakers");
}

/// The child process's case of
/// [`blocking_waits_in_a_pools_wakers_on_the_reaper_are_refused_not_hung`].
fn blocking_waits_in_a_pools_wakers_on_the_reaper() {
    let (_guard, ctx) = devices();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let s = Stream::new(&ctx).unwrap();
        let class = DevicePool::size_class(BLOCK).unwrap();
        let pool = device_pool(&ctx, backend, Some(class));
        let (setting, notify, pending, done) = a_pending_and_a_complete_operation(&ctx);

        // A queued request, served on the reaper.
        let block = run(pool.alloc::<u8>(&s, BLOCK)).unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(block, 7);
        assert!(polled_once(Pin::new(&mut memset)).is_pending(), "{what}");
        drop(memset);
        let mut queued = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        let (waker, heard) = WaitsWhenWoken::waker(pending.completion(), &done, true);
        assert!(polled_with(queued.as_mut(), &waker).is_pending(), "{what}");
        assert_eq!(pool.stats().cache.waiters, 1, "{what}: queued");
        drop(waker);
        held.release().unwrap();
        let heard = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the request's waker was not woken, or hung"));
        assert_eq!(heard.thread, "npu-reaper", "{what}: the request's waker");
        refused_not_waited(heard, &format!("{what}, the request's waker"));
        let block = run(queued).unwrap();

        // A task waiting for the pool to settle, woken on the reaper.
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(block, 8);
        assert!(polled_once(Pin::new(&mut memset)).is_pending(), "{what}");
        drop(memset);
        let mut settling = pool.settled();
        let (waker, heard) = WaitsWhenWoken::waker(pending.completion(), &done, true);
        assert!(
            polled_with(Pin::new(&mut settling), &waker).is_pending(),
            "{what}"
        );
        drop(waker);
        held.release().unwrap();
        let heard = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the settling waker was not woken, or hung"));
        assert_eq!(heard.thread, "npu-reaper", "{what}: the settling waker");
        refused_not_waited(heard, &format!("{what}, the settling waker"));
        run(settling);

        run(setting.record_notify(&notify)).unwrap();
        run(pending).unwrap();
    }
}

/// Promise: a blocking wait is refused only where it could not end, never on a thread of the
/// program's own (the refusal's other side): `Completion::wait_blocking` and a
/// `BlockingWaiter`'s bounded wait for an operation the device holds, from a Tokio
/// `spawn_blocking` task (the kind of thread a `BlockingSync` wait runs on), from a tracing
/// subscriber's callback for an event of the program's own outside any npu-rs call, and from
/// a waker that the program wakes on a thread of its own; each released by the test (the
/// device, or the notify the operation waits on) once the waiting thread has made a bounded
/// wait (1 ms) that runs out while the operation is pending (the device holds it, or the
/// notify is not set yet): a refusal there would answer that wait, not run it out.
///
/// Outcome: held. Every wait is made (the bounded ones run out, none is refused) and returns
/// `Ok` once the device is released or the notify set.
#[test]
fn blocking_waits_on_the_programs_own_threads_are_made() {
    use tracing_subscriber::layer::SubscriberExt;

    /// A tracing layer whose callback waits for the operation it is given (bounded by the
    /// operation's release), for the test's own events only.
    struct WaitsForTheOperation(Completion, std::sync::mpsc::Sender<Result<(), Error>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WaitsForTheOperation {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if event.metadata().target() == "attack_session37" {
                // A bounded wait that runs out (the device holds the operation): made, not
                // refused.
                let made = match self.0.blocking_waiter().wait_for(MADE) {
                    None => Ok(()),
                    Some(answer) => answer,
                };
                let _ = self.1.send(made);
                let _ = self.1.send(self.0.wait_blocking());
            }
        }
    }

    /// A bound a wait for a held operation runs out of: it shows the wait was made.
    const MADE: std::time::Duration = std::time::Duration::from_millis(1);

    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);

        // On a Tokio blocking thread.
        let held = sim::hold(&ctx.device()).unwrap();
        let op = s.memset(dev(&ctx, 64), 1);
        let done = op.completion().clone();
        let tokio = ShutDownWithin(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .build()
                .unwrap(),
        ));
        let waiter = done.blocking_waiter();
        let (started, start) = std::sync::mpsc::channel();
        let blocking = tokio.runtime().spawn_blocking(move || {
            // Runs out (the device holds the operation): made, not refused.
            assert!(
                waiter.wait_for(MADE).is_none(),
                "a bounded wait was not made"
            );
            started.send(()).unwrap();
            (done.wait_blocking(), waiter.wait_for(HANG))
        });
        start.recv_timeout(HANG).unwrap();
        held.release().unwrap();
        let (unbounded, bounded) = run(blocking).unwrap();
        assert!(unbounded.is_ok(), "{what}: {unbounded:?}");
        assert!(matches!(bounded, Some(Ok(()))), "{what}: {bounded:?}");
        drop(tokio);
        run(op).unwrap();

        // From a subscriber's callback for the program's own event.
        let held = sim::hold(&ctx.device()).unwrap();
        let op = s.memset(dev(&ctx, 64), 2);
        let (told, heard) = std::sync::mpsc::channel();
        let subscriber = tracing_subscriber::registry()
            .with(WaitsForTheOperation(op.completion().clone(), told));
        let emitting = std::thread::spawn(move || {
            tracing::subscriber::with_default(subscriber, || {
                tracing::info!(target: "attack_session37", "the program's own event");
            })
        });
        heard.recv_timeout(HANG).unwrap().unwrap();
        held.release().unwrap();
        let waited = heard.recv_timeout(HANG).expect("the callback's wait hung");
        assert!(waited.is_ok(), "{what}: {waited:?}");
        emitting.join().unwrap();
        run(op).unwrap();

        // From a waker the program wakes on a thread of its own: its bounded wait runs out
        // before the notify is set, so its unbounded one is made while the operation is
        // still pending.
        let (setting, notify, pending, _) = a_pending_and_a_complete_operation(&ctx);
        let done = pending.completion().clone();
        let (told, heard) = std::sync::mpsc::channel();
        let waker = std::task::Waker::from(Arc::new(CallsWhenWoken::new(move || {
            let _ = told.send(done.blocking_waiter().wait_for(MADE));
            let _ = told.send(Some(done.wait_blocking()));
        })));
        let waking = std::thread::spawn(move || waker.wake());
        let bounded = heard.recv_timeout(HANG).expect("the waker was not woken");
        assert!(
            bounded.is_none(),
            "{what}: a program's own waker's bounded wait runs out, made: {bounded:?}"
        );
        run(setting.record_notify(&notify)).unwrap();
        let waited = heard.recv_timeout(HANG).expect("the waker's wait hung");
        assert!(matches!(waited, Some(Ok(()))), "{what}: {waited:?}");
        // Bounded: the waker has sent its last answer, and the thread only returns.
        waking.join().unwrap();
        run(pending).unwrap();
    }
}

/// A Tokio runtime shut down within [`HANG`] as it is dropped, in a panic's unwind too: a
/// plain drop waits for its blocking tasks, which may wait for a device the test holds.
struct ShutDownWithin(Option<tokio::runtime::Runtime>);

impl ShutDownWithin {
    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("shut down only as it is dropped")
    }
}

impl Drop for ShutDownWithin {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_timeout(HANG);
        }
    }
}

/// The name of the thread a waker runs on.
fn this_thread() -> String {
    std::thread::current().name().unwrap_or("").to_owned()
}

/// A waker that, woken, calls its function once.
struct CallsWhenWoken(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl CallsWhenWoken {
    fn new(call: impl FnOnce() + Send + 'static) -> CallsWhenWoken {
        CallsWhenWoken(Mutex::new(Some(Box::new(call))))
    }
}

impl std::task::Wake for CallsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let call = self.0.lock().unwrap().take();
        if let Some(call) = call {
            call();
        }
    }
}

/// Checks the invariants of a bounded pool's counters: what it holds and the room granted to
/// blocks not yet made never exceed the capacity, and `reserved` adds up.
fn within_the_cap(pool: &DevicePool, cap: usize, what: &str) -> npu::PoolStats {
    let stats = pool.stats().cache;
    assert!(
        stats.reserved + stats.allocating <= cap,
        "{what}: over the capacity {cap}: {stats:?}"
    );
    assert_eq!(
        stats.reserved,
        stats.allocated + stats.awaiting_bytes + stats.cached,
        "{what}: {stats:?}"
    );
    stats
}

/// Promise: cancelling, failing or orphaning a pool's allocation loses nothing and leaves its
/// counters consistent (rule 2; `PoolStats::allocating`, new in the last session): on the
/// runtime pool's stream-ordered allocations held by the device, a bounded pool of two
/// blocks: two requests polled once (their allocations submitted), a third queued for room,
/// the first and the third dropped, then the device released; a request failed by
/// `fail_next_alloc` (both backends); and a pool dropped with an allocation the device still
/// holds.
///
/// Outcome: held. `allocating` counts the two submitted allocations' room and never exceeds
/// the capacity with `reserved`; the queued request leaves the queue; once released the
/// second request gets its block, the cancelled allocation's block goes back and
/// `allocating` returns to 0; with every block dropped the pool settles with nothing
/// allocated, awaiting, allocating or waiting; the failed request is out of memory and leaves
/// the counters as they were, and the next one is served; the dropped pool's held allocation
/// is freed once the device runs it, and the pool's own stream destroyed (the device's live
/// allocations and streams back at their baseline).
#[test]
fn a_pools_allocating_room_is_given_back_by_cancelled_failed_and_orphaned_allocations() {
    let (_guard, ctx) = devices();
    let class = DevicePool::size_class(BLOCK).unwrap();
    let cap = 2 * class;
    let s = Stream::new(&ctx).unwrap();
    {
        let what = "cancelled";
        let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(cap));
        let held = sim::hold(&ctx.device()).unwrap();
        let mut first = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        let mut second = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        assert!(polled_once(first.as_mut()).is_pending(), "{what}");
        assert!(polled_once(second.as_mut()).is_pending(), "{what}");
        assert_eq!(within_the_cap(&pool, cap, what).allocating, cap, "{what}");
        let mut third = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        assert!(polled_once(third.as_mut()).is_pending(), "{what}");
        assert_eq!(within_the_cap(&pool, cap, what).waiters, 1, "{what}");
        drop(first);
        within_the_cap(&pool, cap, what);
        drop(third);
        assert_eq!(within_the_cap(&pool, cap, what).waiters, 0, "{what}");
        held.release().unwrap();
        let block = run(second).unwrap();
        until_released(what, || pool.stats().cache.allocating == 0);
        let stats = within_the_cap(&pool, cap, what);
        assert_eq!(stats.allocated, class, "{what}: {stats:?}");
        drop(block);
        run(pool.settled());
        let stats = within_the_cap(&pool, cap, what);
        assert_eq!(
            (
                stats.allocated,
                stats.awaiting_blocks,
                stats.allocating,
                stats.waiters
            ),
            (0, 0, 0, 0),
            "{what}: {stats:?}"
        );
    }
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?} failed");
        let pool = device_pool(&ctx, backend, Some(cap));
        let before = pool.stats().cache;
        sim::fail_next_alloc(&ctx.device()).unwrap();
        // Nothing cached to give back and nothing out: the request fails at once.
        let err = run(pool.alloc::<u8>(&s, BLOCK)).unwrap_err();
        assert!(err.is_out_of_memory(), "{what}: {err}");
        let after = pool.stats().cache;
        assert_eq!(
            (
                after.allocated,
                after.reserved,
                after.allocating,
                after.waiters
            ),
            (
                before.allocated,
                before.reserved,
                before.allocating,
                before.waiters
            ),
            "{what}"
        );
        drop(run(pool.alloc::<u8>(&s, BLOCK)).unwrap());
        run(pool.settled());
        let stats = within_the_cap(&pool, cap, &what);
        assert_eq!(
            (stats.allocating, stats.allocated),
            (0, 0),
            "{what}: {stats:?}"
        );
    }
    {
        // On device 1, where no pool of this test frees blocks on a release stream of its own
        // meanwhile (the pools dropped above may still be giving theirs back).
        let what = "orphaned";
        let ctx = Device::open(1).unwrap().primary_context().clone();
        let s = Stream::new(&ctx).unwrap();
        let baseline = live_allocations(&ctx);
        let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(cap));
        let held = sim::hold(&ctx.device()).unwrap();
        let mut request = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        assert!(polled_once(request.as_mut()).is_pending(), "{what}");
        drop(request);
        drop(pool);
        held.release().unwrap();
        until_released(what, || live_allocations(&ctx) == baseline);
    }
}

/// Promise: a cross-device copy keeps the peer access it was submitted under until it
/// completes, and resolves with its own bytes or a typed error, while the guards that enabled
/// the access are dropped on other threads (rules 1 to 3; `PeerAccess::device`, new in the
/// last session, and the deprecated `from`). Four threads each, forty times: enable device
/// 0's access to device 1 (the guard's `device()` and `from()` are device 0, its `peer()`
/// device 1), start a copy of a device-1 buffer of its own pattern into a device-0 buffer,
/// and hand the guard to a dropping thread before awaiting the copy.
///
/// Outcome: held. Every copy either lands its own pattern or is refused typed (naming
/// `Stream::copy_d2d`) when it was submitted with no access enabled; once every guard and copy
/// is gone, no access is left enabled (`peer_access_to` is `None`).
#[test]
fn cross_device_copies_keep_their_access_while_guards_are_dropped_elsewhere() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 40;
    let (_guard, ctx) = devices();
    let (d0, d1) = (ctx.device(), Device::open(1).unwrap());
    let peer_ctx = d1.primary_context().clone();
    let (to_drop, dropping) = std::sync::mpsc::channel::<npu::PeerAccess>();
    let dropper = std::thread::spawn(move || {
        for guard in dropping {
            drop(guard);
        }
    });
    let start = Arc::new(Barrier::new(THREADS));
    let copiers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (ctx, peer_ctx, start, to_drop) = (
                ctx.clone(),
                peer_ctx.clone(),
                start.clone(),
                to_drop.clone(),
            );
            let (d0, d1) = (d0.clone(), d1.clone());
            std::thread::spawn(move || {
                let s = Stream::new(&ctx).unwrap();
                start.wait();
                let mut landed = 0;
                for round in 0..ROUNDS {
                    let what = format!("thread {t} round {round}");
                    let pattern = (t * ROUNDS + round) as u8;
                    let src = DeviceBuffer::from_host_blocking(&peer_ctx, &[pattern; 256]).unwrap();
                    let access = d0.enable_peer_access(&d1).unwrap();
                    assert_eq!(access.device(), &d0, "{what}");
                    #[allow(deprecated)]
                    let from = access.from();
                    assert_eq!(from, access.device(), "{what}");
                    assert_eq!(access.peer(), &d1, "{what}");
                    let mut copy = s.copy_d2d(src, dev(&ctx, 256));
                    let first = polled_once(Pin::new(&mut copy));
                    to_drop.send(access).unwrap();
                    let landed_or_not = match first {
                        std::task::Poll::Ready(done) => done,
                        std::task::Poll::Pending => run(copy),
                    };
                    match landed_or_not {
                        Ok((_, dst)) => {
                            assert_eq!(dst.to_vec_blocking().unwrap(), [pattern; 256], "{what}");
                            landed += 1;
                        }
                        Err(err) => panic!("{what}: the copy failed: {:?}", err.error),
                    }
                }
                landed
            })
        })
        .collect();
    drop(to_drop);
    let landed: usize = copiers.into_iter().map(|c| c.join().unwrap()).sum();
    dropper.join().unwrap();
    assert_eq!(landed, THREADS * ROUNDS);
    until_released("the copies' guards", || d0.peer_access_to(&d1).is_none());
}

/// Promise: a cross-device copy queued while its peer device is lost resolves, and its drops
/// and its peer access's guards return (rules 2, 3 and 5): device 2's stream, on the held
/// device, copies a device-3 buffer into a device-2 buffer under a guard of device 2's access
/// to device 3, which the test drops at once; device 3 is then lost (for the rest of the
/// process) and device 2 released.
///
/// Outcome: held. The copy resolves, `Ok` or failed typed with both buffers handed back;
/// every drop returns; device 2's access to device 3 is disabled afterwards
/// (`peer_access_to` is `None`); device 2's stream runs a memset after.
#[test]
fn a_cross_device_copy_whose_peer_is_lost_resolves_and_lets_its_access_go() {
    let (_guard, _ctx) = devices();
    let (d2, d3) = (Device::open(2).unwrap(), Device::open(3).unwrap());
    let (near, far) = (d2.primary_context().clone(), d3.primary_context().clone());
    let s = Stream::new(&near).unwrap();
    let src = DeviceBuffer::from_host_blocking(&far, &[5u8; 512]).unwrap();
    let access = d2.enable_peer_access(&d3).unwrap();
    assert_eq!(access.device(), &d2);
    let held = sim::hold(&d2).unwrap();
    let mut copy = s.copy_d2d(src, dev(&near, 512));
    assert!(polled_once(Pin::new(&mut copy)).is_pending(), "held");
    drop(access);
    sim::lose(&d3).unwrap();
    held.release().unwrap();
    match run(copy) {
        Ok((src, dst)) => {
            assert_eq!(dst.to_vec_blocking().unwrap(), [5; 512]);
            drop(src);
        }
        Err(err) => {
            assert!(err.value.is_some(), "both buffers back: {}", err.error);
            drop(err);
        }
    }
    until_released("the copy's guard", || d2.peer_access_to(&d3).is_none());
    a_memset_writes(&near, &s, 9, "device 2 after its peer's loss");
}

/// Promise: a forked child gets `Error::Forked` or works (rule 8), whichever thread it was
/// forked from, and every blocking wait says so alike: a child forked from a waker that the
/// completing thread wakes (the reactor, a callback worker, a blocking waiter's thread: every
/// strategy), waiting for an operation made before the fork and pending there (a wait on a
/// notify), with `Completion::wait_blocking`, a `BlockingWaiter`'s bounded wait and a look,
/// `wait_for_teardowns`, and the blocking copies (`to_vec_blocking`, `from_host_blocking`:
/// `Error::Forked` naming `aclrtMemcpy`, not their thread's refusal).
///
/// Outcome: **broke**: the bounded wait was refused with `InvalidArgument` (argument
/// `thread`: the child's one thread was the parent's completing thread) where
/// `wait_blocking` and `wait_for_teardowns` said `Error::Forked`, because it asked about the
/// thread before the fork. Fixed: every wait is `Error::Forked` there, the look too.
#[test]
fn every_wait_in_a_child_forked_from_a_waker_is_refused_as_forked() {
    in_child_test("child", CHILD_ENV, "fork in a waker");
}

/// The child process's case of
/// [`every_wait_in_a_child_forked_from_a_waker_is_refused_as_forked`].
fn waits_in_a_child_forked_from_a_waker() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let (setting, notify, pending, _) = a_pending_and_a_complete_operation(&ctx);
        let done = pending.completion().clone();
        let (child_ctx, child_buffer) = (ctx.clone(), dev(&ctx, 64));
        let check = Box::new(move || {
            assert_forked(&child_ctx.synchronize_blocking().unwrap_err());
            // The copy's own refusal there, before the thread's.
            for copied in [
                child_buffer.to_vec_blocking().map(drop),
                DeviceBuffer::from_host_blocking(&child_ctx, &[1u8]).map(drop),
            ] {
                match copied {
                    Err(Error::Forked { api }) => assert_eq!(api, "aclrtMemcpy"),
                    other => panic!("a blocking copy in the child: {other:?}"),
                }
            }
            every_wait_is_forked(&done);
        });
        let (told, heard) = std::sync::mpsc::channel();
        // Forks once, woken; the child checks `check`, and the waker sends the child's outcome
        // and the thread it was woken on.
        let waker = std::task::Waker::from(Arc::new(CallsWhenWoken::new(move || {
            let thread = this_thread();
            let (ok, status) = fork_and_check(check);
            let _ = told.send((thread, ok, status));
        })));
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(dev(&ctx, 64), 3);
        assert!(
            polled_with(Pin::new(&mut memset), &waker).is_pending(),
            "{what}: held"
        );
        drop(waker);
        held.release().unwrap();
        let (thread, ok, status) = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or hung"));
        assert!(thread.starts_with("npu-"), "{what}: woken on {thread:?}");
        assert!(
            ok,
            "{what}: the child forked on {thread} failed (status {status})"
        );
        run(memset).unwrap();
        run(setting.record_notify(&notify)).unwrap();
        run(pending).unwrap();
    }
}

/// Checks, in a forked child, that every wait for `done` (an operation of the parent, pending
/// at the fork: both blocking waits and a look) and a wait for teardowns are `Error::Forked`
/// at once.
fn every_wait_is_forked(done: &Completion) {
    let waiter = done.blocking_waiter();
    assert_forked(
        &waiter
            .wait_for(HANG)
            .expect("refused, not timed out")
            .unwrap_err(),
    );
    assert_forked(
        &waiter
            .wait_for(std::time::Duration::ZERO)
            .expect("refused, not looked at")
            .unwrap_err(),
    );
    assert_forked(&done.wait_blocking().unwrap_err());
    assert_forked(&npu::runtime::wait_for_teardowns(HANG).unwrap_err());
}

/// What [`ForksInItsCallback`] checks in the child it forks, and where it sends the outcome;
/// armed while set, taken by the first callback of the simulator's events.
type ForkCheck = (
    Box<dyn FnOnce() + Send>,
    std::sync::mpsc::Sender<(bool, i32)>,
);

static FORK_IN_CALLBACK: Mutex<Option<ForkCheck>> = Mutex::new(None);

/// A tracing layer whose callback, once armed, forks from the simulator's next event.
struct ForksInItsCallback;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ForksInItsCallback {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        if !["ascendcl", "npu_sim"]
            .iter()
            .any(|t| target.starts_with(t))
        {
            return;
        }
        let Some((check, told)) = FORK_IN_CALLBACK.lock().unwrap().take() else {
            return;
        };
        let _ = told.send(fork_and_check(check));
    }
}

/// Promise: a forked child gets `Error::Forked` or works, never hangs (rule 8), when it was
/// forked from a tracing subscriber's callback under a stream's submission lock (the
/// simulator's report of a memset refused on a stopped stream, every strategy): the child's
/// one thread holds that lock. In the child: both blocking waits and a look for an operation
/// made before the fork (pending), `wait_for_teardowns`, a flush of the reaper, a memset on
/// the stream whose lock the thread holds and on another stream, `abort` and `synchronize`
/// of that stream, a new stream, then every handle dropped.
///
/// Outcome: **broke** before the fix of
/// [`every_wait_in_a_child_forked_from_a_waker_is_refused_as_forked`]: the bounded wait said
/// `InvalidArgument` (argument `thread`: the child's thread held the lock in the parent).
/// Every call is now `Error::Forked` at once; the flush and the drops return.
#[test]
fn every_call_in_a_child_forked_under_a_submission_lock_is_refused_as_forked() {
    in_child_test("child", CHILD_ENV, "fork under a lock");
}

/// The child process's case of
/// [`every_call_in_a_child_forked_under_a_submission_lock_is_refused_as_forked`].
fn a_child_forked_from_a_subscriber_under_a_submission_lock() {
    use tracing_subscriber::layer::SubscriberExt;
    let (_guard, ctx) = devices();
    see_every_callsite();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        // A context of its own: the stop stops the whole context.
        let own = ctx.device().create_context().unwrap();
        let stopped = Arc::new(stream(&own, strategy));
        stopped.set_failure_mode(FailureMode::Stop).unwrap();
        sim::fail_task(&stopped, 1, AclCode::AICORE_EXCEPTION).unwrap();
        assert!(
            run(stopped.memset(dev(&own, 16), 1)).is_err(),
            "{what}: stopped"
        );
        let other = Arc::new(stream(&ctx, strategy));
        let (setting, notify, pending, _) = a_pending_and_a_complete_operation(&ctx);
        let done = pending.completion().clone();
        let (child_ctx, child_stopped, child_other) = (ctx.clone(), stopped.clone(), other.clone());
        let check = Box::new(move || {
            assert_forked(&child_ctx.synchronize_blocking().unwrap_err());
            every_wait_is_forked(&done);
            sim::flush_releases();
            let spare = DeviceBuffer::<u8>::new(&child_ctx, 16);
            if let Ok(spare) = spare {
                assert_forked(&run(child_stopped.memset(spare, 3)).unwrap_err().error);
            }
            if let Ok(spare) = DeviceBuffer::<u8>::new(&child_ctx, 16) {
                assert_forked(&run(child_other.memset(spare, 3)).unwrap_err().error);
            }
            assert_forked(&run(child_stopped.abort()).unwrap_err());
            assert_forked(&run(child_stopped.synchronize()).unwrap_err().error);
            assert_forked(&Stream::new(&child_ctx).unwrap_err());
            drop((done, child_stopped, child_other, child_ctx));
        });
        let (told, heard) = std::sync::mpsc::channel();
        *FORK_IN_CALLBACK.lock().unwrap() = Some((check, told));
        let subscriber = tracing_subscriber::registry().with(ForksInItsCallback);
        // Made before the subscriber: the first of the simulator's events it hears is the
        // memset's refusal, under the submission lock.
        let spare = dev(&own, 16);
        let refused =
            tracing::subscriber::with_default(subscriber, || run(stopped.memset(spare, 2)));
        assert!(refused.is_err(), "{what}: the stopped stream ran a memset");
        let (ok, status) = heard
            .try_recv()
            .unwrap_or_else(|_| panic!("{what}: no callback under the lock"));
        assert!(ok, "{what}: the child failed (status {status})");
        run(setting.record_notify(&notify)).unwrap();
        run(pending).unwrap();
        a_memset_writes(&ctx, &other, 4, &what);
    }
}

/// Promise: no npu-rs thread waits on device work, and a blocking wait called back from code
/// npu-rs runs on its own threads is refused, not made (rules 5 and 6), for the context's
/// blocking synchronisation (`Context::synchronize_blocking`, `aclrtSynchronizeDevice`: a wait
/// for every stream of the context) as for an operation's: called from a waker that the
/// completing thread wakes (the reactor, a callback worker, a blocking waiter's thread: every
/// strategy) while another stream of the context waits on a notify that the program sets
/// once it has heard from the waker.
///
/// Outcome: **broke**: the waker's synchronisation waited on the completing thread for the
/// device to finish work the program would only let finish after the waker returned (the
/// child process hung; every operation that thread serves waited too). Fixed: refused there
/// at once with `InvalidArgument` naming `Context::synchronize_blocking` and `thread`, as
/// `Completion::wait_blocking` is; the notify's wait completes once set, and the context's
/// synchronisation from the program's own thread returns `Ok` afterwards.
#[test]
fn a_context_synchronized_in_a_waker_on_the_completing_thread_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "synchronize in a waker");
}

/// The child process's case of
/// [`a_context_synchronized_in_a_waker_on_the_completing_thread_is_refused_not_hung`].
fn a_context_synchronized_in_a_waker() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let (setting, notify, pending, _) = a_pending_and_a_complete_operation(&ctx);
        let (told, heard) = std::sync::mpsc::channel();
        let context = ctx.clone();
        let waker = std::task::Waker::from(Arc::new(CallsWhenWoken::new(move || {
            let _ = told.send((this_thread(), context.synchronize_blocking()));
        })));
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(dev(&ctx, 64), 5);
        assert!(
            polled_with(Pin::new(&mut memset), &waker).is_pending(),
            "{what}: held"
        );
        drop(waker);
        held.release().unwrap();
        let (thread, answer) = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or its wait hung"));
        assert!(thread.starts_with("npu-"), "{what}: woken on {thread:?}");
        let err = answer.expect_err("the synchronisation was made on npu-rs's thread");
        assert_eq!(
            invalid(&err),
            ("Context::synchronize_blocking", "thread"),
            "{what}, on {thread}"
        );
        run(setting.record_notify(&notify)).unwrap();
        run(pending).unwrap();
        assert_eq!(
            run(memset).unwrap().to_vec_blocking().unwrap(),
            [5; 64],
            "{what}"
        );
        ctx.synchronize_blocking().unwrap();
    }
}

/// Promise: no npu-rs thread waits on device work, and a blocking call called back from code
/// npu-rs runs on its own threads that may wait for it is refused, not made (rules 5 and 6),
/// for the blocking copies (`DeviceBuffer::from_host_blocking`, `copy_from_host_blocking`,
/// `copy_to_host_blocking`, `to_vec_blocking`, `ValueWord::new` and `read_blocking`: a
/// synchronous `aclrtMemcpy`, which first waits for every task of its device touching memory,
/// a running kernel included, as CANN's samples rely on): called from a waker that the
/// completing thread wakes (every strategy) on device 0, each on memory of device 1 while a
/// kernel runs there held at its gate, which the program opens once it has heard from the
/// waker.
///
/// Outcome: **broke** (found by review): the waker's first copy waited on the completing
/// thread for the gated kernel, which the program would only let finish after the waker
/// returned (the child process hung; every operation that thread serves waited too). Fixed:
/// each copy is refused at once with `InvalidArgument` naming it and `thread`, as
/// `Context::synchronize_blocking` is; once the gate opens the kernel completes, and blocking
/// copies from the program's own thread (`copy_from_host_blocking`, `to_vec_blocking`) are
/// made.
#[test]
fn blocking_copies_in_a_waker_on_the_completing_thread_are_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "copies in a waker");
}

/// The child process's case of
/// [`blocking_copies_in_a_waker_on_the_completing_thread_are_refused_not_hung`].
fn blocking_copies_in_a_waker() {
    let (_guard, ctx) = devices();
    let far = Device::open(1).unwrap().primary_context().clone();
    let (fill, gated) = (gated_fill(&far), Stream::new(&far).unwrap());
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        // Made before the kernel runs: their own copies would wait for it.
        let memory = (dev(&far, 64), npu::stream::ValueWord::new(&far, 9).unwrap());
        let (running, ()) = a_held_fill_and_behind_it(&far, &gated, &fill, &what, || ());
        let (told, heard) = std::sync::mpsc::channel();
        // Makes every blocking copy npu-rs offers once, woken (on `far`'s device, into and out
        // of a buffer, and a value word's), and sends what each answered.
        let context = far.clone();
        let waker = std::task::Waker::from(Arc::new(CallsWhenWoken::new(move || {
            let (mut buffer, mut word) = memory;
            let copied = vec![
                (
                    "DeviceBuffer::from_host_blocking",
                    DeviceBuffer::from_host_blocking(&context, &[1u8; 64]).map(drop),
                ),
                (
                    "DeviceBuffer::copy_from_host_blocking",
                    buffer.copy_from_host_blocking(&[2; 64]),
                ),
                (
                    "DeviceBuffer::copy_to_host_blocking",
                    buffer.copy_to_host_blocking(&mut [0; 64]),
                ),
                (
                    "DeviceBuffer::to_vec_blocking",
                    buffer.to_vec_blocking().map(drop),
                ),
                (
                    "ValueWord::new",
                    npu::stream::ValueWord::new(&context, 3).map(drop),
                ),
                ("ValueWord::read_blocking", word.read_blocking().map(drop)),
            ];
            let _ = told.send((this_thread(), copied));
        })));
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(dev(&ctx, 64), 5);
        assert!(
            polled_with(Pin::new(&mut memset), &waker).is_pending(),
            "{what}: held"
        );
        drop(waker);
        held.release().unwrap();
        let (thread, copied) = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or its copy hung"));
        assert!(thread.starts_with("npu-"), "{what}: woken on {thread:?}");
        assert_eq!(copied.len(), 6, "{what}");
        for (api, answer) in copied {
            let err = answer.expect_err("the copy was made on npu-rs's thread");
            assert_eq!(invalid(&err), (api, "thread"), "{what}, on {thread}");
        }
        set_gate(|gate| gate.1 = true);
        assert_eq!(
            run(running).unwrap().0.to_vec_blocking().unwrap(),
            [0x5B; 256]
        );
        let mut buffer = run(memset).unwrap();
        buffer.copy_from_host_blocking(&[6; 64]).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [6; 64], "{what}");
    }
}

/// Promise: no npu-rs wait called back from code npu-rs runs on its own threads waits for
/// work that waits for that thread (rules 5 and 6), for a flush of the reaper
/// (`npu::sim::flush_releases`) from a waker that the completing thread wakes (every
/// strategy), with releases queued on the reaper before it that take the locks npu-rs's
/// threads take: on the held device, behind the woken memset, memsets on a second stream of
/// the same strategy whose futures were dropped (their buffers' releases) and that stream
/// itself dropped (its release), a block of a bounded device pool whose memset's future was
/// dropped while a request waits for room (its return serves the request under the pool's
/// drain lock), and a cross-device copy's peer-access guard.
///
/// Outcome: held. Each flush returns on the completing thread once the releases queued before
/// it have run; the queued pool request gets its block, the copy lands, and peer access is
/// disabled once every guard is gone.
#[test]
fn a_flush_in_a_waker_on_the_completing_thread_runs_the_releases_queued_before_it() {
    in_child_test("child", CHILD_ENV, "flush in a waker");
}

/// The child process's case of
/// [`a_flush_in_a_waker_on_the_completing_thread_runs_the_releases_queued_before_it`].
fn a_flush_in_a_waker_on_the_completing_thread() {
    let (_guard, ctx) = devices();
    let (d0, d1) = (ctx.device(), Device::open(1).unwrap());
    let class = DevicePool::size_class(BLOCK).unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s, second) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let pool = device_pool(&ctx, DevicePoolBackend::Caching, Some(class));
        let block = run(pool.alloc::<u8>(&s, BLOCK)).unwrap();
        let src = DeviceBuffer::from_host_blocking(d1.primary_context(), &[7u8; 64]).unwrap();
        let access = d0.enable_peer_access(&d1).unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        let waker = std::task::Waker::from(Arc::new(CallsWhenWoken::new(move || {
            sim::flush_releases();
            let _ = told.send(this_thread());
        })));
        let held = sim::hold(&d0).unwrap();
        for value in 0..4 {
            let mut memset = second.memset(dev(&ctx, 64), value);
            assert!(polled_once(Pin::new(&mut memset)).is_pending(), "{what}");
        }
        drop(second);
        let mut pooled = s.memset(block, 1);
        assert!(polled_once(Pin::new(&mut pooled)).is_pending(), "{what}");
        drop(pooled);
        let mut copy = s.copy_d2d(src, dev(&ctx, 64));
        assert!(polled_once(Pin::new(&mut copy)).is_pending(), "{what}");
        drop(access);
        let mut woken = s.memset(dev(&ctx, 64), 2);
        assert!(
            polled_with(Pin::new(&mut woken), &waker).is_pending(),
            "{what}"
        );
        drop(waker);
        let mut queued = Box::pin(pool.alloc::<u8>(&s, BLOCK));
        assert!(polled_once(queued.as_mut()).is_pending(), "{what}");
        assert_eq!(pool.stats().cache.waiters, 1, "{what}: queued");
        held.release().unwrap();
        let thread = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or its flush hung"));
        assert!(thread.starts_with("npu-"), "{what}: woken on {thread:?}");
        drop(run(queued).unwrap());
        assert_eq!(
            run(copy).unwrap().1.to_vec_blocking().unwrap(),
            [7; 64],
            "{what}"
        );
        run(woken).unwrap();
        until_released(&what, || d0.peer_access_to(&d1).is_none());
    }
}

/// Promise: a failed allocation gives back the room it was granted and leaves a bounded
/// pool's queue served (rules 2 and 3; `PoolStats::allocating`), while host allocation
/// faults (`npu::sim::fail_next_host_alloc`) armed by the racing threads themselves fail
/// whichever allocation comes next: a pinned pool of 12 KiB, four threads each allocating
/// (awaited, so requests queue for room) and dropping a block of 4 or 8 KiB (so the pool
/// evicts and allocates anew) 40 times, arming a fault every third round.
///
/// Outcome: held. Every request resolves, with a block or the armed code (never more failures
/// than the faults armed; how many fire is the race's, since a request the cache serves makes
/// no host allocation); no thread is left waiting; afterwards a fault armed with the cache
/// emptied fails the next request, and the pool then holds nothing allocated, allocating or
/// waiting, `reserved` within the capacity, and serves a request.
#[test]
fn pinned_allocations_failed_by_racing_host_faults_give_their_room_back() {
    use npu::error::AclCode;
    const THREADS: usize = 4;
    const ROUNDS: usize = 40;
    const CODE: AclCode = AclCode(207001);
    let (_guard, ctx) = devices();
    let cap = 3 * 4096;
    let pool = npu::PinnedPool::builder(&ctx)
        .capacity(cap)
        .build()
        .unwrap();
    let start = Arc::new(Barrier::new(THREADS));
    let allocators: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, start) = (pool.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let (mut armed, mut failed) = (0, 0);
                for round in 0..ROUNDS {
                    if round % 3 == t % 3 {
                        sim::fail_next_host_alloc(CODE).unwrap();
                        armed += 1;
                        // Cached blocks let go, so that the next allocation is likely a new
                        // one, which the fault fails (whose is the race's to decide).
                        pool.trim();
                    }
                    match run(pool.alloc::<u8>((t % 2 + 1) * 4096)) {
                        Ok(block) => drop(block),
                        Err(err) => {
                            assert_eq!(err.acl_code(), Some(CODE), "thread {t} round {round}");
                            failed += 1;
                        }
                    }
                    let stats = pool.stats();
                    assert!(stats.reserved + stats.allocating <= cap, "{stats:?}");
                }
                (armed, failed)
            })
        })
        .collect();
    let (armed, failed) = allocators
        .into_iter()
        .map(|a| a.join().unwrap())
        .fold((0, 0), |(a, f), (armed, failed)| (a + armed, f + failed));
    // A request served from the pool's cache makes no host allocation, so how many faults
    // fired during the race is the race's; never more than were armed.
    assert!(failed <= armed, "{failed} failures of {armed} faults");
    // With the cache emptied the next request is a new allocation, which an armed fault (one
    // left from the race, or this one) fails; then the pool serves again.
    pool.trim();
    sim::fail_next_host_alloc(CODE).unwrap();
    let err = run(pool.alloc::<u8>(4096)).unwrap_err();
    assert_eq!(err.acl_code(), Some(CODE), "{err}");
    let stats = pool.stats();
    assert_eq!(
        (stats.allocated, stats.allocating, stats.waiters),
        (0, 0, 0),
        "{stats:?}"
    );
    assert!(stats.reserved <= cap, "{stats:?}");
    drop(run(pool.alloc::<u8>(4096)).unwrap());
}

/// Promise: Tokio runtime shutdown with work in flight is safe and loses nothing (rules 2
/// and 4), for a request queued for room in a bounded device pool (both backends) by a task
/// of a runtime dropped while the block it waits for comes back: each of 20 rounds, a block
/// used by a memset on the held device (its future dropped), a current-thread runtime whose
/// task awaits a second request (queued), then the device released on another thread while
/// this one drops the runtime, racing the block's return on the reaper (which may serve the
/// request) against the task's drop.
///
/// Outcome: held. The queue is empty after each round (`waiters` 0) and the pool settles with
/// nothing allocated or allocating; a grant served to the dropped task comes back (the next
/// request is served from the pool, the capacity never exceeded).
#[test]
fn a_pool_request_of_a_runtime_dropped_as_its_block_returns_loses_nothing() {
    const ROUNDS: usize = 20;
    let (_guard, ctx) = devices();
    let class = DevicePool::size_class(BLOCK).unwrap();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let s = Stream::new(&ctx).unwrap();
        let pool = device_pool(&ctx, backend, Some(class));
        for round in 0..ROUNDS {
            let what = format!("{what} round {round}");
            let block = run(pool.alloc::<u8>(&s, BLOCK)).unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            let mut memset = s.memset(block, 1);
            assert!(polled_once(Pin::new(&mut memset)).is_pending(), "{what}");
            drop(memset);
            let tokio = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let (theirs, stream) = (pool.clone(), s.clone());
            let task = tokio.spawn(async move { theirs.alloc::<u8>(&stream, BLOCK).await });
            tokio.block_on(async {
                while pool.stats().cache.waiters == 0 {
                    tokio::task::yield_now().await;
                }
            });
            let start = Arc::new(Barrier::new(2));
            let releasing = {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    held.release().unwrap();
                })
            };
            start.wait();
            drop(tokio);
            releasing.join().unwrap();
            drop(task);
            run(pool.settled());
            let stats = within_the_cap(&pool, class, &what);
            assert_eq!(
                (stats.allocated, stats.allocating, stats.waiters),
                (0, 0, 0),
                "{what}: {stats:?}"
            );
        }
        drop(run(pool.alloc::<u8>(&s, BLOCK)).unwrap());
        assert!(pool.stats().cache.hits > 0, "{what}: served from the pool");
    }
}

/// Promise: cancelling a pool's `reserve` loses nothing and leaves its counters consistent
/// (rule 2; `PoolStats::allocating` counts a reserve's room too): on the runtime pool's
/// stream-ordered allocations, a bounded pool of three blocks, a reserve of three polled once
/// on the held device (its first allocation submitted) and dropped, a request made meanwhile,
/// then the device released; afterwards, with the request's block dropped, a reserve of
/// three awaited.
///
/// Outcome: held. The cancelled reserve's room is counted in `allocating` until the device
/// runs its allocation, and `reserved + allocating` never exceeds the capacity; once released
/// `allocating` returns to 0 and the request gets its block; once that block is dropped, the
/// second reserve fills the pool to the capacity, all cached, nothing allocating.
#[test]
fn a_cancelled_reserve_gives_its_room_back() {
    let (_guard, ctx) = devices();
    let class = DevicePool::size_class(BLOCK).unwrap();
    let cap = 3 * class;
    let s = Stream::new(&ctx).unwrap();
    let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(cap));
    let held = sim::hold(&ctx.device()).unwrap();
    let mut reserve = Box::pin(pool.reserve(&s, 3, BLOCK));
    assert!(polled_once(reserve.as_mut()).is_pending(), "held");
    assert_eq!(within_the_cap(&pool, cap, "reserving").allocating, class);
    drop(reserve);
    within_the_cap(&pool, cap, "cancelled");
    let mut request = Box::pin(pool.alloc::<u8>(&s, BLOCK));
    let _ = polled_once(request.as_mut());
    within_the_cap(&pool, cap, "a request beside it");
    held.release().unwrap();
    let block = run(request).unwrap();
    until_released("the cancelled reserve", || {
        pool.stats().cache.allocating == 0
    });
    within_the_cap(&pool, cap, "released");
    drop(block);
    run(pool.settled());
    assert_eq!(run(pool.reserve(&s, 3, BLOCK)).unwrap(), 3 * class);
    let stats = within_the_cap(&pool, cap, "reserved");
    assert_eq!(
        (
            stats.cached,
            stats.allocated,
            stats.allocating,
            stats.waiters
        ),
        (cap, 0, 0, 0),
        "{stats:?}"
    );
}

/// Promise: a forked child gets `Error::Forked` or works, never hangs (rule 8), when it was
/// forked from a tracing subscriber's callback under the runtime's device and peer-access
/// lock (the simulator's report of `aclrtDeviceEnablePeerAccess` refused for a lost peer):
/// the child's one thread holds that lock. In the child: opening a device, enabling peer
/// access, looking it up, a new stream, a device and a pinned buffer, a device pool (of the
/// default backend, and of each backend forced: the caching one makes no runtime call to be
/// made), the context's synchronisation,
/// `wait_for_teardowns`, `Runtime::global` (made before the fork), then every handle dropped.
///
/// Outcome: **broke**: `DevicePool::new` returned a pool: its runtime pool refused as forked,
/// it fell back to the caching backend (`backend_reason` "creating a runtime pool failed"),
/// a pool whose every allocation is refused. Fixed: `Error::Forked`, as every call that
/// reaches the runtime there is. Then (found by review) a pool forced to the caching backend
/// was still made there, and so was the default one on a runtime without the pool API (the
/// plan picks the caching backend before any runtime call), each a pool whose every
/// allocation is refused; the device pool's construction now refuses a forked child first,
/// for every backend: `Error::Forked` for each (it failed for the forced caching pool
/// before). Every other call is `Error::Forked` at once (the look finds no access, the
/// global runtime is the parent's), and the drops return.
#[test]
fn every_call_in_a_child_forked_under_the_runtime_lock_is_refused_as_forked() {
    in_child_test("child", CHILD_ENV, "fork under the runtime lock");
}

/// The child process's case of
/// [`every_call_in_a_child_forked_under_the_runtime_lock_is_refused_as_forked`]: device 3 is
/// lost in this process alone.
fn a_child_forked_from_a_subscriber_under_the_runtime_lock() {
    use tracing_subscriber::layer::SubscriberExt;
    let (_guard, ctx) = devices();
    see_every_callsite();
    let (d0, d1, d3) = (
        ctx.device(),
        Device::open(1).unwrap(),
        Device::open(3).unwrap(),
    );
    let global = npu::Runtime::global().unwrap();
    sim::lose(&d3).unwrap();
    let (child_ctx, child_d0, child_d1) = (ctx.clone(), d0.clone(), d1.clone());
    let check = Box::new(move || {
        assert_forked(&Device::open(0).unwrap_err());
        assert_forked(&child_d0.enable_peer_access(&child_d1).unwrap_err());
        assert!(child_d0.peer_access_to(&child_d1).is_none());
        assert_forked(&Stream::new(&child_ctx).unwrap_err());
        assert_forked(&DeviceBuffer::<u8>::new(&child_ctx, 16).unwrap_err());
        assert_forked(&PinnedBuffer::<u8>::new(&child_ctx, 16).unwrap_err());
        assert_forked(&DevicePool::new(&child_ctx).unwrap_err());
        // A pool of the backend that makes no runtime call to be made is refused too: its
        // every allocation would be.
        for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
            let refused = DevicePool::builder(&child_ctx).backend(backend).build();
            assert_forked(&refused.unwrap_err());
        }
        assert_forked(&child_ctx.synchronize_blocking().unwrap_err());
        assert_forked(&npu::runtime::wait_for_teardowns(HANG).unwrap_err());
        assert!(npu::Runtime::global().unwrap().same_library(&global));
        drop((child_ctx, child_d0, child_d1));
    });
    let (told, heard) = std::sync::mpsc::channel();
    *FORK_IN_CALLBACK.lock().unwrap() = Some((check, told));
    let subscriber = tracing_subscriber::registry().with(ForksInItsCallback);
    let refused = tracing::subscriber::with_default(subscriber, || d0.enable_peer_access(&d3));
    assert!(refused.is_err(), "access to a lost device");
    let (ok, status) = heard
        .try_recv()
        .expect("no callback under the runtime's lock");
    assert!(ok, "the child failed (status {status})");
    drop(d0.enable_peer_access(&d1).unwrap());
}
