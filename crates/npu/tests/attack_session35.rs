//! Attacks of the thirty-fifth session through the `npu` facade, on the last session's new
//! code first: the pools' `settled()` (many waiters of every shape, waiters dropped and polled
//! again, the pool dropped or trimmed while they wait, blocks coming back on npu-rs's own
//! threads, quarantined or repaired blocks, room whose request was dropped mid-allocation, a
//! churning pool, a lost device, a forked child), pool requests queued before a fork,
//! `wait_for_teardowns` (from a pool's waker on whichever thread returns the block, from a
//! subscriber's callback under npu-rs's locks, from a task on a current-thread runtime whose
//! only worker it blocks, from a blocking task that takes a runtime's only blocking thread)
//! and the count of user `Stream` handles (clones dropped at once on racing threads while
//! their work is in flight, aborted or on a device being lost; hundreds of streams; a
//! forgotten clone).
//!
//! Each test names the promise it attacks and its outcome. The simulator's hold gate, live
//! counters and the process's teardown count are shared by every test of this process, so
//! every test takes the file's device lock; every wait is bounded (`run`, `watchdog`), so a
//! hang fails its test. Devices 2, 3 and 4 are each lost for the rest of the process by one
//! test.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use npu::Stream;
use npu::memory::{DevicePoolBackend, PinnedPool};
use npu::prelude::*;
use npu::runtime::wait_for_teardowns;
use npu::{Error, sim};

/// The memory of each of the five simulated devices.
const MEMORY: u64 = 64 << 20;

/// How many `settled()` waiters each `FuturesUnordered` set of a pool holds.
const WAITERS: usize = 200;

/// The device lock and device 0's primary context, of this file's five-device simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(5, MEMORY)
}

/// A zeroed device buffer of `n` bytes.
fn dev(ctx: &Context, n: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, n).unwrap()
}

/// The simulator's live streams, contexts and allocations of `device`, as they are now (no
/// release flushed first: what a wait that returned has left). Compared with [`within`]: a
/// buffer of an earlier test whose stream that test still held when it waited (the forgotten
/// clone's) may come back later, which no wait for the teardowns covers.
fn live_now(device: &Device) -> [u64; 3] {
    let stats = sim::device_stats(device).unwrap();
    [
        stats.live_streams,
        stats.live_contexts,
        stats.live_allocations,
    ]
}

/// Waits for every teardown (bounded by the watchdog), then asserts that `device` has no more
/// streams, contexts or allocations alive than at `baseline` (`what` names the case).
fn nothing_left_after_teardowns(device: &Device, baseline: [u64; 3], what: &str) {
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    let now = live_now(device);
    assert!(
        within(now, baseline),
        "{what}: {now:?} left after the wait, from {baseline:?}"
    );
}

/// Every `settled()` waiter of one pool, in every shape: a `FuturesUnordered` set, hand-polled
/// tasks of which half are dropped and the rest polled again, and one whose pool handle is
/// dropped after its first poll (`orphan`).
struct Waiters {
    set: FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send>>>,
    tasks: Vec<tokio_test::task::Spawn<Pin<Box<dyn Future<Output = ()> + Send>>>>,
}

impl Waiters {
    /// Makes them from `settled` (a pool's `settled()`), polls each once, which must leave
    /// it pending (blocks are out), drops half of the hand-polled ones and polls the rest
    /// again.
    fn pending(settled: impl Fn() -> Pin<Box<dyn Future<Output = ()> + Send>>, what: &str) -> Self {
        let mut set: FuturesUnordered<_> = (0..WAITERS).map(|_| settled()).collect();
        let polled = polled_once(Pin::new(&mut set.next()));
        assert!(
            polled.is_pending(),
            "{what}: the set settled with blocks out"
        );
        let mut tasks: Vec<_> = (0..10)
            .map(|_| tokio_test::task::spawn(settled()))
            .collect();
        for task in &mut tasks {
            assert!(task.poll().is_pending(), "{what}: settled with blocks out");
        }
        tasks.truncate(5);
        for task in &mut tasks {
            assert!(task.poll().is_pending(), "{what}: polled again");
        }
        Waiters { set, tasks }
    }

    /// Awaits every one of them (bounded): each must resolve.
    async fn settle(mut self, what: &str) {
        let mut resolved = 0;
        while self.set.next().await.is_some() {
            resolved += 1;
        }
        assert_eq!(resolved, WAITERS, "{what}");
        // The thread that settled the pool may still be waking the waiters registered after
        // the set's, which found the pool settled when polled.
        for task in &mut self.tasks {
            until_released(what, || task.is_woken());
            assert!(task.poll().is_ready(), "{what}: woken but not settled");
        }
    }
}

/// Promise: `PinnedPool::settled()` and `DevicePool::settled()` (new in the thirty-third
/// session) wake every waiter once the blocks are back, whatever shape the waiting takes and
/// whatever happens to the pool meanwhile, and never resolve while a block is out (rules 2,
/// 6, 7). A pinned pool and a device pool of each backend each have four blocks out in
/// operations dropped in flight on the held device (so each block comes back on the thread
/// that completes its operation or on the reaper); each has 200 waiters in a
/// `FuturesUnordered` set and ten hand-polled tasks, half dropped after their first poll and
/// the rest polled twice; a second pinned pool and a second device pool are dropped after
/// their waiters' first poll; the pools are trimmed while they wait; every strategy.
///
/// Outcome: held. Nothing resolves while the device is held; once released every waiter
/// resolves, the pools report nothing allocated or awaiting, and the dropped pools' memory is
/// freed once their waiters are gone.
#[test]
fn settled_waiters_of_every_shape_wake_once_the_blocks_come_back() {
    let (_guard, ctx) = devices();
    let baseline = live_objects(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pinned = [PinnedPool::new(&ctx), PinnedPool::new(&ctx)];
        let device = [
            device_pool(&ctx, DevicePoolBackend::Caching, Some(1 << 20)),
            device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
            device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(1 << 20)),
        ];
        // Allocated before the hold: a runtime-pool block is a stream-ordered allocation.
        let pinned_blocks: Vec<Vec<_>> = pinned
            .iter()
            .map(|pool| {
                (0..4)
                    .map(|_| pool.try_alloc::<u8>(4096).unwrap().unwrap())
                    .collect()
            })
            .collect();
        let device_blocks: Vec<Vec<_>> = device
            .iter()
            .map(|pool| {
                (0..4)
                    .map(|_| run(pool.alloc::<u8>(&s, 4096)).unwrap())
                    .collect()
            })
            .collect();
        let held = sim::hold(&ctx.device()).unwrap();
        for blocks in pinned_blocks {
            for block in blocks {
                drop(s.copy_h2d(block, dev(&ctx, 4096)));
            }
        }
        for blocks in device_blocks {
            for block in blocks {
                drop(s.memset(block, 3));
            }
        }
        let [kept_pinned, dropped_pinned] = pinned;
        let [caching, runtime, dropped_device] = device;
        let mut waiters = Vec::new();
        for (pool, what) in [
            (&kept_pinned, "pinned"),
            (&dropped_pinned, "dropped pinned"),
        ] {
            let settled = || Box::pin(pool.settled()) as Pin<Box<dyn Future<Output = ()> + Send>>;
            waiters.push((Waiters::pending(settled, what), what));
        }
        for (pool, what) in [
            (&caching, "caching"),
            (&runtime, "runtime"),
            (&dropped_device, "dropped runtime"),
        ] {
            let settled = || Box::pin(pool.settled()) as Pin<Box<dyn Future<Output = ()> + Send>>;
            waiters.push((Waiters::pending(settled, what), what));
        }
        drop((dropped_pinned, dropped_device));
        assert_eq!(kept_pinned.trim(), 0, "{strategy:?}: nothing cached yet");
        caching.trim().unwrap();
        runtime.trim_to(0).unwrap();
        held.release().unwrap();
        run(async {
            for (waiters, what) in waiters {
                waiters.settle(what).await;
            }
        });
        let pinned = kept_pinned.stats();
        assert_eq!(
            (pinned.allocated, pinned.awaiting_blocks),
            (0, 0),
            "{strategy:?}"
        );
        for pool in [&caching, &runtime] {
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.allocated, stats.awaiting_blocks),
                (0, 0),
                "{strategy:?}"
            );
            assert_eq!(stats.cached, 4 * 4096, "{strategy:?}: every block back");
        }
        drop((kept_pinned, caching, runtime, s));
    }
    until_released("the pools' memory", || within(live_objects(&ctx), baseline));
}

/// Promise: a pool's `settled()` resolves once a lost device has failed the operations its
/// blocks were out in (rules 3 and 5: the loss ends them, never a hang), and the pool then
/// refuses by name rather than hangs. Device 2 (lost for the rest of the process): a pinned
/// pool's and both device pools' blocks out in operations dropped in flight on the held
/// device, a waiter of each polled once; the device lost.
///
/// Outcome: held. Every waiter resolves, nothing is allocated or awaiting; a new request of
/// each device pool fails typed.
#[test]
fn settled_resolves_once_a_lost_device_has_failed_the_blocks_operations() {
    let (_guard, _ctx) = devices();
    let device = Device::open(2).unwrap();
    let ctx = device.primary_context().clone();
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&st| stream(&ctx, st)).collect();
    let pinned = PinnedPool::new(&ctx);
    let pools = [
        device_pool(&ctx, DevicePoolBackend::Caching, None),
        device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
    ];
    let mut ops_blocks = Vec::new();
    for s in &streams {
        for pool in &pools {
            ops_blocks.push(run(pool.alloc::<u8>(s, 4096)).unwrap());
        }
    }
    let pinned_blocks: Vec<_> = (0..3)
        .map(|_| pinned.try_alloc::<u8>(4096).unwrap().unwrap())
        .collect();
    let held = sim::hold(&device).unwrap();
    for (i, block) in ops_blocks.into_iter().enumerate() {
        drop(streams[i % streams.len()].memset(block, 1));
    }
    for (s, block) in streams.iter().zip(pinned_blocks) {
        drop(s.copy_h2d(block, dev(&ctx, 4096)));
    }
    let mut waiting: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> =
        vec![Box::pin(pinned.settled())];
    waiting.extend(
        pools
            .iter()
            .map(|pool| Box::pin(pool.settled()) as Pin<Box<_>>),
    );
    for settled in &mut waiting {
        assert!(
            polled_once(Pin::new(settled)).is_pending(),
            "blocks are out"
        );
    }
    watchdog("losing device 2", || sim::lose(&device).unwrap());
    drop(held);
    run(futures::future::join_all(waiting));
    let stats = pinned.stats();
    assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0));
    for pool in &pools {
        let stats = pool.stats().cache;
        assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0));
        let refused = run(pool.alloc::<u8>(&streams[0], 1 << 20));
        let refused = refused.expect_err("a lost device serves no new block");
        assert!(
            refused.is_device_lost() || refused.acl_code().is_some(),
            "{refused}"
        );
    }
}

/// What a waker calling `wait_for_teardowns` saw: the thread it was woken on and the answer.
type Heard = (String, npu::Result<()>);

/// A waker that calls `wait_for_teardowns` (with an hour's timeout) the first time it is
/// woken, and tells which thread that was and what the call answered.
struct WaitsWhenWoken(Mutex<Option<mpsc::Sender<Heard>>>);

impl Wake for WaitsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(told) = self.0.lock().unwrap().take() else {
            return;
        };
        let answer = wait_for_teardowns(Duration::from_secs(3600));
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        let _ = told.send((thread, answer));
    }
}

/// Polls `settled` once with a [`WaitsWhenWoken`] waker; returns where its answer arrives.
fn waiting_in_the_waker(
    settled: &mut Pin<Box<dyn Future<Output = ()> + Send>>,
) -> mpsc::Receiver<Heard> {
    let (told, heard) = mpsc::channel();
    let waker = Waker::from(Arc::new(WaitsWhenWoken(Mutex::new(Some(told)))));
    let polled = settled.as_mut().poll(&mut TaskContext::from_waker(&waker));
    assert!(polled.is_pending(), "a block is out");
    heard
}

/// Checks that a [`WaitsWhenWoken`] waker was woken on one of npu-rs's threads and that its
/// `wait_for_teardowns` was refused there by name (argument `thread`), not waited.
fn refused_on_npu_rs_thread(heard: mpsc::Receiver<Heard>, what: &str) -> String {
    let (thread, answer) = heard
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or its wait hung"));
    assert!(thread.starts_with("npu-"), "{what}: woken on {thread:?}");
    match answer {
        Err(Error::InvalidArgument { api, argument, .. }) => {
            assert_eq!((api, argument), ("wait_for_teardowns", "thread"), "{what}");
        }
        other => panic!("{what}: on {thread}, {other:?}"),
    }
    thread
}

/// Promise: `wait_for_teardowns` is refused on every thread of npu-rs's that may run a
/// pool's `settled()` waker (rule 5: a thread that returns a block is one that completes
/// operations, the reaper or a pool's repair thread, and must not wait for teardowns, which
/// may include its own), never waited there. A pinned pool's and a device pool's blocks come
/// back after operations dropped in flight (on the completing thread or the reaper, every
/// strategy), and a device pool's block with an uncorrectable memory error comes back
/// through the repair thread (`npu-pool-repair`, which counts as a teardown itself); the
/// waiter's waker calls `wait_for_teardowns` with an hour's timeout.
///
/// Outcome: held. Each call is refused at once with `InvalidArgument` (`wait_for_teardowns`,
/// `thread`), on a thread of npu-rs's.
#[test]
fn wait_for_teardowns_in_a_settled_waker_is_refused_on_every_returning_thread() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pinned = PinnedPool::new(&ctx);
        let pool = device_pool(&ctx, DevicePoolBackend::Caching, None);
        let pinned_block = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
        let device_block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let mut pinned_settled: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(pinned.settled());
        let mut device_settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(pool.settled());
        let pinned_heard = waiting_in_the_waker(&mut pinned_settled);
        let device_heard = waiting_in_the_waker(&mut device_settled);
        drop(s.copy_h2d(pinned_block, dev(&ctx, 4096)));
        drop(s.memset(device_block, 5));
        held.release().unwrap();
        refused_on_npu_rs_thread(pinned_heard, &format!("{strategy:?}, pinned"));
        refused_on_npu_rs_thread(device_heard, &format!("{strategy:?}, device"));
        run(async { futures::future::join(pinned_settled, device_settled).await });
    }
    let s = stream(&ctx, STRATEGIES[0]);
    let pool = device_pool(&ctx, DevicePoolBackend::Caching, None);
    let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
    sim::inject_memory_error(&block, 0..16).unwrap();
    let mut settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(pool.settled());
    let heard = waiting_in_the_waker(&mut settled);
    let failed = run(s.memset(block, 0)).unwrap_err();
    assert!(failed.error.is_memory_error(), "{}", failed.error);
    drop(failed);
    let thread = refused_on_npu_rs_thread(heard, "the repair thread");
    assert_eq!(thread, "npu-pool-repair");
    run(settled);
    assert_eq!(
        pool.stats().cache.repaired + pool.stats().cache.quarantined,
        1
    );
}

/// Drops `stream`'s handles at once on `threads` threads, each of which first submits
/// memsets (dropped in flight on the held device) and records an event (dropped) on its
/// clone (refused `Aborted` if an abort is under way); the first also starts an abort of the
/// stream and drops it. Returns once every
/// thread has dropped its handle.
fn drop_clones_at_once_with_work_in_flight(stream: Stream, threads: usize) {
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (clone, barrier) = (stream.clone(), barrier.clone());
            std::thread::spawn(move || {
                let ctx = clone.context().clone();
                for value in 0..3 {
                    drop(clone.memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), value));
                }
                let event = Event::new(&ctx).unwrap();
                // An abort under way refuses it, typed.
                let recorded = event.record(&clone);
                assert!(
                    matches!(recorded, Ok(()) | Err(Error::Aborted { .. })),
                    "{recorded:?}"
                );
                if i == 0 {
                    drop(clone.abort());
                }
                drop((event, ctx));
                barrier.wait();
                drop(clone);
            })
        })
        .collect();
    drop(stream);
    for worker in workers {
        watchdog("a thread dropping its clone", || worker.join().unwrap());
    }
}

/// Promise: `wait_for_teardowns` returns only once every stream the program let go of has been
/// released, and its explicit context destroyed (the last session's count of user `Stream`
/// handles: the last one's drop starts a teardown count), however the last handles go. An
/// explicit context of device 1, a stream of each strategy cloned to four threads; each
/// thread submits memsets and an event record (dropped in flight on the held device), the
/// first starts an abort and drops it; every thread drops its clone at once (a barrier), the
/// test its handles and the context; the device is released and `wait_for_teardowns` called.
///
/// Outcome: held. It returns `Ok`, and at that moment (no release flushed after it) the
/// device's live streams, contexts and allocations are back at their baseline.
#[test]
fn wait_for_teardowns_after_clones_dropped_at_once_on_racing_threads_leaves_nothing_alive() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    wait_for_teardowns(HANG).unwrap();
    let baseline = live_now(&device);
    for round in 0..3 {
        let ctx = device.create_context().unwrap();
        let held = sim::hold(&device).unwrap();
        for strategy in STRATEGIES {
            drop_clones_at_once_with_work_in_flight(stream(&ctx, strategy), 4);
        }
        drop(ctx);
        held.release().unwrap();
        nothing_left_after_teardowns(&device, baseline, &format!("round {round}"));
    }
}

/// Promise: a forgotten `Stream` clone leaks its stream but keeps no wait for the teardowns
/// waiting past its bound (the count of user handles never reaches zero, so no teardown is
/// counted for good). A stream of each strategy with work in flight on the held device, one
/// clone `mem::forget`-ed, every other handle dropped; the device released.
///
/// Outcome: held. `wait_for_teardowns` returns `Ok` (the stream counts as alive, not as a
/// teardown), and the forgotten streams are the only ones left beyond the baseline.
#[test]
fn a_forgotten_stream_clone_leaks_but_keeps_no_wait_for_teardowns_waiting() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    let ctx = device.primary_context().clone();
    wait_for_teardowns(HANG).unwrap();
    let [streams, ..] = live_now(&device);
    let held = sim::hold(&device).unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        drop(s.memset(dev(&ctx, 64), 1));
        std::mem::forget(s.clone());
        drop(s);
    }
    held.release().unwrap();
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    assert_eq!(
        live_now(&device)[0],
        streams + 3,
        "the forgotten streams alone"
    );
}

/// Promise: `wait_for_teardowns` called where the docs allow it but a careless program would
/// still returns once the work of the streams dropped there is done: no completion depends on
/// the thread it blocks (rule 5: a `BlockingSync` wait the blocking pool cannot start goes to
/// the reactor). Directly in a task on a current-thread runtime with a paused clock, whose
/// only worker it blocks; and in `spawn_blocking` on a runtime of one blocking thread, which
/// it takes before the `BlockingSync` wait of the dropped work is queued there. Streams of
/// every strategy, each with a memset polled once (its wait queued) on the held device and
/// dropped; the device released before the wait.
///
/// Outcome: held. Both waits return `Ok`, with the streams destroyed.
#[test]
fn wait_for_teardowns_on_a_runtimes_only_worker_or_blocking_thread_returns() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    let ctx = device.primary_context().clone();
    wait_for_teardowns(HANG).unwrap();
    let baseline = live_now(&device);
    /// Submits a memset on a stream of each strategy, polls it once (a `BlockingSync` wait
    /// queued on the current runtime's blocking pool) and drops it with its stream.
    async fn dropped_in_flight(ctx: &Context) {
        for strategy in STRATEGIES {
            let s = stream(ctx, strategy);
            let mut op = Box::pin(s.memset(dev(ctx, 64), 4));
            assert!(polled_once(op.as_mut()).is_pending(), "{strategy:?}");
            drop((op, s));
        }
    }
    let held = sim::hold(&device).unwrap();
    paused_runtime().block_on(async {
        dropped_in_flight(&ctx).await;
        held.release().unwrap();
        wait_for_teardowns(HANG).unwrap();
    });
    assert!(within(live_now(&device), baseline), "on the only worker");
    let one_blocking_thread = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let held = sim::hold(&device).unwrap();
    one_blocking_thread.block_on(async {
        let (go, started) = (mpsc::channel::<()>(), mpsc::channel::<()>());
        let (go_tx, go_rx) = go;
        let (started_tx, started_rx) = started;
        let waiter = tokio::task::spawn_blocking(move || {
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            wait_for_teardowns(HANG)
        });
        started_rx.recv().unwrap();
        dropped_in_flight(&ctx).await;
        held.release().unwrap();
        go_tx.send(()).unwrap();
        waiter.await.unwrap().unwrap();
    });
    assert!(
        within(live_now(&device), baseline),
        "on the only blocking thread"
    );
}

/// The environment variable that makes the `child` test run a case: the fork tests run in a
/// process of their own, which forks (so that a leak checker following this process does not
/// follow the forked child, whose memory `_exit` never frees).
const CHILD_ENV: &str = "NPU_ATTACK35_CHILD";

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "settled" => settled_in_a_forked_child(),
        "queued alloc" => a_queued_request_polled_in_a_forked_child(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// Rule 8 ("a forked child is refused, never hung") for the pools' `settled()`: a pinned pool
/// and a device pool of each backend each have a block out in an operation dropped in flight
/// on the held device, and a `settled()` of each was polled before the fork; in the child
/// that one is polled again and a new one awaited (under `futures::executor::block_on`, no
/// Tokio there), then everything dropped. In the child no thread will ever complete the
/// parent's operations, so those blocks never come back there.
///
/// Outcome: **broke** before the fix: both waits of the child waited for ever (killed by its
/// alarm), where every other wait npu-rs offers for work made before the fork (an operation,
/// a completion, a reaper flush, a queued allocation) is refused or returns at once there.
/// `settled()` now resolves at once in a forked child, as a reaper flush does.
#[test]
fn settled_in_a_forked_child_resolves_instead_of_waiting_for_the_parents_work() {
    in_child_test("child", CHILD_ENV, "settled");
}

/// The child process's case of
/// [`settled_in_a_forked_child_resolves_instead_of_waiting_for_the_parents_work`].
fn settled_in_a_forked_child() {
    let (_guard, ctx) = devices();
    let s = stream(&ctx, STRATEGIES[0]);
    let pinned = PinnedPool::new(&ctx);
    let pools = [
        device_pool(&ctx, DevicePoolBackend::Caching, None),
        device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
    ];
    let pinned_block = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
    let device_blocks = pools
        .each_ref()
        .map(|pool| run(pool.alloc::<u8>(&s, 4096)).unwrap());
    let held = sim::hold(&ctx.device()).unwrap();
    drop(s.copy_h2d(pinned_block, dev(&ctx, 4096)));
    for block in device_blocks {
        drop(s.memset(block, 6));
    }
    let mut before: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> =
        vec![Box::pin(pinned.settled())];
    before.extend(
        pools
            .iter()
            .map(|pool| Box::pin(pool.settled()) as Pin<Box<_>>),
    );
    for settled in &mut before {
        assert!(
            polled_once(Pin::new(settled)).is_pending(),
            "blocks are out"
        );
    }
    let before = std::cell::Cell::new(Some(before));
    let (ok, status) = fork_and_check(|| {
        futures::executor::block_on(futures::future::join_all(before.take().unwrap()));
        futures::executor::block_on(pinned.settled());
        for pool in &pools {
            futures::executor::block_on(pool.settled());
        }
    });
    held.release().unwrap();
    run(futures::future::join_all(before.take().unwrap()));
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// Rule 8 for a pool request queued before the fork: a pinned pool and a device pool of each
/// backend, each of one 4 KiB block's capacity, the block out in an operation dropped in
/// flight on the held device, and an `alloc` of each queued behind it (polled once, pending);
/// in the child each queued request is polled again (under `futures::executor::block_on`),
/// then dropped. In the child no thread will ever complete the parent's operations, so the
/// block never comes back to serve it there.
///
/// Outcome: **broke** before the fix: each request of the child waited for ever (killed by its
/// alarm); a new `alloc` there was refused, a queued one polled there was not. It now ends
/// with `Error::Forked` naming the pool's `alloc` (a grant sent before the fork is still
/// handed over).
#[test]
fn a_pool_request_queued_before_a_fork_is_refused_in_the_child() {
    in_child_test("child", CHILD_ENV, "queued alloc");
}

/// The child process's case of [`a_pool_request_queued_before_a_fork_is_refused_in_the_child`].
fn a_queued_request_polled_in_a_forked_child() {
    let (_guard, ctx) = devices();
    let s = stream(&ctx, STRATEGIES[0]);
    let pinned = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
    let pools = [
        device_pool(&ctx, DevicePoolBackend::Caching, Some(4096)),
        device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(4096)),
    ];
    let pinned_block = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
    let device_blocks = pools
        .each_ref()
        .map(|pool| run(pool.alloc::<u8>(&s, 4096)).unwrap());
    let held = sim::hold(&ctx.device()).unwrap();
    drop(s.copy_h2d(pinned_block, dev(&ctx, 4096)));
    for block in device_blocks {
        drop(s.memset(block, 6));
    }
    let mut pinned_request = Box::pin(pinned.alloc::<u8>(4096));
    assert!(polled_once(pinned_request.as_mut()).is_pending(), "queued");
    let mut device_requests = pools
        .each_ref()
        .map(|pool| Box::pin(pool.alloc::<u8>(&s, 4096)));
    for request in &mut device_requests {
        assert!(polled_once(request.as_mut()).is_pending(), "queued");
    }
    assert_eq!(pinned.stats().waiters, 1);
    let requests = std::cell::Cell::new(Some((pinned_request, device_requests)));
    let (ok, status) = fork_and_check(|| {
        let (pinned_request, device_requests) = requests.take().unwrap();
        let refused = futures::executor::block_on(pinned_request).unwrap_err();
        assert_forked(&refused);
        assert!(
            refused.to_string().contains("PinnedPool::alloc"),
            "{refused}"
        );
        for request in device_requests {
            let refused = futures::executor::block_on(request).unwrap_err();
            assert_forked(&refused);
            assert!(
                refused.to_string().contains("DevicePool::alloc"),
                "{refused}"
            );
        }
    });
    held.release().unwrap();
    let (pinned_request, device_requests) = requests.take().unwrap();
    run(async {
        pinned_request.await.unwrap();
        for request in device_requests {
            request.await.unwrap();
        }
    });
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// What [`WaitsInItsCallback`] heard: each event's target and what `wait_for_teardowns`
/// called from its callback answered.
static HEARD_IN_CALLBACKS: Mutex<Vec<(String, npu::Result<()>)>> = Mutex::new(Vec::new());

/// The targets of the events from which [`WaitsInItsCallback`] calls `wait_for_teardowns`:
/// none but around the calls a test makes (a stream's release on the program's thread, which
/// a subscriber's wait would wait out, is not one of them), and only the reports made inside
/// the call attacked (not an operation's outcome, logged where it is awaited).
static WAIT_IN_CALLBACKS: Mutex<&[&str]> = Mutex::new(&[]);

/// The targets of the simulator's own reports of failed calls, made inside the call.
const SIMULATOR: &[&str] = &["ascendcl", "npu_sim"];

/// The target of the device pool's own events, among them its report of the frees it makes
/// under the drain lock.
const DEVICE_POOL: &[&str] = &["npu_stream::device_pool"];

/// A tracing layer whose event callbacks, for the targets armed, call `wait_for_teardowns`
/// with an hour's timeout and record the answer.
struct WaitsInItsCallback;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WaitsInItsCallback {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        let armed = *WAIT_IN_CALLBACKS.lock().unwrap();
        if !armed.iter().any(|armed| target.starts_with(armed)) {
            return;
        }
        let answer = wait_for_teardowns(Duration::from_secs(3600));
        HEARD_IN_CALLBACKS
            .lock()
            .unwrap()
            .push((target.to_owned(), answer));
    }
}

/// Runs `call` with [`WaitsInItsCallback`] armed for `targets` (under a watchdog: a wait that
/// is not refused where it must be would wait an hour); returns what its callbacks heard.
fn heard_in_callbacks(
    targets: &'static [&'static str],
    what: &str,
    call: impl FnOnce(),
) -> Vec<(String, npu::Result<()>)> {
    *WAIT_IN_CALLBACKS.lock().unwrap() = targets;
    watchdog(what, call);
    *WAIT_IN_CALLBACKS.lock().unwrap() = &[];
    std::mem::take(&mut *HEARD_IN_CALLBACKS.lock().unwrap())
}

/// Checks that every answer `heard` holds (at least one) is the refusal of
/// `wait_for_teardowns` by name (argument `thread`).
fn all_refused(heard: &[(String, npu::Result<()>)], what: &str) {
    assert!(!heard.is_empty(), "{what}: no event reached the subscriber");
    for (target, answer) in heard {
        match answer {
            Err(Error::InvalidArgument { api, argument, .. }) => {
                assert_eq!(
                    (*api, *argument),
                    ("wait_for_teardowns", "thread"),
                    "{what}"
                );
            }
            other => panic!("{what}: the event of {target} got {other:?}"),
        }
    }
}

/// Promise: `wait_for_teardowns` from a tracing subscriber's callback on the program's own
/// thread is refused while npu-rs holds one of its locks across the ACL call that logs (rule
/// 5: a teardown may need that lock, and the wait would wait for itself), never waited: the
/// simulator's report of a record and of a memset refused on a stream a `FailureMode::Stop`
/// fault stopped (under the event's recording lock and the stream's submission lock), and a
/// caching device pool's report of the frees of a trim (under its drain lock); every
/// strategy. Outside such a lock it is not refused: the simulator's report of an allocation
/// it refused (an injected failure) gets `Ok` at once, nothing being torn down.
///
/// Outcome: held. Each answer under a lock is `InvalidArgument` (`wait_for_teardowns`,
/// `thread`); the one outside is `Ok`.
#[test]
fn wait_for_teardowns_in_a_subscriber_under_npu_rs_locks_is_refused() {
    use tracing_subscriber::layer::SubscriberExt;
    let (_guard, ctx) = devices();
    see_every_callsite();
    let subscriber = tracing_subscriber::registry().with(WaitsInItsCallback);
    tracing::subscriber::with_default(subscriber, || {
        for strategy in STRATEGIES {
            let own = ctx.device().create_context().unwrap();
            let s = stream(&own, strategy);
            s.set_failure_mode(npu::FailureMode::Stop).unwrap();
            sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
            assert!(run(s.memset(dev(&own, 16), 1)).is_err(), "{strategy:?}");
            let (event, spare) = (Event::new(&own).unwrap(), dev(&own, 16));
            let heard = heard_in_callbacks(SIMULATOR, "a refused record", || {
                assert!(event.record(&s).is_err(), "{strategy:?}: stopped");
            });
            all_refused(&heard, &format!("{strategy:?}: a refused record"));
            let heard = heard_in_callbacks(SIMULATOR, "a refused memset", || {
                assert!(run(s.memset(spare, 1)).is_err(), "{strategy:?}: stopped");
            });
            all_refused(&heard, &format!("{strategy:?}: a refused memset"));
        }
        let s = stream(&ctx, STRATEGIES[0]);
        let pool = device_pool(&ctx, DevicePoolBackend::Caching, None);
        drop(run(pool.alloc::<u8>(&s, 4096)).unwrap());
        let heard = heard_in_callbacks(DEVICE_POOL, "a trim", || {
            assert_eq!(pool.trim().unwrap(), 4096)
        });
        all_refused(&heard, "the trim's frees");
        sim::fail_next_alloc(&ctx.device()).unwrap();
        let heard = heard_in_callbacks(SIMULATOR, "a refused allocation", || {
            assert!(DeviceBuffer::<u8>::new(&ctx, 64).is_err());
        });
        assert!(!heard.is_empty(), "the simulator reports the refusal");
        for (target, answer) in heard {
            assert!(
                answer.is_ok(),
                "outside npu-rs's locks, {target}: {answer:?}"
            );
        }
    });
}

/// Promise: every handle's drop returns and `wait_for_teardowns` then finds every stream the
/// program let go of released, when the last handles go on racing threads while the device is
/// lost under their work (rules 3 and 5; the last session's count of user handles). Device 3
/// (lost for the rest of the process), an explicit context, a stream of each strategy cloned
/// to three threads; each thread submits memsets and an event record and drops them in flight
/// on the held device, and the first starts an abort; the device is lost once all have
/// submitted; then each thread submits and awaits one more memset (a typed error: lost, or
/// refused) and drops its clone, the first at once.
///
/// Outcome: held. Every thread returns, every awaited memset fails typed, `wait_for_teardowns`
/// returns `Ok`, and the device's live streams and contexts are back at their baseline when it
/// does.
#[test]
fn clones_dropped_on_racing_threads_as_the_device_is_lost_leave_nothing_alive() {
    let (_guard, _ctx) = devices();
    let device = Device::open(3).unwrap();
    wait_for_teardowns(HANG).unwrap();
    let [streams, contexts, _] = live_now(&device);
    let ctx = device.create_context().unwrap();
    let held = sim::hold(&device).unwrap();
    let submitted = Arc::new(Barrier::new(3 * STRATEGIES.len() + 1));
    let lost = Arc::new(Barrier::new(3 * STRATEGIES.len() + 1));
    let mut workers = Vec::new();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for i in 0..3 {
            let (clone, submitted, lost) = (s.clone(), submitted.clone(), lost.clone());
            workers.push(std::thread::spawn(move || {
                let ctx = clone.context().clone();
                for value in 0..3 {
                    drop(clone.memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), value));
                }
                let event = Event::new(&ctx).unwrap();
                let recorded = event.record(&clone);
                assert!(
                    matches!(recorded, Ok(()) | Err(Error::Aborted { .. })),
                    "{recorded:?}"
                );
                if i == 0 {
                    drop(clone.abort());
                }
                submitted.wait();
                lost.wait();
                if i == 0 {
                    drop(clone);
                    return;
                }
                // Allocating on the lost device is refused too: either is a typed error.
                let last = DeviceBuffer::<u8>::new(&ctx, 64)
                    .map_err(|err| err.to_string())
                    .and_then(|buf| run(clone.memset(buf, 9)).map_err(|err| err.to_string()));
                assert!(last.is_err(), "{strategy:?}: ran on a lost device");
                drop((event, clone, ctx));
            }));
        }
    }
    drop(ctx);
    submitted.wait();
    watchdog("losing device 3", || sim::lose(&device).unwrap());
    lost.wait();
    drop(held);
    for worker in workers {
        watchdog("a thread dropping its clone", || worker.join().unwrap());
    }
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    let now = live_now(&device);
    assert!(
        now[0] <= streams && now[1] <= contexts,
        "{now:?} left alive after the wait, from {:?}",
        [streams, contexts]
    );
}

/// Promise: a device pool's `settled()` waits for room being allocated (a stream-ordered
/// allocation still queued on the device) and resolves once that allocation completes, also
/// when the request that asked for it was dropped meanwhile (rule 2: the block goes back to
/// the runtime once its allocation completes, and its room with it). A runtime-pool device
/// pool: an `alloc` and a `reserve` of two blocks each polled once while the device is held
/// (their allocations queued), then dropped; a `settled()` polled; every strategy.
///
/// Outcome: held. `settled()` is pending while the allocations are queued and resolves once
/// the device is released; nothing is then allocated or cached, and every block went back to
/// the runtime.
#[test]
fn settled_waits_for_room_whose_request_was_dropped_mid_allocation() {
    let (_guard, ctx) = devices();
    let baseline = live_allocations(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, None);
        let held = sim::hold(&ctx.device()).unwrap();
        let mut alloc = Box::pin(pool.alloc::<u8>(&s, 4096));
        let mut reserve = Box::pin(pool.reserve(&s, 2, 4096));
        assert!(polled_once(alloc.as_mut()).is_pending(), "{strategy:?}");
        assert!(polled_once(reserve.as_mut()).is_pending(), "{strategy:?}");
        drop((alloc, reserve));
        let mut settled = Box::pin(pool.settled());
        assert!(
            polled_once(settled.as_mut()).is_pending(),
            "{strategy:?}: settled while room is being allocated"
        );
        held.release().unwrap();
        run(settled);
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.allocated, stats.awaiting_blocks, stats.cached),
            (0, 0, 0),
            "{strategy:?}"
        );
        drop((pool, s));
    }
    until_released("the abandoned allocations' blocks", || {
        live_allocations(&ctx) <= baseline
    });
}

/// Promise: a device pool's `settled()` resolves once blocks whose operations failed with a
/// memory error are settled, not handed out again: quarantined at once (an HBM multi-bit ECC
/// error, which no repair reaches) or examined on the repair thread first (an uncorrectable
/// error the runtime lists), and never counts them as out for good. Both backends, every
/// strategy: two blocks out in memsets dropped in flight on the held device, one failing with
/// each error, a `settled()` polled; the device released.
///
/// Outcome: held. `settled()` resolves; nothing is allocated or awaiting; the ECC block is
/// quarantined and the other repaired (or quarantined), so two blocks are accounted for.
#[test]
fn settled_resolves_past_blocks_quarantined_or_repaired_after_dropped_operations() {
    let (_guard, ctx) = devices();
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let s = stream(&ctx, strategy);
            let pool = device_pool(&ctx, backend, None);
            let ecc = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            let listed = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            sim::inject_memory_error(&listed, 0..16).unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            sim::fail_task(&s, 1, npu::AclCode::HBM_MULTI_BIT_ECC_ERROR).unwrap();
            drop(s.memset(ecc, 1));
            drop(s.memset(listed, 2));
            let mut settled = Box::pin(pool.settled());
            assert!(polled_once(settled.as_mut()).is_pending(), "{what}");
            held.release().unwrap();
            run(settled);
            let stats = pool.stats().cache;
            assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0), "{what}");
            assert!(stats.quarantined >= 1, "{what}: the ECC block");
            assert_eq!(stats.quarantined + stats.repaired, 2, "{what}");
        }
    }
}

/// Promise: no wake-up of a `settled()` waiter is lost while the pool churns (rule 7): four
/// threads, one per strategy and one more, each take blocks of a bounded pinned pool and a
/// bounded caching device pool 200 times, hand them to copies and memsets awaited or dropped
/// in flight (chosen by a seeded generator), while a fifth thread keeps polling new
/// `settled()` waiters once each (registering them while blocks are out) and keeps the first
/// 200 left pending; once every worker is done, all of them must resolve.
///
/// Outcome: held. Every waiter resolves; the pools end with nothing allocated or awaiting.
#[test]
fn settled_waiters_registered_while_the_pool_churns_all_resolve() {
    let (_guard, ctx) = devices();
    let pinned = Arc::new(
        PinnedPool::builder(&ctx)
            .capacity(4 * 4096)
            .build()
            .unwrap(),
    );
    let device = Arc::new(device_pool(
        &ctx,
        DevicePoolBackend::Caching,
        Some(4 * 4096),
    ));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiters = {
        let (pinned, device, done) = (pinned.clone(), device.clone(), done.clone());
        std::thread::spawn(move || {
            let mut waiting: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                for mut settled in [
                    Box::pin(pinned.settled()) as Pin<Box<dyn Future<Output = ()> + Send>>,
                    Box::pin(device.settled()),
                ] {
                    if polled_once(Pin::new(&mut settled)).is_pending() && waiting.len() < WAITERS {
                        waiting.push(settled);
                    }
                }
                std::thread::yield_now();
            }
            waiting
        })
    };
    let workers: Vec<_> = [STRATEGIES.as_slice(), &STRATEGIES[..1]]
        .concat()
        .into_iter()
        .enumerate()
        .map(|(i, strategy)| {
            let (pinned, device, ctx) = (pinned.clone(), device.clone(), ctx.clone());
            std::thread::spawn(move || {
                let s = stream(&ctx, strategy);
                let mut rng = Rng(0x35 + i as u64);
                for _ in 0..200 {
                    let host = run(pinned.alloc::<u8>(4096)).unwrap();
                    let block = run(device.alloc::<u8>(&s, 4096)).unwrap();
                    let copy = s.copy_h2d(host, block);
                    match rng.below(3) {
                        0 => drop(copy),
                        1 => drop(run(copy).unwrap()),
                        _ => {
                            let (host, block) = run(copy).unwrap();
                            drop(host);
                            drop(s.memset(block, 1));
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        watchdog("a churning worker", || worker.join().unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let waiting = watchdog("the waiters' thread", || waiters.join().unwrap());
    assert!(
        !waiting.is_empty(),
        "no waiter registered while blocks were out"
    );
    run(futures::future::join_all(waiting));
    let stats = pinned.stats();
    assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0));
    let stats = device.stats().cache;
    assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0));
}

/// Promise: a pool whose last owner is a block that comes back on npu-rs's own thread (the
/// program dropped the pool, its stream and its context with the block's operation in flight)
/// is torn down there without waiting (rule 5), and `wait_for_teardowns` returns only once
/// that is done: its memory given back, its runtime pool destroyed, the context destroyed.
/// An explicit context of device 1 holding a pinned pool and a device pool of each backend,
/// each with a block out in an operation dropped in flight on the held device; every handle
/// dropped; the device released; every strategy.
///
/// Outcome: held. `wait_for_teardowns` returns `Ok`, and at that moment (no release flushed)
/// the device's live allocations, streams and contexts and the live pinned allocations are
/// back at their baseline.
#[test]
fn pools_whose_last_owner_comes_back_on_npu_rs_threads_are_torn_down_before_the_wait_returns() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    wait_for_teardowns(HANG).unwrap();
    let baseline = live_now(&device);
    let pinned_baseline = sim::host_stats().unwrap().pinned_allocations;
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        let pinned = PinnedPool::new(&ctx);
        let pools = [
            device_pool(&ctx, DevicePoolBackend::Caching, None),
            device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
        ];
        let host = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
        let blocks = pools
            .each_ref()
            .map(|pool| run(pool.alloc::<u8>(&s, 4096)).unwrap());
        let held = sim::hold(&device).unwrap();
        drop(s.copy_h2d(host, dev(&ctx, 4096)));
        for block in blocks {
            drop(s.memset(block, 5));
        }
        drop((pinned, pools, s, ctx));
        held.release().unwrap();
        nothing_left_after_teardowns(&device, baseline, &format!("{strategy:?}"));
        let pinned_now = sim::host_stats().unwrap().pinned_allocations;
        assert!(
            pinned_now <= pinned_baseline,
            "{strategy:?}: the pinned block"
        );
    }
}

/// Promise: `wait_for_teardowns` waits for every stream the program let go of, however many:
/// three hundred streams of an explicit context of device 1 (a hundred per strategy), each
/// with a memset and an event record dropped in flight on the held device, every handle
/// dropped (the context first), the device released.
///
/// Outcome: held. It returns `Ok` with every stream, allocation and the context gone.
#[test]
fn wait_for_teardowns_after_hundreds_of_streams_dropped_in_flight_leaves_nothing_alive() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    wait_for_teardowns(HANG).unwrap();
    let baseline = live_now(&device);
    let ctx = device.create_context().unwrap();
    let held = sim::hold(&device).unwrap();
    let streams: Vec<Stream> = (0..300).map(|i| stream(&ctx, STRATEGIES[i % 3])).collect();
    let event = Event::new(&ctx).unwrap();
    for s in &streams {
        drop(s.memset(dev(&ctx, 64), 3));
        event.record(s).unwrap();
    }
    drop((ctx, event));
    drop(streams);
    held.release().unwrap();
    nothing_left_after_teardowns(&device, baseline, "streams recording one event, dropped");
}

/// Promise: blocks queued for examination after memory errors are settled whatever becomes of
/// the device meanwhile (rules 3 and 5: the repair thread's calls fail typed on a lost device,
/// and the block is then quarantined, never cached unexamined nor left out for good). Device
/// 4 (lost for the rest of the process): eight blocks of each device-pool backend given
/// uncorrectable memory errors, their memsets failing one after another while another thread
/// loses the device; a `settled()` of each pool awaited.
///
/// Outcome: held. Both resolve; nothing is allocated or awaiting; every block is quarantined
/// or back in the cache (repaired, or failed by the loss instead of its memory error); a new
/// request fails typed.
#[test]
fn blocks_queued_for_repair_as_the_device_is_lost_are_all_settled() {
    let (_guard, _ctx) = devices();
    let device = Device::open(4).unwrap();
    let ctx = device.primary_context().clone();
    let s = stream(&ctx, STRATEGIES[0]);
    let pools = [
        device_pool(&ctx, DevicePoolBackend::Caching, None),
        device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
    ];
    let blocks: Vec<_> = pools
        .iter()
        .flat_map(|pool| (0..8).map(|_| run(pool.alloc::<u8>(&s, 4096)).unwrap()))
        .collect();
    for block in &blocks {
        sim::inject_memory_error(block, 0..16).unwrap();
    }
    let losing = {
        let device = device.clone();
        std::thread::spawn(move || sim::lose(&device).unwrap())
    };
    for block in blocks {
        // Failed by the memory error, or by the loss: either hands the block back.
        drop(run(s.memset(block, 1)).unwrap_err());
    }
    watchdog("losing device 4", || losing.join().unwrap());
    run(futures::future::join_all(
        pools.iter().map(|pool| pool.settled()),
    ));
    for pool in &pools {
        let stats = pool.stats().cache;
        assert_eq!((stats.allocated, stats.awaiting_blocks), (0, 0));
        // A repaired block is cached again, as is one whose memset the loss failed.
        assert_eq!(
            stats.quarantined + stats.cached as u64 / 4096,
            8,
            "{stats:?}"
        );
        assert!(run(pool.alloc::<u8>(&s, 1 << 20)).is_err(), "lost");
    }
}

/// Promise: the marks that make `wait_for_teardowns` refuse npu-rs's own steps do not outlive
/// them: a Tokio blocking thread that has run `BlockingSync` waits (a step that completes
/// operations, where the wait is refused) and kept the paused clock still for them is the
/// program's again afterwards, and `wait_for_teardowns` in a `spawn_blocking` task there
/// waits as on any thread of the program's. A current-thread runtime with a paused clock and
/// one blocking thread: memsets awaited on a `BlockingSync` stream (their waits, and the clock's
/// keepers, on that thread), then `wait_for_teardowns` in `spawn_blocking`.
///
/// Outcome: held. `Ok` (not refused).
#[test]
fn a_blocking_thread_that_ran_npu_rs_waits_is_the_programs_again() {
    let (_guard, ctx) = devices();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let s = stream(&ctx, npu::Strategy::BlockingSync);
        for value in 0..4 {
            let buffer = s.memset(dev(&ctx, 64), value).await.unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [value; 64]);
        }
        drop(s);
        let waited = tokio::task::spawn_blocking(|| wait_for_teardowns(HANG));
        waited.await.unwrap().unwrap();
    });
}

/// Promise: pool blocks handed to copies whose submission fails come back intact in the
/// error, and go back to their pools (rules 2 and 3: nothing the device never ran keeps them
/// out). A pinned pool's and both device-pool backends' blocks of device 0, filled with a
/// pattern, handed to `copy_h2d` / `copy_d2h` on a stream of another context of the device
/// that a `FailureMode::Stop` fault stopped (refused by the runtime) and on a stream of
/// device 1 (refused by npu-rs: the memory is another device's); every strategy.
///
/// Outcome: held. Each error hands both blocks back with their bytes; dropped, they are back
/// in their pools, which settle.
#[test]
fn pool_blocks_handed_to_copies_whose_submission_fails_come_back_intact() {
    let (_guard, d0) = devices();
    let other = stream(
        &Device::open(1).unwrap().primary_context().clone(),
        STRATEGIES[0],
    );
    for strategy in STRATEGIES {
        let own = d0.device().create_context().unwrap();
        let stopped = stream(&own, strategy);
        stopped.set_failure_mode(npu::FailureMode::Stop).unwrap();
        sim::fail_task(&stopped, 1, npu::AclCode(507015)).unwrap();
        assert!(
            run(stopped.memset(dev(&own, 16), 1)).is_err(),
            "{strategy:?}"
        );
        // The stop is the context's: the pools and the stream that works are the primary's.
        let live = stream(&d0, strategy);
        let pinned = PinnedPool::new(&d0);
        for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
            let pool = device_pool(&d0, backend, None);
            let what = format!("{strategy:?}, {backend:?}");
            for s in [&stopped, &other] {
                let mut host = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
                host.fill(7);
                let block = run(live.memset(run(pool.alloc::<u8>(&live, 4096)).unwrap(), 9));
                let block = block.unwrap();
                let failed = run(s.copy_h2d(host, block)).unwrap_err();
                let (host, block) = failed.value.expect("both handed back");
                assert!(host.iter().all(|&b| b == 7), "{what}");
                let failed = run(s.copy_d2h(block, host)).unwrap_err();
                let (block, host) = failed.value.expect("both handed back");
                assert!(host.iter().all(|&b| b == 7), "{what}");
                let (block, back) = run(live.copy_d2h(block, host)).unwrap();
                assert!(back.iter().all(|&b| b == 9), "{what}: the block's bytes");
                drop((block, back));
            }
            run(async { futures::future::join(pool.settled(), pinned.settled()).await });
            assert_eq!(pool.stats().cache.cached, 4096, "{what}: back in the pool");
        }
    }
}

/// Promise: a Tokio runtime shut down with work in flight drops its tasks safely (rule 2) and
/// without waiting for the device (rule 5), and the streams those tasks held are then counted
/// until released: a multi-thread runtime whose twenty tasks each await a memset on a stream
/// of a `StreamPool` (four streams per strategy) of an explicit context of device 1, all
/// submitted on the held device; the runtime shut down (its tasks dropped), the pool and the
/// context dropped, the device released.
///
/// Outcome: held. The shutdown returns while the device is still held; `wait_for_teardowns`
/// then returns `Ok` with every stream, allocation and the context gone.
#[test]
fn a_runtime_shut_down_under_stream_pool_tasks_leaves_nothing_alive_after_the_wait() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    wait_for_teardowns(HANG).unwrap();
    let baseline = live_now(&device);
    let ctx = device.create_context().unwrap();
    let pools: Vec<npu::prelude::StreamPool> = STRATEGIES
        .iter()
        .map(|&strategy| {
            let builder = Stream::builder(&ctx).strategy(strategy);
            npu::prelude::StreamPool::with_builder(builder, 4).unwrap()
        })
        .collect();
    let held = sim::hold(&device).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (submitted, heard) = mpsc::channel();
    for i in 0..20 {
        let s = pools[i % pools.len()].next();
        let (ctx, submitted) = (ctx.clone(), submitted.clone());
        runtime.spawn(async move {
            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            submitted.send(()).unwrap();
            op.await
        });
    }
    for _ in 0..20 {
        heard.recv_timeout(HANG).unwrap();
    }
    watchdog("the runtime's shutdown", || runtime.shutdown_timeout(HANG));
    drop((pools, ctx));
    held.release().unwrap();
    nothing_left_after_teardowns(&device, baseline, "after the runtime's shutdown");
}

/// Promise: no drop waits for the device (rule 5), also the last handles of a device and its
/// primary context while another context of the device has work queued on the held device.
/// Device 1: an explicit context with a memset in flight on each strategy's stream (dropped),
/// every handle of the device and its primary context dropped on this thread while held; the
/// device released only after they returned.
///
/// Outcome: held. The drops return while the device is held; the memsets complete once it is
/// released; `wait_for_teardowns` then returns `Ok`.
#[test]
fn the_last_device_handles_dropped_while_another_context_has_held_work_return() {
    let (_guard, _ctx) = devices();
    let device = Device::open(1).unwrap();
    let explicit = device.create_context().unwrap();
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&st| stream(&explicit, st)).collect();
    let held = sim::hold(&device).unwrap();
    let done: Vec<_> = streams
        .iter()
        .map(|s| s.memset(dev(&explicit, 64), 2).completion().clone())
        .collect();
    let primary = device.primary_context().clone();
    watchdog("dropping the device's last handles", || {
        drop((device, primary))
    });
    assert!(done.iter().all(|d| !d.is_complete()), "held");
    held.release().unwrap();
    all_completed(&done);
    drop((streams, explicit));
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
}

/// What a waker building a runtime saw: the thread it was woken on and the build's answer.
type Built = (String, npu::Result<npu::Runtime>);

/// The build a [`BuildsWhenWoken`] waker makes.
type Build = Box<dyn FnOnce() -> npu::Result<npu::Runtime> + Send>;

/// A waker that, the first time it is woken, builds a runtime with `build` and tells which
/// thread that was and what the build answered.
struct BuildsWhenWoken {
    build: Mutex<Option<Build>>,
    told: Mutex<Option<mpsc::Sender<Built>>>,
}

impl Wake for BuildsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(build) = self.build.lock().unwrap().take() else {
            return;
        };
        let built = build();
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        if let Some(told) = self.told.lock().unwrap().take() {
            let _ = told.send((thread, built));
        }
    }
}

/// Promise: a runtime build asking for another `acl_config` decides at once on npu-rs's own
/// threads, never waits there for the library's teardowns (rule 5; the build waits up to 10 s
/// for them elsewhere). A runtime of npu-sim's cdylib lives, and a stream of it dropped with
/// a memset in flight on its held device counts as a teardown of that library; a pinned
/// pool's `settled()` waker builds a runtime of the cdylib with another configuration file,
/// woken on the thread that returns the pool's block after an in-process copy completes
/// (every strategy).
///
/// Outcome: held. Each build is refused at once, naming `acl_config` (the library's runtime
/// lives), on a thread of npu-rs's, not `Error::TeardownsRunning` after waiting for the held
/// stream.
#[test]
fn a_build_with_another_config_in_a_settled_waker_decides_at_once() {
    let (_guard, ctx) = devices();
    let own = OwnRuntime::new("attack35-build");
    let runtime = own.build();
    let controls = CdylibControls::of_the_loaded_library();
    let theirs = runtime.device(0).unwrap().primary_context().clone();
    controls.hold(0);
    let counted = stream(&theirs, STRATEGIES[0]);
    drop(counted.memset(dev(&theirs, 64), 1));
    drop(counted);
    let running = wait_for_teardowns(Duration::ZERO);
    assert!(
        matches!(running, Err(Error::TeardownsRunning { .. })),
        "the held stream counts: {running:?}"
    );
    let config = std::env::temp_dir().join(format!("npu-attack35-{}.json", std::process::id()));
    std::fs::write(&config, "{}").unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pool = PinnedPool::new(&ctx);
        let block = pool.try_alloc::<u8>(4096).unwrap().unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let (told, heard) = mpsc::channel();
        let builder = own.builder().acl_config(&config);
        let waker = Waker::from(Arc::new(BuildsWhenWoken {
            build: Mutex::new(Some(Box::new(move || builder.build()))),
            told: Mutex::new(Some(told)),
        }));
        let mut settled = Box::pin(pool.settled());
        let polled = settled.as_mut().poll(&mut TaskContext::from_waker(&waker));
        assert!(polled.is_pending(), "{strategy:?}: a block is out");
        drop(s.copy_h2d(block, dev(&ctx, 4096)));
        held.release().unwrap();
        let (thread, built) = heard.recv_timeout(HANG).unwrap();
        assert!(
            thread.starts_with("npu-"),
            "{strategy:?}: woken on {thread:?}"
        );
        match built {
            Err(Error::InvalidArgument { api, argument, .. }) => {
                assert_eq!((api, argument), ("RuntimeBuilder::build", "acl_config"));
            }
            other => panic!("{strategy:?}: on {thread}, {:?}", other.map(drop)),
        }
        run(settled);
    }
    controls.release(0);
    let _ = std::fs::remove_file(&config);
    drop((theirs, runtime));
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
}
