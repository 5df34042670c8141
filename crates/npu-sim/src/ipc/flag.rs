//! The state of a notify shared between processes: one 32-bit word in a shared page, set by
//! any process's record and cleared by any process's wait; the word is its own futex, so a
//! record in one process wakes the waits of the others.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use super::page::{SharedPage, Words};
use crate::error::Res;

const SET: u32 = 1;

// SAFETY: a single atomic, valid when zero (cleared).
unsafe impl Words for AtomicU32 {
    fn futex(&self) -> &AtomicU32 {
        self
    }

    /// Every wake-up while the flag is set rings: the waits clear it, not the watcher.
    fn rings(seen: u32, _last: Option<u32>) -> bool {
        seen & SET != 0
    }
}

/// A notify's flag word in shared memory.
pub(crate) struct SharedFlag {
    page: Arc<SharedPage<AtomicU32>>,
}

impl SharedFlag {
    /// A new, cleared flag in a new shared page.
    pub(crate) fn create() -> Res<Self> {
        Ok(SharedFlag {
            page: Arc::new(SharedPage::create("a notify")?),
        })
    }

    /// Maps the flag page another process shared.
    pub(crate) fn map(file: Arc<OwnedFd>) -> Res<Self> {
        Ok(SharedFlag {
            page: Arc::new(SharedPage::map(file)?),
        })
    }

    /// The shared page, for the broker to hand out.
    pub(crate) fn file(&self) -> &Arc<OwnedFd> {
        self.page.file()
    }

    /// A record: sets the flag and wakes the watchers of every process.
    pub(crate) fn set(&self) {
        self.page.words().fetch_or(SET, Ordering::AcqRel);
        self.page.wake();
    }

    /// A wait's reset: clears the flag; whether it was set.
    pub(crate) fn take(&self) -> bool {
        self.page.words().swap(0, Ordering::AcqRel) & SET != 0
    }

    /// Starts the thread that turns records made by other processes into rings of `ring`'s
    /// bell, for as long as `owner` lives.
    pub(crate) fn watch<T: Send + Sync + 'static>(&self, owner: Weak<T>, ring: fn(&T)) -> Res<()> {
        self.page.watch("notify", owner, ring)
    }
}
