//! `DevicePool` under every completion strategy and both backends: a block is handed out
//! again, to any stream, only once every operation that used it has completed; dropped and
//! forgotten operations keep it out of circulation; capacity queues requests in FIFO order;
//! trim, stats, errors, faults and runtime shutdown. The device is held with the simulator's
//! hold gate so that it is provably not done; waits are bounded by watchdogs, never used as
//! synchronisation. Its own process: it closes device 0's hold gate, one test at a time.

mod common;

use std::future::Future;
use std::sync::Arc;

use common::{HANG, STRATEGIES, cases, code, exclusive_device0, invalid, run, stream};
use npu_core::{Context, Module};
use npu_mem::{DeviceBuffer, Memory, MemoryMut, PinnedBuffer};
use npu_sim::control;
use npu_stream::{DevicePool, DevicePoolBackend, PooledDeviceBuffer, Strategy, Stream};

fn pool(ctx: &Context, backend: DevicePoolBackend) -> DevicePool {
    DevicePool::builder(ctx).backend(backend).build().unwrap()
}

/// A pool on `backend`, a stream using `strategy`, and a first 4 KiB block of the pool.
fn first_block(
    ctx: &Context,
    backend: DevicePoolBackend,
    strategy: Strategy,
) -> (DevicePool, Stream, PooledDeviceBuffer<u8>) {
    let pool = pool(ctx, backend);
    let s = stream(ctx, strategy);
    let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
    (pool, s, block)
}

#[test]
fn a_hit_reuses_the_same_block_on_any_stream() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend);
        assert_eq!(pool.backend(), backend);
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let block = run(pool.alloc::<u32>(&a, 1000)).unwrap();
        let address = block.addr();
        let block = run(a.memset(block, 7)).unwrap();
        drop(block);
        let again = run(pool.alloc::<u32>(&b, 1024)).unwrap();
        assert_eq!(again.addr(), address, "{backend:?} {strategy:?}");
        let host = PinnedBuffer::<u32>::new(&ctx, 1024).unwrap();
        let (_again, host) = run(b.copy_d2h(again, host)).unwrap();
        assert!(
            host[..1000].iter().all(|&x| x == 0x0707_0707),
            "the previous data"
        );
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.hits, stats.misses),
            (1, 1),
            "{backend:?} {strategy:?}"
        );
    }
}

#[test]
fn a_block_returns_only_after_every_operation_that_used_it_completed() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend);
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        for shared in [false, true] {
            let block = run(pool.alloc::<u8>(&a, 4096)).unwrap();
            let address = block.addr();
            control::hold(0).unwrap();
            // The worst a user can do: drop the future, or share the buffer and drop the
            // last handle the program holds, while the device has not run the operation.
            let done = if shared {
                let shared = Arc::new(block);
                let host = PinnedBuffer::<u8>::new(&ctx, 4096).unwrap();
                let op = a.copy_d2h(shared.clone(), host);
                let done = op.completion().clone();
                drop((op, shared));
                done
            } else {
                let op = a.memset(block, 1);
                let done = op.completion().clone();
                drop(op);
                done
            };
            let stats = pool.stats().cache;
            // Still owned by the dropped operation (or awaiting it): not cached.
            assert_eq!(
                (stats.allocated + stats.awaiting_bytes, stats.cached),
                (4096, 0),
                "{backend:?} {strategy:?} shared={shared}: {stats:?}"
            );
            // Not for another stream either: a new block or (stream-ordered) nothing yet.
            if let Some(other) = pool.try_alloc::<u8>(&b, 4096).unwrap() {
                assert_ne!(other.addr(), address, "{backend:?} {strategy:?}");
                drop(other);
                pool.trim().unwrap();
            }
            control::release(0).unwrap();
            run(done.wait()).unwrap();
            npu_core::reaper::flush();
            let again = run(pool.alloc::<u8>(&b, 4096)).unwrap();
            assert_eq!(
                again.addr(),
                address,
                "{backend:?} {strategy:?}: back after completion"
            );
        }
    }
}

#[test]
fn a_forgotten_operation_keeps_its_block_out_of_circulation() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let (pool, s, block) = first_block(&ctx, backend, strategy);
        let address = block.addr();
        control::hold(0).unwrap();
        let op = s.memset(block, 2);
        let done = op.completion().clone();
        std::mem::forget(op);
        control::release(0).unwrap();
        run(done.wait()).unwrap();
        npu_core::reaper::flush();
        assert_eq!(pool.stats().cache.allocated, 4096, "leaked, never returned");
        let other = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        assert_ne!(other.addr(), address, "{backend:?} {strategy:?}");
    }
}

#[test]
fn capacity_queues_requests_in_order_and_a_returning_block_wakes_them() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = DevicePool::builder(&ctx)
            .backend(backend)
            .capacity(8192)
            .build()
            .unwrap();
        let s = stream(&ctx, strategy);
        run(async {
            let first = pool.alloc::<u8>(&s, 4096).await.unwrap();
            let second = pool.alloc::<u8>(&s, 4096).await.unwrap();
            let big = tokio::spawn({
                let (pool, s) = (pool.clone(), s.clone());
                async move { pool.alloc::<u8>(&s, 8192).await }
            });
            tokio::task::yield_now().await;
            let small = tokio::spawn({
                let (pool, s) = (pool.clone(), s.clone());
                async move { pool.alloc::<u8>(&s, 4096).await }
            });
            tokio::task::yield_now().await;
            assert_eq!(pool.stats().cache.waiters, 2);
            assert!(
                pool.try_alloc::<u8>(&s, 4096).unwrap().is_none(),
                "no overtaking"
            );
            control::hold(0).unwrap();
            let pending = s.memset(first, 0);
            drop(second);
            tokio::task::yield_now().await;
            assert_eq!(pool.stats().cache.waiters, 2, "the head needs both blocks");
            control::release(0).unwrap();
            drop(pending); // its block returns once the memset completes, and wakes the head
            let big = big.await.unwrap().unwrap();
            assert_eq!(big.block_bytes(), 8192, "{backend:?} {strategy:?}");
            assert_eq!(pool.stats().cache.waiters, 1);
            drop(big);
            assert_eq!(small.await.unwrap().unwrap().block_bytes(), 4096);
            // The two small blocks made room for the big one, which made room for the last.
            assert_eq!(pool.stats().cache.evictions, 3);
        });
    }
}

#[test]
fn trim_and_stats_add_up() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend);
        let s = stream(&ctx, strategy);
        assert_eq!(run(pool.reserve(&s, 3, 10_000)).unwrap(), 3 * 12_288);
        let held = run(pool.alloc::<u8>(&s, 100_000)).unwrap();
        let stats = pool.stats();
        let cache = stats.cache;
        assert_eq!(stats.backend, backend);
        assert_eq!(
            cache.reserved,
            cache.allocated + cache.awaiting_bytes + cache.cached
        );
        assert_eq!(
            (cache.cached, cache.allocated),
            (3 * 12_288, held.block_bytes())
        );
        assert_eq!((cache.peak_reserved, cache.misses), (cache.reserved, 4));
        match backend {
            DevicePoolBackend::RuntimePool => {
                let usage = stats.runtime.unwrap();
                assert!(usage.used >= cache.reserved as u64, "{usage:?}");
            }
            _ => assert_eq!(stats.runtime, None),
        }
        assert_eq!(
            pool.trim_to(held.block_bytes() + 12_288).unwrap(),
            2 * 12_288
        );
        assert_eq!(pool.trim().unwrap(), 12_288);
        let cache = pool.stats().cache;
        assert_eq!((cache.cached, cache.frees), (0, 3), "{backend:?}");
        if let Some(usage) = pool.stats().runtime {
            // The runtime pads each allocation a little.
            let held = held.block_bytes() as u64;
            assert!((held..held + 128).contains(&usage.used), "{usage:?}");
        }
        assert_eq!(
            pool.trim().unwrap(),
            0,
            "nothing left to trim: the block in use stays"
        );
    }
}

/// A reserve hands nothing out: the blocks it finds cached are no hits and the ones it makes
/// never count as allocated, so `peak_allocated` is what requests held, not the prewarming.
#[test]
fn a_reserve_counts_no_hit_and_no_allocation() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend);
        let s = stream(&ctx, strategy);
        for _ in 0..2 {
            assert_eq!(run(pool.reserve(&s, 3, 10_000)).unwrap(), 3 * 12_288);
            let cache = pool.stats().cache;
            let counts = (cache.hits, cache.misses, cache.cached, cache.peak_allocated);
            assert_eq!(counts, (0, 3, 3 * 12_288, 0), "{backend:?} {strategy:?}");
        }
        let block = run(pool.alloc::<u8>(&s, 10_000)).unwrap();
        let cache = pool.stats().cache;
        assert_eq!((cache.hits, cache.peak_allocated), (1, block.block_bytes()));
    }
}

#[test]
fn bad_requests_are_typed_errors_naming_the_problem() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = DevicePool::builder(&ctx)
            .backend(backend)
            .capacity(1 << 20)
            .build()
            .unwrap();
        let s = stream(&ctx, strategy);
        let err = run(pool.alloc::<f32>(&s, 0)).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::alloc", "len"));
        let err = run(pool.alloc::<()>(&s, 4)).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::alloc", "T"));
        let err = pool.try_alloc::<u8>(&s, 2 << 20).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::try_alloc", "len"));
        assert!(err.to_string().contains("could never be served"), "{err}");
        let other = ctx.device().create_context().unwrap();
        let foreign = stream(&other, strategy);
        let err = run(pool.alloc::<u8>(&foreign, 64)).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::alloc", "stream"));
        assert!(err.to_string().contains("another context"), "{err}");
        let err = run(pool.reserve(&s, 300, 4096)).unwrap_err();
        assert!(err.to_string().contains("room for 256 of 300"), "{err}");
        assert_eq!(pool.stats().cache.waiters, 0);
    }
}

#[test]
fn out_of_device_memory_is_typed_and_frees_the_cache_first() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend);
        let s = stream(&ctx, strategy);
        let err = run(pool.alloc::<u8>(&s, 1 << 40)).unwrap_err();
        assert!(err.is_out_of_memory(), "{backend:?}: {err}");
        assert_eq!(code(&err), 207001);
        let stats = pool.stats().cache;
        assert_eq!((stats.reserved, stats.misses), (0, 0), "counters as before");
        // An allocation that fails once while blocks are cached frees them and tries again.
        run(pool.reserve(&s, 1, 4096)).unwrap();
        control::fail_next_alloc(0).unwrap();
        let block = run(pool.alloc::<u8>(&s, 65_536)).unwrap();
        assert_eq!(block.block_bytes(), 65_536, "{backend:?} {strategy:?}");
        assert_eq!(
            pool.stats().cache.cached,
            0,
            "the cache was freed for the retry"
        );
    }
}

#[test]
fn a_device_fault_hands_the_block_back_and_it_is_reused() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let (pool, s, block) = first_block(&ctx, backend, strategy);
        let address = block.addr();
        control::fail_task(s.as_raw(), 1, 507015).unwrap();
        let failed = run(s.memset(block, 3)).unwrap_err();
        assert_eq!(code(&failed.error), 507015, "{backend:?} {strategy:?}");
        let block = failed.value.expect("the buffer comes back with the error");
        let _ = run(s.synchronize());
        drop(block);
        let again = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        assert_eq!(again.addr(), address, "{backend:?} {strategy:?}");
        let again = run(s.memset(again, 4)).unwrap();
        let host = PinnedBuffer::<u8>::new(&ctx, 4096).unwrap();
        let (_again, host) = run(s.copy_d2h(again, host)).unwrap();
        assert!(host.iter().all(|&x| x == 4));
    }
}

#[test]
fn shutting_a_runtime_down_under_waiters_and_held_work_loses_nothing() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = DevicePool::builder(&ctx)
            .backend(backend)
            .capacity(4096)
            .build()
            .unwrap();
        let s = stream(&ctx, strategy);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let block = runtime.block_on(pool.alloc::<u8>(&s, 4096)).unwrap();
        control::hold(0).unwrap();
        let op = s.memset(block, 5);
        let done = op.completion().clone();
        runtime.spawn(op);
        let waiter = runtime.spawn({
            let (pool, s) = (pool.clone(), s.clone());
            async move { pool.alloc::<u8>(&s, 4096).await.map(drop) }
        });
        let watchdog = std::time::Instant::now();
        while pool.stats().cache.waiters == 0 {
            assert!(watchdog.elapsed() < HANG, "the waiter never queued");
            std::thread::yield_now();
        }
        drop(waiter);
        drop(runtime); // must not wait for the held device
        assert_eq!(pool.stats().cache.waiters, 0, "{backend:?} {strategy:?}");
        control::release(0).unwrap();
        run(done.wait()).unwrap();
        npu_core::reaper::flush();
        let again = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        assert_eq!(again.block_bytes(), 4096, "the block came back");
    }
}

#[test]
fn the_pool_is_destroyed_with_its_last_clone_and_block() {
    let (_device, ctx) = exclusive_device0();
    let live = || control::device_stats(0).unwrap().live_allocations;
    for (backend, strategy) in cases() {
        let s = stream(&ctx, strategy);
        let pool = pool(&ctx, backend);
        run(pool.reserve(&s, 2, 4096)).unwrap();
        let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        let clone = pool.clone();
        drop(pool);
        drop(clone);
        // The last block keeps the pool; its memset still runs after the pool handles are gone.
        let block = run(s.memset(block, 1)).unwrap();
        // Counted now, not before the pool was made: an earlier test's pool may still be
        // being destroyed on its own thread, which only lowers the count.
        let held = live();
        let watchdog = std::time::Instant::now();
        drop(block);
        // The pool's two device allocations go with its last block; the runtime pool is
        // destroyed on a thread of its own: wait for it, bounded.
        while live() + 2 > held {
            assert!(
                watchdog.elapsed() < HANG,
                "{backend:?}: the pool's memory was not released"
            );
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_pooled_buffer_works_wherever_a_device_buffer_does() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let pool = DevicePool::new(&ctx).unwrap();
        let s = stream(&ctx, strategy);
        let host = PinnedBuffer::from_slice(&ctx, &[1.5f32; 1024]).unwrap();
        let device = run(pool.alloc::<f32>(&s, 1024)).unwrap();
        let (host, device) = run(s.copy_h2d(host, device)).unwrap();
        let (low, high) = device.into_halves(512).unwrap();
        let low = run(s.memset(low, 0)).unwrap();
        let device = low.join(high).unwrap().into_whole().unwrap();
        let other = DeviceBuffer::<f32>::new(&ctx, 1024).unwrap();
        let (device, other) = run(s.copy_d2d(device, other)).unwrap();
        let (_other, host) = run(s.copy_d2h(other, host)).unwrap();
        assert!(host[..512].iter().all(|&x| x == 0.0), "{strategy:?}");
        assert!(host[512..].iter().all(|&x| x == 1.5), "{strategy:?}");
        // A kernel argument too: scale_f32(float *x, uint64_t n, float alpha).
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }.unwrap();
        let scale = module.function("scale_f32").unwrap();
        // SAFETY: scale_f32 scales n elements of x in place; the buffer holds 1024.
        let launch = unsafe { s.launch(&scale, 4, (device, 1024u64, 2.0f32)) };
        let (device, ..) = run(launch).unwrap();
        let host = PinnedBuffer::<f32>::new(&ctx, 1024).unwrap();
        let (device, host) = run(s.copy_d2h(device, host)).unwrap();
        assert!(host[..512].iter().all(|&x| x == 0.0), "{strategy:?}");
        assert!(host[512..].iter().all(|&x| x == 3.0), "{strategy:?}");
        let bytes = device.into_bytes();
        assert_eq!(bytes.len(), 4096);
        assert!(format!("{:?}", bytes.into_inner()).contains("PooledDeviceBuffer"));
    }
}

#[test]
fn an_allocation_dropped_while_the_device_is_held_gives_its_block_back() {
    use futures::FutureExt;
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let pool = pool(&ctx, DevicePoolBackend::RuntimePool);
        let s = stream(&ctx, strategy);
        run(async {
            control::hold(0).unwrap();
            // A miss: the stream-ordered allocation is submitted, and cannot complete yet.
            let dropped = pool.alloc::<u8>(&s, 4096).now_or_never();
            assert!(
                dropped.is_none(),
                "{strategy:?}: the allocation waits for its stream"
            );
            let stats = pool.stats();
            assert_eq!(
                stats.cache.reserved, 0,
                "the granted room came back at once"
            );
            assert!(
                stats.runtime.unwrap().used > 0,
                "the runtime handed out the block"
            );
            control::release(0).unwrap();
            s.synchronize().await.unwrap();
        });
        npu_core::reaper::flush();
        assert_eq!(
            pool.stats().runtime.unwrap().used,
            0,
            "{strategy:?}: back to the runtime"
        );
        let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        assert_eq!(pool.stats().cache.misses, 1, "{strategy:?}: {block:?}");
    }
}

/// Its own device: losing one is for good. A lost device would fail the caching backend's
/// allocations too: the fallback is for a runtime that cannot make a pool, and a pool on a lost
/// device is the device's error, forced or not (before, the unforced one fell back and was
/// made).
#[test]
fn a_runtime_pool_on_a_lost_device_is_the_devices_error_forced_or_not() {
    let (_device, _) = exclusive_device0();
    let ctx = common::in_process()
        .device(1)
        .unwrap()
        .primary_context()
        .clone();
    control::lose_device(1).unwrap();
    let unforced = DevicePool::new(&ctx).unwrap_err();
    assert!(unforced.is_device_lost(), "{unforced}");
    let forced = DevicePool::builder(&ctx)
        .backend(DevicePoolBackend::RuntimePool)
        .build()
        .unwrap_err();
    assert!(forced.is_device_lost(), "{forced}");
}

/// A stream-ordered allocation keeps its room until the device has run it, even when the
/// `alloc` future that submitted it is dropped: before, dropping gave the room back at once,
/// so every dropped future queued another block on the device while the pool counted none,
/// and the capacity bounded nothing.
#[test]
fn a_dropped_alloc_keeps_its_room_until_its_queued_allocation_is_done() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let pool = DevicePool::builder(&ctx)
            .backend(DevicePoolBackend::RuntimePool)
            .capacity(4096)
            .build()
            .unwrap();
        let s = stream(&ctx, strategy);
        control::hold(0).unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut dropped = Box::pin(pool.alloc::<u8>(&s, 4096));
        assert!(
            dropped.as_mut().poll(&mut cx).is_pending(),
            "queued on the held device"
        );
        drop(dropped);
        let mut next = Box::pin(pool.alloc::<u8>(&s, 4096));
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            pool.stats().cache.waiters,
            1,
            "{strategy:?}: the room is still the queued allocation's"
        );
        control::release(0).unwrap();
        let block = run(next).unwrap();
        assert_eq!(block.block_bytes(), 4096, "{strategy:?}");
    }
}
