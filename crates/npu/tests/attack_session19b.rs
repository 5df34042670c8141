//! Attacks of the nineteenth session's second helper, through the `npu` facade: the pools'
//! accounting under several threads at once (allocations awaited, polled once and dropped,
//! tried, reserved and trimmed while blocks come back from the device through the reaper).
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite. (The `serve` example's own attack, a client
//! that stops reading its answer during a shutdown, is a test of the example:
//! `examples/serve/tests/slow_readers.rs`, `a_client_that_never_reads_its_answer_does_not_hold_the_shutdown_for_ever`.)

mod common;

use std::pin::{Pin, pin};

use common::*;
use npu::PinnedPool;
use npu::memory::{DevicePool, DevicePoolBackend, PoolStats};
use npu::stream::Strategy;

/// Threads working one pool at once.
const THREADS: u64 = 4;
/// Steps each of them takes.
const STEPS: usize = 300;

/// What every snapshot of a pool of `capacity` bytes must show, whatever is in flight.
fn assert_bounded(stats: &PoolStats, capacity: usize, when: &str) {
    assert!(stats.reserved <= capacity, "{when}: {stats:?}");
    assert!(stats.peak_reserved <= capacity, "{when}: {stats:?}");
    assert!(stats.allocated <= stats.reserved, "{when}: {stats:?}");
    assert!(stats.cached <= stats.reserved, "{when}: {stats:?}");
    assert!(stats.awaiting_bytes <= stats.reserved, "{when}: {stats:?}");
}

/// What a pool at rest (nothing handed out, nothing in flight, nobody waiting) must show:
/// every byte it holds is cached, and a trim gives every one back.
fn assert_at_rest(stats: &PoolStats, when: &str) {
    assert_eq!(
        (stats.allocated, stats.awaiting_blocks, stats.awaiting_bytes),
        (0, 0, 0),
        "{when}: {stats:?}"
    );
    assert_eq!(stats.waiters, 0, "{when}: {stats:?}");
    assert_eq!(stats.cached, stats.reserved, "{when}: {stats:?}");
}

/// Runs `step` on `THREADS` threads at once, each on a current-thread runtime of its own with
/// its own seed.
fn on_threads<'a>(step: impl Fn(&mut Rng) -> Pin<Box<dyn Future<Output = ()> + 'a>> + Sync) {
    std::thread::scope(|scope| {
        let step = &step;
        let threads: Vec<_> = (0..THREADS)
            .map(|seed| {
                scope.spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((seed + 1) * 0x1234_5677));
                    for _ in 0..STEPS {
                        runtime.block_on(step(&mut rng));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    });
}

#[test]
fn a_pinned_pools_counters_stay_within_capacity_and_come_back_under_concurrent_use() {
    let (_guard, d0, _d1) = exclusive(None);
    let block = PinnedPool::size_class(4096).unwrap();
    // Two blocks of the small class, or one of the next: requests of both sizes compete.
    let capacity = 2 * block;
    let pool = PinnedPool::builder(&d0).capacity(capacity).build().unwrap();
    watchdog("a pinned pool under four threads", || {
        on_threads(|rng| {
            let pool = &pool;
            let len = [1, 1024, 2048][rng.below(3)];
            let choice = rng.below(6);
            Box::pin(async move {
                match choice {
                    // Awaited, used and dropped: every thread holds nothing while it waits,
                    // so every wait is served.
                    0 => {
                        let mut block = pool.alloc::<u32>(len).await.unwrap();
                        block[len - 1] = 7;
                    }
                    // Polled once, then dropped: queued, served or not.
                    1 => {
                        let alloc = pin!(pool.alloc::<u32>(len));
                        let _ = polled_once(alloc);
                    }
                    2 => drop(pool.try_alloc::<u32>(len).unwrap()),
                    3 => {
                        pool.trim();
                    }
                    4 => {
                        // May find no room: a typed error, never a panic.
                        let _ = pool.reserve(1, len * 4);
                    }
                    _ => tokio::task::yield_now().await,
                }
                assert_bounded(&pool.stats(), capacity, "during");
            })
        });
    });
    assert_at_rest(&pool.stats(), "after the threads");
    // No room was lost: the whole capacity is served again, as two blocks or as one.
    let (a, b) = (
        pool.try_alloc::<u32>(1024).unwrap(),
        pool.try_alloc::<u32>(1024).unwrap(),
    );
    assert!(a.is_some() && b.is_some(), "{:?}", pool.stats());
    drop((a, b));
    pool.trim();
    assert!(
        pool.try_alloc::<u32>(2048).unwrap().is_some(),
        "{:?}",
        pool.stats()
    );
    pool.trim();
    let stats = pool.stats();
    assert_eq!((stats.reserved, stats.cached), (0, 0), "{stats:?}");
}

#[test]
fn a_device_pools_counters_stay_within_capacity_while_the_reaper_returns_blocks() {
    let (_guard, d0, _d1) = exclusive(None);
    let baseline = live_allocations(&d0);
    for (backend, strategy) in [
        (DevicePoolBackend::Caching, Strategy::EventPoll),
        (DevicePoolBackend::RuntimePool, Strategy::CallbackThread),
        (DevicePoolBackend::Caching, Strategy::BlockingSync),
    ] {
        let block = DevicePool::size_class(4096).unwrap();
        let capacity = 2 * block;
        let pool = DevicePool::builder(&d0)
            .capacity(capacity)
            .backend(backend)
            .build()
            .unwrap();
        let streams: Vec<_> = (0..THREADS).map(|_| stream(&d0, strategy)).collect();
        let when = format!("{backend:?} under {strategy:?}");
        watchdog(&when, || {
            on_threads(|rng| {
                let (pool, streams) = (&pool, &streams);
                let s = &streams[rng.below(streams.len())];
                let len = [1, 1024, 2048][rng.below(3)];
                let choice = rng.below(7);
                Box::pin(async move {
                    match choice {
                        0 => {
                            let block = pool.alloc::<u32>(s, len).await.unwrap();
                            s.memset(block, 1).await.unwrap();
                        }
                        // A memset dropped at once: its block comes back once the device is
                        // done, from the reaper or a completer, while the others allocate.
                        1 => {
                            let block = pool.alloc::<u32>(s, len).await.unwrap();
                            drop(s.memset(block, 2));
                        }
                        2 => {
                            let alloc = pin!(pool.alloc::<u32>(s, len));
                            let _ = polled_once(alloc);
                        }
                        3 => drop(pool.try_alloc::<u32>(s, len).unwrap()),
                        4 => {
                            pool.trim().unwrap();
                        }
                        5 => {
                            let _ = pool.reserve(s, 1, len * 4).await;
                        }
                        _ => tokio::task::yield_now().await,
                    }
                    assert_bounded(&pool.stats().cache, capacity, "during");
                })
            });
        });
        // A dropped memset's block is allocated (its operation owns it) until the operation
        // completes, then awaits its uses: both are checked in one snapshot.
        until_released(&when, || {
            let stats = pool.stats().cache;
            stats.allocated == 0 && stats.awaiting_blocks == 0
        });
        assert_at_rest(&pool.stats().cache, &when);
        let s = &streams[0];
        // No room was lost: the whole capacity is served again (awaited: a runtime-pool miss
        // is a stream-ordered allocation, which `try_alloc` does not make).
        let (a, b) = run(async {
            let a = pool.alloc::<u32>(s, 1024).await.unwrap();
            (a, pool.alloc::<u32>(s, 1024).await.unwrap())
        });
        assert_eq!(pool.stats().cache.allocated, capacity, "{when}");
        drop((a, b));
        until_released(&when, || pool.stats().cache.awaiting_blocks == 0);
        pool.trim().unwrap();
        let stats = pool.stats().cache;
        assert_eq!((stats.reserved, stats.cached), (0, 0), "{when}: {stats:?}");
        drop((pool, streams));
        until_released(&when, || live_allocations(&d0) <= baseline);
    }
}
