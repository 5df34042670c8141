//! Tracking which operations still use a resource, and releasing it after them.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::Completion;

/// How the operations recorded against a resource ended, as seen by its release.
///
/// An operation that failed with an ACL error proves less than one that succeeded: the
/// reactor fails every pending operation of a stream it finds broken without waiting for the
/// device, so such an operation's tasks may still be queued. Releases that hand memory back
/// to the OS or to a pool therefore take a device-synchronising path (or leak) after
/// `Failed`. Errors from npu-rs's own checks (invalid arguments, missing functions) happen
/// before ACL sees the work and count as `Clean`.
///
/// ```
/// use npu_core::{AclCode, AclError, Completion, Settled, UseList};
///
/// let uses = UseList::new();
/// let op = Completion::new();
/// uses.record(&op);
/// op.complete(Err(AclError::new("aclrtMemcpyAsync", AclCode(507015), None).into()));
/// let (tx, rx) = std::sync::mpsc::channel();
/// uses.release(move |settled| tx.send(settled).unwrap());
/// assert_eq!(rx.recv().unwrap(), Settled::Failed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settled {
    /// Every recorded operation succeeded or was rejected before reaching ACL.
    Clean,
    /// At least one recorded operation failed with an ACL error; the device may not be done.
    Failed,
}

/// The operations that may still touch a resource (device memory, pinned memory, a host
/// registration): the completions recorded against it.
///
/// A resource's `Drop` hands its release to [`UseList::release`], which runs it at once when
/// nothing is pending and otherwise after the last recorded operation completes, on the reaper
/// thread. This is what makes dropping a buffer while the device still uses it safe.
///
/// ```
/// use npu_core::{Completion, Settled, UseList};
/// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
///
/// let uses = UseList::new();
/// let op = Completion::new();
/// uses.record(&op);
/// assert_eq!(uses.pending(), 1);
///
/// let freed = Arc::new(AtomicBool::new(false));
/// let flag = freed.clone();
/// uses.release(move |settled| flag.store(settled == Settled::Clean, Ordering::SeqCst));
/// assert!(!freed.load(Ordering::SeqCst), "still in use");
/// op.complete(Ok(()));
/// # while !freed.load(Ordering::SeqCst) { std::thread::yield_now(); }
/// ```
#[derive(Default)]
pub struct UseList {
    uses: Mutex<Uses>,
}

#[derive(Default)]
struct Uses {
    pending: Vec<Completion>,
    /// Whether a use already pruned from `pending` failed with an ACL error.
    failed: bool,
}

/// Whether a completed operation failed in a way that leaves the device's progress unknown.
fn ended_in_failure(completion: &Completion) -> bool {
    matches!(completion.result(), Some(Err(err)) if err.acl_code().is_some())
}

impl Uses {
    /// Drops completed uses, remembering whether any of them failed.
    fn prune(&mut self) {
        let mut failed_any = false;
        self.pending.retain(|c| {
            let done = c.is_complete();
            failed_any |= done && ended_in_failure(c);
            !done
        });
        self.failed |= failed_any;
    }
}

impl UseList {
    /// An empty list.
    ///
    /// ```
    /// use npu_core::{Settled, UseList};
    ///
    /// let uses = UseList::new();
    /// assert_eq!(uses.pending(), 0);
    /// assert_eq!(uses.settled(), Some(Settled::Clean), "nothing to wait for");
    /// ```
    pub fn new() -> Self {
        UseList::default()
    }

    /// Records that the operation behind `completion` may touch the resource.
    ///
    /// ```
    /// use npu_core::{Completion, UseList};
    ///
    /// let uses = UseList::new();
    /// let (copy, kernel) = (Completion::new(), Completion::new());
    /// uses.record(&copy);
    /// uses.record(&kernel);
    /// assert_eq!(uses.pending(), 2);
    /// copy.complete(Ok(()));
    /// assert_eq!(uses.pending(), 1);
    /// ```
    pub fn record(&self, completion: &Completion) {
        let mut uses = self.lock();
        uses.prune();
        uses.pending.push(completion.clone());
    }

    /// How many recorded operations have not completed.
    ///
    /// ```
    /// use npu_core::{Completion, UseList};
    ///
    /// let uses = UseList::new();
    /// let finished = Completion::new();
    /// finished.complete(Ok(()));
    /// uses.record(&finished);
    /// uses.record(&Completion::new());
    /// assert_eq!(uses.pending(), 1, "only the unfinished operation counts");
    /// ```
    pub fn pending(&self) -> usize {
        self.lock()
            .pending
            .iter()
            .filter(|c| !c.is_complete())
            .count()
    }

    /// The recorded operations that have not completed, for waiting on them (for example
    /// before handing memory back to its owner).
    ///
    /// ```
    /// use npu_core::{Completion, UseList};
    ///
    /// let uses = UseList::new();
    /// let op = Completion::new();
    /// uses.record(&op);
    /// assert!(uses.pending_uses()[0].same(&op));
    /// op.complete(Ok(()));
    /// assert!(uses.pending_uses().is_empty());
    /// ```
    pub fn pending_uses(&self) -> Vec<Completion> {
        let mut uses = self.lock();
        uses.prune();
        uses.pending.clone()
    }

    /// How the recorded operations ended, once none is pending; `None` while one is.
    ///
    /// ```
    /// use npu_core::{Completion, Settled, UseList};
    ///
    /// let uses = UseList::new();
    /// let op = Completion::new();
    /// uses.record(&op);
    /// assert_eq!(uses.settled(), None);
    /// op.complete(Ok(()));
    /// assert_eq!(uses.settled(), Some(Settled::Clean));
    /// ```
    pub fn settled(&self) -> Option<Settled> {
        let mut uses = self.lock();
        uses.prune();
        match (uses.pending.is_empty(), uses.failed) {
            (false, _) => None,
            (true, false) => Some(Settled::Clean),
            (true, true) => Some(Settled::Failed),
        }
    }

    /// Runs `release` once every recorded operation has completed, telling it how they ended.
    ///
    /// With nothing pending it runs at once on this thread; otherwise on the reaper thread
    /// after the last one. A [`Settled::Failed`] release always runs on the reaper thread,
    /// because it may synchronise the device and the dropping thread must never block.
    ///
    /// ```
    /// use npu_core::{Settled, UseList};
    ///
    /// let uses = UseList::new();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// uses.release(move |settled| tx.send(settled).unwrap());
    /// // Nothing was pending, so the release already ran, on this thread.
    /// assert_eq!(rx.try_recv(), Ok(Settled::Clean));
    /// ```
    pub fn release(&self, release: impl FnOnce(Settled) + Send + 'static) {
        let (pending, failed) = {
            let mut uses = self.lock();
            uses.prune();
            (std::mem::take(&mut uses.pending), uses.failed)
        };
        if pending.is_empty() {
            if failed {
                crate::reaper::release_later(move || release(Settled::Failed));
            } else {
                release(Settled::Clean);
            }
            return;
        }
        let countdown = std::sync::Arc::new(Countdown {
            remaining: AtomicUsize::new(pending.len()),
            failed: AtomicBool::new(failed),
            release: Mutex::new(Some(Box::new(release))),
        });
        for completion in pending {
            let countdown = countdown.clone();
            let watched = completion.clone();
            completion.defer(move || countdown.arrive(ended_in_failure(&watched)));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Uses> {
        self.uses.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for UseList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UseList")
            .field("pending", &self.pending())
            .finish()
    }
}

type Release = Box<dyn FnOnce(Settled) + Send>;

struct Countdown {
    remaining: AtomicUsize,
    failed: AtomicBool,
    release: Mutex<Option<Release>>,
}

impl Countdown {
    fn arrive(&self, failed: bool) {
        if failed {
            self.failed.store(true, Ordering::Release);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let release = self
                .release
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            let settled = if self.failed.load(Ordering::Acquire) {
                Settled::Failed
            } else {
                Settled::Clean
            };
            if let Some(release) = release {
                release(settled);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::AclCode;
    use crate::error::{AclError, Error};
    use std::sync::Arc;

    /// Releases `uses` into a channel that receives how they settled.
    fn released(uses: &UseList) -> std::sync::mpsc::Receiver<Settled> {
        let (tx, rx) = std::sync::mpsc::channel();
        uses.release(move |settled| tx.send(settled).unwrap());
        rx
    }

    fn acl_failure() -> Error {
        AclError::new("aclrtMemcpyAsync", AclCode(507015), None).into()
    }

    #[test]
    fn release_waits_for_every_use() {
        let uses = UseList::new();
        let (a, b) = (Completion::new(), Completion::new());
        uses.record(&a);
        uses.record(&b);
        let rx = released(&uses);
        a.complete(Ok(()));
        assert!(rx.try_recv().is_err(), "one use is still pending");
        b.complete(Ok(()));
        assert_eq!(rx.recv().unwrap(), Settled::Clean);
    }

    #[test]
    fn release_without_pending_uses_runs_inline() {
        let uses = UseList::new();
        let done = Completion::new();
        done.complete(Ok(()));
        uses.record(&done);
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        uses.release(move |_| flag.store(true, Ordering::SeqCst));
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn completed_uses_are_pruned_on_record() {
        let uses = UseList::new();
        for _ in 0..100 {
            let op = Completion::new();
            uses.record(&op);
            op.complete(Ok(()));
        }
        assert_eq!(uses.lock().pending.len(), 1);
        assert_eq!(uses.pending(), 0);
    }

    #[test]
    fn a_pruned_acl_failure_is_remembered() {
        let uses = UseList::new();
        let failed = Completion::new();
        uses.record(&failed);
        failed.complete(Err(acl_failure()));
        let later = Completion::new();
        uses.record(&later); // prunes the failed use
        let rx = released(&uses);
        later.complete(Ok(()));
        assert_eq!(rx.recv().unwrap(), Settled::Failed);
    }

    #[test]
    fn a_failure_while_pending_settles_failed() {
        let uses = UseList::new();
        let (a, b) = (Completion::new(), Completion::new());
        uses.record(&a);
        uses.record(&b);
        let rx = released(&uses);
        a.complete(Err(acl_failure()));
        b.complete(Ok(()));
        assert_eq!(rx.recv().unwrap(), Settled::Failed);
    }

    #[test]
    fn an_argument_rejection_settles_clean() {
        let uses = UseList::new();
        let rejected = Completion::new();
        uses.record(&rejected);
        rejected.complete(Err(Error::invalid("Stream::copy_h2d", "dst", "too short")));
        let rx = released(&uses);
        assert_eq!(rx.recv().unwrap(), Settled::Clean);
    }
}
