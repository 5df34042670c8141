//! Completions: the shared state of one device operation, and work deferred until it is done.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::code::MemoryErrorKind;
use crate::error::{Error, Result};
use crate::paused_clock::{ClockHold, SLICE};
use blocked::Signal;
use state::{Deferred, Registration};

mod blocked;
mod chain;
mod state;
mod uses;

#[cfg(test)]
mod model;

pub use uses::UseList;

/// How a completion's state stores a [`MemoryErrorKind`]: 0 for none, and higher for worse,
/// so that the worst of several is their maximum.
pub(crate) fn memory_error_level(kind: MemoryErrorKind) -> u8 {
    match kind {
        MemoryErrorKind::Repairable => 1,
        MemoryErrorKind::Unrepairable => 2,
    }
}

/// The kind a [`memory_error_level`] stands for.
pub(crate) fn memory_error_from_level(level: u8) -> Option<MemoryErrorKind> {
    match level {
        0 => None,
        1 => Some(MemoryErrorKind::Repairable),
        _ => Some(MemoryErrorKind::Unrepairable),
    }
}

/// Std-backed primitives and clock for [`state`] and [`blocked`]; the loom model test supplies
/// loom's instead, and a clock of its own.
mod sync {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub(crate) use std::time::Instant;
}

/// The completion of one device operation: the read side, shared by whoever waits for it (a
/// future, a buffer's deferred release, another thread).
///
/// A `Completion` can be waited for and inspected, never completed: only the operation's
/// completer, held by npu-rs's completion machinery (the reactor, the callback worker, the
/// blocking waiter), completes it, and only once the device will never again touch the memory
/// the operation used. That is what lets a buffer's release wait for it.
///
/// An operation's completion comes from the operation (npu-stream's `Op::completion`):
///
/// ```
/// use npu_core::Device;
/// use npu_stream::Stream;
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// let op = stream.synchronize();
/// let done = op.completion().clone(); // outlives the operation's future
/// drop(op); // the device runs it all the same
/// done.wait_blocking()?;
/// assert!(done.result().unwrap().is_ok());
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Completion {
    state: Arc<state::State<Result<()>>>,
}

/// The write side of a [`Completion`]: completes it, exactly once.
///
/// Only npu-rs's completion machinery makes one (its constructor is `unsafe` and hidden), so
/// it is not part of the documented API: a program waits for and inspects [`Completion`]s,
/// which npu-stream's operations hand out.
///
/// Completing hands the deferred releases to the reaper thread, then makes the result visible,
/// then wakes the registered wakers outside every lock (a panicking waker is contained and
/// logged), then notifies blocked threads, so nothing a user owns is freed on the completing
/// thread and whoever sees the operation complete (woken, polling, or returning from
/// [`Completion::wait_blocking`]) finds its releases already queued
/// ([`reaper::flush`](crate::reaper::flush) then runs them).
///
/// Dropping a `Completer` without completing leaves the completion pending for ever: the
/// resources recorded against it are leaked rather than released while the device may use
/// them. Futures waiting for it ([`Completion::wait`], [`Completion::poll_result`]) stay
/// pending; threads blocked in [`Completion::wait_blocking`] or a [`BlockingWaiter`] are
/// woken with an [`Error::InvalidArgument`] saying the operation was abandoned, instead of
/// blocking for ever.
///
/// ```
/// use npu_core::{Completer, Error};
///
/// // SAFETY: no device work and no memory stand behind these completions.
/// let (done, abandoned) = unsafe { (Completer::new(), Completer::new()) };
/// let (first, second) = (done.completion(), abandoned.completion());
/// let blocked = std::thread::spawn(move || (first.wait_blocking(), second.wait_blocking()));
/// done.complete(Ok(()));
/// drop(abandoned); // never completed: the blocked thread must not wait for ever
/// let (first, second) = blocked.join().unwrap();
/// assert!(first.is_ok());
/// assert!(matches!(second, Err(Error::InvalidArgument { argument: "self", .. })));
/// ```
#[doc(hidden)]
pub struct Completer {
    state: Arc<state::State<Result<()>>>,
}

impl Completer {
    /// A new, pending operation.
    ///
    /// # Safety
    ///
    /// The caller completes it (with [`Completer::complete`]) only once the device will never
    /// again read or write memory that any operation recorded this completion against, and
    /// never runs a blocking call from an action deferred on it. npu-rs's own crates are the
    /// only intended callers: a completion completed early would let a buffer be freed while
    /// the device still writes into it.
    ///
    /// ```
    /// use npu_core::Completer;
    ///
    /// // SAFETY: no device work and no memory stand behind this completion.
    /// let completer = unsafe { Completer::new() };
    /// let done = completer.completion();
    /// completer.complete(Ok(()));
    /// assert!(done.is_complete());
    /// ```
    #[doc(hidden)]
    pub unsafe fn new() -> Self {
        Completer {
            state: Arc::new(state::State::new()),
        }
    }

    /// The read side, for the operation's future and the resources it uses.
    #[doc(hidden)]
    pub fn completion(&self) -> Completion {
        Completion {
            state: self.state.clone(),
        }
    }

    /// Completes with `result`.
    #[doc(hidden)]
    pub fn complete(self, result: Result<()>) {
        // A waker is user code: a panic in it must not take the completing thread (the
        // process-wide reactor, say) down with it, nor keep the other waiters asleep. Nor may
        // a waker, a release run here or the completer's own drop (the last reference to a
        // waker registered late) that drops the last handle of a context or a runtime make
        // this thread wait for its teardown (rule 5): marked as a shared thread until the
        // completer is gone, such a teardown goes to a thread of its own.
        crate::reaper::as_shared_thread(crate::SEAL, move || {
            let memory_error = result
                .as_ref()
                .err()
                .and_then(Error::memory_error_kind)
                .map_or(0, memory_error_level);
            let completed = self
                .state
                .complete_with(result, memory_error, &CompletingThread);
            if let Some(panicked @ 1..) = completed {
                crate::log!(
                    error,
                    panicked,
                    "a task's waker panicked while being woken; the completer continues"
                );
            }
            drop(self);
        });
    }
}

/// The library's steps of a completing thread: its hold, the reaper, the notify chain.
struct CompletingThread;

impl state::Completing for CompletingThread {
    fn hold(&self) {
        crate::holds::raise_if_completing();
    }

    fn hand_on(&self, releases: Vec<crate::reaper::Action>) {
        crate::reaper::run_later(releases);
    }

    fn notify(&self, notifies: Vec<crate::reaper::Action>) {
        chain::run(notifies);
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        if !self.state.is_complete() {
            self.state.abandon();
            crate::log!(
                error,
                "an operation was abandoned without completing; its resources stay allocated"
            );
        }
    }
}

impl fmt::Debug for Completer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completer")
            .field("complete", &self.state.is_complete())
            .finish()
    }
}

impl Completion {
    /// Whether the operation has completed.
    ///
    /// ```
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let (done, seen) = (op.completion().clone(), op.completion().clone());
    /// assert!(!done.is_complete());
    /// drop(setting.record_notify(&notify)); // the device runs it all the same
    /// seen.wait_blocking()?;
    /// assert!(done.is_complete(), "every clone sees the completion");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn is_complete(&self) -> bool {
        self.state.is_complete()
    }

    /// The result, once complete.
    ///
    /// ```
    /// use npu_core::{AclCode, Device};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap(); // npu-sim: the next task faults
    /// let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// let done = op.completion().clone();
    /// drop(op);
    /// let _ = done.wait_blocking();
    /// assert_eq!(done.result().unwrap().unwrap_err().acl_code(), Some(AclCode(507015)));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// `None` while it is pending:
    ///
    /// ```
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// assert!(op.completion().result().is_none(), "still pending");
    /// # drop(setting.record_notify(&notify));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn result(&self) -> Option<Result<()>> {
        self.state.value()
    }

    /// Polls for the result, registering `cx`'s waker while pending. All callers of
    /// `poll_result` share one registration: only the most recently registered waker is
    /// woken, as with Tokio's single-waiter primitives. To wait from several tasks at once,
    /// give each its own [`Completion::wait`], which keeps a registration of its own.
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let done = op.completion().clone();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(done.poll_result(&mut cx).is_pending());
    /// drop(setting.record_notify(&notify));
    /// # done.wait_blocking()?;
    /// assert!(matches!(done.poll_result(&mut cx), Poll::Ready(Ok(()))));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn poll_result(&self, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let mut shared = Registration::SHARED;
        self.state.poll(cx.waker(), &mut shared)
    }

    /// A future resolving to the result.
    ///
    /// ```
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let done = op.completion().clone();
    /// std::thread::spawn(move || drop(setting.record_notify(&notify)));
    /// tokio_test::block_on(done.wait())?;
    /// assert!(done.is_complete());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// Under a paused Tokio clock (`#[tokio::test(start_paused = true)]`) the wait keeps the
    /// clock still from its first pending poll until the operation completes, as every npu-rs
    /// future waiting on the device does: a timer raced against it cannot fire while the
    /// device works, which the clock cannot see (docs/observability.md, "Tests in paused
    /// time").
    ///
    /// ```
    /// use std::time::Duration;
    /// use npu_core::Device;
    /// use npu_stream::{Notify, Stream};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> npu_core::Result<()> {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let done = op.completion().clone();
    /// let (polled, pending) = std::sync::mpsc::channel();
    /// // Lets the device go on once the wait is pending.
    /// let device = std::thread::spawn(move || {
    ///     pending.recv().unwrap();
    ///     drop(setting.record_notify(&notify));
    /// });
    /// let mut wait = std::pin::pin!(tokio::time::timeout(Duration::from_secs(3600), done.wait()));
    /// assert!(futures_poll_once(wait.as_mut()).await.is_pending());
    /// polled.send(()).unwrap();
    /// let start = tokio::time::Instant::now();
    /// assert!(wait.await.is_ok(), "the one-hour timeout did not fire");
    /// assert_eq!(start.elapsed(), Duration::ZERO, "paused time stood still");
    /// device.join().unwrap();
    /// # Ok(())
    /// # }
    /// # async fn futures_poll_once<F: std::future::Future>(
    /// #     mut future: std::pin::Pin<&mut F>,
    /// # ) -> std::task::Poll<()> {
    /// #     std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).map(drop))).await
    /// # }
    /// ```
    pub fn wait(&self) -> Wait {
        Wait {
            completion: self.clone(),
            registration: Registration::default(),
            clock: ClockHold::default(),
        }
    }

    /// Blocks the calling thread until the operation completes, and returns its result.
    ///
    /// Only for threads that may block (a blocking-pool thread, a test); an async task awaits
    /// [`wait`](Completion::wait) instead. The completer wakes the thread itself, so the wait
    /// depends on no other thread, and never displaces the waker of a task awaiting the same
    /// operation. If the completer is dropped without completing, the wait ends with an
    /// [`Error::InvalidArgument`] (argument `self`) saying the operation was abandoned.
    ///
    /// It may be called inside a Tokio runtime (it never waits on the runtime, so it cannot
    /// deadlock it), but it holds a worker meanwhile: async code should await
    /// [`wait`](Completion::wait) or a stream operation (docs/architecture.md, "Blocking calls
    /// inside a Tokio runtime").
    ///
    /// Never call it for a pending operation from code npu-rs runs on its own threads (a
    /// waker woken as an operation completes, a tracing subscriber's callback on the reactor,
    /// a callback worker, the sentinel, the overseer or the reaper, a value dropped there) or
    /// under one of its locks (a subscriber's callback from an ACL call npu-rs makes while it
    /// submits to a stream, records an event, drains a device pool or enables peer access):
    /// the thread that would complete the operation, or that needs the lock to, may be the
    /// one waiting, and the wait would then never end, while every operation and release
    /// that thread serves waited with it (docs/cancellation.md, rule 6). There it is refused.
    /// An operation already complete, or abandoned, returns its result anywhere (no wait is
    /// needed), and in a forked child an operation of the parent is [`Error::Forked`] on any
    /// thread, before the thread is looked at.
    ///
    /// # Errors
    ///
    /// - The operation's own error, once it completes.
    /// - [`Error::InvalidArgument`] (argument `self`) if its completer was dropped without
    ///   completing.
    /// - [`Error::Forked`] for an operation of the parent in a forked child.
    /// - [`Error::InvalidArgument`] (argument `thread`) for a pending operation on one of
    ///   npu-rs's own threads (the reactor, the reaper, a callback worker, the sentinel, the
    ///   overseer, a thread while it completes an operation or runs a step that does, such as
    ///   a blocking waiter's wait, a drain's or an abort's thread), or on a thread that holds
    ///   one of npu-rs's locks (a tracing subscriber's callback from inside an ACL call npu-rs
    ///   makes under it).
    ///
    /// ```
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let done = op.completion().clone();
    /// std::thread::spawn(move || drop(setting.record_notify(&notify)));
    /// assert!(done.wait_blocking().is_ok());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// On one of npu-rs's shared threads (here the reaper, running a release) a pending
    /// operation's wait is refused:
    ///
    /// ```
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// let op = waiting.wait_notify(&notify); // pending until the notify is set
    /// let done = op.completion().clone();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// // SAFETY: the release sends a result on an unbounded channel: it does not block.
    /// unsafe { npu_core::reaper::release_later(move || tx.send(done.wait_blocking()).unwrap()) };
    /// let refused = rx.recv().unwrap().unwrap_err();
    /// assert!(matches!(refused, npu_core::Error::InvalidArgument { argument: "thread", .. }));
    /// drop(setting.record_notify(&notify));
    /// op.completion().wait_blocking()?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_blocking(&self) -> Result<()> {
        if let Some(result) = self.result() {
            return result;
        }
        self.blocking_waiter().wait("Completion::wait_blocking")
    }

    /// A thread's wait for this operation that can give up after a bound and be resumed:
    /// for a thread that must come back in bounded time (a blocking-pool thread, which a Tokio
    /// runtime's drop waits for) and then waits again. All of an operation's waiters share
    /// one wake-up, which the operation holds until it completes: making and dropping waiters
    /// while it is pending costs nothing that accumulates.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let waiter = op.completion().blocking_waiter();
    /// assert!(waiter.wait_for(Duration::from_millis(1)).is_none(), "still pending");
    /// std::thread::spawn(move || drop(setting.record_notify(&notify)));
    /// while waiter.wait_for(Duration::from_secs(1)).is_none() {}
    /// assert!(waiter.wait_for(Duration::ZERO).unwrap().is_ok(), "complete stays complete");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn blocking_waiter(&self) -> BlockingWaiter {
        let signal = self
            .state
            .blocked
            .get_or_init(|| Signal::armed(&self.state));
        BlockingWaiter {
            completion: self.clone(),
            woken: signal.clone(),
        }
    }

    /// Whether this process was forked since the operation was made: its completer's thread
    /// (the reactor, a callback worker, a blocking waiter, the device's) is not in this
    /// process, so it never completes here ([`crate::fork`]).
    fn orphaned_by_fork(&self) -> bool {
        self.state.generation != crate::fork::generation()
    }

    /// Whether a blocking wait for the operation would block: it is pending here. Not once it
    /// completed or was abandoned (the wait answers at once), nor in a forked child for an
    /// operation of the parent (`Error::Forked` at once): those answers are the same on every
    /// thread, so a thread that may not block is not refused them.
    fn would_block(&self) -> bool {
        !self.is_complete() && !self.state.is_abandoned() && !self.orphaned_by_fork()
    }

    /// The result of an operation that completed or was abandoned; an abandoned one is an
    /// error of `api`, the wait the caller called.
    fn settled(&self, api: &'static str) -> Result<()> {
        self.result().unwrap_or_else(|| {
            Err(Error::invalid(
                api,
                "self",
                "the operation was abandoned without completing",
            ))
        })
    }

    /// Drops `value` once the operation has completed (at once if it has): what keeps the
    /// buffers of a dropped future alive until the device is done with them.
    ///
    /// # Safety
    ///
    /// Dropping `value` must not block: it runs on the reaper thread, which every deferred
    /// release in the process shares. npu-rs's own crates are the intended callers.
    #[doc(hidden)]
    pub unsafe fn drop_after<T: Send + 'static>(&self, value: T) {
        // SAFETY: the caller guarantees the action does not block.
        unsafe { self.defer(move || drop(value)) }
    }

    /// Runs `action` on the completing thread right after completion (at once on this thread if
    /// the operation already completed): for completing a later operation in order behind this
    /// one.
    ///
    /// # Safety
    ///
    /// `action` must not block and must not call ACL: it may run on the process-wide reactor
    /// thread. npu-rs's own crates are the intended callers.
    #[doc(hidden)]
    pub unsafe fn on_complete(&self, action: impl FnOnce() + Send + 'static) {
        self.state.defer_notify(Box::new(action));
    }

    /// Runs `action` after completion, on the reaper thread; at once on this thread if the
    /// operation already completed.
    ///
    /// # Safety
    ///
    /// `action` must not block (it runs on the shared reaper thread) and must not wait for
    /// another operation.
    pub(crate) unsafe fn defer(&self, action: impl FnOnce() + Send + 'static) {
        if let Some(Deferred::Release(action)) =
            self.state.defer(Deferred::Release(Box::new(action)))
        {
            action();
        }
    }

    /// The kind of device memory error the operation failed with, if it did
    /// ([`Error::memory_error_kind`]): one load, for the use lists that ask every completed
    /// use. Meaningful once complete, or in a release deferred on it (which may run before
    /// `is_complete` says so: the completer hands releases on first).
    pub(crate) fn memory_error_kind(&self) -> Option<MemoryErrorKind> {
        memory_error_from_level(self.state.memory_error_level())
    }

    /// Whether two handles refer to the same operation.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let (a, b) = (stream.synchronize(), stream.synchronize());
    /// assert!(a.completion().same(&a.completion().clone()));
    /// assert!(!a.completion().same(b.completion()));
    /// # drop((a, b));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn same(&self, other: &Completion) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("result", &self.result())
            .finish()
    }
}

/// Future returned by [`Completion::wait`].
///
/// Cancel safety: dropping it only stops waiting; the operation is unaffected.
///
/// ```
/// # use npu_core::Device;
/// # use npu_stream::{Notify, Stream};
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let notify = Notify::new(&ctx)?;
/// // The device holds this operation until another stream sets the notify.
/// let op = waiting.wait_notify(&notify);
/// let done = op.completion().clone();
/// drop(done.wait()); // stops waiting; the operation is unaffected
/// let wait = done.wait();
/// drop(setting.record_notify(&notify));
/// tokio_test::block_on(wait)?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Wait {
    completion: Completion,
    /// This future's own waker slot, so that any number of tasks can wait at once.
    registration: Registration,
    /// Its hold on a paused Tokio clock while the operation is pending.
    clock: ClockHold,
}

impl Wait {
    /// The completion this future waits for.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let op = Stream::new(&ctx)?.synchronize();
    /// let done = op.completion();
    /// assert!(done.wait().completion().same(done));
    /// # drop(op);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn completion(&self) -> &Completion {
        &self.completion
    }
}

impl Future for Wait {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        let polled = this
            .completion
            .state
            .poll(cx.waker(), &mut this.registration);
        if polled.is_pending() && this.completion.orphaned_by_fork() {
            // Nothing in this forked child will ever complete it: waiting would never end.
            return Poll::Ready(Err(crate::fork::error("Completion::wait")));
        }
        if polled.is_pending() {
            let completion = &this.completion;
            let keepers = completion.state.clock_keepers.get_or_init(Default::default);
            this.clock.pending(keepers, || {
                let waiter = completion.blocking_waiter();
                move || waiter.wait_bounded("Completion::wait", SLICE).is_none()
            });
        }
        polled
    }
}

/// A blocked thread's wait for one operation, from [`Completion::blocking_waiter`].
///
/// Unlike [`Completion::wait_blocking`], its wait is bounded and can be resumed, so the
/// blocked thread can come back now and then, to notice a shutdown say.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::time::Duration;
/// # use npu_core::Device;
/// # use npu_stream::{Notify, Stream};
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let notify = Notify::new(&ctx)?;
///
/// static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// // The device holds this operation until another stream sets the notify.
/// let op = waiting.wait_notify(&notify);
/// let waiter = op.completion().blocking_waiter();
/// std::thread::spawn(move || drop(setting.record_notify(&notify)));
/// let result = loop {
///     if let Some(result) = waiter.wait_for(Duration::from_millis(10)) {
///         break Some(result);
///     }
///     if SHUTDOWN.load(Ordering::Relaxed) {
///         break None; // gave up waiting; the operation itself goes on
///     }
/// };
/// assert!(result.expect("completed before any shutdown").is_ok());
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct BlockingWaiter {
    completion: Completion,
    woken: Arc<Signal>,
}

impl BlockingWaiter {
    /// Blocks until the operation completes and returns its result, or returns `None` once
    /// `timeout` has passed first. An operation whose completer was dropped without completing
    /// returns `Some` of an [`Error::InvalidArgument`] of `BlockingWaiter::wait_for` (argument
    /// `self`) at once, as [`Completion::wait_blocking`] does. A `timeout` too long to represent
    /// waits without a bound.
    ///
    /// As [`Completion::wait_blocking`], a wait for a pending operation with a non-zero
    /// `timeout` is refused on one of npu-rs's own threads or under one of its locks, with
    /// `Some` of an [`Error::InvalidArgument`] of `BlockingWaiter::wait_for` (argument
    /// `thread`): that thread may be the one that would complete the operation, which then
    /// could not complete before the `timeout`, and whatever else the thread serves would wait
    /// as long. A zero `timeout` only looks, and is answered anywhere; so is an operation
    /// already complete or abandoned, and, in a forked child, an operation of the parent:
    /// `Some` of an [`Error::Forked`] at once, on any thread.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use npu_core::Device;
    /// # use npu_stream::{Notify, Stream};
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let (waiting, setting) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let notify = Notify::new(&ctx)?;
    /// // The device holds this operation until another stream sets the notify.
    /// let op = waiting.wait_notify(&notify);
    /// let waiter = op.completion().blocking_waiter();
    /// assert!(waiter.wait_for(Duration::ZERO).is_none(), "still pending: a timeout");
    /// drop(setting.record_notify(&notify));
    /// let done = waiter.wait_for(Duration::MAX).expect("an unbounded wait ends complete");
    /// assert!(done.is_ok());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_for(&self, timeout: std::time::Duration) -> Option<Result<()>> {
        const API: &str = "BlockingWaiter::wait_for";
        // A look without a wait blocks nothing: allowed on every thread.
        if !timeout.is_zero()
            && self.completion.would_block()
            && let Some(refused) = crate::teardown::refused_wait(API)
        {
            return Some(Err(refused));
        }
        self.wait_bounded(API, timeout)
    }

    /// [`wait_for`](BlockingWaiter::wait_for) on any thread, for npu-rs's own waits (a paused
    /// clock's keeper, on a blocking-pool thread); an abandoned operation is an error of `api`.
    pub(crate) fn wait_bounded(
        &self,
        api: &'static str,
        timeout: std::time::Duration,
    ) -> Option<Result<()>> {
        if self.completion.is_complete() {
            return Some(self.completion.settled(api));
        }
        if self.completion.orphaned_by_fork() {
            return Some(Err(crate::fork::error(api)));
        }
        if !self.woken.wait_on(&self.completion.state, Some(timeout)) {
            return None;
        }
        Some(self.completion.settled(api))
    }

    /// Blocks until the operation completes, and returns its result; an abandoned operation
    /// is an error of `api`, and so is a wait for a pending one refused on this thread
    /// ([`crate::teardown::refused_wait`]).
    fn wait(&self, api: &'static str) -> Result<()> {
        if !self.completion.is_complete() && self.completion.orphaned_by_fork() {
            return Err(crate::fork::error(api));
        }
        if self.completion.would_block()
            && let Some(refused) = crate::teardown::refused_wait(api)
        {
            return Err(refused);
        }
        self.woken.wait_on(&self.completion.state, None);
        self.completion.settled(api)
    }
}

impl fmt::Debug for BlockingWaiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingWaiter")
            .field("completion", &self.completion)
            .finish()
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.completion.state.deregister(self.registration);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn pending() -> (Completer, Completion) {
        // SAFETY: no device work or memory stands behind these test completions.
        let completer = unsafe { Completer::new() };
        let completion = completer.completion();
        (completer, completion)
    }

    /// A thread that gives up and makes a new waiter, again and again while the operation
    /// is pending, used to queue one wake-up per waiter until completion.
    #[test]
    fn blocking_waiters_share_one_wake_up() {
        let (completer, completion) = pending();
        for _ in 0..1000 {
            let waiter = completion.blocking_waiter();
            assert!(waiter.wait_for(std::time::Duration::ZERO).is_none());
        }
        assert_eq!(completion.state.deferred_len(), 1);
        let (blocked, late) = settled_under_a_blocked_thread(&completion, || {
            completer.complete(Ok(()));
        });
        assert!(blocked.is_ok() && late.is_ok());
    }

    #[test]
    fn an_abandoned_operation_wakes_its_blocked_threads() {
        let (completer, completion) = pending();
        let (blocked, late) = settled_under_a_blocked_thread(&completion, || drop(completer));
        assert!(blocked.is_err() && late.is_err());
    }

    /// Runs `settle` while a thread waits on `completion` without a bound; returns what that
    /// thread saw and what a waiter made afterwards sees.
    fn settled_under_a_blocked_thread(
        completion: &Completion,
        settle: impl FnOnce(),
    ) -> (Result<()>, Result<()>) {
        let waiter = completion.blocking_waiter();
        let blocked = std::thread::spawn(move || waiter.wait_for(std::time::Duration::MAX));
        settle();
        let blocked = blocked.join().unwrap().expect("woken, not timed out");
        let late = completion.blocking_waiter();
        let late = late.wait_for(std::time::Duration::MAX).expect("settled");
        (blocked, late)
    }

    #[test]
    fn deferred_actions_run_once_after_completion() {
        let (completer, done) = pending();
        let runs = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let counter = runs.clone();
        // SAFETY: the action does not block.
        unsafe {
            done.defer(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            })
        };
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        completer.complete(Ok(()));
        rx.recv().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(done.result().unwrap().is_ok());
    }

    #[test]
    fn defer_after_completion_runs_inline() {
        let (completer, done) = pending();
        completer.complete(Ok(()));
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        // SAFETY: the action does not block.
        unsafe {
            done.defer(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            })
        };
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_is_woken_by_completion() {
        let (completer, done) = pending();
        let mut wait = tokio_test::task::spawn(done.wait());
        assert!(wait.poll().is_pending());
        // A spurious poll keeps it pending and keeps the registration.
        assert!(wait.poll().is_pending());
        completer.complete(Ok(()));
        assert!(wait.is_woken());
        assert!(matches!(wait.poll(), Poll::Ready(Ok(()))));
    }

    #[test]
    fn a_replaced_waker_is_the_one_woken() {
        let (completer, done) = pending();
        let mut first = tokio_test::task::spawn(done.wait());
        let mut second = tokio_test::task::spawn(done.wait());
        assert!(first.poll().is_pending());
        assert!(second.poll().is_pending());
        completer.complete(Ok(()));
        assert!(second.is_woken());
        assert!(first.poll().is_ready());
    }

    /// A deferred action that itself waits for another operation, pending, the pattern that
    /// used to deadlock the reaper: refused on the reaper, typed, with and without a bound,
    /// instead of holding up every release of the process (and, where the operation's
    /// completion waits for a release, for ever); a look with no wait is answered there, and
    /// so is a wait for an operation already complete.
    #[test]
    fn a_blocking_wait_inside_a_deferred_action_is_refused_on_the_reaper() {
        let (first, first_done) = pending();
        let (second, second_done) = pending();
        let (done, already_done) = pending();
        done.complete(Ok(()));
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: test only: the waits below are what the contract forbids; here they must be
        // refused (or answered at once), never made.
        unsafe {
            first_done.defer(move || {
                let waiter = second_done.blocking_waiter();
                tx.send((
                    second_done.wait_blocking(),
                    waiter.wait_for(std::time::Duration::MAX),
                    waiter.wait_for(std::time::Duration::ZERO),
                    already_done.wait_blocking(),
                ))
                .unwrap()
            })
        };
        first.complete(Ok(()));
        let (unbounded, bounded, looked, complete) = rx.recv().unwrap();
        let refused = |err: Error, api: &str| {
            assert!(
                matches!(err, Error::InvalidArgument { api: a, argument: "thread", .. } if a == api),
                "{err:?}"
            );
        };
        refused(unbounded.unwrap_err(), "Completion::wait_blocking");
        refused(bounded.unwrap().unwrap_err(), "BlockingWaiter::wait_for");
        assert!(looked.is_none(), "still pending");
        assert!(complete.is_ok());
        second.complete(Ok(()));
    }

    /// The refusal's other side: a wait that would not block is answered on the reaper as
    /// anywhere. An abandoned operation's waits, with and without a bound, say that it was
    /// abandoned (argument `self`), as they do on a thread of the program's.
    ///
    /// The break: both were refused as waits on the reaper (argument `thread`), which they
    /// never were: an abandoned operation's wait returns at once.
    #[test]
    fn an_abandoned_operations_waits_are_answered_on_the_reaper() {
        let (first, first_done) = pending();
        let (abandoned, abandoned_done) = pending();
        drop(abandoned);
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: test only: the waits return at once (the operation was abandoned).
        unsafe {
            first_done.defer(move || {
                let waiter = abandoned_done.blocking_waiter();
                tx.send((
                    abandoned_done.wait_blocking(),
                    waiter.wait_for(std::time::Duration::MAX),
                ))
                .unwrap()
            })
        };
        first.complete(Ok(()));
        let (unbounded, bounded) = rx.recv().unwrap();
        for (err, api) in [
            (unbounded.unwrap_err(), "Completion::wait_blocking"),
            (bounded.unwrap().unwrap_err(), "BlockingWaiter::wait_for"),
        ] {
            assert!(
                matches!(err, Error::InvalidArgument { api: a, argument: "self", .. } if a == api),
                "{err:?}"
            );
        }
    }

    #[test]
    fn a_panicking_waker_does_not_unwind_into_the_completer() {
        struct Panics;
        impl std::task::Wake for Panics {
            fn wake(self: Arc<Self>) {
                panic!("a hostile waker");
            }
        }
        let (completer, done) = pending();
        let waker = std::task::Waker::from(Arc::new(Panics));
        let mut cx = TaskContext::from_waker(&waker);
        assert!(done.poll_result(&mut cx).is_pending());
        completer.complete(Ok(()));
        assert!(done.is_complete());
    }

    /// The abandonment wakes blocked threads only: a future stays pending, as documented on
    /// `Completer`, because nothing can tell it the device is done with the memory.
    #[test]
    fn an_abandoned_operation_leaves_its_futures_pending() {
        let (completer, done) = pending();
        let mut wait = tokio_test::task::spawn(done.wait());
        assert!(wait.poll().is_pending());
        drop(completer);
        assert!(!wait.is_woken());
        assert!(wait.poll().is_pending());
        assert!(done.result().is_none());
    }

    /// A wait polled on a paused runtime keeps the clock still until its completer, on
    /// another thread, completes it: a one-hour timer raced against it does not fire.
    #[test]
    fn a_wait_keeps_a_paused_clock_until_completion() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let (completer, done) = pending();
            let (polled, pending) = std::sync::mpsc::channel::<()>();
            let completing = std::thread::spawn(move || {
                pending.recv().unwrap();
                completer.complete(Ok(()));
            });
            let hour = std::time::Duration::from_secs(3600);
            let start = tokio::time::Instant::now();
            let mut timed = std::pin::pin!(tokio::time::timeout(hour, done.wait()));
            let first = std::future::poll_fn(|cx| Poll::Ready(timed.as_mut().poll(cx))).await;
            assert!(first.is_pending());
            polled.send(()).unwrap();
            let waited = timed
                .await
                .expect("the one-hour timer fired before the completion");
            assert!(waited.is_ok());
            assert_eq!(start.elapsed(), std::time::Duration::ZERO);
            completing.join().unwrap();
        });
    }

    #[test]
    fn a_dropped_completer_fails_a_blocking_wait_instead_of_hanging() {
        let (completer, done) = pending();
        drop(completer);
        assert!(done.wait_blocking().is_err());
    }
}
