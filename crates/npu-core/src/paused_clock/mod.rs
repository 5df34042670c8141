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
//! The chain keeps the clock for the futures that want it, not for the work: once they are
//! dropped, the slice running ends the chain, and the clock moves again (a dropped wait that
//! nothing will satisfy would otherwise stop it for good); a task that starts after they are
//! gone (queued behind others) ends at once, without waiting its slice.
//!
//! An operation has at most one chain per runtime, shared by every future waiting on it there
//! ([`Keepers`]). A `select!` loop whose wait loses every turn makes a new future each turn,
//! each dropped before the next is made: with a chain per future, each turn started a blocking
//! task, and every task that began before its turn ended waited out its slice, so a loop whose
//! turns last a few milliseconds filled the blocking pool with dozens of threads (up to its
//! limit of 512) each waiting 100 ms. A turn now joins the chain still running from the turns
//! before it.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Handle, Id, RuntimeFlavor};

use chain::{Runtime, Want};

mod chain;
#[cfg(test)]
mod model;

/// Std-backed primitives for [`chain`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
}

/// The longest a blocking task keeping the clock waits before handing on to its successor.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// The chains keeping paused clocks still for the futures waiting on one operation: at most
/// one per Tokio runtime, shared by all of those futures polled there.
pub(crate) type Keepers = chain::Keepers<Id>;

impl Runtime for Handle {
    type Id = Id;

    fn id(&self) -> Id {
        Handle::id(self)
    }

    fn spawn_blocking(&self, task: impl FnOnce() + Send + 'static) -> bool {
        crate::contain::spawn_contained(crate::SEAL, self, task)
    }
}

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
    /// Set when that runtime's clock was paused and is kept from jumping past the work.
    /// Dropping it (or replacing it, when the future moves to another runtime) lets the chain
    /// end once no other future wants it.
    kept: Option<Want<Id>>,
}

impl ClockHold {
    /// To be called at each pending poll of the future, with the keepers of the operation it
    /// waits on: when the current runtime's clock is paused and not yet kept for this future,
    /// counts the future as wanting it kept and, unless that runtime's chain for the
    /// operation already runs, starts it with the wait `slice` makes ([`chain::join`]).
    pub(crate) fn pending<W>(&mut self, keepers: &Arc<Keepers>, slice: impl FnOnce() -> W)
    where
        W: FnMut() -> bool + Send + 'static,
    {
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
            Some(chain::join(keepers, runtime, slice))
        });
        self.clock = Some(Held { runtime: id, kept });
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
