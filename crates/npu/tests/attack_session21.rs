//! Attacks of the twenty-first session's helper, through the `npu` facade: Tokio shapes not
//! tried before (a multi-thread runtime shut down with a zero timeout under thousands of
//! unordered operations, a runtime dropped inside another runtime's task, a runtime whose
//! blocking pool cannot start a thread), wakers whose clone panics, and wakers that drop the
//! last handles of streams, contexts, pools and a whole runtime on the thread that completes
//! an operation.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Duration;

use common::*;
use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Strategy, ValueCondition, ValueWord};

/// Rules 2, 3 and 5 under `Runtime::shutdown_timeout(Duration::ZERO)`: four tasks of a
/// two-worker runtime each hold a `FuturesUnordered` of 300 operations (memsets, copies in and
/// out of pinned memory), polled once on a held device, when the runtime is shut down without
/// waiting. The shutdown must return without waiting for the device (the watchdog), every
/// dropped operation must still complete once the device is released, and every device and
/// pinned allocation must go; the stream must work afterwards. A break: the shutdown hangs,
/// an operation never completes (its memory stays allocated), or the stream is left stuck.
#[test]
fn a_runtime_shut_down_at_once_under_thousands_of_unordered_operations_loses_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let (polled, all_polled) = std::sync::mpsc::channel();
        for task in 0..4u8 {
            let (s, ctx, polled) = (s.clone(), ctx.clone(), polled.clone());
            rt.spawn(async move {
                let mut ops = FuturesUnordered::new();
                for i in 0..300u32 {
                    let byte = (i as u8).wrapping_add(task);
                    let op = match i % 3 {
                        0 => s
                            .memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), byte)
                            .map(|r| r.map(drop).map_err(|e| e.error))
                            .boxed(),
                        1 => {
                            let host = PinnedBuffer::from_slice(&ctx, &[byte; 256]).unwrap();
                            let dev = DeviceBuffer::<u8>::new(&ctx, 256).unwrap();
                            s.copy_h2d(host, dev)
                                .map(|r| r.map(drop).map_err(|e| e.error))
                                .boxed()
                        }
                        _ => {
                            let dev = DeviceBuffer::<u8>::new(&ctx, 256).unwrap();
                            let host = PinnedBuffer::<u8>::new(&ctx, 256).unwrap();
                            s.copy_d2h(dev, host)
                                .map(|r| r.map(drop).map_err(|e| e.error))
                                .boxed()
                        }
                    };
                    ops.push(op);
                }
                assert!(
                    std::future::poll_fn(|cx| Poll::Ready(ops.poll_next_unpin(cx)))
                        .await
                        .is_pending(),
                    "the device is held"
                );
                polled.send(()).unwrap();
                while let Some(done) = ops.next().await {
                    done.unwrap();
                }
            });
        }
        for _ in 0..4 {
            all_polled
                .recv_timeout(HANG)
                .expect("a task never polled its operations");
        }
        watchdog("shutdown_timeout(0) with held work", || {
            rt.shutdown_timeout(Duration::ZERO)
        });
        drop(held);
        run(s.synchronize()).unwrap();
        let after = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9)).unwrap();
        assert_eq!(after.to_vec_blocking().unwrap(), [9; 64], "{strategy:?}");
        drop((after, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// A waker whose `clone` panics (and whose other calls do nothing).
fn clone_panicking_waker() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        panic!("a waker that panics when cloned");
    }
    fn nothing(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, nothing, nothing, nothing);
    // SAFETY: every function of the table ignores the data pointer, which may be anything.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// Polls `future` once with a waker whose clone panics; returns whether the poll panicked
/// (it is still pending if not: the futures polled here all wait for held work).
fn polled_with_a_clone_panicking_waker<F: Future>(future: Pin<&mut F>) -> bool {
    let waker = clone_panicking_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(&mut cx)));
    match polled {
        Err(_) => true,
        Ok(Poll::Pending) => false,
        Ok(Poll::Ready(_)) => panic!("resolved while its work was held"),
    }
}

/// Rule 6 ("a panicking waker harms only its own task") and rule 7 for a waker whose clone
/// panics: every kind of waiting future (an `Op`, `Completion::wait`, `Event::wait`,
/// `Stream::synchronize`, a queued `PinnedPool::alloc` and `DevicePool::alloc`, `upload`) is
/// polled once by such a waker while its work is held (the pools exhausted by a held block),
/// the panic caught, then awaited normally (the `async fn`s, which Rust poisons once they
/// panicked, dropped and asked again): each must resolve with its data, the pools must
/// serve their whole capacity again, and nothing may stay allocated. A break: a future that
/// is never woken after the panic (a slot left half-registered, a poisoned lock), a waiter
/// dropped from a pool's queue, or a leak.
#[test]
fn a_waker_that_panics_when_cloned_leaves_every_future_working() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let pinned = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let devpool = DevicePool::builder(&ctx)
            .capacity(4096)
            .backend(DevicePoolBackend::Caching)
            .build()
            .unwrap();
        let pinned_block = run(pinned.alloc::<u8>(4096)).unwrap();
        let dev_block = run(devpool.alloc::<u8>(&s, 4096)).unwrap();

        let held = sim::hold(&ctx.device()).unwrap();
        let mut memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
        let mut waited = Box::pin(memset.completion().wait());
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let mut event_wait = Box::pin(event.wait());
        let mut sync = s.synchronize();
        let mut pinned_alloc = Box::pin(pinned.alloc::<u8>(4096));
        let mut dev_alloc = Box::pin(devpool.alloc::<u8>(&s, 4096));
        let mut upload = Box::pin(s.upload(&[7u8; 100]));
        // The pooled blocks go back only once the device has run these.
        let pinned_back = s.copy_h2d(pinned_block, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        let dev_back = s.memset(dev_block, 1);

        let mut panicked = 0;
        panicked += polled_with_a_clone_panicking_waker(Pin::new(&mut memset)) as usize;
        panicked += polled_with_a_clone_panicking_waker(waited.as_mut()) as usize;
        panicked += polled_with_a_clone_panicking_waker(event_wait.as_mut()) as usize;
        panicked += polled_with_a_clone_panicking_waker(Pin::new(&mut sync)) as usize;
        // An `async fn` that panicked panics again if resumed: those are dropped (leaving
        // their pool's queue) and asked again.
        if polled_with_a_clone_panicking_waker(pinned_alloc.as_mut()) {
            panicked += 1;
            pinned_alloc = Box::pin(pinned.alloc::<u8>(4096));
        }
        if polled_with_a_clone_panicking_waker(dev_alloc.as_mut()) {
            panicked += 1;
            dev_alloc = Box::pin(devpool.alloc::<u8>(&s, 4096));
        }
        if polled_with_a_clone_panicking_waker(upload.as_mut()) {
            panicked += 1;
            upload = Box::pin(s.upload(&[7u8; 100]));
        }
        assert!(
            panicked >= 4,
            "{strategy:?}: the wakers were cloned ({panicked})"
        );
        drop((pinned_back, dev_back));
        drop(held);

        run(async {
            let buffer = memset.await.unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64]);
            waited.await.unwrap();
            event_wait.await.unwrap();
            sync.await.unwrap();
            let block = pinned_alloc.await.unwrap();
            assert_eq!(block.len(), 4096);
            let block = dev_alloc.await.unwrap();
            assert_eq!(block.len(), 4096);
            let uploaded = upload.await.unwrap();
            assert_eq!(uploaded.to_vec_blocking().unwrap(), [7; 100]);
        });
        drop((pinned, devpool, event, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// What a dropping waker lets go of when it is first woken.
type Kept = Arc<Mutex<Option<Box<dyn Any + Send>>>>;

/// A waker that drops what `kept` holds when it is woken, and counts its wakes.
fn dropping_waker(kept: Kept, woken: Arc<AtomicUsize>) -> Waker {
    struct Dropper {
        kept: Kept,
        woken: Arc<AtomicUsize>,
    }
    impl std::task::Wake for Dropper {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let taken = self.kept.lock().unwrap().take();
            drop(taken);
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }
    Waker::from(Arc::new(Dropper { kept, woken }))
}

/// Rule 5 on the completing threads: a waker, woken on the reactor, a callback worker or a
/// blocking waiter (whichever completes its operation), drops the last handles of a stream
/// of device 1 with work queued on the held device, of an explicit context with a stream and
/// buffers, of a runtime-pool `DevicePool` whose block is in flight on the held device, of a
/// `PinnedPool` with a block out, and of everything of a second AscendCL runtime (npu-sim's
/// cdylib, whose last handle finalises it). The completing thread must go on (a later
/// operation of device 0 completes while device 1 is still held), and once device 1 is
/// released everything must complete and be released. A break: a hang (a drop waiting for
/// the held device on a shared thread), or a leak.
#[test]
fn wakers_dropping_the_last_handles_of_streams_pools_and_a_runtime_stop_no_shared_thread() {
    let (_guard, ctx, ctx1) = exclusive(None);
    let baseline0 = live_memory(&ctx);
    let baseline1 = live_memory(&ctx1);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        // Device 1's work, held.
        let held1 = sim::hold(&ctx1.device()).unwrap();
        let s1 = stream(&ctx1, strategy);
        let queued = s1.memset(DeviceBuffer::<u8>::new(&ctx1, 4096).unwrap(), 3);
        let queued_done = queued.completion().clone();
        drop(queued);
        let explicit = ctx1.device().create_context().unwrap();
        let explicit_stream = stream(&explicit, strategy);
        let explicit_op =
            explicit_stream.memset(DeviceBuffer::<u8>::new(&explicit, 64).unwrap(), 1);
        let pool = DevicePool::builder(&ctx1)
            .capacity(8192)
            .backend(DevicePoolBackend::RuntimePool)
            .build()
            .unwrap();
        let pinned = PinnedPool::builder(&ctx1).capacity(8192).build().unwrap();
        let pinned_block = run(pinned.alloc::<u8>(4096)).unwrap();
        let (pool_, s1_) = (pool.clone(), s1.clone());
        let mut alloc = Box::pin(async move { pool_.alloc::<u8>(&s1_, 4096).await });
        assert!(
            polled_once(alloc.as_mut()).is_pending(),
            "{strategy:?}: held"
        );
        let foreign = dlopened_simulator();
        let foreign_ctx = foreign.device(0).unwrap().primary_context().clone();
        let foreign_stream = stream(&foreign_ctx, strategy);
        let foreign_buffer =
            run(foreign_stream.memset(DeviceBuffer::<u8>::new(&foreign_ctx, 64).unwrap(), 4))
                .unwrap();

        let kept: Kept = Arc::new(Mutex::new(Some(Box::new((
            s1,
            explicit_op,
            explicit_stream,
            explicit,
            alloc,
            pool,
            pinned_block,
            pinned,
            foreign_buffer,
            foreign_stream,
            foreign_ctx,
            foreign,
        )))));
        let woken = Arc::new(AtomicUsize::new(0));
        let waker = dropping_waker(kept.clone(), woken.clone());
        // Device 0's operation completes on a shared thread, which runs the waker.
        let held0 = sim::hold(&ctx.device()).unwrap();
        let mut op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8);
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
        drop(waker);
        drop(held0);
        until("the waker ran on the completing thread", || {
            woken.load(Ordering::SeqCst) > 0
        });
        assert!(kept.lock().unwrap().is_none(), "{strategy:?}");
        // The completing thread went on: later work of device 0 completes, device 1 held.
        assert!(
            op.completion().is_complete(),
            "{strategy:?}: woken before completion"
        );
        let later = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 6)).unwrap();
        assert_eq!(later.to_vec_blocking().unwrap(), [6; 64]);
        assert_eq!(run(op).unwrap().to_vec_blocking().unwrap(), [8; 64]);
        assert!(!queued_done.is_complete(), "{strategy:?}: device 1 is held");
        drop(held1);
        run(queued_done.wait()).unwrap();
        drop((later, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline0) && within(live_memory(&ctx1), baseline1)
        });
    }
}

/// Rules 2, 3 and 5 for a runtime dropped inside another runtime's task (Tokio panics there,
/// part-way through its shutdown): the inner current-thread runtime (paused clock) has tasks
/// awaiting held operations under every strategy, and its drop panics inside the outer task.
/// The panic must leave nothing half-done: every operation completes once the device is
/// released, every allocation goes, the outer runtime and the stream go on working. A break:
/// a hang, a leak, or a stream left stuck.
#[test]
fn a_runtime_dropped_inside_another_runtimes_task_loses_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let inner = paused_runtime();
        for i in 0..8u8 {
            let (s, ctx) = (s.clone(), ctx.clone());
            inner.spawn(async move {
                let buffer = DeviceBuffer::<u8>::new(&ctx, 128).unwrap();
                let _ = tokio::time::timeout(Duration::from_secs(3600), s.memset(buffer, i)).await;
            });
        }
        // Let each task submit (and the paused clock's keepers start).
        inner.block_on(async {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        });
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dropped = outer.block_on(async move {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(inner))).is_err()
        });
        assert!(dropped, "Tokio refuses to drop a runtime inside a task");
        drop(held);
        let after = outer
            .block_on(async {
                tokio::time::timeout(
                    HANG,
                    s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2),
                )
                .await
            })
            .expect("the stream is stuck")
            .unwrap();
        assert_eq!(after.to_vec_blocking().unwrap(), [2; 64]);
        drop((after, outer, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// The stack size of the blocking threads below: 1 EiB, more than any host's address space,
/// whatever its overcommit policy.
const UNMAPPABLE_STACK: usize = 1 << 60;

/// A current-thread Tokio runtime (its clock paused if `paused`) whose blocking pool can never
/// start a thread (its threads' stack is [`UNMAPPABLE_STACK`]), so `spawn_blocking` panics ("OS
/// can't spawn worker thread") while no pool thread exists. User configuration, in safe code.
/// That the OS refuses such a thread is checked first, with a thread of its own (a refused
/// `spawn_blocking` would stay queued in the runtime under test and change it), so that the
/// attacks below cannot pass on a host where the pool would start after all.
fn runtime_without_blocking_threads(paused: bool) -> tokio::runtime::Runtime {
    let spawned = std::thread::Builder::new()
        .stack_size(UNMAPPABLE_STACK)
        .spawn(|| ());
    assert!(
        spawned.is_err(),
        "this host started a thread with a 1 EiB stack"
    );
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(paused)
        .thread_stack_size(UNMAPPABLE_STACK)
        .build()
        .unwrap()
}

/// Rules 2 and 3 when Tokio cannot start a blocking thread: a `BlockingSync` submission made
/// inside a runtime whose blocking pool cannot spawn (Tokio's `spawn_blocking` panics then)
/// must not let go of what the operation owns once the device has accepted the work. Two
/// submissions on a held device: a copy from an `Arc`-shared pinned buffer, and a copy into
/// one part of a split pinned buffer. Whatever the submission does (resolve, fail, or even
/// panic), the device has the work: `Arc::get_mut` must fail and the other part must not
/// unwrap to the whole buffer until the device has run the copies, or the caller would hold
/// `&mut` to memory the device reads or writes. A break: either succeeds while the device is
/// held.
#[test]
fn a_blocking_pool_that_cannot_start_a_thread_never_lets_a_submitted_operations_value_go() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    let s = stream(&ctx, Strategy::BlockingSync);
    let rt = runtime_without_blocking_threads(false);
    let mut shared = Arc::new(PinnedBuffer::from_slice(&ctx, &[0x5a_u8; 4096]).unwrap());
    let src = DeviceBuffer::from_host_blocking(&ctx, &[0xab_u8; 4096]).unwrap();
    let (part, rest) = PinnedBuffer::<u8>::new(&ctx, 8192)
        .unwrap()
        .into_halves(4096)
        .unwrap();
    let held = sim::hold(&ctx.device()).unwrap();
    let (copy_in, copy_out) = rt.block_on(async {
        let copy_in = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.copy_h2d(shared.clone(), DeviceBuffer::<u8>::new(&ctx, 4096).unwrap())
        }));
        let copy_out =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.copy_d2h(src, part)));
        (copy_in.ok(), copy_out.ok())
    });
    assert!(
        Arc::get_mut(&mut shared).is_none(),
        "the caller has `&mut` to a buffer a held copy still reads (submission {})",
        if copy_in.is_some() {
            "returned"
        } else {
            "panicked"
        }
    );
    let rest = match rest.into_whole() {
        Ok(_whole) => panic!(
            "the caller unwrapped the whole buffer while a held copy still writes into it \
             (submission {})",
            if copy_out.is_some() {
                "returned"
            } else {
                "panicked"
            }
        ),
        Err(refused) => refused.value.unwrap(),
    };
    assert!(
        copy_in.is_some() && copy_out.is_some(),
        "a submission the device accepted unwound"
    );
    drop(held);
    let outcome = run(async {
        let copied_in = match copy_in {
            Some(op) => Some(op.await),
            None => None,
        };
        let copied_out = match copy_out {
            Some(op) => Some(op.await),
            None => None,
        };
        (copied_in, copied_out)
    });
    drop((outcome, rest, rt));
    run(s.synchronize()).unwrap();
    assert!(Arc::get_mut(&mut shared).is_some(), "the copy has run");
    drop((shared, s));
    until_released("every allocation", || within(live_memory(&ctx), baseline));
}

/// "Never a panic", and rule 7, when Tokio cannot start a blocking thread under a paused
/// clock: the first pending poll of an operation (and of an event wait) on a paused runtime
/// spawns a blocking task that keeps the clock still. On a runtime whose
/// blocking pool cannot start a thread, each future must still resolve with its data, under
/// every strategy. A break: a poll that panics (Tokio's "OS can't spawn worker thread"),
/// every time it is polled.
#[test]
fn futures_polled_on_a_paused_runtime_that_cannot_start_a_blocking_thread_resolve() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let rt = runtime_without_blocking_threads(true);
        let held = sim::hold(&ctx.device()).unwrap();
        let polled = rt.block_on(async {
            let mut memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4);
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            let mut event_wait = Box::pin(event.wait());
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                polled_once(Pin::new(&mut memset)).is_pending()
                    && polled_once(event_wait.as_mut()).is_pending()
            }));
            drop(held);
            match panicked {
                Ok(pending) => {
                    assert!(pending, "{strategy:?}: held work resolved");
                    let buffer = memset.await.unwrap();
                    event_wait.await.unwrap();
                    Ok(buffer.to_vec_blocking().unwrap())
                }
                Err(_) => Err(()),
            }
        });
        assert_eq!(
            polled.expect("a poll panicked: Tokio could not start the clock's keeper"),
            [4; 64],
            "{strategy:?}"
        );
        drop((rt, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// Rule 5 for a context whose stopped stream still waits on another stream's work: stream `t`
/// of the primary context is blocked on a value wait nothing satisfies yet, with an event
/// recorded behind it; a stream of an explicit context waits on that event, has a memset
/// queued behind the wait, and is stopped; every handle of it and of its context is dropped.
/// Its operations must fail, and the stream, its buffer and the context must go (destroyed on
/// the reaper or the dropping thread) while `t` is still blocked: nothing may wait for `t`.
/// A break: the reaper (and so `flush_releases`) hangs in a destroy that waits for the
/// stopped stream's waiting task, or the buffer stays allocated.
#[test]
fn a_context_whose_stopped_stream_waits_on_a_blocked_stream_goes_without_waiting() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let t = stream(&ctx, strategy);
        let word = Arc::new(ValueWord::new(&ctx, 0).unwrap());
        let blocked = t.wait_value(word.clone(), 1, ValueCondition::Equal);
        let event = Event::new(&ctx).unwrap();
        event.record(&t).unwrap();

        let explicit = ctx.device().create_context().unwrap();
        let s = stream(&explicit, strategy);
        s.wait_event(&event).unwrap();
        let memset = s.memset(DeviceBuffer::<u8>::new(&explicit, 4096).unwrap(), 1);
        let done = memset.completion().clone();
        drop(memset);
        s.stop().unwrap();
        drop((s, explicit, event));
        let failed = run(done.wait());
        assert!(
            failed.is_err(),
            "{strategy:?}: a stopped stream ran its memset"
        );
        watchdog("the releases after a stopped stream", sim::flush_releases);
        assert!(!blocked.is_complete(), "{strategy:?}: `t` is still blocked");
        until_released(
            &format!("{strategy:?}: the explicit context's buffer"),
            || {
                live_allocations(&ctx) <= baseline[0] + 1 // the word
            },
        );

        let other = stream(&ctx, strategy);
        run(other.write_value(word, 1)).unwrap();
        run(blocked).unwrap();
        run(t.synchronize()).unwrap();
        drop((t, other));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// Rules 5 and 7 for a Tokio runtime whose blocking threads die as they start (an
/// `on_thread_start` hook that panics, user code): `BlockingSync` waits queued on its pool
/// never run, so the overseer must hand them to the reactor; each operation must resolve with
/// its data, and a paused clock's keeper that never runs must not stop the operation either.
/// A break: an operation that never resolves (the test's bound), or a leak.
#[test]
fn operations_on_a_runtime_whose_blocking_threads_die_at_start_resolve() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for paused in [false, true] {
        for strategy in STRATEGIES {
            let s = stream(&ctx, strategy);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(paused)
                .on_thread_start(|| panic!("a blocking thread's start hook panics"))
                .build()
                .unwrap();
            let filled = rt.block_on(async {
                let mut buffers = Vec::new();
                for byte in 1..=3u8 {
                    let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), byte);
                    let buffer = tokio::time::timeout(HANG, op).await.expect("hung").unwrap();
                    buffers.push(buffer.to_vec_blocking().unwrap());
                }
                buffers
            });
            assert_eq!(filled, [[1; 64], [2; 64], [3; 64]], "{strategy:?} {paused}");
            drop((rt, s));
            until_released(&format!("{strategy:?} paused {paused}"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}
