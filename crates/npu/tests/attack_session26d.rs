//! The twenty-sixth session's fourth helper: what docs/observability.md promises a subscriber
//! (every operation's `npu_op` span and fields, nothing at WARN or ERROR when all goes well, on
//! any thread), the reactor's counters, and the test-harness story (paused time across long
//! device waits, faults armed in one test reaching no other).
//!
//! A file of its own: it installs a process-wide subscriber, and its tests take turns.

mod common;

use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, Notify, Strategy, ValueCondition, ValueWord};

/// This file's tests take turns: they read one process-wide record.
fn turn() -> (MutexGuard<'static, ()>, Context, Context) {
    record_op_spans();
    let turn = exclusive(None);
    take();
    turn
}

/// What was recorded since the last look: the spans that closed meanwhile, in the order they
/// were made, and the events logged at WARN or ERROR.
fn take() -> OpSpans {
    static LAST: Mutex<Mark> = Mutex::new(Mark::ZERO);
    let mut last = LAST.lock().unwrap();
    let mut seen = since(*last);
    *last = mark();
    seen.spans.retain(|op| op.closed);
    seen
}

fn messages(op: &OpSpan, message: &str) -> usize {
    let is = |f: &Fields| f.get("message").map(String::as_str) == Some(message);
    op.events.iter().filter(|(.., f)| is(f)).count()
}

// Promise (docs/observability.md, "The `npu_op` span"): every stream operation opens one
// `npu_op` span (debug, target `npu_stream::stream`) with `op` the ACL function of the table,
// `stream` the stream's id, `device`, `bytes` as the table says, `direction` for copies and
// `kernel` for launches; each awaited one logs one `completed` (debug, `npu_stream::op`) inside
// it. And (the happy path) nothing at WARN or ERROR on any thread meanwhile, streams and pools
// dropped too.
#[test]
fn every_documented_operation_is_one_npu_op_span_with_its_documented_fields() {
    let (_turn, ctx, _) = turn();
    let scale = {
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
        module.function("scale_f32").unwrap()
    };
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let other = stream(&ctx, strategy);
        let pool = DevicePool::new(&ctx).unwrap();
        let runtime_pool = pool.backend() == npu::memory::DevicePoolBackend::RuntimePool;
        take();
        let (id, device) = (s.id().to_string(), ctx.device_id().to_string());
        run(async {
            let host = PinnedBuffer::from_slice(&ctx, &[1.0f32; 64]).unwrap();
            let dev = DeviceBuffer::<f32>::new(&ctx, 64).unwrap();
            let (host, dev) = s.copy_h2d(host, dev).await.unwrap();
            let (dev, host) = s.copy_d2h(dev, host).await.unwrap();
            let (dev, dev2) = s
                .copy_d2d(dev, DeviceBuffer::<f32>::new(&ctx, 64).unwrap())
                .await
                .unwrap();
            // Refused by the simulator (an EP host has no asynchronous host-to-host copy):
            // its span is there all the same, with its direction and error.
            let refused = s
                .copy_h2h(host, PinnedBuffer::<f32>::new(&ctx, 64).unwrap())
                .await
                .unwrap_err();
            assert_eq!(refused.error.acl_code(), Some(AclCode(207000)));
            let (host, _) = refused.value.unwrap();
            let shape = Copy2d {
                width: 4,
                height: 8,
                src_pitch: 8,
                dst_pitch: 8,
            };
            let (_, dev) = s.copy_2d_h2d(host, dev, shape).await.unwrap();
            let dev = s.memset(dev, 0).await.unwrap();
            // SAFETY: scale_f32(float *x, uint64_t n, float alpha); x holds 64.
            let launch = unsafe { s.launch(&scale, 2, (dev, 64u64, 2.0f32)) };
            launch.await.unwrap();
            let event = Event::new(&ctx).unwrap();
            event.record(&other).unwrap();
            s.wait_event(&event).unwrap();
            s.wait_event_timeout(&event, Duration::from_secs(60))
                .await
                .unwrap();
            let notify = Notify::new(&ctx).unwrap();
            let recorded = other.record_notify(&notify);
            s.wait_notify(&notify).await.unwrap();
            recorded.await.unwrap();
            let recorded = other.record_notify(&notify);
            s.wait_notify_timeout(&notify, Duration::from_secs(60))
                .await
                .unwrap();
            recorded.await.unwrap();
            let word = ValueWord::new(&ctx, 0).unwrap();
            let word = s.write_value(word, 7).await.unwrap();
            s.wait_value(word, 7, ValueCondition::Equal).await.unwrap();
            let block = pool.alloc::<u8>(&s, 1000).await.unwrap();
            drop(block);
            s.synchronize().await.unwrap();
            other.synchronize().await.unwrap();
            drop(dev2);
        });
        drop((s, other, pool));
        sim::flush_releases();
        let seen = take();
        let ours: Vec<&OpSpan> = seen
            .spans
            .iter()
            .filter(|op| op.fields["stream"] == id)
            .collect();
        let got: Vec<_> = ours
            .iter()
            .map(|op| {
                let f = &op.fields;
                let detail = f.get("direction").or(f.get("kernel")).cloned();
                (
                    f["op"].as_str(),
                    detail.unwrap_or_default(),
                    f["bytes"].as_str(),
                )
            })
            .collect();
        let block = DevicePool::size_class(1000).unwrap().to_string();
        let expected: Vec<(&str, String, &str)> = vec![
            ("aclrtMemcpyAsync", "h2d".into(), "256"),
            ("aclrtMemcpyAsync", "d2h".into(), "256"),
            ("aclrtMemcpyAsync", "d2d".into(), "256"),
            ("aclrtMemcpyAsync", "h2h".into(), "256"),
            ("aclrtMemcpy2dAsync", "h2d".into(), "128"),
            ("aclrtMemsetAsync", String::new(), "256"),
            ("aclrtLaunchKernelWithHostArgs", "scale_f32".into(), "0"),
            ("aclrtStreamWaitEvent", String::new(), "0"),
            ("aclrtStreamWaitEventWithTimeout", String::new(), "0"),
            ("aclrtWaitAndResetNotify", String::new(), "0"),
            ("aclrtWaitAndResetNotify", String::new(), "0"),
            ("aclrtValueWrite", String::new(), "8"),
            ("aclrtValueWait", String::new(), "8"),
            ("aclrtMemPoolMallocAsync", String::new(), block.as_str()),
            ("aclrtSynchronizeStream", String::new(), "0"),
        ];
        let got_owned: Vec<(&str, String, &str)> = got;
        // The pool's stream-ordered allocation is made only on the runtime-pool backend.
        let expected: Vec<_> = if runtime_pool {
            expected
        } else {
            expected
                .into_iter()
                .filter(|(op, ..)| *op != "aclrtMemPoolMallocAsync")
                .collect()
        };
        assert_eq!(got_owned, expected, "{strategy:?}");
        for op in &ours {
            assert_eq!(op.level, tracing::Level::DEBUG, "{op:?}");
            assert_eq!(op.target, "npu_stream::stream", "{op:?}");
            assert_eq!(op.fields["device"], device, "{op:?}");
            let refused = op.fields.get("direction").map(String::as_str) == Some("h2h");
            assert_eq!(op.fields.contains_key("error"), refused, "{op:?}");
            // The wait on an event is not a future: nothing awaits it, nothing says it
            // completed.
            let awaited = usize::from(op.fields["op"] != "aclrtStreamWaitEvent");
            let (completed, failed) = if refused { (0, 1) } else { (awaited, 0) };
            assert_eq!(messages(op, "completed"), completed, "{strategy:?}: {op:?}");
            assert_eq!(messages(op, "failed"), failed, "{op:?}");
            // Its own events; others logged inside it (the simulator's, say) carry it too.
            let own = |f: &Fields| {
                matches!(
                    f.get("message").map(String::as_str),
                    Some("completed" | "failed")
                )
            };
            for (level, target, _) in op.events.iter().filter(|(.., f)| own(f)) {
                assert_eq!(*level, tracing::Level::DEBUG, "{op:?}");
                assert_eq!(target, "npu_stream::op", "{op:?}");
            }
        }
        // The other stream's record of the event and of the notifies.
        let theirs: Vec<_> = seen
            .spans
            .iter()
            .filter(|op| op.fields["stream"] != id)
            .map(|op| op.fields["op"].as_str())
            .collect();
        for op in ["aclrtRecordEvent", "aclrtRecordNotify"] {
            assert!(theirs.contains(&op), "{strategy:?}: {op} in {theirs:?}");
        }
        assert!(seen.loud.is_empty(), "{strategy:?}: {:?}", seen.loud);
    }
}

// Promise: a failed operation's span records `error` ending with where the fault happened
// (", at task T of stream S on device D (kind)"), and its poll logs one `failed` (debug) with
// an `error` field; nothing is logged at WARN for a fault its operation reports.
#[test]
fn a_failed_operation_says_where_in_its_span_and_its_failed_event() {
    let (_turn, ctx, _) = turn();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        take();
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let failed = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
        let err = failed.unwrap_err().error;
        run(s.synchronize()).unwrap_err();
        let seen = take();
        let op = seen
            .spans
            .iter()
            .find(|op| op.fields["op"] == "aclrtMemsetAsync")
            .expect("the memset's span");
        let recorded = &op.fields["error"];
        assert_eq!(recorded, &err.to_string(), "{strategy:?}");
        let place = format!(" of stream {} on device {}", s.id(), ctx.device_id());
        assert!(
            recorded.contains(", at task ") && recorded.contains(&place),
            "{strategy:?}: {recorded}"
        );
        assert_eq!(messages(op, "failed"), 1, "{strategy:?}: {op:?}");
        assert_eq!(messages(op, "completed"), 0, "{strategy:?}: {op:?}");
        let event = op.events.iter().find(|(.., f)| f["message"] == "failed");
        let (level, _, fields) = event.unwrap();
        assert_eq!(*level, tracing::Level::DEBUG);
        assert_eq!(fields["error"], err.to_string());
        assert!(seen.loud.is_empty(), "{strategy:?}: {:?}", seen.loud);
    }
}

// Promise (`ReactorStats`): the counters never go down, `completed <= registered` in every
// snapshot, and an operation the reactor completed is counted before its task is woken
// ("counted first, so that a task woken by its completion sees it"), read while other threads
// submit and complete operations on other streams.
#[test]
fn reactor_stats_are_monotone_and_count_a_completion_before_its_waker_runs() {
    let (_turn, ctx, _) = turn();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut last = npu::stream::reactor_stats();
            let mut readings = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || readings < 100 {
                let now = npu::stream::reactor_stats();
                assert!(now.completed <= now.registered, "{now:?}");
                assert!(now.registered >= last.registered, "{last:?} then {now:?}");
                assert!(now.completed >= last.completed, "{last:?} then {now:?}");
                assert!(now.queries >= last.queries, "{last:?} then {now:?}");
                assert!(now.parks >= last.parks, "{last:?} then {now:?}");
                assert!(
                    now.fault_notices >= last.fault_notices,
                    "{last:?} then {now:?}"
                );
                last = now;
                readings += 1;
            }
            readings
        })
    };
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                let s = stream(&ctx, Strategy::EventPoll);
                run(async {
                    let mut dev = DeviceBuffer::<u8>::new(&ctx, 4096).unwrap();
                    for i in 0..300 {
                        let before = npu::stream::reactor_stats();
                        dev = s.memset(dev, i as u8).await.unwrap();
                        let after = npu::stream::reactor_stats();
                        assert!(after.registered > before.registered, "{before:?} {after:?}");
                        // Its own completion at least: counted before its waker ran.
                        assert!(after.completed > before.completed, "{before:?} {after:?}");
                    }
                });
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() >= 100);
    let stats = npu::stream::reactor_stats();
    assert!(stats.polls_per_completion() >= 1.0, "{stats:?}");
    assert!(take().loud.is_empty());
}

// Promise (test harness, docs/observability.md "Tests in paused time"): a paused clock stands
// still for as long as awaited device work is pending, also across the blocking waiter's
// hand-overs every 100 ms: the device is released only after several of them (a real-time
// pause on a plain thread, which gives the hand-overs a chance to happen; the assertions hold
// whatever it measures), and a one-hour timeout around an `Op`, an `Event::wait` and a
// `Completion::wait` never fires, nor does paused time move.
#[test]
fn a_paused_clock_stands_still_across_the_waiters_hand_overs() {
    let (_turn, ctx, _) = turn();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        paused_runtime().block_on(async {
            let held = sim::hold(&ctx.device()).unwrap();
            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            let completion = op.completion().clone();
            let releaser = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(350));
                drop(held);
            });
            let start = tokio::time::Instant::now();
            let hour = Duration::from_secs(3600);
            let all = async {
                let (a, b, c) = tokio::join!(op, event.wait(), completion.wait());
                (a.map(drop).map_err(|e| e.error), b, c)
            };
            let (a, b, c) = tokio::time::timeout(hour, pin!(all))
                .await
                .unwrap_or_else(|_| {
                    panic!("{strategy:?}: the hour passed while the device worked")
                });
            a.unwrap();
            b.unwrap();
            c.unwrap();
            assert_eq!(
                start.elapsed(),
                Duration::ZERO,
                "{strategy:?}: paused time moved"
            );
            releaser.join().unwrap();
        });
    }
    assert!(take().loud.is_empty());
}

// Promise (`npu::sim::fail_task`: "the nth device task queued on the stream from now on"): a
// fault armed on a stream that a test drops before it strikes stays with that stream, so it
// never reaches a later test's stream, however the simulator reuses its handles.
#[test]
fn a_fault_armed_on_a_dropped_stream_reaches_no_later_stream() {
    let (_turn, ctx, _) = turn();
    for strategy in STRATEGIES {
        let armed = stream(&ctx, strategy);
        let raw = armed.as_raw() as usize;
        sim::fail_task(&armed, 2, AclCode(507015)).unwrap();
        run(armed.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1)).unwrap();
        drop(armed);
        let mut reused = false;
        for _ in 0..64 {
            sim::flush_releases();
            let s = stream(&ctx, strategy);
            reused |= s.as_raw() as usize == raw;
            for _ in 0..3 {
                let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 2));
                assert!(
                    buffer.is_ok(),
                    "{strategy:?}: a later stream took the fault"
                );
            }
        }
        // Not a requirement (the simulator may never reuse a handle), only what was tried.
        let _ = reused;
    }
}
