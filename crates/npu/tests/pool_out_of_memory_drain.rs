//! The runtime-pool `DevicePool`'s out-of-memory drain: a request the device has no memory
//! for frees the pool's cached blocks on the pool's own release stream and awaits a
//! synchronisation of that stream, an event the reactor watches, before it tries again
//! (docs/architecture.md, Memory). Attacked through the public API: no thread of its own, the
//! request dropped at each moment of a drain, many requests out of memory at once, a device
//! fault that stops the release stream, a paused clock and a Tokio runtime dropped mid-drain.
//!
//! The simulator of this process has devices of 64 MiB (installed by the first test to take
//! the lock), so that a pool can fill a device. Every test takes the device lock; every wait
//! is bounded (`run`, `until`, `until_released`, `watchdog`), so a hang fails its test.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use npu::error::AclCode;
use npu::memory::DevicePool;
use npu::prelude::*;
use npu::sim;
use npu::stream::FailureMode;

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// A request the filled device cannot serve before the pool's cache is freed, two of which
/// fit once it is.
const BIG: usize = 24 << 20;

/// [`exclusive`], with the simulator configured for this file first.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(3, DEVICE_MEMORY)
}

/// How many threads of this process are named `name`.
fn threads_named(name: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// Polls the request once (it submits its first allocation, fails out of memory and frees
/// the cache) and checks that it now waits, the cache freed.
fn draining<F: Future>(pool: &DevicePool, request: std::pin::Pin<&mut F>, what: &str) {
    assert!(polled_once(request).is_pending(), "{what}: the drain waits");
    assert_eq!(pool.stats().cache.cached, 0, "{what}: the cache was freed");
}

/// The drain is an event the reactor watches, not a thread: while the device holds the
/// release stream's frees, no thread named `npu-pool-drain` (the thread each drain spawned
/// before) exists, and the reactor has one more operation registered. Once the device runs,
/// the request is served.
#[test]
fn a_drain_starts_no_thread_and_is_watched_by_the_reactor() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&ctx.device()).unwrap();
        let before = npu::stream::reactor_stats().registered;
        let block = {
            let mut request = std::pin::pin!(pool.alloc::<u8>(&s, BIG));
            draining(&pool, request.as_mut(), &what);
            assert_eq!(threads_named("npu-pool-drain"), 0, "{what}: a drain thread");
            assert!(
                npu::stream::reactor_stats().registered > before,
                "{what}: the reactor watches the drain"
            );
            hold.release().unwrap();
            run(request).unwrap_or_else(|e| panic!("{what}: {e}"))
        };
        drop((block, pool, s));
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// "Cancel-safe": an `alloc` future dropped at each moment of its drain loses nothing and
/// hangs nothing, and the drain still completes for a request waiting on it:
/// - while the release stream's frees are held (a second request, out of memory too, waits
///   on the drain and must be served once the device runs);
/// - once the drain has completed and before the request is polled again (its retry never
///   submitted);
/// - while its retry's allocation is queued on a held device (the block it gets goes back).
///
/// Each time the pool's counters add up to what is held, and everything goes back.
#[test]
fn an_alloc_dropped_at_each_moment_of_its_drain_loses_nothing() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        for moment in ["held", "drained", "retrying"] {
            let what = format!("{strategy:?}, dropped {moment}");
            let (s, t) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let pool = pool_holding_the_device(&ctx, &s);
            let hold = sim::hold(&ctx.device()).unwrap();
            let mut first = Box::pin(pool.alloc::<u8>(&s, BIG));
            draining(&pool, first.as_mut(), &what);
            let mut second = Box::pin(pool.alloc::<u8>(&t, BIG));
            assert!(
                polled_once(second.as_mut()).is_pending(),
                "{what}: the second waits for the first's drain"
            );
            if moment == "held" {
                drop(first);
                hold.release().unwrap();
                let served = run(second).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(pool.stats().cache.allocated, BIG, "{what}");
                drop(served);
            } else {
                hold.release().unwrap();
                // Served once the first's drain completed: it waited for that drain.
                let served = run(second).unwrap_or_else(|e| panic!("{what}: {e}"));
                let retry_held = (moment == "retrying").then(|| {
                    let hold = sim::hold(&ctx.device()).unwrap();
                    assert!(
                        polled_once(first.as_mut()).is_pending(),
                        "{what}: the retry is queued"
                    );
                    hold
                });
                drop(first);
                if let Some(hold) = retry_held {
                    hold.release().unwrap();
                }
                until_released(&what, || pool.stats().cache.allocated == BIG);
                drop(served);
            }
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.allocated, stats.waiters),
                (0, 0),
                "{what}: {stats:?}"
            );
            // The memory came back to the pool: a request of the whole size is served again.
            let again = run(pool.alloc::<u8>(&s, BIG)).unwrap_or_else(|e| panic!("{what}: {e}"));
            drop((again, pool, s, t));
            until_released(&format!("{what}: everything"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}

/// Two, then eight requests out of memory at once, each on a stream of its own, from the
/// threads of a multi-threaded runtime and from one task under a paused clock (which must
/// stand still): the first to find the cache frees it and drains; every other one finds
/// nothing to free and must wait for that drain and retry, not fail. The device is held
/// while they start, so they fail their first attempts; there is room for all of them once
/// the frees run.
#[test]
fn many_requests_out_of_memory_at_once_are_all_served() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for (count, paused) in [(2, false), (8, false), (2, true), (8, true)] {
        let what = format!("{count} requests, paused {paused}");
        // 5 MiB each: a class the cache does not hold, so each one is a miss.
        const EACH: usize = 5 << 20;
        let streams: Vec<_> = (0..count)
            .map(|i| stream(&ctx, STRATEGIES[i % STRATEGIES.len()]))
            .collect();
        let pool = pool_holding_the_device(&ctx, &streams[0]);
        let hold = sim::hold(&ctx.device()).unwrap();
        let started = std::sync::Arc::new(AtomicUsize::new(0));
        let requests = streams.iter().map(|s| {
            let (pool, s, started) = (pool.clone(), s.clone(), started.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                pool.alloc::<u8>(&s, EACH).await
            }
        });
        let served: Vec<_> = if paused {
            paused_runtime().block_on(async {
                let start = tokio::time::Instant::now();
                let mut all = std::pin::pin!(futures::future::join_all(requests));
                // Every one has failed out of memory and waits before the device runs.
                assert!(polled_once(all.as_mut()).is_pending(), "{what}");
                hold.release().unwrap();
                let hour = std::time::Duration::from_secs(3600);
                let served = tokio::time::timeout(hour, all)
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the hour passed"));
                assert_eq!(start.elapsed(), std::time::Duration::ZERO, "{what}");
                served
            })
        } else {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let tasks: Vec<_> = requests.map(|r| runtime.spawn(r)).collect();
            // Each request fails out of memory in its first poll while the device is held; the
            // ones still on their way when it runs may be served at once, which is as good.
            until("every request started", || {
                started.load(Ordering::SeqCst) == count && pool.stats().cache.cached == 0
            });
            hold.release().unwrap();
            run(futures::future::join_all(tasks))
                .into_iter()
                .map(Result::unwrap)
                .collect()
        };
        let blocks: Vec<_> = served
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{what}: a request failed: {e}")))
            .collect();
        assert_eq!(pool.stats().cache.allocated, count * EACH, "{what}");
        drop((blocks, pool, streams));
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// "Never a hang": a device fault that stops the context of the pool (a memset failing on a
/// stream in `FailureMode::Stop`, which stops every stream of its context, the pool's release
/// stream among them) while a request's drain waits for the held device. The request ends,
/// served or failed (whichever of the release stream and the failing memset the device ran
/// first), and dropping everything returns and gives everything back. A fresh context each
/// round, on a device of its own, since the stop lasts for the context's life.
#[test]
fn a_fault_stopping_the_release_stream_ends_the_drain() {
    let (_guard, _ctx) = devices();
    let device = Device::open(2).unwrap();
    let baseline = live_memory(device.primary_context());
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let ctx = device.create_context().unwrap();
        let (s, faulty) = (stream(&ctx, strategy), stream(&ctx, strategy));
        faulty.set_failure_mode(FailureMode::Stop).unwrap();
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&device).unwrap();
        let request = {
            let (pool, s) = (pool.clone(), s.clone());
            std::thread::spawn(move || run(pool.alloc::<u8>(&s, BIG)).map(drop))
        };
        until("the request freed the cache", || {
            pool.stats().cache.cached == 0
        });
        sim::fail_task(&faulty, 1, AclCode::AICORE_EXCEPTION).unwrap();
        let failing = faulty.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0);
        hold.release().unwrap();
        let err = run(failing).unwrap_err();
        assert_eq!(
            err.error.acl_code(),
            Some(AclCode::AICORE_EXCEPTION),
            "{what}"
        );
        let outcome = watchdog("the request", || request.join().unwrap());
        if let Err(err) = &outcome {
            assert!(
                err.is_out_of_memory() || err.acl_code() == Some(AclCode::AICORE_EXCEPTION),
                "{what}: {err}"
            );
        }
        watchdog("dropping everything", || drop((err, pool, s, faulty, ctx)));
        // The next round fills the device again: the pool is destroyed on a thread of its own.
        until_released(&format!("{what}: everything"), || {
            within(live_memory(device.primary_context()), baseline)
        });
    }
}

/// A Tokio runtime dropped while a task of it waits for a drain (the device held, its clock
/// paused): the drop returns at once, the dropped request loses nothing, and once the device
/// runs the memory serves another request. Every strategy.
#[test]
fn a_runtime_dropped_while_its_request_drains_returns_and_loses_nothing() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&ctx.device()).unwrap();
        let runtime = paused_runtime();
        let task = {
            let (pool, s) = (pool.clone(), s.clone());
            runtime.spawn(async move { pool.alloc::<u8>(&s, BIG).await.map(drop) })
        };
        runtime.block_on(async {
            while pool.stats().cache.cached != 0 {
                tokio::task::yield_now().await;
            }
        });
        assert!(!task.is_finished(), "{what}: the request waits");
        watchdog("dropping the runtime", || drop(runtime));
        assert_eq!(pool.stats().cache.allocated, 0, "{what}");
        hold.release().unwrap();
        let served = run(pool.alloc::<u8>(&other, BIG)).unwrap_or_else(|e| panic!("{what}: {e}"));
        drop((served, pool, s, other));
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// The variable that makes a run of this binary's `child` test a forking case.
const CHILD_ENV: &str = "NPU_POOL_DRAIN_CHILD";

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "fork" => forked_while_a_request_drains(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// A process forked while a request waits for its drain (the device held): in the child,
/// where nothing will ever run the release stream, awaiting the request ends with
/// `Error::Forked` rather than a hang; in the parent it is served once the device runs.
/// Every strategy of the caller's stream, in a process of its own (`in_child_test`), which
/// forks.
#[test]
fn a_fork_while_a_request_drains_ends_it_in_the_child_and_not_in_the_parent() {
    in_child_test("child", CHILD_ENV, "fork");
}

fn forked_while_a_request_drains() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&ctx.device()).unwrap();
        let mut request = Box::pin(pool.alloc::<u8>(&s, BIG));
        draining(&pool, request.as_mut(), &what);
        let (ok, status) = fork_and_check(|| {
            let err = run(request.as_mut()).unwrap_err();
            assert_forked(&err);
        });
        assert!(
            ok,
            "{what}: the child's request failed or hung ({status:#x})"
        );
        hold.release().unwrap();
        let block = run(request).unwrap_or_else(|e| panic!("{what}: {e}"));
        // A dropped pool gives its memory back on a thread of its own: the next strategy's
        // pool fills the device only once it has.
        drop((block, pool, s));
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}
