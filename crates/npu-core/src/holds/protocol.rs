//! The count of the holds of npu-rs's completing threads, and the wait for the holds raised
//! before it. Written against `super::sync`, so that the loom model (`holds::model`) checks the
//! very code the library runs.
//!
//! A hold is raised in the slot of the current generation (its parity) and lowered there. A
//! wait moves the generation on, so that the holds raised after it go to the other slot and
//! cannot keep it waiting: it waits for the previous generation's slot to empty (none is
//! raised there while the generation it read is current), moves the generation on, and waits
//! for the slot of the generation it read to empty. Either wait also ends once another wait
//! has moved the generation past it (that one saw the slot empty first). So a wait returns
//! once every hold raised before it began is lowered, however busy the completing threads
//! are. A raise costs a read-modify-write, two loads and a fence; a lowering a
//! read-modify-write, and a fence and a load when it empties a slot.
//!
//! Each side writes one atomic and then reads the other's (a raise writes its slot and reads
//! the generation, a wait moves the generation and reads the slot; a lowering writes its slot
//! and reads the waiters, a waiter counts itself and reads the slots): the store-buffering
//! pattern, where each read must not miss the other side's write. Every access here is
//! `SeqCst`, which alone forbids that outcome under Rust's (C++20's) memory model. The `SeqCst`
//! fence between the write and the read on each side is for the model checker: loom treats
//! `SeqCst` accesses as `AcqRel` (and so reports this pattern as a lost wake-up without
//! them) but models `SeqCst` fences exactly. They cost little next to the read-modify-write
//! before each.

use std::time::Instant;

use super::sync::{AtomicUsize, Condvar, Mutex, MutexGuard, Ordering::SeqCst, fence};

/// Keeps an atomic on a cache line of its own: the slots are written by every completion,
/// the generation read by every raise and the waiters by a lowering that empties a slot, so
/// sharing a line would make each completion take the line from the others for writing.
#[repr(align(64))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The holds and their waiters.
pub(crate) struct Holds {
    /// Holds are raised in slot `generation & 1`.
    generation: Padded<AtomicUsize>,
    held: [Padded<AtomicUsize>; 2],
    /// Threads in [`Holds::wait_for_earlier`]: a lowering that empties a slot notifies only
    /// when there is one.
    waiters: Padded<AtomicUsize>,
    lock: Mutex<()>,
    changed: Condvar,
}

/// Counts a waiter while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Holds {
    pub(crate) fn new() -> Self {
        Holds {
            generation: Padded(AtomicUsize::new(0)),
            held: [Padded(AtomicUsize::new(0)), Padded(AtomicUsize::new(0))],
            waiters: Padded(AtomicUsize::new(0)),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    /// Raises a hold; returns its slot, for [`Holds::lower`].
    pub(crate) fn raise(&self) -> usize {
        loop {
            let generation = self.generation.load(SeqCst);
            let slot = generation & 1;
            self.held[slot].fetch_add(1, SeqCst);
            // Unmoved since: the hold was counted before any wait moved the generation on,
            // so every wait that begins later sees it. Moved: a wait may have found the slot
            // empty already; raised again in the new generation's. The fence pairs with the
            // wait's after its move (for loom: see the module's notes).
            fence(SeqCst);
            if self.generation.load(SeqCst) == generation {
                return slot;
            }
            self.lower(slot);
        }
    }

    /// Lowers a hold raised in `slot`.
    pub(crate) fn lower(&self, slot: usize) {
        // A waiter counts itself before it looks at the slots, under the lock: either it sees
        // this lowering, or this sees it and notifies once it waits (the fence pairs with
        // the waiter's after its count; for loom: see the module's notes).
        if self.held[slot].fetch_sub(1, SeqCst) == 1 {
            fence(SeqCst);
            if self.waiters.load(SeqCst) > 0 {
                drop(self.locked());
                self.changed.notify_all();
            }
        }
    }

    fn locked(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every hold raised before the call has been lowered: `true`; `false` if
    /// `deadline` (`None`: no bound) passed first.
    pub(crate) fn wait_for_earlier(&self, deadline: Option<Instant>) -> bool {
        let mut guard = self.locked();
        self.waiters.fetch_add(1, SeqCst);
        let _waiting = Waiting(&self.waiters);
        fence(SeqCst);
        let generation = self.generation.load(SeqCst);
        // Holds raised in earlier generations of the other parity (a wait that ran out left
        // them): none is raised there while `generation` is current.
        let moved = || self.generation.load(SeqCst).wrapping_sub(generation);
        while self.held[(generation & 1) ^ 1].load(SeqCst) != 0 && moved() == 0 {
            guard = match self.wait(guard, deadline) {
                Some(guard) => guard,
                None => return false,
            };
        }
        if self
            .generation
            .compare_exchange(generation, generation.wrapping_add(1), SeqCst, SeqCst)
            .is_ok()
        {
            self.changed.notify_all();
        }
        fence(SeqCst);
        while self.held[generation & 1].load(SeqCst) != 0 && moved() < 2 {
            guard = match self.wait(guard, deadline) {
                Some(guard) => guard,
                None => return false,
            };
        }
        true
    }

    /// One wait for a change, `None` once `deadline` has passed.
    fn wait<'a>(
        &'a self,
        guard: MutexGuard<'a, ()>,
        deadline: Option<Instant>,
    ) -> Option<MutexGuard<'a, ()>> {
        let Some(deadline) = deadline else {
            return Some(self.changed.wait(guard).unwrap_or_else(|e| e.into_inner()));
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let waited = self.changed.wait_timeout(guard, left);
        Some(waited.unwrap_or_else(|e| e.into_inner()).0)
    }
}
