//! What a pool's queued allocations wait on when they wait on the device, for a paused Tokio
//! clock (`npu_core::paused_clock`).
//!
//! A queued allocation waits for capacity, which comes back when a block returns to the pool.
//! A block returns once its owner has dropped it and every operation recorded against it has
//! completed. The owner may be a task (host work, which Tokio sees), or the device itself: a
//! buffer dropped while an operation still uses it (retired), or owned by an operation whose
//! future was dropped in flight (dropped on the reaper once the device is done). So the pool
//! records every device use of its blocks while they are out, and a queued allocation under a
//! paused clock keeps it still while one of them is pending, and only then: when none is, the
//! blocks it waits for are held by tasks, and the clock may move to their timers.
//!
//! A keeper that finds nothing pending goes dormant instead of waiting: a use recorded later
//! (a task holding a block submits a copy on it and drops the copy) restarts it. The check
//! and the dormancy happen under the same lock as the record and the restart, so a use is
//! never recorded between a keeper finding nothing and going dormant.

use std::sync::{Arc, Mutex, MutexGuard};

use npu_core::paused_clock::{Keeper, SLICE};
use npu_core::{Completion, reaper};

/// The device uses of a pool's blocks that are out, and the keepers waiting for one.
#[derive(Default)]
pub(crate) struct DeviceUses {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Operations recorded against blocks that are out (completed ones are dropped as the list
    /// grows, and whenever a keeper looks). A block comes back only after its uses complete,
    /// so the pending ones are the device work the pool's capacity may wait on.
    uses: Vec<Completion>,
    /// The length at which a record prunes completed uses: twice what the last prune kept,
    /// so a record costs O(1) amortised however many operations are in flight.
    prune_at: usize,
    /// Keepers of queued allocations that found nothing pending, waiting for a use.
    dormant: Vec<Keeper>,
}

impl Inner {
    fn prune(&mut self) {
        self.uses.retain(|use_| !use_.is_complete());
        self.prune_at = (2 * self.uses.len()).max(16);
    }
}

impl DeviceUses {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the operation behind `completion` uses one of the pool's blocks, and
    /// restarts the keepers of queued allocations that were waiting for device work.
    pub(crate) fn record(self: &Arc<Self>, completion: &Completion) {
        let dormant = {
            let mut inner = self.lock();
            if inner.uses.len() >= inner.prune_at {
                inner.prune();
            }
            inner.uses.push(completion.clone());
            std::mem::take(&mut inner.dormant)
        };
        for keeper in dormant.into_iter().filter(Keeper::is_wanted) {
            self.keep(keeper);
        }
    }

    /// Keeps a paused clock for a queued allocation while a use is pending, and from the
    /// next use recorded once none is. The chain always starts, even with nothing pending: a
    /// use that completed just before may still be returning its block on the reaper.
    pub(crate) fn keep(self: &Arc<Self>, keeper: Keeper) {
        // The chain holds the list, not the pool: a pool dropped meanwhile is freed as usual.
        let uses = self.clone();
        keeper.keep(move |keeper| uses.slice(keeper));
    }

    /// One slice of a keeper: waits for a pending use for at most [`SLICE`]; returns whether
    /// to hand on (false: nothing pending, and the keeper went dormant).
    fn slice(&self, keeper: &Keeper) -> bool {
        let next = {
            let mut inner = self.lock();
            inner.prune();
            match inner.uses.first() {
                Some(next) => next.clone(),
                None => {
                    drop(inner);
                    return self.settle(keeper);
                }
            }
        };
        if next.blocking_waiter().wait_for(SLICE).is_some() && !next.is_complete() {
            // Abandoned: its completer was dropped without completing, so it never completes
            // and the block it used never comes back. Nothing will satisfy a wait for it.
            self.lock().uses.retain(|use_| !use_.same(&next));
        }
        true
    }

    /// The slice after the last pending use completed: the blocks it held come back on the
    /// reaper (a retired block's return, the drop of a dropped operation's buffers), which
    /// Tokio cannot see either, and serve the allocation from there. So the keeper waits for
    /// the reaper to run what the completions queued before going dormant; once it has, a
    /// served allocation's task has been woken, and the clock cannot move past it. Returns
    /// whether to hand on (the reaper is still busy).
    fn settle(&self, keeper: &Keeper) -> bool {
        if !reaper::flush_within(Some(SLICE)) {
            return true;
        }
        let mut inner = self.lock();
        inner.prune();
        if !inner.uses.is_empty() {
            return true; // recorded meanwhile: keep waiting
        }
        if keeper.is_wanted() {
            inner.dormant.retain(Keeper::is_wanted);
            inner.dormant.push(keeper.clone());
        }
        false
    }
}
