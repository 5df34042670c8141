//! Loom model of the completion protocol: every interleaving of completer, poller and
//! deferrer is explored, on the same source file the library compiles (`state.rs`).

mod sync {
    pub(crate) use loom::sync::Mutex;
    pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};

    /// loom's waker slot, under the method names of `futures::task::AtomicWaker`.
    pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

    impl AtomicWaker {
        pub(crate) fn new() -> Self {
            AtomicWaker(loom::future::AtomicWaker::new())
        }

        pub(crate) fn register(&self, waker: &std::task::Waker) {
            self.0.register_by_ref(waker);
        }

        pub(crate) fn wake(&self) {
            self.0.wake();
        }
    }
}

// The point of the model is to check the very file the library compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "state.rs"]
mod state;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use state::State;

#[test]
fn a_pending_poller_is_always_woken() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let completer = state.clone();
        let thread = loom::thread::spawn(move || {
            for action in completer.complete(7).unwrap() {
                action();
            }
            completer.wake();
        });
        // block_on reports a deadlock if the poller stays pending without being woken.
        let value = loom::future::block_on(std::future::poll_fn(|cx| state.poll(cx.waker())));
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
        let thread = loom::thread::spawn(move || {
            let actions = completer.complete(1).unwrap();
            completer.wake();
            actions
        });
        let counter = runs.clone();
        let action = Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        if let Some(returned) = state.defer(action) {
            returned();
        }
        for action in thread.join().unwrap() {
            action();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn the_first_completion_wins() {
    loom::model(|| {
        let state = Arc::new(State::<u32>::new());
        let other = state.clone();
        let thread = loom::thread::spawn(move || {
            other.complete(2);
        });
        let first = state.complete(1).is_some();
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
