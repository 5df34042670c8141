//! Runs the notifies of completions made from inside other notifies one after another instead
//! of nested.
//!
//! A notify may complete another operation (`complete_after` orders a stream's `BlockingSync`
//! completions behind each other so), whose notifies may complete the next, and so on: run
//! inline, completing the head of a chain of N operations that all finished their waits would
//! nest N frames deep and overflow the completing thread's stack. Instead, the outermost
//! completion on a thread runs its notifies and then, in order, every notify queued by the
//! completions they made, until none is left; the stack stays one completion deep.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ptr::NonNull;

use crate::reaper::Action;

/// The queue the outermost completion running on a thread keeps on its stack.
type Queue = RefCell<VecDeque<Action>>;

thread_local! {
    /// `Some` while a completion on this thread runs its notifies: where nested completions
    /// queue theirs. A pointer to the outermost call's queue, not the queue itself, so that the
    /// key has nothing to destroy and stays usable while the thread's TLS destructors run (a
    /// value a user keeps in a `thread_local!` may complete operations as it is dropped, after
    /// every key with a destructor is gone, where `with` panics and so aborts the process).
    static QUEUED: Cell<Option<NonNull<Queue>>> = const { Cell::new(None) };
}

/// Runs `notifies` now, or after the notify running on this thread if there is one.
pub(super) fn run(notifies: Vec<Action>) {
    if notifies.is_empty() {
        return;
    }
    if let Some(queue) = QUEUED.get() {
        // SAFETY: set only below, by the outermost `run` of this thread, to the queue on its
        // stack, and cleared before that queue is dropped (also when a notify unwinds); this
        // call runs on the same thread, inside a notify of that outermost call, and no borrow
        // of the queue is held across a notify.
        unsafe { queue.as_ref() }.borrow_mut().extend(notifies);
        return;
    }
    let queue = Queue::default();
    // Clears the pointer however this ends, before `queue` is dropped (declared after it). If
    // a notify unwinds, those still queued are dropped unrun: their operations stay pending
    // for ever and leak what they hold, never free it early (a dropped `Completer` abandons
    // its completion).
    struct Outermost;
    impl Drop for Outermost {
        fn drop(&mut self) {
            QUEUED.set(None);
        }
    }
    QUEUED.set(Some(NonNull::from(&queue)));
    let _outermost = Outermost;
    notifies.into_iter().for_each(|notify| notify());
    loop {
        let next = queue.borrow_mut().pop_front();
        let Some(notify) = next else { break };
        notify();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A notify that records `n` and, below `depth`, runs a nested chain link.
    fn link(order: Arc<Mutex<Vec<u32>>>, n: u32, depth: u32) -> Action {
        Box::new(move || {
            order.lock().unwrap().push(n);
            if n < depth {
                run(vec![link(order.clone(), n + 1, depth)]);
                order.lock().unwrap().push(1_000_000 + n);
            }
        })
    }

    #[test]
    fn a_long_chain_runs_in_order_without_nesting() {
        let order = Arc::new(Mutex::new(Vec::new()));
        // Deep enough to overflow a 2 MiB stack if each link nested a frame or more.
        let depth = 200_000;
        run(vec![link(order.clone(), 0, depth)]);
        let order = order.lock().unwrap();
        assert_eq!(order.len() as u32, 2 * depth + 1);
        // Each link finishes before the one it queued starts.
        assert_eq!(&order[..4], &[0, 1_000_000, 1, 1_000_001]);
        assert_eq!(order.last(), Some(&depth));
    }

    #[test]
    fn a_panicking_notify_leaves_the_thread_able_to_run_more() {
        let ran = Arc::new(Mutex::new(0));
        let queued_after_panic = {
            let ran = ran.clone();
            Box::new(move || *ran.lock().unwrap() += 1) as Action
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(vec![Box::new(move || {
                run(vec![queued_after_panic]);
                panic!("a notify panicked");
            })])
        }));
        assert!(result.is_err());
        assert_eq!(
            *ran.lock().unwrap(),
            0,
            "what was queued behind it is dropped"
        );
        let again = ran.clone();
        run(vec![Box::new(move || *again.lock().unwrap() += 1)]);
        assert_eq!(
            *ran.lock().unwrap(),
            1,
            "the next completion runs its notifies at once"
        );
    }

    /// A completion completed by a TLS destructor that runs after the thread's keys with
    /// destructors are gone (a value a user keeps in a `thread_local!` first used before any
    /// completion on the thread) runs its notifies instead of panicking, which would abort the
    /// process, and runs a long chain flat, as anywhere else.
    #[test]
    fn a_long_chain_run_from_a_tls_destructor_runs_flat() {
        struct ChainOnDrop(Arc<Mutex<Vec<u32>>>);
        impl Drop for ChainOnDrop {
            fn drop(&mut self) {
                run(vec![link(self.0.clone(), 0, 200_000)]);
            }
        }
        thread_local! {
            static USER: RefCell<Option<ChainOnDrop>> = const { RefCell::new(None) };
            // A key with a destructor, first used after the user's, so destroyed before it.
            static LATER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        let order = Arc::new(Mutex::new(Vec::new()));
        let theirs = order.clone();
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                USER.with(|user| *user.borrow_mut() = Some(ChainOnDrop(theirs)));
                LATER.with(|later| later.borrow_mut().push(1));
                run(vec![Box::new(|| {})]);
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(order.lock().unwrap().len(), 2 * 200_000 + 1);
    }
}
