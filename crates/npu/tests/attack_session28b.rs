//! The twenty-eighth session's second helper: the Tokio test-harness story and teardown, as a
//! user's tests and services lean on them. Tokio runtimes of both flavours made and ended
//! (dropped, shut down in the background, shut down with a zero timeout, dropped inside
//! `block_on`'s return) in sequence and in parallel with device work in flight; work started on
//! one runtime and awaited on another; `tokio_test::task::spawn` polling npu futures by hand;
//! `tokio::time::advance` with device work in flight; `npu_op` spans under cancellation and
//! faults; and handles dropped in every order while the device holds their work.
//!
//! Each test is named for the promise it attacks and asserts it, under all three strategies
//! where a stream is involved. The file installs a process-wide subscriber before any test
//! touches a device, and its tests take turns (the hold gate and the live counters are the
//! simulator's, process-wide).

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;
use npu::{Op, Stream};

/// This file's tests take turns: the record, the hold gate and the live counters are
/// process-wide.
fn turn() -> (MutexGuard<'static, ()>, Context, Context) {
    record_op_spans();
    exclusive(None)
}

/// What the simulator holds for device 1 and the host once everything earlier tests dropped
/// has been released: the baseline [`within`] compares with.
fn baseline(ctx: &Context) -> LiveObjects {
    live_objects(ctx)
}

/// Waits (bounded) until the simulator holds no more than `baseline` again.
fn nothing_left(ctx: &Context, baseline: LiveObjects, what: &str) {
    until_released(what, || within(live_objects(ctx), baseline));
}

/// A memset of `len` bytes to `value` on `stream`, of a buffer of its own.
fn memset(stream: &Stream, len: usize, value: u8) -> Op<DeviceBuffer<u8>> {
    let buffer = DeviceBuffer::new(stream.context(), len).unwrap();
    stream.memset(buffer, value)
}

/// Polls `future` once with the task's waker, as `futures::poll!` does.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// How a test ends a Tokio runtime with npu work in flight.
#[derive(Debug, Clone, Copy)]
enum End {
    Drop,
    Background,
    ZeroTimeout,
}

const ENDS: [End; 3] = [End::Drop, End::Background, End::ZeroTimeout];

fn end(runtime: tokio::runtime::Runtime, how: End) {
    match how {
        End::Drop => drop(runtime),
        End::Background => runtime.shutdown_background(),
        End::ZeroTimeout => runtime.shutdown_timeout(Duration::ZERO),
    }
}

fn tokio_runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.worker_threads(2).enable_all().build().unwrap()
}

// Promise (docs/cancellation.md, rule 5, and "a dropped Tokio runtime with work in flight
// neither hangs nor leaks device memory"): Tokio runtimes of both flavours, made and ended in
// sequence on four threads at once, each ended (dropped, shut down in the background, shut
// down with a zero timeout) while its tasks await memsets the held device never starts and a
// `block_on` returned with its operation's future dropped inside it: every end returns with
// the device still held, and once it is released every buffer comes back and the device
// serves a new runtime.
#[test]
fn tokio_runtimes_ended_in_parallel_with_held_work_neither_hang_nor_leak() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    let held = sim::hold(&ctx.device()).unwrap();
    let pending = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (ctx, pending) = (&ctx, &pending);
            scope.spawn(move || {
                for round in 0..6 {
                    let strategy = STRATEGIES[(thread + round) % 3];
                    let how = ENDS[round % 3];
                    let runtime = tokio_runtime(round % 2 == 1);
                    let s = stream(ctx, strategy);
                    for task in 0..3 {
                        let op = memset(&s, 256, task);
                        pending.lock().unwrap().push(op.completion().clone());
                        runtime.spawn(async move { op.await.map(drop) });
                    }
                    // The future is dropped inside the `block_on` that returned: its memset
                    // stays queued on the held device.
                    let polled = runtime.block_on(async {
                        let mut op = pin!(memset(&s, 64, 9));
                        pending.lock().unwrap().push(op.completion().clone());
                        poll_once(&mut op.as_mut()).await.is_pending()
                    });
                    assert!(polled, "the device is held");
                    let what = format!("ending runtime {round} of thread {thread} by {how:?}");
                    watchdog(&what, || end(runtime, how));
                }
            });
        }
    });
    let pending = std::mem::take(&mut *pending.lock().unwrap());
    assert!(
        pending.iter().all(|done| !done.is_complete()),
        "the device is still held"
    );
    held.release().unwrap();
    all_completed(&pending);
    nothing_left(&ctx, before, "the ended runtimes' memsets");
    let s = stream(&ctx, Strategy::EventPoll);
    let filled = run(memset(&s, 16, 4)).unwrap();
    assert_eq!(filled.to_vec_blocking().unwrap(), [4; 16]);
}

// Promise (the harness story; rules 2 and 7): an operation, an event wait and a completion
// wait first polled by a task of one Tokio runtime (of either flavour), that runtime then shut
// down in the background, are awaited by a task of another runtime (of either flavour) and
// resolve there once the device runs them, with their values whole.
#[test]
fn work_started_on_one_runtime_is_awaited_on_another_after_the_first_is_gone() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    for (i, strategy) in STRATEGIES.into_iter().enumerate() {
        for (first, second) in [(false, true), (true, false), (true, true), (false, false)] {
            let held = sim::hold(&ctx.device()).unwrap();
            let s = stream(&ctx, strategy);
            let event = Event::new(&ctx).unwrap();
            let value = 10 + i as u8;
            let (op, event_wait, completion_wait) = {
                let runtime = tokio_runtime(first);
                let (s, event) = (s.clone(), event.clone());
                let started = runtime.block_on(async move {
                    let task = tokio::spawn(async move {
                        let mut op = memset(&s, 128, value);
                        event.record(&s).unwrap();
                        let mut event_wait = event.wait();
                        let mut completion_wait = op.completion().wait();
                        assert!(poll_once(&mut op).await.is_pending());
                        assert!(poll_once(&mut event_wait).await.is_pending());
                        assert!(poll_once(&mut completion_wait).await.is_pending());
                        (op, event_wait, completion_wait)
                    });
                    task.await.unwrap()
                });
                watchdog("shutting the first runtime down", || {
                    runtime.shutdown_background()
                });
                started
            };
            let runtime = tokio_runtime(second);
            let awaited = runtime.spawn(async move {
                let completion = completion_wait.await;
                let event = event_wait.await;
                (op.await.map_err(|e| e.error), event, completion)
            });
            held.release().unwrap();
            // A current-thread runtime runs its tasks only inside its own `block_on`.
            let (op, event, completion) = runtime.block_on(async {
                let awaited = tokio::time::timeout(HANG, awaited).await;
                awaited.expect("the moved work hung").unwrap()
            });
            assert_eq!(op.unwrap().to_vec_blocking().unwrap(), [value; 128]);
            event.unwrap();
            completion.unwrap();
            end(runtime, End::Drop);
        }
    }
    nothing_left(&ctx, before, "the moved operations");
}

// Promise (the harness story with `tokio_test::task::spawn`; rule 7, and "polling after it
// resolved yields an error rather than a panic"): an operation, an event wait and a completion
// wait polled by hand outside any runtime are pending on the held device, wake their task once
// it runs, resolve on the next poll, and, polled again, the operation says it resolved already
// (its value told once) while the waits tell their result again; one polled once and dropped,
// and one never polled, lose nothing.
#[test]
fn hand_polled_npu_futures_wake_resolve_once_and_lose_nothing_when_dropped() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let mut op = tokio_test::task::spawn(memset(&s, 64, 7));
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let mut event_wait = tokio_test::task::spawn(event.wait());
        let mut completion_wait = tokio_test::task::spawn(op.completion().wait());
        let mut dropped = tokio_test::task::spawn(memset(&s, 64, 8));
        let never_polled = memset(&s, 64, 9);
        assert!(op.poll().is_pending());
        assert!(event_wait.poll().is_pending());
        assert!(completion_wait.poll().is_pending());
        assert!(dropped.poll().is_pending());
        drop(dropped);
        drop(never_polled);
        assert!(!op.is_woken() && !event_wait.is_woken() && !completion_wait.is_woken());
        held.release().unwrap();
        until_released("every hand-polled future woken", || {
            op.is_woken() && event_wait.is_woken() && completion_wait.is_woken()
        });
        let Poll::Ready(Ok(buffer)) = op.poll() else {
            panic!("the woken operation resolves")
        };
        assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 64]);
        let Poll::Ready(Err(again)) = op.poll() else {
            panic!("polled again, it resolves at once")
        };
        assert!(again.value.is_none(), "the value was told once");
        assert_eq!(invalid(&again.error), ("Op::poll", "self"));
        for _ in 0..2 {
            assert!(matches!(event_wait.poll(), Poll::Ready(Ok(()))));
            assert!(matches!(completion_wait.poll(), Poll::Ready(Ok(()))));
        }
    }
    nothing_left(&ctx, before, "the hand-polled futures");
}

// Promise (docs/observability.md, "Tests in paused time"): with device work in flight under a
// paused clock, the clock moves only when the test moves it: `tokio::time::advance` while an
// awaited operation is pending moves it by exactly that much (no hang, no panic), the timers it
// passes fire (a `timeout` the test advanced past ends the wait, which loses nothing), and an
// operation awaited afterwards still sees the clock stand still until the device is done.
#[test]
fn advancing_a_paused_clock_over_pending_device_work_moves_it_by_exactly_that_much() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let device = ctx.device();
        let outcome = watchdog("the paused runtime", || {
            paused_runtime().block_on(async {
                let start = tokio::time::Instant::now();
                let hour = Duration::from_secs(3600);
                let mut timed = pin!(tokio::time::timeout(hour, memset(&s, 64, 1)));
                assert!(poll_once(&mut timed.as_mut()).await.is_pending());
                tokio::time::advance(hour / 2).await;
                assert!(
                    poll_once(&mut timed.as_mut()).await.is_pending(),
                    "half an hour in"
                );
                tokio::time::advance(hour).await;
                let elapsed = timed.await;
                assert!(elapsed.is_err(), "the test advanced past the timeout");
                let advanced = start.elapsed();
                // The held device is released by a blocking task: it runs only while the
                // clock is kept, so the timer raced against the operation must not fire.
                let release = tokio::task::spawn_blocking(move || held.release());
                let awaited = tokio::time::timeout(hour, memset(&s, 64, 2)).await;
                release.await.unwrap().unwrap();
                drop(device);
                (
                    advanced,
                    awaited.map(|op| op.map(|b| b.to_vec_blocking())),
                    start.elapsed(),
                )
            })
        });
        let (advanced, awaited, total) = outcome;
        assert_eq!(advanced, Duration::from_secs(5400), "moved only by advance");
        let filled = awaited.expect("the clock stood still").unwrap().unwrap();
        assert_eq!(filled, [2; 64]);
        assert_eq!(
            total, advanced,
            "the clock stood still while the device worked"
        );
    }
    nothing_left(&ctx, before, "the timed-out operation");
}

/// The spans made since `from`: their `op` field, their messages and whether they closed.
fn spans_since(from: Mark) -> Vec<(String, Vec<String>, bool)> {
    let op = |span: &OpSpan| span.fields.get("op").cloned().unwrap_or_default();
    let spans = since(from).spans;
    spans
        .iter()
        .map(|s| (op(s), s.messages(), s.closed))
        .collect()
}

// Promise (docs/observability.md, "Events in the span"): each operation's span gets at most
// one `completed` or `failed`, from the poll that resolves its future: one for each awaited
// operation (a `failed` for a faulted one), none for one whose future was dropped before it
// resolved (pending, or never polled, faulted or not), also when its future lost a `select!`
// and was awaited later; and every span closes once its future is gone.
#[test]
fn each_operation_logs_one_outcome_only_if_awaited_and_every_span_closes() {
    let (_turn, _d0, ctx) = turn();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let from = mark();
        let held = sim::hold(&ctx.device()).unwrap();
        // Tasks 1 to 6 of the stream, in order; task 4 faults.
        let awaited = memset(&s, 64, 1);
        let mut polled_then_dropped = memset(&s, 64, 2);
        let never_polled = memset(&s, 64, 3);
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let faulted_dropped = memset(&s, 64, 4);
        let mut select_loser = memset(&s, 64, 5);
        let faulted_awaited = {
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            memset(&s, 64, 6)
        };
        assert!(polled_once(pin!(&mut polled_then_dropped)).is_pending());
        drop(polled_then_dropped);
        drop(never_polled);
        drop(faulted_dropped);
        let outcomes = run(async {
            let lost = tokio::select! {
                biased;
                _ = &mut select_loser => false,
                _ = std::future::ready(()) => true,
            };
            assert!(lost, "the held memset loses");
            held.release().unwrap();
            let awaited = awaited.await.map(drop).map_err(|e| e.error);
            let loser = select_loser.await.map(drop).map_err(|e| e.error);
            let faulted = faulted_awaited.await.map(drop).map_err(|e| e.error);
            (awaited, loser, faulted)
        });
        outcomes.0.unwrap();
        outcomes.1.unwrap();
        let fault = outcomes.2.unwrap_err();
        assert_eq!(fault.acl_code(), Some(AclCode(507015)), "{fault}");
        // The dropped faulted memset's failure is the stream's to report once: consumed here.
        let reported = run(s.synchronize()).unwrap_err().error;
        assert_eq!(reported.acl_code(), Some(AclCode(507015)), "{reported}");
        sim::flush_releases();
        let want: [&[&str]; 6] = [&["completed"], &[], &[], &[], &["completed"], &["failed"]];
        assert_outcomes(from, "aclrtMemsetAsync", &want, strategy);
        // A copy refused before submission (lengths differ) resolves with one `failed`; a
        // pool's stream-ordered allocation awaited logs one `completed`, and one whose
        // `alloc` future was dropped while the held device queued it logs nothing, its span
        // closing once the pool is done with it.
        let from = mark();
        let pool = DevicePool::builder(&ctx)
            .backend(DevicePoolBackend::RuntimePool)
            .capacity(1 << 20)
            .build()
            .unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        {
            let mut dropped_alloc = pin!(pool.alloc::<u8>(&s, 4096));
            assert!(polled_once(dropped_alloc.as_mut()).is_pending());
        }
        held.release().unwrap();
        let (refused, allocated) = run(async {
            let src = PinnedBuffer::<u8>::new(&ctx, 16).unwrap();
            let dst = DeviceBuffer::<u8>::new(&ctx, 32).unwrap();
            let refused = s.copy_h2d(src, dst).await.map(drop);
            (refused, pool.alloc::<u8>(&s, 8192).await.map(drop))
        });
        assert!(refused.is_err(), "lengths differ");
        allocated.unwrap();
        drop(pool);
        until_released("the pool's spans closed", || {
            spans_since(from).iter().all(|(.., closed)| *closed)
        });
        assert_outcomes(from, "aclrtMemcpyAsync", &[&["failed"]], strategy);
        assert_outcomes(
            from,
            "aclrtMemPoolMallocAsync",
            &[&[], &["completed"]],
            strategy,
        );
    }
}

/// Checks the spans of `op` made since `from`: as many as `want`, each closed, with the
/// outcomes (`completed`, `failed`) `want` lists for it, in the order they were made.
fn assert_outcomes(from: Mark, op: &str, want: &[&[&str]], strategy: Strategy) {
    let made = spans_since(from);
    let of_op: Vec<_> = made.iter().filter(|(name, ..)| name == op).collect();
    assert_eq!(of_op.len(), want.len(), "{strategy:?}: {op}: {made:?}");
    for ((_, messages, closed), want) in of_op.iter().zip(want) {
        let outcomes: Vec<_> = messages
            .iter()
            .filter(|m| *m == "completed" || *m == "failed")
            .collect();
        assert_eq!(&outcomes, want, "{strategy:?}: {op}: {made:?}");
        assert!(
            *closed,
            "{strategy:?}: a span outlived its future: {made:?}"
        );
    }
}

/// Handles a teardown drops, in the order a case names.
struct Handles {
    device: Option<Device>,
    ctx: Option<Context>,
    stream: Option<Stream>,
    event: Option<Event>,
    /// Shared with a copy whose future was dropped: the copy's clone keeps it.
    buffer: Option<Arc<DeviceBuffer<u8>>>,
    pool: Option<DevicePool>,
}

impl Handles {
    /// Device 1's handles, with work of every kind queued on it once held (the returned
    /// [`sim::Hold`]): a pooled block's memset (of a pool on `backend`), a copy from a shared
    /// buffer and an event record, their futures dropped.
    fn with_held_work(strategy: Strategy, backend: DevicePoolBackend) -> (Handles, sim::Hold) {
        let device = Device::open(1).unwrap();
        let ctx = device.primary_context().clone();
        let s = stream(&ctx, strategy);
        let pool = DevicePool::builder(&ctx).backend(backend).capacity(1 << 16);
        let pool = pool.build().unwrap();
        // Reserved first: a new stream-ordered block is awaited on the stream.
        run(pool.reserve(&s, 1, 64)).unwrap();
        let held = sim::hold(&device).unwrap();
        let block = pool
            .try_alloc::<u8>(&s, 64)
            .unwrap()
            .expect("a reserved block");
        drop(s.memset(block, 3));
        let buffer = Arc::new(DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
        let pinned = PinnedBuffer::<u8>::new(&ctx, 64).unwrap();
        drop(s.copy_d2h(buffer.clone(), pinned));
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let handles = Handles {
            device: Some(device),
            ctx: Some(ctx),
            stream: Some(s),
            event: Some(event),
            buffer: Some(buffer),
            pool: Some(pool),
        };
        (handles, held)
    }

    /// Drops handle `which` (an index into the fields, in their order); the shared buffer on
    /// another thread.
    fn drop_one(&mut self, which: usize) {
        match which {
            0 => drop(self.device.take()),
            1 => drop(self.ctx.take()),
            2 => drop(self.stream.take()),
            3 => drop(self.event.take()),
            4 => {
                let buffer = self.buffer.take();
                std::thread::spawn(move || drop(buffer)).join().unwrap();
            }
            _ => drop(self.pool.take()),
        }
    }
}

// Promise (docs/cancellation.md, rules 2, 3 and 5): handles dropped in every order while the
// device holds their work (the device and context handles first, the stream before the
// buffer its copy reads, the buffer on another thread, a pool before its block's memset)
// never wait for the device; once it is released, every allocation, event and stream is gone,
// and the device serves a stream made again.
#[test]
fn handles_dropped_in_every_order_under_held_work_never_wait_and_leave_nothing() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    let orders: [[usize; 6]; 4] = [
        [0, 1, 2, 3, 4, 5],
        [2, 0, 1, 5, 3, 4],
        [4, 5, 3, 2, 1, 0],
        [5, 4, 2, 3, 0, 1],
    ];
    let backends = [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];
    for (strategy, backend) in STRATEGIES.into_iter().zip(backends.into_iter().cycle()) {
        for (round, order) in orders.iter().enumerate() {
            let (mut handles, held) = Handles::with_held_work(strategy, backend);
            watchdog(&format!("{strategy:?}: drop order {round}"), || {
                for &which in order {
                    handles.drop_one(which);
                }
            });
            held.release().unwrap();
            nothing_left(&ctx, before, &format!("{strategy:?}: drop order {round}"));
        }
    }
    let s = stream(&ctx, Strategy::CallbackThread);
    assert_eq!(
        run(memset(&s, 8, 5)).unwrap().to_vec_blocking().unwrap(),
        [5; 8]
    );
}

// Promise (docs/observability.md, "Tests in paused time": the keeper "runs on the runtime's own
// blocking pool"): with more futures awaiting the held device than the paused runtime has
// blocking threads (twenty on two), every one keeps the clock with a blocking task of its
// own, and a blocking task of the test's queued behind them (the one that releases the
// device) still runs: the keepers hand on in slices, at the back of the pool's queue, so
// no timeout fires and every memset completes; a paused runtime dropped with seven hundred
// keepers on the default pool returns too.
#[test]
fn a_blocking_task_queued_behind_more_keepers_than_blocking_threads_still_runs() {
    let (_turn, _d0, ctx) = turn();
    let before = baseline(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .max_blocking_threads(2)
            .build()
            .unwrap();
        let (released, in_time) = watchdog("twenty keepers on two threads", || {
            runtime.block_on(async {
                let hour = Duration::from_secs(3600);
                let tasks: Vec<_> = (0..20)
                    .map(|i| tokio::spawn(tokio::time::timeout(hour, memset(&s, 64, i))))
                    .collect();
                // Every task's first poll starts its keeper before the release is queued.
                tokio::task::yield_now().await;
                let released = tokio::task::spawn_blocking(move || held.release());
                let released = released.await.unwrap();
                let mut in_time = 0;
                for (i, task) in tasks.into_iter().enumerate() {
                    let filled = task.await.unwrap().expect("the clock stood still").unwrap();
                    assert_eq!(filled.to_vec_blocking().unwrap(), [i as u8; 64]);
                    in_time += 1;
                }
                (released, in_time)
            })
        });
        released.unwrap();
        assert_eq!(in_time, 20);
    }
    let s = stream(&ctx, Strategy::EventPoll);
    let held = sim::hold(&ctx.device()).unwrap();
    let runtime = paused_runtime();
    let pending: Vec<_> = runtime.block_on(async {
        let hour = Duration::from_secs(3600);
        let pending = (0..700).map(|i| {
            let op = memset(&s, 64, i as u8);
            let done = op.completion().clone();
            tokio::spawn(tokio::time::timeout(hour, op));
            done
        });
        let pending = pending.collect();
        tokio::task::yield_now().await;
        pending
    });
    watchdog("dropping seven hundred keepers", || drop(runtime));
    held.release().unwrap();
    all_completed(&pending);
    // The context's event pool keeps the burst's completion events while its streams live.
    drop(s);
    nothing_left(&ctx, before, "the keepers' memsets");
}

// Promise ("a dropped npu `Runtime` with work in flight neither hangs nor leaks device memory
// indefinitely"; docs/ascend.md's teardown): a runtime of its own (npu-sim's cdylib) whose
// device is held (through the cdylib's own controls) with work queued under every strategy
// (memsets whose futures were dropped, one awaited by a task of a Tokio runtime shut down
// meanwhile, a pool's block, an event record), every handle of it then dropped, the runtime
// last: no drop waits for the device; once it is released, nothing of it is left on the
// device and ACL is finalised, and the library serves a runtime built again.
#[test]
fn a_runtime_of_its_own_dropped_with_held_work_never_waits_and_leaves_nothing() {
    let (_turn, _d0, _d1) = turn();
    let own = OwnRuntime::new("attack28b");
    for strategy in STRATEGIES {
        let runtime = own.build();
        let controls = CdylibControls::of_the_loaded_library();
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, strategy);
        let pool = DevicePool::builder(&ctx).capacity(1 << 16).build().unwrap();
        run(pool.reserve(&s, 1, 64)).unwrap();
        controls.hold(0);
        let tokio = tokio_runtime(true);
        let awaited = tokio.spawn(memset(&s, 64, 1));
        let block = pool
            .try_alloc::<u8>(&s, 64)
            .unwrap()
            .expect("a reserved block");
        drop(s.memset(block, 2));
        drop(memset(&s, 4096, 3));
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        watchdog(&format!("{strategy:?}: dropping everything"), || {
            tokio.shutdown_background();
            drop(awaited);
            drop((event, pool, s, ctx, runtime));
        });
        controls.release(0);
        own.when_finalised(&format!("{strategy:?}"), |applied| {
            let stats = controls.stats(0);
            assert_eq!(
                (stats.live_allocations, stats.live_events),
                (0, 0),
                "{strategy:?}: the pool's block, the memsets' buffers and the events are gone \
                 once ACL is finalised: {stats:?}"
            );
            let ctx = applied.device(0).unwrap().primary_context().clone();
            let set =
                run(stream(&ctx, strategy).memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 4));
            assert_eq!(set.unwrap().to_vec_blocking().unwrap(), [4; 8]);
        });
    }
}

// Promise (rules 3 and 5, and docs/ascend.md's teardown, with the device lost): a runtime of
// its own whose device 1 (the cdylib's, which no other test uses) is lost while held, with
// work queued on streams of every strategy (a caching pool's block, memsets, one awaited by a
// Tokio task, an event record), everything dropped: the awaited memset fails with the loss,
// no drop waits, every allocation and event is gone once ACL is finalised.
#[test]
fn a_runtime_of_its_own_whose_device_is_lost_under_held_work_is_finalised_leaving_nothing() {
    let (_turn, _d0, _d1) = turn();
    let own = OwnRuntime::new("attack28b-lost");
    let runtime = own.build();
    let controls = CdylibControls::of_the_loaded_library();
    let ctx = runtime.device(1).unwrap().primary_context().clone();
    controls.hold(1);
    let tokio = tokio_runtime(true);
    let mut awaited = Vec::new();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pool = DevicePool::builder(&ctx)
            .backend(DevicePoolBackend::Caching)
            .capacity(1 << 16)
            .build()
            .unwrap();
        let block = pool.try_alloc::<u8>(&s, 64).unwrap().expect("a new block");
        drop(s.memset(block, 2));
        awaited.push(tokio.spawn(memset(&s, 64, 1)));
        drop(memset(&s, 4096, 3));
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        drop((event, pool, s));
    }
    controls.lose(1);
    controls.release(1);
    let failures = tokio.block_on(async {
        let mut failures = Vec::new();
        for task in awaited {
            let awaited = tokio::time::timeout(HANG, task).await.expect("hung");
            failures.push(awaited.unwrap().map(drop).unwrap_err().error);
        }
        failures
    });
    for failure in failures {
        assert_eq!(failure.acl_code(), Some(AclCode(507010)), "{failure}");
    }
    watchdog("dropping everything of the lost device", || {
        tokio.shutdown_background();
        drop((ctx, runtime));
    });
    own.when_finalised("the lost device's runtime", |_| {
        let stats = controls.stats(1);
        assert_eq!(
            (stats.live_allocations, stats.live_events),
            (0, 0),
            "{stats:?}"
        );
    });
}

// Promise (docs/cancellation.md, rule 5: the reaper "runs releases, which make only
// non-blocking calls"; docs/ascend.md: `aclFinalize` may take up to 2 s): a runtime of its own
// whose last object goes with a deferred release (a memset's buffer, its future dropped, every
// handle dropped after it) is finalised off the reaper, which goes on running every other
// release of the process while ACL's finalisation (here a finalize callback that waits for the
// test) is under way; every strategy.
#[test]
fn a_runtime_of_its_own_is_finalised_off_the_reaper() {
    let (_turn, _d0, d1) = turn();
    let own = OwnRuntime::new("attack28b-finalised");
    for strategy in STRATEGIES {
        let runtime = own.build();
        hold_finalisation(&runtime);
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, strategy);
        // Held until every handle is gone, so that the memset's buffer is the deferred
        // release the test is about: run before the drops, the last drop was the test
        // thread's own, which waited in the finalize callback for itself (60 s under valgrind).
        let controls = CdylibControls::of_the_loaded_library();
        controls.hold(0);
        drop(memset(&s, 4096, 3));
        drop((s, ctx, runtime));
        controls.release(0);
        until_finalising(&format!("{strategy:?}: finalising"), |state| {
            !state.threads.is_empty()
        });
        // The in-process runtime's releases go through the same reaper.
        let (flushed, done) = std::sync::mpsc::channel();
        let released = memset(&stream(&d1, Strategy::EventPoll), 64, 1);
        std::thread::spawn(move || {
            drop(released);
            sim::flush_releases();
            let _ = flushed.send(());
        });
        let flushed = done.recv_timeout(HANG);
        let threads = let_finalisation_go();
        assert!(
            flushed.is_ok(),
            "{strategy:?}: the reaper waited for ACL's finalisation on {threads:?}"
        );
        assert!(
            !threads.iter().any(|thread| thread == "npu-reaper"),
            "{strategy:?}: finalised on {threads:?}"
        );
        own.when_finalised(&format!("{strategy:?}"), drop);
    }
}
