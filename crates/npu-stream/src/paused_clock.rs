//! Device work under a paused Tokio clock (`#[tokio::test(start_paused = true)]`).
//!
//! A paused clock jumps to the next timer as soon as the runtime has nothing to run. Device
//! work is invisible to it: the reactor is a thread of its own, so a test awaiting a copy
//! under a one-hour `timeout` would see the timeout fire at once. Tokio does not advance a
//! paused clock while a `spawn_blocking` task is running (its blocking scheduler inhibits
//! auto-advance on current-thread runtimes, the only kind that can pause), so an operation
//! polled under a paused clock keeps a blocking task waiting for its completion. Time then
//! stands still while the device works, as it would for a future Tokio can see.
//!
//! Dropping the runtime waits for its blocking tasks, and must not wait for the device (a held
//! device, a wait nothing will satisfy). So each task waits at most [`SLICE`], and one still
//! waiting spawns its successor before it returns: the clock never sees a moment without one,
//! while a runtime shutting down (which runs no new blocking task) waits one slice at most.
//! The chain keeps the clock for the future that started it, not for the work: once that
//! future is dropped, the slice running ends the chain, and the clock moves again (a dropped
//! wait that nothing will satisfy would otherwise stop it for good).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use npu_core::{BlockingWaiter, Completion, Result, Wait};
use tokio::runtime::{Handle, Id, RuntimeFlavor};

/// The longest a blocking task keeping the clock waits before handing on to its successor.
const SLICE: Duration = Duration::from_millis(100);

/// A wait for device work, with its own waker registration, that keeps a paused Tokio clock
/// still from its first pending poll (on each runtime it is polled on) until the work
/// completes: what every future of npu-rs awaiting the device (an operation, an event wait)
/// needs.
#[derive(Debug)]
pub(crate) struct KeptWait {
    wait: Wait,
    /// Set at the first pending poll, and again at the first pending poll on another runtime:
    /// the wait can move between runtimes, and a paused clock is kept per runtime.
    clock: Option<KeptClock>,
}

/// What a [`KeptWait`] decided for the runtime of its latest pending poll.
#[derive(Debug)]
struct KeptClock {
    /// That runtime (`None`: polled outside Tokio).
    runtime: Option<Id>,
    /// Set when that runtime's clock was paused and is kept from jumping past the work: the
    /// keeper chain holds a `Weak` of it and ends once this is dropped (or replaced, when the
    /// wait moves to another runtime).
    kept: Option<Arc<()>>,
}

impl KeptWait {
    pub(crate) fn new(completion: &Completion) -> Self {
        KeptWait {
            wait: completion.wait(),
            clock: None,
        }
    }

    pub(crate) fn completion(&self) -> &Completion {
        self.wait.completion()
    }

    pub(crate) fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let polled = Pin::new(&mut self.wait).poll(cx);
        if polled.is_pending() {
            let runtime = Handle::try_current().ok();
            let id = runtime.as_ref().map(Handle::id);
            // Kept once per runtime: a wait polled on one runtime and then moved to another
            // (the first dropped, say) must keep the new one's clock, which the first one's
            // keeper chain cannot see. A clock found running is looked at again at the next
            // pending poll: a test may pause it (`tokio::time::pause()`) while the work is
            // already in flight, and a timer raced against the wait from then on must not
            // overtake the device.
            let kept = self
                .clock
                .as_ref()
                .is_some_and(|clock| clock.runtime == id && clock.kept.is_some());
            if !kept {
                let kept = runtime.and_then(|runtime| keep_until(&runtime, self.wait.completion()));
                self.clock = Some(KeptClock { runtime: id, kept });
            }
        }
        polled
    }
}

/// If `runtime`'s clock is paused, keeps it from auto-advancing until `completion` completes
/// or the returned token is dropped (the future waiting for it was dropped or moved on).
fn keep_until(runtime: &Handle, completion: &Completion) -> Option<Arc<()>> {
    if runtime.runtime_flavor() != RuntimeFlavor::CurrentThread || !clock_is_paused() {
        return None;
    }
    let kept = Arc::new(());
    keep(runtime, completion.blocking_waiter(), Arc::downgrade(&kept));
    Some(kept)
}

/// Spawns a blocking task that waits one slice for the operation, then hands on while the
/// future still wants it.
fn keep(runtime: &Handle, waiter: BlockingWaiter, wanted: Weak<()>) {
    let next = runtime.clone();
    // The result reaches the operation's own future; the task only has to exist meanwhile.
    // A refused keeper is no worse for the future, which waits all the same, instead of its
    // every poll panicking; its queued task holds the clock still for good
    // (`spawn_contained`).
    let spawned = crate::blocking::spawn_contained(runtime, move || {
        if waiter.wait_for(SLICE).is_none() && wanted.strong_count() > 0 {
            keep(&next, waiter, wanted);
        }
    });
    if !spawned {
        npu_core::log!(debug, "no blocking thread to keep a paused clock still");
    }
}

/// Whether the current runtime's clock is paused: it stood still while real time moved.
///
/// A running Tokio clock reads the monotonic clock, so a reading taken after real time has
/// moved is strictly later than one taken before. A paused clock moves only when the runtime
/// parks or a test advances it, neither of which happens inside a poll. Real time moves within
/// nanoseconds, so the check costs a few clock reads.
fn clock_is_paused() -> bool {
    let tokio_start = tokio::time::Instant::now();
    let real_start = std::time::Instant::now();
    while std::time::Instant::now() <= real_start {
        std::hint::spin_loop();
    }
    tokio::time::Instant::now() == tokio_start
}
