//! Completions: the shared state of one device operation, and work deferred until it is done.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::error::{Error, Result};

mod state;
mod uses;

#[cfg(test)]
mod model;

pub use uses::{Settled, UseList};

/// Std-backed primitives for [`state`]; the loom model test supplies loom's instead.
mod sync {
    pub(crate) use futures::task::AtomicWaker;
    pub(crate) use std::sync::Mutex;
    pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
}

/// The completion of one device operation, shared by whoever completes it (the reactor) and
/// whoever waits for it (a future, a buffer's deferred release).
///
/// Completing hands the deferred actions to the reaper thread, then wakes the registered
/// waker outside every lock, so nothing a user owns is ever freed on the completing thread and
/// a woken task finds its releases already queued.
///
/// ```
/// use npu_core::Completion;
///
/// let done = Completion::new();
/// let seen = done.clone();
/// assert!(!seen.is_complete());
/// done.complete(Ok(()));
/// assert!(seen.result().unwrap().is_ok());
/// ```
#[derive(Clone)]
pub struct Completion {
    state: Arc<state::State<Result<()>>>,
}

impl Completion {
    /// A new, pending completion.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// assert!(!done.is_complete());
    /// assert!(done.result().is_none());
    /// ```
    pub fn new() -> Self {
        Completion {
            state: Arc::new(state::State::new()),
        }
    }

    /// Completes with `result`; later calls are ignored.
    ///
    /// Sends the deferred actions to the reaper thread, then wakes the waiter: a task woken by
    /// the completion finds the releases already queued, so `reaper::flush` after an `.await`
    /// observes them.
    ///
    /// ```
    /// use npu_core::{Completion, Error};
    ///
    /// let done = Completion::new();
    /// done.complete(Ok(()));
    /// done.complete(Err(Error::invalid("example", "result", "ignored")));
    /// assert!(done.result().unwrap().is_ok(), "the first result wins");
    /// ```
    pub fn complete(&self, result: Result<()>) {
        let Some(actions) = self.state.complete(result) else {
            return;
        };
        if !actions.is_empty() {
            crate::reaper::run_later(actions);
        }
        self.state.wake();
    }

    /// Whether the operation has completed.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// let seen = done.clone();
    /// done.complete(Ok(()));
    /// assert!(seen.is_complete(), "every clone sees the completion");
    /// ```
    pub fn is_complete(&self) -> bool {
        self.state.is_complete()
    }

    /// The result, once complete.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Completion};
    ///
    /// let done = Completion::new();
    /// assert!(done.result().is_none(), "still pending");
    /// done.complete(Err(AclError::new("aclrtMemcpyAsync", AclCode(507015), None).into()));
    /// let err = done.result().unwrap().unwrap_err();
    /// assert_eq!(err.acl_code(), Some(AclCode(507015)));
    /// ```
    pub fn result(&self) -> Option<Result<()>> {
        self.state.value()
    }

    /// Polls for the result, registering `cx`'s waker while pending. Only the most recently
    /// registered waker is woken, as with Tokio's single-waiter primitives.
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(done.poll_result(&mut cx).is_pending());
    /// done.complete(Ok(()));
    /// assert!(matches!(done.poll_result(&mut cx), Poll::Ready(Ok(()))));
    /// ```
    pub fn poll_result(&self, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        self.state.poll(cx.waker())
    }

    /// A future resolving to the result.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// let completer = done.clone();
    /// std::thread::spawn(move || completer.complete(Ok(())));
    /// tokio_test::block_on(done.wait())?;
    /// assert!(done.is_complete());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait(&self) -> Wait {
        Wait {
            completion: self.clone(),
        }
    }

    /// Blocks the calling thread until the operation completes, and returns its result.
    ///
    /// Only for threads that may block (a blocking-pool thread, a test); an async task awaits
    /// [`wait`](Completion::wait) instead. It waits through a deferred action rather than the
    /// waker slot, so it never displaces the waker of a task awaiting the same operation.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// let completer = done.clone();
    /// std::thread::spawn(move || completer.complete(Ok(())));
    /// assert!(done.wait_blocking().is_ok());
    /// ```
    pub fn wait_blocking(&self) -> Result<()> {
        if let Some(result) = self.result() {
            return result;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.defer(move || {
            let _ = tx.send(());
        });
        // The action runs after completion; a closed channel means it was dropped unrun,
        // which only happens if the operation itself was dropped without completing.
        let _ = rx.recv();
        self.result().unwrap_or_else(|| {
            Err(Error::invalid(
                "Completion::wait_blocking",
                "self",
                "the operation was abandoned without completing",
            ))
        })
    }

    /// Runs `action` after completion, on the reaper thread; at once on this thread if the
    /// operation already completed.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// done.defer(move || tx.send("released").unwrap());
    /// assert!(rx.try_recv().is_err(), "nothing runs before completion");
    /// done.complete(Ok(()));
    /// assert_eq!(rx.recv().unwrap(), "released"); // sent from the reaper thread
    /// ```
    pub fn defer(&self, action: impl FnOnce() + Send + 'static) {
        if let Some(action) = self.state.defer(Box::new(action)) {
            action();
        }
    }

    /// Whether two handles refer to the same operation.
    ///
    /// ```
    /// use npu_core::Completion;
    ///
    /// let done = Completion::new();
    /// assert!(done.same(&done.clone()));
    /// assert!(!done.same(&Completion::new()));
    /// ```
    pub fn same(&self, other: &Completion) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Default for Completion {
    fn default() -> Self {
        Completion::new()
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
/// use npu_core::Completion;
///
/// let done = Completion::new();
/// drop(done.wait()); // stops waiting; the operation is unaffected
/// let wait = done.wait();
/// done.complete(Ok(()));
/// tokio_test::block_on(wait)?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Wait {
    completion: Completion,
}

impl Future for Wait {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        self.completion.poll_result(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn deferred_actions_run_once_after_completion() {
        let done = Completion::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let counter = runs.clone();
        done.defer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            tx.send(()).unwrap();
        });
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        done.complete(Ok(()));
        rx.recv().unwrap();
        done.complete(Err(Error::invalid("test", "x", "ignored")));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(done.result().unwrap().is_ok(), "the first result wins");
    }

    #[test]
    fn defer_after_completion_runs_inline() {
        let done = Completion::new();
        done.complete(Ok(()));
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        done.defer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_is_woken_by_completion() {
        let done = Completion::new();
        let mut wait = tokio_test::task::spawn(done.wait());
        assert!(wait.poll().is_pending());
        // A spurious poll keeps it pending and keeps the registration.
        assert!(wait.poll().is_pending());
        done.complete(Ok(()));
        assert!(wait.is_woken());
        assert!(matches!(wait.poll(), Poll::Ready(Ok(()))));
    }

    #[test]
    fn a_replaced_waker_is_the_one_woken() {
        let done = Completion::new();
        let mut first = tokio_test::task::spawn(done.wait());
        let mut second = tokio_test::task::spawn(done.wait());
        assert!(first.poll().is_pending());
        assert!(second.poll().is_pending());
        done.complete(Ok(()));
        assert!(second.is_woken());
        assert!(first.poll().is_ready());
    }
}
