//! The holds of npu-rs's completing threads: a thread that completes an operation (the
//! reactor, a device's callback worker, a blocking waiter, the sentinel, an abort's thread)
//! still holds the operation's stream, and through it the context and the runtime, for a
//! moment after it wakes the task that awaited it. A program that drops its last handles as
//! soon as its await returns leaves the last drop to that thread, which hands the stream to
//! the reaper (and the context's teardown on to `npu-teardown`) after the program's own wait
//! for the teardowns may have looked. So such a thread raises a hold before the operation's
//! result is visible, and lowers it only once it has let go of everything it held for the
//! completion: whatever its drops handed on is queued (on the reaper) or counted (as a
//! teardown) by then. [`wait_for_teardowns`](crate::wait_for_teardowns) and a runtime build
//! wait for the holds raised before they looked.

use std::cell::Cell;
use std::sync::LazyLock;
use std::time::Instant;

use protocol::Holds;

#[cfg(test)]
mod model;
mod protocol;

/// Std-backed primitives for [`protocol`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::atomic::{AtomicUsize, Ordering, fence};
    pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
}

static HOLDS: LazyLock<Holds> = LazyLock::new(Holds::new);

thread_local! {
    /// How many [`completing`] scopes this thread is in (nested).
    static COMPLETING: Cell<u32> = const { Cell::new(0) };
    /// The slot of the hold the outermost scope raised, once a completion in it raised one.
    static RAISED: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `body`, a step of one of npu-rs's completing threads that may complete operations and
/// then lets go of what it held for them (the operations' streams, their events): a completion
/// made in it raises a hold ([`raise_if_completing`]), lowered when `body` returns (or
/// unwinds), after those drops. Raised only by a completion, so a step that waits for the
/// device first (a blocking waiter, an abort's thread) holds nothing while it waits; a step
/// that goes on after its first completion (a reactor pass, a callback worker's look) holds
/// it through its further bounded waits (1 ms per operation it settles). References those
/// threads keep past the step are covered by the stream's own count instead (npu-stream
/// counts a stream whose last handle the program dropped until it is released).
///
/// For npu-rs's own crates, not for applications.
#[doc(hidden)]
pub fn completing<R>(_: crate::seal::Seal, body: impl FnOnce() -> R) -> R {
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            let depth = COMPLETING.with(|depth| {
                depth.set(depth.get() - 1);
                depth.get()
            });
            if depth == 0
                && let Some(slot) = RAISED.with(Cell::take)
            {
                HOLDS.lower(slot);
            }
        }
    }
    COMPLETING.with(|depth| depth.set(depth.get() + 1));
    let _scope = Scope;
    body()
}

/// Raises this thread's hold, if it is in a [`completing`] scope that has not raised it yet:
/// called as an operation completes, before its result is visible.
pub(crate) fn raise_if_completing() {
    if COMPLETING.with(Cell::get) > 0 && RAISED.with(Cell::get).is_none() {
        RAISED.with(|raised| raised.set(Some(HOLDS.raise())));
    }
}

/// Whether this thread runs a [`completing`] step: it must not wait for the holds (its own, once
/// raised, would keep it waiting) nor on device work.
pub(crate) fn completing_here() -> bool {
    COMPLETING.with(Cell::get) > 0
}

/// Waits until every hold raised before the call is lowered, or until `deadline`: whether
/// they were.
pub(crate) fn wait_until_let_go(deadline: Instant) -> bool {
    HOLDS.wait_for_earlier(Some(deadline))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn raised_here() -> bool {
        RAISED.with(Cell::get).is_some()
    }

    /// A hold raised in a nested scope stays raised until the outermost scope ends, since
    /// the outer step still holds what it completed with: a wait made meanwhile (on another
    /// thread) does not see it lowered; once the outer scope ends it is. The break: lowered
    /// when the inner scope ended.
    #[test]
    fn a_nested_scope_leaves_the_hold_to_the_outermost() {
        completing(crate::SEAL, || {
            completing(crate::SEAL, raise_if_completing);
            assert!(
                completing_here() && raised_here(),
                "still raised after the inner scope"
            );
            let waited = std::thread::spawn(|| wait_until_let_go(Instant::now()));
            assert!(
                !waited.join().unwrap(),
                "a wait does not see the hold lowered yet"
            );
        });
        assert!(!completing_here() && !raised_here());
        assert!(wait_until_let_go(Instant::now() + Duration::from_secs(30)));
    }

    /// A step that panics after its completion raised the hold lowers it as it unwinds, and
    /// leaves the thread out of any scope: a wait made later returns. The break: a hold left
    /// raised, which every later wait for teardowns runs out on.
    #[test]
    fn a_panic_in_a_scope_lowers_the_hold() {
        let unwound = std::panic::catch_unwind(|| {
            completing(crate::SEAL, || {
                raise_if_completing();
                panic!("a completing step panics");
            })
        });
        assert!(unwound.is_err());
        assert!(!completing_here() && !raised_here());
        assert!(wait_until_let_go(Instant::now() + Duration::from_secs(30)));
    }
}
