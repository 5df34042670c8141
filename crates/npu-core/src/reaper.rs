//! The reaper: one background thread that runs deferred releases.
//!
//! Releasing a resource can mean an ACL call (`aclrtFree`, `aclrtDestroyStream`, which waits
//! for the stream's work) or returning a block to a pool. None of that may run on the reactor
//! thread, inside a lock, or inside an ACL callback, so completions hand their deferred actions
//! here.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};

/// Work to run once, after completion, off the completing thread's critical path.
pub(crate) type Action = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// Set on the reaper thread.
    static ON_REAPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How many shared-thread scopes this thread is in (nested): a completion, from its
    /// first step to the completer's drop, or the whole body of one of npu-rs's own threads
    /// that serve every stream (the reactor, a callback worker, the sentinel, the overseer). User
    /// code runs there (wakers, a tracing subscriber's callbacks) and values whose last
    /// handle is dropped there (an event pool's, a waker's), and a teardown of a context or a
    /// runtime they trigger must not run there (see [`off_shared_threads`]).
    static SHARED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `body` as a shared thread of npu-rs's (see `SHARED`): a context or runtime whose
/// last handle is dropped meanwhile on this thread is torn down on a thread of its own, so
/// that ACL's finalisation or a device reset never holds up the work this thread serves.
/// The mark is removed when `body` returns, even if it unwinds.
///
/// For npu-rs's own crates (a completion's wake, the threads npu-stream starts), not for
/// applications.
#[doc(hidden)]
pub fn as_shared_thread<R>(_: crate::seal::Seal, body: impl FnOnce() -> R) -> R {
    struct Shared;
    impl Drop for Shared {
        fn drop(&mut self) {
            SHARED.with(|depth| depth.set(depth.get() - 1));
        }
    }
    SHARED.with(|depth| depth.set(depth.get() + 1));
    let _shared = Shared;
    body()
}

/// Releases handed to the reaper thread and not yet run (counted from before they are sent
/// until their batch has run), so that a bounded look at the reaper ([`flush_until`]) needs no
/// marker when nothing is queued: a wait with no time to spare then still succeeds.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// How many [`flush_until`] markers have been queued: a batch handed to the reaper from
/// elsewhere is tagged with this count (its origin), a marker with its own new value, so that
/// the batches tagged below a marker's origin are those handed on before it (and whatever
/// those queue in turn). Read, not written, by a release's hand-off.
static MARKERS: AtomicU64 = AtomicU64::new(0);

/// A batch on its way to the reaper: its origin (see [`MARKERS`]), whether the reaper queued
/// it for itself, its actions.
type Batch = (u64, bool, Vec<Action>);

/// The reaper thread's own bookkeeping of the batches it queued for itself (a release that
/// hands on another release: a stream's drop, say, dropping a value whose release is deferred
/// too), which go behind any marker queued meanwhile. Only the reaper thread touches it, and a
/// marker reads it there, so a batch queued by a release is recorded before any marker behind
/// that release runs.
#[derive(Default)]
struct Requeued {
    /// The origin of the batch running now: a batch it queues inherits it.
    running: u64,
    /// Batches queued by the reaper for itself and not run yet, by origin.
    waiting: BTreeMap<u64, usize>,
}

thread_local! {
    static REQUEUED: RefCell<Requeued> = RefCell::new(Requeued::default());
}

/// The reaper's queue, starting its thread on first use: `Some(None)` if it could not start
/// (releases then run where they are handed on), `None` in a forked child whose parent had not
/// started it (see [`crate::fork::start_once`]).
fn sender() -> Option<&'static Option<Sender<Batch>>> {
    static SENDER: OnceLock<Option<Sender<Batch>>> = OnceLock::new();
    crate::fork::start_once(crate::SEAL, &SENDER, || {
        #[cfg(test)]
        crate::fork::held::here();
        let (tx, rx) = channel::<Batch>();
        let spawned = std::thread::Builder::new()
            .name("npu-reaper".into())
            .spawn(move || {
                ON_REAPER.with(|on| on.set(true));
                for (origin, requeued, batch) in rx {
                    REQUEUED.with_borrow_mut(|r| r.running = origin);
                    let ran = batch.len();
                    batch.into_iter().for_each(run);
                    if requeued {
                        REQUEUED.with_borrow_mut(|r| r.ran(origin));
                    }
                    QUEUED.fetch_sub(ran, Ordering::AcqRel);
                }
            });
        match spawned {
            Ok(_) => Some(tx),
            Err(err) => {
                crate::log!(error, %err, "cannot start the npu-reaper thread; releasing inline");
                None
            }
        }
    })
}

impl Requeued {
    fn ran(&mut self, origin: u64) {
        if let Some(left) = self.waiting.get_mut(&origin) {
            *left -= 1;
            if *left == 0 {
                self.waiting.remove(&origin);
            }
        }
    }

    /// Whether a batch the reaper queued for itself, from a batch handed on before the marker
    /// of origin `marker`, has not run yet.
    fn waiting_before(&self, marker: u64) -> bool {
        self.waiting
            .keys()
            .next()
            .is_some_and(|&origin| origin < marker)
    }
}

fn run(action: Action) {
    if crate::contain::contained(crate::SEAL, action) {
        crate::log!(error, "a deferred release panicked; the reaper continues");
    }
}

/// Queues actions for the reaper thread (or runs them here if it could not be started).
pub(crate) fn run_later(actions: Vec<Action>) {
    send(None, actions);
}

/// [`run_later`], tagged with `marker`'s origin for a [`flush_until`] marker, else with the
/// current one (see [`MARKERS`]); on the reaper, with the origin of the batch it runs, and
/// recorded as waiting (before it is sent, so that no marker behind the running batch misses
/// it).
fn send(marker: Option<u64>, actions: Vec<Action>) {
    let rejected = match sender() {
        // As a child whose reaper the parent started finds it: a thread it does not have, so
        // the releases never run. Neither would they do anything the child needs: the runtime
        // they release into is the parent's, refused here (`crate::fork`).
        None => {
            std::mem::forget(actions);
            return;
        }
        Some(Some(tx)) => {
            let count = actions.len();
            QUEUED.fetch_add(count, Ordering::AcqRel);
            let on_reaper = ON_REAPER.with(std::cell::Cell::get);
            let origin = if on_reaper {
                REQUEUED.with_borrow_mut(|r| {
                    *r.waiting.entry(r.running).or_default() += 1;
                    r.running
                })
            } else {
                marker.unwrap_or_else(|| MARKERS.load(Ordering::Relaxed))
            };
            match tx.send((origin, on_reaper, actions)) {
                Ok(()) => return,
                Err(err) => {
                    if on_reaper {
                        REQUEUED.with_borrow_mut(|r| r.ran(origin));
                    }
                    QUEUED.fetch_sub(count, Ordering::AcqRel);
                    err.0.2
                }
            }
        }
        Some(None) => actions,
    };
    rejected.into_iter().for_each(run);
}

/// Whether this is the reaper or a shared thread ([`as_shared_thread`]).
pub(crate) fn on_shared_thread() -> bool {
    ON_REAPER.with(std::cell::Cell::get) || SHARED.with(std::cell::Cell::get) > 0
}

/// Runs `teardown` (of a context or runtime of the library `library` identifies) here, unless
/// this is the reaper or a shared thread ([`as_shared_thread`]): then on a thread of its own
/// (`npu-teardown`), so that a teardown that may wait (resetting a device, finalising ACL)
/// holds up no release of the process, and no operation the shared thread (the process-wide
/// reactor, a device's callback worker, ...) would complete next. Inline if that thread cannot
/// be started. A teardown handed off is counted until it ends, for
/// [`wait_for_teardowns`](crate::wait_for_teardowns) and a runtime build to wait for.
pub(crate) fn off_shared_threads(library: usize, teardown: impl FnOnce() + Send + 'static) {
    if !on_shared_thread() {
        return teardown();
    }
    // Counted before the thread can start, so that whoever sees the last handle gone finds
    // the teardown counted; ended when the closure is done with, wherever it runs (or unwinds).
    let running = crate::teardown::Running::start(library);
    // Shared with the thread, so that a refused spawn (which drops its closure) leaves the
    // teardown here to run.
    let shared = std::sync::Arc::new(std::sync::Mutex::new(Some((teardown, running))));
    let theirs = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("npu-teardown".into())
        .spawn(move || {
            crate::teardown::Running::mark_thread();
            let handed = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((teardown, _running)) = handed {
                teardown();
            }
        });
    if let Err(err) = spawned {
        crate::log!(warn, %err, "cannot start a teardown thread; tearing down here");
        let handed = shared.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((teardown, _running)) = handed {
            teardown();
        }
    }
}

/// A teardown of a library's that a thread of npu-rs's own will make later, counted from
/// [`counted`] until dropped: [`wait_for_teardowns`](crate::wait_for_teardowns), and a runtime
/// build waiting for its library's teardowns, wait for it. For a thread that holds a handle of
/// a runtime it will let go of once it is no longer needed (a device's callback worker, once
/// its last stream is gone), and may then make the last drop: the count starts where the
/// program lets go, so a wait made after that sees it, and ends once the thread has let go.
#[doc(hidden)]
#[must_use = "the teardown is counted only while the `Counted` is held"]
pub struct Counted(#[allow(dead_code, reason = "held for its drop")] crate::teardown::Running);

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted").finish_non_exhaustive()
    }
}

/// Starts counting a teardown of library `library` (`Runtime::library_id`): see [`Counted`].
#[doc(hidden)]
pub fn counted(_: crate::seal::Seal, library: usize) -> Counted {
    Counted(crate::teardown::Running::start(library))
}

/// Starts a thread of npu-rs's own, named `name`, for `job`, which holds a handle of a runtime
/// of library `library` (`Runtime::library_id`): a context, a pool's memory. Such a thread may
/// drop the last handle and tear the context or the runtime down where it runs, as its own
/// thread may (it serves no other operation), so it counts as a teardown of that library from
/// now until `job` and everything it captured are gone (also if it unwinds):
/// [`wait_for_teardowns`](crate::wait_for_teardowns), and a runtime build waiting for its
/// library's teardowns, wait for it. `Err` if the thread cannot start (`job` is then dropped
/// here, and the count with it).
#[doc(hidden)]
pub fn spawn_counted(
    seal: crate::seal::Seal,
    name: &str,
    library: usize,
    job: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    let running = counted(seal, library);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::teardown::Running::mark_thread();
            // Dropped at the end of this closure: after `job` has run and its captures are gone.
            let _running = running;
            job();
        })
        .map(drop)
}

/// Runs `release` on the reaper thread: for dropping something from a thread that must not
/// make ACL calls (a completer, the reactor), such as a stream whose work is all done.
///
/// # Safety
///
/// `release` must not block: no wait for the device, for another operation or for a release
/// ([`flush`]). The reaper runs every deferred release of the process in turn, so a release
/// that waits holds all of them up, and one that waits for the reaper never returns.
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// // SAFETY: sending on an unbounded channel does not block.
/// unsafe {
///     npu_core::reaper::release_later(move || {
///         let thread = std::thread::current().name().map(str::to_owned);
///         tx.send(thread).unwrap();
///     })
/// };
/// assert_eq!(rx.recv().unwrap().as_deref(), Some("npu-reaper"));
/// ```
#[doc(hidden)]
pub unsafe fn release_later(release: impl FnOnce() + Send + 'static) {
    run_later(vec![Box::new(release)]);
}

/// Blocks until every release queued before this call has run.
///
/// Tests use it to observe that resources really were released; production code never needs
/// it.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use npu_core::UseList;
/// # use npu_core::Device;
/// # use npu_stream::{Notify, Stream};
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let notify = Notify::new(&ctx)?;
///
/// // A resource's release deferred behind an operation the device holds until another
/// // stream sets the notify: it goes to the reaper once the operation completes.
/// let op = waiting.wait_notify(&notify);
/// let mut uses = UseList::new();
/// uses.record(op.completion());
/// let released = Arc::new(AtomicBool::new(false));
/// let flag = released.clone();
/// // SAFETY: storing a flag does not block.
/// unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
/// drop(setting.record_notify(&notify));
/// tokio_test::block_on(op)?;
/// npu_core::reaper::flush();
/// assert!(released.load(Ordering::SeqCst));
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// On the reaper thread itself (user code the reaper runs: a tracing subscriber's callback, a
/// waker it wakes) it returns at once: the releases queued before the call run once the
/// current one returns, and waiting for them there would never return, stopping every
/// deferred release of the process. In a forked child ([`forked`](crate::forked): forked
/// after npu-rs started a runtime or one of its threads, this reaper included) it returns at
/// once too: the reaper thread stayed in the parent. So it does on a thread that holds one of
/// npu-rs's locks (a tracing subscriber's callback from an ACL call npu-rs makes under its
/// stream's submission lock, an event's recording lock, the runtime's device and
/// peer-access lock or a device pool's drain lock): a release queued before the call may
/// take that lock (a peer-access guard's drop, a pooled block's return), and the reaper would
/// wait for this thread while it waited for the reaper.
pub fn flush() {
    if let Some(marker) = marker(MARKERS.load(Ordering::Relaxed)) {
        let _ = marker.recv();
    }
}

/// [`flush`], bounded, and exhaustive: whether the reaper ran, by `deadline`, the releases
/// queued before the call and every release those queued in turn, however deep (at once,
/// with `true`, when none is queued, and where `flush` returns at once). Batches handed on
/// after the call, and those they queue, are not waited for, so a reaper kept busy by them
/// does not keep this looking.
pub(crate) fn flush_until(deadline: std::time::Instant) -> bool {
    if QUEUED.load(Ordering::Acquire) == 0 {
        return true;
    }
    flush_from(MARKERS.fetch_add(1, Ordering::Relaxed) + 1, deadline)
}

/// [`flush_until`] from its first marker's origin `first` (taken from [`MARKERS`]) on.
fn flush_from(first: u64, deadline: std::time::Instant) -> bool {
    loop {
        let Some(marker) = marker(first) else {
            return true;
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // The marker sends when it runs: whether a batch queued by one handed on before the
        // first marker was still waiting behind it.
        match marker.recv_timeout(left) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return false,
            Ok(true) => continue,
            _ => return true,
        }
    }
}

/// Whether this thread may wait for the reaper to pass a marker. Not on the reaper itself
/// (the marker would queue behind the release waiting for it), nor in a forked child (the
/// reaper thread is the parent's: nothing would ever run the marker), nor while it holds one
/// of npu-rs's ranked locks (user code npu-rs calls under one: a tracing subscriber's
/// callback from an ACL call made under it). A release queued before the marker may take
/// that lock (a peer-access guard's drop takes the runtime's, a pooled block's return a
/// device pool's drain lock), and the reaper would wait for this thread while this thread
/// waited for the reaper, for ever, holding up every deferred release of the process.
fn may_wait_for_the_reaper() -> bool {
    !ON_REAPER.with(std::cell::Cell::get)
        && !crate::fork::forked()
        && !crate::contain::holds_a_lock()
}

/// A marker queued on the reaper behind every release handed to it so far: the receiver
/// hears from it once they have run (whether a batch the reaper queued for itself from one
/// handed on before the marker of origin `origin` was still waiting then). `None` where no
/// wait may be made for it ([`may_wait_for_the_reaper`]).
fn marker(origin: u64) -> Option<std::sync::mpsc::Receiver<bool>> {
    if !may_wait_for_the_reaper() {
        return None;
    }
    let (tx, rx) = channel();
    send(
        Some(origin),
        vec![Box::new(move || {
            let _ = tx.send(REQUEUED.with_borrow(|r| r.waiting_before(origin)));
        })],
    );
    Some(rx)
}

/// Resolves once the reaper has run every release handed to it before this call: the
/// asynchronous [`flush`], which blocks no thread.
///
/// For a request that must know whether memory already on its way back has arrived: a
/// release is handed to the reaper only once the device is done with what it frees (an
/// operation's value, a buffer's deferred free or return to its pool), so what it waits for is
/// the reaper's own immediate calls, never device work. A device pool out of memory awaits it
/// before it decides whether anything came back.
///
/// In a forked child ([`forked`](crate::forked)) it resolves at once, as [`flush`]
/// returns: the reaper thread stayed in the parent. Called on the reaper thread itself (from
/// a release), it resolves at once too, as [`flush`] returns at once there: the marker would
/// queue behind the release awaiting it; and so it does on a thread that holds one of
/// npu-rs's locks, where [`flush`] returns at once too, whether it is asked for or polled
/// there. Without a reaper thread (it could not be started) releases run where they are
/// handed on, so it resolves at once too.
///
/// Under a paused Tokio clock it keeps the clock still until the reaper has passed, as every
/// npu-rs future that waits for work done elsewhere does (it is a [`Completion::wait`]).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use npu_core::UseList;
/// # use npu_core::Device;
/// # use npu_stream::{Notify, Stream};
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let notify = Notify::new(&ctx)?;
///
/// // A resource's release deferred behind an operation the device holds until another
/// // stream sets the notify: it goes to the reaper once the operation completes.
/// let op = waiting.wait_notify(&notify);
/// let mut uses = UseList::new();
/// uses.record(op.completion());
/// let released = Arc::new(AtomicBool::new(false));
/// let flag = released.clone();
/// // SAFETY: storing a flag does not block.
/// unsafe { uses.release(move || flag.store(true, Ordering::SeqCst)) };
/// drop(setting.record_notify(&notify));
/// tokio_test::block_on(op)?;
/// tokio_test::block_on(npu_core::reaper::passed());
/// assert!(released.load(Ordering::SeqCst));
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// [`Completion::wait`]: crate::Completion::wait
pub fn passed() -> Passed {
    // SAFETY: no device work and no memory stand behind this completion: it only tells when
    // the reaper reached the marker.
    let marker = unsafe { crate::Completer::new() };
    let pass = marker.completion().wait();
    if !may_wait_for_the_reaper() {
        marker.complete(Ok(()));
    } else {
        // A marker dropped unrun abandons the completion, which ends the wait too.
        run_later(vec![Box::new(move || marker.complete(Ok(())))]);
    }
    Passed(pass)
}

/// The future of [`passed`]. Dropping it drops only the wait: the reaper's marker still runs
/// (and does nothing).
///
/// ```
/// let passed: npu_core::reaper::Passed = npu_core::reaper::passed();
/// tokio_test::block_on(passed); // nothing was queued before it: the reaper passes at once
/// ```
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct Passed(crate::Wait);

impl std::future::Future for Passed {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        // Checked at each poll, not only where the pass was asked for: a pass asked for on a
        // free thread and then blocked on where no wait for the reaper may be made (under one
        // of npu-rs's locks, in a forked child) would wait for the reaper while the reaper
        // may wait for this thread.
        if !may_wait_for_the_reaper() {
            return std::task::Poll::Ready(());
        }
        std::pin::Pin::new(&mut self.0).poll(cx).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::task::{Context, Waker};
    use std::time::{Duration, Instant};

    /// "A forked child is refused, never hung" for the reaper's start: a thread is held inside
    /// it (across its thread's spawn), in a process where no runtime started yet, while this
    /// thread forks. In the child, handing on a release returns at once (bounded by the
    /// child's alarm), leaking it: the reaper is never started there.
    ///
    /// The break: the child's hand-off waited on the reaper's start, which the holder never
    /// completes there (killed by its alarm).
    #[test]
    fn a_child_forked_inside_the_reapers_start_hands_releases_on_without_waiting() {
        crate::fork::held::in_a_fresh_process(
            "reaper::tests::a_child_forked_inside_the_reapers_start_hands_releases_on_without_waiting",
            || {
                crate::fork::held::forked_inside_a_start(
                    || {
                        run_later(vec![Box::new(|| {})]);
                        sender().is_some()
                    },
                    crate::fork::forked,
                )
            },
        );
    }

    /// "A forked child is refused, never hung" after a one-time start made with no runtime:
    /// [`flush`], public, starts the reaper in a fresh process where no runtime was made; a
    /// child forked then (outside any window) must be a forked child, and its `flush` and
    /// `passed` return at once (bounded by the child's alarm), while the parent is none.
    ///
    /// The break: the child was no forked child (no runtime had started), found the reaper's
    /// start made and its thread absent, and its `flush` waited for ever (killed by its
    /// alarm).
    #[test]
    fn a_child_of_a_process_that_started_the_reaper_without_a_runtime_is_forked_and_flushes() {
        use crate::fork::held;
        held::in_a_fresh_process(
            "reaper::tests::a_child_of_a_process_that_started_the_reaper_without_a_runtime_is_forked_and_flushes",
            || {
                flush();
                assert!(!crate::fork::forked(), "the parent is no forked child");
                let status = held::in_a_forked_child(|| {
                    let forked = crate::fork::forked();
                    flush();
                    tokio_test::block_on(passed());
                    forked
                });
                assert!(
                    held::exited_ok(status),
                    "the child hung, or was no forked child (status {status:#x})"
                );
                flush();
            },
        );
    }

    /// Holds the reaper in a release until the returned sender sends (or drops), for at most
    /// 30 s: the window in which a release is queued and has not run. Returns once the
    /// reaper runs it.
    fn hold_the_reaper() -> Sender<()> {
        let (open, opened) = channel::<()>();
        let (running, ran) = channel::<()>();
        // SAFETY: the release holds the reaper on purpose, for a test and at most 30 s.
        unsafe {
            release_later(move || {
                let _ = running.send(());
                let _ = opened.recv_timeout(Duration::from_secs(30));
            })
        };
        ran.recv().unwrap();
        open
    }

    /// A release that queues itself again until told to stop: a reaper kept busy by releases
    /// that have nothing to do with a flush.
    fn churn(stop: Arc<AtomicBool>) {
        // SAFETY: the release loads a flag and queues itself: it does not block.
        unsafe {
            release_later(move || {
                if !stop.load(Ordering::SeqCst) {
                    churn(stop);
                }
            })
        };
    }

    /// A flush waits only for what was handed on before it (and what that queues): releases
    /// the reaper keeps queueing for itself from a batch handed on after the flush began do
    /// not keep it looking until its deadline. The break (a flush that looked again whenever
    /// the reaper had queued anything for itself meanwhile): `false` after 30 s.
    #[test]
    fn a_churning_reaper_does_not_starve_a_flush() {
        let open = hold_the_reaper();
        let first = MARKERS.fetch_add(1, Ordering::Relaxed) + 1;
        let stop = Arc::new(AtomicBool::new(false));
        churn(stop.clone());
        let flusher =
            std::thread::spawn(move || flush_from(first, Instant::now() + Duration::from_secs(30)));
        open.send(()).unwrap();
        let flushed = flusher.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        assert!(flushed, "the flush ran out behind releases queued after it");
    }

    /// `passed` resolves only once the releases queued before it ran: pending while the
    /// reaper is held in one, ready once that one returns; a second wait dropped unpolled
    /// meanwhile harms neither the reaper nor the first.
    #[test]
    fn passed_waits_for_the_releases_queued_before_it() {
        let open = hold_the_reaper();
        let mut pass = std::pin::pin!(passed());
        let dropped = passed();
        let polled = pass.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(
            polled.is_pending(),
            "the reaper has not run the held release"
        );
        drop(dropped);
        open.send(()).unwrap();
        tokio_test::block_on(pass);
    }

    /// Polled on the reaper thread (by a release), `passed` is ready at once, as `flush`
    /// returns at once there: its marker would queue behind the release awaiting it, and a
    /// release blocking on it would hold the reaper for ever. The break: pending.
    #[test]
    fn passed_on_the_reaper_is_ready_at_once() {
        let (ready, was_ready) = channel::<bool>();
        // SAFETY: the release polls a future once and sends a flag: it does not block.
        unsafe {
            release_later(move || {
                let mut pass = std::pin::pin!(passed());
                let polled = pass.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                let _ = ready.send(polled.is_ready());
            })
        };
        assert!(was_ready.recv().unwrap(), "ready on the reaper thread");
    }

    /// A pass asked for on a free thread and polled under one of npu-rs's ranked locks is
    /// ready at once there, as a flush under such a lock returns at once: a release queued
    /// before it may take that lock. Pending again once the lock is let go, until the held
    /// release has run. The break (the check made only where the pass was asked for): pending
    /// under the lock, and a thread blocking on it there would wait for the reaper for ever.
    #[test]
    fn passed_polled_under_a_ranked_lock_is_ready_at_once() {
        let open = hold_the_reaper();
        let mut pass = std::pin::pin!(passed());
        let mut poll = || pass.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        let lock = std::sync::Mutex::new(());
        let held = crate::contain::lock_here(crate::SEAL, &lock, crate::contain::Rank::Runtime);
        assert!(held.is_some(), "the lock is free");
        assert!(poll().is_ready(), "ready under the lock");
        drop(held);
        assert!(
            poll().is_pending(),
            "the reaper has not run the held release"
        );
        open.send(()).unwrap();
    }

    /// Under a paused Tokio clock, `passed` keeps the clock still while the reaper runs the
    /// releases queued before it: a one-hour timeout around it does not fire while a release
    /// holds the reaper. The reaper is let go only once the runtime's thread sleeps, which a
    /// runtime whose clock may jump never does: it jumps to the timer instead. The break: a
    /// wait no keeper held let the clock jump to the timeout.
    #[test]
    fn passed_keeps_a_paused_clock_until_the_reaper_passes() {
        let open = hold_the_reaper();
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        let state = std::path::Path::new("/proc").join(me).join("stat");
        let (polled, first_poll) = channel::<()>();
        let opener = std::thread::spawn(move || {
            if first_poll.recv().is_ok() {
                // The state is the field after the command's closing parenthesis.
                let sleeping = || {
                    let stat = std::fs::read_to_string(&state).unwrap_or_default();
                    stat.rsplit(')')
                        .next()
                        .map(str::trim_start)
                        .is_some_and(|rest| rest.starts_with('S'))
                };
                while !sleeping() {
                    std::thread::yield_now();
                }
            }
            let _ = open.send(());
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let passed_in_time = runtime.block_on(async {
            let mut timed =
                std::pin::pin!(tokio::time::timeout(Duration::from_secs(3600), passed()));
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(timed.as_mut().poll(cx).is_pending())
            })
            .await;
            assert!(pending, "the reaper is held");
            polled.send(()).unwrap();
            timed.await.is_ok()
        });
        opener.join().unwrap();
        assert!(
            passed_in_time,
            "the one-hour timeout fired while the reaper was held"
        );
    }
}
