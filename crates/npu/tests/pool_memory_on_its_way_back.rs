//! Memory on its way back to a pool, which a request out of memory must wait for rather than
//! fail, and memory that is not, which it must not wait for: a `DevicePool` request while a
//! release the device is done with sits on the reaper (an abandoned allocation's block, a
//! block a dropped operation owned), on both backends and every strategy, held there by
//! holding the reaper; and a `PinnedPool::reserve` larger than the host lets the process pin.
//!
//! The simulator of this process has two devices of 64 MiB and pins at most 64 MiB of host
//! memory (installed by the first test to take the lock), so that a pool can fill either.
//! Every test takes the device lock; every wait is bounded (`run`, `until`), so a hang fails
//! its test.

mod common;

use std::sync::Once;
use std::task::Poll;

use common::*;
use npu::memory::{DevicePoolBackend, PinnedPool};
use npu::prelude::*;
use npu::sim;

/// The memory of each simulated device, and the most host memory the process may pin.
const MEMORY: u64 = 64 << 20;

/// A request the device, filled outside the pool, cannot serve unless a block comes back.
const BIG: usize = 24 << 20;

const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

/// The device lock and device 0's primary context, on this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    static CONFIG: Once = Once::new();
    CONFIG.call_once(|| {
        sim::SimConfig::default()
            .devices(2)
            .memory_per_device(MEMORY)
            .pinned_host_limit(MEMORY)
            .install()
            .unwrap()
    });
    let (guard, d0, _d1) = exclusive(None);
    (guard, d0)
}

/// Device buffers of 4 MiB outside any pool, allocated until the device is out of memory.
fn fill_outside_the_pool(ctx: &Context) -> Vec<DeviceBuffer<u8>> {
    let mut filler = Vec::new();
    let full = loop {
        match DeviceBuffer::<u8>::new(ctx, 4 << 20) {
            Ok(buffer) => filler.push(buffer),
            Err(err) => break err,
        }
    };
    assert!(full.is_out_of_memory(), "{full}");
    filler
}

/// Waits (bounded) until no device memory of `ctx`'s device is allocated: a dropped runtime
/// pool gives its memory back on a thread of its own, which the next case must not run into.
fn until_the_device_is_free(ctx: &Context) {
    until("the device's memory is back", || {
        sim::device_stats(&ctx.device()).unwrap().bytes_allocated == 0
    });
}

/// What a request's first poll gave, for a failure message.
fn shown<T>(polled: &Poll<npu::Result<T>>) -> String {
    match polled {
        Poll::Pending => "pending".into(),
        Poll::Ready(Ok(_)) => "served".into(),
        Poll::Ready(Err(err)) => format!("failed: {err}"),
    }
}

/// A request out of memory while the block of an allocation whose `alloc` future was dropped
/// is on its way back waits for it and is served. The allocation is submitted on a held device
/// and abandoned; the device is filled outside the pool and the reaper held; once the device
/// is let go, the allocation completes and its unclaimed block's release waits on the reaper.
/// The request, polled once, must wait (before the fix it failed out of memory at once: the
/// block was neither cached nor its free counted); once the reaper goes on it is served.
#[test]
fn a_request_waits_for_an_abandoned_allocations_block_on_the_reaper() {
    let (_devices, ctx) = devices();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, None);
        let held = sim::hold(&ctx.device()).unwrap();
        let mut abandoned = Box::pin(pool.alloc::<u8>(&s, BIG));
        assert!(polled_once(abandoned.as_mut()).is_pending(), "{strategy:?}");
        drop(abandoned);
        let filler = fill_outside_the_pool(&ctx);
        let reaper = hold_the_reaper();
        held.release().unwrap();
        // Completed in order: the allocation before it, its release handed to the reaper.
        run(s.synchronize()).unwrap();
        // A clone asks, and the handle that made the allocation is gone.
        let asking = pool.clone();
        drop(pool);
        let mut request = Box::pin(async move { asking.alloc::<u8>(&s, BIG).await });
        let first = polled_once(request.as_mut());
        assert!(first.is_pending(), "{strategy:?}: {}", shown(&first));
        reaper.open();
        let served = run(request).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(served.len(), BIG, "{strategy:?}");
        drop((served, filler));
        until_the_device_is_free(&ctx);
    }
}

/// A request out of memory while a block whose operation's future was dropped is on its way
/// back waits for it and is served, on both backends: the block's memset is submitted on a
/// held device and dropped, the device filled outside the pool and the reaper held; once the
/// device is let go, the memset completes and the block's return (its drop, as the memset's
/// value) waits on the reaper. The request must wait (before the fix it failed out of memory
/// at once: the block still counted as handed out), and is served once the reaper goes on,
/// the block having been freed for it.
#[test]
fn a_request_waits_for_a_block_in_use_whose_release_is_on_the_reaper() {
    let (_devices, ctx) = devices();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let s = stream(&ctx, strategy);
            let pool = device_pool(&ctx, backend, None);
            let block = run(pool.alloc::<u8>(&s, BIG)).unwrap();
            let filler = fill_outside_the_pool(&ctx);
            let held = sim::hold(&ctx.device()).unwrap();
            let mut memset = Box::pin(s.memset(block, 1));
            assert!(polled_once(memset.as_mut()).is_pending(), "{what}");
            drop(memset);
            let reaper = hold_the_reaper();
            held.release().unwrap();
            run(s.synchronize()).unwrap();
            assert_eq!(pool.stats().cache.allocated, BIG, "{what}: not back yet");
            let mut request = Box::pin(pool.alloc::<u8>(&s, BIG));
            let first = polled_once(request.as_mut());
            assert!(first.is_pending(), "{what}: {}", shown(&first));
            reaper.open();
            let served = run(request).unwrap_or_else(|err| panic!("{what}: {err}"));
            assert_eq!(served.len(), BIG, "{what}");
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.allocated, stats.cached),
                (BIG, 0),
                "{what}: {stats:?}"
            );
            drop((served, filler, pool));
            until_the_device_is_free(&ctx);
        }
    }
}

/// Nothing on its way back, nothing waited for: with the device filled outside the pool and
/// the reaper held, a request of a pool that has nothing out fails out of memory at its first
/// poll, on both backends; a pool whose only block its owner keeps fails once the reaper has
/// run what it was handed (one pass: that block is not coming back), and so does one whose
/// block a dropped memset owns on a held device (its operation has not completed: the request
/// does not wait for the device, which may never run it). Each leaves the pool's counters as
/// they were.
#[test]
fn a_request_with_nothing_on_its_way_back_fails_out_of_memory_at_once() {
    let (_devices, ctx) = devices();
    for backend in BACKENDS {
        let s = stream(&ctx, npu::stream::Strategy::EventPoll);
        let pool = device_pool(&ctx, backend, None);
        let kept = run(pool.alloc::<u8>(&s, 4 << 20)).unwrap();
        let filler = fill_outside_the_pool(&ctx);
        let empty = device_pool(&ctx, backend, None);
        let reaper = hold_the_reaper();
        let mut request = Box::pin(empty.alloc::<u8>(&s, BIG));
        match polled_once(request.as_mut()) {
            Poll::Ready(Err(err)) => assert!(err.is_out_of_memory(), "{backend:?}: {err}"),
            other => panic!("{backend:?}: {}", shown(&other)),
        }
        drop(request);
        reaper.open();
        let refused = run(pool.alloc::<u8>(&s, BIG)).expect_err("the kept block never comes back");
        assert!(refused.is_out_of_memory(), "{backend:?}: {refused}");
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.allocated, stats.reserved, stats.misses),
            (4 << 20, 4 << 20, 1)
        );
        assert_eq!(empty.stats().cache.reserved, 0, "{backend:?}");
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = Box::pin(s.memset(kept, 1));
        assert!(polled_once(memset.as_mut()).is_pending(), "{backend:?}");
        drop(memset);
        let refused = run(pool.alloc::<u8>(&s, BIG)).expect_err("the held block is not waited for");
        assert!(refused.is_out_of_memory(), "{backend:?}: {refused}");
        assert_eq!(pool.stats().cache.allocated, 4 << 20, "{backend:?}");
        held.release().unwrap();
        until_released("the memset's block is back", || {
            pool.stats().cache.cached == 4 << 20
        });
        drop((filler, pool, empty));
        until_the_device_is_free(&ctx);
    }
}

/// Cancelled at the worst moment: a request dropped while it waits for the reaper's pass, and
/// a reserve that takes the same path, lose nothing. Once the reaper goes on, the abandoned
/// allocation's block and the dropped requests' room are back: the whole device serves a
/// request again, and the pool counts only what it was given.
#[test]
fn a_request_dropped_while_it_waits_for_the_reaper_loses_nothing() {
    let (_devices, ctx) = devices();
    for backend in BACKENDS {
        let s = stream(&ctx, npu::stream::Strategy::EventPoll);
        let pool = device_pool(&ctx, backend, None);
        let block = run(pool.alloc::<u8>(&s, BIG)).unwrap();
        let filler = fill_outside_the_pool(&ctx);
        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = Box::pin(s.memset(block, 1));
        assert!(polled_once(memset.as_mut()).is_pending(), "{backend:?}");
        drop(memset);
        let reaper = hold_the_reaper();
        held.release().unwrap();
        run(s.synchronize()).unwrap();
        let mut request = Box::pin(pool.alloc::<u8>(&s, BIG));
        assert!(polled_once(request.as_mut()).is_pending(), "{backend:?}");
        let mut reserve = Box::pin(pool.reserve(&s, 1, 2 * BIG));
        assert!(polled_once(reserve.as_mut()).is_pending(), "{backend:?}");
        drop((request, reserve));
        reaper.open();
        let served = run(pool.alloc::<u8>(&s, BIG)).unwrap_or_else(|err| panic!("{err}"));
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.allocated, stats.cached),
            (BIG, 0),
            "{backend:?}: {stats:?}"
        );
        drop((served, filler));
        assert_eq!(pool.trim().unwrap(), BIG, "{backend:?}");
        drop(pool);
        until_the_device_is_free(&ctx);
    }
}

/// A `PinnedPool::reserve` on a pool without a capacity, asking for more than the host lets
/// the process pin (here 1 TiB, against the simulator's 64 MiB), fails with the typed
/// out-of-memory error, never aborts, and pins nothing more: the blocks it pinned before
/// failing are freed, so the host's pinned memory is what it was (before the fix the pool
/// kept them cached, every byte the process could pin, and the next pinned allocation of the
/// process failed). Blocks reserved earlier stay; the pool, and pinning outside it, serve
/// again. A capacity's limit, by contrast, keeps what fitted (the capacity bounds it).
#[test]
fn a_pinned_reserve_beyond_the_host_fails_typed_and_keeps_nothing_it_pinned() {
    let (_devices, ctx) = devices();
    let pool = PinnedPool::new(&ctx);
    assert_eq!(pool.reserve(2, 1 << 20).unwrap(), 2 << 20);
    let before = sim::host_stats().unwrap();
    let err = pool.reserve(1 << 20, 1 << 20).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert_eq!(sim::host_stats().unwrap(), before, "pinned nothing more");
    let stats = pool.stats();
    assert_eq!(
        (stats.cached, stats.reserved),
        (2 << 20, 2 << 20),
        "{stats:?}"
    );
    let again = PinnedBuffer::<u8>::new(&ctx, 16 << 20).expect("the host pins again");
    assert!(pool.try_alloc::<u8>(1 << 20).unwrap().is_some());
    let cloned = pool.clone();
    drop(pool);
    let bounded = PinnedPool::builder(&ctx).capacity(4 << 20).build().unwrap();
    let full = bounded.reserve(8, 1 << 20).unwrap_err();
    assert!(
        full.to_string().contains("room for 4 of 8 blocks"),
        "{full}"
    );
    assert_eq!(bounded.stats().cached, 4 << 20);
    drop((again, cloned));
}
