//! Attacks of the eighteenth session's third helper, through the `npu` facade: device-side
//! signalling (notifies shared by two waiters, waits discarded by aborts and stops, timed
//! waits at their limits and racing aborts, value words at the numeric edges, injected task
//! faults around value operations), the environment a runtime is configured from
//! (`NPU_BACKEND`, `NPU_SIM_CONFIG`: empty, malformed, huge, deeply nested and non-UTF-8
//! values, each in a child process of its own), pool builders at their limits and
//! `StreamPool` turns under cancellation, faults and aborts.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePool, PinnedPool};
use npu::prelude::*;
use npu::sim;
use npu::stream::{FailureMode, Notify, StreamPool, ValueCondition, ValueWord};
use npu::{Error, Event, Stream};

/// The child-process cases of this file: `NPU_SESSION18C_CHILD` names the case a child runs.
const CHILD_ENV: &str = "NPU_SESSION18C_CHILD";

/// The shortest timeout a device wait accepts (ACL rounds it up to one second).
const SHORTEST: Duration = Duration::from_nanos(1);

fn is_aborted<T>(result: &Result<T, npu::stream::OpError<T>>) -> bool {
    matches!(result, Err(failed) if failed.error.is_aborted())
}

fn is_timeout<T>(result: &Result<T, npu::stream::OpError<T>>) -> bool {
    matches!(result, Err(failed) if failed.error.is_timeout())
}

/// "One record satisfies one wait": two streams wait (with a timeout) on one notify and one
/// record is made; exactly one wait passes, the other times out, and a second record is
/// then needed for a third wait.
#[test]
fn one_record_satisfies_exactly_one_of_two_streams_waiting_on_a_notify() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let (a, b, c) = (
            stream(&ctx, strategy),
            stream(&ctx, strategy),
            stream(&ctx, strategy),
        );
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let first = b.wait_notify_timeout(&notify, SHORTEST);
            let second = c.wait_notify_timeout(&notify, SHORTEST);
            a.record_notify(&notify).await.unwrap();
            let (first, second) = (first.await, second.await);
            let passed = [&first, &second].iter().filter(|r| r.is_ok()).count();
            let timed_out = [is_timeout(&first), is_timeout(&second)];
            assert_eq!(passed, 1, "{strategy:?}: {first:?} {second:?}");
            assert_eq!(
                timed_out.iter().filter(|t| **t).count(),
                1,
                "{strategy:?}: the other wait timed out: {first:?} {second:?}"
            );
            // The record was consumed by the wait that passed: nothing is left over.
            let again = b.wait_notify_timeout(&notify, SHORTEST).await;
            assert!(is_timeout(&again), "{strategy:?}: {again:?}");
            // Both streams go on; `synchronize` reports the first failure it has not yet.
            a.record_notify(&notify).await.unwrap();
            c.wait_notify(&notify).await.unwrap();
            let reported = b.synchronize().await;
            assert!(is_timeout(&reported), "{strategy:?}: {reported:?}");
            b.synchronize().await.unwrap();
        });
    }
}

/// An aborted notify wait is discarded without clearing anything: a record made after the
/// abort satisfies the stream's next wait, exactly once.
#[test]
fn a_record_after_an_aborted_wait_satisfies_the_next_wait_exactly_once() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let orphan = b.wait_notify(&notify);
            let behind = b.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 3);
            b.abort().await.unwrap();
            let orphan = orphan.await;
            assert!(is_aborted(&orphan), "{strategy:?}: {orphan:?}");
            assert!(is_aborted(&behind.await), "{strategy:?}");
            a.record_notify(&notify).await.unwrap();
            b.wait_notify(&notify).await.unwrap();
            let twice = b.wait_notify_timeout(&notify, SHORTEST).await;
            assert!(
                is_timeout(&twice),
                "{strategy:?}: one record, one wait: {twice:?}"
            );
            let filled = b
                .memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 4)
                .await
                .unwrap();
            assert_eq!(filled.to_vec_blocking().unwrap(), [4; 8]);
        });
    }
}

/// A timed wait and an abort on its stream at once: the wait resolves once (aborted or timed
/// out, never passed), the abort completes, the notify stays unset, and the stream works.
/// The abort is started at several points of the timed wait's life: before it begins, while
/// it waits, and after a previous timed wait on the stream ran out.
#[test]
fn a_timed_notify_wait_racing_an_abort_resolves_once_and_leaves_the_notify_alone() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            for round in 0..3 {
                if round == 2 {
                    let ran_out = b.wait_notify_timeout(&notify, SHORTEST).await;
                    assert!(is_timeout(&ran_out), "{strategy:?}: {ran_out:?}");
                }
                let waited = b.wait_notify_timeout(&notify, SHORTEST);
                let abort = b.abort();
                if round == 1 {
                    // The wait is the stream's running task by now or soon; either way.
                    tokio::task::yield_now().await;
                }
                abort.await.unwrap();
                let waited = waited.await;
                assert!(
                    is_aborted(&waited) || is_timeout(&waited),
                    "{strategy:?} round {round}: {waited:?}"
                );
                assert!(
                    waited.unwrap_err().value.is_some(),
                    "the notify handed back"
                );
            }
            // The notify was never set: the abort did not set it, the timeout did not either.
            let unset = b.wait_notify_timeout(&notify, SHORTEST).await;
            assert!(is_timeout(&unset), "{strategy:?}: {unset:?}");
            a.record_notify(&notify).await.unwrap();
            b.wait_notify(&notify).await.unwrap();
        });
    }
}

/// A record queued on a stopped stream never runs, so it satisfies nobody (a waiter times
/// out); once the stream is aborted and runs again, a new record satisfies the waiter.
#[test]
fn a_record_on_a_stopped_stream_satisfies_nobody_until_the_stream_runs_again() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            a.stop().unwrap();
            let record = a.record_notify(&notify).await;
            assert!(
                record.is_err(),
                "{strategy:?}: a stopped stream runs nothing"
            );
            assert!(
                record.unwrap_err().value.is_some(),
                "the notify handed back"
            );
            let waited = b.wait_notify_timeout(&notify, SHORTEST).await;
            assert!(
                is_timeout(&waited),
                "{strategy:?}: the stopped record set nothing: {waited:?}"
            );
            a.abort().await.unwrap();
            a.record_notify(&notify).await.unwrap();
            b.wait_notify(&notify).await.unwrap();
        });
    }
}

/// `ValueCondition::holds` is "as the device decides": at the numeric edges (0, 1, the
/// signed boundary, `u64::MAX - 1`, `u64::MAX`: wrap-around for `AtLeast`), a wait passes
/// exactly when `holds` says so. A wait that does not hold is discarded by an abort.
#[test]
fn value_waits_agree_with_holds_at_the_numeric_edges() {
    let (_guard, ctx, _) = exclusive(None);
    let edges = [
        0,
        1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    let conditions = [
        ValueCondition::AtLeast,
        ValueCondition::Equal,
        ValueCondition::AnyBitOf,
        ValueCondition::NotAllBits,
    ];
    let (writer, waiter) = (stream(&ctx, STRATEGIES[0]), stream(&ctx, STRATEGIES[1]));
    let word = Arc::new(ValueWord::new(&ctx, 0).unwrap());
    run(async {
        for memory in edges {
            writer.write_value(word.clone(), memory).await.unwrap();
            for value in edges {
                for condition in conditions {
                    let waited = waiter.wait_value(word.clone(), value, condition);
                    if condition.holds(memory, value) {
                        let seen = waited.await;
                        assert!(seen.is_ok(), "{condition:?} m={memory} v={value}: {seen:?}");
                    } else {
                        waiter.abort().await.unwrap();
                        let seen = waited.await;
                        assert!(
                            is_aborted(&seen),
                            "{condition:?} m={memory} v={value}: the device passed a wait \
                             `holds` refuses: {seen:?}"
                        );
                    }
                }
            }
        }
    });
    let mut word = Arc::into_inner(word).expect("no operation holds the word");
    assert_eq!(word.read_blocking().unwrap(), u64::MAX);
}

/// `npu::sim::fail_task` counts "the copies, memsets and kernels operations queue": a value
/// store or a notify record between them is not a device task, so the failure lands on the
/// memset behind them, and the word is stored.
#[test]
fn fail_task_skips_value_stores_and_notify_records() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        run(async {
            let stored = s.write_value(ValueWord::new(&ctx, 0).unwrap(), 9);
            let recorded = s.record_notify(&notify);
            let waited = s.wait_notify(&notify);
            let failing = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1);
            let mut word = stored.await.expect("a value store is not a device task");
            assert_eq!(word.read_blocking().unwrap(), 9, "{strategy:?}");
            recorded
                .await
                .expect("a notify record is not a device task");
            waited.await.expect("a notify wait is not a device task");
            let failed = failing.await.unwrap_err();
            assert_eq!(
                failed.error.acl_code(),
                Some(AclCode(507015)),
                "{strategy:?}"
            );
            assert!(failed.value.is_some(), "the buffer handed back");
        });
    }
}

/// A value store behind a failed task on a stream in `FailureMode::Stop` never runs: it
/// fails, its word is released once the stream is done, a waiter on another stream that
/// counted on the store is discarded by an abort, later stores are refused with the word
/// handed back, and nothing leaks.
#[test]
fn value_operations_behind_a_fault_in_stop_mode_fail_and_release_their_word() {
    let (_guard, ctx, _) = exclusive(None);
    let before = live_allocations(&ctx);
    for strategy in STRATEGIES {
        // Stop mode stops every stream of the context for the rest of its life: a context of
        // its own, and the waiter on another (the primary) context.
        let stopping = ctx.device().create_context().unwrap();
        let (s, other) = (stream(&stopping, strategy), stream(&ctx, strategy));
        s.set_failure_mode(FailureMode::Stop).unwrap();
        let word = Arc::new(ValueWord::new(&ctx, 0).unwrap());
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        run(async {
            let waiting = other.wait_value(word.clone(), 1, ValueCondition::Equal);
            let failing = s.memset(DeviceBuffer::<u8>::new(&stopping, 8).unwrap(), 1);
            let store = s.write_value(word.clone(), 1);
            assert!(failing.await.is_err(), "{strategy:?}");
            let store = store.await;
            assert!(
                store.is_err(),
                "{strategy:?}: the store never ran: {store:?}"
            );
            drop(store);
            other.abort().await.unwrap();
            assert!(is_aborted(&waiting.await), "{strategy:?}");
        });
        until_released("the word's operations", || Arc::strong_count(&word) == 1);
        let mut word = Arc::into_inner(word).unwrap();
        assert_eq!(
            word.read_blocking().unwrap(),
            0,
            "{strategy:?}: never stored"
        );
        drop(word);
        // The stopped context refuses later value operations, handing the word back.
        let refused = run(s.write_value(ValueWord::new(&stopping, 0).unwrap(), 2)).unwrap_err();
        assert_eq!(
            refused.error.acl_code(),
            Some(AclCode(507015)),
            "{strategy:?}"
        );
        assert!(refused.value.is_some(), "the word handed back");
        drop((refused, s, other, stopping));
    }
    until_released("every buffer", || live_allocations(&ctx) <= before);
}

/// Timed event waits at their limits: a never-recorded Ex event is waited for at once even with
/// the shortest timeout (a never-recorded legacy one, which ACL would hold the stream for until
/// its first record, is refused by name with the event handed back), the largest accepted timeout (`i32::MAX` s, and one rounded up to
/// it) is accepted and its wait discarded by an abort, one above is refused by name with the
/// event handed back; an event of another device is refused by the runtime before anything
/// is queued, handed back, and leaves nothing for `synchronize` to report.
#[test]
fn timed_event_waits_at_their_limits() {
    let (_guard, ctx, other) = exclusive(None);
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let elsewhere = stream(&other, strategy);
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let never = Event::builder(&ctx)
                .kind(npu::stream::EventKind::Ex)
                .build()
                .unwrap();
            b.wait_event_timeout(&never, SHORTEST).await.unwrap();
            let legacy = Event::new(&ctx).unwrap();
            let refused = b.wait_event_timeout(&legacy, SHORTEST).await.unwrap_err();
            assert_eq!(
                invalid(&refused.error),
                ("Stream::wait_event_timeout", "event")
            );
            assert!(refused.value.is_some(), "the event handed back");

            let largest = Duration::from_secs(i32::MAX as u64);
            let rounded = Duration::new(i32::MAX as u64 - 1, 1);
            for timeout in [largest, rounded] {
                let blocker = a.wait_notify(&notify);
                let event = Event::new(&ctx).unwrap();
                event.record(&a).unwrap();
                let waited = b.wait_event_timeout(&event, timeout);
                b.abort().await.unwrap();
                assert!(is_aborted(&waited.await), "{strategy:?} {timeout:?}");
                a.abort().await.unwrap();
                assert!(is_aborted(&blocker.await), "{strategy:?}");
            }

            let over = Duration::new(i32::MAX as u64, 1);
            let event = Event::new(&ctx).unwrap();
            let refused = b.wait_event_timeout(&event, over).await.unwrap_err();
            assert_eq!(
                invalid(&refused.error),
                ("Stream::wait_event_timeout", "timeout")
            );
            assert!(refused.value.is_some(), "the event handed back");

            // An event of another device: refused by the runtime (107003, as
            // `Stream::wait_event` is, which npu-stream's ops.rs pins), before anything is
            // queued: the event is handed back, nothing is reported to `synchronize`.
            let foreign = Event::new(&other).unwrap();
            foreign.record(&elsewhere).unwrap();
            let refused = b
                .wait_event_timeout(&foreign, Duration::from_secs(60))
                .await
                .unwrap_err();
            assert_eq!(
                refused.error.acl_code(),
                Some(AclCode(107003)),
                "{strategy:?}: {refused:?}"
            );
            assert!(refused.value.is_some(), "the event handed back");
            foreign.wait().await.unwrap();
            b.synchronize().await.unwrap();
        });
    }
}

/// Timed notify waits at their limits: `u32::MAX` s (and one rounded up to it) accepted and
/// discarded by an abort; one nanosecond above refused by name with the notify handed back.
#[test]
fn timed_notify_waits_at_their_limits() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let largest = Duration::from_secs(u32::MAX as u64);
            let rounded = Duration::new(u32::MAX as u64 - 1, 1);
            for timeout in [largest, rounded] {
                let waited = s.wait_notify_timeout(&notify, timeout);
                s.abort().await.unwrap();
                assert!(is_aborted(&waited.await), "{strategy:?} {timeout:?}");
            }
            let over = Duration::new(u32::MAX as u64, 1);
            let refused = s.wait_notify_timeout(&notify, over).await.unwrap_err();
            assert_eq!(
                invalid(&refused.error),
                ("Stream::wait_notify_timeout", "timeout")
            );
            assert!(refused.value.is_some(), "the notify handed back");
            s.synchronize().await.unwrap();
        });
    }
}

/// A timed event wait dropped while it waits keeps its event until the device gives up, then
/// lets it go: the event count returns to where it was, and the stream behind goes on.
///
/// Each strategy runs on a context of its own, dropped at the end with its streams: the
/// completion events a strategy pools per context number as many as were ever in flight at
/// once, which depends on the host's timing, so only with the pool gone does the count say
/// whether the user's event was let go (an event kept alive keeps its context, and so its
/// events, alive).
#[test]
fn a_dropped_timed_event_wait_lets_go_of_its_event_once_it_times_out() {
    let (_guard, primary, _) = exclusive(None);
    let live = || {
        sim::flush_releases();
        let stats = sim::device_stats(&primary.device()).unwrap();
        [stats.live_events, stats.live_streams]
    };
    for strategy in STRATEGIES {
        let before = live();
        let ctx = primary.device().create_context().unwrap();
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let blocker = a.wait_notify(&notify);
            let event = Event::new(&ctx).unwrap();
            event.record(&a).unwrap();
            drop(b.wait_event_timeout(&event, SHORTEST));
            drop(event);
            let behind = b
                .memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 6)
                .await
                .unwrap();
            assert_eq!(behind.to_vec_blocking().unwrap(), [6; 8]);
            a.abort().await.unwrap();
            assert!(is_aborted(&blocker.await), "{strategy:?}");
        });
        drop((a, b, notify, ctx));
        until_released("the dropped wait's event", || within(live(), before));
    }
}

/// `StreamPool::next` is round-robin shared by clones: many tasks on a multi-thread runtime,
/// each with its own clone, take a turn and queue a memset; a third are aborted mid-flight and
/// their clones dropped with them. The turn stays round-robin, every buffer is released and
/// every stream destroyed once the pool's last clone is gone.
#[test]
fn stream_pool_turns_survive_cancelled_tasks_and_dropped_clones() {
    let (_guard, ctx, _) = exclusive(None);
    let stats = || {
        sim::flush_releases();
        let stats = sim::device_stats(&ctx.device()).unwrap();
        [stats.live_streams, stats.live_allocations]
    };
    let before = stats();
    for strategy in STRATEGIES {
        let pool = StreamPool::with_builder(Stream::builder(&ctx).strategy(strategy), 3).unwrap();
        let tasks = 48;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut handles = Vec::new();
            for i in 0..tasks {
                let pool = pool.clone();
                let ctx = ctx.clone();
                handles.push(tokio::spawn(async move {
                    let s = pool.next();
                    drop(pool);
                    let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
                    let filled = s.memset(buffer, i as u8).await.unwrap();
                    filled.to_vec_blocking().unwrap() == vec![i as u8; 64]
                }));
            }
            for (i, handle) in handles.into_iter().enumerate() {
                if i % 3 == 0 {
                    handle.abort();
                    // Aborted before or after it took its turn: both are fine, but the turn
                    // then counts; it ran to its end or was dropped mid-memset.
                    let _ = tokio::time::timeout(HANG, handle).await.expect("hung");
                } else {
                    let ok = tokio::time::timeout(HANG, handle).await.expect("hung");
                    assert!(ok.unwrap(), "{strategy:?} task {i}");
                }
            }
        });
        drop(runtime);
        // Every task's clone is gone; the turn is still round-robin over the three.
        let next: Vec<Stream> = (0..4).map(|_| pool.next()).collect();
        assert!(!next[0].same(&next[1]) && !next[1].same(&next[2]) && !next[0].same(&next[2]));
        assert!(next[3].same(&next[0]), "{strategy:?}: round-robin");
        drop(next);
        for s in pool.streams() {
            run(s.synchronize()).unwrap();
        }
        drop(pool);
    }
    until_released("the pools' streams and buffers", || within(stats(), before));
}

/// A pool stream that faulted (in `FailureMode::Continue`, as stop mode would stop the whole
/// context) or was aborted keeps its place in the turn: the pool hands it out again, and it
/// runs new work like its siblings.
#[test]
fn a_faulted_or_aborted_pool_stream_keeps_its_turn_and_works_again() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let pool = StreamPool::with_builder(Stream::builder(&ctx).strategy(strategy), 3).unwrap();
        let order: Vec<Stream> = (0..3).map(|_| pool.next()).collect();
        let (faulted, aborted) = (&order[0], &order[1]);
        sim::fail_task(faulted, 1, AclCode(507015)).unwrap();
        let notify = Notify::new(&ctx).unwrap();
        run(async {
            let failing = faulted.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1);
            let behind = faulted.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 2);
            let orphan = aborted.wait_notify(&notify);
            aborted.abort().await.unwrap();
            assert!(is_aborted(&orphan.await));
            assert!(failing.await.is_err(), "{strategy:?}");
            assert_eq!(behind.await.unwrap().to_vec_blocking().unwrap(), [2; 8]);
            let reported = faulted.synchronize().await;
            assert!(
                reported.is_err(),
                "{strategy:?}: the fault is reported once"
            );
            for round in 0..2 {
                for (i, expected) in order.iter().enumerate() {
                    let s = pool.next();
                    assert!(s.same(expected), "{strategy:?}: round {round} turn {i}");
                    let value = (round * 3 + i) as u8;
                    let filled = s
                        .memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), value)
                        .await
                        .unwrap();
                    assert_eq!(filled.to_vec_blocking().unwrap(), [value; 8]);
                }
            }
        });
    }
}

/// Pool builders at their limits: a capacity of exactly one block serves that block and
/// refuses one byte more by name (it could never be served); a capacity of `usize::MAX`
/// refuses requests of `usize::MAX` elements by name; neither allocates anything for a
/// refused request.
#[test]
fn pool_builders_at_their_limits_serve_or_refuse_by_name() {
    let (_guard, ctx, _) = exclusive(None);
    let s = stream(&ctx, STRATEGIES[0]);
    let before = live_allocations(&ctx);
    run(async {
        let device = DevicePool::builder(&ctx).capacity(4096).build().unwrap();
        let one = device.alloc::<u8>(&s, 4096).await.unwrap();
        drop(one);
        let err = device.alloc::<u8>(&s, 4097).await.unwrap_err();
        assert_eq!(invalid(&err).0, "DevicePool::alloc");
        let err = device.try_alloc::<u8>(&s, 4097).unwrap_err();
        assert_eq!(invalid(&err).0, "DevicePool::try_alloc");

        let huge = DevicePool::builder(&ctx)
            .capacity(usize::MAX)
            .build()
            .unwrap();
        assert_eq!(huge.capacity(), Some(usize::MAX));
        let err = huge.alloc::<u64>(&s, usize::MAX).await.unwrap_err();
        assert_eq!(invalid(&err).0, "DevicePool::alloc");
        let err = huge.try_alloc::<u8>(&s, usize::MAX).unwrap_err();
        assert_eq!(invalid(&err).0, "DevicePool::try_alloc");
        assert_eq!(huge.stats().cache.allocated, 0);

        let pinned = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        drop(pinned.alloc::<u8>(4096).await.unwrap());
        let err = pinned.alloc::<u8>(4097).await.unwrap_err();
        assert_eq!(invalid(&err).0, "PinnedPool::alloc");
        let huge = PinnedPool::builder(&ctx)
            .capacity(usize::MAX)
            .build()
            .unwrap();
        let err = huge.alloc::<u64>(usize::MAX).await.unwrap_err();
        assert_eq!(invalid(&err).0, "PinnedPool::alloc");
        let err = huge.try_alloc::<u8>(usize::MAX).unwrap_err();
        assert_eq!(invalid(&err).0, "PinnedPool::try_alloc");
        let err = PinnedPool::builder(&ctx).capacity(0).build().unwrap_err();
        assert_eq!(invalid(&err), ("PinnedPoolBuilder::build", "capacity"));
        let err = DevicePool::builder(&ctx).capacity(0).build().unwrap_err();
        assert_eq!(invalid(&err), ("DevicePoolBuilder::build", "capacity"));
    });
    until_released("the pools' blocks", || live_allocations(&ctx) <= before);
}

// ---- The environment, each case in a child process of its own. ----

/// Runs this file's `environment_child` in a child process with `NPU_BACKEND` and
/// `NPU_SIM_CONFIG` as given (`None`: unset) and checks it printed `CHILD OK`.
fn in_child(case: &str, backend: Option<&std::ffi::OsStr>, config: Option<&std::ffi::OsStr>) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "environment_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, case)
        .env_remove("NPU_BACKEND")
        .env_remove("NPU_SIM_CONFIG")
        .env_remove("NPU_ACL_LIB")
        .stdout(std::process::Stdio::piped());
    if let Some(value) = backend {
        command.env("NPU_BACKEND", value);
    }
    if let Some(value) = config {
        command.env("NPU_SIM_CONFIG", value);
    }
    child_succeeded(command.spawn().unwrap(), HANG, case);
}

/// What a child checks: how the process-wide runtime (and so `Device::open`) must react.
fn check_case(case: &str) {
    let opened = std::panic::catch_unwind(|| Device::open(0).map(|_| ()));
    let opened = opened.unwrap_or_else(|_| panic!("{case}: opening a device panicked"));
    match case {
        // `NPU_BACKEND` that is not a backend: a typed error naming the variable.
        "backend-invalid" | "backend-huge" | "backend-non-utf8" => {
            let err = opened.expect_err(case);
            assert!(
                matches!(err, Error::Load(npu::LoadError::InvalidBackend(_))),
                "{case}: {err:?}"
            );
            assert!(err.to_string().contains("NPU_BACKEND"), "{case}: {err}");
        }
        // Empty and padded, mixed-case values are documented choices.
        "backend-empty" | "backend-padded" => {
            opened.unwrap_or_else(|e| panic!("{case}: {e}"));
            let expected = match case {
                "backend-empty" => npu::BackendChoice::Auto,
                _ => npu::BackendChoice::Sim,
            };
            assert_eq!(npu::BackendChoice::from_env().unwrap(), expected, "{case}");
        }
        // `NPU_SIM_CONFIG` that is not a configuration: every call fails, naming the variable.
        "config-empty"
        | "config-malformed"
        | "config-nested"
        | "config-huge-number"
        | "config-many-devices"
        | "config-non-utf8" => {
            let err = opened.expect_err(case);
            assert!(
                err.to_string().contains("NPU_SIM_CONFIG"),
                "{case}: the error names the variable: {err}"
            );
            // And again: the failure is kept, not a panic the second time.
            let again = Device::open(0).expect_err(case);
            assert!(again.to_string().contains("NPU_SIM_CONFIG"), "{case}");
        }
        // A valid but extreme configuration starts, and its limits are typed errors.
        "config-huge-memory" => {
            opened.unwrap_or_else(|e| panic!("{case}: {e}"));
            let ctx = Device::open(0).unwrap().primary_context().clone();
            let big = DeviceBuffer::<u8>::new(&ctx, 1 << 20).unwrap();
            drop(big);
        }
        other => panic!("unknown case {other}"),
    }
}

#[test]
fn environment_child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    check_case(&case);
    println!("CHILD OK");
}

/// `NPU_BACKEND` must parse into a choice or give `LoadError::InvalidBackend`: an unknown
/// name, a huge one, and bytes that are not UTF-8 (which `std::env::var` cannot return) are
/// refused; an empty value is `auto`, a padded mixed-case one its choice.
#[test]
fn npu_backend_values_are_a_choice_or_a_typed_error() {
    use std::os::unix::ffi::OsStrExt;
    let huge = "x".repeat(100_000);
    let cases: [(&str, &std::ffi::OsStr); 5] = [
        ("backend-invalid", "tpu".as_ref()),
        ("backend-huge", huge.as_ref()),
        ("backend-non-utf8", std::ffi::OsStr::from_bytes(b"si\xffm")),
        ("backend-empty", "".as_ref()),
        ("backend-padded", " SiM\t".as_ref()),
    ];
    for (case, value) in cases {
        in_child(case, Some(value), None);
    }
}

/// `NPU_SIM_CONFIG`: "an invalid value makes every call fail with 100000 and a message
/// naming the variable" (docs/simulator.md), for an empty value, malformed JSON, nesting far
/// past any parser's depth, numbers beyond `u64`, more devices than the simulator allows, and
/// bytes that are not UTF-8; a valid extreme one (`u64::MAX` bytes per device) starts.
#[test]
fn npu_sim_config_values_are_a_configuration_or_a_named_failure() {
    use std::os::unix::ffi::OsStrExt;
    let nested = format!("{}{}", "[".repeat(60_000), "]".repeat(60_000));
    let cases: [(&str, &std::ffi::OsStr); 7] = [
        ("config-empty", "".as_ref()),
        ("config-malformed", "{\"devices\": ".as_ref()),
        ("config-nested", nested.as_ref()),
        (
            "config-huge-number",
            "{\"devices\": 1e400, \"memory_per_device\": 99999999999999999999999}".as_ref(),
        ),
        ("config-many-devices", "{\"devices\": 4294967295}".as_ref()),
        (
            "config-non-utf8",
            std::ffi::OsStr::from_bytes(b"{\"devices\": 3, \"soc_name\": \"\xff\"}"),
        ),
        (
            "config-huge-memory",
            "{\"memory_per_device\": 18446744073709551615}".as_ref(),
        ),
    ];
    for (case, value) in cases {
        in_child(case, Some("sim".as_ref()), Some(value));
    }
}
