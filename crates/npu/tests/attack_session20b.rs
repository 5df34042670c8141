//! Attacks of the twentieth session's second helper, through the `npu` facade: values a user
//! keeps in a `thread_local!` until the thread exits, dropped by its TLS destructors after
//! npu-rs's (and its dependencies') own thread-locals are gone; user code npu-rs runs on its
//! shared threads (a `Memory` whose drop calls npu-rs back on the reaper); and the ends of a
//! process (`std::process::exit` with work in flight and a held device).
//!
//! Each test names the promise it attacks. The thread-local and exit cases run in child
//! processes of their own (a panic in a TLS destructor aborts, and an exit ends the process);
//! the others take the file's device lock. Every wait is bounded.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use common::*;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Completion, Strategy};
use npu::{Event, Stream};

// ---- Child processes (an abort or an exit ends them). ----

const CHILD_ENV: &str = "NPU_ATTACK20B_CHILD";

/// Runs this file's `child` test in a child process with `case`.
fn in_child(case: &str) {
    in_child_test("child", CHILD_ENV, case);
}

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    child_case(&case);
    println!("CHILD OK");
}

/// User state whose drop runs `body`: npu-rs calls made from a TLS destructor.
struct OnDrop(Option<Box<dyn FnOnce()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(body) = self.0.take() {
            body();
        }
    }
}

fn on_drop(body: impl FnOnce() + 'static) -> Box<dyn std::any::Any> {
    Box::new(OnDrop(Some(Box::new(body))))
}

/// Installs the fmt subscriber at debug level, writing nowhere, as the process's default: a
/// common set-up, which keeps each thread's span stack in a `thread_local::ThreadLocal` (its
/// own TLS, registered at the thread's first span). The panics it raises from TLS destructors
/// are contained by npu-rs; the panic hook is muted so that they do not flood the output.
fn debug_fmt_subscriber() {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .init();
    std::panic::set_hook(Box::new(|_| {}));
}

fn child_case(case: &str) {
    match case {
        "subscriber-submits" => {
            debug_fmt_subscriber();
            let ctx = Device::open(0).unwrap().primary_context().clone();
            let baseline = live_memory(&ctx);
            for strategy in STRATEGIES {
                keep_on_a_thread_until_it_exits({
                    let ctx = ctx.clone();
                    move || {
                        let s = stream(&ctx, strategy);
                        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
                        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                        vec![
                            Box::new(op),
                            Box::new(SubmitsWhenDropped(s.clone())),
                            Box::new(s),
                        ]
                    }
                });
            }
            until_released("what the threads kept", || {
                within(live_memory(&ctx), baseline)
            });
        }
        "subscriber-polls" => {
            debug_fmt_subscriber();
            let ctx = Device::open(0).unwrap().primary_context().clone();
            let baseline = live_memory(&ctx);
            for strategy in STRATEGIES {
                keep_on_a_thread_until_it_exits({
                    let ctx = ctx.clone();
                    move || {
                        let s = stream(&ctx, strategy);
                        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
                        let kept = s.clone();
                        // Submitted (its span made) while the thread runs, polled from the
                        // destructor.
                        let mut early = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 6);
                        vec![on_drop(move || {
                            early.completion().clone().wait_blocking().unwrap();
                            match polled_once(std::pin::Pin::new(&mut early)) {
                                std::task::Poll::Ready(done) => drop(done.unwrap()),
                                std::task::Poll::Pending => panic!("complete, yet pending"),
                            }
                            // Submitted, waited for and polled to its value from the TLS
                            // destructor (a hand-rolled executor: no runtime is left).
                            let mut op = kept.memset(
                                DeviceBuffer::<u8>::new(&kept.context().clone(), 64).unwrap(),
                                3,
                            );
                            op.completion().clone().wait_blocking().unwrap();
                            let buffer = match polled_once(std::pin::Pin::new(&mut op)) {
                                std::task::Poll::Ready(done) => done.unwrap(),
                                std::task::Poll::Pending => panic!("complete, yet pending"),
                            };
                            assert_eq!(buffer.to_vec_blocking().unwrap(), vec![3u8; 64]);
                            // And one that fails.
                            let stopped = stream(kept.context(), strategy);
                            stopped.stop().unwrap();
                            let mut op = stopped
                                .memset(DeviceBuffer::<u8>::new(kept.context(), 64).unwrap(), 4);
                            let _ = op.completion().clone().wait_blocking();
                            match polled_once(std::pin::Pin::new(&mut op)) {
                                std::task::Poll::Ready(done) => assert!(done.is_err()),
                                std::task::Poll::Pending => panic!("complete, yet pending"),
                            }
                        })]
                    }
                });
            }
            until_released("what the threads kept", || {
                within(live_memory(&ctx), baseline)
            });
        }
        "blocking-calls" => {
            let ctx = Device::open(0).unwrap().primary_context().clone();
            let baseline = live_memory(&ctx);
            for strategy in STRATEGIES {
                keep_on_a_thread_until_it_exits({
                    let ctx = ctx.clone();
                    move || {
                        // npu-rs's thread-locals are registered by this work, after `KEPT`.
                        let s = stream(&ctx, strategy);
                        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
                        vec![on_drop(move || blocking_calls_from_a_destructor(strategy))]
                    }
                });
            }
            until_released("what the threads kept", || {
                within(live_memory(&ctx), baseline)
            });
        }
        "in-flight" => {
            let ctx = Device::open(0).unwrap().primary_context().clone();
            let baseline = live_memory(&ctx);
            for strategy in STRATEGIES {
                for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
                    let done: Arc<std::sync::Mutex<InFlight>> = Arc::default();
                    keep_on_a_thread_until_it_exits({
                        let (ctx, done) = (ctx.clone(), done.clone());
                        move || in_flight_values(&ctx, strategy, backend, &done)
                    });
                    let mut done = done.lock().unwrap();
                    let held = done.held.take().expect("the device was held");
                    assert!(
                        done.ops.iter().any(|op| !op.is_complete()),
                        "{strategy:?}: the device is held"
                    );
                    held.release().unwrap();
                    all_completed(&done.ops);
                }
            }
            until_released("what the threads kept", || {
                within(live_memory(&ctx), baseline)
            });
        }
        "exit-in-flight" => exit_with_work_in_flight(),
        "first-use-in-destructor" => {
            // Nothing of npu-rs has run in this process: the runtime, the simulator and the
            // shared threads all start from a TLS destructor.
            keep_on_a_thread_until_it_exits(|| {
                vec![on_drop(|| {
                    let ctx = Device::open(0).unwrap().primary_context().clone();
                    for strategy in STRATEGIES {
                        let s = stream(&ctx, strategy);
                        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                        op.completion().clone().wait_blocking().unwrap();
                        drop(op);
                        let pool = npu::PinnedPool::new(&ctx);
                        let block = pool.try_alloc::<u8>(64).unwrap().unwrap();
                        drop(s.copy_d2h(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), block));
                    }
                })]
            });
            let ctx = Device::open(0).unwrap().primary_context().clone();
            until_released("what the destructor made", || live_memory(&ctx) == [0, 0]);
        }
        other => panic!("unknown case {other}"),
    }
}

/// Ends the process with `std::process::exit` while the device is held for good: work queued
/// on every strategy, an abort waiting for the held device, a trace to write at exit, and in
/// the exiting thread's own thread-locals (which `exit` destroys) streams with operations in
/// flight, a current-thread Tokio runtime whose task awaits one, and a multi-thread runtime
/// whose tasks await `BlockingSync` operations on its blocking pool.
fn exit_with_work_in_flight() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let trace = std::env::temp_dir().join(format!("npu-attack20b-{}.json", std::process::id()));
    sim::trace::enable(&trace);
    touch_the_keeping_place();
    // Warm the pools and threads while the device runs.
    for strategy in STRATEGIES {
        run(stream(&ctx, strategy).memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0)).unwrap();
    }
    let held = sim::hold(&ctx.device()).unwrap();
    let mut kept: Vec<Box<dyn std::any::Any>> = Vec::new();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        kept.push(Box::new(
            s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1),
        ));
        let aborted = stream(&ctx, strategy);
        drop(aborted.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2));
        drop(aborted.abort());
        kept.push(Box::new(SubmitsWhenDropped(s.clone())));
        kept.push(Box::new(s));
    }
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = stream(&ctx, Strategy::EventPoll);
    let task = current.spawn(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3));
    current.block_on(tokio::task::yield_now());
    kept.extend([
        Box::new(task) as Box<dyn std::any::Any>,
        Box::new(current),
        Box::new(s),
    ]);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = stream(&ctx, Strategy::BlockingSync);
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..4 {
        let (s, ctx, tx) = (s.clone(), ctx.clone(), tx.clone());
        multi.spawn(async move {
            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4);
            let mut op = Box::pin(op);
            let _ = std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await;
            tx.send(()).unwrap();
            op.await
        });
    }
    for _ in 0..4 {
        rx.recv_timeout(HANG).expect("the tasks submitted");
    }
    kept.extend([Box::new(multi) as Box<dyn std::any::Any>, Box::new(s)]);
    keep_until_the_thread_exits(kept);
    std::mem::forget(held);
    println!("CHILD OK");
    std::process::exit(0);
}

/// Blocking npu-rs calls made from a TLS destructor: opening a device, new streams, events
/// and buffers, blocking copies and waits, pool allocations, a flush of the reaper.
fn blocking_calls_from_a_destructor(strategy: Strategy) {
    let device = Device::open(0).unwrap();
    let ctx = device.primary_context().clone();
    let explicit = device.create_context().unwrap();
    for ctx in [&ctx, &explicit] {
        let buffer = DeviceBuffer::from_host_blocking(ctx, &[5u32; 16]).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), vec![5u32; 16]);
        let s = stream(ctx, strategy);
        let op = s.memset(buffer.into_bytes(), 7);
        let done = op.completion().clone();
        drop(op);
        done.wait_blocking().unwrap();
        let event = Event::new(ctx).unwrap();
        event.record(&s).unwrap();
        let waiter = event.wait();
        drop(waiter);
        s.synchronize().completion().wait_blocking().unwrap();
        ctx.synchronize_blocking().unwrap();
        let mut word = npu::stream::ValueWord::new(ctx, 11).unwrap();
        assert_eq!(word.read_blocking().unwrap(), 11);
        let pinned = npu::PinnedPool::new(ctx);
        let block = pinned.try_alloc::<u8>(64).unwrap().unwrap();
        drop(block);
        let pool = DevicePool::new(ctx).unwrap();
        if let Some(block) = pool.try_alloc::<u8>(&s, 64).unwrap() {
            drop(s.memset(block, 1));
        }
        let mut polled = Box::pin(pool.alloc::<u8>(&s, 64));
        let _ = polled_once(polled.as_mut());
        drop(polled);
        sim::flush_releases();
    }
}

/// What the keeping thread leaves to the test: the hold it took and the operations to await.
#[derive(Default)]
struct InFlight {
    held: Option<sim::Hold>,
    ops: Vec<Completion>,
}

/// Values in flight on a held device, kept in a thread-local: operations, an event recorded
/// and waited for, pool waiters queued behind a full pool, a notify wait, value words.
fn in_flight_values(
    ctx: &Context,
    strategy: Strategy,
    backend: DevicePoolBackend,
    in_flight: &std::sync::Mutex<InFlight>,
) -> Vec<Box<dyn std::any::Any>> {
    let mut kept: Vec<Box<dyn std::any::Any>> = Vec::new();
    let s = stream(ctx, strategy);
    let other = stream(ctx, strategy);
    // Pools of one block each, whose blocks are taken before the device is held.
    let pool = DevicePool::builder(ctx)
        .capacity(4096)
        .backend(backend)
        .build()
        .unwrap();
    let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
    let pinned = npu::PinnedPool::builder(ctx)
        .capacity(4096)
        .build()
        .unwrap();
    let host = run(pinned.alloc::<u8>(4096)).unwrap();
    let mut in_flight = in_flight.lock().unwrap();
    in_flight.held = Some(sim::hold(&ctx.device()).unwrap());
    let done = &mut in_flight.ops;
    let op = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
    done.push(op.completion().clone());
    kept.push(Box::new(op));
    let event = Event::new(ctx).unwrap();
    event.record(&s).unwrap();
    other.wait_event(&event).unwrap();
    let mut wait = Box::pin(event.wait());
    let _ = polled_once(wait.as_mut());
    kept.push(Box::new(wait));
    kept.push(Box::new(event));
    let sync = other.synchronize();
    done.push(sync.completion().clone());
    let mut sync = Box::pin(sync);
    let _ = polled_once(sync.as_mut());
    kept.push(Box::new(sync));
    // The device pool's block lent to a dropped memset; a second request queued.
    let fill = s.memset(block, 9);
    done.push(fill.completion().clone());
    drop(fill);
    let mut queued = Box::pin({
        let (pool, s) = (pool.clone(), s.clone());
        async move { pool.alloc::<u8>(&s, 4096).await }
    });
    let _ = polled_once(queued.as_mut());
    kept.push(Box::new(queued));
    kept.push(Box::new(pool));
    // The pinned pool's block in flight; a second request queued.
    let copy = s.copy_d2h(DeviceBuffer::<u8>::new(ctx, 4096).unwrap(), host);
    done.push(copy.completion().clone());
    kept.push(Box::new(copy));
    let mut queued = Box::pin({
        let pinned = pinned.clone();
        async move { pinned.alloc::<u8>(4096).await }
    });
    let _ = polled_once(queued.as_mut());
    kept.push(Box::new(queued));
    kept.push(Box::new(pinned));
    // Signalling: a notify recorded after a wait on it, a value word stored and waited on.
    let notify = npu::stream::Notify::new(ctx).unwrap();
    let waited = other.wait_notify(&notify);
    done.push(waited.completion().clone());
    kept.push(Box::new(waited));
    let recorded = s.record_notify(&notify);
    done.push(recorded.completion().clone());
    kept.push(Box::new(recorded));
    let word = Arc::new(npu::stream::ValueWord::new(ctx, 0).unwrap());
    let waits = other.wait_value(word.clone(), 5, npu::stream::ValueCondition::Equal);
    done.push(waits.completion().clone());
    kept.push(Box::new(waits));
    let store = s.write_value(word, 5);
    done.push(store.completion().clone());
    kept.push(Box::new(store));
    kept.push(Box::new(s));
    kept.push(Box::new(other));
    kept
}

/// "Never a panic" for a thread-local value whose drop submits work, in a process with the
/// fmt subscriber at debug level: the thread's TLS destructors destroyed the subscriber's
/// per-thread span stack before the value is dropped.
#[test]
fn a_thread_local_value_submitting_under_a_debug_fmt_subscriber_does_not_abort() {
    in_child("subscriber-submits");
}

/// "Never a panic" for a thread-local value whose drop submits an operation, waits for it and
/// polls it to its value (and one that fails), under a debug-level fmt subscriber whose
/// per-thread state the thread's TLS destructors destroyed first: entering, recording into and
/// closing the operation's span run the subscriber there.
#[test]
fn a_thread_local_value_polling_operations_under_a_debug_fmt_subscriber_does_not_abort() {
    in_child("subscriber-polls");
}

/// "Never a panic", rule 5 and no leak for blocking npu-rs calls made from a TLS destructor
/// after npu-rs's own thread-locals are gone: opening a device, an explicit context, blocking
/// copies, a stream, a memset waited for, an event recorded and its wait dropped, a
/// synchronisation, a value word read, pinned and device pool allocations (one polled once and
/// dropped), a flush of the reaper. Every strategy.
#[test]
fn blocking_calls_from_a_thread_local_destructor_work() {
    in_child("blocking-calls");
}

/// Rules 2, 3 and 5 and "never a panic" for values in flight on a held device, kept in a
/// thread-local and dropped by the TLS destructors: operations, an event recorded and waited
/// for by a stream and by a polled future, a polled synchronisation, a device pool (each
/// backend) and a pinned pool whose one block is in flight with a second request queued and
/// polled, a notify waited on and recorded, a value word stored and waited on. Every
/// operation completes once the device is released, and nothing leaks.
#[test]
fn values_in_flight_kept_in_a_thread_local_are_released_after_the_device() {
    in_child("in-flight");
}

// ---- Wakers whose clone is user code that calls npu-rs back. ----

/// What a [`reentrant_waker`] does when cloned: polls (with a no-op waker) or drops a second
/// future waiting for the same operation.
struct CloneHook {
    other: std::sync::Mutex<Option<std::pin::Pin<Box<npu::stream::Wait>>>>,
    poll: bool,
    clones: AtomicUsize,
}

impl CloneHook {
    fn run(&self) {
        self.clones.fetch_add(1, Ordering::SeqCst);
        let mut other = self.other.lock().unwrap();
        if self.poll {
            if let Some(wait) = other.as_mut() {
                let _ = polled_once(wait.as_mut());
            }
        } else {
            drop(other.take());
        }
    }
}

static CLONE_HOOK_VTABLE: std::task::RawWakerVTable = std::task::RawWakerVTable::new(
    clone_hook_clone,
    clone_hook_noop,
    clone_hook_noop_ref,
    clone_hook_drop,
);

fn clone_hook_raw(hook: Arc<CloneHook>) -> std::task::RawWaker {
    std::task::RawWaker::new(Arc::into_raw(hook).cast(), &CLONE_HOOK_VTABLE)
}

unsafe fn clone_hook_clone(data: *const ()) -> std::task::RawWaker {
    // SAFETY: `data` came from `Arc::into_raw` in `clone_hook_raw`, and this waker still
    // owns its count.
    let hook = unsafe {
        Arc::increment_strong_count(data.cast::<CloneHook>());
        Arc::from_raw(data.cast::<CloneHook>())
    };
    hook.run();
    clone_hook_raw(hook)
}

unsafe fn clone_hook_noop(data: *const ()) {
    // SAFETY: as in `clone_hook_clone`; waking by value consumes the waker's count.
    drop(unsafe { Arc::from_raw(data.cast::<CloneHook>()) });
}

unsafe fn clone_hook_noop_ref(_: *const ()) {}

unsafe fn clone_hook_drop(data: *const ()) {
    // SAFETY: as in `clone_hook_clone`; the waker's count goes with it.
    drop(unsafe { Arc::from_raw(data.cast::<CloneHook>()) });
}

/// A waker whose clone polls or drops `other`.
fn reentrant_waker(
    other: std::pin::Pin<Box<npu::stream::Wait>>,
    poll: bool,
) -> (std::task::Waker, Arc<CloneHook>) {
    let hook = Arc::new(CloneHook {
        other: std::sync::Mutex::new(Some(other)),
        poll,
        clones: AtomicUsize::new(0),
    });
    // SAFETY: the vtable's functions keep the `Arc` count the waker owns balanced.
    let waker = unsafe { std::task::Waker::from_raw(clone_hook_raw(hook.clone())) };
    (waker, hook)
}

/// Rule 7 and "never a hang" for a waker whose clone is user code that touches the same
/// operation (docs/cancellation.md: wakers are cloned and dropped outside the completion's
/// lock): a future awaiting a held operation, an `Op` or a `Completion::wait`, polled with a
/// waker whose clone polls, or drops, a second future waiting for that operation. The poll
/// must return (pending), the clone must have run, and both futures (or the one left) must
/// resolve once the device is released. Every strategy.
#[test]
fn a_waker_whose_clone_polls_or_drops_a_future_of_the_same_operation_does_not_deadlock() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        for poll in [true, false] {
            for through_op in [false, true] {
                let what = format!("{strategy:?}, clone polls: {poll}, an Op: {through_op}");
                let s = stream(&ctx, strategy);
                let held = sim::hold(&ctx.device()).unwrap();
                let mut op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                let done = op.completion().clone();
                let (waker, hook) = reentrant_waker(Box::pin(done.wait()), poll);
                let mut first = Box::pin(done.wait());
                let (tx, rx) = std::sync::mpsc::channel();
                let polling = std::thread::spawn(move || {
                    let mut cx = std::task::Context::from_waker(&waker);
                    let pending = if through_op {
                        std::pin::Pin::new(&mut op).poll(&mut cx).is_pending()
                    } else {
                        first.as_mut().poll(&mut cx).is_pending()
                    };
                    tx.send(pending).unwrap();
                    (op, first, waker)
                });
                let pending = rx
                    .recv_timeout(HANG)
                    .unwrap_or_else(|_| panic!("{what}: the poll deadlocked in the waker's clone"));
                assert!(pending, "{what}: the device is held");
                let (op, first, waker) = polling.join().unwrap();
                assert!(hook.clones.load(Ordering::SeqCst) >= 1, "{what}: cloned");
                held.release().unwrap();
                run(async {
                    op.await.unwrap();
                    first.await.unwrap();
                    let other = hook.other.lock().unwrap().take();
                    if let Some(other) = other {
                        other.await.unwrap();
                    }
                });
                drop(waker);
            }
        }
    }
}

// ---- User code npu-rs runs on the reaper: a `Memory` whose drop calls npu-rs back. ----

/// Device memory whose drop, wherever it runs (the reaper, for the value of an operation
/// dropped in flight), calls npu-rs back without blocking: allocates, submits to its stream
/// and to a new one (dropping the operations), drops the new stream with its work queued,
/// records an event, opens a device, takes and returns pool blocks, flushes the reaper.
struct CallsBackWhenDropped {
    inner: Option<DeviceBuffer<u8>>,
    stream: Stream,
    pinned: npu::PinnedPool,
    pool: DevicePool,
    /// The threads its drop ran on.
    ran_on: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl Drop for CallsBackWhenDropped {
    fn drop(&mut self) {
        drop(self.inner.take());
        let thread = std::thread::current().name().map(str::to_owned);
        let ctx = self.stream.context().clone();
        drop(
            self.stream
                .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4),
        );
        let fresh = Stream::builder(&ctx)
            .strategy(self.stream.strategy())
            .build()
            .unwrap();
        drop(fresh.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5));
        let event = Event::new(&ctx).unwrap();
        event.record(&fresh).unwrap();
        drop(fresh);
        let device = Device::open(ctx.device_id()).unwrap();
        drop(device);
        if let Some(block) = self.pinned.try_alloc::<u8>(64).unwrap() {
            drop(
                self.stream
                    .copy_d2h(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), block),
            );
        }
        if let Some(block) = self.pool.try_alloc::<u8>(&self.stream, 64).unwrap() {
            drop(self.stream.memset(block, 6));
        }
        sim::flush_releases();
        self.ran_on.lock().unwrap().push(thread);
    }
}

// SAFETY: every method answers for the wrapped buffer, which it holds until dropped; the drop
// calls npu-rs back without blocking (it waits for nothing: `flush_releases` returns at once
// on the reaper).
unsafe impl npu::memory::Memory for CallsBackWhenDropped {
    type Elem = u8;
    fn context(&self) -> &Context {
        self.inner.as_ref().unwrap().context()
    }
    fn addr(&self) -> *const std::ffi::c_void {
        self.inner.as_ref().unwrap().addr()
    }
    fn len(&self) -> usize {
        self.inner.as_ref().unwrap().len()
    }
    fn record_use(&self, completion: &Completion) {
        npu::memory::Memory::record_use(self.inner.as_ref().unwrap(), completion)
    }
}

// SAFETY: as above.
unsafe impl npu::memory::MemoryMut for CallsBackWhenDropped {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        self.inner.as_mut().unwrap().addr_mut()
    }
}

// SAFETY: the wrapped buffer is device memory.
unsafe impl npu::memory::DeviceSlice for CallsBackWhenDropped {}

/// Rule 5 and 6 for user code on the reaper: the values of operations dropped under a held
/// device (a user `Memory`, alone and inside an `Arc` a second stream's copy shares) call
/// npu-rs back from their drops on the reaper (allocations, submissions, a new stream dropped
/// with work queued, an event, a device, pool blocks, a flush). The reaper must survive it and
/// keep serving: every drop runs once on the reaper, later releases still run, both streams
/// keep working, and nothing leaks once everything is done. Every strategy.
#[test]
fn a_memory_calling_npu_back_from_its_drop_on_the_reaper_stops_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let other = stream(&ctx, strategy);
        let pinned = npu::PinnedPool::new(&ctx);
        let pool = DevicePool::new(&ctx).unwrap();
        let ran_on: Arc<std::sync::Mutex<Vec<Option<String>>>> = Arc::default();
        let hostile = || CallsBackWhenDropped {
            inner: Some(DeviceBuffer::<u8>::new(&ctx, 64).unwrap()),
            stream: s.clone(),
            pinned: pinned.clone(),
            pool: pool.clone(),
            ran_on: ran_on.clone(),
        };
        let held = sim::hold(&ctx.device()).unwrap();
        let alone = s.memset(hostile(), 1);
        let shared = Arc::new(hostile());
        let read = other.copy_d2d(shared.clone(), DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
        let done = [alone.completion().clone(), read.completion().clone()];
        drop((alone, read, shared));
        sim::flush_releases();
        assert!(
            ran_on.lock().unwrap().is_empty(),
            "{strategy:?}: nothing dropped under the held device"
        );
        held.release().unwrap();
        all_completed(&done);
        until_released(&format!("{strategy:?}: both drops ran"), || {
            ran_on.lock().unwrap().len() == 2
        });
        assert!(
            ran_on
                .lock()
                .unwrap()
                .iter()
                .all(|thread| thread.as_deref() == Some("npu-reaper")),
            "{strategy:?}: {:?}",
            ran_on.lock().unwrap()
        );
        // The reaper serves later releases, and both streams work.
        for s in [&s, &other] {
            let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), vec![8u8; 64]);
            drop(s.memset(buffer, 9));
        }
        run(s.synchronize()).unwrap();
        run(other.synchronize()).unwrap();
        drop((s, other, pinned, pool));
        until_released(&format!("{strategy:?}: everything released"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// Rule 5 at the end of a process: `std::process::exit` with the device held for good, work
/// queued on every strategy, an abort waiting for the device, a trace to write at exit, and
/// streams, operations in flight, a current-thread runtime awaiting one and a multi-thread
/// runtime whose tasks await `BlockingSync` operations kept in the exiting thread's
/// thread-locals, which `exit` destroys. The process must end with status 0, without a crash
/// and without waiting for the device.
#[test]
fn exiting_the_process_with_work_in_flight_on_a_held_device_ends_it() {
    in_child("exit-in-flight");
}

/// "Never a panic" and no leak when npu-rs's first use in the process comes from a TLS
/// destructor: the runtime and the simulator are made, and the reaper, the reactor, the
/// sentinel and the callback workers started, from there; operations on every strategy
/// complete, and everything is released.
#[test]
fn npu_rs_first_used_from_a_thread_local_destructor_works() {
    in_child("first-use-in-destructor");
}
