//! Paths of the reactor that the public API cannot force at will, driven on a reactor of the
//! tests' own whose thread never starts: a reactor that stops hands over what it watched (only
//! a bug in npu-rs can stop the real thread: every user callback is contained), and a probe's
//! verdict read after an abort revived its stream fails only what the probe saw.

use std::time::Duration;

use npu_core::{Completer, Completion};

use super::*;
use crate::Stream;
use crate::sentinel::Dead;
use crate::test_support::Held;

/// Watches one operation (a completer standing for work queued on `stream`) with `reactor`,
/// numbered like a submission.
fn watch(reactor: &Reactor, stream: &Stream) -> std::result::Result<Completion, Unwatched> {
    // SAFETY: no memory stands behind the completion; the event recorded for it is the work.
    let completer = unsafe { Completer::new() };
    let done = completer.completion();
    let op = OpInfo {
        seq: stream.shared.watched.fetch_add(1, sync::Ordering::AcqRel) + 1,
        ..OpInfo::new("test")
    };
    CompletionStrategy::watch(reactor, &stream.shared, op, completer)?;
    Ok(done)
}

/// A hang detector, not a synchronisation: the sentinel finishes each in well under a second.
fn finishes(done: &Completion) {
    let waited = done.blocking_waiter().wait_for(Duration::from_secs(60));
    assert!(matches!(waited, Some(Ok(()))), "{waited:?}");
}

/// A stream of `device`, a reactor of the test's own, and two operations it watches that the
/// device, whose hold gate this closes (until the guard returned goes), cannot finish.
fn two_held_operations(device: u32) -> (Held, Stream, Reactor, Completion, Completion) {
    let stream = crate::test_support::sim_stream(device);
    let reactor = Reactor::unstarted();
    let held = crate::test_support::hold(device);
    let (Ok(first), Ok(second)) = (watch(&reactor, &stream), watch(&reactor, &stream)) else {
        panic!("a running reactor takes operations on");
    };
    (held, stream, reactor, first, second)
}

fn check(adopted: bool) {
    let (held, stream, reactor, first, second) = two_held_operations(0);
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
    let through = stream.shared.watched.load(sync::Ordering::Acquire);
    let drain = stream
        .shared
        .drains
        .add(through, refused.completer, refused.error);
    sentinel::drain(stream.shared.clone(), drain);
    assert!(
        !first.is_complete() && !second.is_complete(),
        "the device is held"
    );
    held.release();
    finishes(&first);
    finishes(&second);
}

/// One test, since both close device 0's hold gate.
#[test]
fn a_stopped_reactor_hands_its_inbox_and_its_active_streams_to_the_sentinel() {
    check(false);
    check(true);
}

/// A probe found the stream dead with one operation queued; before the reactor read the
/// verdict, an abort revived the stream and a second operation was submitted (the abort is
/// stood for by the verdict's horizon: what an abort discards is marked separately). The
/// verdict fails the first only: the second will run, and failing it would hand its memory
/// back while the device still uses it.
#[test]
fn a_dead_verdict_fails_only_what_was_queued_when_the_probe_looked() {
    let (held, stream, reactor, seen, later) = two_held_operations(1);
    let mut watched = Watched::default();
    reactor.adopt(&mut watched.active);
    let dead = Dead::new(
        Error::invalid("test", "stream", "found dead by the probe"),
        1,
    );
    watched.active[0].health.asked = Some(Verdict::given(Err(dead)));
    let Watched {
        active, finished, ..
    } = &mut watched;
    assert!(reactor.poll_stream(&mut active[0], finished));
    assert_eq!(finished.len(), 1, "only the operation the probe saw fails");
    let kept: Vec<u64> = lock_queue(&stream.shared)
        .pending
        .iter()
        .map(|pending| pending.op.seq)
        .collect();
    assert_eq!(kept, [2], "the later one stays watched");
    while let Some((stream, pending, outcome)) = finished.pop_front() {
        outcome.apply(pending, &stream);
    }
    let failed = seen.result().expect("completed").unwrap_err();
    assert!(failed.to_string().contains("found dead"), "{failed}");
    assert!(!later.is_complete(), "the device is held");
    reactor.stop(watched);
    held.release();
    finishes(&later);
}

/// A program's own `aclrtStreamAbort` of the stream's raw handle discarded two watched
/// operations and their records; a third was watched after it, on the held device. A probe
/// found the stream idle after the first two were recorded (the verdict's horizon, 2): the
/// reactor fails those two `Aborted` (their events are not complete, so their records were
/// discarded) and keeps the third, which runs once the device is released; with nothing
/// covered left, the reactor forgets the horizon, so later passes take no lock for it.
#[test]
fn an_idle_verdict_fails_the_operations_recorded_before_it_whose_events_never_complete() {
    let (held, stream, reactor, first, second) = two_held_operations(1);
    let shared = &stream.shared;
    shared.context.bind().unwrap();
    let abort = shared.context.runtime().api().aclrtStreamAbort;
    let abort = abort.expect("npu-sim exports aclrtStreamAbort");
    // SAFETY: the stream is alive and its context is bound on this thread.
    assert_eq!(unsafe { abort(shared.handle) }, npu_core::ffi::ACL_SUCCESS);
    let Ok(third) = watch(&reactor, &stream) else {
        panic!("a running reactor takes operations on");
    };
    let mut watched = Watched::default();
    reactor.adopt(&mut watched.active);
    let idle = sentinel::Alive::idle(2);
    watched.active[0].health.asked = Some(Verdict::given(Ok(idle)));
    let Watched {
        active, finished, ..
    } = &mut watched;
    assert!(reactor.poll_stream(&mut active[0], finished));
    assert_eq!(finished.len(), 2, "the two discarded operations fail");
    while let Some((stream, pending, outcome)) = finished.pop_front() {
        outcome.apply(pending, &stream);
    }
    for done in [&first, &second] {
        let failed = done.result().expect("completed").unwrap_err();
        assert!(matches!(failed, Error::Aborted { .. }), "{failed}");
    }
    assert!(!third.is_complete(), "the device is held");
    assert_eq!(
        active[0].health.idle_through, 0,
        "nothing it covers is left"
    );
    reactor.stop(watched);
    held.release();
    finishes(&third);
}

/// "A forked child is refused, never hung" for the reactor's start: a thread is held inside
/// it (across its thread's spawn), in a process where no runtime started yet, while this
/// thread forks. In the child, asking for the reactor returns none at once (bounded by the
/// child's alarm): it is never started there, an operation handed to it is leaked, and an
/// `EventPoll` watch is `Error::Forked`.
///
/// The break: the child waited on the reactor's start, which the holder never completes there
/// (killed by its alarm).
#[test]
fn a_child_forked_inside_the_reactors_start_is_refused_not_hung() {
    crate::test_support::held::in_a_fresh_process(
        "reactor::tests::a_child_forked_inside_the_reactors_start_is_refused_not_hung",
        || {
            crate::test_support::held::forked_inside_a_start(
                || Reactor::get().is_some(),
                npu_core::forked,
            )
        },
    );
}
