//! The tasks waiting for a pool to settle (`Cache::settled`) and their wake-up. A waiting
//! task stores its waker under its future's id and raises the `anyone` flag, both under the
//! list's lock, before it reads the pool's state; a change that takes the pool from unsettled
//! to settled (decided under the pool's state lock) looks at the list only when the flag is
//! up, so that a block's return costs no second lock while nobody waits. The flag is lowered
//! under the list's lock whenever the list is left empty (all taken to be woken, or the last
//! waiter gone), and raised under it by every arrival, so it is up whenever the list holds a
//! waker. Written against `super::sync`, so that the loom model (`pool::model`)
//! checks the very code the pool runs.

use std::collections::HashMap;
use std::collections::hash_map::IntoValues;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::task::{Poll, Waker};

use super::sync::{AtomicBool, Mutex, MutexGuard, Ordering};

/// The wakers of the tasks waiting for a pool to settle.
pub(crate) struct Settling {
    wakers: Mutex<Wakers>,
    /// Whether `wakers` holds a waker: read without the lock by a change that settled the pool.
    anyone: AtomicBool,
}

/// Each waiting future's waker under its id: keyed, so that a future's poll and drop find its
/// entry at once however many tasks wait.
struct Wakers {
    next_id: u64,
    by_id: ById,
}

/// Hashed with fixed keys: the ids are the pool's own, one after another, so there is no
/// flooding to fear, and the wakers are taken in the same order in every run (which loom
/// needs, replaying each interleaving).
type ById = HashMap<u64, Waker, BuildHasherDefault<DefaultHasher>>;

impl Settling {
    pub(crate) fn new() -> Self {
        Settling {
            wakers: Mutex::new(Wakers {
                next_id: 0,
                by_id: ById::default(),
            }),
            anyone: AtomicBool::new(false),
        }
    }

    /// A waiting future's poll: stores `waker` under the future's `id` (given one on its first
    /// poll), then asks `settled` (which reads the pool's state under its lock). Ready, with
    /// the entry removed, when it is settled. A waker's clone and drop are user code, which may
    /// return a block and so come here on this thread: both run outside the lock.
    pub(crate) fn poll(
        &self,
        id: &mut Option<u64>,
        waker: &Waker,
        settled: impl FnOnce() -> bool,
    ) -> Poll<()> {
        let waker = waker.clone();
        let replaced = {
            let mut wakers = self.lock();
            let wakers = &mut *wakers;
            let id = *id.get_or_insert_with(|| {
                wakers.next_id += 1;
                wakers.next_id
            });
            // Raised before the state is read below: a change that settles the pool after
            // that read takes the state lock after it, and so finds the flag up.
            self.anyone.store(true, Ordering::SeqCst);
            wakers.by_id.insert(id, waker)
        };
        drop(replaced);
        if settled() {
            drop(self.leave(id));
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Takes the future's waker out of the list (ready or dropped), to drop outside the lock.
    pub(crate) fn leave(&self, id: &mut Option<u64>) -> Option<Waker> {
        let id = id.take()?;
        let mut wakers = self.lock();
        let waker = wakers.by_id.remove(&id);
        if wakers.by_id.is_empty() {
            // So that a change settling the pool skips the list again once the last waiter
            // went away unwoken (a `select!` against a timeout). An arrival raises it again
            // under this lock before it reads the state.
            self.anyone.store(false, Ordering::SeqCst);
        }
        waker
    }

    /// After a change that left the pool settled: every stored waker, for the caller to wake
    /// (each is the waiting task's user code, so the caller contains each on its own). None
    /// without a lock while nobody waits.
    pub(crate) fn take(&self) -> IntoValues<u64, Waker> {
        if !self.anyone.load(Ordering::SeqCst) {
            return ById::default().into_values();
        }
        let mut wakers = self.lock();
        self.anyone.store(false, Ordering::SeqCst);
        std::mem::take(&mut wakers.by_id).into_values()
    }

    fn lock(&self) -> MutexGuard<'_, Wakers> {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }
}
