//! The pool machinery npu-stream builds on is public (hidden from the documentation), so its
//! safe calls can be made out of turn: room given back that was never granted, a forged grant
//! filled, a block the cache never lent given back or returned. None of that may panic or
//! leave the cache refusing requests; its counters stop at zero instead of wrapping. (Before,
//! each call underflowed a counter: a panic in a debug build, and in a release build a
//! cache whose `growing` had wrapped refused every request for good.)

use std::sync::Arc;

use npu_core::UseList;
use npu_mem::pool_cache::{Cache, Granted, Source};

/// A source of plain sizes: a block is its own byte count.
struct Sizes;

// SAFETY: `free` drops integers; it blocks on nothing.
unsafe impl Source for Sizes {
    type Block = usize;
    const NAME: &'static str = "Sizes::alloc";

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
