//! The pool machinery npu-stream builds on is public (hidden from the documentation), so its
//! safe calls can be made out of turn: room given back that was never granted, a forged grant
//! filled, a block the cache never lent given back or returned (also while a waiter is being
//! served). None of that may panic or leave the cache refusing requests; its counters stop at
//! zero (or at the top) instead of wrapping. (Before, each call underflowed a counter: a panic
//! in a debug build, and in a release build a cache whose `growing` had wrapped refused every
//! request for good.)

use std::sync::Arc;

use npu_core::UseList;
use npu_mem::pool_cache::{Cache, Granted, Seal, Source};

/// A source of plain sizes: a block is its own byte count.
struct Sizes;

// SAFETY: `free` drops integers; it blocks on nothing.
unsafe impl Source for Sizes {
    type Block = usize;
    const NAME: &'static str = "Sizes::alloc";
    // SAFETY: a test of npu-mem's own.
    const SEAL: Seal = unsafe { Seal::npu_rs() };

    fn block_bytes(block: &usize) -> usize {
        *block
    }

    fn free(&self, _blocks: Vec<usize>) {}
}

fn cache() -> Arc<Cache<Sizes>> {
    Arc::new(Cache::new(Sizes, Some(8192)))
}

/// An 8 KiB cache with at most 4 KiB in use still grants a 4 KiB request at once (and takes
/// the grant back), and its counters read sane.
fn still_serves(cache: &Arc<Cache<Sizes>>, what: &str) {
    match cache.try_grant(4096) {
        Some(Granted::Room(room)) => cache.room_unused(room),
        Some(Granted::Block(block)) => cache.give_back(block, &mut UseList::new()),
        None => panic!("{what}: a 4 KiB request in an 8 KiB cache is refused"),
    }
    let stats = cache.stats();
    assert!(
        stats.allocated <= 8192 && stats.cached <= 8192,
        "{what}: {stats:?}"
    );
}

#[test]
fn giving_back_room_that_was_never_granted_leaves_the_cache_serving() {
    let cache = cache();
    cache.room_unused(4096);
    still_serves(&cache, "room_unused");
}

#[test]
fn filling_a_forged_grant_leaves_the_cache_serving() {
    let cache = cache();
    assert_eq!(cache.fill(Granted::Room(4096), Ok).unwrap(), 4096);
    still_serves(&cache, "fill");
    let cache = self::cache();
    cache.room_filled_in(4096, std::time::Duration::ZERO);
    still_serves(&cache, "room_filled_in");
}

#[test]
fn a_block_the_cache_never_lent_given_back_or_returned_leaves_it_serving() {
    let cache = cache();
    cache.give_back(4096, &mut UseList::new());
    still_serves(&cache, "give_back");
    cache.returned(2048);
    still_serves(&cache, "returned");
}

/// A waiter is sent a block, a block the cache never lent is given back, and the waiter goes
/// away before it takes what it was sent, which the cache takes back as a grant untaken.
#[test]
fn a_waiter_gone_after_a_forged_give_back_leaves_the_cache_serving() {
    let cache = cache();
    let lent = cache.fill(cache.try_grant(8192).unwrap(), Ok).unwrap();
    let mut waiting = tokio_test::task::spawn(cache.grant(8192));
    assert!(waiting.poll().is_pending(), "the whole capacity is in use");
    // Sent to the waiter, and so counted in use again.
    cache.give_back(lent, &mut UseList::new());
    cache.give_back(8192, &mut UseList::new());
    drop(waiting);
    still_serves(&cache, "a grant untaken");
}

/// Sizes no block can have: a counter that would pass the top stops there.
#[test]
fn sizes_at_the_top_of_the_range_leave_the_cache_serving() {
    let cache = cache();
    cache.room_filled_in(usize::MAX, std::time::Duration::ZERO);
    cache.give_back(usize::MAX, &mut UseList::new());
    still_serves(&cache, "sizes at the top");
    let unbounded = Arc::new(Cache::new(Sizes, None));
    for _ in 0..2 {
        assert!(matches!(
            unbounded.try_grant(usize::MAX),
            Some(Granted::Room(usize::MAX))
        ));
    }
}
