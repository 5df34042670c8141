//! Runs the notifies of completions made from inside other notifies one after another instead
//! of nested.
//!
//! A notify may complete another operation (`complete_after` orders a stream's `BlockingSync`
//! completions behind each other so), whose notifies may complete the next, and so on: run
//! inline, completing the head of a chain of N operations that all finished their waits would
//! nest N frames deep and overflow the completing thread's stack. Instead, the outermost
//! completion on a thread runs its notifies and then, in order, every notify queued by the
//! completions they made, until none is left; the stack stays one completion deep.

use std::cell::RefCell;
use std::collections::VecDeque;

use crate::reaper::Action;

thread_local! {
    /// `Some` while a completion on this thread runs its notifies: where nested completions
    /// queue theirs.
    static QUEUED: RefCell<Option<VecDeque<Action>>> = const { RefCell::new(None) };
}

/// Runs `notifies` now, or after the notify running on this thread if there is one.
pub(super) fn run(notifies: Vec<Action>) {
    if notifies.is_empty() {
        return;
    }
    let mut notifies = Some(notifies);
    let nested = QUEUED.try_with(|queued| {
        let mut queued = queued.borrow_mut();
        match queued.as_mut() {
            Some(queue) => {
                queue.extend(notifies.take().into_iter().flatten());
                true
            }
            None => {
                *queued = Some(VecDeque::new());
                false
            }
        }
    });
    let notifies = notifies.into_iter().flatten();
    match nested {
        Ok(true) => return,
        Ok(false) => {}
        // The thread's TLS destructors destroyed the queue already: a completion completed by
        // dropping a value a user keeps in a `thread_local!`. `with` would panic, which aborts
        // the process there; with no queue, nothing can nest behind this, so the notifies run
        // here.
        Err(_) => return notifies.for_each(|notify| notify()),
    }
    // Clears the queue however this ends. If a notify unwinds, those still queued are dropped
    // unrun: their operations stay pending for ever and leak what they hold, never free it
    // early (a dropped `Completer` abandons its completion).
    struct Outermost;
    impl Drop for Outermost {
        fn drop(&mut self) {
            QUEUED.with(|queued| queued.borrow_mut().take());
        }
    }
    let _outermost = Outermost;
    notifies.into_iter().for_each(|notify| notify());
    while let Some(notify) = QUEUED.with(|queued| queued.borrow_mut().as_mut()?.pop_front()) {
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

    /// A completion completed by a TLS destructor that runs after this queue's (a value a user
    /// keeps in a `thread_local!` first used before any completion on the thread) runs its
    /// notifies instead of panicking, which would abort the process.
    #[test]
    fn notifies_run_after_the_thread_destroyed_its_queue() {
        struct CompletesOnDrop(Arc<Mutex<u32>>);
        impl Drop for CompletesOnDrop {
            fn drop(&mut self) {
                let ran = self.0.clone();
                run(vec![Box::new(move || *ran.lock().unwrap() += 1)]);
            }
        }
        thread_local! {
            static USER: RefCell<Option<CompletesOnDrop>> = const { RefCell::new(None) };
        }
        let ran = Arc::new(Mutex::new(0));
        let theirs = ran.clone();
        std::thread::spawn(move || {
            // Destructors run in the reverse order of first use: the user's value is dropped
            // after the queue is gone.
            USER.with(|user| *user.borrow_mut() = Some(CompletesOnDrop(theirs)));
            run(vec![Box::new(|| {})]);
        })
        .join()
        .unwrap();
        assert_eq!(*ran.lock().unwrap(), 1);
    }
}
