//! Attacks by user code that npu-rs calls back while it may hold a lock or run on a thread it
//! shares: a tracing layer (installed globally, so this file is a process of its own) whose
//! callbacks call npu-rs again, and wakers that do.
//!
//! The layer runs a test's hook on whichever thread npu-rs (or the simulator) emits on; the
//! hook calls ordinary, non-blocking npu-rs functions (open a device, submit an operation,
//! read statistics). Every wait is bounded by [`watchdog`], which aborts the process with a
//! message naming the hang, so a deadlock fails the run instead of stalling it.

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::*;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;
use npu::{Op, Stream};
use tracing_subscriber::layer::SubscriberExt;

/// Where a layer callback was called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// `on_event`, with the event's target.
    Event(&'static str),
    /// `on_record` of a span field, with the first field's name.
    Record(&'static str),
    NewSpan,
    Enter,
    Exit,
    Close,
}

type Hook = Arc<dyn Fn(Point) + Send + Sync>;

static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

thread_local! {
    /// Set while this thread runs the hook: npu-rs called from the hook logs too.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn call_hook(point: Point) {
    if INSIDE.with(Cell::get) {
        return;
    }
    // Cloned out: the hook runs with none of this file's locks held.
    let hook = HOOK.lock().unwrap_or_else(|e| e.into_inner()).clone();
    /// Clears `INSIDE`, also when the hook panics.
    struct Outside;
    impl Drop for Outside {
        fn drop(&mut self) {
            INSIDE.with(|inside| inside.set(false));
        }
    }
    if let Some(hook) = hook {
        INSIDE.with(|inside| inside.set(true));
        let _outside = Outside;
        hook(point);
    }
}

struct Reentrant;

struct FirstField(Option<&'static str>);

impl tracing::field::Visit for FirstField {
    fn record_debug(&mut self, field: &tracing::field::Field, _: &dyn std::fmt::Debug) {
        self.0.get_or_insert(field.name());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Reentrant {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        call_hook(Point::Event(event.metadata().target()));
    }
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        call_hook(Point::NewSpan);
    }
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut first = FirstField(None);
        values.record(&mut first);
        call_hook(Point::Record(first.0.unwrap_or("")));
    }
    fn on_enter(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        call_hook(Point::Enter);
    }
    fn on_exit(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        call_hook(Point::Exit);
    }
    fn on_close(&self, _: tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        call_hook(Point::Close);
    }
}

/// Installs the layer (once per process) and six simulated devices, and serialises the
/// tests: the hook, the hold gate and lost devices are process-wide (a test that loses a
/// device uses devices no other test opens).
fn exclusive() -> MutexGuard<'static, ()> {
    static ONCE: OnceLock<()> = OnceLock::new();
    static TESTS: Mutex<()> = Mutex::new(());
    ONCE.get_or_init(|| {
        sim::SimConfig::default().devices(6).install().unwrap();
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry()
                .with(Reentrant)
                .with(tracing_subscriber::filter::LevelFilter::TRACE),
        )
        .unwrap();
    });
    let guard = TESTS.lock().unwrap_or_else(|e| e.into_inner());
    set_hook(None);
    guard
}

/// A stream of `ctx` whose context a `FailureMode::Stop` fault has stopped: its first memset
/// failed, and every later submission is refused by the runtime (which logs the refusal from
/// inside the call, under the stream's submission lock).
fn a_stopped_stream(ctx: &Context, strategy: Strategy) -> Stream {
    let s = stream(ctx, strategy);
    s.set_failure_mode(npu::FailureMode::Stop).unwrap();
    sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
    let failed = watchdog("the faulting memset", || {
        run(s.memset(DeviceBuffer::<u8>::new(ctx, 16).unwrap(), 1))
    });
    assert!(failed.is_err());
    s
}

fn set_hook(hook: Option<Hook>) {
    *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// A layer that submits to a stream when npu-rs records a field of that stream's operation
/// span. The submission path records `direction` (copies) while it holds the stream's
/// submission lock: a second submission to the same stream from there, on the same thread,
/// must not wait for that lock for ever.
#[test]
fn a_layer_submitting_from_an_operation_span_record_does_not_deadlock() {
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let inner: Arc<Mutex<Vec<Op<DeviceBuffer<u8>>>>> = Arc::default();
        let fired = Arc::new(AtomicUsize::new(0));
        let submitter = std::thread::current().id();
        let (hook_stream, hook_ctx, ops, count) =
            (s.clone(), ctx.clone(), inner.clone(), fired.clone());
        set_hook(Some(Arc::new(move |point| {
            if point == Point::Record("direction")
                && std::thread::current().id() == submitter
                && count.fetch_add(1, Ordering::SeqCst) == 0
            {
                let buffer = DeviceBuffer::<u8>::new(&hook_ctx, 16).unwrap();
                ops.lock().unwrap().push(hook_stream.memset(buffer, 5));
            }
        })));
        let src = PinnedBuffer::from_slice(&ctx, &[7u8; 16]).unwrap();
        let dst = DeviceBuffer::<u8>::new(&ctx, 16).unwrap();
        let copied = watchdog(
            &format!("{strategy:?}: a copy whose span record submits"),
            || run(s.copy_h2d(src, dst)).map_err(|e| e.error),
        );
        set_hook(None);
        assert_eq!(
            fired.load(Ordering::SeqCst),
            1,
            "{strategy:?}: the hook never ran"
        );
        let (_, dst) = copied.expect("the outer copy");
        assert_eq!(dst.to_vec_blocking().unwrap(), [7; 16]);
        let op = inner.lock().unwrap().pop().expect("the inner submission");
        // Queued or refused, it resolves.
        let _ = watchdog("the inner submission", || run(op));
        watchdog("the stream afterwards", || {
            let buffer = DeviceBuffer::<u8>::new(&ctx, 16).unwrap();
            let buffer = run(s.memset(buffer, 9)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [9; 16]);
        });
    }
}

/// A layer that submits to a stream whenever anything is logged on the submitting thread,
/// while a submission to that stream is refused by the runtime: a context that a
/// `FailureMode::Stop` fault stopped refuses the ACL call, and the simulator logs the failure
/// from inside it, under the stream's submission lock.
#[test]
fn a_layer_submitting_when_a_refused_submission_is_logged_does_not_deadlock() {
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = a_stopped_stream(&ctx, strategy);
        let inner: Arc<Mutex<Vec<Op<DeviceBuffer<u8>>>>> = Arc::default();
        let submitter = std::thread::current().id();
        let (hook_stream, hook_ctx, ops) = (s.clone(), ctx.clone(), inner.clone());
        set_hook(Some(Arc::new(move |point| {
            if matches!(point, Point::Event(_))
                && std::thread::current().id() == submitter
                && let Ok(buffer) = DeviceBuffer::<u8>::new(&hook_ctx, 16)
            {
                ops.lock().unwrap().push(hook_stream.memset(buffer, 5));
            }
        })));
        let refused = watchdog(&format!("{strategy:?}: a refused memset"), || {
            run(s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 2))
        });
        set_hook(None);
        assert!(
            refused.is_err(),
            "{strategy:?}: a stopped context refuses work"
        );
        for op in inner.lock().unwrap().drain(..) {
            assert!(watchdog("a hook's submission", || run(op)).is_err());
        }
    }
}

/// A layer that calls `aclrtDeviceTaskAbort` of the device (through the raw API) when a
/// refused submission is logged, from inside it: npu-rs's device task abort callback, on the
/// same thread, would mark the stream's work under the submission lock that thread holds. It
/// refuses the abort instead (the runtime then discards nothing: 107035), and the submission
/// resolves. Taking the lock as `Stream::abort` does would wait for itself for ever.
#[test]
fn a_layer_aborting_the_device_from_inside_a_submission_is_refused() {
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    let abort = ctx.runtime().api().aclrtDeviceTaskAbort;
    let abort = abort.expect("npu-sim exports aclrtDeviceTaskAbort");
    for strategy in STRATEGIES {
        let s = a_stopped_stream(&ctx, strategy);
        let code: Arc<Mutex<Option<i32>>> = Arc::default();
        let submitter = std::thread::current().id();
        let (seen, device) = (code.clone(), ctx.device_id() as i32);
        set_hook(Some(Arc::new(move |point| {
            let mut seen = seen.lock().unwrap();
            // The simulator's log of the refused call, made inside it.
            if point == Point::Event("npu_sim")
                && std::thread::current().id() == submitter
                && seen.is_none()
            {
                // SAFETY: a plain call on a device this test opened, with a bounded timeout.
                *seen = Some(unsafe { abort(device, 1000) });
            }
        })));
        let buffer = DeviceBuffer::<u8>::new(&ctx, 16).unwrap();
        let refused = watchdog(&format!("{strategy:?}: a refused memset"), || {
            run(s.memset(buffer, 2))
        });
        set_hook(None);
        assert!(
            refused.is_err(),
            "{strategy:?}: a stopped context refuses work"
        );
        let code = code.lock().unwrap().take();
        assert_eq!(
            code,
            Some(npu::ffi::ACL_ERROR_RT_TASK_ABORT_STOP),
            "{strategy:?}: the abort from inside the submission"
        );
    }
}

/// A layer that drops the last handle of a stream while npu-rs's device task abort callback
/// looks at it: the callback asks the query of a stream a `FailureMode::Stop` fault stopped,
/// the simulator logs the failed query on the aborting thread, and the hook drops the handle
/// there. The callback's own reference is then the stream's last; dropping it where it is
/// would destroy the stream inside the runtime's abort, on the caller's thread, binding the
/// stream's context over the caller's current one. The caller's context stays current.
#[test]
fn a_layer_dropping_a_stream_during_a_device_task_abort_leaves_the_callers_context() {
    let _guard = exclusive();
    let device = Device::open(0).unwrap();
    let (callers, streams) = (
        device.create_context().unwrap(),
        device.create_context().unwrap(),
    );
    let api = callers.runtime().api();
    let abort = api
        .aclrtDeviceTaskAbort
        .expect("npu-sim exports aclrtDeviceTaskAbort");
    let current = api.aclrtGetCurrentContext;
    for strategy in STRATEGIES {
        let s = a_stopped_stream(&streams, strategy);
        let slot = Arc::new(Mutex::new(Some(s)));
        let (held, aborting) = (slot.clone(), std::thread::current().id());
        set_hook(Some(Arc::new(move |point| {
            if point == Point::Event("npu_sim") && std::thread::current().id() == aborting {
                drop(held.lock().unwrap().take());
            }
        })));
        callers.bind().unwrap();
        // SAFETY: a plain call on a device this test opened, with a bounded timeout.
        let code = watchdog(&format!("{strategy:?}: the abort"), || unsafe {
            abort(device.id() as i32, 1000)
        });
        set_hook(None);
        assert_eq!(code, 0, "{strategy:?}: the device task abort");
        assert!(
            slot.lock().unwrap().is_none(),
            "{strategy:?}: the hook never dropped the stream"
        );
        let mut bound = std::ptr::null_mut();
        // SAFETY: `bound` is a valid out-pointer.
        assert_eq!(unsafe { current(&mut bound) }, 0);
        assert_eq!(
            bound,
            callers.as_raw(),
            "{strategy:?}: the caller's context"
        );
        sim::flush_releases();
    }
}

/// A layer that opens a device when anything is logged (the simulator logs each failed
/// call). npu-core enables and disables peer access under its runtime-wide lock, with the ACL
/// call inside; on a lost device the disable fails and the simulator logs it there. The hook
/// must not find that lock held by its own thread for ever: every thread that opens a device
/// or drops a peer guard (the reaper, after a cross-device copy) would wait behind it.
#[test]
fn a_layer_opening_a_device_when_a_peer_access_disable_fails_does_not_deadlock() {
    let _guard = exclusive();
    let (d2, d3) = (Device::open(2).unwrap(), Device::open(3).unwrap());
    let access = d3.enable_peer_access(&d2).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    set_hook(Some(Arc::new(move |point| {
        if let Point::Event(_) = point {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = Device::open(0);
        }
    })));
    sim::lose(&d3).unwrap();
    watchdog("dropping a peer guard of a lost device", || drop(access));
    set_hook(None);
    // npu-core logs the failed disable (after unlocking).
    assert!(fired.load(Ordering::SeqCst) >= 1, "nothing was logged");
    // The runtime's lock is free: another thread opens a device.
    watchdog("opening a device afterwards", || {
        std::thread::spawn(|| Device::open(1).map(drop))
            .join()
            .unwrap()
            .unwrap()
    });
}

/// The same layer, when the disable happens on the reaper: a cross-device copy holds a guard
/// on its peer access until it completes, and the reaper drops it. If the device that holds
/// the access is lost meanwhile, the disable fails under the runtime's lock there, and a hook
/// that opens a device must not stop the reaper, which runs every deferred release of the
/// process.
#[test]
fn a_layer_opening_a_device_when_the_reaper_disables_a_lost_peer_access_does_not_stop_it() {
    let _guard = exclusive();
    // Devices of its own: a lost device stays lost for the rest of the process, and the test
    // that loses device 3 opens device 2, in whichever order the two take the lock.
    let (d1, d2) = (Device::open(4).unwrap(), Device::open(5).unwrap());
    let (c1, c2) = (d1.primary_context().clone(), d2.primary_context().clone());
    let access = d2.enable_peer_access(&d1).unwrap();
    let s = stream(&c2, Strategy::EventPoll);
    let hold = sim::hold(&d2).unwrap();
    let src = DeviceBuffer::<u8>::new(&c1, 64).unwrap();
    let dst = DeviceBuffer::<u8>::new(&c2, 64).unwrap();
    let copy = s.copy_d2d(src, dst);
    drop(access); // the copy's own guard keeps the access enabled
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    set_hook(Some(Arc::new(move |point| {
        if let Point::Event(_) = point {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = Device::open(0);
        }
    })));
    sim::lose(&d2).unwrap();
    drop(hold);
    let failed = watchdog("the copy on the lost device", || {
        run(copy).map_err(|e| e.error)
    });
    assert!(failed.is_err(), "a lost device's copy fails");
    // The copy's guard went to the reaper with its completion.
    watchdog(
        "the reaper, after dropping the copy's peer guard",
        sim::flush_releases,
    );
    set_hook(None);
    assert!(fired.load(Ordering::SeqCst) >= 1, "nothing was logged");
    // A release on a healthy device still runs.
    let c0 = Device::open(0).unwrap().primary_context().clone();
    let s0 = stream(&c0, Strategy::EventPoll);
    let held = sim::hold(&Device::open(0).unwrap()).unwrap();
    let pending = s0.memset(DeviceBuffer::<u8>::new(&c0, 64).unwrap(), 1);
    drop(pending); // its buffer is released on the reaper once the memset completes
    drop(held);
    watchdog("a later release on a healthy device", || {
        run(s0.synchronize()).unwrap();
        sim::flush_releases();
    });
}

/// The child half of [`a_layer_calling_npu_rs_on_the_first_use_does_not_deadlock`]: a fresh
/// process whose layer, installed before anything touched a device, asks for the device count
/// on every event. The first use logs (the simulator's start, `NPU_BACKEND=auto` falling back
/// to it) while the process-wide runtime is being made.
#[test]
fn first_use_child() {
    if std::env::var_os("NPU_REENTRANCY_CHILD").is_none() {
        return;
    }
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(Reentrant)
            .with(tracing_subscriber::filter::LevelFilter::TRACE),
    )
    .unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    set_hook(Some(Arc::new(move |point| {
        if let Point::Event(_) = point {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = Device::count();
            let _ = sim::host_stats();
            let _ = npu::Runtime::builder()
                .backend(npu::BackendChoice::Sim)
                .build();
        }
    })));
    let device = Device::open(0).unwrap();
    let s = Stream::new(device.primary_context()).unwrap();
    run(s.synchronize()).unwrap();
    assert!(
        fired.load(Ordering::SeqCst) >= 1,
        "nothing was logged on the first use"
    );
    println!("CHILD OK");
}

#[test]
fn a_layer_calling_npu_rs_on_the_first_use_does_not_deadlock() {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "first_use_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("NPU_REENTRANCY_CHILD", "1")
        .env_remove("NPU_BACKEND")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child_succeeded(child, HANG, "the first use");
}

/// Wakers that call npu-rs back from the thread that completes their operation (the reactor,
/// a callback worker, a blocking waiter): each `wake` submits the next operation of a chain
/// to the same stream and polls it with a waker like itself, and each waker's drop drops the
/// last handle of a stream of its own (so destroys it there) and a pinned pool buffer.
#[test]
fn wakers_that_submit_and_destroy_streams_from_the_completing_thread_do_not_stall_it() {
    use std::task::{Context as TaskContext, Wake, Waker};

    const CHAIN: usize = 40;

    struct Chain {
        ctx: Context,
        stream: Stream,
        strategy: Strategy,
        pool: npu::PinnedPool,
        left: AtomicUsize,
        ops: Mutex<Vec<Op<DeviceBuffer<u8>>>>,
        threads: Mutex<Vec<String>>,
    }

    struct Hostile {
        chain: Arc<Chain>,
        side: Mutex<Option<Stream>>,
        buffer: Mutex<Option<npu::memory::PooledBuffer<u8>>>,
    }

    impl Hostile {
        fn waker(chain: &Arc<Chain>) -> Waker {
            let side = stream(&chain.ctx, chain.strategy);
            // The side stream ran work, so a callback stream is subscribed to its worker.
            drop(side.memset(DeviceBuffer::<u8>::new(&chain.ctx, 8).unwrap(), 0));
            Waker::from(Arc::new(Hostile {
                chain: chain.clone(),
                side: Mutex::new(Some(side)),
                buffer: Mutex::new(chain.pool.try_alloc::<u8>(64).ok().flatten()),
            }))
        }
    }

    impl Wake for Hostile {
        fn wake(self: Arc<Self>) {
            let chain = &self.chain;
            let name = std::thread::current().name().unwrap_or("?").to_owned();
            chain.threads.lock().unwrap().push(name);
            let _ = npu::stream::reactor_stats();
            // The next link; one that is complete when first polled will never wake, so the
            // chain goes on here.
            // Saturating: a waker may be woken more than once (spurious wake-ups are legal).
            let take = |left: usize| left.checked_sub(1);
            while matches!(
                chain.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, take),
                Ok(left) if left > 1
            ) {
                let buffer = DeviceBuffer::<u8>::new(&chain.ctx, 64).unwrap();
                let mut op = chain.stream.memset(buffer, 3);
                let waker = Hostile::waker(chain);
                let polled = std::pin::Pin::new(&mut op).poll(&mut TaskContext::from_waker(&waker));
                chain.ops.lock().unwrap().push(op);
                if polled.is_pending() {
                    break;
                }
            }
        }
    }

    impl Drop for Hostile {
        fn drop(&mut self) {
            // The last handles: the stream is destroyed on whichever thread drops the waker.
            drop(self.side.lock().unwrap().take());
            drop(self.buffer.lock().unwrap().take());
        }
    }

    use std::future::Future;
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let chain = Arc::new(Chain {
            ctx: ctx.clone(),
            stream: stream(&ctx, strategy),
            strategy,
            pool: npu::PinnedPool::new(&ctx),
            left: AtomicUsize::new(CHAIN),
            ops: Mutex::default(),
            threads: Mutex::default(),
        });
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _entered = tokio.enter();
        let mut first = chain
            .stream
            .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
        let waker = Hostile::waker(&chain);
        let polled = std::pin::Pin::new(&mut first).poll(&mut TaskContext::from_waker(&waker));
        if polled.is_ready() {
            waker.wake_by_ref(); // done before it was polled: start the chain here
        }
        drop(waker);
        watchdog(
            &format!("{strategy:?}: a chain of wakers that submit"),
            || {
                first.completion().wait_blocking().unwrap();
                // A waker runs just after its operation is seen complete: wait for the chain to
                // end (the watchdog bounds it).
                while chain.left.load(Ordering::SeqCst) > 0 {
                    let last = chain
                        .ops
                        .lock()
                        .unwrap()
                        .last()
                        .map(|op| op.completion().clone());
                    if let Some(done) = last {
                        done.wait_blocking().unwrap();
                    }
                    std::thread::yield_now();
                }
                // Everything the wakers submitted resolves, and the stream still works.
                let ops: Vec<_> = chain.ops.lock().unwrap().drain(..).collect();
                for op in ops {
                    op.completion().wait_blocking().unwrap();
                    drop(op);
                }
                let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
                let buffer = run(chain.stream.memset(buffer, 9)).unwrap();
                assert_eq!(buffer.to_vec_blocking().unwrap(), [9; 64]);
                sim::flush_releases();
            },
        );
        assert_eq!(
            chain.left.load(Ordering::SeqCst),
            0,
            "{strategy:?}: the chain stopped"
        );
        drop(first);
        let threads = chain.threads.lock().unwrap().clone();
        eprintln!("{strategy:?}: woken on {:?}", {
            let mut t = threads;
            t.sort();
            t.dedup();
            t
        });
    }
}

/// Everything at once: a layer that, on every callback on every thread (events, span
/// creation, records, enters, exits, closes), opens a device, reads the reactor's statistics,
/// allocates and drops device, pinned-pool and device-pool memory and submits (and drops) an
/// operation on a stream of its own, while tasks on every strategy copy, set, record and wait
/// for events, fault, stop, abort and allocate from small pools whose waiters are served by
/// the reaper.
#[test]
fn a_layer_calling_npu_rs_back_on_every_callback_of_every_thread_harms_nothing() {
    struct Side {
        ctx: Context,
        stream: Stream,
        pool: npu::PinnedPool,
        device_pool: npu::DevicePool,
    }
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let side = Arc::new(Side {
        ctx: ctx.clone(),
        stream: stream(&ctx, Strategy::EventPoll),
        pool: npu::PinnedPool::new(&ctx),
        device_pool: npu::DevicePool::new(&ctx).unwrap(),
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let threads: Arc<Mutex<Vec<String>>> = Arc::default();
    let (hook_side, count, seen) = (side.clone(), calls.clone(), threads.clone());
    set_hook(Some(Arc::new(move |_point| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        if n % 64 == 0 {
            let name = std::thread::current().name().unwrap_or("?").to_owned();
            let mut seen = seen.lock().unwrap();
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        let _ = npu::stream::reactor_stats();
        let _ = Device::open(0);
        if let Ok(buffer) = DeviceBuffer::<u8>::new(&hook_side.ctx, 16) {
            // At most a few thousand: each takes a pooled event until it completes.
            if n < 4000 {
                drop(hook_side.stream.memset(buffer, 1));
            }
        }
        drop(hook_side.pool.try_alloc::<u8>(64));
        drop(hook_side.device_pool.try_alloc::<u8>(&hook_side.stream, 64));
    })));
    for strategy in STRATEGIES {
        watchdog(
            &format!("{strategy:?}: work under a reentrant layer"),
            || {
                let faulting = Device::open(1).unwrap().create_context().unwrap();
                let pool = npu::PinnedPool::builder(&ctx)
                    .capacity(2 * 4096)
                    .build()
                    .unwrap();
                let device_pool = npu::DevicePool::builder(&ctx)
                    .capacity(2 * 4096)
                    .build()
                    .unwrap();
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let mut tasks = tokio::task::JoinSet::new();
                    for task in 0..6u8 {
                        let (ctx, faulting) = (ctx.clone(), faulting.clone());
                        let (pool, device_pool) = (pool.clone(), device_pool.clone());
                        tasks.spawn(async move {
                            let s = stream(&ctx, strategy);
                            let f = stream(&faulting, strategy);
                            let event = npu::Event::new(&ctx).unwrap();
                            for round in 0..20u8 {
                                let mut host = pool.alloc::<u8>(4096).await.unwrap();
                                host.fill(round ^ task);
                                let dev = device_pool.alloc::<u8>(&s, 4096).await.unwrap();
                                let (host, dev) = s.copy_h2d(host, dev).await.unwrap();
                                event.record(&s).unwrap();
                                event.wait().await.unwrap();
                                let (dev, mut host) = s.copy_d2h(dev, host).await.unwrap();
                                assert!(host.iter().all(|&b| b == round ^ task));
                                host.fill(0);
                                drop((dev, host));
                                // A dropped operation, and a task failure on another context.
                                drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
                                if round % 5 == 0 {
                                    sim::fail_task(&f, 1, npu::AclCode(507015)).unwrap();
                                    let failed = f
                                        .memset(DeviceBuffer::<u8>::new(&faulting, 64).unwrap(), 2)
                                        .await;
                                    assert!(failed.is_err());
                                    assert!(f.synchronize().await.is_err());
                                }
                                if round % 7 == 3 {
                                    let queued =
                                        s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
                                    s.abort().await.unwrap();
                                    let _ = queued.await;
                                }
                            }
                            s.synchronize().await.unwrap();
                        });
                    }
                    while let Some(done) = tasks.join_next().await {
                        done.unwrap();
                    }
                });
                drop(rt);
                sim::flush_releases();
            },
        );
    }
    set_hook(None);
    watchdog("the side stream", || {
        run(side.stream.synchronize()).unwrap()
    });
    let seen = threads.lock().unwrap().clone();
    eprintln!(
        "the layer ran {} times, on {seen:?}",
        calls.load(Ordering::SeqCst)
    );
    assert!(calls.load(Ordering::SeqCst) > 0);
}

/// A layer that panics when the submitting thread leaves an operation's span: the submission
/// runs inside the span, and leaving it is the subscriber's code, run after the device
/// accepted the work. A panic there must not drop the operation's value early: an `Arc` the
/// operation shares stays shared (rule 2) until the device is done with it.
#[test]
fn a_layer_panicking_as_a_submission_leaves_its_span_does_not_release_the_operations_value() {
    let _guard = exclusive();
    let device = Device::open(0).unwrap();
    let ctx = device.primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let mut shared = Arc::new(DeviceBuffer::from_host_blocking(&ctx, &[7u8; 64]).unwrap());
        let dst = PinnedBuffer::<u8>::new(&ctx, 64).unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let (fire, submitter) = (armed.clone(), std::thread::current().id());
        set_hook(Some(Arc::new(move |point| {
            if point == Point::Exit
                && std::thread::current().id() == submitter
                && fire.swap(false, Ordering::SeqCst)
            {
                panic!("a layer that panics on leaving a span");
            }
        })));
        let hold = sim::hold(&device).unwrap();
        armed.store(true, Ordering::SeqCst);
        let submitted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.copy_d2h(shared.clone(), dst)
        }));
        set_hook(None);
        assert!(
            !armed.load(Ordering::SeqCst),
            "{strategy:?}: the layer never ran"
        );
        // The copy is queued behind the hold: its clone must still be held.
        let still_shared = Arc::get_mut(&mut shared).is_none();
        drop(hold);
        let copied = submitted
            .ok()
            .map(|op| watchdog("the copy", || run(op).map_err(|e| e.error)));
        assert!(
            still_shared,
            "{strategy:?}: the queued copy's Arc clone was dropped while the device may read it"
        );
        let (_, dst) = copied
            .expect("the submission returned its operation")
            .unwrap();
        assert_eq!(&dst[..], &[7u8; 64][..]);
        watchdog("the stream afterwards", || run(s.synchronize()).unwrap());
    }
}

/// A layer that flushes the reaper (`npu::sim::flush_releases`) when anything is logged on the
/// reaper thread: the flush waits for releases that only the reaper runs, so on the reaper it
/// would wait for itself, and every deferred release of the process after it.
#[test]
fn a_layer_flushing_the_reaper_from_the_reaper_does_not_stop_it() {
    let _guard = exclusive();
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    set_hook(Some(Arc::new(move |point| {
        if matches!(point, Point::Event(_)) && std::thread::current().name() == Some("npu-reaper") {
            count.fetch_add(1, Ordering::SeqCst);
            sim::flush_releases();
        }
    })));
    // A release that panics: the reaper contains it and logs it, on the reaper.
    // SAFETY: the release panics at once; it does not block.
    unsafe { npu::reaper::release_later(|| panic!("a release that panics")) };
    watchdog("a flush after the reaper's log", sim::flush_releases);
    set_hook(None);
    assert!(
        fired.load(Ordering::SeqCst) >= 1,
        "nothing was logged on the reaper"
    );
    // Later releases still run.
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let s = stream(&ctx, Strategy::EventPoll);
    drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
    watchdog("a later release", || {
        run(s.synchronize()).unwrap();
        sim::flush_releases();
    });
}

/// The child half of [`a_layer_reading_host_statistics_when_mlock_fails_does_not_deadlock`]:
/// a process that may not lock memory, whose layer reads the simulator's host statistics
/// whenever the simulator logs. Registering pinned host memory then fails to `mlock`, and the
/// simulator warns about it (once per process).
#[test]
fn mlock_child() {
    if std::env::var_os("NPU_REENTRANCY_MLOCK_CHILD").is_none() {
        return;
    }
    let _guard = exclusive();
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    set_hook(Some(Arc::new(move |point| {
        if let Point::Event(target) = point
            && target.starts_with("npu_sim")
        {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = sim::host_stats();
        }
    })));
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let buffer = npu::memory::PageAlignedBuffer::<u8>::new(4096).unwrap();
    let registered = watchdog("registering pinned host memory", || {
        npu::memory::HostRegistration::new(&ctx, buffer, npu::memory::RegisterFlags::PINNED)
    });
    set_hook(None);
    let registered = registered.unwrap();
    let stats = watchdog("the host statistics afterwards", sim::host_stats).unwrap();
    assert_eq!(stats.registrations, 1);
    drop(registered);
    if fired.load(Ordering::SeqCst) == 0 {
        println!("MLOCK NOT REFUSED");
    }
    println!("CHILD OK");
}

/// npu-sim warned about a failed `mlock` while holding its table of host registrations, and
/// reading the host statistics takes that table: a layer doing so deadlocked the registering
/// thread, and every later copy from registered or pinned memory with it.
#[test]
fn a_layer_reading_host_statistics_when_mlock_fails_does_not_deadlock() {
    let exe = std::env::current_exe().unwrap();
    // Root locks memory whatever the limit: drop the capability where `setpriv` can.
    let script = "ulimit -l 0; exec \"$0\" --exact mlock_child --nocapture --test-threads=1";
    let mut command = match std::process::Command::new("setpriv")
        .arg("--version")
        .output()
    {
        Ok(_) => {
            let mut command = std::process::Command::new("setpriv");
            command.args([
                "--bounding-set=-ipc_lock",
                "--inh-caps=-ipc_lock",
                "sh",
                "-c",
            ]);
            command
        }
        Err(_) => {
            let mut command = std::process::Command::new("sh");
            command.arg("-c");
            command
        }
    };
    let child = command
        .arg(script)
        .arg(exe)
        .env("NPU_REENTRANCY_MLOCK_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Past the child's own watchdog, which says what hung.
    let bound = HANG + Duration::from_secs(10);
    let out = child_succeeded(child, bound, "registering host memory");
    if out.contains("MLOCK NOT REFUSED") {
        eprintln!("mlock was not refused in the child: the attack did not run here");
    }
}

/// A layer that records an event again when the record's operation span opens: the record
/// holds the event's recording lock while it submits, so the nested record of the same event
/// is refused (a typed error) instead of waiting for itself; the outer record stands.
#[test]
fn a_layer_recording_the_same_event_from_inside_its_record_is_refused() {
    let _guard = exclusive();
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let event = Arc::new(npu::Event::new(&ctx).unwrap());
        let nested: Arc<Mutex<Vec<npu::Result<()>>>> = Arc::default();
        let submitter = std::thread::current().id();
        let (hook_event, hook_stream, results) = (event.clone(), s.clone(), nested.clone());
        let armed = Arc::new(AtomicBool::new(true));
        let fire = armed.clone();
        set_hook(Some(Arc::new(move |point| {
            if point == Point::NewSpan
                && std::thread::current().id() == submitter
                && fire.swap(false, Ordering::SeqCst)
            {
                results
                    .lock()
                    .unwrap()
                    .push(hook_event.record(&hook_stream));
            }
        })));
        let outer = watchdog("a record whose span records again", || event.record(&s));
        set_hook(None);
        outer.unwrap();
        let nested = nested.lock().unwrap().pop().expect("the layer ran");
        assert!(
            nested.is_err(),
            "{strategy:?}: the nested record was not refused"
        );
        watchdog("the event afterwards", || run(event.wait()).unwrap());
    }
}
