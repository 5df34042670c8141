//! Loom model of the holds' protocol: every interleaving of completing threads raising and
//! lowering holds and of waits for them is explored, on the very file the library compiles
//! (`protocol.rs`).

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
}

// The point of the model is to check the very file the library compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "protocol.rs"]
mod protocol;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use protocol::Holds;

/// A completing thread: raises a hold, wakes its task (`woken`), lets go of what it held
/// (`let_go`), then lowers the hold.
fn complete(holds: &Holds, woken: &AtomicBool, let_go: &AtomicBool) {
    let slot = holds.raise();
    woken.store(true, SeqCst);
    let_go.store(true, SeqCst);
    holds.lower(slot);
}

/// The woken task's program: once woken, waits for the holds; the completing thread has let
/// go by the time the wait returns.
fn wait_once_woken(holds: &Holds, woken: &AtomicBool, let_go: &AtomicBool) {
    while !woken.load(SeqCst) {
        loom::thread::yield_now();
    }
    assert!(holds.wait_for_earlier(None));
    assert!(
        let_go.load(SeqCst),
        "the wait returned before the thread let go"
    );
}

/// A wait made after the task was woken returns only once the completing thread let go; a
/// hang (a lowering whose notification was lost) is loom's deadlock.
#[test]
fn a_wait_after_the_wake_waits_for_the_completing_thread() {
    loom::model(|| {
        let holds = Arc::new(Holds::new());
        let (woken, let_go) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let completer = {
            let (holds, woken, let_go) = (holds.clone(), woken.clone(), let_go.clone());
            loom::thread::spawn(move || complete(&holds, &woken, &let_go))
        };
        wait_once_woken(&holds, &woken, &let_go);
        completer.join().unwrap();
    });
}

/// Two waits at once, each after the wake, around a completing thread whose hold came after
/// another thread's: each returns only once the completing thread let go, and neither waits
/// for the other's generation for ever.
#[test]
fn concurrent_waits_each_wait_for_the_holds_before_them() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let holds = Arc::new(Holds::new());
        let (woken, let_go) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let completer = {
            let (holds, woken, let_go) = (holds.clone(), woken.clone(), let_go.clone());
            loom::thread::spawn(move || {
                let earlier = holds.raise();
                holds.lower(earlier);
                complete(&holds, &woken, &let_go);
            })
        };
        let other = {
            let (holds, woken, let_go) = (holds.clone(), woken.clone(), let_go.clone());
            loom::thread::spawn(move || wait_once_woken(&holds, &woken, &let_go))
        };
        wait_once_woken(&holds, &woken, &let_go);
        completer.join().unwrap();
        other.join().unwrap();
    });
}
