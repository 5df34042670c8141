//! The blocking waits an attack makes where npu-rs runs a test's code (a waker woken on the
//! completing thread, a subscriber's callback under one of npu-rs's locks), and the check that
//! each wait for a pending operation was refused rather than made.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use npu::{Completion, Error, sim};

use super::{HANG, invalid};

/// What a blocking wait's caller heard, on the thread it ran on.
pub(crate) struct Heard {
    /// The name of the thread the waits ran on.
    pub(crate) thread: String,
    /// `Completion::wait_blocking` for the pending operation.
    pub(crate) unbounded: Result<(), Error>,
    /// A `BlockingWaiter`'s bounded wait for it.
    pub(crate) bounded: Option<Result<(), Error>>,
    /// The waiter's look without a wait.
    pub(crate) looked: Option<Result<(), Error>>,
    /// `wait_blocking` for an operation already complete.
    pub(crate) complete: Result<(), Error>,
}

/// Makes every wait of [`Heard`] on this thread: for `pending` (not complete), and for
/// `complete`.
pub(crate) fn blocking_waits(pending: &Completion, complete: &Completion) -> Heard {
    let waiter = pending.blocking_waiter();
    Heard {
        thread: std::thread::current().name().unwrap_or("").to_owned(),
        unbounded: pending.wait_blocking(),
        bounded: waiter.wait_for(HANG),
        looked: waiter.wait_for(Duration::ZERO),
        complete: complete.wait_blocking(),
    }
}

/// Checks that the waits for the pending operation were refused by name (argument `thread`),
/// not made, that the look said pending, and that the complete operation's result came back.
pub(crate) fn refused_not_waited(heard: Heard, what: &str) {
    let thread = &heard.thread;
    let refused = |answer: Result<(), Error>, api: &str| match answer {
        Err(err) => assert_eq!(invalid(&err), (api, "thread"), "{what}, on {thread}"),
        Ok(()) => panic!("{what}: on {thread}, the pending operation's wait returned Ok"),
    };
    refused(heard.unbounded, "Completion::wait_blocking");
    let bounded = heard.bounded.expect("refused, not timed out");
    refused(bounded, "BlockingWaiter::wait_for");
    assert!(heard.looked.is_none(), "{what}: still pending");
    assert!(heard.complete.is_ok(), "{what}: {:?}", heard.complete);
}

/// A waker that, woken, makes [`blocking_waits`] for its pair of operations once (after a
/// flush of the reaper, if asked), and sends what it heard.
pub(crate) struct WaitsWhenWoken {
    pending: Completion,
    complete: Completion,
    flush_first: bool,
    told: Mutex<Option<Sender<Heard>>>,
}

impl WaitsWhenWoken {
    /// A waker for `pending` and `complete`, and where what it hears arrives.
    pub(crate) fn waker(
        pending: &Completion,
        complete: &Completion,
        flush_first: bool,
    ) -> (std::task::Waker, Receiver<Heard>) {
        let (told, heard) = channel();
        let waker = std::task::Waker::from(Arc::new(WaitsWhenWoken {
            pending: pending.clone(),
            complete: complete.clone(),
            flush_first,
            told: Mutex::new(Some(told)),
        }));
        (waker, heard)
    }
}

impl std::task::Wake for WaitsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(told) = self.told.lock().unwrap().take() else {
            return;
        };
        if self.flush_first {
            sim::flush_releases();
        }
        let _ = told.send(blocking_waits(&self.pending, &self.complete));
    }
}
