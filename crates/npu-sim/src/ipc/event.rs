//! The records of an event shared between processes (aclrtIpcGetEventHandle,
//! aclrtIpcOpenEventHandle): counters in a shared page that every process's records of the
//! event advance. A record takes the next number when it is issued; when its stream reaches it
//! (or drops it unreached) it publishes that number, so a wait issued while record `n` was the
//! latest is satisfied once a record numbered `n` or later has completed.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use super::page::{SharedPage, Words};
use crate::error::Res;
use crate::sync::{Bell, Listen, wait_until};

/// The page's layout.
#[repr(C)]
pub(crate) struct Counters {
    /// Bumped by every completion or drop (the futex).
    changes: AtomicU32,
    _pad: u32,
    /// The number of the latest record issued, by any process (0: never recorded).
    issued: AtomicU64,
    /// The highest number of a record that completed.
    done: AtomicU64,
    /// The highest number of a record its stream dropped without reaching it.
    dropped: AtomicU64,
}

// SAFETY: a repr(C) struct of atomics (the padding word is plain zero bytes that nothing
// writes), valid when zero: an event never recorded.
unsafe impl Words for Counters {
    fn futex(&self) -> &AtomicU32 {
        &self.changes
    }

    fn rings(seen: u32, last: Option<u32>) -> bool {
        last != Some(seen)
    }
}

/// How a record numbered `n` ended, as far as every process's records tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// It, or a later record, completed.
    Done,
    /// It was dropped unreached (an abort), and nothing as late completed.
    Dropped,
}

/// An event's shared record counters, in this process.
pub(crate) struct SharedEvent {
    page: Arc<SharedPage<Counters>>,
    /// Rung by this process's completions and, through the watcher, other processes'.
    bell: Bell,
}

impl SharedEvent {
    /// New counters (nothing recorded), at an event's first export.
    pub(crate) fn create() -> Res<Arc<Self>> {
        Self::with(SharedPage::create("an event")?)
    }

    /// The counters another process shared.
    pub(crate) fn map(file: Arc<OwnedFd>) -> Res<Arc<Self>> {
        Self::with(SharedPage::map(file)?)
    }

    fn with(page: SharedPage<Counters>) -> Res<Arc<Self>> {
        let shared = Arc::new(SharedEvent {
            page: Arc::new(page),
            bell: Bell::new(),
        });
        shared
            .page
            .watch("event", Arc::downgrade(&shared), |shared: &SharedEvent| {
                shared.bell.ring()
            })?;
        Ok(shared)
    }

    /// The shared page, for the broker to hand out.
    pub(crate) fn file(&self) -> &Arc<OwnedFd> {
        self.page.file()
    }

    fn counters(&self) -> &Counters {
        self.page.words()
    }

    /// Numbers a new record: the latest from now on.
    pub(crate) fn issue(&self) -> u64 {
        self.counters().issued.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The number of the latest record issued (0: never recorded).
    pub(crate) fn latest(&self) -> u64 {
        self.counters().issued.load(Ordering::Acquire)
    }

    /// Record `n` completed (or was never queued, so it stands for nothing pending).
    pub(crate) fn complete(&self, n: u64) {
        self.counters().done.fetch_max(n, Ordering::AcqRel);
        self.changed();
    }

    /// Record `n` was dropped by its stream without being reached.
    pub(crate) fn drop_record(&self, n: u64) {
        self.counters().dropped.fetch_max(n, Ordering::AcqRel);
        self.changed();
    }

    fn changed(&self) {
        self.counters().changes.fetch_add(1, Ordering::AcqRel);
        self.page.wake();
        self.bell.ring();
    }

    /// How record `n` ended, `None` while it is pending.
    pub(crate) fn reached(&self, n: u64) -> Option<Reached> {
        if self.counters().done.load(Ordering::Acquire) >= n {
            Some(Reached::Done)
        } else if self.counters().dropped.load(Ordering::Acquire) >= n {
            Some(Reached::Dropped)
        } else {
            None
        }
    }

    /// What a wait for a record listens to.
    pub(crate) fn listen(&self) -> Listen<'_> {
        self.bell.any()
    }

    /// Blocks until record `n` has ended, or `deadline` passes (`None` then).
    pub(crate) fn wait(&self, n: u64, deadline: Option<Instant>) -> Option<Reached> {
        wait_until(&[self.listen()], deadline, || self.reached(n))
    }
}
