//! Tracking which operations still use a resource, and releasing it after them.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Completion;

/// The operations that may still touch a resource (device memory, pinned memory, a host
/// registration): the completions recorded against it.
///
/// A resource's `Drop` hands its release to [`UseList::release`], which runs it at once when
/// nothing is pending and otherwise after the last recorded operation completes, on the reaper
/// thread. This is what makes dropping a buffer while the device still uses it safe: an
/// operation completes only once the device will never touch its memory again, whether it
/// succeeded or failed, so every release can use the runtime's immediate calls.
///
/// It is public for implementers of `npu_mem::Memory`, whose contract requires one.
///
/// ```
/// use npu_core::{Completer, UseList};
/// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
///
/// let uses = UseList::new();
/// // SAFETY: no device work stands behind this completion.
/// let op = unsafe { Completer::new() };
/// uses.record(&op.completion());
/// assert_eq!(uses.pending(), 1);
///
/// let freed = Arc::new(AtomicBool::new(false));
/// let flag = freed.clone();
/// let mut uses = uses; // as in a `Drop`, which has the only access left
/// // SAFETY: storing a flag does not block.
/// unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
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
}

impl Uses {
    /// Drops completed uses.
    fn prune(&mut self) {
        self.pending.retain(|c| !c.is_complete());
    }
}

impl UseList {
    /// An empty list.
    ///
    /// ```
    /// use npu_core::UseList;
    ///
    /// let uses = UseList::new();
    /// assert_eq!(uses.pending(), 0);
    /// assert!(uses.pending_uses().is_empty(), "nothing to wait for");
    /// ```
    pub fn new() -> Self {
        UseList::default()
    }

    /// Records that the operation behind `completion` may touch the resource.
    ///
    /// ```
    /// use npu_core::{Completer, UseList};
    ///
    /// let uses = UseList::new();
    /// // SAFETY: no device work stands behind these completions.
    /// let (copy, kernel) = unsafe { (Completer::new(), Completer::new()) };
    /// uses.record(&copy.completion());
    /// uses.record(&kernel.completion());
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
    /// use npu_core::{Completer, UseList};
    ///
    /// let uses = UseList::new();
    /// // SAFETY: no device work stands behind these completions.
    /// let (finished, running) = unsafe { (Completer::new(), Completer::new()) };
    /// uses.record(&finished.completion());
    /// uses.record(&running.completion());
    /// finished.complete(Ok(()));
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
    /// use npu_core::{Completer, UseList};
    ///
    /// let uses = UseList::new();
    /// // SAFETY: no device work stands behind this completion.
    /// let op = unsafe { Completer::new() };
    /// uses.record(&op.completion());
    /// assert!(uses.pending_uses()[0].same(&op.completion()));
    /// op.complete(Ok(()));
    /// assert!(uses.pending_uses().is_empty());
    /// ```
    pub fn pending_uses(&self) -> Vec<Completion> {
        let mut uses = self.lock();
        uses.prune();
        uses.pending.clone()
    }

    /// Whether every recorded operation has completed. It takes `&mut self`, as a resource's
    /// `Drop` has it, so that no new use can be recorded after the answer: `true` stays true.
    ///
    /// ```
    /// use npu_core::{Completer, UseList};
    ///
    /// let mut uses = UseList::new();
    /// assert!(uses.is_idle());
    /// // SAFETY: no device work stands behind this completion.
    /// let op = unsafe { Completer::new() };
    /// uses.record(&op.completion());
    /// assert!(!uses.is_idle());
    /// op.complete(Ok(()));
    /// assert!(uses.is_idle());
    /// ```
    pub fn is_idle(&mut self) -> bool {
        let uses = self.uses_mut();
        uses.prune();
        uses.pending.is_empty()
    }

    /// Runs `release` once every recorded operation has completed.
    ///
    /// With nothing pending it runs at once on this thread; otherwise on the reaper thread
    /// after the last one (or here, if that one completes while this call hands the release
    /// on). It takes `&mut self` because it is a resource's last word, said from its `Drop`:
    /// nothing can record a use while it runs. An operation whose completer is dropped
    /// without completing never completes, so `release` then never runs: the resource is
    /// leaked rather than released while the device may still use it.
    ///
    /// # Safety
    ///
    /// `release` must not block: no wait for the device, for another operation or for a
    /// release (`npu_core::reaper::flush`), no lock held across such a wait. It may run on the
    /// reaper, which every deferred release of the process shares (freeing memory with the
    /// runtime's immediate calls, returning a block to a pool): a release that waits holds all
    /// of them up, and one that waits for the reaper never returns.
    ///
    /// ```
    /// use npu_core::UseList;
    ///
    /// let mut uses = UseList::new();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// // SAFETY: sending on an unbounded channel does not block.
    /// unsafe { uses.release(move || tx.send("released").unwrap()) };
    /// // Nothing was pending, so the release already ran, on this thread.
    /// assert_eq!(rx.try_recv(), Ok("released"));
    /// ```
    pub unsafe fn release(&mut self, release: impl FnOnce() + Send + 'static) {
        let pending = {
            let uses = self.uses_mut();
            uses.prune();
            std::mem::take(&mut uses.pending)
        };
        if pending.is_empty() {
            release();
            return;
        }
        let countdown = std::sync::Arc::new(Countdown {
            remaining: AtomicUsize::new(pending.len()),
            release: Mutex::new(Some(Box::new(release))),
        });
        for completion in pending {
            let countdown = countdown.clone();
            // SAFETY: arriving is an atomic decrement; the release it may run does not block
            // (this method's contract, which the caller upholds).
            unsafe { completion.defer(move || countdown.arrive()) };
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Uses> {
        self.uses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The list without locking: exclusive access needs no atomic operation, which keeps a
    /// pooled buffer's drop cheap.
    fn uses_mut(&mut self) -> &mut Uses {
        self.uses.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for UseList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UseList")
            .field("pending", &self.pending())
            .finish()
    }
}

type Release = Box<dyn FnOnce() + Send>;

/// The release of a resource, run by whichever of its pending uses completes last.
struct Countdown {
    remaining: AtomicUsize,
    release: Mutex<Option<Release>>,
}

impl Countdown {
    fn arrive(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let release = self
                .release
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(release) = release {
                release();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::AclCode;
    use crate::completion::Completer;
    use crate::error::AclError;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    fn pending() -> Completer {
        // SAFETY: no device work stands behind these test completions.
        unsafe { Completer::new() }
    }

    /// Releases `uses` into a channel that receives the releasing thread's name.
    fn released(uses: &mut UseList) -> std::sync::mpsc::Receiver<Option<String>> {
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: sending on an unbounded channel does not block.
        unsafe {
            uses.release(move || {
                let thread = std::thread::current().name().map(str::to_owned);
                tx.send(thread).unwrap()
            })
        };
        rx
    }

    #[test]
    fn release_waits_for_every_use() {
        let mut uses = UseList::new();
        let (a, b) = (pending(), pending());
        uses.record(&a.completion());
        uses.record(&b.completion());
        let rx = released(&mut uses);
        a.complete(Ok(()));
        assert!(rx.try_recv().is_err(), "one use is still pending");
        b.complete(Ok(()));
        assert_eq!(rx.recv().unwrap().as_deref(), Some("npu-reaper"));
    }

    #[test]
    fn release_without_pending_uses_runs_inline() {
        let mut uses = UseList::new();
        let done = pending();
        uses.record(&done.completion());
        done.complete(Ok(()));
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        // SAFETY: storing a flag does not block.
        unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn completed_uses_are_pruned_on_record() {
        let uses = UseList::new();
        for _ in 0..100 {
            let op = pending();
            uses.record(&op.completion());
            op.complete(Ok(()));
        }
        assert_eq!(uses.lock().pending.len(), 1);
        assert_eq!(uses.pending(), 0);
    }

    #[test]
    fn a_failed_use_releases_like_a_successful_one() {
        let mut uses = UseList::new();
        let (failed, later) = (pending(), pending());
        uses.record(&failed.completion());
        uses.record(&later.completion());
        let rx = released(&mut uses);
        failed.complete(Err(AclError::new(
            "aclrtMemcpyAsync",
            AclCode(507015),
            None,
        )
        .into()));
        assert!(rx.try_recv().is_err(), "one use is still pending");
        later.complete(Ok(()));
        assert!(rx.recv().is_ok());
    }

    #[test]
    fn an_abandoned_use_leaks_the_resource() {
        let mut uses = UseList::new();
        let lost = pending();
        uses.record(&lost.completion());
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        // SAFETY: storing a flag does not block.
        unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
        drop(lost);
        crate::reaper::flush();
        assert!(
            !ran.load(Ordering::SeqCst),
            "never released while possibly in use"
        );
    }
}
