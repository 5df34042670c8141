//! Tracking which operations still use a resource, and releasing it after them.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use super::{Completion, memory_error_from_level, memory_error_level};
use crate::code::MemoryErrorKind;

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
/// use npu_core::UseList;
/// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
/// # use npu_core::Device;
/// # use npu_stream::{Notify, Stream};
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let notify = Notify::new(&ctx)?;
///
/// let uses = UseList::new();
/// // An operation the device holds until another stream sets the notify.
/// let op = waiting.wait_notify(&notify);
/// uses.record(op.completion());
/// assert_eq!(uses.pending(), 1);
///
/// let freed = Arc::new(AtomicBool::new(false));
/// let flag = freed.clone();
/// let mut uses = uses; // as in a `Drop`, which has the only access left
/// // SAFETY: storing a flag does not block.
/// unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
/// assert!(!freed.load(Ordering::SeqCst), "still in use");
/// drop(setting.record_notify(&notify));
/// tokio_test::block_on(op)?;
/// npu_core::reaper::flush(); // tests only: the release ran on the reaper
/// assert!(freed.load(Ordering::SeqCst));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Default)]
pub struct UseList {
    uses: Mutex<Uses>,
}

#[derive(Default)]
struct Uses {
    /// The uses that have not completed, and at most one of each kind of device memory error
    /// that completed with one: pruning forgets a completed use, but not what it said about
    /// the memory. Kept in the list rather than as a flag beside it, which would make every
    /// buffer (and so every operation's error, which hands the buffer back) a word larger.
    pending: Vec<Completion>,
}

impl Uses {
    /// Drops completed uses but the first that failed with each kind of memory error (a load
    /// per completed use). One of each, not the first of any: a later use's worse error must
    /// outlive the pruning as well as an earlier milder one.
    fn prune(&mut self) {
        let mut noted = 0u8; // a bit per memory error level
        self.pending.retain(|c| {
            if !c.is_complete() {
                return true;
            }
            let Some(kind) = c.memory_error_kind() else {
                return false;
            };
            let bit = 1 << memory_error_level(kind);
            let keep = noted & bit == 0;
            noted |= bit;
            keep
        });
    }

    /// The worst device memory error a use completed with (after [`prune`](Uses::prune)).
    fn memory_error(&self) -> Option<MemoryErrorKind> {
        self.pending
            .iter()
            .filter(|c| c.is_complete())
            .filter_map(Completion::memory_error_kind)
            .max()
    }

    /// The uses that have not completed (after [`prune`](Uses::prune)).
    fn in_flight(&self) -> impl Iterator<Item = &Completion> {
        self.pending.iter().filter(|c| !c.is_complete())
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
    /// use npu_core::UseList;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    ///
    /// let uses = UseList::new();
    /// let (held, run) = (waiting.wait_notify(&notify), setting.synchronize());
    /// uses.record(held.completion());
    /// uses.record(run.completion());
    /// assert_eq!(uses.pending(), 2);
    /// tokio_test::block_on(run)?;
    /// assert_eq!(uses.pending(), 1);
    /// # drop(setting.record_notify(&notify));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn record(&self, completion: &Completion) {
        let mut uses = self.lock();
        uses.prune();
        uses.pending.push(completion.clone());
    }

    /// How many recorded operations have not completed.
    ///
    /// ```
    /// use npu_core::UseList;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    ///
    /// let uses = UseList::new();
    /// let (running, finished) = (waiting.wait_notify(&notify), setting.synchronize());
    /// uses.record(finished.completion());
    /// uses.record(running.completion());
    /// tokio_test::block_on(finished)?;
    /// assert_eq!(uses.pending(), 1, "only the unfinished operation counts");
    /// # drop(setting.record_notify(&notify));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn pending(&self) -> usize {
        self.lock().in_flight().count()
    }

    /// The recorded operations that have not completed, for waiting on them (for example
    /// before handing memory back to its owner).
    ///
    /// ```
    /// use npu_core::UseList;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    ///
    /// let uses = UseList::new();
    /// let op = waiting.wait_notify(&notify);
    /// uses.record(op.completion());
    /// assert!(uses.pending_uses()[0].same(op.completion()));
    /// drop(setting.record_notify(&notify));
    /// tokio_test::block_on(op)?;
    /// assert!(uses.pending_uses().is_empty());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn pending_uses(&self) -> Vec<Completion> {
        let mut uses = self.lock();
        uses.prune();
        uses.in_flight().cloned().collect()
    }

    /// Whether every recorded operation has completed. It takes `&mut self`, as a resource's
    /// `Drop` has it, so that no new use can be recorded after the answer: `true` stays true.
    ///
    /// ```
    /// use npu_core::UseList;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    ///
    /// let mut uses = UseList::new();
    /// assert!(uses.is_idle());
    /// let op = waiting.wait_notify(&notify);
    /// uses.record(op.completion());
    /// assert!(!uses.is_idle());
    /// drop(setting.record_notify(&notify));
    /// tokio_test::block_on(op)?;
    /// assert!(uses.is_idle());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn is_idle(&mut self) -> bool {
        let uses = self.uses_mut();
        uses.prune();
        uses.in_flight().next().is_none()
    }

    /// The worst kind of device memory error an operation recorded here has completed with
    /// ([`Error::memory_error_kind`](crate::Error::memory_error_kind)), if any: whether a
    /// pool may repair the memory, or must never hand it out again. It takes `&mut self`
    /// like [`is_idle`](UseList::is_idle), which a pooled buffer's `Drop` asks first: once
    /// idle, the answer is final.
    ///
    /// ```
    /// use npu_core::{AclCode, Device, MemoryErrorKind, UseList};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let mut uses = UseList::new();
    /// for (code, worst) in [
    ///     (AclCode::DEVICE_MEM_ERROR, MemoryErrorKind::Repairable),
    ///     (AclCode::HBM_MULTI_BIT_ECC_ERROR, MemoryErrorKind::Unrepairable),
    /// ] {
    ///     let stream = Stream::new(&ctx)?;
    ///     npu_sim::control::fail_task(stream.as_raw(), 1, code.0).unwrap(); // npu-sim: it faults
    ///     let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    ///     uses.record(op.completion());
    ///     assert!(tokio_test::block_on(op).is_err());
    ///     assert_eq!(uses.memory_error_kind(), Some(worst), "the worst so far");
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn memory_error_kind(&mut self) -> Option<MemoryErrorKind> {
        let uses = self.uses_mut();
        uses.prune();
        uses.memory_error()
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
        // SAFETY: the caller upholds the same contract.
        unsafe { self.release_noting_memory_error_kind(move |_| release()) }
    }

    /// [`release`](UseList::release), telling `release` the worst kind of device memory
    /// error any recorded operation completed with
    /// ([`memory_error_kind`](UseList::memory_error_kind), once they all have): for a pool,
    /// which repairs memory with a repairable error before caching it again, and never hands
    /// out memory with an unrepairable one.
    ///
    /// # Safety
    ///
    /// As for [`release`](UseList::release): `release` must not block.
    ///
    /// ```
    /// use npu_core::{AclCode, Device, MemoryErrorKind, UseList};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let code = AclCode::HBM_MULTI_BIT_ECC_ERROR.0;
    /// npu_sim::control::fail_task(stream.as_raw(), 1, code).unwrap(); // npu-sim: it faults
    /// let mut uses = UseList::new();
    /// let bad = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// uses.record(bad.completion());
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// // SAFETY: sending on an unbounded channel does not block.
    /// unsafe { uses.release_noting_memory_error_kind(move |kind| tx.send(kind).unwrap()) };
    /// drop(bad); // the device runs it all the same
    /// assert_eq!(rx.recv(), Ok(Some(MemoryErrorKind::Unrepairable)));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub unsafe fn release_noting_memory_error_kind(
        &mut self,
        release: impl FnOnce(Option<MemoryErrorKind>) + Send + 'static,
    ) {
        // One look at each use: a use seen complete has its memory error noted already (the
        // completer notes it before raising `done`); one seen running tells the countdown.
        let (mut pending, mut memory_error) = (Vec::new(), None);
        for completion in std::mem::take(&mut self.uses_mut().pending) {
            if completion.is_complete() {
                memory_error = memory_error.max(completion.memory_error_kind());
            } else {
                pending.push(completion);
            }
        }
        if pending.is_empty() {
            release(memory_error);
            return;
        }
        let countdown = std::sync::Arc::new(Countdown {
            remaining: AtomicUsize::new(pending.len()),
            memory_error: AtomicU8::new(memory_error.map_or(0, memory_error_level)),
            release: Mutex::new(Some(Box::new(release))),
        });
        for completion in pending {
            let countdown = countdown.clone();
            // The action keeps its completion to read its outcome when it runs: a cycle (the
            // completion holds the action) that completing breaks, as it takes the action.
            let used = completion.clone();
            // SAFETY: arriving is an atomic update; the release it may run does not block
            // (this method's contract, which the caller upholds).
            unsafe { completion.defer(move || countdown.arrive(used.memory_error_kind())) };
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

type Release = Box<dyn FnOnce(Option<MemoryErrorKind>) + Send>;

/// The release of a resource, run by whichever of its pending uses completes last.
struct Countdown {
    remaining: AtomicUsize,
    /// The worst device memory error a use failed with so far, as a completion stores it.
    memory_error: AtomicU8,
    release: Mutex<Option<Release>>,
}

impl Countdown {
    /// One pending use completed, with a memory error or not.
    fn arrive(&self, memory_error: Option<MemoryErrorKind>) {
        if let Some(kind) = memory_error {
            self.memory_error
                .fetch_max(memory_error_level(kind), Ordering::Relaxed);
        }
        // The AcqRel decrement orders every arrival's store before the last one's load.
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let release = self
                .release
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(release) = release {
                release(memory_error_from_level(
                    self.memory_error.load(Ordering::Relaxed),
                ));
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

    fn memory_error() -> crate::error::Error {
        AclError::new("aclrtMemsetAsync", AclCode::DEVICE_MEM_ERROR, None).into()
    }

    #[test]
    fn a_memory_error_outlives_the_pruning_of_its_use() {
        let mut uses = UseList::new();
        let bad = pending();
        uses.record(&bad.completion());
        bad.complete(Err(memory_error()));
        // Recording the next use prunes the failed one; the list still knows.
        let later = pending();
        uses.record(&later.completion());
        later.complete(Ok(()));
        assert!(uses.is_idle());
        assert_eq!(uses.memory_error_kind(), Some(MemoryErrorKind::Repairable));
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: sending on an unbounded channel does not block.
        unsafe { uses.release_noting_memory_error_kind(move |kind| tx.send(kind).unwrap()) };
        assert_eq!(
            rx.try_recv(),
            Ok(Some(MemoryErrorKind::Repairable)),
            "idle: released at once, with the error"
        );
    }

    #[test]
    fn a_deferred_release_hears_of_a_memory_error_from_any_use() {
        for failing in 0..2 {
            let mut uses = UseList::new();
            let ops = [pending(), pending()];
            for op in &ops {
                uses.record(&op.completion());
            }
            let (tx, rx) = std::sync::mpsc::channel();
            // SAFETY: sending on an unbounded channel does not block.
            unsafe { uses.release_noting_memory_error_kind(move |kind| tx.send(kind).unwrap()) };
            for (at, op) in ops.into_iter().enumerate() {
                // Another failure is no memory error.
                let other = AclError::new("aclrtMemsetAsync", AclCode(507015), None).into();
                op.complete(Err(if at == failing { memory_error() } else { other }));
            }
            assert_eq!(
                rx.recv(),
                Ok(Some(MemoryErrorKind::Repairable)),
                "use {failing} failed"
            );
        }
        let mut uses = UseList::new();
        let op = pending();
        uses.record(&op.completion());
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: sending on an unbounded channel does not block.
        unsafe { uses.release_noting_memory_error_kind(move |kind| tx.send(kind).unwrap()) };
        op.complete(Err(AclError::new(
            "aclrtMemsetAsync",
            AclCode(507015),
            None,
        )
        .into()));
        assert_eq!(rx.recv(), Ok(None));
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
