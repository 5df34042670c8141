//! The machinery every caching pool of npu-rs shares: [`PinnedPool`](crate::PinnedPool) here,
//! npu-stream's `DevicePool` over device memory.
//!
//! A [`Cache`] owns the locked state (free lists by size class, byte accounting, the FIFO
//! queue of waiters) and a [`Source`] that knows how to free the blocks it evicts. It decides
//! under the lock and acts after unlocking, so no ACL call and no wake-up happens while the
//! lock is held. What a pool adds on top is how a granted room becomes a block (pinning, an
//! `aclrtMalloc`, a stream-ordered allocation) and the buffer type it hands out.
//!
//! It is public only so that npu-stream can build on it, and hidden from the documentation:
//! it is not part of the stable API. A [`Source`]'s `free` runs on the shared reaper thread,
//! so implementing it is `unsafe` (it must not block); a `Source` that misbehaves otherwise
//! can only leak or lose blocks, and calls out of turn (room never granted, a block the
//! cache never lent) only skew its counters, which stop at zero: no panic, and no cache that
//! refuses every request afterwards.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Instant;

use npu_core::{Error, MemoryErrorKind, Result, UseList};
use tokio::sync::oneshot;

use super::repairs::Repairs;
use super::settling::Settling;
use super::size_class::size_class;
use super::state::State;
use super::stats::{PoolStats, Timing};

pub use super::state::{Granted, Reserving};
pub use crate::device_buffer::byte_size;

/// The seal of the plumbing npu-rs's crates share (`npu_core::seal`), which [`Source`] takes.
///
/// `Source` is public because npu-stream implements it, which also lets any crate name it; a
/// trait other crates implement cannot change without breaking them. Implementing it
/// therefore takes a `Seal`, which has no safe constructor: crates outside npu-rs cannot write
/// an implementation without breaking [`Seal::npu_rs`]'s contract, and the trait stays free to
/// change with npu-rs's crates. [`Cache::new`] evaluates the seal, so an implementation whose
/// `SEAL` never yields one does not build either. Of the rest of this module, [`byte_size`]
/// takes the seal too; a [`Cache`] is made from a `Source`.
pub use npu_core::seal::Seal;

/// Where a pool's blocks come from and go back to. Sealed: see [`Seal`].
///
/// # Safety
///
/// [`free`](Source::free) must not block (no wait for the device, for another operation or
/// for a release): it runs on the reaper thread, which every deferred release of the process
/// shares, when a block whose operations completed is evicted. Nor may
/// [`giving_back`](Source::giving_back), which runs there too, wait for more than other
/// threads' immediate calls.
pub unsafe trait Source: Send + Sync + 'static {
    /// One allocation the pool caches.
    type Block: Send + 'static;

    /// The pool's allocating method, named in its errors (`"PinnedPool::alloc"`).
    const NAME: &'static str;

    /// The implementation is npu-rs's own.
    const SEAL: Seal;

    /// The block's size: the size class it was allocated for.
    fn block_bytes(block: &Self::Block) -> usize;

    /// The library (`Runtime::library_id`) of the runtime whose memory the pool holds, if the
    /// source holds a handle of it: a thread of the pool's own (the repair thread), which
    /// holds the source, then counts as a teardown of that library, since it may drop the
    /// last handle.
    fn library(&self) -> Option<usize> {
        None
    }

    /// Gives blocks back to the runtime. They are idle (every operation that used them has
    /// completed) and the pool's lock is not held. Must not wait for the device.
    fn free(&self, blocks: Vec<Self::Block>);

    /// Runs `give_back`, which takes blocks out of the cache (an eviction, a trim) and frees
    /// them, as one step for whoever must not see the blocks gone and their frees not yet
    /// made: a source whose frees complete later (queued on a stream) lets a request out of
    /// memory wait for them, and holds it off here until they are made. It runs on the
    /// reaper and on dropping threads too, so it may wait only for the like of itself:
    /// others' immediate calls. Taken before the pool's lock.
    fn giving_back<R>(&self, give_back: impl FnOnce() -> R) -> R {
        give_back()
    }

    /// Whether the blocks can have uncorrectable memory errors for [`repair`](Source::repair)
    /// to look for (device memory). When false, a block one of whose operations failed with a
    /// memory error is cached like any other: the error was in other memory.
    const MEMORY_ERRORS: bool = false;

    /// Looks for uncorrectable memory errors in `block`'s range and repairs them if it can,
    /// for an idle block one of whose operations failed with a repairable memory error
    /// (`MemoryErrorKind::Repairable`; one that saw an unrepairable one is quarantined
    /// without asking), and so only when [`MEMORY_ERRORS`](Source::MEMORY_ERRORS) is true. It runs on the pool's repair
    /// thread, not the reaper, so it may wait for the runtime; the pool's lock is not held.
    fn repair(&self, block: &Self::Block) -> Repair {
        let _ = block;
        Repair::Sound
    }
}

/// What [`Source::repair`] found in a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// No uncorrectable error in the block's range (the failed operation's was in other
    /// memory): it is cached as it is.
    Sound,
    /// Its errors were repaired (what: for the log); its contents are lost, and it is cached.
    Repaired(String),
    /// Its errors could not be repaired (why: for the log); it is quarantined, never handed
    /// out again.
    Unrepairable(String),
}

type Reply<B> = oneshot::Sender<Granted<B>>;

/// The waiters a change served, and their grants, to send once the cache is unlocked.
type Served<B> = Vec<(Reply<B>, Granted<B>)>;

/// The shared part of a caching pool: what every clone of the pool, its blocks and its
/// waiters hold.
pub struct Cache<S: Source> {
    source: S,
    capacity: Option<usize>,
    state: Mutex<State<S::Block, Reply<S::Block>>>,
    timing: Timing,
    /// Blocks waiting for [`Source::repair`], and whether a repair thread is serving them.
    repairs: Repairs<S::Block>,
    /// The tasks waiting in [`settled`](Cache::settled).
    settling: Settling,
}

// As the pools print themselves: the state's lock is never held across user code (see the
// module's documentation), so a subscriber that prints a cache cannot wait for itself.
impl<S: Source> std::fmt::Debug for Cache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("source", &S::NAME)
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S: Source> Cache<S> {
    /// A cache of at most `capacity` bytes (unbounded when `None`) over `source`.
    ///
    /// The source's seal is evaluated here: an associated constant is evaluated only where it
    /// is used, so an implementation whose `SEAL` never yields one (a `panic!()` in its place)
    /// would otherwise compile outside npu-rs. With it, such a cache does not build:
    ///
    /// ```compile_fail,E0080
    /// use npu_mem::pool_cache::{Cache, Seal, Source};
    ///
    /// struct Forged;
    ///
    /// // SAFETY: `free` does not block (it frees nothing).
    /// unsafe impl Source for Forged {
    ///     type Block = ();
    ///     const NAME: &'static str = "Forged::alloc";
    ///     const SEAL: Seal = panic!("no seal was made");
    ///
    ///     fn block_bytes(_: &()) -> usize {
    ///         0
    ///     }
    ///
    ///     fn free(&self, _: Vec<()>) {}
    /// }
    ///
    /// let _ = Cache::new(Forged, None);
    /// ```
    pub fn new(source: S, capacity: Option<usize>) -> Self {
        let _: Seal = const { S::SEAL };
        Cache {
            source,
            capacity,
            state: Mutex::new(State::new(capacity)),
            timing: Timing::default(),
            repairs: Repairs::new(),
            settling: Settling::new(),
        }
    }

    /// Where the blocks come from.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The capacity in bytes, if any.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// The size class a request of `bytes` is served with, checked against the capacity (a
    /// request larger than the capacity could never be served, so it fails at once). Errors
    /// name `api` and `argument`, the method the caller called and what it gave the size as
    /// (a `len` of elements, or `bytes`).
    pub fn class_for(
        &self,
        api: &'static str,
        argument: &'static str,
        bytes: usize,
    ) -> Result<usize> {
        let class = size_class(bytes).ok_or_else(|| {
            Error::invalid(
                api,
                argument,
                format!("{bytes} bytes cannot be rounded to a block"),
            )
        })?;
        match self.capacity {
            Some(capacity) if class > capacity => Err(Error::invalid(
                api,
                argument,
                format!(
                    "{bytes} bytes need a {class}-byte block, more than the pool's capacity of \
                     {capacity} bytes: the request could never be served"
                ),
            )),
            _ => Ok(class),
        }
    }

    /// A cached block of `class`, or room to allocate one, without waiting: `None` while the
    /// capacity is full or anyone else waits.
    pub fn try_grant(self: &Arc<Self>, class: usize) -> Option<Granted<S::Block>> {
        self.hit(class).or_else(|| {
            self.update_making_room(class, |state, evicted| state.try_request(class, evicted))
        })
    }

    /// A cached block of `class`, only: `None` while none is cached or anyone waits. Unlike
    /// [`try_grant`](Cache::try_grant) it never grants room, and so never evicts cached blocks
    /// of other classes to make some: for a pool that cannot fill room without waiting (a
    /// stream-ordered allocation), whose `try_alloc` would otherwise free cached blocks and
    /// then give nothing.
    pub fn try_hit(&self, class: usize) -> Option<S::Block> {
        self.lock().take_cached(class)
    }

    /// The common case of both grants, a cached block with nobody waiting: one short critical
    /// section, none of the request machinery.
    fn hit(&self, class: usize) -> Option<Granted<S::Block>> {
        self.try_hit(class).map(Granted::Block)
    }

    /// A cached block of `class`, or room to allocate one, waiting in FIFO order while the
    /// capacity is full. Cancel-safe: dropping the future leaves the queue and hands back a
    /// grant already on its way.
    pub async fn grant(self: &Arc<Self>, class: usize) -> Result<Granted<S::Block>> {
        if let Some(hit) = self.hit(class) {
            return Ok(hit);
        }
        let answer = self.update_making_room(class, |state, evicted| {
            state.try_request(class, evicted).ok_or_else(|| {
                let (reply, receiver) = oneshot::channel();
                (state.enqueue(class, reply), receiver)
            })
        });
        match answer {
            Ok(granted) => Ok(granted),
            Err((id, reply)) => {
                let waiter = Arc::new(WaiterWaker::default());
                Waiting {
                    cache: self.clone(),
                    id,
                    reply,
                    done: false,
                    channel_waker: Waker::from(waiter.clone()),
                    waiter,
                }
                .await
            }
        }
    }

    /// Turns a grant into a block: a cached block as it is, room by calling `alloc` with the
    /// class (timed, and the room given back if it fails).
    pub fn fill(
        self: &Arc<Self>,
        granted: Granted<S::Block>,
        alloc: impl FnOnce(usize) -> Result<S::Block>,
    ) -> Result<S::Block> {
        let class = match granted {
            Granted::Block(block) => return Ok(block),
            Granted::Room(class) => class,
        };
        let started = Instant::now();
        let allocated = alloc(class);
        self.timing.allocated(started.elapsed());
        match allocated {
            Ok(block) => {
                self.room_filled(class);
                Ok(block)
            }
            Err(err) => {
                self.room_unused(class);
                Err(err)
            }
        }
    }

    /// Granted room of `class` bytes now holds a new block allocated in `took` (for pools
    /// whose allocation is asynchronous, so [`fill`](Cache::fill) cannot run it).
    pub fn room_filled_in(&self, class: usize, took: std::time::Duration) {
        self.timing.allocated(took);
        self.room_filled(class);
    }

    /// Granted room of `class` bytes went unused: the allocation failed or was abandoned.
    pub fn room_unused(self: &Arc<Self>, class: usize) {
        self.update(|state, _| state.room_unused(class));
    }

    fn room_filled(&self, class: usize) {
        self.lock().room_filled(class);
    }

    /// A block's owner dropped it: it is awaiting its operations until
    /// [`returned`](Cache::returned).
    fn retire(&self, class: usize) {
        // Bookkeeping only (nothing it frees can serve a waiter), so no `update`.
        self.lock().retire(class);
    }

    /// A block's owner dropped it while `uses` may still be running on the device: it is
    /// retired now and returned once every use has completed. What both pools' buffers do on
    /// drop.
    pub fn give_back(self: &Arc<Self>, block: S::Block, uses: &mut UseList) {
        let class = S::block_bytes(&block);
        // Idle stays idle (the owner is being dropped), so the block goes straight back, with
        // no deferral. Whether a use failed with a memory error is a flag the list kept: the
        // common return makes no ACL call and takes no other lock.
        if uses.is_idle() {
            match uses.memory_error_kind().filter(|_| S::MEMORY_ERRORS) {
                Some(kind) => {
                    self.retire(class);
                    self.suspect(block, kind);
                }
                None => self.update(|state, _| state.released(block, class)),
            }
            return;
        }
        self.retire(class);
        let cache = self.clone();
        // SAFETY: returning (or quarantining) a block only takes the cache's lock, which is
        // never held across a wait, and frees evicted blocks with the source's `free` inside
        // its `giving_back` (the trait's contract); a suspect block is handed to the repair thread, which the reaper
        // never waits for.
        unsafe {
            uses.release_noting_memory_error_kind(move |memory_error| {
                match memory_error.filter(|_| S::MEMORY_ERRORS) {
                    Some(kind) => cache.suspect(block, kind),
                    None => cache.returned(block),
                }
            })
        };
    }

    /// A retired block's operations have completed (the device is done with it, whether they
    /// succeeded or failed, none with a memory error): back to the free list, or straight to
    /// a waiter.
    pub fn returned(self: &Arc<Self>, block: S::Block) {
        let class = S::block_bytes(&block);
        self.update(|state, _| state.returned(block, class));
    }

    /// A retired, idle block one of whose operations failed with a memory error of `kind`.
    ///
    /// A [repairable](MemoryErrorKind::Repairable) one (an uncorrectable error the runtime
    /// lists) may be in the block, so it is not cached before [`Source::repair`] has looked.
    /// That may wait for the runtime, which neither the reaper nor a dropping thread may do,
    /// so it runs on a repair thread of the pool's, started for the queue and ending when it
    /// is empty (failing operations come in bursts, one thread serves them all). The block
    /// counts as awaiting until it is settled.
    ///
    /// An [unrepairable](MemoryErrorKind::Unrepairable) one (an HBM multi-bit ECC error, which
    /// no runtime call lists or repairs) is quarantined here and now: there is nothing for a
    /// repair to look for, and the block must never be handed out again. So is a kind this
    /// pool does not know.
    fn suspect(self: &Arc<Self>, block: S::Block, kind: MemoryErrorKind) {
        let why = match kind {
            MemoryErrorKind::Repairable => None,
            MemoryErrorKind::Unrepairable => Some(
                "an operation on it failed with an HBM multi-bit ECC error \
                 (ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR), which has no repair"
                    .to_string(),
            ),
            other => Some(format!(
                "an operation on it failed with a memory error this pool cannot repair \
                 ({other:?})"
            )),
        };
        if let Some(why) = why {
            self.settle(block, Repair::Unrepairable(why));
            return;
        }
        let start = || {
            let cache = self.clone();
            let repair = move || cache.repair_queued();
            let spawned = match self.source.library() {
                Some(library) => {
                    npu_core::reaper::spawn_counted(crate::SEAL, "npu-pool-repair", library, repair)
                }
                None => std::thread::Builder::new()
                    .name("npu-pool-repair".into())
                    .spawn(repair)
                    .map(drop),
            };
            if let Err(err) = &spawned {
                npu_core::log!(warn, pool = S::NAME, %err, "no thread to examine pooled blocks after a memory error");
            }
            spawned
        };
        // Nothing will look at the queued blocks, and none may be cached unexamined.
        self.repairs.suspect(block, start, |block, err| {
            let why = format!("no thread to examine it ({err})");
            self.settle(block, Repair::Unrepairable(why));
        });
    }

    /// The repair thread: examines the queued blocks until none is left. It holds the cache,
    /// so a pool dropped meanwhile ends here, once the last block is settled.
    fn repair_queued(self: Arc<Self>) {
        self.repairs.serve(|block| {
            // A source's panic is contained: the block is then quarantined, not lost.
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.source.repair(&block)
            }));
            let found = found.unwrap_or_else(|_| {
                Repair::Unrepairable("examining it for memory errors panicked".into())
            });
            self.settle(block, found);
        });
    }

    /// Caches an examined block, or quarantines it; logs either repair.
    fn settle(self: &Arc<Self>, block: S::Block, found: Repair) {
        let class = S::block_bytes(&block);
        match found {
            Repair::Sound => self.update(|state, _| state.returned(block, class)),
            Repair::Repaired(what) => {
                npu_core::log!(
                    warn,
                    pool = S::NAME,
                    bytes = class,
                    repaired = %what,
                    "a pooled block's uncorrectable memory errors were repaired; it is reused, its contents lost"
                );
                self.update(|state, _| state.repaired(block, class));
            }
            Repair::Unrepairable(why) => {
                npu_core::log!(
                    warn,
                    pool = S::NAME,
                    bytes = class,
                    reason = %why,
                    "a pooled block has an uncorrectable memory error that was not repaired; it is quarantined, never handed out again"
                );
                self.update(|state, _| state.quarantine(block, class));
            }
        }
    }

    /// Makes sure `count` blocks for requests of `bytes` bytes are cached, allocating the
    /// missing ones with `alloc`; returns the bytes of the blocks it reserved. Fails when the
    /// capacity (or a queued waiter) leaves no room for `count` blocks; the blocks allocated
    /// before that stay cached (the capacity bounds them). Fails with `alloc`'s error when an
    /// allocation fails, after freeing as many idle blocks of the size class as this call
    /// allocated, the latest cached first ([`unreserve`](Cache::unreserve)). Nothing is handed out: the blocks already cached
    /// count no hit, and the new ones (misses) never count as allocated.
    pub fn reserve(
        self: &Arc<Self>,
        api: &'static str,
        count: usize,
        bytes: usize,
        mut alloc: impl FnMut(usize) -> Result<S::Block>,
    ) -> Result<usize> {
        let class = self.class_for(api, "bytes", bytes)?;
        let total = Self::reserved_bytes(api, count, class)?;
        // At most `count` new blocks, even if others take cached ones meanwhile.
        let mut added = 0;
        for _ in 0..count {
            match self.reserve_next(class, count) {
                Reserving::Done => break,
                Reserving::Full(cached) => {
                    return Err(self.no_room(api, cached, count, (bytes, class)));
                }
                Reserving::Room => {
                    let started = Instant::now();
                    match alloc(class) {
                        Ok(block) => {
                            self.room_reserved_in(block, started.elapsed());
                            added += 1;
                        }
                        Err(err) => {
                            self.room_unused(class);
                            self.unreserve(class, added);
                            return Err(err);
                        }
                    }
                }
            }
        }
        Ok(total)
    }

    /// Frees up to `count` cached blocks of `class`: those a reserve whose next allocation
    /// failed had allocated itself. Such a failure is the runtime out of memory (or refusing
    /// it): on a pool without a capacity, a reserve larger than the host or device can hold
    /// took everything it could before failing, and keeping it cached would leave every other
    /// allocation of the process failing for the pool's life. Returns the bytes freed.
    pub fn unreserve(self: &Arc<Self>, class: usize, count: usize) -> usize {
        self.take_and_free(|state| state.take_cached_of(class, count))
    }

    /// Whether blocks of the pool other than `own` bytes of granted room (the asking
    /// request's) are out: handed out, awaiting their operations, or room being filled. Only
    /// then can a release already handed to the reaper bring memory back to the pool.
    pub fn holds_beyond(&self, own: usize) -> bool {
        let counts = self.lock().counts();
        counts
            .allocated
            .saturating_add(counts.awaiting_bytes)
            .saturating_add(counts.growing.saturating_sub(own))
            > 0
    }

    /// The next step of a reserve of `count` blocks of `class`: done, room for one more block
    /// (filled with [`room_reserved_in`](Cache::room_reserved_in) or given back with
    /// [`room_unused`](Cache::room_unused)), or no room.
    pub fn reserve_next(self: &Arc<Self>, class: usize, count: usize) -> Reserving {
        self.update_making_room(class, |state, evicted| {
            state.reserve_next(class, count, evicted)
        })
    }

    /// A reserve's room holds `block`, allocated in `took`: cached at once.
    pub fn room_reserved_in(self: &Arc<Self>, block: S::Block, took: std::time::Duration) {
        self.timing.allocated(took);
        let class = S::block_bytes(&block);
        self.update(|state, _| state.room_reserved(block, class));
    }

    /// The bytes `count` blocks of `class` bytes take, or an error naming `count` when that
    /// cannot even be represented (no device could ever hold it).
    pub fn reserved_bytes(api: &'static str, count: usize, class: usize) -> Result<usize> {
        count.checked_mul(class).ok_or_else(|| {
            let rule = format!("{count} blocks of {class} bytes overflow the address space");
            Error::invalid(api, "count", rule)
        })
    }

    /// The error of a `reserve` that found room for only `room` of `count` blocks of `bytes`
    /// bytes, each a block of `class` bytes. It names the class and what the pool holds of its
    /// capacity: a capacity of `count * bytes` holds fewer blocks when `bytes` is not a class,
    /// which the counts alone leave a puzzle.
    pub fn no_room(
        &self,
        api: &'static str,
        room: usize,
        count: usize,
        (bytes, class): (usize, usize),
    ) -> Error {
        let stats = self.stats();
        let capacity = self
            .capacity()
            .map_or_else(|| "no capacity".to_owned(), |c| format!("{c} bytes"));
        let queued = match stats.waiters {
            0 => String::new(),
            waiters => format!(", and {waiters} requests wait for room ahead of it"),
        };
        let rule = format!(
            "the pool's capacity has room for {room} of {count} blocks of {bytes} bytes: each \
             is a {class}-byte block (its size class), and the pool holds {} bytes of its \
             {capacity}{queued}",
            stats.reserved
        );
        Error::invalid(api, "count", rule)
    }

    /// Frees cached blocks, largest first, until the pool holds at most `keep` bytes (or has
    /// nothing cached left); returns the bytes freed. Blocks in use or awaiting their
    /// operations are unaffected.
    pub fn trim_to(self: &Arc<Self>, keep: usize) -> usize {
        self.take_and_free(|state| state.trim_to(keep))
    }

    /// Frees every cached block of a class other than `keep`; returns the bytes freed. What
    /// a reserve of `keep` out of memory may give up: not the blocks it reserved.
    pub fn trim_except(self: &Arc<Self>, keep: usize) -> usize {
        self.take_and_free(|state| state.take_cached_except(keep))
    }

    /// Takes cached blocks with `take` and frees them, as one step of the source's
    /// [`giving_back`](Source::giving_back); returns the bytes freed.
    fn take_and_free(
        self: &Arc<Self>,
        take: impl FnOnce(&mut State<S::Block, Reply<S::Block>>) -> Vec<S::Block>,
    ) -> usize {
        self.source.giving_back(|| {
            let blocks = self.update(|state, _| take(state));
            let bytes = blocks.iter().map(S::block_bytes).sum();
            self.free_blocks(blocks);
            bytes
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        let counts = self.lock().counts();
        self.timing.stats(counts)
    }

    fn lock(&self) -> MutexGuard<'_, State<S::Block, Reply<S::Block>>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `change` on the locked state, serves whichever waiters it made servable, then,
    /// after unlocking, frees the blocks evicted on the way and sends the grants. Only changes
    /// that can free capacity or cached blocks need it; counter moves that keep the held bytes
    /// the same (`retire`, `room_filled`) just lock. For a change that evicts only through
    /// the waiters it serves (a block back, room given up, a cancel): one that may evict to
    /// make room itself is [`update_making_room`](Cache::update_making_room).
    fn update<R>(
        self: &Arc<Self>,
        change: impl FnOnce(&mut State<S::Block, Reply<S::Block>>, &mut Vec<S::Block>) -> R,
    ) -> R {
        self.update_evicting(|_| false, change)
    }

    /// [`update`](Cache::update) for a change that may evict cached blocks to make room for
    /// a block of `class` (a request that found none cached, a reserve's next block).
    fn update_making_room<R>(
        self: &Arc<Self>,
        class: usize,
        change: impl FnOnce(&mut State<S::Block, Reply<S::Block>>, &mut Vec<S::Block>) -> R,
    ) -> R {
        self.update_evicting(|state| state.full_for(class), change)
    }

    /// Runs `change` as [`update`](Cache::update) says, inside the source's
    /// [`giving_back`](Source::giving_back) when it may take blocks out of the cache to free
    /// them: on a bounded cache, when `evicts` says so of the state it finds, or when anyone
    /// waits (serving a waiter may evict for its room).
    ///
    /// Evicted blocks are given back as one step with their frees, which a request out of
    /// memory waits for (on a device pool, its drain lock); every other change (a hit's
    /// return, the common case) takes no lock but the cache's. Taking that step for each of
    /// them serialised a bounded pool's hot path on the drain lock. Asked and done under one
    /// hold of the cache's lock, so that no change the answer missed comes between; when the
    /// answer is yes the lock is let go and taken again inside the step, which is taken first.
    fn update_evicting<R>(
        self: &Arc<Self>,
        evicts: impl FnOnce(&State<S::Block, Reply<S::Block>>) -> bool,
        change: impl FnOnce(&mut State<S::Block, Reply<S::Block>>, &mut Vec<S::Block>) -> R,
    ) -> R {
        let state = self.lock();
        // Only a bounded cache evicts.
        let giving_back = self.capacity.is_some() && (state.has_waiters() || evicts(&state));
        let (result, served, settled) = match giving_back {
            true => {
                drop(state);
                self.source
                    .giving_back(|| self.change_and_evict(self.lock(), change))
            }
            false => self.change_and_evict(state, change),
        };
        // Outside the source's step (a device pool's drain lock, which a request out of
        // memory waits for): a waker is user code.
        if settled {
            self.wake_settling();
        }
        if !served.is_empty() {
            for (reply, granted) in served {
                self.deliver(reply, granted);
            }
        }
        result
    }

    /// Runs `change` on `state` and serves the waiters it made servable; then, unlocked,
    /// frees the blocks evicted on the way. `change`'s result, the grants to send, and
    /// whether the change settled the pool (it was not settled before: a change that finds it
    /// settled, such as a trim, has no settling task to wake, since each looked under this
    /// lock after registering).
    fn change_and_evict<R>(
        &self,
        mut state: MutexGuard<'_, State<S::Block, Reply<S::Block>>>,
        change: impl FnOnce(&mut State<S::Block, Reply<S::Block>>, &mut Vec<S::Block>) -> R,
    ) -> (R, Served<S::Block>, bool) {
        let was_settled = state.settled();
        let mut evicted = Vec::new();
        let result = change(&mut state, &mut evicted);
        // Most changes find nobody waiting and evict nothing: that common case (a hit, an
        // idle return) then costs the lock alone.
        let served = match state.has_waiters() {
            true => state.pump(&mut evicted),
            false => Vec::new(),
        };
        let settled = !was_settled && state.settled();
        drop(state);
        if !evicted.is_empty() {
            self.free_blocks(evicted);
        }
        (result, served, settled)
    }

    /// Resolves once every block of the pool is back: none handed out, none awaiting its
    /// operations (a block dropped while the device still used it) or its examination after a
    /// memory error, and no allocation for a grant under way. Blocks handed out after it
    /// resolved are not waited for; in a forked child it resolves at once. Cancel-safe:
    /// dropping it only stops waiting.
    pub fn settled(self: &Arc<Self>) -> Settled<S> {
        Settled {
            cache: self.clone(),
            id: None,
        }
    }

    /// Wakes every task waiting in [`settled`](Cache::settled), after a change that left the
    /// pool settled. Each wake-up (and the waker's drop: woken by value) is the waiting task's
    /// user code, run on whichever thread returned the block (the reaper, a completion
    /// thread): a panic there is that task's alone, so each is contained on its own and the
    /// others are still woken.
    fn wake_settling(&self) {
        for waker in self.settling.take() {
            if npu_core::contain::contained(crate::SEAL, || waker.wake()) {
                npu_core::log!(
                    error,
                    pool = S::NAME,
                    "a waker of a task waiting for the pool to settle panicked"
                );
            }
        }
    }

    /// Sends a grant to its waiter. Sending wakes the waiter's task on this thread, and a
    /// waker may panic: that panic is the waiter's alone, so it is contained here. Otherwise
    /// it would unwind through whoever returned the block (any thread dropping a buffer, or
    /// the reaper) and drop the grants still to be sent, losing their room for good.
    fn deliver(self: &Arc<Self>, reply: Reply<S::Block>, granted: Granted<S::Block>) {
        let mut refused = None;
        if npu_core::contain::contained(crate::SEAL, || refused = reply.send(granted).err()) {
            // The grant was stored before the wake-up panicked: the waiter receives it, or
            // hands it back when it is dropped, as for any grant it did not take.
            npu_core::log!(error, pool = S::NAME, "a pool waiter's waker panicked");
        } else if let Some(granted) = refused {
            // A waiter that went away after being served hands the grant back.
            self.untaken(granted);
        }
    }

    fn untaken(self: &Arc<Self>, granted: Granted<S::Block>) {
        let class = match &granted {
            Granted::Block(block) => S::block_bytes(block),
            Granted::Room(class) => *class,
        };
        self.update(|state, _| state.untaken(granted, class));
    }

    fn free_blocks(&self, blocks: Vec<S::Block>) {
        if blocks.is_empty() {
            return;
        }
        let started = Instant::now();
        let count = blocks.len() as u64;
        self.source.free(blocks);
        self.timing.freed(count, started.elapsed());
    }
}

impl<S: Source> Drop for Cache<S> {
    fn drop(&mut self) {
        // The quarantined blocks too: kept from the runtime while the pool could get them
        // back, they go with the pool.
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut blocks = state.trim_to(0);
        blocks.append(&mut state.take_quarantined());
        self.free_blocks(blocks);
    }
}

/// What [`Cache::settled`] returns.
pub struct Settled<S: Source> {
    cache: Arc<Cache<S>>,
    /// Its entry among the cache's settling wakers, once polled.
    id: Option<u64>,
}

impl<S: Source> std::fmt::Debug for Settled<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settled")
            .field("cache", &self.cache)
            .field("polled", &self.id.is_some())
            .finish()
    }
}

impl<S: Source> Settled<S> {
    /// Takes this future's waker out of the cache's list, to drop outside the lock.
    fn unregister(&mut self) -> Option<Waker> {
        if npu_core::forked() {
            // A parent thread may have held the settling lock at the fork, and in the child
            // nothing would let go of it: the entry is left to the child's copy of the list.
            self.id = None;
            return None;
        }
        self.cache.settling.leave(&mut self.id)
    }
}

impl<S: Source> Future for Settled<S> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        // In a forked child no thread will ever complete the parent's operations (nor finish
        // an allocation a parent thread had under way), so blocks awaiting them never come
        // back there: waiting would never end. It resolves at once, as a reaper flush does.
        if npu_core::forked() {
            drop(self.unregister());
            return Poll::Ready(());
        }
        let this = &mut *self;
        let cache = &this.cache;
        cache
            .settling
            .poll(&mut this.id, cx.waker(), || cache.lock().settled())
    }
}

impl<S: Source> Drop for Settled<S> {
    fn drop(&mut self) {
        drop(self.unregister());
    }
}

/// Resolves to the grant the pool sends when the queued request reaches the front and fits.
///
/// Dropping it before then leaves the queue; if the grant was already on its way, it goes
/// back to the pool (the block to its free list, the room to the capacity), so cancelling
/// loses nothing.
struct Waiting<S: Source> {
    cache: Arc<Cache<S>>,
    id: u64,
    reply: oneshot::Receiver<Granted<S::Block>>,
    done: bool,
    /// Holds the task's waker for the reply channel, which only ever sees `channel_waker`.
    waiter: Arc<WaiterWaker>,
    channel_waker: Waker,
}

/// The waker a waiter's reply channel holds, standing in for the task's own.
///
/// The channel drops the waker it holds when its last end goes, and that end can be the
/// pool's, on whatever thread returns a block: a waiter cancelled just after being served
/// leaves its waker in the channel, and the send that finds it closed frees the channel. A
/// task's waker is user code whose drop may panic; dropped there, the panic would unwind
/// through the send and lose the grant it hands back. So the channel holds this stand-in,
/// whose drop is harmless, and the task's waker lives in it only until the waiter is polled
/// again or dropped, both on the waiter's own thread.
#[derive(Default)]
struct WaiterWaker(Mutex<Option<Waker>>);

impl WaiterWaker {
    fn slot(&self) -> MutexGuard<'_, Option<Waker>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for WaiterWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Taken, not cloned: a waker's clone is user code, and user code run under the lock
        // can return a block to this pool, whose grant wakes this waiter again and locks the
        // slot a second time on this thread. A waiter is served once, and a poll after the
        // grant finds it in the channel without needing a waker. Woken outside the lock: the
        // wake-up may poll the waiter at once, on this thread. The wake (and the waker's drop)
        // run on the sending thread, inside the containment of `Cache::deliver`.
        let waker = self.slot().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<S: Source> Future for Waiting<S> {
    type Output = Result<Granted<S::Block>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // A waker's clone and drop are user code that may return a block to this pool and so
        // wake this waiter, which locks the slot: they run outside it. Only `will_wake`, which
        // runs no waker code, is asked under the lock.
        let known = matches!(&*self.waiter.slot(), Some(known) if known.will_wake(cx.waker()));
        if !known {
            let fresh = cx.waker().clone();
            let replaced = self.waiter.slot().replace(fresh);
            drop(replaced);
        }
        let this = &mut *self;
        let mut channel_cx = TaskContext::from_waker(&this.channel_waker);
        let received = match Pin::new(&mut this.reply).poll(&mut channel_cx) {
            Poll::Ready(received) => received,
            // Queued before the fork: in the child no thread completes the parent's
            // operations, so the blocks they hold never come back to serve it, and a new
            // request there is refused. Not `done`, so that dropping it leaves the queue.
            Poll::Pending => {
                return match npu_core::fork::refuse(crate::SEAL, S::NAME) {
                    Ok(()) => Poll::Pending,
                    Err(forked) => Poll::Ready(Err(forked)),
                };
            }
        };
        self.done = true;
        Poll::Ready(
            received
                .map_err(|_| Error::invalid(S::NAME, "self", "the pool dropped a queued request")),
        )
    }
}

impl<S: Source> Drop for Waiting<S> {
    fn drop(&mut self) {
        // The task's waker is dropped on the waiter's thread, whoever frees the channel; last,
        // so that a panicking drop cannot skip leaving the queue.
        let _task_waker = self.waiter.slot().take();
        if self.done {
            return;
        }
        let id = self.id;
        if self.cache.update(|state, _| state.cancel(id)) {
            return;
        }
        // Already served: closing makes the grant either arrive now or stay with the sender,
        // which then returns it itself.
        self.reply.close();
        if let Ok(granted) = self.reply.try_recv() {
            self.cache.untaken(granted);
        }
    }
}
