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
use npu::Stream;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{ValueCondition, ValueWord};

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

/// A runtime-pool `DevicePool` whose cache holds idle 4 MiB blocks filling `ctx`'s device
/// (allocated on `filler`, then dropped): nothing else fits until they are freed.
fn pool_holding_the_device(ctx: &Context, filler: &Stream) -> DevicePool {
    let pool = DevicePool::builder(ctx)
        .backend(DevicePoolBackend::RuntimePool)
        .build()
        .unwrap();
    let mut blocks = Vec::new();
    let full = loop {
        match run(pool.alloc::<u8>(filler, 4 << 20)) {
            Ok(block) => blocks.push(block),
            Err(err) => break err,
        }
    };
    assert!(full.is_out_of_memory(), "{full}");
    assert!(blocks.len() >= 12, "{} blocks", blocks.len());
    drop(blocks);
    assert!(pool.stats().cache.cached >= 48 << 20);
    pool
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
