//! Attacks of the twenty-seventh session's helper (memory errors), through the `npu` facade:
//! `DevicePool`'s repair and quarantine of blocks after an uncorrectable memory error (UCE),
//! its out-of-memory retry and `reserve`, each test naming the promise it attacks.
//!
//! The simulator of this process has devices of 64 MiB (installed by the first test to take
//! the lock), so that a pool can fill a device. Every test takes the device lock; every wait
//! is bounded (`run`, `until_released`), so a hang fails its test.

mod common;

use std::sync::Once;

use common::*;

use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::stream::Strategy;
use npu::{ffi, sim};

const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// [`exclusive`], with the simulator configured for this file first.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    let (guard, d0, _d1) = both_devices();
    (guard, d0)
}

/// [`devices`], with device 1 as well.
fn both_devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    static CONFIG: Once = Once::new();
    CONFIG.call_once(|| {
        sim::SimConfig::default()
            .devices(2)
            .memory_per_device(DEVICE_MEMORY)
            .install()
            .unwrap()
    });
    let taken = exclusive(None);
    // A test before this one may have dropped a pool whose memory goes back on a thread of
    // its own: every test starts with it back, or its baseline (and a pool filling the
    // device) would count it.
    npu::runtime::wait_for_teardowns(HANG).unwrap();
    sim::flush_releases();
    taken
}

/// The counters add up: the pool holds what is in use, awaiting and cached, and no more
/// than its capacity; quarantined blocks are outside all of it.
fn adds_up(stats: &npu::PoolStats, capacity: Option<usize>, what: &str) {
    assert_eq!(
        stats.reserved,
        stats.allocated + stats.awaiting_bytes + stats.cached,
        "{what}: {stats:?}"
    );
    if let Some(capacity) = capacity {
        assert!(stats.reserved <= capacity, "{what}: {stats:?}");
    }
}

/// "A block returned after a memory error comes back repaired, or is quarantined and never
/// handed out again", for a block with more error ranges than one `aclrtGetMemUceInfo` call
/// lists (128): the first call lists 128 of the block's ranges, all inside it. Repairing
/// those and caching the block leaves the rest in it, and the next owner's memset fails.
/// Both backends.
#[test]
fn a_block_with_more_error_ranges_than_one_listing_is_never_cached_with_the_rest() {
    let (_guard, d0) = devices();
    const BYTES: usize = 64 << 10;
    const RANGES: usize = ffi::MAX_MEM_UCE_INFO_ARRAY_SIZE as usize + 4;
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, None);
        let s = stream(&d0, Strategy::EventPoll);
        let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
        for at in 0..RANGES {
            inject(&block, at * 256, 16);
        }
        drop(fails_with_the_memory_error(&s, block, &what));
        let stats = settled(&pool, &what);
        assert_eq!(stats.repaired + stats.quarantined, 1, "{what}: {stats:?}");
        // Whatever the pool decided, no request gets memory with an error left in it.
        let next = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
        let next = run(s.memset(next, 5))
            .unwrap_or_else(|e| panic!("{what}: a block with errors was handed out: {}", e.error));
        assert!(run(s.download(next)).unwrap().iter().all(|&b| b == 5));
        drop(pool);
        until_released(&what, || uce_ranges(&d0).is_empty());
    }
}

/// A bounded pool at capacity, a request queued behind it, and the block holding the whole
/// capacity quarantined on its return: "quarantined blocks hold no room", so the queued
/// request is served with a new block (never the bad one) rather than waiting for good. Both
/// backends, every strategy; the counters add up and stay within the capacity.
#[test]
fn a_request_queued_at_capacity_is_served_when_the_block_is_quarantined() {
    let (_guard, d0) = devices();
    const BYTES: usize = 4096;
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, Some(BYTES));
            let s = stream(&d0, strategy);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            let bad = block.as_raw();
            // Reaching past the block: not its alone to repair, so quarantined.
            inject(&block, BYTES - 16, 32);
            let block = fails_with_the_memory_error(&s, block, &what);
            let served = run(async {
                let queued = pool.alloc::<u8>(&s, BYTES);
                let mut queued = std::pin::pin!(queued);
                assert!(polled_once(queued.as_mut()).is_pending(), "{what}");
                assert_eq!(pool.stats().cache.waiters, 1, "{what}");
                drop(block);
                queued.await.unwrap()
            });
            assert_ne!(served.as_raw(), bad, "{what}: the bad block came back");
            let served = run(s.memset(served, 1)).unwrap();
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.quarantined, stats.quarantined_bytes),
                (1, BYTES),
                "{what}"
            );
            adds_up(&stats, Some(BYTES), &what);
            drop((served, pool));
            until_released(&what, || uce_ranges(&d0).is_empty());
        }
    }
}

/// Many bad blocks at once, more of them than one listing holds: every one is settled
/// (repaired or quarantined, none left awaiting), the counters add up, and none of the bad
/// memory serves a request: the same number of requests afterwards all work. Both backends.
#[test]
fn many_bad_blocks_at_once_are_all_settled_and_none_serves_again_unrepaired() {
    let (_guard, d0) = devices();
    const BYTES: usize = 4096;
    const BLOCKS: usize = ffi::MAX_MEM_UCE_INFO_ARRAY_SIZE as usize + 8;
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, None);
        let s = stream(&d0, Strategy::EventPoll);
        let blocks: Vec<_> = (0..BLOCKS)
            .map(|_| run(pool.alloc::<u8>(&s, BYTES)).unwrap())
            .collect();
        // Every other one reaches past its block: quarantined.
        for (i, block) in blocks.iter().enumerate() {
            match i % 2 {
                0 => inject(block, 128, 64),
                _ => inject(block, BYTES - 16, 32),
            }
        }
        // All in flight together; each dropped with its failure.
        let ops: Vec<_> = blocks.into_iter().map(|b| s.memset(b, 1)).collect();
        let failed = run(async {
            let mut failed = 0;
            for op in ops {
                failed += usize::from(op.await.is_err());
            }
            failed
        });
        assert_eq!(failed, BLOCKS, "{what}");
        let stats = settled(&pool, &what);
        assert_eq!(
            stats.repaired + stats.quarantined,
            BLOCKS as u64,
            "{what}: {stats:?}"
        );
        assert!(
            stats.quarantined >= (BLOCKS / 2) as u64,
            "{what}: {stats:?}"
        );
        adds_up(&stats, None, &what);
        let again: Vec<_> = (0..BLOCKS)
            .map(|_| run(pool.alloc::<u8>(&s, BYTES)).unwrap())
            .collect();
        for block in again {
            run(s.memset(block, 2)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
        }
        drop(pool);
        until_released(&what, || uce_ranges(&d0).is_empty());
    }
}

/// `reserve`'s "makes sure `count` blocks are cached; returns the bytes of the blocks it
/// reserved", asked for more than the device holds (20 blocks of 4 MiB on a 64 MiB device):
/// it may fail (out of memory, the blocks it allocated freed again, so that a failed reserve
/// does not leave the device full), but what it reports reserved must be cached. A break: its
/// out-of-memory retry frees the blocks it just reserved to make room for the next, and it
/// reports 80 MiB reserved with a few cached. Both backends.
#[test]
fn a_reserve_beyond_the_device_never_reports_blocks_it_freed_itself() {
    let (_guard, d0) = devices();
    const BYTES: usize = 4 << 20;
    const COUNT: usize = 20;
    let baseline = live_memory(&d0);
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, None);
        let s = stream(&d0, Strategy::EventPoll);
        let reserved = run(pool.reserve(&s, COUNT, BYTES));
        let stats = pool.stats().cache;
        match reserved {
            Ok(bytes) => assert!(
                stats.cached >= bytes,
                "{what}: reported {bytes} bytes reserved, {} cached",
                stats.cached
            ),
            Err(err) => {
                assert!(err.is_out_of_memory(), "{what}: {err}");
                assert_eq!(stats.reserved, 0, "{what}: kept {stats:?}");
            }
        }
        adds_up(&stats, None, &what);
        // The trim gives all of it back, and the counters say so.
        pool.trim().unwrap();
        let stats = pool.stats().cache;
        assert_eq!((stats.reserved, stats.cached), (0, 0), "{what}");
        drop(pool);
        until_released(&what, || within(live_memory(&d0), baseline));
    }
}

/// A peer copy failing on a memory error of its source's device: the source (a pool block of
/// device 1 with an error inside it) is repaired, and the destination (a pool block of device
/// 0, whose memory is sound) is examined against device 0's list and cached as it is, neither
/// quarantined nor repaired; both serve again. Both backends, every strategy.
#[test]
fn a_peer_copy_failing_on_its_sources_memory_error_repairs_the_source_alone() {
    let (_guard, d0, d1) = both_devices();
    const BYTES: usize = 4096;
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let (p0, p1) = (
                device_pool(&d0, backend, None),
                device_pool(&d1, backend, None),
            );
            let (s0, s1) = (stream(&d0, strategy), stream(&d1, strategy));
            let src = run(p1.alloc::<u8>(&s1, BYTES)).unwrap();
            let dst = run(p0.alloc::<u8>(&s0, BYTES)).unwrap();
            let (src_at, dst_at) = (src.as_raw(), dst.as_raw());
            inject(&src, 512, 64);
            let access = d0.device().enable_peer_access(&d1.device()).unwrap();
            let err = run(s0.copy_d2d(src, dst)).unwrap_err();
            drop(access);
            assert!(err.error.is_memory_error(), "{what}: {}", err.error);
            drop(err);
            let (st0, st1) = (settled(&p0, &what), settled(&p1, &what));
            assert_eq!(
                (st0.repaired, st0.quarantined, st0.cached),
                (0, 0, BYTES),
                "{what}"
            );
            assert_eq!(
                (st1.repaired, st1.quarantined, st1.cached),
                (1, 0, BYTES),
                "{what}"
            );
            let again = run(p1.alloc::<u8>(&s1, BYTES)).unwrap();
            assert_eq!(again.as_raw(), src_at, "{what}");
            run(s1.memset(again, 4)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            let again = run(p0.alloc::<u8>(&s0, BYTES)).unwrap();
            assert_eq!(again.as_raw(), dst_at, "{what}");
            run(s0.memset(again, 4)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            assert_eq!(uce_ranges(&d1).len(), 0, "{what}");
        }
    }
}

/// An error that strikes a block while it is cached (no operation of it failed): the next
/// owner's operation fails, and the block returned after it is repaired, not cached with its
/// error; a reserve, a quarantine and a trim in between keep the counters adding up within
/// the capacity. Both backends.
#[test]
fn an_error_striking_a_cached_block_is_repaired_after_its_next_owner_fails() {
    let (_guard, d0) = devices();
    const BYTES: usize = 4096;
    const CAPACITY: usize = 4 * BYTES;
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, Some(CAPACITY));
        let s = stream(&d0, Strategy::EventPoll);
        assert_eq!(
            run(pool.reserve(&s, 2, BYTES)).unwrap(),
            2 * BYTES,
            "{what}"
        );
        adds_up(&pool.stats().cache, Some(CAPACITY), &what);
        // One of them goes bad in the cache: inject through a block, then give it back idle.
        let a = pool.try_alloc::<u8>(&s, BYTES).unwrap().unwrap();
        let b = pool.try_alloc::<u8>(&s, BYTES).unwrap().unwrap();
        let bad = a.as_raw();
        drop(a);
        let a = pool.try_alloc::<u8>(&s, BYTES).unwrap().unwrap();
        assert_eq!(a.as_raw(), bad, "{what}: the cache is a stack");
        inject(&a, 0, 64);
        drop(a);
        // The other one is quarantined.
        inject(&b, BYTES - 8, 16);
        drop(fails_with_the_memory_error(&s, b, &what));
        let stats = settled(&pool, &what);
        assert_eq!(
            (stats.quarantined, stats.cached),
            (1, BYTES),
            "{what}: {stats:?}"
        );
        adds_up(&stats, Some(CAPACITY), &what);
        // The reserve fills the capacity again around the quarantined block.
        assert_eq!(
            run(pool.reserve(&s, 4, BYTES)).unwrap(),
            4 * BYTES,
            "{what}"
        );
        let stats = pool.stats().cache;
        assert_eq!(stats.cached, CAPACITY, "{what}: {stats:?}");
        adds_up(&stats, Some(CAPACITY), &what);
        // The bad cached block reaches an owner whose memset fails; it comes back repaired.
        let mut failed = 0;
        let mut held = Vec::new();
        for _ in 0..4 {
            let block = pool.try_alloc::<u8>(&s, BYTES).unwrap().unwrap();
            match run(s.memset(block, 6)) {
                Ok(block) => held.push(block),
                Err(err) => {
                    assert!(err.error.is_memory_error(), "{what}");
                    failed += 1;
                }
            }
        }
        assert_eq!(failed, 1, "{what}");
        drop(held);
        let stats = settled(&pool, &what);
        assert_eq!(
            (stats.repaired, stats.quarantined),
            (1, 1),
            "{what}: {stats:?}"
        );
        adds_up(&stats, Some(CAPACITY), &what);
        assert_eq!(pool.trim_to(BYTES).unwrap(), CAPACITY - BYTES, "{what}");
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.reserved, stats.quarantined_bytes),
            (BYTES, BYTES),
            "{what}"
        );
        adds_up(&stats, Some(CAPACITY), &what);
        for _ in 0..4 {
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            run(s.memset(block, 8)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
        }
        drop(pool);
        until_released(&what, || uce_ranges(&d0).is_empty());
    }
}

/// Two requests out of memory at once on the runtime pool, each of 24 MiB, while its cache
/// holds the device's 48 MiB and more, idle: the first frees the cache and waits for the
/// frees (the device held); the second, finding nothing left to free, must not fail while
/// those frees are on their way: there is room for both once they run. Every strategy.
#[test]
fn a_second_request_out_of_memory_while_the_first_drains_the_cache_is_served_too() {
    let (_guard, d0) = devices();
    let baseline = live_memory(&d0);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s, t) = (stream(&d0, strategy), stream(&d0, strategy));
        let pool = pool_holding_the_device(&d0, &s);
        let hold = sim::hold(&d0.device()).unwrap();
        let (a, b) = {
            let mut first = std::pin::pin!(pool.alloc::<u8>(&s, 24 << 20));
            assert!(polled_once(first.as_mut()).is_pending(), "{what}");
            assert_eq!(pool.stats().cache.cached, 0, "{what}: the cache was freed");
            let mut second = std::pin::pin!(pool.alloc::<u8>(&t, 24 << 20));
            let early = polled_once(second.as_mut());
            hold.release().unwrap();
            run(async {
                let a = first.await;
                let b = match early {
                    std::task::Poll::Ready(b) => b,
                    std::task::Poll::Pending => second.await,
                };
                (a, b)
            })
        };
        a.unwrap_or_else(|e| panic!("{what}: the first: {e}"));
        b.unwrap_or_else(|e| {
            panic!("{what}: the second failed while the frees were on their way: {e}")
        });
        drop((pool, s, t));
        until_released(&what, || within(live_memory(&d0), baseline));
    }
}

/// A memory error met through a cast of a view of one half of a split pool block (the other
/// half still held): the whole block is examined once every part is gone, and repaired; the
/// failure is met on a thread whose Tokio runtime and pool handle are dropped before that.
/// Nothing hangs, nothing is left listed or allocated. Both backends, every strategy.
#[test]
fn a_memory_error_through_a_cast_view_of_a_part_settles_the_whole_block_after_the_pool_is_gone() {
    let (_guard, d0) = devices();
    const BYTES: usize = 8192;
    let baseline = live_memory(&d0);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            inject(&block, BYTES / 2 + 256, 64);
            let (left, right) = block.into_halves(BYTES / 2).unwrap();
            let view = right.view(128..1024).unwrap().cast::<u32>().unwrap();
            let (repaired, stats) = {
                let pool = pool.clone();
                let s = s.clone();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let err = runtime.block_on(s.memset(view, 0)).unwrap_err();
                    assert!(err.error.is_memory_error(), "{}", err.error);
                    drop(runtime);
                    drop(err);
                    // Not examined while the left half is held.
                    let stats = pool.stats().cache;
                    drop(pool);
                    (stats.repaired, stats)
                })
                .join()
                .unwrap()
            };
            assert_eq!(repaired, 0, "{what}: {stats:?}");
            let watched = pool.clone();
            drop(pool);
            let left = run(s.memset(left, 1)).unwrap();
            drop(left);
            let stats = settled(&watched, &what);
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.cached),
                (1, 0, BYTES),
                "{what}"
            );
            drop((watched, s));
            until_released(&what, || {
                uce_ranges(&d0).is_empty() && within(live_memory(&d0), baseline)
            });
        }
    }
}

/// `reserve` while requests queue at a bounded pool's capacity: it gives way to them (fails
/// for want of room rather than take what they wait for), and once the blocks in use come
/// back the queued requests are served in order and a reserve then fills what is left; the
/// counters add up throughout. Both backends.
#[test]
fn a_reserve_gives_way_to_requests_queued_at_capacity() {
    let (_guard, d0) = devices();
    const BYTES: usize = 4096;
    const CAPACITY: usize = 3 * BYTES;
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, Some(CAPACITY));
        let s = stream(&d0, Strategy::EventPoll);
        let held: Vec<_> = (0..3)
            .map(|_| run(pool.alloc::<u8>(&s, BYTES)).unwrap())
            .collect();
        run(async {
            let mut first = std::pin::pin!(pool.alloc::<u8>(&s, BYTES));
            let mut second = std::pin::pin!(pool.alloc::<u8>(&s, 2 * BYTES));
            assert!(polled_once(first.as_mut()).is_pending(), "{what}");
            assert!(polled_once(second.as_mut()).is_pending(), "{what}");
            let refused = pool.reserve(&s, 1, BYTES).await.unwrap_err();
            assert!(!refused.is_out_of_memory(), "{what}: {refused}");
            assert_eq!(pool.stats().cache.waiters, 2, "{what}");
            adds_up(&pool.stats().cache, Some(CAPACITY), &what);
            drop(held);
            let first = first.await.unwrap();
            drop(first);
            let second = second.await.unwrap();
            let stats = pool.stats().cache;
            assert_eq!(stats.waiters, 0, "{what}");
            adds_up(&stats, Some(CAPACITY), &what);
            // One 4 KiB block fits beside the 8 KiB one.
            assert_eq!(pool.reserve(&s, 1, BYTES).await.unwrap(), BYTES, "{what}");
            assert!(pool.reserve(&s, 2, BYTES).await.is_err(), "{what}");
            adds_up(&pool.stats().cache, Some(CAPACITY), &what);
            drop(second);
        });
        pool.trim().unwrap();
        assert_eq!(pool.stats().cache.reserved, 0, "{what}");
    }
}
