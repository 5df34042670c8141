//! How a device pool out of memory finds the memory on its way back: every way blocks are
//! given back holds the drain lock from taking them out of the cache until their frees are
//! counted ([`giving_back`](Returns::giving_back)); a request out of memory takes the same
//! lock, frees the cache and compares the frees counted with those the latest drain covers
//! ([`drain`](Returns::drain), runtime pool) or with those counted before its attempt
//! ([`attempt`](Returns::attempt) then [`retry`](Returns::retry), caching backend). Written against `super::sync`
//! and generic over the completion a drain is awaited through, so that the loom model
//! (`device_pool::model`) checks the very code the pool runs.

use std::sync::TryLockError;

use super::sync::{AtomicU64, Mutex, Ordering, lock_drain};

/// The frees a pool queued (made, on the caching backend) and the latest drain of its
/// release stream.
pub(crate) struct Returns<C> {
    /// The latest out-of-memory drain. Taken with [`lock_drain`] by the drain, which holds it
    /// from freeing the cache to publishing its synchronisation, and by every other way
    /// blocks are given back, from taking them to counting their frees. The caching backend
    /// has no drain: a request out of memory there takes the lock to wait for frees in
    /// progress, and it stays `None`.
    draining: Mutex<Option<Drained<C>>>,
    /// How many times blocks were given back, counted once the frees are queued on the
    /// release stream (or, on the caching backend, made): by a trim, an eviction, a drain, an
    /// unclaimed allocation. A drain covers those counted before its synchronisation was
    /// recorded; a request out of memory that finds more counted than the latest drain covers
    /// has memory on its way back that no drain waits for, and synchronises the stream
    /// itself. On the caching backend a request out of memory that finds more counted than
    /// before its attempt retries: memory came back meanwhile.
    queued: AtomicU64,
}

/// How many batches of frees had been counted when an attempt at an allocation began; only
/// [`Returns::attempt`] makes one, so a retry compares with a count read before its attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempted(u64);

/// An out-of-memory drain of the release stream: the completion of its synchronisation, and
/// how many batches of frees had been counted before it, which it covers.
#[derive(Clone)]
struct Drained<C> {
    completion: C,
    covers: u64,
}

/// What a request out of memory on the runtime pool waits for before its retry.
pub(crate) enum Drain<C, O> {
    /// The synchronisation it submitted itself.
    Own(O),
    /// The latest drain another request submitted, which covers every free counted.
    Theirs(C),
}

impl<C: Clone> Returns<C> {
    pub(crate) fn new() -> Self {
        Returns {
            draining: Mutex::new(None),
            queued: AtomicU64::new(0),
        }
    }

    /// Runs `give_back`, which takes blocks out of the cache and frees them, counting the
    /// frees ([`counted`](Returns::counted)), under the drain lock: a request out of memory
    /// meanwhile would find the cache without them and no frees counted, take no memory to be
    /// on its way back, and fail out of memory while it was. Refused on this thread (held
    /// already, as by a drain freeing the cache, or against the lock order), it goes ahead
    /// unlocked.
    pub(crate) fn giving_back<R>(&self, give_back: impl FnOnce() -> R) -> R {
        let _draining = lock_drain(&self.draining);
        give_back()
    }

    /// Counts one batch of frees, once they are queued on the release stream (made, on the
    /// caching backend).
    pub(crate) fn counted(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// How many batches of frees have been counted so far: each one is on the release stream
    /// before anything recorded on it after this read.
    fn frees_queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// On the caching backend: runs `allocate`, an attempt at an allocation, with the frees
    /// counted before it, for [`retry`](Returns::retry) should it fail out of memory. The
    /// count is read before the attempt: read after it, a trim that freed and counted
    /// between the failed attempt and the read went unseen, and the request failed with the
    /// memory back.
    pub(crate) fn attempt<R>(&self, allocate: impl FnOnce() -> R) -> (Attempted, R) {
        let queued = self.frees_queued();
        (Attempted(queued), allocate())
    }

    /// On the caching backend, after `attempted` failed out of memory: `allocate` once more
    /// if memory came back since the attempt began, or freeing the cache (`free_cache`,
    /// whether it freed any) gave some back, asked after the frees in progress on other
    /// threads are made; `None` (no retry) if neither.
    pub(crate) fn retry<R>(
        &self,
        attempted: Attempted,
        free_cache: impl FnOnce() -> bool,
        allocate: impl FnOnce() -> R,
    ) -> Option<R> {
        self.freed_since(free_cache, attempted.0).then(allocate)
    }

    /// Whether memory came back since `queued` frees were counted, or `free_cache` gave some
    /// back; under the drain lock, so after the frees in progress are counted.
    fn freed_since(&self, free_cache: impl FnOnce() -> bool, queued: u64) -> bool {
        let _draining = lock_drain(&self.draining);
        free_cache() || self.frees_queued() != queued
    }

    /// On the runtime pool, out of memory: frees the cache (`free_cache`, whether it freed
    /// any) and says what to wait for before the retry: the latest drain if it covers every
    /// free counted and this one freed nothing, else a synchronisation of the release stream
    /// (`synchronize`: what to await, and its completion, published as the latest drain);
    /// `None` if nothing was ever given back, so no memory is on its way.
    ///
    /// The cache is freed and the drain published under the drain lock, so a request never
    /// finds the cache emptied by a drain it cannot see yet. Taken again on this thread or
    /// against the lock order, the lock is not waited for: the drain then goes ahead
    /// unlocked, and a request that finds the cache emptied meanwhile fails out of memory
    /// rather than deadlock.
    pub(crate) fn drain<O>(
        &self,
        free_cache: impl FnOnce() -> bool,
        synchronize: impl FnOnce() -> (O, C),
    ) -> Option<Drain<C, O>> {
        let mut locked = lock_drain(&self.draining);
        let freed = free_cache();
        // Read after this request's own frees, before the synchronisation is recorded: every
        // batch counted is on the stream ahead of the record.
        let queued = self.frees_queued();
        let latest = match &locked {
            Some(draining) => (**draining).clone(),
            None => self.latest(),
        };
        match latest {
            // One that completed may have done so after this request's attempt failed: the
            // retry costs one more attempt, and finds the memory if it came back.
            Some(latest) if !freed && latest.covers >= queued => {
                Some(Drain::Theirs(latest.completion))
            }
            None if !freed && queued == 0 => None,
            _ => {
                let (own, completion) = synchronize();
                let drained = Drained {
                    completion,
                    covers: queued,
                };
                match &mut locked {
                    Some(draining) => **draining = Some(drained),
                    None => self.publish(drained),
                }
                Some(Drain::Own(own))
            }
        }
    }

    /// The latest drain, for a drain that could not take the drain lock: only if it is free,
    /// since this thread may hold it already, or hold a lock ranked above it.
    fn latest(&self) -> Option<Drained<C>> {
        match self.draining.try_lock() {
            Ok(latest) => latest.clone(),
            Err(TryLockError::Poisoned(latest)) => latest.into_inner().clone(),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Makes `drain` the latest, for a drain that could not take the drain lock: only if it
    /// is free, as for [`latest`](Returns::latest).
    fn publish(&self, drain: Drained<C>) {
        match self.draining.try_lock() {
            Ok(mut latest) => *latest = Some(drain),
            Err(TryLockError::Poisoned(latest)) => *latest.into_inner() = Some(drain),
            Err(TryLockError::WouldBlock) => {}
        }
    }
}
