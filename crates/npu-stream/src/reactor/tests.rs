//! A reactor that stops hands over what it watched. Only a bug in npu-rs can stop the real
//! thread (every user callback is contained), so these drive a reactor of their own, whose
//! thread never starts, through the same registration and stop paths.

use std::time::Duration;

use npu_core::{BackendChoice, Completer, Completion, Runtime};

use super::*;
use crate::Stream;

/// Watches one operation (a completer standing for work queued on `stream`) with `reactor`.
fn watch(reactor: &Reactor, stream: &Stream) -> std::result::Result<Completion, Unwatched> {
    // SAFETY: no memory stands behind the completion; the event recorded for it is the work.
    let completer = unsafe { Completer::new() };
    let done = completer.completion();
    CompletionStrategy::watch(reactor, &stream.shared, OpInfo::new("test"), completer)?;
    Ok(done)
}

/// A hang detector, not a synchronisation: the sentinel finishes each in well under a second.
fn finishes(done: &Completion) {
    let waited = done.blocking_waiter().wait_for(Duration::from_secs(60));
    assert!(matches!(waited, Some(Ok(()))), "{waited:?}");
}

fn check(adopted: bool) {
    let runtime = Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .unwrap();
    let ctx = runtime.device(0).unwrap().primary_context().clone();
    let stream = Stream::new(&ctx).unwrap();
    let reactor = Reactor::unstarted();
    npu_sim::control::hold(0).unwrap();
    let (Ok(first), Ok(second)) = (watch(&reactor, &stream), watch(&reactor, &stream)) else {
        panic!("a running reactor takes operations on");
    };
    let mut watched = Watched::default();
    if adopted {
        // As the thread does on its next pass: the stream moves from the inbox to `active`.
        reactor.adopt(&mut watched.active);
        assert_eq!(watched.active.len(), 1);
    }
    reactor.stop(watched);
    assert!(lock_queue(&stream.shared).pending.is_empty(), "handed over");
    let refused = watch(&reactor, &stream).map(drop).unwrap_err();
    assert!(
        refused.error.to_string().contains("not running"),
        "{}",
        refused.error
    );
    // The refused operation's completer is the submitter's to drain, as `Stream` does.
    sentinel::drain(stream.shared.clone(), refused.completer, refused.error);
    assert!(
        !first.is_complete() && !second.is_complete(),
        "the device is held"
    );
    npu_sim::control::release(0).unwrap();
    finishes(&first);
    finishes(&second);
}

/// One test, since both close device 0's hold gate.
#[test]
fn a_stopped_reactor_hands_its_inbox_and_its_active_streams_to_the_sentinel() {
    check(false);
    check(true);
}
