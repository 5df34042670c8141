//! Attacks of the twenty-seventh session's helper, through the `npu` facade, on memory: the
//! runtime-pool backend of `DevicePool` out of memory on a stream that does not run, its
//! `try_alloc` when only room could serve, and the other angles listed with each test.
//!
//! Each test names the promise it attacks. The simulator's hold gate is process-wide, so every
//! test takes the file's device lock; every wait is bounded (`run`, `until`, `until_released`,
//! `watchdog`), so a hang fails its test. The simulator of this process has six devices of
//! 64 MiB (installed by the first test to take the lock), so that a pool can fill a device.

mod common;

use std::sync::Once;

use common::*;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Strategy, ValueCondition, ValueWord};

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// [`exclusive`], with the simulator configured for this file first.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    static CONFIG: Once = Once::new();
    CONFIG.call_once(|| {
        sim::SimConfig::default()
            .devices(6)
            .memory_per_device(DEVICE_MEMORY)
            .install()
            .unwrap()
    });
    exclusive(None)
}

/// `DevicePool::alloc`'s "when the device is out of memory, the pool frees its cached blocks
/// and tries once more", asked on a stream that does not run: stopped (`Stream::stop`), or
/// blocked by a value wait nothing satisfies and aborted once the request has taken the cache.
/// The request may fail (its stream does not run), but the memory of the idle blocks the pool
/// gave up must come back to the runtime pool for every stream: a fresh stream's request of
/// 24 MiB fits, before and after the first stream is aborted, and the first stream serves
/// again. A break: the frees queued where they never run, the memory left to the runtime
/// pool's reuse by that stream alone, every other stream out of memory for the pool's life.
#[test]
fn an_out_of_memory_retry_on_a_stream_that_does_not_run_leaves_the_memory_to_other_streams() {
    let (_guard, ctx, _d1) = devices();
    let baseline = live_memory(&ctx);
    for blocked in [false, true] {
        for strategy in STRATEGIES {
            let what = format!("blocked {blocked}, {strategy:?}");
            let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let pool = pool_holding_the_device(&ctx, &other);
            let gate = std::sync::Arc::new(ValueWord::new(&ctx, 0).unwrap());
            let waiting = blocked.then(|| s.wait_value(gate.clone(), 1, ValueCondition::Equal));
            if !blocked {
                s.stop().unwrap();
            }
            let request = {
                let (pool, s) = (pool.clone(), s.clone());
                async move { pool.alloc::<u8>(&s, 24 << 20).await.map(drop) }
            };
            let outcome = if blocked {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let task = runtime.spawn(request);
                until("the request took the cache", || {
                    pool.stats().cache.cached == 0
                });
                run(s.abort()).unwrap();
                let outcome = run(task).unwrap();
                assert!(
                    run(waiting.unwrap()).unwrap_err().error.is_aborted(),
                    "{what}"
                );
                outcome
            } else {
                run(request)
            };
            // Failed on the stopped stream; on the blocked one it failed or (the abort came
            // before its retry) was served once the stream ran again.
            assert!(blocked || outcome.is_err(), "{what}: {outcome:?}");
            let served = run(pool.alloc::<u8>(&other, 24 << 20))
                .unwrap_or_else(|err| panic!("{what}: the pool's idle memory is stranded: {err}"));
            if !blocked {
                run(s.abort()).unwrap();
            }
            let again = run(pool.alloc::<u8>(&s, 4 << 20)).unwrap();
            let again = run(s.memset(again, 3)).unwrap();
            assert_eq!(
                run(s.download(again)).unwrap(),
                vec![3u8; 4 << 20],
                "{what}"
            );
            drop((served, pool, s, other, gate));
            until_released(&format!("{what}: everything"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}

/// `DevicePool::try_alloc` "never waits: `Ok(None)` when the request would have to queue for
/// capacity, or when only a new stream-ordered allocation could serve it". A try that gives
/// nothing must leave the pool as it was: on the runtime pool, with a capacity full of cached
/// blocks of another class, it must not evict them (and free them) to make room it then does
/// not use. It still serves a cached block of its class, and never overtakes a queued waiter.
#[test]
fn a_try_alloc_that_gives_nothing_leaves_the_runtime_pools_cache_alone() {
    let (_guard, ctx, _d1) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pool = DevicePool::builder(&ctx)
            .backend(DevicePoolBackend::RuntimePool)
            .capacity(16384)
            .build()
            .unwrap();
        assert_eq!(run(pool.reserve(&s, 2, 8192)).unwrap(), 16384);
        let before = pool.stats();
        for _ in 0..3 {
            assert!(pool.try_alloc::<u8>(&s, 4096).unwrap().is_none());
        }
        let after = pool.stats();
        assert_eq!(
            after.cache, before.cache,
            "{strategy:?}: the try changed the pool"
        );
        assert_eq!(after.runtime, before.runtime, "{strategy:?}");
        // A cached block of its class is a hit.
        let hit = pool
            .try_alloc::<u8>(&s, 8000)
            .unwrap()
            .expect("a cached block");
        assert_eq!((hit.block_bytes(), pool.stats().cache.hits), (8192, 1));
        // A waiter queued for more room than is free is not overtaken by a try of a class the
        // cache holds.
        let held = pool
            .try_alloc::<u8>(&s, 8192)
            .unwrap()
            .expect("the other block");
        drop(hit);
        let whole = {
            let mut waiter = std::pin::pin!(pool.alloc::<u8>(&s, 16384));
            assert!(polled_once(waiter.as_mut()).is_pending());
            assert!(pool.try_alloc::<u8>(&s, 8192).unwrap().is_none());
            drop(held);
            run(waiter).unwrap()
        };
        assert_eq!(whole.block_bytes(), 16384, "{strategy:?}");
        drop((whole, pool, s));
        until_released(&format!("{strategy:?}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// The out-of-memory retry gives back only idle blocks: a runtime-pool block of device 1 that a
/// peer copy on device 0's held stream reads (the copy's access guard dropped) stays the
/// copy's while a request on device 1 runs the pool out of memory and frees the cache, and
/// while the block that request gets is overwritten. The copy then reads the block's own
/// bytes, and the block comes back to the cache only after it.
#[test]
fn the_out_of_memory_retry_frees_only_idle_blocks_while_a_held_peer_copy_reads_one() {
    let (_guard, ctx0, ctx1) = devices();
    let baseline = [live_memory(&ctx0), live_memory(&ctx1)];
    for strategy in STRATEGIES {
        let (s0, s1) = (stream(&ctx0, strategy), stream(&ctx1, strategy));
        let pool = pool_holding_the_device(&ctx1, &s1);
        let cached = pool.stats().cache.cached;
        let read = pool.try_alloc::<u8>(&s1, 4 << 20).unwrap().unwrap();
        let read = run(s1.memset(read, 0x77)).unwrap();
        let access = ctx0.device().enable_peer_access(&ctx1.device()).unwrap();
        let hold = sim::hold(&ctx0.device()).unwrap();
        let copy = s0.copy_d2d(read, DeviceBuffer::<u8>::new(&ctx0, 4 << 20).unwrap());
        drop(access);
        let big = run(pool.alloc::<u8>(&s1, 24 << 20)).expect("the idle blocks make room");
        let big = run(s1.memset(big, 0x11)).unwrap();
        let stats = pool.stats().cache;
        assert_eq!(stats.cached, 0, "{strategy:?}");
        assert_eq!(
            stats.allocated,
            (4 << 20) + (24 << 20),
            "{strategy:?}: {stats:?}"
        );
        assert!(!copy.is_complete(), "{strategy:?}");
        hold.release().unwrap();
        let (read, copied) = run(copy).unwrap();
        assert!(
            run(s0.download(copied)).unwrap().iter().all(|&b| b == 0x77),
            "{strategy:?}: the peer copy read memory the retry gave away"
        );
        drop(read);
        assert_eq!(pool.stats().cache.cached, 4 << 20, "{strategy:?}");
        assert!(cached > 4 << 20);
        drop((big, pool, s0, s1));
        until_released(&format!("{strategy:?}: everything"), || {
            within(live_memory(&ctx0), baseline[0]) && within(live_memory(&ctx1), baseline[1])
        });
    }
}

/// A paused clock stands still while the out-of-memory retry waits for the release stream: the
/// device is held, so its frees cannot run, and a one-hour timer races the request. The
/// request wins with no paused time passed, and a pool and request dropped while the retry
/// waits lose nothing.
#[test]
fn a_paused_clock_stands_still_while_the_out_of_memory_retry_waits_for_the_device() {
    let (_guard, ctx, _d1) = devices();
    let baseline = live_memory(&ctx);
    for (strategy, drop_it) in STRATEGIES.into_iter().flat_map(|s| [(s, false), (s, true)]) {
        let what = format!("{strategy:?}, dropped {drop_it}");
        let s = stream(&ctx, strategy);
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&ctx.device()).unwrap();
        if drop_it {
            {
                let mut request = std::pin::pin!(pool.alloc::<u8>(&s, 24 << 20));
                assert!(polled_once(request.as_mut()).is_pending(), "{what}");
                assert_eq!(pool.stats().cache.cached, 0, "{what}: the cache was freed");
            }
            drop(pool);
            hold.release().unwrap();
        } else {
            let releaser = {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    until("the retry freed the cache", || {
                        pool.stats().cache.cached == 0
                    });
                    // Room for a paused runtime to fire its timer, if nothing kept it still.
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    hold.release().unwrap();
                })
            };
            paused_runtime().block_on(async {
                let start = tokio::time::Instant::now();
                let hour = std::time::Duration::from_secs(3600);
                let block = tokio::time::timeout(hour, pool.alloc::<u8>(&s, 24 << 20))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the hour passed while the device held"))
                    .unwrap();
                assert_eq!(block.len(), 24 << 20, "{what}");
                assert_eq!(start.elapsed(), std::time::Duration::ZERO, "{what}");
            });
            releaser.join().unwrap();
            drop(pool);
        }
        drop(s);
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// `mem::forget` of a staged copy's future after it submitted its copy only leaks: the pinned
/// pool's one block stays out of circulation for good (it is never served again, even once the
/// device has run the copy), and so does the destination, on a device of its own so that the
/// count is exact; the pool's other clients are refused or queue rather than get the block.
#[test]
fn forgetting_a_staged_copy_after_it_submitted_only_leaks_its_block_and_buffer() {
    let (_guard, _ctx, _d1) = devices();
    let device = Device::open(2).unwrap();
    let ctx = device.primary_context().clone();
    for (round, strategy) in STRATEGIES.into_iter().enumerate() {
        let s = stream(&ctx, strategy);
        let pool = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let data = vec![round as u8 + 1; 4096];
        let before = live_allocations(&ctx);
        let hold = sim::hold(&device).unwrap();
        let mut up = Box::pin(s.copy_from_slice_staged(
            &pool,
            &data,
            DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(),
        ));
        assert!(polled_once(up.as_mut()).is_pending(), "{strategy:?}");
        std::mem::forget(up);
        let mut down =
            Box::pin(s.copy_to_vec_staged(&pool, DeviceBuffer::<u8>::new(&ctx, 1).unwrap()));
        assert!(
            polled_once(down.as_mut()).is_pending(),
            "{strategy:?}: queued for the block"
        );
        hold.release().unwrap();
        run(s.synchronize()).unwrap();
        sim::flush_releases();
        assert!(pool.try_alloc::<u8>(1).unwrap().is_none(), "{strategy:?}");
        assert!(
            polled_once(down.as_mut()).is_pending(),
            "{strategy:?}: never served"
        );
        drop(down);
        let stats = pool.stats();
        assert_eq!(
            (stats.allocated, stats.cached, stats.waiters),
            (4096, 0, 0),
            "{strategy:?}"
        );
        assert_eq!(
            live_allocations(&ctx),
            before + 1,
            "{strategy:?}: the destination leaked"
        );
    }
}

/// "Never a hang" for the out-of-memory retry when the device is lost while the retry waits for
/// the pool's frees (the device held, so they have not run): the request resolves with an
/// error, and dropping the pool, its streams and the hold afterwards returns.
#[test]
fn a_device_lost_while_the_out_of_memory_retry_waits_resolves_the_request() {
    let (_guard, _ctx, _d1) = devices();
    let device = Device::open(3).unwrap();
    let ctx = device.primary_context().clone();
    let s = stream(&ctx, Strategy::EventPoll);
    let pool = pool_holding_the_device(&ctx, &s);
    let hold = sim::hold(&device).unwrap();
    let request = {
        let (pool, s) = (pool.clone(), s.clone());
        std::thread::spawn(move || run(pool.alloc::<u8>(&s, 24 << 20)).map(drop))
    };
    until("the retry freed the cache", || {
        pool.stats().cache.cached == 0
    });
    sim::lose(&device).unwrap();
    let outcome = watchdog("the request", || request.join().unwrap());
    assert!(outcome.is_err(), "{outcome:?}");
    watchdog("dropping everything", || drop((pool, s, hold)));
}
