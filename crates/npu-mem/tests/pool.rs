//! The pinned pool: capacity backpressure, FIFO order, cancelled waits, and stats that add up.
//!
//! Tests that hold a device's task gate use device 1, and only one test does, so no other test
//! in this process can open the gate under it.

mod common;

use std::task::Poll;

use npu_core::{Context, Device};
use npu_mem::{DeviceBuffer, HostSlice, Memory, PinnedPool, PoolStats, PooledBuffer};
use npu_stream::Stream;
use tokio_test::task::spawn;

const MIB: usize = 1 << 20;

fn context(device: u32) -> Context {
    Device::open(device).unwrap().primary_context().clone()
}

fn bounded(capacity: usize) -> PinnedPool {
    PinnedPool::builder(&context(0))
        .capacity(capacity)
        .build()
        .unwrap()
}

fn block(pool: &PinnedPool, len: usize) -> PooledBuffer<u8> {
    pool.try_alloc(len).unwrap().expect("room for the block")
}

fn assert_adds_up(stats: &PoolStats) {
    assert_eq!(
        stats.reserved,
        stats.allocated + stats.awaiting_bytes + stats.cached,
        "{stats:?}"
    );
}

#[tokio::test]
async fn every_allocation_is_aligned_for_dma() {
    let pool = PinnedPool::new(&context(0));
    let mut blocks = Vec::new();
    for len in [1, 63, 4096, 4097, 65_537, MIB + 1, 3 * MIB] {
        let block = pool.alloc::<u8>(len).await.unwrap();
        assert_eq!(block.host_ptr() as usize % 64, 0, "{len} bytes");
        assert!(block.block_bytes() >= len);
        blocks.push(block);
    }
    let wide = pool.alloc::<u64>(1000).await.unwrap();
    assert_eq!(wide.host_ptr() as usize % align_of::<u64>(), 0);
}

#[tokio::test]
async fn empty_oversized_and_over_capacity_requests_are_typed_errors() {
    let pool = bounded(2 * MIB);
    let empty = pool.alloc::<u8>(0).await.unwrap_err();
    assert!(empty.to_string().contains("PinnedPool::alloc"), "{empty}");
    assert!(empty.to_string().contains("at least 1"), "{empty}");

    let oversized = pool.alloc::<u64>(usize::MAX / 4).await.unwrap_err();
    assert!(oversized.to_string().contains("isize::MAX"), "{oversized}");

    let too_big = pool.alloc::<u8>(2 * MIB + 1).await.unwrap_err();
    assert!(too_big.to_string().contains("capacity"), "{too_big}");
    assert!(pool.try_alloc::<u8>(3 * MIB).is_err());
    assert_eq!(pool.stats(), PoolStats::default(), "nothing was allocated");
}

#[test]
fn at_capacity_alloc_waits_and_gets_the_returned_block() {
    let pool = bounded(2 * MIB);
    let first = block(&pool, MIB);
    let second = block(&pool, MIB);
    assert!(pool.try_alloc::<u8>(1).unwrap().is_none(), "full");

    let mut waiter = spawn(pool.alloc::<u8>(MIB));
    assert!(waiter.poll().is_pending());
    assert_eq!(pool.stats().waiters, 1);

    let returned = first.host_ptr();
    drop(first);
    assert!(waiter.is_woken());
    let Poll::Ready(Ok(third)) = waiter.poll() else {
        panic!("the waiter should have the returned block");
    };
    assert_eq!(third.host_ptr(), returned, "handed over, not re-pinned");
    let stats = pool.stats();
    assert_eq!((stats.hits, stats.misses, stats.waiters), (1, 2, 0));
    assert_eq!(stats.reserved, 2 * MIB);
    drop((second, third));
}

#[test]
fn waiters_are_served_in_order_and_the_head_is_not_overtaken() {
    let pool = bounded(2 * MIB);
    let (a, b) = (block(&pool, MIB), block(&pool, MIB));
    let mut big = spawn(pool.alloc::<u8>(2 * MIB));
    let mut small = spawn(pool.alloc::<u8>(MIB));
    assert!(big.poll().is_pending() && small.poll().is_pending());

    drop(a);
    assert!(
        small.poll().is_pending(),
        "the small request must not overtake the big one"
    );
    assert!(big.poll().is_pending());
    drop(b);
    let Poll::Ready(Ok(big_block)) = big.poll() else {
        panic!("both blocks are back: the big request fits after evicting them");
    };
    assert_eq!(big_block.block_bytes(), 2 * MIB);
    assert_eq!(pool.stats().evictions, 2);
    assert!(small.poll().is_pending());

    drop(big_block);
    assert!(matches!(small.poll(), Poll::Ready(Ok(_))));
    assert_adds_up(&pool.stats());
}

#[test]
fn cancelling_a_waiting_alloc_loses_nothing() {
    let pool = bounded(MIB);
    let held = block(&pool, MIB);
    let mut cancelled = spawn(pool.alloc::<u8>(MIB));
    let mut next = spawn(pool.alloc::<u8>(MIB));
    assert!(cancelled.poll().is_pending() && next.poll().is_pending());

    drop(cancelled);
    assert_eq!(
        pool.stats().waiters,
        1,
        "the cancelled request left the queue"
    );
    drop(held);
    let Poll::Ready(Ok(served)) = next.poll() else {
        panic!("the next waiter gets the block");
    };

    // Cancelled after being served but before taking the block: the block goes back.
    let mut abandoned = spawn(pool.alloc::<u8>(MIB));
    assert!(abandoned.poll().is_pending());
    drop(served);
    assert!(abandoned.is_woken());
    drop(abandoned);
    let stats = pool.stats();
    assert_eq!((stats.allocated, stats.cached, stats.waiters), (0, MIB, 0));
    assert_eq!(stats.reserved, MIB, "no capacity leaked");
    assert!(
        block(&pool, MIB).block_bytes() == MIB,
        "and it can be allocated again"
    );
}

#[test]
fn cached_blocks_of_other_sizes_are_evicted_to_make_room() {
    let pool = bounded(3 * MIB);
    drop(block(&pool, 2 * MIB));
    drop(block(&pool, MIB));
    assert_eq!(pool.stats().cached, 3 * MIB);
    let mid = block(&pool, MIB + MIB / 2);
    let stats = pool.stats();
    assert_eq!(stats.evictions, 1, "the 2 MiB block alone makes the room");
    assert_eq!((stats.cached, stats.allocated), (MIB, mid.block_bytes()));
    assert_eq!(stats.frees, 1);
}

#[test]
fn trim_returns_cached_blocks_to_the_os() {
    let pool = PinnedPool::new(&context(0));
    let kept = block(&pool, 4096);
    drop(block(&pool, 8192));
    drop(block(&pool, MIB));
    assert_eq!(pool.trim(), 8192 + MIB);
    let stats = pool.stats();
    assert_eq!((stats.reserved, stats.cached, stats.frees), (4096, 0, 2));
    drop(kept);
}

#[tokio::test]
async fn stats_add_up_while_blocks_await_device_work() {
    let ctx = context(1);
    let pool = PinnedPool::new(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    let mut allocations = 0;

    let mut busy = pool.alloc::<u8>(MIB).await.unwrap();
    busy.fill(1);
    let idle = pool.alloc::<u8>(4096).await.unwrap();
    allocations += 2;
    npu_sim::control::hold(1).unwrap();
    let copy = stream.copy_h2d(busy, DeviceBuffer::<u8>::new(&ctx, MIB).unwrap());
    let done = copy.completion().clone();
    // The dropped copy keeps its block until the device is done: still allocated.
    drop(copy);
    // A block dropped while an operation it does not belong to is recorded against it awaits
    // that operation's completion.
    idle.record_use(&done);
    drop(idle);

    let stats = pool.stats();
    assert_adds_up(&stats);
    assert_eq!((stats.awaiting_blocks, stats.awaiting_bytes), (1, 4096));
    assert_eq!((stats.allocated, stats.cached), (MIB, 0));
    let fresh = pool.alloc::<u8>(MIB).await.unwrap();
    allocations += 1;
    assert_eq!(pool.stats().misses, 3, "the busy block was not reused");

    npu_sim::control::release(1).unwrap();
    done.wait().await.unwrap();
    common::await_releases(&pool);
    let stats = pool.stats();
    assert_adds_up(&stats);
    assert_eq!(stats.awaiting_blocks, 0);
    assert_eq!(stats.cached, MIB + 4096);
    assert_eq!(stats.hits + stats.misses, allocations);
    assert_eq!(stats.peak_allocated, 2 * MIB);
    assert_eq!(stats.peak_reserved, 2 * MIB + 4096);
    drop(fresh);
    assert_eq!(pool.trim(), 2 * MIB + 4096);
    assert_eq!(pool.stats().reserved, 0);
}

/// A reserve hands nothing out, under a capacity as without one: the blocks it finds cached
/// are no hits, the ones it pins never count as allocated, and it makes room by evicting
/// other sizes, never the size it reserves.
#[test]
fn a_reserve_counts_no_hit_and_no_allocation() {
    let pool = bounded(4 * MIB);
    drop(block(&pool, 2 * MIB));
    for _ in 0..2 {
        assert_eq!(pool.reserve(3, MIB).unwrap(), 3 * MIB);
        let stats = pool.stats();
        assert_adds_up(&stats);
        let counts = (stats.hits, stats.misses, stats.cached, stats.evictions);
        assert_eq!(counts, (0, 4, 3 * MIB, 1), "the 2 MiB block made room");
        assert_eq!(stats.peak_allocated, 2 * MIB, "only the block handed out");
    }
    let err = pool.reserve(5, MIB).unwrap_err();
    assert!(err.to_string().contains("room for 4 of 5 blocks"), "{err}");
    assert_eq!(pool.stats().cached, 4 * MIB, "its own size kept");
}

/// The capacity holds when the largest size's free list was emptied by a hit: the room for a
/// third size comes from evicting the smaller cached block, never from over the capacity.
#[test]
fn the_capacity_holds_after_a_hit_empties_the_largest_size() {
    let pool = bounded(3 * MIB);
    drop(block(&pool, 2 * MIB));
    let small = block(&pool, MIB);
    let large = block(&pool, 2 * MIB);
    assert_eq!(pool.stats().hits, 1);
    drop(small);
    let third = block(&pool, MIB / 2);
    let stats = pool.stats();
    assert_adds_up(&stats);
    assert!(stats.reserved <= 3 * MIB, "{stats:?}");
    assert_eq!(stats.evictions, 1, "{stats:?}");
    drop((large, third));
}

/// A waker that panics when woken: user code the pool's settled-wake must contain.
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        panic!("a hostile waker");
    }
}

#[tokio::test]
async fn settled_waits_for_every_block_and_a_panicking_waiter_harms_no_other() {
    let pool = bounded(MIB);
    let (first, second) = (block(&pool, 4096), block(&pool, 4096));
    let mut hostile = Box::pin(pool.settled());
    let waker = std::task::Waker::from(std::sync::Arc::new(PanickingWaker));
    let polled = hostile
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker));
    assert!(polled.is_pending(), "two blocks are out");
    let mut settled = spawn(pool.settled());
    assert!(settled.poll().is_pending());
    drop(first);
    assert!(!settled.is_woken(), "one block is still out");
    // The hostile wake-up runs on this thread, contained: the return completes and the
    // other waiter is woken.
    drop(second);
    assert!(settled.is_woken());
    assert_eq!(settled.poll(), Poll::Ready(()));
    assert_eq!(pool.stats().allocated, 0);
    // A wait begun once the pool is settled resolves at its first poll.
    assert_eq!(spawn(pool.settled()).poll(), Poll::Ready(()));
}
