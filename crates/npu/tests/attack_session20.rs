//! Attacks of the twentieth session's helper, through the `npu` facade: features that earlier
//! sessions attacked one at a time, combined (split parts of a pooled device block on the
//! streams of a `StreamPool`, under `timed`, event waits across the streams and an abort);
//! stream-ordered allocations discarded by an abort; zero-sized and overflowing pool requests
//! dropped mid-flight; the `async fn` conveniences polled outside Tokio and dropped under a
//! held device; a pinned pool dropped while casts and views of its split block are in flight.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::future::Future;
use std::sync::Arc;

use common::*;
use npu::memory::{
    DevicePool, DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags,
};
use npu::prelude::*;
use npu::sim;
use npu::stream::{StreamPool, ValueCondition, ValueWord};
use npu::{Error, Stream};

const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

fn device_pool(ctx: &Context, backend: DevicePoolBackend, capacity: usize) -> DevicePool {
    DevicePool::builder(ctx)
        .capacity(capacity)
        .backend(backend)
        .build()
        .unwrap()
}

/// Rules 2 and 3 across features: a device-pool block split in two, one part memset under
/// `timed` on one stream of a `StreamPool` (future dropped after its first poll), the other
/// part memset on the pool's other stream (future dropped), the first stream waiting on an
/// event the second records after it, all held on the device; then the first stream aborted.
/// The block must not come back to the pool (nor be served again) while the second part's
/// memset is still held, the aborted memset must never run, and the second part must hold
/// exactly its bytes once it has. Both backends, every strategy.
#[test]
fn a_split_pool_block_on_two_pool_streams_comes_back_only_after_both_parts() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let pool = device_pool(&ctx, backend, 8192);
            let streams =
                StreamPool::with_builder(Stream::builder(&ctx).strategy(strategy), 2).unwrap();
            let (s1, s2) = (streams.next(), streams.next());
            assert!(!s1.same(&s2));
            let block = run(pool.alloc::<u32>(&s1, 2048)).unwrap();
            let block = run(s1.memset(block, 0)).unwrap();
            let (head, tail) = block.into_halves(1024).unwrap();

            let held = sim::hold(&ctx.device()).unwrap();
            let mut timed = Box::pin(s1.timed(|s| s.memset(head.into_bytes(), 0x11)));
            assert!(polled_once(timed.as_mut()).is_pending(), "{what}");
            drop(timed);
            let tail_op = s2.memset(tail.into_bytes(), 0x22);
            let tail_done = tail_op.completion().clone();
            drop(tail_op);
            let event = Event::new(&ctx).unwrap();
            event.record(&s2).unwrap();
            s1.wait_event(&event).unwrap();
            run(s1.abort()).unwrap();

            sim::flush_releases();
            assert!(!tail_done.is_complete(), "{what}: the device is held");
            let stats = pool.stats().cache;
            assert_eq!(
                stats.cached, 0,
                "{what}: the block came back early: {stats:?}"
            );
            assert!(
                pool.try_alloc::<u8>(&s1, 8192).unwrap().is_none(),
                "{what}: the block was served again while a part's memset is held"
            );
            held.release().unwrap();
            run(tail_done.wait()).unwrap();
            until_released(&format!("{what}: the block is back"), || {
                let stats = pool.stats().cache;
                stats.allocated == 0 && stats.awaiting_blocks == 0
            });
            let block = pool
                .try_alloc::<u32>(&s2, 2048)
                .unwrap()
                .expect("the cached block");
            let words = run(s2.download(block)).unwrap();
            assert!(
                words[..1024].iter().all(|&w| w == 0),
                "{what}: the aborted memset ran"
            );
            assert!(
                words[1024..].iter().all(|&w| w == 0x2222_2222),
                "{what}: the held memset did not write its part"
            );
            run(s1.synchronize()).unwrap();
            run(s2.synchronize()).unwrap();
            drop((pool, streams, s1, s2, event));
        }
    }
    until_released("every block and stream released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Liveness and the accounting under an abort: a runtime-pool allocation whose stream-ordered
/// `aclrtMemPoolMallocAsync` is held on the device when its stream is aborted (the future
/// awaited, or dropped first). The allocation resolves with `Error::Aborted` (or is gone),
/// the room comes back, the full capacity is served again after the device runs, and nothing
/// is left allocated once the pool is dropped.
#[test]
fn a_stream_ordered_allocation_discarded_by_an_abort_gives_its_room_back() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        for dropped in [false, true] {
            let what = format!("{strategy:?}, future dropped: {dropped}");
            let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, 4096);
            let s = stream(&ctx, strategy);
            let held = sim::hold(&ctx.device()).unwrap();
            let mut alloc = Box::pin(pool.alloc::<u8>(&s, 4096));
            assert!(polled_once(alloc.as_mut()).is_pending(), "{what}");
            if dropped {
                drop(alloc);
                run(s.abort()).unwrap();
            } else {
                run(s.abort()).unwrap();
                match run(alloc) {
                    Err(Error::Aborted { api }) => {
                        assert_eq!(api, "aclrtMemPoolMallocAsync", "{what}")
                    }
                    other => panic!("{what}: {other:?}"),
                }
            }
            held.release().unwrap();
            run(s.synchronize()).unwrap();
            until_released(&format!("{what}: the room is back"), || {
                pool.stats().cache.allocated == 0
            });
            let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            let block = run(s.memset(block, 3)).unwrap();
            assert_eq!(run(s.download(block)).unwrap(), vec![3; 4096], "{what}");
            drop((pool, s));
        }
    }
    until_released("the pools and their blocks released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// "Bad input gives a typed error naming the API, never a panic", and cancellation of the
/// same: zero-length, zero-count and overflowing requests to both pools (awaited, tried,
/// reserved, and polled once then dropped), size classes at the ends of `usize`, trims to
/// `usize::MAX`. Nothing may panic, every refusal names the method called, and neither pool
/// nor device holds anything more afterwards.
#[test]
fn zero_and_overflowing_pool_requests_are_named_and_cost_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for n in [
        0,
        1,
        isize::MAX as usize,
        isize::MAX as usize + 1,
        usize::MAX,
    ] {
        let _ = PinnedPool::size_class(n);
        let _ = DevicePool::size_class(n);
    }
    assert_eq!(PinnedPool::size_class(usize::MAX), None);
    assert_eq!(DevicePool::size_class(usize::MAX), None);

    let pinned = PinnedPool::new(&ctx);
    let named = |api: &str, result: Result<(), Error>| {
        let err = result.expect_err(api);
        let (got, _) = invalid(&err);
        assert_eq!(got, api, "{err}");
    };
    named("PinnedPool::alloc", run(pinned.alloc::<u8>(0)).map(drop));
    named(
        "PinnedPool::alloc",
        run(pinned.alloc::<u64>(usize::MAX / 4)).map(drop),
    );
    named("PinnedPool::try_alloc", pinned.try_alloc::<u8>(0).map(drop));
    named(
        "PinnedPool::try_alloc",
        pinned.try_alloc::<u16>(isize::MAX as usize).map(drop),
    );
    for (count, bytes) in [
        (1, 0),
        (usize::MAX, 4096),
        (2, isize::MAX as usize),
        (usize::MAX, usize::MAX),
    ] {
        named(
            "PinnedPool::reserve",
            pinned.reserve(count, bytes).map(drop),
        );
    }
    // Nothing to reserve is either nothing reserved or a refusal naming the method.
    if let Err(err) = pinned.reserve(0, 4096) {
        assert_eq!(invalid(&err).0, "PinnedPool::reserve");
    }
    for len in [0, usize::MAX / 2] {
        let mut alloc = Box::pin(pinned.alloc::<u32>(len));
        match polled_once(alloc.as_mut()) {
            std::task::Poll::Ready(Err(err)) => assert_eq!(invalid(&err).0, "PinnedPool::alloc"),
            other => panic!("len {len}: {other:?}"),
        }
    }
    assert_eq!(pinned.trim(), 0);
    let stats = pinned.stats();
    assert_eq!(
        (stats.allocated, stats.reserved, stats.waiters),
        (0, 0, 0),
        "{stats:?}"
    );

    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let pool = device_pool(&ctx, backend, 1 << 20);
            let s = stream(&ctx, strategy);
            named("DevicePool::alloc", run(pool.alloc::<u8>(&s, 0)).map(drop));
            named(
                "DevicePool::alloc",
                run(pool.alloc::<u64>(&s, usize::MAX / 4)).map(drop),
            );
            named(
                "DevicePool::alloc",
                run(pool.alloc::<u8>(&s, (1 << 20) + 1)).map(drop),
            );
            named(
                "DevicePool::try_alloc",
                pool.try_alloc::<u8>(&s, 0).map(drop),
            );
            named(
                "DevicePool::try_alloc",
                pool.try_alloc::<u32>(&s, usize::MAX).map(drop),
            );
            for (count, bytes) in [
                (1, 0),
                (usize::MAX, 4096),
                (2, isize::MAX as usize),
                (usize::MAX, usize::MAX),
                (257, 4096),
            ] {
                named(
                    "DevicePool::reserve",
                    run(pool.reserve(&s, count, bytes)).map(drop),
                );
            }
            if let Err(err) = run(pool.reserve(&s, 0, 4096)) {
                assert_eq!(invalid(&err).0, "DevicePool::reserve", "{what}");
            }
            // Polled once and dropped, refused or not.
            for len in [0, 4096, usize::MAX / 8] {
                let mut alloc = Box::pin(pool.alloc::<u64>(&s, len));
                let _ = polled_once(alloc.as_mut());
                drop(alloc);
                let mut reserve = Box::pin(pool.reserve(&s, 3, len));
                let _ = polled_once(reserve.as_mut());
                drop(reserve);
            }
            run(s.synchronize()).unwrap();
            assert!(pool.trim_to(usize::MAX).is_ok(), "{what}");
            pool.trim().unwrap();
            until_released(&format!("{what}: nothing held"), || {
                let stats = pool.stats().cache;
                stats.allocated == 0 && stats.reserved == 0 && stats.waiters == 0
            });
            drop((pool, s));
        }
    }
    drop(pinned);
    until_released("nothing allocated", || within(live_memory(&ctx), baseline));
}

/// Polls `future` once with a no-op waker outside any Tokio runtime, then drops it.
fn poll_once_and_drop<F: Future>(future: F) {
    let mut future = Box::pin(future);
    let _ = polled_once(future.as_mut());
}

/// Rules 2, 3 and 5 outside Tokio: the `async fn` conveniences (upload, download, both staged
/// copies, `timed`, both pools' allocations and reservations, `HostRegistration::into_inner`
/// over a held copy, an abort) polled once on a thread with no Tokio runtime, by a no-op waker,
/// with the device held, and dropped there; nothing may block, free early or leak, and the
/// same conveniences then run to completion under `futures::executor::block_on`. Every
/// strategy (`BlockingSync` starts threads of its own outside Tokio).
#[test]
fn conveniences_polled_outside_tokio_and_dropped_under_a_held_device_leak_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let staging = PinnedPool::builder(&ctx).capacity(8192).build().unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let reg = HostRegistration::new(
            &ctx,
            PageAlignedBuffer::from_slice(&[9u8; 4096]).unwrap(),
            RegisterFlags::PINNED,
        )
        .unwrap();
        let reg = Arc::new(reg);
        let copy = s.copy_h2d(reg.clone(), DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        let copy_done = copy.completion().clone();
        drop(copy);
        watchdog("polling the conveniences once outside Tokio", || {
            let data = vec![5u32; 1024];
            poll_once_and_drop(s.upload(&data));
            poll_once_and_drop(s.download(DeviceBuffer::<u32>::new(&ctx, 1024).unwrap()));
            poll_once_and_drop(s.copy_from_slice_staged(
                &staging,
                &data,
                DeviceBuffer::<u32>::new(&ctx, 1024).unwrap(),
            ));
            poll_once_and_drop(
                s.copy_to_vec_staged(&staging, DeviceBuffer::<u32>::new(&ctx, 1024).unwrap()),
            );
            poll_once_and_drop(
                s.timed(|s| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)),
            );
            for backend in BACKENDS {
                let pool = device_pool(&ctx, backend, 8192);
                poll_once_and_drop(pool.alloc::<u8>(&s, 4096));
                poll_once_and_drop(pool.reserve(&s, 2, 4096));
            }
            poll_once_and_drop(staging.alloc::<u8>(8192));
        });
        assert_eq!(Arc::strong_count(&reg), 2, "the held copy keeps its clone");
        let reg2 = HostRegistration::new(
            &ctx,
            PageAlignedBuffer::from_slice(&[7u8; 4096]).unwrap(),
            RegisterFlags::PINNED,
        )
        .unwrap();
        let reg2 = Arc::new(reg2);
        let copy2 = s.copy_h2d(reg2.clone(), DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        drop(copy2);
        // A use recorded on the registration proper: the only way `into_inner` waits.
        let reg3 = HostRegistration::new(
            &ctx,
            PageAlignedBuffer::from_slice(&[6u8; 4096]).unwrap(),
            RegisterFlags::PINNED,
        )
        .unwrap();
        let marker = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 0);
        reg3.record_use(marker.completion());
        drop(marker);
        watchdog("into_inner and abort polled once outside Tokio", || {
            poll_once_and_drop(reg3.into_inner());
            poll_once_and_drop(s.abort());
        });
        drop(reg2);
        held.release().unwrap();
        run(copy_done.wait()).ok();
        // The dropped abort still runs; submissions meanwhile are refused (documented), so
        // wait for it: an abort called during another shares it.
        run(s.abort()).unwrap();

        // The same conveniences, to completion, under a non-Tokio executor.
        watchdog("the conveniences under futures::executor", || {
            futures::executor::block_on(async {
                let up = s.upload(&[3u16; 300]).await.unwrap();
                assert_eq!(s.download(up).await.unwrap(), vec![3u16; 300]);
                let dst = s
                    .copy_from_slice_staged(
                        &staging,
                        &[4u8; 100],
                        DeviceBuffer::new(&ctx, 100).unwrap(),
                    )
                    .await
                    .unwrap();
                let (_, back) = s.copy_to_vec_staged(&staging, dst).await.unwrap();
                assert_eq!(back, vec![4u8; 100]);
                let (_, _elapsed) = s
                    .timed(|s| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1))
                    .await
                    .unwrap();
                for backend in BACKENDS {
                    let pool = device_pool(&ctx, backend, 8192);
                    pool.reserve(&s, 1, 4096).await.unwrap();
                    let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                    s.memset(block, 2).await.unwrap();
                }
                let pooled = staging.alloc::<u8>(8192).await.unwrap();
                drop(pooled);
                s.abort().await.unwrap();
                s.synchronize().await.unwrap();
            })
        });
        drop(reg);
        until_released(
            &format!("{strategy:?}: the staging pool's blocks are back"),
            || staging.stats().allocated == 0,
        );
        drop((s, staging));
    }
    until_released("everything released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Rules 2 and 3 for pinned pools: a `PinnedPool` block split in two, one part seen through a
/// byte cast and a view copied to the device on one stream, the other part copied back into
/// from the device on another, both held; then the pool itself dropped and trimmed clones
/// gone, and the parts dropped. The pinned memory must stay allocated until both copies ran,
/// the copy into the second part must land, and the block must be freed after that (the pool
/// is gone, so nothing caches it).
#[test]
fn a_pinned_pool_dropped_under_copies_of_its_split_block_frees_it_after_the_device() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s1, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let pool = PinnedPool::builder(&ctx).capacity(8192).build().unwrap();
        let mut block = run(pool.alloc::<u32>(2048)).unwrap();
        block.fill(0x0101_0101);
        let source = DeviceBuffer::from_host_blocking(&ctx, &[0x5a5a_5a5au32; 1024]).unwrap();
        let pinned_before = sim::host_stats().unwrap().pinned_allocations;

        let held = sim::hold(&ctx.device()).unwrap();
        let (head, tail) = block.into_halves(1024).unwrap();
        let head = head.into_bytes().view(16..4096 - 16).unwrap();
        let up = s1.copy_h2d(head, DeviceBuffer::<u8>::new(&ctx, 4096 - 32).unwrap());
        let down = s2.copy_d2h(source, tail);
        let (up_done, down_done) = (up.completion().clone(), down.completion().clone());
        // The tail comes back through this completion's value only if awaited: keep the
        // future, drop the pool and the first copy's future.
        drop(up);
        drop(pool);
        sim::flush_releases();
        assert_eq!(
            sim::host_stats().unwrap().pinned_allocations,
            pinned_before,
            "{what}: the pinned block was freed under held copies"
        );
        held.release().unwrap();
        let (source, tail) = run(down).unwrap();
        assert!(
            tail.iter().all(|&w| w == 0x5a5a_5a5a),
            "{what}: the copy into the second part"
        );
        run(up_done.wait()).unwrap();
        assert!(down_done.is_complete());
        drop((source, tail));
        until_released(&format!("{what}: the block is freed"), || {
            sim::host_stats().unwrap().pinned_allocations < pinned_before
        });
        drop((s1, s2));
    }
    until_released("everything released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Rules 1 to 3 for value words carved from a pooled block: a `PooledDeviceBuffer<u64>` split
/// in two, the one-word head shared (`Arc<ValueWord>`) by a `wait_value` on one pool stream
/// and a `write_value` on the other, the tail memset beside them, all futures dropped under a
/// held device; the waiting stream aborted before the store runs, then a second wait satisfied
/// by a second store. The block comes back only after every operation on either part, and
/// then holds the last store and the memset's bytes.
#[test]
fn value_words_carved_from_a_pool_block_come_back_after_every_operation() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let pool = device_pool(&ctx, backend, 4096);
            let streams =
                StreamPool::with_builder(Stream::builder(&ctx).strategy(strategy), 2).unwrap();
            let (waiter, writer) = (streams.next(), streams.next());
            let block = run(pool.alloc::<u64>(&waiter, 512)).unwrap();
            let block = run(waiter.memset(block, 0)).unwrap();
            let (head, tail) = block.into_halves(1).unwrap();
            let word = Arc::new(ValueWord::from_memory(head).unwrap());

            let held = sim::hold(&ctx.device()).unwrap();
            let wait = waiter.wait_value(word.clone(), 7, ValueCondition::Equal);
            let wait_done = wait.completion().clone();
            drop(wait);
            let fill = writer.memset(tail.into_bytes(), 0x33);
            let fill_done = fill.completion().clone();
            drop(fill);
            run(waiter.abort()).unwrap();
            let store = writer.write_value(word.clone(), 9);
            let store_done = store.completion().clone();
            drop(store);
            let second = waiter.wait_value(word.clone(), 9, ValueCondition::Equal);
            let second_done = second.completion().clone();
            drop(second);
            drop(word);
            match run(wait_done.wait()) {
                Err(Error::Aborted { .. }) => {}
                other => panic!("{what}: the abort discards the wait: {other:?}"),
            }
            sim::flush_releases();
            assert!(
                !fill_done.is_complete() && !store_done.is_complete(),
                "{what}"
            );
            assert_eq!(
                pool.stats().cache.cached,
                0,
                "{what}: the block came back under held work"
            );
            assert!(
                pool.try_alloc::<u8>(&writer, 4096).unwrap().is_none(),
                "{what}"
            );
            held.release().unwrap();
            run(second_done.wait()).unwrap();
            run(store_done.wait()).unwrap();
            run(fill_done.wait()).unwrap();
            until_released(&format!("{what}: the block is back"), || {
                let stats = pool.stats().cache;
                stats.allocated == 0 && stats.awaiting_blocks == 0
            });
            let block = pool
                .try_alloc::<u64>(&writer, 512)
                .unwrap()
                .expect("the cached block");
            let words = run(writer.download(block)).unwrap();
            assert_eq!(words[0], 9, "{what}: the last store");
            assert!(
                words[1..].iter().all(|&w| w == 0x3333_3333_3333_3333),
                "{what}: the memset of the tail"
            );
            drop((pool, streams, waiter, writer));
        }
    }
    until_released("every block and stream released", || {
        within(live_memory(&ctx), baseline)
    });
}

// ---- Thread-local storage, each case in a child process of its own (an abort kills it). ----

const CHILD_ENV: &str = "NPU_ATTACK20_CHILD";

/// Runs this file's `thread_local_child` test in a child process with `case`.
fn in_child(case: &str) {
    in_child_test("thread_local_child", CHILD_ENV, case);
}

fn check_thread_local_case(case: &str) {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let baseline = live_memory(&ctx);
    match case {
        "buffers" => keep_on_a_thread_until_it_exits({
            let ctx = ctx.clone();
            move || {
                vec![
                    Box::new(DeviceBuffer::<u8>::new(&ctx, 64).unwrap()),
                    Box::new(PinnedBuffer::<u8>::new(&ctx, 64).unwrap()),
                ]
            }
        }),
        "stream-in-flight" => {
            for strategy in STRATEGIES {
                keep_on_a_thread_until_it_exits({
                    let ctx = ctx.clone();
                    move || {
                        let s = stream(&ctx, strategy);
                        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                        let stopped = stream(&ctx, strategy);
                        stopped.stop().unwrap();
                        vec![
                            Box::new(op),
                            // Submitted from the destructor: one accepted, one refused.
                            Box::new(SubmitsWhenDropped(s.clone())),
                            Box::new(SubmitsWhenDropped(stopped)),
                            Box::new(s),
                        ]
                    }
                });
            }
        }
        "context" => keep_on_a_thread_until_it_exits(|| {
            let device = Device::open(0).unwrap();
            let explicit = device.create_context().unwrap();
            let buffer = DeviceBuffer::<u8>::new(&explicit, 64).unwrap();
            vec![Box::new(buffer), Box::new(explicit), Box::new(device)]
        }),
        "tokio-runtime" => {
            for strategy in STRATEGIES {
                for paused in [false, true] {
                    let held = sim::hold(&ctx.device()).unwrap();
                    keep_on_a_thread_until_it_exits({
                        let ctx = ctx.clone();
                        move || {
                            let rt = if paused {
                                paused_runtime()
                            } else {
                                tokio::runtime::Builder::new_current_thread()
                                    .enable_all()
                                    .build()
                                    .unwrap()
                            };
                            let s = stream(&ctx, strategy);
                            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                            let task = rt.spawn(op);
                            rt.block_on(tokio::task::yield_now());
                            // A per-thread runtime with a task awaiting held work, and its
                            // stream, dropped when the thread exits.
                            vec![Box::new(task), Box::new(s), Box::new(rt)]
                        }
                    });
                    held.release().unwrap();
                }
            }
        }
        other => panic!("unknown case {other}"),
    }
    until_released(
        &format!("{case}: everything the thread kept is released"),
        || within(live_memory(&ctx), baseline),
    );
}

#[test]
fn thread_local_child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    check_thread_local_case(&case);
    println!("CHILD OK");
}

/// "Never a panic" and rule 3 for values a thread keeps in its own thread-local storage
/// until it exits (per-thread scratch buffers, a per-thread stream with an operation in
/// flight, an explicit context, a per-thread Tokio runtime, paused or not, whose task awaits
/// held work): they are dropped by the thread's TLS destructors, after npu-rs's own
/// thread-locals may have been destroyed. Dropping them must neither panic (a panic in a TLS
/// destructor aborts the process), nor wait for the held device, nor leak.
#[test]
fn values_kept_in_thread_local_storage_are_released_when_the_thread_exits() {
    for case in ["buffers", "stream-in-flight", "context", "tokio-runtime"] {
        in_child(case);
    }
}
