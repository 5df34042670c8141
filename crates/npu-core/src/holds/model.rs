//! Loom model of the holds' protocol: every interleaving of completing threads raising and
//! lowering holds and of waits for them is explored, on the very file the library compiles
//! (`protocol.rs`).

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering, fence};
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
}

// The point of the model is to check the very file the library compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "protocol.rs"]
mod protocol;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use protocol::Holds;

/// A completing thread: raises a hold, wakes the program's tasks (starts `waits` threads, each
/// waiting for the holds as a program whose task woke does), lets go of what it held
/// (`let_go`), then lowers the hold. Returns the waits, to join.
fn complete_and_wake(
    holds: &Arc<Holds>,
    let_go: &Arc<AtomicBool>,
    waits: usize,
) -> Vec<loom::thread::JoinHandle<()>> {
    let slot = holds.raise();
    let woken = (0..waits)
        .map(|_| {
            let (holds, let_go) = (holds.clone(), let_go.clone());
            loom::thread::spawn(move || {
                assert!(holds.wait_for_earlier(None));
                assert!(
                    let_go.load(SeqCst),
                    "the wait returned before the thread let go"
                );
            })
        })
        .collect();
    let_go.store(true, SeqCst);
    holds.lower(slot);
    woken
}

/// A wait made after the task was woken returns only once the completing thread let go; a
/// hang (a lowering whose notification was lost) is loom's deadlock.
#[test]
fn a_wait_after_the_wake_waits_for_the_completing_thread() {
    loom::model(|| {
        let holds = Arc::new(Holds::new());
        let let_go = Arc::new(AtomicBool::new(false));
        for wait in complete_and_wake(&holds, &let_go, 1) {
            wait.join().unwrap();
        }
    });
}

/// Two waits at once, each after the wake, around a completing thread whose hold came after
/// another thread's (raised and lowered while they may already wait): each returns only once
/// the completing thread let go, and neither waits for ever on a generation the other moved.
#[test]
fn concurrent_waits_each_wait_for_the_holds_before_them() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let holds = Arc::new(Holds::new());
        let let_go = Arc::new(AtomicBool::new(false));
        let completer = {
            let (holds, let_go) = (holds.clone(), let_go.clone());
            loom::thread::spawn(move || complete_and_wake(&holds, &let_go, 2))
        };
        let later = holds.raise();
        holds.lower(later);
        for wait in completer.join().unwrap() {
            wait.join().unwrap();
        }
    });
}
