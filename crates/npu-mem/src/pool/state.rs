//! The pool's bookkeeping: free lists, byte accounting, and the FIFO queue of waiting
//! requests.
//!
//! Everything here runs under the pool's lock, so none of it calls ACL or wakes a task: it
//! decides, and returns what the caller must do after unlocking (blocks to free, grants to
//! send). That keeps "no ACL call while a pool lock is held" true by construction. It is
//! generic over the block and the waiter's reply channel so its rules are tested without a
//! device.

use std::collections::{BTreeMap, VecDeque};

/// What a request is given: a cached block, or the right to allocate a new one of the
/// given size within the capacity.
#[derive(Debug, PartialEq, Eq)]
pub enum Granted<B> {
    /// A cached block of the request's class.
    Block(B),
    /// Room for a new block of this many bytes.
    Room(usize),
}

/// What a `reserve` does next, decided under the lock.
#[derive(Debug, PartialEq, Eq)]
pub enum Reserving {
    /// The blocks asked for are cached.
    Done,
    /// Room for one more block of the class, to be filled and cached
    /// ([`Cache::room_reserved_in`](super::cache::Cache::room_reserved_in)) or given back.
    Room,
    /// No room for another block; this many of the class are cached.
    Full(usize),
}

/// Takes `by` from one of the counters below. The cache is public (npu-stream builds on it),
/// so its safe calls can come out of turn (room that was never granted, a block it never
/// lent, a size no block has): a counter then stops at zero, or at the top ([`more`]),
/// rather than wrapping, which would panic in a debug build and in a release build leave the
/// cache refusing every request for good. Its own pools never take more than they added.
fn less(counter: &mut usize, by: usize) {
    *counter = counter.saturating_sub(by);
}

/// Adds `by` to one of the counters below, stopping at the top (see [`less`]).
fn more(counter: &mut usize, by: usize) {
    *counter = counter.saturating_add(by);
}

/// The byte and event counters `PoolStats` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) allocated: usize,
    pub(crate) cached: usize,
    pub(crate) awaiting_bytes: usize,
    pub(crate) awaiting_blocks: usize,
    /// Room granted for allocations in progress (counted against the capacity only).
    pub(crate) growing: usize,
    pub(crate) peak_allocated: usize,
    pub(crate) peak_reserved: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) evictions: u64,
    pub(crate) waiters: usize,
    /// Blocks whose uncorrectable memory errors were repaired before they were cached again.
    pub(crate) repaired: u64,
    /// Blocks quarantined with an error that was not repaired, and their bytes (held outside
    /// `reserved`, so outside the capacity).
    pub(crate) quarantined: u64,
    pub(crate) quarantined_bytes: usize,
}

impl Counts {
    /// Pinned bytes the pool holds: in use, awaiting events, cached.
    pub(crate) fn reserved(&self) -> usize {
        self.allocated
            .saturating_add(self.awaiting_bytes)
            .saturating_add(self.cached)
    }

    fn held(&self) -> usize {
        self.reserved().saturating_add(self.growing)
    }

    fn note_peaks(&mut self) {
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.peak_reserved = self.peak_reserved.max(self.reserved());
    }
}

struct Waiter<W> {
    id: u64,
    class: usize,
    reply: W,
}

/// Free lists, counters and waiters of one pool.
pub(crate) struct State<B, W> {
    capacity: Option<usize>,
    /// Cached blocks by size class; each list is a stack, so the most recently returned
    /// (cache-warm) block is reused first.
    free: BTreeMap<usize, Vec<B>>,
    waiters: VecDeque<Waiter<W>>,
    next_waiter: u64,
    counts: Counts,
    /// Blocks with an unrepaired memory error: never handed out again, nor given back to the
    /// runtime (which could hand them to this pool again) before the pool's end.
    quarantined: Vec<B>,
}

impl<B, W> State<B, W> {
    pub(crate) fn new(capacity: Option<usize>) -> Self {
        State {
            capacity,
            free: BTreeMap::new(),
            waiters: VecDeque::new(),
            next_waiter: 0,
            counts: Counts::default(),
            quarantined: Vec::new(),
        }
    }

    /// Whether every block is back: none handed out, awaiting its operations or examination,
    /// or being allocated for a grant.
    pub(crate) fn settled(&self) -> bool {
        let counts = &self.counts;
        counts.allocated == 0 && counts.awaiting_blocks == 0 && counts.growing == 0
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            waiters: self.waiters.len(),
            ..self.counts
        }
    }

    /// Asks for a block of `class` bytes without waiting. Requests are served in arrival
    /// order, so while anyone waits this gives nothing.
    pub(crate) fn try_request(&mut self, class: usize, evicted: &mut Vec<B>) -> Option<Granted<B>> {
        if !self.waiters.is_empty() {
            return None;
        }
        self.grant(class, evicted)
    }

    /// Queues a request for `class` bytes behind earlier ones, after
    /// [`try_request`](State::try_request) found nothing; returns the waiter's id. `reply` is
    /// what [`pump`](State::pump) hands back with its grant. Split from `try_request` so a
    /// caller makes its reply channel only when the request really waits.
    pub(crate) fn enqueue(&mut self, class: usize, reply: W) -> u64 {
        let id = self.next_waiter;
        self.next_waiter += 1;
        self.waiters.push_back(Waiter { id, class, reply });
        id
    }

    /// A cached block of `class` if one is free and nobody waits (the fast path of a hit:
    /// nothing to evict, nobody to serve).
    pub(crate) fn take_cached(&mut self, class: usize) -> Option<B> {
        if !self.waiters.is_empty() {
            return None;
        }
        let block = self.free.get_mut(&class)?.pop()?;
        self.counted_hit(class);
        Some(block)
    }

    /// Whether any request waits for capacity.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// Whether `bytes` more do not fit under the capacity beside what the pool holds: room
    /// for them would have to come from evicting cached blocks. Never for an unbounded pool.
    pub(crate) fn full_for(&self, bytes: usize) -> bool {
        self.capacity
            .is_some_and(|capacity| self.counts.held().saturating_add(bytes) > capacity)
    }

    fn counted_hit(&mut self, class: usize) {
        less(&mut self.counts.cached, class);
        more(&mut self.counts.allocated, class);
        self.counts.hits += 1;
        self.counts.note_peaks();
    }

    /// A cached block of `class`, or room for a new one (evicting cached blocks of other
    /// classes if that makes room), or nothing.
    fn grant(&mut self, class: usize, evicted: &mut Vec<B>) -> Option<Granted<B>> {
        if let Some(block) = self.free.get_mut(&class).and_then(Vec::pop) {
            self.counted_hit(class);
            return Some(Granted::Block(block));
        }
        // Nothing of `class` is cached, so the room may come from any cached block.
        if !self.make_room(class, None, evicted) {
            return None;
        }
        more(&mut self.counts.growing, class);
        Some(Granted::Room(class))
    }

    /// The next step of a `reserve` of `count` blocks of `class`: done once that many are
    /// cached, or room for one more (evicting cached blocks of other classes if that makes
    /// room, never of `class`, which the reserve is there to keep), or full. The cached blocks
    /// stay cached: a reserve hands nothing out, so it counts no hit and leaves
    /// `peak_allocated` alone. Like any request it gives way to queued waiters.
    pub(crate) fn reserve_next(
        &mut self,
        class: usize,
        count: usize,
        evicted: &mut Vec<B>,
    ) -> Reserving {
        let cached = self.free.get(&class).map_or(0, Vec::len);
        if cached >= count {
            return Reserving::Done;
        }
        if !self.waiters.is_empty() || !self.make_room(class, Some(class), evicted) {
            return Reserving::Full(cached);
        }
        more(&mut self.counts.growing, class);
        Reserving::Room
    }

    /// A reserve's room holds a new block: cached at once, never handed out (a miss, and
    /// pool memory, but not `allocated`).
    pub(crate) fn room_reserved(&mut self, block: B, class: usize) {
        less(&mut self.counts.growing, class);
        self.counts.misses += 1;
        self.cache(block, class);
        self.counts.note_peaks();
    }

    /// Whether `bytes` more fit under the capacity, evicting cached blocks (largest first,
    /// so the fewest frees make the room; none of the class `keep`) when that is enough.
    fn make_room(&mut self, bytes: usize, keep: Option<usize>, evicted: &mut Vec<B>) -> bool {
        let Some(capacity) = self.capacity else {
            return true;
        };
        if self.counts.held().saturating_add(bytes) <= capacity {
            return true;
        }
        let kept = keep.map_or(0, |class| {
            self.free
                .get(&class)
                .map_or(0, Vec::len)
                .saturating_mul(class)
        });
        let evictable = self.counts.cached.saturating_sub(kept);
        if (self.counts.held().saturating_sub(evictable)).saturating_add(bytes) > capacity {
            return false;
        }
        while self.counts.held().saturating_add(bytes) > capacity {
            let Some(block) = self.take_largest(keep) else {
                break;
            };
            self.counts.evictions += 1;
            evicted.push(block);
        }
        true
    }

    /// Takes a cached block of the largest class but `keep`.
    fn take_largest(&mut self, keep: Option<usize>) -> Option<B> {
        let (&class, blocks) = self
            .free
            .iter_mut()
            .rev()
            .find(|(class, blocks)| Some(**class) != keep && !blocks.is_empty())?;
        let block = blocks.pop();
        if blocks.is_empty() {
            self.free.remove(&class);
        }
        if block.is_some() {
            less(&mut self.counts.cached, class);
        }
        block
    }

    /// A new block filled granted room: it is now in use.
    pub(crate) fn room_filled(&mut self, class: usize) {
        less(&mut self.counts.growing, class);
        more(&mut self.counts.allocated, class);
        self.counts.misses += 1;
        self.counts.note_peaks();
    }

    /// Granted room went unused (the allocation failed, or nobody took the grant).
    pub(crate) fn room_unused(&mut self, class: usize) {
        less(&mut self.counts.growing, class);
    }

    /// A block's owner dropped it; it returns once its recorded operations complete.
    pub(crate) fn retire(&mut self, class: usize) {
        less(&mut self.counts.allocated, class);
        more(&mut self.counts.awaiting_bytes, class);
        more(&mut self.counts.awaiting_blocks, 1);
    }

    /// A block in use came back with no operation pending on it: cache it for reuse.
    pub(crate) fn released(&mut self, block: B, class: usize) {
        less(&mut self.counts.allocated, class);
        self.cache(block, class);
    }

    /// A grant whose requester went away before taking it.
    pub(crate) fn untaken(&mut self, granted: Granted<B>, class: usize) {
        match granted {
            Granted::Room(room) => self.room_unused(room),
            Granted::Block(block) => {
                less(&mut self.counts.allocated, class);
                self.counts.hits = self.counts.hits.saturating_sub(1);
                self.cache(block, class);
            }
        }
    }

    /// A retired block's operations have completed: cache it for reuse.
    pub(crate) fn returned(&mut self, block: B, class: usize) {
        less(&mut self.counts.awaiting_bytes, class);
        less(&mut self.counts.awaiting_blocks, 1);
        self.cache(block, class);
    }

    /// A retired block's memory errors were repaired: cached for reuse like any other.
    pub(crate) fn repaired(&mut self, block: B, class: usize) {
        self.counts.repaired += 1;
        self.returned(block, class);
    }

    /// A retired block has a memory error that was not repaired: kept out of use and out of
    /// the capacity for the rest of the pool's life, so the room it held serves new blocks.
    pub(crate) fn quarantine(&mut self, block: B, class: usize) {
        less(&mut self.counts.awaiting_bytes, class);
        less(&mut self.counts.awaiting_blocks, 1);
        self.counts.quarantined += 1;
        more(&mut self.counts.quarantined_bytes, class);
        self.quarantined.push(block);
    }

    /// The quarantined blocks, for freeing at the pool's end.
    pub(crate) fn take_quarantined(&mut self) -> Vec<B> {
        self.counts.quarantined_bytes = 0;
        std::mem::take(&mut self.quarantined)
    }

    fn cache(&mut self, block: B, class: usize) {
        more(&mut self.counts.cached, class);
        self.free.entry(class).or_default().push(block);
    }

    /// Removes a waiter that stopped waiting; false if it was already served.
    pub(crate) fn cancel(&mut self, id: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.id != id);
        self.waiters.len() != before
    }

    /// Serves waiters from the front of the queue for as long as the head can be served.
    /// The head is never overtaken: a small request behind a large one waits too, so large
    /// requests cannot starve.
    pub(crate) fn pump(&mut self, evicted: &mut Vec<B>) -> Vec<(W, Granted<B>)> {
        let mut served = Vec::new();
        while let Some(head) = self.waiters.front() {
            let Some(granted) = self.grant(head.class, evicted) else {
                break;
            };
            if let Some(head) = self.waiters.pop_front() {
                served.push((head.reply, granted));
            }
        }
        served
    }

    /// Takes up to `count` cached blocks of `class`, the most recently cached first, for
    /// freeing: the blocks a reserve that failed to allocate had cached itself.
    pub(crate) fn take_cached_of(&mut self, class: usize, count: usize) -> Vec<B> {
        let Some(blocks) = self.free.get_mut(&class) else {
            return Vec::new();
        };
        let taken = blocks.split_off(blocks.len().saturating_sub(count));
        if blocks.is_empty() {
            self.free.remove(&class);
        }
        less(&mut self.counts.cached, class.saturating_mul(taken.len()));
        taken
    }

    /// Takes every cached block of a class other than `keep`, for freeing.
    pub(crate) fn take_cached_except(&mut self, keep: usize) -> Vec<B> {
        let mut taken = Vec::new();
        while let Some(block) = self.take_largest(Some(keep)) {
            taken.push(block);
        }
        taken
    }

    /// Takes cached blocks, largest first (the fewest frees), until the pool holds at most
    /// `keep` bytes or nothing is cached, for freeing.
    pub(crate) fn trim_to(&mut self, keep: usize) -> Vec<B> {
        let mut taken = Vec::new();
        while self.counts.reserved() > keep {
            let Some(block) = self.take_largest(None) else {
                break;
            };
            taken.push(block);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// Blocks are labelled by a number; replies by a name.
    type Test = State<u32, &'static str>;

    /// A grant, or the id the request queued under (how `PinnedPool::alloc` asks).
    fn request(
        state: &mut Test,
        class: usize,
        reply: &'static str,
        evicted: &mut Vec<u32>,
    ) -> Result<Granted<u32>, u64> {
        state
            .try_request(class, evicted)
            .ok_or_else(|| state.enqueue(class, reply))
    }

    fn granted(state: &mut Test, class: usize, evicted: &mut Vec<u32>) -> Granted<u32> {
        state.try_request(class, evicted).expect("a grant")
    }

    /// Allocates a fresh block of `class` bytes (room, then filled).
    fn fresh(state: &mut Test, class: usize) {
        assert_eq!(granted(state, class, &mut Vec::new()), Granted::Room(class));
        state.room_filled(class);
    }

    fn free_block(state: &mut Test, label: u32, class: usize) {
        state.retire(class);
        state.returned(label, class);
    }

    #[test]
    fn a_block_released_idle_is_cached_at_once() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        state.released(4, MIB);
        let counts = state.counts();
        assert_eq!(
            (counts.allocated, counts.cached, counts.awaiting_blocks),
            (0, MIB, 0)
        );
        assert_eq!(granted(&mut state, MIB, &mut Vec::new()), Granted::Block(4));
    }

    /// What a failed reserve gives back: the most recently cached blocks of its class, no
    /// more than asked, none of another class; asking beyond what is cached (or for a class
    /// with nothing cached) takes what there is, and the counter stays true.
    #[test]
    fn a_failed_reserve_takes_back_only_its_own_class_and_count() {
        let mut state = Test::new(None);
        let mut evicted = Vec::new();
        for label in 1..=3 {
            assert_eq!(state.reserve_next(MIB, 3, &mut evicted), Reserving::Room);
            state.room_reserved(label, MIB);
        }
        assert_eq!(
            state.reserve_next(2 * MIB, 1, &mut evicted),
            Reserving::Room
        );
        state.room_reserved(9, 2 * MIB);
        assert_eq!(state.take_cached_of(MIB, 2), [2, 3]);
        assert_eq!(state.counts().cached, 3 * MIB);
        assert_eq!(state.take_cached_of(MIB, 5), [1]);
        assert!(state.take_cached_of(MIB, 1).is_empty());
        assert!(state.take_cached_of(4 * MIB, 1).is_empty());
        assert_eq!(state.counts().cached, 2 * MIB);
        assert_eq!(
            granted(&mut state, 2 * MIB, &mut evicted),
            Granted::Block(9)
        );
    }

    #[test]
    fn a_returned_block_is_reused_for_its_class() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        free_block(&mut state, 7, MIB);
        assert_eq!(granted(&mut state, MIB, &mut Vec::new()), Granted::Block(7));
        let counts = state.counts();
        assert_eq!((counts.hits, counts.misses), (1, 1));
        assert_eq!((counts.allocated, counts.cached), (MIB, 0));
    }

    #[test]
    fn a_block_awaiting_events_is_counted_but_not_reusable() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        state.retire(MIB);
        let counts = state.counts();
        assert_eq!((counts.awaiting_blocks, counts.awaiting_bytes), (1, MIB));
        assert_eq!(counts.reserved(), MIB);
        assert_eq!(
            granted(&mut state, MIB, &mut Vec::new()),
            Granted::Room(MIB)
        );
    }

    #[test]
    fn at_capacity_requests_queue_and_are_served_in_order() {
        let mut state = Test::new(Some(2 * MIB));
        fresh(&mut state, MIB);
        fresh(&mut state, MIB);
        let mut evicted = Vec::new();
        assert_eq!(request(&mut state, MIB, "first", &mut evicted), Err(0));
        assert_eq!(request(&mut state, MIB, "second", &mut evicted), Err(1));
        assert_eq!(state.try_request(MIB, &mut evicted), None);

        state.retire(MIB);
        state.returned(1, MIB);
        assert_eq!(state.pump(&mut evicted), vec![("first", Granted::Block(1))]);
        assert_eq!(state.counts().waiters, 1);
    }

    #[test]
    fn the_head_is_never_overtaken() {
        let mut state = Test::new(Some(2 * MIB));
        fresh(&mut state, MIB);
        fresh(&mut state, MIB);
        let mut evicted = Vec::new();
        assert!(request(&mut state, 2 * MIB, "big", &mut evicted).is_err());
        assert!(request(&mut state, MIB, "small", &mut evicted).is_err());
        free_block(&mut state, 1, MIB);
        assert!(
            state.pump(&mut evicted).is_empty(),
            "the big request needs both blocks"
        );
        free_block(&mut state, 2, MIB);
        let served = state.pump(&mut evicted);
        assert_eq!(served, vec![("big", Granted::Room(2 * MIB))]);
        assert_eq!(evicted.len(), 2, "both cached blocks make the room");
        assert_eq!(state.counts().evictions, 2);
    }

    #[test]
    fn cached_blocks_of_other_classes_are_evicted_for_room() {
        let mut state = Test::new(Some(3 * MIB));
        fresh(&mut state, MIB);
        fresh(&mut state, 2 * MIB);
        free_block(&mut state, 1, MIB);
        free_block(&mut state, 2, 2 * MIB);
        let mut evicted = Vec::new();
        let class = MIB + MIB / 2;
        assert_eq!(
            granted(&mut state, class, &mut evicted),
            Granted::Room(class)
        );
        assert_eq!(
            evicted,
            vec![2],
            "the largest block goes first and is enough"
        );
        assert_eq!(state.counts().cached, MIB);
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_queue() {
        let mut state = Test::new(Some(MIB));
        fresh(&mut state, MIB);
        let id = request(&mut state, MIB, "gone", &mut Vec::new()).unwrap_err();
        assert!(state.cancel(id));
        assert!(!state.cancel(id));
        free_block(&mut state, 1, MIB);
        assert!(state.pump(&mut Vec::new()).is_empty());
        assert_eq!(state.counts().cached, MIB);
    }

    #[test]
    fn untaken_grants_are_returned() {
        let mut state = Test::new(Some(MIB));
        let room = granted(&mut state, MIB, &mut Vec::new());
        state.untaken(room, MIB);
        fresh(&mut state, MIB);
        free_block(&mut state, 3, MIB);
        let block = granted(&mut state, MIB, &mut Vec::new());
        assert_eq!(block, Granted::Block(3));
        state.untaken(block, MIB);
        let counts = state.counts();
        assert_eq!((counts.allocated, counts.cached, counts.hits), (0, MIB, 0));
    }

    #[test]
    fn a_quarantined_block_leaves_the_capacity_and_is_never_granted() {
        let mut state = Test::new(Some(MIB));
        fresh(&mut state, MIB);
        state.retire(MIB);
        let mut evicted = Vec::new();
        assert!(request(&mut state, MIB, "next", &mut evicted).is_err());
        state.quarantine(1, MIB);
        // Its room serves the waiter with a new block, not with the bad one.
        assert_eq!(state.pump(&mut evicted), vec![("next", Granted::Room(MIB))]);
        state.room_filled(MIB);
        let counts = state.counts();
        assert_eq!((counts.quarantined, counts.quarantined_bytes), (1, MIB));
        assert_eq!((counts.awaiting_blocks, counts.reserved()), (0, MIB));
        assert!(state.trim_to(0).is_empty(), "never trimmed");
        assert_eq!(state.take_quarantined(), vec![1]);
        assert_eq!(state.counts().quarantined_bytes, 0);
    }

    #[test]
    fn a_repaired_block_is_cached_and_counted() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        state.retire(MIB);
        state.repaired(5, MIB);
        assert_eq!(state.counts().repaired, 1);
        assert_eq!(granted(&mut state, MIB, &mut Vec::new()), Granted::Block(5));
    }

    #[test]
    fn trim_takes_every_cached_block() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        fresh(&mut state, 2 * MIB);
        free_block(&mut state, 1, MIB);
        free_block(&mut state, 2, 2 * MIB);
        let mut trimmed = state.trim_to(0);
        trimmed.sort();
        assert_eq!(trimmed, vec![1, 2]);
        assert_eq!(state.counts().reserved(), 0);
        assert_eq!(state.counts().peak_reserved, 3 * MIB);
    }

    #[test]
    fn trim_to_frees_the_largest_blocks_until_the_target() {
        let mut state = Test::new(None);
        for (label, class) in [(1, MIB), (2, 2 * MIB), (3, 4 * MIB)] {
            fresh(&mut state, class);
            free_block(&mut state, label, class);
        }
        fresh(&mut state, 3 * MIB);
        assert_eq!(
            state.trim_to(6 * MIB),
            vec![3],
            "one free brings 10 MiB to 6"
        );
        assert_eq!(state.counts().reserved(), 6 * MIB);
        assert_eq!(state.trim_to(0), vec![2, 1], "the block in use stays");
        assert_eq!(state.counts().reserved(), 3 * MIB);
    }

    /// Fills a reserve's room as a pool does (the block labelled `label`).
    fn reserve_one(state: &mut Test, class: usize, count: usize, label: u32) -> Reserving {
        let next = state.reserve_next(class, count, &mut Vec::new());
        if next == Reserving::Room {
            state.room_reserved(label, class);
        }
        next
    }

    #[test]
    fn a_reserve_hands_nothing_out() {
        let mut state = Test::new(None);
        fresh(&mut state, MIB);
        state.released(1, MIB);
        let before = state.counts();
        assert_eq!(reserve_one(&mut state, MIB, 3, 2), Reserving::Room);
        assert_eq!(reserve_one(&mut state, MIB, 3, 3), Reserving::Room);
        assert_eq!(reserve_one(&mut state, MIB, 3, 4), Reserving::Done);
        let after = state.counts();
        assert_eq!((after.cached, after.allocated), (3 * MIB, 0));
        assert_eq!((after.hits, after.misses), (before.hits, before.misses + 2));
        assert_eq!(
            after.peak_allocated, MIB,
            "only the block handed out before"
        );
        assert_eq!(after.peak_reserved, 3 * MIB);
    }

    #[test]
    fn a_reserve_evicts_other_classes_but_never_its_own() {
        let mut state = Test::new(Some(4 * MIB));
        fresh(&mut state, 2 * MIB);
        state.released(1, 2 * MIB);
        let mut evicted = Vec::new();
        assert_eq!(state.reserve_next(MIB, 4, &mut evicted), Reserving::Room);
        state.room_reserved(2, MIB);
        assert_eq!(state.reserve_next(MIB, 4, &mut evicted), Reserving::Room);
        state.room_reserved(3, MIB);
        assert!(evicted.is_empty(), "4 MiB held so far");
        assert_eq!(state.reserve_next(MIB, 4, &mut evicted), Reserving::Room);
        assert_eq!(evicted, vec![1], "the 2 MiB block made the room");
        state.room_reserved(4, MIB);
        assert_eq!(state.reserve_next(MIB, 4, &mut evicted), Reserving::Room);
        state.room_reserved(5, MIB);
        assert_eq!(state.reserve_next(MIB, 5, &mut evicted), Reserving::Full(4));
        assert_eq!(evicted, vec![1], "none of its own class");
        assert_eq!(state.counts().cached, 4 * MIB);
    }

    #[test]
    fn a_class_emptied_by_hits_does_not_hide_smaller_blocks_from_eviction() {
        let mut state = Test::new(Some(3 * MIB));
        fresh(&mut state, 2 * MIB);
        state.released(1, 2 * MIB);
        fresh(&mut state, MIB);
        assert_eq!(
            granted(&mut state, 2 * MIB, &mut Vec::new()),
            Granted::Block(1)
        );
        state.released(2, MIB);
        // 3 MiB held: the 2 MiB block in use and 1 MiB cached, under the emptied 2 MiB list.
        let mut evicted = Vec::new();
        assert_eq!(
            granted(&mut state, MIB / 2, &mut evicted),
            Granted::Room(MIB / 2)
        );
        assert_eq!(evicted, vec![2], "the room came from the cached block");
        assert!(state.counts().held() <= 3 * MIB, "{:?}", state.counts());
    }
}
