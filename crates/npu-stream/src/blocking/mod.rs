//! The `BlockingSync` strategy: a blocking thread per operation waits for its event, in Tokio's
//! blocking pool inside a runtime and on a plain thread outside, and an overseer makes sure a
//! wait that no pool thread starts is not left queued.
//!
//! Tokio runs `spawn_blocking` work only when its pool has a thread for it. A pool that is full
//! (its `max_blocking_threads` busy, perhaps with a task blocked in `Completion::wait_blocking`
//! on this very operation) would leave the wait queued, and the operation incomplete, for as
//! long as the pool stays full: a deadlock in the `wait_blocking` case. Completion must not
//! depend on Tokio, so each queued wait is also handed to the overseer, which gives it to the
//! reactor if no pool thread has taken it by a deadline. Whichever takes it first runs it.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use npu_core::Completer;
use npu_core::contain::spawn_contained;
use tokio::runtime::Handle;

use crate::reactor::{self, Pending};
use crate::strategy::{self, Carried, CompletionStrategy, OpInfo, Unwatched, record};
use crate::stream::StreamShared;
use deadlines::Deadlines;

mod deadlines;
#[cfg(test)]
mod model;

/// Std-backed primitives for [`deadlines`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

/// How long a `BlockingSync` thread waits for its operation before handing it to the reactor:
/// a blocking-pool thread must come back within a bound (a hung kernel would otherwise make
/// dropping the Tokio runtime, which waits for its blocking threads, block for ever).
const BLOCKING_WAIT_MS: i32 = 100;

/// How long a wait queued on Tokio's blocking pool may stay unstarted before the overseer
/// gives its operation to the reactor. A pool with a free thread (or room for a new one)
/// starts it within microseconds, so only a full pool reaches this.
const START_DEADLINE: Duration = Duration::from_millis(100);

/// The least time between two looks of the overseer while waits are queued: its deadlines
/// are checked in batches, not one wake-up per operation.
const OVERSEER_TICK: Duration = Duration::from_millis(50);

/// One blocking wait per operation.
pub(crate) struct BlockingSync;

/// An operation and its stream, taken once: by the thread that waits for it, by the overseer
/// when no thread started in time, or by the wait's drop.
type Slot = Mutex<Option<(Pending, Arc<StreamShared>)>>;

fn take(slot: &Slot) -> Option<(Pending, Arc<StreamShared>)> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// An operation waiting for its blocking thread. If the thread never runs it (a Tokio runtime
/// shutting down drops queued blocking tasks unrun), dropping it hands the operation to the
/// reactor, so it still completes.
struct BlockingWait {
    slot: Arc<Slot>,
}

impl BlockingWait {
    fn run(self) {
        let Some((pending, stream)) = take(&self.slot) else {
            return; // the overseer gave it to the reactor
        };
        // Still running after the bound: the reactor takes over, so this thread returns in
        // bounded time. A completing step: its hold, raised as the operation completes, is
        // lowered once the stream is let go of.
        npu_core::holds::completing(crate::SEAL, || {
            match pending.wait_for(&stream, BLOCKING_WAIT_MS) {
                Some(pending) => hand_over(pending, stream),
                None => strategy::release_stream(stream),
            }
        });
    }
}

impl Drop for BlockingWait {
    fn drop(&mut self) {
        if let Some((pending, stream)) = take(&self.slot) {
            hand_over(pending, stream);
        }
    }
}

/// Gives a wait's operation to the reactor, once the operation submitted before it has
/// completed. The reactor queries only the oldest operation of a stream's queue, so they must
/// join it in submission order; waits run out (or are taken by the overseer, or dropped) in
/// any order, and a later one handed over first would keep the reactor from ever looking at
/// an earlier one behind it, for good if the later one waits on what the host does once the
/// earlier completes. The wait's reference to the stream goes as every shared thread's does:
/// if it is the last (the user dropped the `Stream` meanwhile), the stream is destroyed on the
/// reaper, not on a blocking-pool thread or the overseer.
fn hand_over(pending: Pending, stream: Arc<StreamShared>) {
    match pending.unfinished_predecessor() {
        Some(previous) => {
            // An abandoned predecessor drops this unrun: the operation is given up as one no
            // thread can watch (its event, whose record may still be queued, and its stream
            // are leaked).
            let carried = Carried::new((pending, stream), |(pending, stream)| {
                pending.abandon();
                StreamShared::leak(stream);
            });
            let later = move || {
                let (pending, stream) = carried.take();
                hand_over(pending, stream);
            };
            // SAFETY: handing over takes the stream's queue lock and the reactor's inbox lock
            // for a push and calls no ACL; at most it starts the reactor's thread (its first
            // use) or hands the operation to the sentinel (a stopped reactor), neither of
            // which waits.
            unsafe { previous.on_complete(later) }
        }
        None => {
            reactor::Reactor::adopt_pending(&stream, pending);
            strategy::release_stream(stream);
        }
    }
}

impl CompletionStrategy for BlockingSync {
    fn watch(
        &self,
        stream: &Arc<StreamShared>,
        op: OpInfo,
        completer: Completer,
    ) -> std::result::Result<(), Unwatched> {
        let (event, completer) = record(stream, completer)?;
        // Waits run on threads of their own, so they finish in any order; each one completes
        // only after the operation submitted before it, as the other strategies do.
        let after = stream.replace_tail(&completer.completion());
        let pending = Pending::new(event, completer, op, after);
        // A runtime without the timed wait could only wait as long as the device takes, which
        // a blocking thread must never do: the reactor watches the operation instead.
        let api = stream.context.runtime().api();
        if api.aclrtSynchronizeEventWithTimeout.is_none() {
            reactor::Reactor::adopt_pending(stream, pending);
            return Ok(());
        }
        let wait = BlockingWait {
            slot: Arc::new(Mutex::new(Some((pending, stream.clone())))),
        };
        match Handle::try_current() {
            Ok(handle) => match Overseer::get() {
                Some(overseer) => {
                    overseer.watch(&wait.slot);
                    let slot = wait.slot.clone();
                    // The device has accepted the operation by now: if Tokio refuses the wait,
                    // the reactor takes it, and a pool thread that ever runs the queued wait
                    // finds its slot empty.
                    let spawned = spawn_contained(crate::SEAL, &handle, move || wait.run());
                    if !spawned && let Some((pending, stream)) = take(&slot) {
                        npu_core::log!(
                            debug,
                            "no blocking thread for a wait; the reactor watches it"
                        );
                        hand_over(pending, stream);
                    }
                }
                // No overseer, so nothing would notice a full pool: the reactor watches it.
                None => drop(wait),
            },
            Err(_) => {
                let spawned = std::thread::Builder::new()
                    .name("npu-sync".into())
                    .spawn(move || wait.run());
                // No thread: the closure (and with it the wait) was dropped, which handed the
                // operation to the reactor.
                if let Err(err) = spawned {
                    npu_core::log!(debug, %err, "no thread for a blocking wait; the reactor watches it");
                }
            }
        }
        Ok(())
    }
}

/// Gives to the reactor the queued waits that Tokio's blocking pool has not started by their
/// deadline. Its thread (`npu-overseer`) never waits on the device: it only takes unstarted
/// waits out of their slots, and parks while nothing is queued.
struct Overseer {
    /// Queued waits. A wait that ran, or was dropped, leaves a dead `Weak` behind, skipped
    /// when its deadline comes.
    queue: Deadlines<Instant, Weak<Slot>>,
    /// Set before the overseer is handed out, so every `watch` finds it.
    thread: OnceLock<Thread>,
}

impl Overseer {
    /// The overseer, starting its thread on first use; `None` if no thread can be started
    /// (or in a forked child whose parent had not started it).
    fn get() -> Option<&'static Overseer> {
        static OVERSEER: OnceLock<Option<&'static Overseer>> = OnceLock::new();
        // In a forked child whose parent had not started it, none: the wait goes to the
        // reactor, as when no thread can start (see `npu_core::fork::start_once`).
        let started = npu_core::fork::start_once(crate::SEAL, &OVERSEER, || {
            #[cfg(test)]
            crate::test_support::held::here();
            let overseer: &'static Overseer = Box::leak(Box::new(Overseer {
                queue: Deadlines::new(),
                thread: OnceLock::new(),
            }));
            match std::thread::Builder::new()
                .name("npu-overseer".into())
                // Marked shared for its life, as the reactor: a hand-over may drop the
                // last reference to a completion and what it holds.
                .spawn(|| npu_core::reaper::as_shared_thread(crate::SEAL, || overseer.run()))
            {
                Ok(handle) => {
                    let _ = overseer.thread.set(handle.thread().clone());
                    Some(overseer)
                }
                Err(err) => {
                    npu_core::log!(debug, %err, "no overseer thread; blocking waits go to the reactor");
                    None
                }
            }
        });
        started.copied().flatten()
    }

    /// Watches a wait about to be queued on the blocking pool.
    fn watch(&self, slot: &Arc<Slot>) {
        let first = self
            .queue
            .push(|| Instant::now() + START_DEADLINE, Arc::downgrade(slot));
        if let Some(thread) = self.thread.get().filter(|_| first) {
            thread.unpark();
        }
    }

    fn run(&self) {
        loop {
            let now = Instant::now();
            let (late, next) = self.queue.due(now);
            // Outside the lock: adopting takes the reactor's.
            for slot in late {
                if let Some((pending, stream)) = slot.upgrade().as_deref().and_then(take) {
                    hand_over(pending, stream);
                }
            }
            match next {
                // A wake-up left over from an earlier push returns at once; the loop then
                // finds the queue as it is.
                None => std::thread::park(),
                Some(deadline) => {
                    std::thread::park_timeout(deadline.max(now + OVERSEER_TICK) - now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use npu_core::Completer;

    use super::*;

    /// "A forked child is refused, never hung" for the blocking overseer's start: a thread is
    /// held inside it (across its thread's spawn), in a process where no runtime started yet,
    /// while this thread forks. In the child, asking for the overseer returns none at once
    /// (bounded by the child's alarm): it is never started there, and a wait goes to the
    /// reactor instead.
    ///
    /// The break: the child waited on the overseer's start, which the holder never completes
    /// there (killed by its alarm).
    #[test]
    fn a_child_forked_inside_the_overseers_start_is_refused_not_hung() {
        crate::test_support::held::in_a_fresh_process(
            "blocking::tests::a_child_forked_inside_the_overseers_start_is_refused_not_hung",
            || {
                crate::test_support::held::forked_inside_a_start(
                    || Overseer::get().is_some(),
                    npu_core::forked,
                )
            },
        );
    }

    /// A hand-over waiting for its predecessor, which is abandoned (it could never be
    /// watched): the operation is given up with it, its completion abandoned, and its stream
    /// leaked rather than dropped, since the device may still run the stream's work. The break:
    /// the notification was dropped unrun with the operation in it, which put its event back in
    /// the pool with its record perhaps still queued, and dropped the stream reference.
    #[test]
    fn a_hand_over_behind_an_abandoned_operation_gives_its_operation_up() {
        let stream = crate::test_support::sim_stream(0);
        // SAFETY: no device work or memory stands behind either completion.
        let (predecessor, completer) = unsafe { (Completer::new(), Completer::new()) };
        let done = completer.completion();
        let (event, completer) = crate::test_support::recorded(&stream, completer);
        let after = Some(predecessor.completion());
        let pending = Pending::new(event, completer, OpInfo::new("test"), after);
        let before = Arc::strong_count(&stream.shared);
        hand_over(pending, stream.shared.clone());
        assert!(!done.is_complete(), "it waits for its predecessor");
        drop(predecessor);
        let woken = done.blocking_waiter().wait_for(Duration::ZERO);
        let err = woken.expect("a blocked thread is woken").unwrap_err();
        assert!(err.to_string().contains("abandoned"), "{err}");
        assert_eq!(
            Arc::strong_count(&stream.shared),
            before + 1,
            "the stream is leaked"
        );
    }
}
