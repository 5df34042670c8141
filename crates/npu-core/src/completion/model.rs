//! Loom model of the completion protocol: every interleaving of completer, poller and
//! deferrer is explored, on the same source files the library compiles (`state.rs`, and
//! `blocked.rs`, the signal blocked threads wait on).

mod sync {
    pub(crate) use super::timed::{Condvar, Instant};
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
}

/// A clock and a condition variable whose bounded wait can time out, for `blocked.rs`'s timed
/// wait: loom 0.7's `Condvar::wait_timeout` never times out. The clock is the model's own
/// (a real one would make loom's runs differ), and stands still but for a wait that times
/// out, which moves it on by the time waited. Whether a bounded wait times out is the run's
/// choice ([`start`]): one that does ends at once, the lock held throughout, so no other
/// thread acts while it waits; the interleavings that leaves out (a raise during the wait,
/// found after it) end as one woken would.
mod timed {
    use std::cell::Cell;
    use std::sync::{LockResult, PoisonError};
    use std::time::Duration;

    use loom::sync::MutexGuard;

    // Loom runs every thread of a model on the test's own, so these are the model's, read by
    // the one thread that waits.
    thread_local! {
        static NOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
        static TIMES_OUT: Cell<bool> = const { Cell::new(false) };
    }

    /// Starts a run of a model: the clock at zero, and whether its bounded waits time out.
    pub(super) fn start(times_out: bool) {
        NOW.set(Duration::ZERO);
        TIMES_OUT.set(times_out);
    }

    /// A point on the model's clock.
    #[derive(Clone, Copy)]
    pub(crate) struct Instant(Duration);

    impl Instant {
        pub(crate) fn now() -> Instant {
            Instant(NOW.get())
        }

        pub(crate) fn checked_add(self, duration: Duration) -> Option<Instant> {
            self.0.checked_add(duration).map(Instant)
        }

        pub(crate) fn saturating_duration_since(self, earlier: Instant) -> Duration {
            self.0.saturating_sub(earlier.0)
        }
    }

    /// Loom's condition variable, but for a bounded wait in a run whose waits time out.
    #[derive(Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn wait<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
        ) -> LockResult<MutexGuard<'a, T>> {
            self.0.wait(guard)
        }

        /// The guard, and whether the wait timed out.
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            duration: Duration,
        ) -> LockResult<(MutexGuard<'a, T>, bool)> {
            if TIMES_OUT.get() {
                NOW.set(NOW.get().saturating_add(duration));
                return Ok((guard, true));
            }
            self.0
                .wait(guard)
                .map(|guard| (guard, false))
                .map_err(|poisoned| PoisonError::new((poisoned.into_inner(), false)))
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

// The point of the model is to check the very files the library compiles, under loom.
// The model exercises the protocol, not every helper the library calls.
#[allow(clippy::duplicate_mod)]
#[path = "blocked.rs"]
mod blocked;
#[allow(clippy::duplicate_mod, dead_code)]
#[path = "state.rs"]
mod state;

use crate::reaper::Action;
use blocked::Signal;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use state::{Completing, Deferred, Registration, State};

/// A release that counts its runs in `runs`.
fn counting_release(runs: &Arc<AtomicUsize>) -> Deferred {
    let runs = runs.clone();
    Deferred::Release(Box::new(move || {
        runs.fetch_add(1, Ordering::SeqCst);
    }))
}

fn run(deferred: Deferred) {
    match deferred {
        Deferred::Release(action) | Deferred::Notify(action) => action(),
    }
}

/// The completing thread's own steps in the model: its hold a flag, the releases and the
/// notifications run in place.
#[derive(Default)]
struct InPlace {
    held: AtomicBool,
}

impl Completing for InPlace {
    fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    fn hand_on(&self, releases: Vec<Action>) {
        releases.into_iter().for_each(|release| release());
    }

    fn notify(&self, notifies: Vec<Action>) {
        notifies.into_iter().for_each(|notify| notify());
    }
}

/// `Completer::complete`: the library's order (`State::complete_with`), with the model's
/// steps and no memory error. Returns whether this completion won.
fn complete(state: &State<u32>, value: u32) -> bool {
    state.complete_with(value, 0, &InPlace::default()).is_some()
}

#[test]
fn a_pending_poller_is_always_woken() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 7)));
        // block_on reports a deadlock if the poller stays pending without being woken.
        let mut registration = Registration::default();
        let value = loom::future::block_on(std::future::poll_fn(|cx| {
            state.poll(cx.waker(), &mut registration)
        }));
        assert_eq!(value, 7);
        thread.join().unwrap();
    });
}

#[test]
fn a_deferred_action_runs_exactly_once() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 1)));
        let action = counting_release(&runs);
        if let Some(returned) = state.defer(action) {
            run(returned);
        }
        thread.join().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn the_first_completion_wins() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let other = state.clone();
        let thread = loom::thread::spawn(move || {
            complete(&other, 2);
        });
        let first = complete(&state, 1);
        thread.join().unwrap();
        let value = state.value().unwrap();
        assert_eq!(value == 1, first, "a completion reports whether it won");
        assert_eq!(
            state.value(),
            Some(value),
            "the value never changes once set"
        );
    });
}

#[test]
fn a_blocked_waiter_is_notified_exactly_once() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let notified = Arc::new(AtomicUsize::new(0));
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 3)));
        let counter = notified.clone();
        let seen = state.clone();
        // `State::defer_notify`, as `Signal::armed` and `Completion::on_complete` call it.
        state.defer_notify(Box::new(move || {
            // A blocked thread woken before the value is visible would take the operation
            // for abandoned.
            assert!(seen.is_complete(), "notified before the value was visible");
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        thread.join().unwrap();
        assert_eq!(notified.load(Ordering::SeqCst), 1);
        assert_eq!(state.value(), Some(3));
    });
}

#[test]
fn an_abandoned_operation_leaks_its_releases_and_drops_its_notifications() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        // A std counter: the leaked release keeps its clone for ever, which loom would report.
        let released = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let abandoner = state.clone();
        let thread = loom::thread::spawn(move || abandoner.abandon());
        let counter = released.clone();
        let release = Deferred::Release(Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        // Never handed back: the operation is not complete, so nothing may run.
        assert!(state.defer(release).is_none());
        thread.join().unwrap();
        assert!(state.is_abandoned());
        assert_eq!(released.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(!state.is_complete());
    });
}

/// A task's waker that only records that it was woken.
struct Woken(loom::sync::atomic::AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn every_pending_poller_is_woken() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 7)));
        // A first task polls, then a second task waits for the same completion: the second
        // registration must not displace the first.
        let first = std::sync::Arc::new(Woken(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(first.clone());
        let first_ready = state.poll(&waker, &mut Registration::default()).is_ready();
        let mut registration = Registration::default();
        let value = loom::future::block_on(std::future::poll_fn(|cx| {
            state.poll(cx.waker(), &mut registration)
        }));
        thread.join().unwrap();
        assert_eq!(value, 7);
        assert!(
            first_ready || first.0.load(Ordering::SeqCst),
            "the first task slept on"
        );
    });
}

/// Whoever sees the operation complete, woken or not (a poll that comes first, a blocked
/// thread's fast path), finds the releases deferred before it completed already handed on:
/// what lets a caller that waited for an operation count on its dropped buffers being queued
/// for release.
#[test]
fn a_completion_is_seen_only_after_its_releases_were_handed_on() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let released = Arc::new(AtomicUsize::new(0));
        let release = counting_release(&released);
        assert!(state.defer(release).is_none(), "pending: deferred");
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 5)));
        if state.is_complete() {
            assert_eq!(
                released.load(Ordering::SeqCst),
                1,
                "seen before its release"
            );
        }
        let mut registration = Registration::default();
        let value = loom::future::block_on(std::future::poll_fn(|cx| {
            state.poll(cx.waker(), &mut registration)
        }));
        assert_eq!(value, 5);
        assert_eq!(
            released.load(Ordering::SeqCst),
            1,
            "ready before its release"
        );
        thread.join().unwrap();
    });
}

/// A release deferred by a thread racing the completion (an operation's future dropped while
/// it completes), which that thread then finds complete: its release was handed on first, so
/// a thread that drops an operation and then waits for it can count on the release queued.
#[test]
fn a_release_deferred_during_completion_is_handed_on_before_the_completion_is_seen() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let released = Arc::new(AtomicUsize::new(0));
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 5)));
        let release = counting_release(&released);
        match state.defer(release) {
            // Already complete: the deferrer runs it itself.
            Some(returned) => run(returned),
            None if state.is_complete() => {
                assert_eq!(
                    released.load(Ordering::SeqCst),
                    1,
                    "seen before its release"
                );
            }
            None => {}
        }
        thread.join().unwrap();
        assert_eq!(released.load(Ordering::SeqCst), 1);
    });
}

/// A thread blocked on an operation (`BlockingWaiter::wait`, on `blocked.rs`'s signal) wakes
/// once it completes, and finds the value there.
#[test]
fn a_blocked_thread_wakes_to_the_value() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completer = state.clone();
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 5)));
        // `Completion::blocking_waiter`, then `BlockingWaiter::wait`.
        let signal = Signal::armed(&state);
        assert!(signal.wait_on(&state, None));
        assert_eq!(state.value(), Some(5), "woken before the value was visible");
        thread.join().unwrap();
    });
}

/// The other way a blocked thread is woken: its completer goes away without completing
/// (`Completer`'s drop, `State::abandon`). `Completion::blocking_waiter` defers its one
/// notification (a drop guard that raises the signal) and `BlockingWaiter::wait` then blocks
/// on the signal only if it does not see the operation abandoned: either the abandonment drops
/// the notification (raising the signal) or the waiter sees `abandoned` and does not block.
/// A waiter left blocked is a deadlock, which loom reports.
#[test]
fn a_blocked_waiter_is_woken_when_the_operation_is_abandoned() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let abandoner = state.clone();
        let thread = loom::thread::spawn(move || abandoner.abandon());
        // `Completion::blocking_waiter`, then `BlockingWaiter::wait`.
        let signal = Signal::armed(&state);
        assert!(signal.wait_on(&state, None));
        thread.join().unwrap();
        assert!(!state.is_complete());
    });
}

/// Cancellation: a waiting future dropped (`Wait`'s drop, `State::deregister`) while the
/// operation completes removes its own waker only; another task waiting for the same
/// completion is still woken.
#[test]
fn a_dropped_waiter_does_not_take_another_waiters_wake_up() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completer = state.clone();
        // The dropped future's registration, made before the race.
        let gone = std::sync::Arc::new(Woken(loom::sync::atomic::AtomicBool::new(false)));
        let mut dropped = Registration::default();
        let gone_waker = std::task::Waker::from(gone);
        assert!(state.poll(&gone_waker, &mut dropped).is_pending());
        let thread = loom::thread::spawn(move || assert!(complete(&completer, 9)));
        let deregistering = {
            let state = state.clone();
            loom::thread::spawn(move || state.deregister(dropped))
        };
        let mut registration = Registration::default();
        let value = loom::future::block_on(std::future::poll_fn(|cx| {
            state.poll(cx.waker(), &mut registration)
        }));
        assert_eq!(value, 9);
        deregistering.join().unwrap();
        thread.join().unwrap();
    });
}

/// A bounded wait (`BlockingWaiter::wait_for`, `Signal::wait_on` with a timeout) as the
/// operation completes, its deadline passing or not: it reports the operation done only once
/// the value is visible, never times out when the deadline cannot pass, and a wait that timed
/// out (the value arriving after) takes nothing from the next wait, which still wakes to the
/// value.
#[test]
fn a_timed_wait_wakes_to_the_value_or_times_out_and_loses_no_wake_up() {
    for times_out in [false, true] {
        loom::model(move || {
            timed::start(times_out);
            let state = Arc::new(State::<u32>::new());
            let completer = state.clone();
            let thread = loom::thread::spawn(move || assert!(complete(&completer, 5)));
            let signal = Signal::armed(&state);
            let done = signal.wait_on(&state, Some(std::time::Duration::from_millis(1)));
            assert!(done || times_out, "timed out with no deadline passing");
            if done {
                assert_eq!(state.value(), Some(5), "woken before the value was visible");
            }
            assert!(signal.wait_on(&state, None));
            assert_eq!(state.value(), Some(5));
            thread.join().unwrap();
        });
    }
}

/// A bounded wait as the operation is abandoned, its deadline passing or not: it ends, and a
/// wait after one that timed out still sees the abandonment.
#[test]
fn a_timed_wait_ends_when_the_operation_is_abandoned() {
    for times_out in [false, true] {
        loom::model(move || {
            timed::start(times_out);
            let state = Arc::new(State::<u32>::new());
            let abandoner = state.clone();
            let thread = loom::thread::spawn(move || abandoner.abandon());
            let signal = Signal::armed(&state);
            let done = signal.wait_on(&state, Some(std::time::Duration::from_millis(1)));
            assert!(done || times_out, "timed out with no deadline passing");
            assert!(signal.wait_on(&state, None));
            thread.join().unwrap();
            assert!(!state.is_complete());
        });
    }
}

/// Whoever sees the operation complete, and a release deferred on it as it completes (which
/// the completer runs, or its deferrer once it is complete), find the completing thread's
/// hold raised and the operation's memory error marked: `Completer::complete` does both
/// before the value is visible (on `State::complete_with`).
#[test]
fn the_hold_and_the_memory_error_come_before_the_value() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completing = Arc::new(InPlace::default());
        let thread = {
            let (state, completing) = (state.clone(), completing.clone());
            loom::thread::spawn(move || assert!(state.complete_with(4, 2, &*completing).is_some()))
        };
        // As a use list's release reads the level for the memory it returns.
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let release = {
            let (state, seen) = (state.clone(), seen.clone());
            Deferred::Release(Box::new(move || {
                seen.store(usize::from(state.memory_error_level()), Ordering::SeqCst);
            }))
        };
        if let Some(returned) = state.defer(release) {
            run(returned);
        }
        if state.is_complete() {
            assert!(
                completing.held.load(Ordering::SeqCst),
                "seen before the hold"
            );
            assert_eq!(
                state.memory_error_level(),
                2,
                "seen before the memory error"
            );
        }
        thread.join().unwrap();
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "released before the memory error"
        );
    });
}
