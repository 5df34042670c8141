//! Attacks of the eighteenth session's helper, through the `npu` facade: user code that
//! panics inside a launch's argument packing, the pools' FIFO promises under `try_alloc`
//! and `mem::forget`, the reactor's counters and the `npu_op` spans under cancellation and
//! faults, `LocalSet`s and runtimes dropped with work pending, and documented promises of
//! single methods (holds that nest, empty staged copies, synchronisations dropped, events
//! never recorded, `timed` with odd closures, `StreamPool` clones).
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use common::*;
use npu::Function;
use npu::kernel::{ArgWriter, KernelArg};
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Completion, Strategy};

/// `scale_f32` `{float *x, uint64_t n, float alpha}` from the registry.
fn scale_function(ctx: &Context) -> Function {
    in_process(ctx, "scale_f32")
}

/// A kernel argument (a `u64` by value) whose `pack` or `record_use` panics, as user code may.
struct Panicky {
    in_pack: bool,
}

// SAFETY: it packs a plain value and refers to no memory.
unsafe impl KernelArg for Panicky {
    fn pack(&self, args: &mut ArgWriter<'_>) -> npu::Result<()> {
        if self.in_pack {
            panic!("a user argument panicked while packing");
        }
        args.value(&4u64)
    }

    fn record_use(&self, _completion: &Completion) {
        if !self.in_pack {
            panic!("a user argument panicked while recording its use");
        }
    }
}

/// Rule 2's converse and the leak promise: a launch whose user argument panics before the
/// device sees anything must not keep the other arguments' memory for ever, and the stream
/// (whose submission lock the panic unwound through) keeps working.
#[test]
fn a_kernel_argument_panicking_in_pack_or_record_use_leaks_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let scale = scale_function(&ctx);
    for strategy in STRATEGIES {
        for in_pack in [true, false] {
            let s = stream(&ctx, strategy);
            let before = live_allocations(&ctx);
            let x = DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the launch never reaches the device: packing or recording panics.
                drop(unsafe { s.launch(&scale, 1, (x, Panicky { in_pack }, 2.0f32)) });
            }));
            assert!(panicked.is_err(), "the user's panic propagates");
            until_released(
                &format!("{strategy:?} in_pack={in_pack}: the launch's buffer is freed"),
                || live_allocations(&ctx) <= before,
            );
            // The stream still takes work and runs it.
            let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
            // SAFETY: scale_f32 scales n = 4 elements of x, which holds 4.
            let (x, _, _) = run(unsafe { s.launch(&scale, 1, (x, 4u64, 2.0f32)) }).unwrap();
            assert_eq!(x.to_vec_blocking().unwrap(), [2.0, 4.0, 6.0, 8.0]);
            run(s.synchronize()).unwrap();
        }
    }
}

/// Device memory whose `Memory::record_use` panics: a user implementation of the public
/// (unsafe) memory traits, wrapping a real buffer.
struct PanickyMemory(DeviceBuffer<f32>);

// SAFETY: every method answers for the wrapped buffer, except that recording a use panics
// before anything is recorded.
unsafe impl Memory for PanickyMemory {
    type Elem = f32;
    fn context(&self) -> &Context {
        self.0.context()
    }
    fn addr(&self) -> *const std::ffi::c_void {
        self.0.addr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn record_use(&self, _completion: &Completion) {
        panic!("a user Memory panicked in record_use");
    }
}

// SAFETY: as above, the wrapped buffer's.
unsafe impl MemoryMut for PanickyMemory {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        self.0.addr_mut()
    }
}

// SAFETY: the wrapped buffer is device memory.
unsafe impl DeviceSlice for PanickyMemory {}

/// The promise attacked: no leak, and the stream keeps working, when a user `Memory` panics
/// in `record_use` inside a copy's submission: the submission refuses the copy before the
/// device sees it, releases the other buffer (whose use it had recorded already) and resumes
/// the panic.
#[test]
fn a_memory_panicking_in_record_use_leaks_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_allocations(&ctx);
        let src = DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
        let dst = PanickyMemory(DeviceBuffer::<f32>::new(&ctx, 4).unwrap());
        let panicked = catch_unwind(AssertUnwindSafe(|| drop(s.copy_d2d(src, dst))));
        assert!(
            panicked.is_err(),
            "{strategy:?}: the user's panic propagates"
        );
        until_released(
            &format!("{strategy:?}: both buffers of the copy are freed"),
            || live_allocations(&ctx) <= before,
        );
        let filled = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 7)).unwrap();
        assert_eq!(filled.to_vec_blocking().unwrap(), [7; 8], "{strategy:?}");
        run(s.synchronize()).unwrap();
    }
}

/// A future boxed and pinned, polled once with a no-op waker (so that it queues or submits).
fn started<F: std::future::Future>(future: F) -> std::pin::Pin<Box<F>> {
    let mut future = Box::pin(future);
    assert!(
        polled_once(future.as_mut()).is_pending(),
        "it must wait for this attack to mean anything"
    );
    future
}

/// The pools' FIFO promise ("the head is never overtaken: a small request behind a large one
/// waits too"), attacked with the calls that never wait: `try_alloc` and the pinned pool's
/// `reserve` must not take room a queued waiter is owed, on `PinnedPool` and on `DevicePool`
/// (both backends).
#[test]
fn try_alloc_and_reserve_never_overtake_a_queued_waiter() {
    let (_guard, ctx, _) = exclusive(None);
    // PinnedPool: 8 KiB; a 4 KiB block out; the head wants 8 KiB, so 4 KiB of room is owed.
    let pool = PinnedPool::builder(&ctx).capacity(8192).build().unwrap();
    let held = pool.try_alloc::<u8>(4096).unwrap().expect("room");
    let mut head = started(pool.alloc::<u8>(8192));
    assert!(
        pool.try_alloc::<u8>(1).unwrap().is_none(),
        "try_alloc overtook the queued head"
    );
    assert!(
        pool.reserve(1, 1).is_err(),
        "reserve overtook the queued head"
    );
    drop(held);
    let block = run(head.as_mut()).unwrap();
    assert_eq!(block.len(), 8192);
    drop(block);
    assert!(pool.try_alloc::<u8>(1).unwrap().is_some(), "room again");

    for strategy in STRATEGIES {
        for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx)
                .backend(backend)
                .capacity(8192)
                .build()
                .unwrap();
            // A cached small block, so that try_alloc could serve from the cache at once.
            drop(run(pool.alloc::<u8>(&s, 4096)).unwrap());
            let held = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            let mut head = started(pool.alloc::<u8>(&s, 8192));
            assert!(
                pool.try_alloc::<u8>(&s, 1).unwrap().is_none(),
                "{strategy:?} {backend:?}: try_alloc overtook the queued head"
            );
            drop(held);
            let block = run(head.as_mut()).unwrap();
            assert_eq!(block.len(), 8192, "{strategy:?} {backend:?}");
        }
    }
}

/// `mem::forget` must only leak: a pool waiter forgotten while queued takes the block that
/// comes back to it out of circulation, and nothing else; the waiters behind it are served by
/// the next blocks, and a forgotten in-flight pooled block never comes back to anyone.
#[test]
fn forgotten_pool_waiters_and_blocks_only_leak() {
    let (_guard, ctx, _) = exclusive(None);
    let pool = PinnedPool::builder(&ctx)
        .capacity(3 * 4096)
        .build()
        .unwrap();
    let (a, b) = (
        pool.try_alloc::<u8>(4096).unwrap().unwrap(),
        pool.try_alloc::<u8>(4096).unwrap().unwrap(),
    );
    let c = pool.try_alloc::<u8>(4096).unwrap().unwrap();
    let forgotten = started(pool.alloc::<u8>(4096));
    std::mem::forget(forgotten);
    let mut second = started(pool.alloc::<u8>(4096));
    drop(a); // to the forgotten waiter: lost
    drop(b);
    let served = run(second.as_mut()).unwrap();
    assert_eq!(served.len(), 4096);
    drop(served);
    drop(c);
    // Two of the three blocks circulate; the third went to the forgotten waiter.
    let one = pool.try_alloc::<u8>(4096).unwrap().expect("first");
    let two = pool.try_alloc::<u8>(4096).unwrap().expect("second");
    assert!(pool.try_alloc::<u8>(4096).unwrap().is_none(), "one leaked");
    drop((one, two));

    for strategy in STRATEGIES {
        for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx)
                .backend(backend)
                .capacity(2 * 4096)
                .build()
                .unwrap();
            let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            // A memset in flight on the block, its future forgotten: the block never returns.
            std::mem::forget(s.memset(block, 7));
            drop(held);
            run(s.synchronize()).unwrap();
            sim::flush_releases();
            let other = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            assert!(
                pool.try_alloc::<u8>(&s, 4096).unwrap().is_none(),
                "{strategy:?} {backend:?}: the forgotten block came back while leaked"
            );
            let other = run(s.memset(other, 9)).unwrap();
            let (_, data) = run(s.copy_to_vec_staged(&PinnedPool::new(&ctx), other)).unwrap();
            assert_eq!(data, vec![9; 4096]);
        }
    }
}

/// `sim::hold`'s promise: "Holds of one device nest: it runs again once every one of them is
/// gone", with one released by `Hold::release` and the other dropped.
#[test]
fn holds_nest_until_the_last_one_goes() {
    let (_guard, _, ctx) = exclusive(None);
    let device = ctx.device();
    let s = stream(&ctx, Strategy::EventPoll);
    let outer = sim::hold(&device).unwrap();
    let inner = sim::hold(&device).unwrap();
    let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
    inner.release().unwrap();
    // Still held: the device starts nothing, so a synchronous look finds the memset pending
    // and an event recorded after it incomplete.
    let after = Event::new(&ctx).unwrap();
    after.record(&s).unwrap();
    assert!(!op.is_complete(), "one hold left: the memset must not run");
    assert!(!after.is_complete().unwrap());
    drop(outer);
    let buffer = run(op).unwrap();
    assert_eq!(buffer.to_vec_blocking().unwrap(), vec![5; 64]);
    run(after.wait()).unwrap();
}

/// `ReactorStats::pending` is "operations registered but not yet completed": once every
/// event-polled operation has resolved, whatever ended it (the device, a fault, an abort, a
/// stop, a dropped future), the reactor's count of pending work is back where it was, and no
/// snapshot taken meanwhile (from another thread) shows more completed than registered or a
/// counter going backwards.
#[test]
fn reactor_stats_settle_whatever_ends_the_operations() {
    let (_guard, ctx, _) = exclusive(None);
    let base = npu::stream::reactor_stats();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut last = npu::stream::reactor_stats();
            let mut seen = 0u64;
            while !stop.load(Ordering::Acquire) {
                let now = npu::stream::reactor_stats();
                assert!(now.completed <= now.registered, "{now:?}");
                assert!(now.registered >= last.registered && now.completed >= last.completed);
                assert!(now.queries >= last.queries && now.parks >= last.parks);
                last = now;
                seen += 1;
                std::thread::yield_now();
            }
            seen
        })
    };
    let mut done = Vec::new();
    for round in 0..4 {
        let s = stream(&ctx, Strategy::EventPoll);
        let held = sim::hold(&ctx.device()).unwrap();
        if round == 1 {
            sim::fail_task(&s, 2, npu::error::AclCode(507015)).unwrap();
        }
        let ops: Vec<_> = (0..8)
            .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), i))
            .collect();
        done.extend(ops.iter().map(|op| op.completion().clone()));
        match round {
            0 => drop(ops), // dropped in flight, completed by the device
            2 => {
                let abort = s.abort();
                drop(held);
                run(abort).unwrap();
                drop(ops);
                continue;
            }
            3 => {
                s.stop().unwrap();
                drop(held);
                for op in ops {
                    assert!(run(op).is_err(), "a stopped stream's work fails");
                }
                continue;
            }
            _ => {
                drop(held);
                for op in ops {
                    let _ = run(op);
                }
            }
        }
    }
    for completion in &done {
        run(completion.wait()).ok();
    }
    let deadline = std::time::Instant::now() + HANG;
    loop {
        let now = npu::stream::reactor_stats();
        if now.pending() == base.pending() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reactor still counts {} pending operations against {} before: {now:?}",
            now.pending(),
            base.pending()
        );
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    assert!(reader.join().unwrap() > 0);
}

/// docs/observability.md: `completed` and `failed` are "emitted by the poll that resolves the
/// future", and "an operation whose future is dropped emits neither"; a failed operation's
/// span carries an `error` field ending with where the fault happened. Counted by a layer on
/// the test's own thread under every strategy, with futures dropped in flight.
#[test]
fn op_spans_report_each_awaited_outcome_once_and_dropped_ones_never() {
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Default)]
    struct Seen {
        completed: AtomicUsize,
        failed: AtomicUsize,
        error_fields: std::sync::Mutex<Vec<String>>,
    }
    struct Counting(Arc<Seen>);
    struct Visit<'a>(&'a mut Option<String>, &'a mut Option<String>);
    impl tracing::field::Visit for Visit<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => *self.0 = Some(format!("{value:?}")),
                "error" => *self.1 = Some(format!("{value:?}")),
                _ => {}
            }
        }
    }
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counting {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let (mut message, mut error) = (None, None);
            event.record(&mut Visit(&mut message, &mut error));
            match message.as_deref() {
                Some("completed") => {
                    self.0.completed.fetch_add(1, Ordering::Relaxed);
                }
                Some("failed") => {
                    self.0.failed.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        fn on_record(
            &self,
            _: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let (mut message, mut error) = (None, None);
            values.record(&mut Visit(&mut message, &mut error));
            if let Some(error) = error {
                self.0.error_fields.lock().unwrap().push(error);
            }
        }
    }

    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let seen = Arc::new(Seen::default());
        let subscriber = tracing_subscriber::registry()
            .with(Counting(seen.clone()))
            .with(tracing_subscriber::filter::LevelFilter::DEBUG);
        let mut pending = Vec::new();
        common::see_every_callsite();
        tracing::subscriber::with_default(subscriber, || {
            let s = stream(&ctx, strategy);
            sim::fail_task(&s, 3, npu::error::AclCode(507015)).unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            let ops: Vec<_> = (0..6u8)
                .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), i))
                .collect();
            let mut ops = ops.into_iter();
            // Polled once each while held, then dropped: they resolve later, unobserved.
            for op in ops.by_ref().take(2) {
                let mut op = Box::pin(op);
                assert!(polled_once(op.as_mut()).is_pending());
                pending.push(op.completion().clone());
            }
            drop(held);
            let awaited: Vec<_> = ops.map(|op| run(op).map(drop)).collect();
            assert_eq!(
                awaited.iter().filter(|r| r.is_err()).count(),
                1,
                "{strategy:?}: the third memset failed: {awaited:?}"
            );
            all_completed(&pending);
            // Polling resolved operations' clones and a second synchronize emit nothing more.
            run(s.synchronize()).unwrap_err();
            run(s.synchronize()).unwrap();
        });
        assert_eq!(
            (
                seen.completed.load(Ordering::Relaxed),
                seen.failed.load(Ordering::Relaxed)
            ),
            (4, 2),
            "{strategy:?}: 3 memsets and 1 synchronize completed; 1 memset and 1 synchronize failed"
        );
        let fields = seen.error_fields.lock().unwrap();
        assert_eq!(fields.len(), 2, "{strategy:?}: {fields:?}");
        assert!(
            fields
                .iter()
                .all(|f| f.contains("at task") && f.contains("507015")),
            "{strategy:?}: {fields:?}"
        );
    }
}

/// `Stream::synchronize`: "the first device-side failure among the operations that completed
/// since the previous `synchronize`", and a dropped one consumes the failure it would have
/// reported. Two synchronisations queued back to back behind a failing memset, awaited in
/// reverse order: the first reports the failure, the second does not; a third dropped in flight
/// after another failure consumes it.
#[test]
fn synchronizations_report_a_failure_once_in_submission_order_even_when_dropped() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        sim::fail_task(&s, 1, npu::error::AclCode(507015)).unwrap();
        drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
        let first = s.synchronize();
        let second = s.synchronize();
        drop(held);
        assert!(
            run(second).is_ok(),
            "{strategy:?}: the second sync reported it"
        );
        let err = run(first).unwrap_err().error;
        assert_eq!(
            err.acl_code(),
            Some(npu::error::AclCode(507015)),
            "{strategy:?}"
        );

        sim::fail_task(&s, 1, npu::error::AclCode(507015)).unwrap();
        drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
        let dropped = s.synchronize();
        let done = dropped.completion().clone();
        drop(dropped);
        all_completed(&[]);
        run(done.wait()).ok();
        assert!(
            run(s.synchronize()).is_ok(),
            "{strategy:?}: the dropped sync consumed the failure"
        );
    }
}

/// `Event::wait`: "Resolves at once if the event was never recorded", for both kinds, while
/// the device is held and under a paused clock (where a keeper would stop time); and
/// `copy_to_vec_staged` / `copy_from_slice_staged`: "An empty copy resolves at once", even
/// when the staging pool has no block to give and the device is held.
#[test]
fn never_recorded_events_and_empty_staged_copies_resolve_at_once() {
    let (_guard, ctx, _) = exclusive(None);
    let held = sim::hold(&ctx.device()).unwrap();
    for kind in [npu::stream::EventKind::Legacy, npu::stream::EventKind::Ex] {
        let event = Event::builder(&ctx).kind(kind).build().unwrap();
        let mut wait = Box::pin(event.wait());
        assert!(
            polled_once(wait.as_mut()).is_ready(),
            "{kind:?}: a never-recorded event's wait must not pend"
        );
        paused_runtime().block_on(async {
            tokio::select! {
                r = event.wait() => r.unwrap(),
                () = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {
                    panic!("{kind:?}: the hour passed first")
                }
            }
        });
    }
    let pool = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
    let _taken = pool.try_alloc::<u8>(4096).unwrap().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let device = DeviceBuffer::<u32>::new(&ctx, 8).unwrap();
        let empty = device.view(8..).unwrap();
        let mut down = Box::pin(s.copy_to_vec_staged(&pool, empty));
        let Poll::Ready(Ok((empty, data))) = polled_once(down.as_mut()) else {
            panic!("{strategy:?}: an empty staged download must resolve at once");
        };
        assert!(data.is_empty());
        let mut up = Box::pin(s.copy_from_slice_staged(&pool, &[] as &[u32], empty));
        assert!(
            matches!(polled_once(up.as_mut()), Poll::Ready(Ok(_))),
            "{strategy:?}: an empty staged upload must resolve at once"
        );
    }
    drop(held);
}

/// `Stream::timed`: "It should queue one operation on `self`; work it queues elsewhere is
/// not timed", and "any later failure hands the operation's value back". A closure that
/// queues on a stream of another device, and one that stops `self` before queueing, resolve
/// with their values (no hang, no lost buffer) and leave no event behind.
///
/// `self` is a stream of a context of its own, dropped before the events are counted: the
/// completion events a strategy pools per context number as many as were ever in flight at
/// once, which the host's timing decides, and go with the context.
#[test]
fn timed_with_closures_that_misbehave_resolves_and_hands_values_back() {
    let (_guard, primary, d1) = exclusive(None);
    for strategy in STRATEGIES {
        let events = sim::device_stats(&primary.device()).unwrap().live_events;
        let d0 = primary.device().create_context().unwrap();
        let (s, other) = (stream(&d0, strategy), stream(&d1, strategy));
        let foreign = DeviceBuffer::<u8>::new(&d1, 64).unwrap();
        let (buffer, _took) = run(s.timed(|_| other.memset(foreign, 3))).unwrap();
        assert_eq!(
            buffer.to_vec_blocking().unwrap(),
            vec![3; 64],
            "{strategy:?}"
        );

        let mine = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
        let err = run(s.timed(|s| {
            s.stop().unwrap();
            s.memset(mine, 4)
        }))
        .unwrap_err();
        assert!(err.value.is_some(), "{strategy:?}: the buffer comes back");
        run(s.abort()).unwrap();
        run(s.synchronize()).ok();
        let again = run(s.memset(DeviceBuffer::<u8>::new(&d0, 8).unwrap(), 1)).unwrap();
        assert_eq!(
            again.to_vec_blocking().unwrap(),
            vec![1; 8],
            "{strategy:?}: aborted back"
        );
        drop((again, s, d0));
        until_released(&format!("{strategy:?}: timed's events released"), || {
            sim::device_stats(&primary.device()).unwrap().live_events <= events
        });
    }
}

/// `StreamPool`: "Clones share the streams and the turn", and requests of another context are
/// refused by the device pool with errors naming the method called (`DevicePool::alloc`,
/// `try_alloc`, `reserve`, argument `stream`).
#[test]
fn stream_pool_clones_share_the_turn_and_foreign_streams_are_named() {
    let (_guard, d0, d1) = exclusive(None);
    let pool = npu::stream::StreamPool::new(&d0, 3).unwrap();
    let clone = pool.clone();
    let picked = [pool.next(), clone.next(), pool.next(), clone.next()];
    assert!(!picked[0].same(&picked[1]) && !picked[1].same(&picked[2]));
    assert!(!picked[0].same(&picked[2]) && picked[3].same(&picked[0]));

    let foreign = stream(&d1, Strategy::EventPoll);
    let other_ctx = stream(&d0.device().create_context().unwrap(), Strategy::EventPoll);
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let dp = DevicePool::builder(&d0).backend(backend).build().unwrap();
        for s in [&foreign, &other_ctx] {
            let err = run(dp.alloc::<u8>(s, 64)).unwrap_err();
            assert_eq!(
                invalid(&err),
                ("DevicePool::alloc", "stream"),
                "{backend:?}"
            );
            let err = dp.try_alloc::<u8>(s, 64).unwrap_err();
            assert_eq!(
                invalid(&err),
                ("DevicePool::try_alloc", "stream"),
                "{backend:?}"
            );
            let err = run(dp.reserve(s, 1, 64)).unwrap_err();
            assert_eq!(
                invalid(&err),
                ("DevicePool::reserve", "stream"),
                "{backend:?}"
            );
        }
        let err = run(dp.reserve(&picked[0], usize::MAX, 4096)).unwrap_err();
        assert_eq!(
            invalid(&err),
            ("DevicePool::reserve", "count"),
            "{backend:?}"
        );
        assert_eq!(
            dp.stats().cache.allocated,
            0,
            "{backend:?}: refused before allocating"
        );
    }
}

/// Rule 5 and the harness story for `LocalSet`s and several runtimes: `spawn_local` tasks
/// (holding `!Send` state) awaiting operations on a held device, the `LocalSet` and its
/// runtime dropped with them pending, do not wait for the device; another runtime's task
/// awaiting later work on the same stream is unaffected and reads its data; the dropped
/// tasks' buffers are freed once the device is done.
#[test]
fn a_local_set_and_its_runtime_dropped_under_held_work_leave_another_runtime_working() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_allocations(&ctx);
        let held = sim::hold(&ctx.device()).unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let local_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        for i in 0..4u8 {
            let (s, ctx, started) = (s.clone(), ctx.clone(), started.clone());
            local.spawn_local(async move {
                let tag = std::rc::Rc::new(i);
                let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), *tag);
                started.fetch_add(1, Ordering::SeqCst);
                let _ = op.await;
                unreachable!("the device is held until the LocalSet is gone");
            });
        }
        local_rt.block_on(local.run_until(async {
            while started.load(Ordering::SeqCst) < 4 {
                tokio::task::yield_now().await;
            }
        }));
        // Another runtime awaits later work on the same stream.
        let other_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let later = other_rt.spawn({
            let (s, ctx) = (s.clone(), ctx.clone());
            async move {
                let buffer = s
                    .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0x5a)
                    .await
                    .unwrap();
                buffer.to_vec_blocking().unwrap()
            }
        });
        watchdog(
            "dropping a LocalSet and its runtime under held work",
            || {
                drop(local);
                drop(local_rt);
            },
        );
        drop(held);
        let data =
            other_rt.block_on(async { tokio::time::timeout(HANG, later).await.unwrap().unwrap() });
        assert_eq!(data, vec![0x5a; 64], "{strategy:?}");
        watchdog("dropping the other runtime", || drop(other_rt));
        until_released(&format!("{strategy:?}: the local tasks' buffers"), || {
            live_allocations(&ctx) <= before
        });
    }
}
