//! Device work under a paused Tokio clock (`#[tokio::test(start_paused = true)]`).
//!
//! A paused clock jumps to the next timer as soon as the runtime has nothing to run. Device
//! work is invisible to it: completions come from threads of their own (the reactor, the
//! callback workers, the blocking waiters), so a test awaiting a copy under a one-hour
//! `timeout` would see the timeout fire at once. Tokio does not advance a paused clock while a
//! `spawn_blocking` task is running (its blocking scheduler inhibits auto-advance on
//! current-thread runtimes, the only kind that can pause), so a future waiting on device work
//! keeps a blocking task waiting for it. Time then stands still while the device works, as it
//! would for a future Tokio can see.
//!
//! This is the one keeper of npu-rs, here because the lowest future that waits on the device
//! is [`Completion::wait`](crate::Completion::wait): every other one (an operation, an event
//! wait, an abort, a host registration's return) is built on it. A pool allocation queued for
//! capacity keeps no clock: the block it will get may come back through the device or through
//! a task, which is not known while it waits, and keeping the clock for a task's block would
//! stop the timers that task waits on.
//!
//! Dropping the runtime waits for its blocking tasks, and must not wait for the device (a held
//! device, a wait nothing will satisfy). So each task waits at most [`SLICE`], and one still
//! waiting spawns its successor before it returns: the clock never sees a moment without one,
//! while a runtime shutting down (which runs no new blocking task) waits one slice at most.
//! The chain keeps the clock for the future that started it, not for the work: once that
//! future is dropped, the slice running ends the chain, and the clock moves again (a dropped
//! wait that nothing will satisfy would otherwise stop it for good); a task that starts after
//! its future is gone (queued behind others) ends at once, without waiting its slice.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::runtime::{Handle, Id, RuntimeFlavor};

/// The longest a blocking task keeping the clock waits before handing on to its successor.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// What one future waiting on device work decided about its runtime's paused clock: kept
/// from its first pending poll (on each runtime it is polled on) until the future is dropped
/// or the work is done. Every npu-rs future that waits on the device holds one.
#[derive(Debug, Default)]
pub(crate) struct ClockHold {
    /// Set at the first pending poll, and again at the first pending poll on another runtime:
    /// the future can move between runtimes, and a paused clock is kept per runtime.
    clock: Option<Held>,
}

/// What a [`ClockHold`] decided for the runtime of its latest pending poll.
#[derive(Debug)]
struct Held {
    /// That runtime (`None`: polled outside Tokio).
    runtime: Option<Id>,
    /// Set when that runtime's clock was paused and is kept from jumping past the work: the
    /// keeper holds a `Weak` of it, and its chain ends once this is dropped (or replaced,
    /// when the future moves to another runtime).
    kept: Option<Arc<()>>,
}

impl ClockHold {
    /// To be called at each pending poll of the future: calls `start` with a [`Keeper`] for
    /// the current runtime when its clock is paused and not yet kept for this future, and
    /// `start` must then keep it for as long as the future waits on the device.
    pub(crate) fn pending(&mut self, start: impl FnOnce(Keeper)) {
        let runtime = Handle::try_current().ok();
        let id = runtime.as_ref().map(Handle::id);
        // Kept once per runtime: a future polled on one runtime and then moved to another
        // (the first dropped, say) must keep the new one's clock, which the first one's
        // keeper cannot see. A clock found running is looked at again at the next pending
        // poll: a test may pause it (`tokio::time::pause()`) while the work is already in
        // flight, and a timer raced against the wait from then on must not overtake the
        // device.
        let kept = self
            .clock
            .as_ref()
            .is_some_and(|clock| clock.runtime == id && clock.kept.is_some());
        if kept {
            return;
        }
        let kept = runtime.and_then(|runtime| {
            if runtime.runtime_flavor() != RuntimeFlavor::CurrentThread || !clock_is_paused() {
                return None;
            }
            let kept = Arc::new(());
            start(Keeper {
                runtime,
                wanted: Arc::downgrade(&kept),
            });
            Some(kept)
        });
        self.clock = Some(Held { runtime: id, kept });
    }
}

/// The right to keep one runtime's paused clock still on behalf of one future, for as long as
/// that future is alive ([`ClockHold::pending`] hands it out).
#[derive(Debug)]
pub(crate) struct Keeper {
    runtime: Handle,
    wanted: Weak<()>,
}

impl Keeper {
    /// Whether the future it keeps the clock for is still alive (and still on this runtime).
    fn is_wanted(&self) -> bool {
        self.wanted.strong_count() > 0
    }

    /// Keeps the clock with a chain of blocking tasks. Each calls `slice`, which waits on the
    /// device for at most [`SLICE`] and returns whether the future still waits on it; the
    /// task then spawns its successor, unless the future is gone. `slice` must not wait
    /// longer: a runtime shutting down waits for the task running it.
    pub(crate) fn keep<W>(self, mut slice: W)
    where
        W: FnMut() -> bool + Send + 'static,
    {
        let runtime = self.runtime.clone();
        // The result reaches the future itself; the task only has to exist meanwhile. A
        // refused keeper is no worse for the future, which waits all the same, instead of its
        // every poll panicking; its queued task holds the clock still for good
        // (`spawn_contained`).
        // A task that starts after its future is gone (queued behind other blocking tasks: a
        // `select!` loop whose wait loses every turn queues one per turn) ends at once. Waiting
        // its slice first held the clock for a slice per queued task, in turn: 20,000 lost
        // turns stopped it for 4 s after the last one, where a dropped wait is to free it
        // within one slice.
        let spawned = crate::contain::spawn_contained(&runtime, move || {
            if self.is_wanted() && slice() && self.is_wanted() {
                self.keep(slice);
            }
        });
        if !spawned {
            crate::log!(debug, "no blocking thread to keep a paused clock still");
        }
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
