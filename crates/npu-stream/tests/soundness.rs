//! Regression tests for the ways the public API once broke npu-rs's soundness and liveness
//! promises (docs/cancellation.md). Each test attacks one promise through the public API only:
//! it holds the simulated device (or a kernel) so the device is provably not done, then does
//! the worst thing a user could at that moment, and checks that nothing was freed, shared or
//! blocked early. Waits are bounded by watchdogs, never used as synchronisation.
//!
//! Its own process: the tests close device hold gates and lose no device, but they assume no
//! other test file shares the simulator. Within the file they run one at a time.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::task::{Context as TaskContext, Wake, Waker};
use std::thread;
use std::time::Duration;

use common::{HANG, STRATEGIES, blocking_pool, in_process, invalid, stream};
use npu_core::{AclCode, Context, Device, Function, Module, ffi};
use npu_mem::{DeviceBuffer, PinnedBuffer, PinnedPool};
use npu_sim::control;
use npu_stream::{Event, FailureMode, Op, Strategy, Stream};

/// A watchdog: how long something that must not block may take before the test fails. It is
/// never waited out when the code is right.
const WATCHDOG: Duration = Duration::from_secs(20);
/// How long a test watches for something that must *not* happen (a future resolving while the
/// device provably still runs its work). Correct code never resolves in it, so it cannot flake.
const MUST_STAY_PENDING: Duration = Duration::from_millis(300);

/// The tests close hold gates on shared devices: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn primary(device: u32) -> Context {
    in_process()
        .device(device)
        .unwrap()
        .primary_context()
        .clone()
}

/// Runs `f` on another thread and fails the test if it has not returned within [`WATCHDOG`]:
/// how a test shows that a call does not block while the device is held.
fn returns_promptly<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("{what} blocked while the device was busy"))
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// Defect: dropping an operation used to drop its `Arc` clone at once, so `Arc::get_mut`
/// succeeded and safe code could write into memory the device was still reading. The dropped
/// operation now keeps its value until it completes.
#[test]
fn a_dropped_operation_keeps_its_arc_until_the_device_is_done() {
    let _serial = serial();
    let ctx = primary(0);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let mut shared = Arc::new(PinnedBuffer::from_slice(&ctx, &[7u8; 8192]).unwrap());
        control::hold(0).unwrap();
        let op = s.copy_h2d(shared.clone(), DeviceBuffer::<u8>::new(&ctx, 8192).unwrap());
        let done = op.completion().clone();
        drop(op);
        npu_core::reaper::flush();
        assert!(
            Arc::get_mut(&mut shared).is_none(),
            "{strategy:?}: the queued copy still shares the buffer"
        );
        control::release(0).unwrap();
        done.wait_blocking().unwrap();
        npu_core::reaper::flush();
        let unique = Arc::get_mut(&mut shared).expect("shared no more once the copy completed");
        unique.fill(1); // and only now may it be written
    }
}

/// The write side of a completion is not public: `Op::completion()` is read-only, so safe code
/// cannot mark queued work finished and free its buffers (see tests/ui for the compile-fail
/// half). Here: the read side cannot make a held operation complete.
#[test]
fn the_read_side_of_a_completion_cannot_finish_an_operation() {
    let _serial = serial();
    let ctx = primary(0);
    let s = stream(&ctx, Strategy::EventPoll);
    control::hold(0).unwrap();
    let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
    let done = op.completion().clone();
    let waited = returns_promptly("a bounded wait", move || {
        let rt = tokio();
        rt.block_on(async { tokio::time::timeout(MUST_STAY_PENDING, done.wait()).await })
    });
    assert!(waited.is_err(), "a held memset cannot have completed");
    assert!(!op.is_complete());
    control::release(0).unwrap();
    let buffer = tokio().block_on(op).unwrap();
    assert_eq!(buffer.to_vec_blocking().unwrap(), [1; 64]);
}

/// Kernel `npu_stream_soundness_gate`: marks itself started, waits for [`GATE`], then writes
/// 0xAB into its one argument buffer (`{uint8_t *x, uint64_t n}`) and marks itself finished.
static STARTED: AtomicBool = AtomicBool::new(false);
static GATE: AtomicBool = AtomicBool::new(false);
static FINISHED: AtomicBool = AtomicBool::new(false);
const GATE_KERNEL: &str = "npu_stream_soundness_gate";

fn gate_kernel(ctx: &Context) -> (Module, Function) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        npu_sim::kernel::register_with_args_size(GATE_KERNEL, 16, |block, _, args| {
            // SAFETY: launched below with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe {
                let words = args.cast::<u64>();
                (
                    words.read_unaligned() as *mut u8,
                    words.add(1).read_unaligned(),
                )
            };
            if block == 0 {
                STARTED.store(true, Ordering::SeqCst);
                while !GATE.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, 0xAB, n as usize) };
                FINISHED.store(true, Ordering::SeqCst);
            }
            0
        })
        .unwrap();
    });
    let image = npu_sim::kernel::registry_image(&[GATE_KERNEL]);
    // SAFETY: a registry image only names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(ctx, &image) }.unwrap();
    let function = module.function(GATE_KERNEL).unwrap();
    (module, function)
}

/// Defect: after a STOP-mode fault on one stream, a kernel still running on a sibling stream
/// had its launch future failed at once, so its arguments were freed under it. Now no future
/// resolves while its task may still be running: the launch fails only after the kernel has
/// returned.
#[test]
fn a_stop_mode_fault_does_not_free_memory_under_a_running_kernel() {
    let _serial = serial();
    for strategy in STRATEGIES {
        let ctx = Device::open(1).unwrap().create_context().unwrap();
        let (_module, gate) = gate_kernel(&ctx);
        let (faulty, sibling) = (stream(&ctx, strategy), stream(&ctx, strategy));
        faulty.set_failure_mode(FailureMode::Stop).unwrap();
        STARTED.store(false, Ordering::SeqCst);
        GATE.store(false, Ordering::SeqCst);
        FINISHED.store(false, Ordering::SeqCst);

        let target = DeviceBuffer::<u8>::new(&ctx, 65536).unwrap();
        // SAFETY: the gate kernel takes {uint8_t *x, uint64_t n}; x holds n bytes.
        let launch = unsafe { sibling.launch(&gate, 1, (target, 65536u64)) };
        while !STARTED.load(Ordering::SeqCst) {
            thread::yield_now();
        }
        control::fail_task(faulty.as_raw(), 1, 507015).unwrap();
        let rt = tokio();
        let failing = faulty.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0);
        assert!(
            rt.block_on(failing).is_err(),
            "{strategy:?}: the injected fault"
        );

        let mut launch = launch;
        let early =
            rt.block_on(async { tokio::time::timeout(MUST_STAY_PENDING, &mut launch).await });
        assert!(
            early.is_err(),
            "{strategy:?}: the launch resolved while its kernel was still running"
        );
        assert!(!FINISHED.load(Ordering::SeqCst));
        GATE.store(true, Ordering::SeqCst);
        let outcome = rt.block_on(async { tokio::time::timeout(HANG, launch).await });
        assert!(
            FINISHED.load(Ordering::SeqCst),
            "resolved only after the kernel returned"
        );
        // Whether the launch reports the stop or its own success is the runtime's call; what
        // matters is that it resolved only now.
        drop(outcome.expect("the launch resolved once its kernel returned"));
    }
}

/// Defect: releases after a failed operation used the device-synchronising frees on the one
/// reaper thread, so a fault on one device stalled every release in the process (and a drop
/// could block on them). A failed operation now completes only once the device is done with
/// it, so its buffers are freed with the immediate calls.
#[test]
fn a_fault_on_one_device_does_not_stall_releases_while_another_is_busy() {
    let _serial = serial();
    let (busy, faulty) = (primary(0), primary(1));
    for strategy in STRATEGIES {
        let s0 = stream(&busy, strategy);
        let s1 = stream(&faulty, strategy);
        let rt = tokio();
        control::fail_task(s1.as_raw(), 1, 507015).unwrap();
        let failed = s1.memset(DeviceBuffer::<u8>::new(&faulty, 4096).unwrap(), 0);
        assert!(rt.block_on(failed).is_err());

        // Device 0 has work that cannot finish while it is held.
        control::hold(0).unwrap();
        let held = s0.memset(DeviceBuffer::<u8>::new(&busy, 4096).unwrap(), 1);

        // A buffer whose last use failed, on device 1: released without waiting for anyone.
        let before = control::device_stats(1).unwrap().live_allocations;
        control::fail_task(s1.as_raw(), 1, 507015).unwrap();
        let buffer = DeviceBuffer::<u8>::new(&faulty, 4096).unwrap();
        let op = s1.memset(buffer, 0);
        let done = op.completion().clone();
        drop(op);
        returns_promptly("releasing after a fault", move || {
            let _ = done.wait_blocking();
            npu_core::reaper::flush();
        });
        assert_eq!(
            control::device_stats(1).unwrap().live_allocations,
            before,
            "freed"
        );
        let pool = PinnedPool::new(&faulty);
        returns_promptly("a pinned allocation on the faulted device", move || {
            let rt = tokio();
            rt.block_on(pool.alloc::<u8>(4096)).map(drop)
        })
        .unwrap();

        control::release(0).unwrap();
        rt.block_on(held).unwrap();
    }
}

/// Defect: `Stream::wait_event` queued device work nothing tracked, so dropping the last
/// `Stream` ran a blocking `aclrtDestroyStream` on the dropping thread (a Tokio worker). The
/// wait is now an operation like any other; the stream lives until it is over.
#[test]
fn dropping_a_stream_that_waits_on_an_event_does_not_block() {
    let _serial = serial();
    let ctx = primary(0);
    for strategy in STRATEGIES {
        let producer = stream(&ctx, strategy);
        let consumer = stream(&ctx, strategy);
        control::hold(0).unwrap();
        let filled = producer.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 3);
        let ready = Event::new(&ctx).unwrap();
        ready.record(&producer).unwrap();
        consumer.wait_event(&ready).unwrap();
        returns_promptly("dropping a waiting stream", move || drop(consumer));
        control::release(0).unwrap();
        tokio().block_on(filled).unwrap();
        tokio().block_on(ready.wait()).unwrap();
    }
}

/// Defect: a `BlockingSync` wait that Tokio dropped unrun at shutdown never completed, and the
/// stream's next wait blocked for ever behind it. A dropped wait now hands its operation to the
/// reactor.
#[test]
fn blocking_sync_survives_a_runtime_that_drops_its_waits_unrun() {
    let _serial = serial();
    let ctx = primary(0);
    let s = stream(&ctx, Strategy::BlockingSync);
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    // The only blocking thread is busy until the runtime is gone, so the operation's wait stays
    // queued and is dropped unrun at shutdown.
    let (unblock, blocked) = mpsc::channel::<()>();
    let op = {
        let _inside = rt.enter();
        tokio::task::spawn_blocking(move || {
            let _ = blocked.recv();
        });
        s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)
    };
    rt.shutdown_background();
    drop(unblock);
    let done = op.completion().clone();
    returns_promptly("a wait dropped unrun", move || done.wait_blocking()).unwrap();
    // The next operation is not wedged behind it.
    let next = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 6);
    let done = next.completion().clone();
    returns_promptly("the next wait", move || done.wait_blocking()).unwrap();
    drop((op, next));
}

/// Found (fourteenth session): a `BlockingSync` wait queued on a Tokio blocking pool with no
/// free thread stayed queued, and its operation incomplete, for as long as the pool was full:
/// for ever when the task holding the pool's only thread waited for that very operation with
/// `Completion::wait_blocking`, which the docs call fine inside a runtime. Completion must not
/// depend on Tokio: a wait that no pool thread starts in time goes to the reactor.
#[test]
fn a_blocking_sync_operation_completes_when_the_blocking_pool_is_full() {
    let _serial = serial();
    let ctx = primary(0);
    // The pool's only thread waits for the operation whose wait is queued behind it.
    let s = stream(&ctx, Strategy::BlockingSync);
    let waited = returns_promptly("wait_blocking on the pool's only thread", {
        let ctx = ctx.clone();
        move || {
            let rt = blocking_pool(1);
            let waited = rt.block_on(rt.spawn_blocking(move || {
                let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                op.completion().wait_blocking()
            }));
            waited.expect("the blocking task ran")
        }
    });
    waited.unwrap();
    // An awaited operation while the pool's only thread runs an unrelated long job (as
    // `tokio::io::stdin`'s reader does).
    let s = stream(&ctx, Strategy::BlockingSync);
    let filled = returns_promptly("an await while the pool is busy", move || {
        let rt = blocking_pool(1);
        let (done, busy_until) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel();
        rt.spawn_blocking(move || {
            started.send(()).unwrap();
            let _ = busy_until.recv_timeout(WATCHDOG);
        });
        running.recv().unwrap();
        // Submitted inside the runtime, so that its wait goes to the runtime's pool.
        let filled = rt.block_on(async {
            s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)
                .await
        });
        drop(done);
        filled.map(|buffer| buffer.to_vec_blocking().unwrap())
    });
    assert_eq!(filled.unwrap(), [2; 64]);
}

/// Suspected, confirmed: a `BlockingSync` wait had no bound, so a hung kernel made dropping the
/// Tokio runtime (which waits for its blocking threads) block for ever. Blocking waits now give
/// up after a bound and hand the operation to the reactor.
#[test]
fn dropping_a_runtime_does_not_wait_for_held_blocking_sync_work() {
    let _serial = serial();
    let ctx = primary(0);
    let s = stream(&ctx, Strategy::BlockingSync);
    control::hold(0).unwrap();
    let rt = tokio();
    let op = {
        let _inside = rt.enter();
        s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7)
    };
    returns_promptly("dropping the Tokio runtime", move || drop(rt));
    control::release(0).unwrap();
    let done = op.completion().clone();
    returns_promptly("the held memset", move || done.wait_blocking()).unwrap();
    drop(op);
}

struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a hostile waker");
    }
}

/// Defect: a waker that panicked when woken killed the process-wide reactor thread; every later
/// operation hung. Wakes are now contained.
#[test]
fn a_panicking_waker_does_not_kill_the_completers() {
    let _serial = serial();
    completers_survive(&Waker::from(Arc::new(PanickingWaker)));
}

/// A waker whose every copy panics when dropped (and so when woken, which consumes it). Its
/// copies share no state: the data pointer is unused.
fn waker_that_panics_on_drop() -> Waker {
    use std::task::{RawWaker, RawWakerVTable};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn wake(_: *const ()) {
        panic!("a hostile waker's drop (by wake)");
    }
    fn wake_by_ref(_: *const ()) {}
    fn drop(_: *const ()) {
        panic!("a hostile waker's drop");
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);
    // SAFETY: every vtable function ignores the (null) data pointer, so any copy is valid on
    // any thread for as long as the program runs.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// Attack: a waker whose drop panics. The completer (the reactor, the callback thread, a
/// blocking-pool thread) drops the waker it woke; a panic there must stay contained, as a
/// panicking wake-up does, or the process-wide reactor thread dies and every later operation
/// fails with "the reactor thread is not running" (it did, before the fix).
#[test]
fn a_waker_that_panics_when_dropped_does_not_kill_the_completers() {
    let _serial = serial();
    // The test's own copy would panic when dropped, so it never is.
    completers_survive(&std::mem::ManuallyDrop::new(waker_that_panics_on_drop()));
}

/// Under every strategy: an operation polled once with `waker` completes, and the completer
/// that ran it still completes later operations.
fn completers_survive(waker: &Waker) {
    let ctx = primary(0);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let mut cx = TaskContext::from_waker(waker);
        control::hold(0).unwrap();
        let mut op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
        control::release(0).unwrap();
        let done = op.completion().clone();
        returns_promptly("the hostile operation", move || done.wait_blocking()).unwrap();
        for value in 2..5u8 {
            let later = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), value);
            let buffer = returns_promptly("a later operation", move || tokio().block_on(later));
            assert_eq!(
                buffer.unwrap().to_vec_blocking().unwrap(),
                [value; 64],
                "{strategy:?}"
            );
        }
        drop(op);
    }
}

/// Defect: every probe of a stream with an old task failure made a blocking 1 ms wait on the
/// reactor thread, so with hundreds of such streams busy a healthy stream's operations took
/// hundreds of milliseconds each. Probes now run on the sentinel thread; the reactor never
/// waits. The watchdog allows 20 s for 100 operations: before the fix they took over a minute.
#[test]
fn faulted_busy_streams_do_not_slow_a_healthy_one() {
    let _serial = serial();
    let (busy, healthy) = (primary(0), primary(1));
    let rt = tokio();
    let faulted: Vec<Stream> = (0..200)
        .map(|_| {
            let s = stream(&busy, Strategy::EventPoll);
            control::fail_task(s.as_raw(), 1, 507015).unwrap();
            let failed = s.memset(DeviceBuffer::<u8>::new(&busy, 64).unwrap(), 0);
            assert!(rt.block_on(failed).is_err());
            s
        })
        .collect();
    control::hold(0).unwrap();
    let held: Vec<Op<DeviceBuffer<u8>>> = faulted
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&busy, 64).unwrap(), 1))
        .collect();
    let s = stream(&healthy, Strategy::EventPoll);
    let mut buffer = DeviceBuffer::<u8>::new(&healthy, 64).unwrap();
    let completed = Arc::new(AtomicUsize::new(0));
    let counter = completed.clone();
    let buffer_back = returns_promptly("100 operations beside 200 faulted streams", move || {
        tokio().block_on(async move {
            for i in 0..100u8 {
                buffer = s.memset(buffer, i).await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
            }
            buffer
        })
    });
    assert_eq!(completed.load(Ordering::SeqCst), 100);
    assert_eq!(buffer_back.to_vec_blocking().unwrap(), [99; 64]);
    control::release(0).unwrap();
    for op in held {
        rt.block_on(op).unwrap();
    }
}

/// Defect: copies and memsets did not check the buffer's device, so a memset of device-1 memory
/// on a device-0 stream "succeeded". Every operation now checks; cross-device copies stay
/// allowed where ACL allows them (device to device, with peer access).
#[test]
fn operations_check_the_device_of_their_buffers() {
    let _serial = serial();
    let (d0, d1) = (primary(0), primary(1));
    let rt = tokio();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let err = rt
            .block_on(s.memset(DeviceBuffer::<u8>::new(&d1, 64).unwrap(), 1))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::memset", "dst"), "{err}");
        assert!(err.to_string().contains("device 1"), "{err}");

        let host = PinnedBuffer::from_slice(&d0, &[1u8; 64]).unwrap();
        let err = rt
            .block_on(s.copy_h2d(host, DeviceBuffer::<u8>::new(&d1, 64).unwrap()))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::copy_h2d", "dst"), "{err}");

        let device = DeviceBuffer::from_host_blocking(&d1, &[2u8; 64]).unwrap();
        let err = rt
            .block_on(s.copy_d2h(device, PinnedBuffer::<u8>::new(&d0, 64).unwrap()))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::copy_d2h", "src"), "{err}");

        // Device to device across devices, with peer access from the stream's device.
        let (a, b) = (d0.device(), d1.device());
        let access = a.enable_peer_access(&b).unwrap();
        let src = DeviceBuffer::from_host_blocking(&d1, &[3u8; 64]).unwrap();
        let (_, dst) = rt
            .block_on(s.copy_d2d(src, DeviceBuffer::<u8>::new(&d0, 64).unwrap()))
            .unwrap();
        assert_eq!(dst.to_vec_blocking().unwrap(), [3; 64]);
        drop(access);

        // Neither buffer on the stream's device.
        let d1_stream = stream(&d1, strategy);
        let src = DeviceBuffer::from_host_blocking(&d0, &[4u8; 64]).unwrap();
        let dst = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
        let err = rt.block_on(d1_stream.copy_d2d(src, dst)).unwrap_err().error;
        assert_eq!(invalid(&err), ("Stream::copy_d2d", "self"), "{err}");
    }
}

/// Suspected, confirmed: dropping a `PeerAccess` disabled peer access while a copy that needed
/// it was still queued. A cross-device copy now keeps the access enabled until it completes.
#[test]
fn a_queued_cross_device_copy_keeps_peer_access_enabled() {
    let _serial = serial();
    let (d0, d1) = (primary(0), primary(1));
    let (a, b) = (d0.device(), d1.device());
    let s = stream(&d0, Strategy::EventPoll);
    let access = a.enable_peer_access(&b).unwrap();
    control::hold(0).unwrap();
    let src = DeviceBuffer::from_host_blocking(&d1, &[5u8; 64]).unwrap();
    let copy = s.copy_d2d(src, DeviceBuffer::<u8>::new(&d0, 64).unwrap());
    drop(access);
    assert!(a.peer_access_to(&b).is_some(), "the queued copy holds it");
    control::release(0).unwrap();
    let (_, dst) = tokio().block_on(copy).unwrap();
    assert_eq!(dst.to_vec_blocking().unwrap(), [5; 64]);
    npu_core::reaper::flush();
    assert!(a.peer_access_to(&b).is_none(), "released with the copy");
}

/// Suspected, confirmed: a cross-device copy looked its peer access up before its ACL call, so
/// another thread could enable the access just for the call (ACL accepted the copy, with no
/// guard taken) and disable it again while the copy was queued. The lookup and the call now
/// happen under one lock: whenever a queued copy exists, the access it was accepted under is
/// still enabled.
#[test]
fn peer_access_toggled_during_cross_device_submissions_stays_enabled_under_accepted_copies() {
    let _serial = serial();
    let (d0, d1) = (primary(0), primary(1));
    let s = stream(&d0, Strategy::EventPoll);
    let rt = tokio();
    for round in 0..100 {
        control::hold(0).unwrap();
        let toggler = {
            let (a, b) = (d0.device(), d1.device());
            std::thread::spawn(move || {
                for _ in 0..20 {
                    drop(a.enable_peer_access(&b).unwrap());
                }
            })
        };
        let mut queued = Vec::new();
        while !toggler.is_finished() {
            let src = DeviceBuffer::from_host_blocking(&d1, &[7u8; 16]).unwrap();
            let copy = s.copy_d2d(src, DeviceBuffer::<u8>::new(&d0, 16).unwrap());
            if copy.is_complete() {
                let err = rt.block_on(copy).unwrap_err().error;
                assert_eq!(
                    err.acl_code(),
                    Some(AclCode(207006)),
                    "round {round}: {err}"
                );
            } else {
                queued.push(copy);
            }
        }
        toggler.join().unwrap();
        let (a, b) = (d0.device(), d1.device());
        assert_eq!(
            a.peer_access_to(&b).is_some(),
            !queued.is_empty(),
            "round {round}: {} copies queued",
            queued.len()
        );
        control::release(0).unwrap();
        for copy in queued {
            let (_, dst) = rt.block_on(copy).unwrap();
            assert_eq!(dst.to_vec_blocking().unwrap(), [7; 16]);
        }
        npu_core::reaper::flush();
        assert!(a.peer_access_to(&b).is_none(), "round {round}: released");
    }
}

/// Suspected, confirmed: `StreamBuilder::flags` accepted flags whose streams the host cannot
/// watch (the simulator then reported them idle at once). They are refused.
#[test]
fn streams_the_host_cannot_watch_are_refused() {
    let ctx = primary(0);
    for flag in [
        ffi::ACL_STREAM_PERSISTENT,
        ffi::ACL_STREAM_CPU_SCHEDULE,
        ffi::ACL_STREAM_DEVICE_USE_ONLY,
    ] {
        let err = Stream::builder(&ctx).flags(flag).build().unwrap_err();
        assert_eq!(invalid(&err), ("StreamBuilder::build", "flags"), "{err}");
    }
    let fast = ffi::ACL_STREAM_FAST_LAUNCH | ffi::ACL_STREAM_FAST_SYNC;
    assert!(Stream::builder(&ctx).flags(fast).build().is_ok());
}

/// Suspected, confirmed: a pool's capacity arithmetic could overflow on a huge request.
#[test]
fn a_huge_pool_request_is_a_typed_error() {
    let ctx = primary(0);
    let pool = PinnedPool::builder(&ctx).capacity(1 << 20).build().unwrap();
    let rt = tokio();
    assert!(rt.block_on(pool.alloc::<u8>(usize::MAX)).is_err());
    assert!(rt.block_on(pool.alloc::<u64>(usize::MAX / 4)).is_err());
    let unbounded = PinnedPool::new(&ctx);
    assert!(rt.block_on(unbounded.alloc::<u8>(usize::MAX)).is_err());
}
