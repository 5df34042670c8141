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
/// thread. This is what makes dropping a buffer while the device still uses it safe.
///
/// ```
/// use npu_core::{Completion, UseList};
/// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
///
/// let uses = UseList::new();
/// let op = Completion::new();
/// uses.record(&op);
/// assert_eq!(uses.pending(), 1);
///
/// let freed = Arc::new(AtomicBool::new(false));
/// let flag = freed.clone();
/// uses.release(move || flag.store(true, Ordering::SeqCst));
/// assert!(!freed.load(Ordering::SeqCst), "still in use");
/// op.complete(Ok(()));
/// # while !freed.load(Ordering::SeqCst) { std::thread::yield_now(); }
/// ```
#[derive(Default)]
pub struct UseList {
    uses: Mutex<Vec<Completion>>,
}

impl UseList {
    /// An empty list.
    pub fn new() -> Self {
        UseList::default()
    }

    /// Records that the operation behind `completion` may touch the resource.
    pub fn record(&self, completion: &Completion) {
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        uses.retain(|c| !c.is_complete());
        uses.push(completion.clone());
    }

    /// How many recorded operations have not completed.
    pub fn pending(&self) -> usize {
        let uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        uses.iter().filter(|c| !c.is_complete()).count()
    }

    /// Runs `release` once every recorded operation has completed: at once on this thread if
    /// none is pending, otherwise on the reaper thread after the last one.
    pub fn release(&self, release: impl FnOnce() + Send + 'static) {
        let pending: Vec<Completion> = {
            let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *uses)
                .into_iter()
                .filter(|c| !c.is_complete())
                .collect()
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
            completion.defer(move || countdown.arrive());
        }
    }
}

impl fmt::Debug for UseList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UseList")
            .field("pending", &self.pending())
            .finish()
    }
}

struct Countdown {
    remaining: AtomicUsize,
    release: Mutex<Option<Box<dyn FnOnce() + Send>>>,
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
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn release_waits_for_every_use() {
        let uses = UseList::new();
        let (a, b) = (Completion::new(), Completion::new());
        uses.record(&a);
        uses.record(&b);
        let (tx, rx) = std::sync::mpsc::channel();
        uses.release(move || tx.send(()).unwrap());
        a.complete(Ok(()));
        assert!(rx.try_recv().is_err(), "one use is still pending");
        b.complete(Ok(()));
        rx.recv().unwrap();
    }

    #[test]
    fn release_without_pending_uses_runs_inline() {
        let uses = UseList::new();
        let done = Completion::new();
        done.complete(Ok(()));
        uses.record(&done);
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        uses.release(move || flag.store(true, Ordering::SeqCst));
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
        assert_eq!(uses.uses.lock().unwrap().len(), 1);
        assert_eq!(uses.pending(), 0);
    }
}
