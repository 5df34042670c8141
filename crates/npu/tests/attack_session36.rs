//! Attacks of the thirty-sixth session through the `npu` facade, on the last session's new
//! code first: kernel-name faults (`npu::sim::fail_kernel`, `clear_faults`) armed and cleared
//! while launches race on many streams, firing on every launch of twelve streams at once,
//! across a module unloaded under a queued launch and a device reset, on stopping streams
//! racing aborts and the loss of their device, and with a memory-error code on launches whose
//! arguments are pool blocks (one shared as an `Arc` with a launch that succeeds); host
//! `View`s dereferenced beside copies in flight into the other half of their buffer, handed
//! back by failed copies, and given to 2D copies at the edges of their shapes; and forks taken while another thread is blocked in a
//! tracing subscriber under a stream's submission lock and an event's recording lock, or is
//! inside `wait_for_teardowns`; a flush of the reaper (`npu::sim::flush_releases`) from a
//! subscriber's callback under npu-rs's locks, with a release queued that takes the lock; and
//! blocking waits for a pending operation (`Completion::wait_blocking`, a `BlockingWaiter`'s
//! bounded wait) from a waker on the thread that completes it and from a subscriber's callback
//! under a stream's submission lock.
//!
//! Each test names the promise it attacks and its outcome. The simulator's hold gate, its
//! fault tables and the process's teardown count are shared by every test of this process, so
//! every test takes the file's device lock and starts with no fault armed; every wait is
//! bounded (`run`, `watchdog`, a child process's bound), so a hang fails its test. Device 2 is
//! lost for the rest of the process by one test, and device 3 reset by another.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};

use common::*;
use futures::executor::block_on;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::runtime::wait_for_teardowns;
use npu::stream::{Copy2d, FailureMode};
use npu::{Completion, Error, Stream, sim};

/// The memory of each of the file's four simulated devices.
const MEMORY: u64 = 64 << 20;

/// The code the kernel faults fail launches with.
const TRAP: AclCode = AclCode::AICORE_EXCEPTION;

/// The device lock and device 0's primary context, of this file's four-device simulator,
/// with no fault armed on devices 0 and 1 (a test that failed before its faults fired would
/// otherwise fail the tests after it; device 2's test clears its own).
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    let (guard, ctx) = devices_of(4, MEMORY);
    for id in 0..2 {
        sim::clear_faults(&Device::open(id).unwrap()).unwrap();
    }
    (guard, ctx)
}

/// A zeroed device buffer of `n` bytes.
fn dev(ctx: &Context, n: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, n).unwrap()
}

/// Sixteen ones on `ctx`'s device, written synchronously (no task of any stream).
fn ones(ctx: &Context) -> DeviceBuffer<f32> {
    DeviceBuffer::from_host_blocking(ctx, &[1.0f32; 16]).unwrap()
}

/// Launches `scale_f32` over the 16 elements of `x` on `s`.
fn scale(
    s: &Stream,
    function: &Function,
    x: DeviceBuffer<f32>,
) -> npu::Op<(DeviceBuffer<f32>, u64, f32)> {
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x; x holds 16.
    unsafe { s.launch(function, 1, (x, 16u64, 2.0f32)) }
}

/// Promise: a kernel fault fails at most the one launch it counts to, and every launch of a
/// device resolves with its own buffer, while faults are armed and cleared on other threads
/// as launches race on many streams (rules 2, 3 and 7; `fail_kernel`'s "exactly one of
/// racing launches fails"). Six threads (two per strategy, each on a stream of its own) each
/// launch `scale_f32` 60 times over sixteen ones, awaiting each; a seventh arms 90 faults on
/// the kernel (`nth` 1 to 3) and an eighth clears the device's faults 30 times, all at once.
///
/// Outcome: held. Every launch resolves: an `Ok` one hands back its buffer scaled to twos, a
/// failed one `AICORE_EXCEPTION` with its buffer untouched (ones); the failures number at
/// most the faults armed less those cleared, and at least one fault fires; a last
/// `clear_faults` leaves nothing armed; every stream runs a memset afterwards and
/// `wait_for_teardowns` returns `Ok`.
#[test]
fn kernel_faults_armed_and_cleared_while_launches_race_fail_only_their_launches() {
    const PER_THREAD: usize = 60;
    const ARMED: usize = 90;
    let (_guard, ctx) = devices();
    let device = ctx.device();
    let function = Arc::new(in_process(&ctx, sim::kernel::SCALE_F32));
    let start = Arc::new(Barrier::new(2 * STRATEGIES.len() + 2));
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut launchers = Vec::new();
    for strategy in STRATEGIES.into_iter().chain(STRATEGIES) {
        let (ctx, function, start) = (ctx.clone(), function.clone(), start.clone());
        launchers.push(std::thread::spawn(move || {
            let s = stream(&ctx, strategy);
            start.wait();
            let mut failed = 0;
            for i in 0..PER_THREAD {
                let what = format!("{strategy:?} launch {i}");
                match run(scale(&s, &function, ones(&ctx))) {
                    Ok((x, _, _)) => {
                        assert_eq!(x.to_vec_blocking().unwrap(), [2.0; 16], "{what}");
                    }
                    Err(err) => {
                        assert_eq!(err.error.acl_code(), Some(TRAP), "{what}: {}", err.error);
                        let (x, _, _) = err.value.expect("the launch hands its buffer back");
                        assert_eq!(x.to_vec_blocking().unwrap(), [1.0; 16], "{what}: ran");
                        failed += 1;
                    }
                }
            }
            a_memset_writes(&ctx, &s, 3, &format!("{strategy:?} after the faults"));
            failed
        }));
    }
    let arming = {
        let (device, start) = (device.clone(), start.clone());
        std::thread::spawn(move || {
            start.wait();
            let mut rng = Rng(0x36_0001);
            for _ in 0..ARMED {
                let nth = 1 + rng.below(3) as u64;
                sim::fail_kernel(&device, sim::kernel::SCALE_F32, nth, TRAP).unwrap();
                std::thread::yield_now();
            }
        })
    };
    let clearing = {
        let (device, start, cleared) = (device.clone(), start.clone(), cleared.clone());
        std::thread::spawn(move || {
            start.wait();
            for _ in 0..30 {
                let now = sim::clear_faults(&device).unwrap() as usize;
                cleared.fetch_add(now, Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let failed: usize = watchdog("the racing launches", || {
        arming.join().unwrap();
        clearing.join().unwrap();
        launchers.into_iter().map(|t| t.join().unwrap()).sum()
    });
    let left = sim::clear_faults(&device).unwrap() as usize;
    let cleared = cleared.load(Ordering::Relaxed) + left;
    assert!(
        failed <= ARMED - cleared,
        "{failed} launches failed, but only {} of {ARMED} faults were not cleared",
        ARMED - cleared
    );
    assert!(
        failed > 0 || cleared == ARMED,
        "no fault fired, and only {cleared} of {ARMED} were cleared"
    );
    assert_eq!(sim::clear_faults(&device).unwrap(), 0);
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
}

/// Promise: a failed operation's error says where the device failed: its own stream, device
/// and code (`OpError::fault`), when kernel faults fire on launches racing on many streams of
/// two devices and their contexts at once (rule 1's typed errors; `fail_kernel` firing on
/// whichever stream). Devices 0 and 1, a primary and an explicit context of each, a stream of
/// every strategy in each context (twelve), a thread per stream; every launch of the round
/// armed to fail (one fault per launch on each device, with its own code), each thread
/// launching once per round after a barrier, twenty rounds; memsets behind each launch.
///
/// Outcome: held. Every launch fails with one of the armed codes and a fault whose stream is
/// its own and whose device is its stream's, the memset behind it runs, and no fault is left
/// armed after a round.
#[test]
fn racing_kernel_faults_are_each_reported_on_their_own_stream() {
    const ROUNDS: usize = 20;
    let (_guard, ctx) = devices();
    let devices = [Device::open(0).unwrap(), Device::open(1).unwrap()];
    let contexts: Vec<Context> = devices
        .iter()
        .flat_map(|d| [d.primary_context().clone(), d.create_context().unwrap()])
        .collect();
    let per_device = 2 * STRATEGIES.len();
    let codes = [
        TRAP,
        AclCode(507011),
        AclCode(507899),
        AclCode(507035),
        AclCode(507015),
        AclCode(507014),
    ];
    let round_start = Arc::new(Barrier::new(contexts.len() * STRATEGIES.len() + 1));
    let round_end = Arc::new(Barrier::new(contexts.len() * STRATEGIES.len() + 1));
    let mut threads = Vec::new();
    for context in &contexts {
        for strategy in STRATEGIES {
            let (context, start, end) = (context.clone(), round_start.clone(), round_end.clone());
            threads.push(std::thread::spawn(move || {
                let s = stream(&context, strategy);
                let function = in_process(&context, sim::kernel::SCALE_F32);
                for round in 0..ROUNDS {
                    let what = format!(
                        "{strategy:?} on device {}, round {round}",
                        context.device_id()
                    );
                    let x = ones(&context);
                    start.wait();
                    let launch = scale(&s, &function, x);
                    let behind = s.memset(dev(&context, 64), 4);
                    let err = run(launch).map(drop).expect_err(&what);
                    let code = err.error.acl_code().expect("an ACL error");
                    assert!(codes.contains(&code), "{what}: {}", err.error);
                    let fault = err
                        .error
                        .fault()
                        .unwrap_or_else(|| panic!("{what}: no fault: {}", err.error));
                    assert_eq!(fault.stream_id, s.id(), "{what}: {fault:?}");
                    assert_eq!(fault.device_id, context.device_id(), "{what}: {fault:?}");
                    assert_eq!(fault.code, code, "{what}: {fault:?}");
                    assert_eq!(
                        run(behind).unwrap().to_vec_blocking().unwrap(),
                        [4; 64],
                        "{what}"
                    );
                    end.wait();
                }
            }));
        }
    }
    for _ in 0..ROUNDS {
        for device in &devices {
            for (nth, code) in (1..=per_device as u64).zip(codes) {
                sim::fail_kernel(device, sim::kernel::SCALE_F32, nth, code).unwrap();
            }
        }
        round_start.wait();
        watchdog("a round of racing faults", || round_end.wait());
        for device in &devices {
            assert_eq!(sim::clear_faults(device).unwrap(), 0, "every fault fired");
        }
    }
    for thread in threads {
        thread.join().unwrap();
    }
    drop(ctx);
}

/// Promise: a launch keeps its kernel's binary until it completes, whatever fault fires on
/// it, and a kernel fault is matched by name when a launch is queued, across the unloading and
/// reloading of the module that holds the kernel (rules 2 and 3; `fail_kernel`'s name
/// matching). Every strategy, on the held device: a launch of `scale_f32` whose fault is
/// armed, the `Function` and its `Module` dropped while it is queued; then a fault armed with
/// no module holding the kernel loaded, fired by a launch of the module loaded again; and a
/// fault armed on device 3, whose every handle is then dropped (the device reset), fired by
/// a launch after it is opened again.
///
/// Outcome: held. The queued launch fails with the armed code once released, its buffer
/// handed back untouched, and the stream runs the next launch of a new module; the fault
/// armed between modules fires on the reloaded one; the fault outlives the reset and fires
/// after it; no fault is left armed.
#[test]
fn kernel_faults_fire_across_unloaded_modules_and_device_resets() {
    let (_guard, ctx) = devices();
    let device = ctx.device();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let function = in_process(&ctx, sim::kernel::SCALE_F32);
        let held = sim::hold(&device).unwrap();
        sim::fail_kernel(&device, sim::kernel::SCALE_F32, 1, TRAP).unwrap();
        let queued = scale(&s, &function, ones(&ctx));
        drop(function);
        held.release().unwrap();
        let err = run(queued).map(drop).unwrap_err();
        assert_eq!(err.error.acl_code(), Some(TRAP), "{what}: {}", err.error);
        let (x, _, _) = err.value.expect("the buffer handed back");
        assert_eq!(x.to_vec_blocking().unwrap(), [1.0; 16], "{what}: ran");
        sim::fail_kernel(&device, sim::kernel::SCALE_F32, 2, TRAP).unwrap();
        let function = in_process(&ctx, sim::kernel::SCALE_F32);
        let (x, _, _) = run(scale(&s, &function, x)).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [2.0; 16], "{what}");
        let err = run(scale(&s, &function, x)).map(drop).unwrap_err();
        assert_eq!(err.error.acl_code(), Some(TRAP), "{what}: {}", err.error);
        assert_eq!(sim::clear_faults(&device).unwrap(), 0, "{what}");
    }
    let reset = Device::open(3).unwrap();
    sim::fail_kernel(&reset, sim::kernel::SCALE_F32, 1, TRAP).unwrap();
    drop(reset);
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    let reopened = Device::open(3).unwrap();
    let again = reopened.primary_context().clone();
    let function = in_process(&again, sim::kernel::SCALE_F32);
    let s = stream(&again, STRATEGIES[0]);
    let err = run(scale(&s, &function, ones(&again)))
        .map(drop)
        .unwrap_err();
    assert_eq!(
        err.error.acl_code(),
        Some(TRAP),
        "after the reset: {}",
        err.error
    );
    assert_eq!(sim::clear_faults(&reopened).unwrap(), 0);
}

/// Promise: every operation of a stream whose kernel fault stops it ends, typed, with its
/// own value, and every drop returns, when aborts and the loss of the device race the faults
/// (rules 2, 3 and 5). Device 2 (lost for the rest of the process), an explicit context; a
/// stream of each strategy in `FailureMode::Stop`, and on the held device: on each a launch
/// that an armed kernel fault fails (one fault per stream, `nth` 1 to 3), three memsets, an
/// event record and a second launch behind them; a thread per stream aborts it while the
/// program loses the device, then the device is released. Afterwards a stream of each
/// strategy is made (or refused) on the lost device and given a memset.
///
/// Outcome: held. Every operation resolves, none `Ok` after its stream's fault, and each
/// failed one hands its value back; each event's wait fails (aborted, or lost); the aborts
/// end `Ok` or lost; on the lost device a stream
/// is refused or its memset fails, typed; `wait_for_teardowns` returns `Ok` with the device's
/// live streams and contexts back at their baseline.
#[test]
fn kernel_faults_stopping_streams_raced_by_aborts_and_a_loss_end_every_operation() {
    let (_guard, _ctx) = devices();
    let device = Device::open(2).unwrap();
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    let live = |device: &Device| {
        let stats = sim::device_stats(device).unwrap();
        [stats.live_streams, stats.live_contexts]
    };
    let baseline = live(&device);
    let ctx = device.create_context().unwrap();
    let function = in_process(&ctx, sim::kernel::SCALE_F32);
    let streams = STRATEGIES.map(|strategy| {
        let s = stream(&ctx, strategy);
        s.set_failure_mode(FailureMode::Stop).unwrap();
        s
    });
    let held = sim::hold(&device).unwrap();
    for nth in 1..=3 {
        sim::fail_kernel(&device, sim::kernel::SCALE_F32, nth, TRAP).unwrap();
    }
    let faulted = streams.each_ref().map(|s| scale(s, &function, ones(&ctx)));
    let events = streams.each_ref().map(|_| Event::new(&ctx).unwrap());
    let queued = streams.each_ref().map(|s| {
        let memsets: Vec<_> = (0..3).map(|v| s.memset(dev(&ctx, 64), v)).collect();
        memsets
    });
    for (event, s) in events.iter().zip(&streams) {
        event.record(s).unwrap();
    }
    let behind = streams.each_ref().map(|s| scale(s, &function, ones(&ctx)));
    let go = Arc::new(Barrier::new(streams.len() + 1));
    let aborting: Vec<_> = streams
        .iter()
        .map(|s| {
            let (s, go) = (s.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                run(s.abort())
            })
        })
        .collect();
    go.wait();
    sim::lose(&device).unwrap();
    held.release().unwrap();
    for (i, aborted) in aborting.into_iter().enumerate() {
        let aborted = watchdog("the abort", || aborted.join().unwrap());
        assert!(
            aborted.is_ok() || aborted.as_ref().is_err_and(Error::is_device_lost),
            "{:?}: {aborted:?}",
            STRATEGIES[i]
        );
    }
    let ended = |what: &str, error: &Error, has_value: bool| {
        assert!(
            error.acl_code() == Some(TRAP) || error.is_aborted() || error.is_device_lost(),
            "{what}: {error}"
        );
        assert!(has_value, "{what}: no value handed back");
    };
    for (i, op) in faulted.into_iter().enumerate() {
        let what = format!("{:?}: the faulted launch", STRATEGIES[i]);
        let err = run(op).map(drop).expect_err(&what);
        ended(&what, &err.error, err.value.is_some());
    }
    for (i, memsets) in queued.into_iter().enumerate() {
        for op in memsets {
            let what = format!("{:?}: a memset behind the fault", STRATEGIES[i]);
            let err = run(op).map(drop).expect_err(&what);
            ended(&what, &err.error, err.value.is_some());
        }
    }
    for (i, op) in behind.into_iter().enumerate() {
        let what = format!("{:?}: the launch behind", STRATEGIES[i]);
        let err = run(op).map(drop).expect_err(&what);
        ended(&what, &err.error, err.value.is_some());
    }
    for (i, event) in events.iter().enumerate() {
        let what = format!("{:?}: the event recorded behind the fault", STRATEGIES[i]);
        let err = run(event.wait()).expect_err(&what);
        ended(&what, &err, true);
    }
    drop((streams, events));
    for strategy in STRATEGIES {
        match Stream::builder(&ctx).strategy(strategy).build() {
            Ok(s) => {
                let after = run(s.memset(dev_or_lost(&ctx), 1));
                assert!(
                    after.is_err(),
                    "{strategy:?}: a memset ran on the lost device"
                );
            }
            Err(err) => assert!(err.is_device_lost(), "{strategy:?}: {err}"),
        }
    }
    sim::clear_faults(&device).unwrap();
    drop(function);
    drop(ctx);
    watchdog("wait_for_teardowns", || wait_for_teardowns(HANG)).unwrap();
    let now = live(&device);
    assert!(within(now, baseline), "{now:?} left from {baseline:?}");
}

/// A buffer for a memset on a lost device: the allocation may be refused there too, in which
/// case a buffer of device 0 stands in (the memset is then refused for its device).
fn dev_or_lost(ctx: &Context) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, 64).unwrap_or_else(|err| {
        assert!(err.is_device_lost(), "{err}");
        dev(&Device::open(0).unwrap().primary_context().clone(), 64)
    })
}

/// Promise: a kernel fault with a memory-error code on launches of pool blocks quarantines
/// the blocks once every operation that shares them is done, and the pool settles (rules 2
/// and 3; `OpError::is_memory_error`, new in the last session). Both device-pool backends,
/// every strategy: two blocks of a pool; block `a` shared as an `Arc` with a fill launch on a
/// second stream, queued first on the held device, which succeeds; then a fill of `a` and a
/// fill of `b`, each failed by a kernel fault with `HBM_MULTI_BIT_ECC_ERROR` armed after the
/// shared launch was queued.
///
/// Outcome: held. Each failed launch's `OpError` says a memory error and hands its block
/// back; once the shared launch completes and every handle is dropped the pool settles, both
/// blocks quarantined, none allocated, no fault left armed.
#[test]
fn kernel_memory_errors_on_shared_pool_blocks_quarantine_them_once_all_uses_end() {
    const FILL: &str = "attack36_fill";
    let (_guard, ctx) = devices();
    let device = ctx.device();
    let fill = fill_kernel(&ctx, FILL, 9);
    let ecc = AclCode::HBM_MULTI_BIT_ECC_ERROR;
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let pool = device_pool(&ctx, backend, None);
            let a = Arc::new(run(pool.alloc::<u8>(&s, 4096)).unwrap());
            let b = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            let held = sim::hold(&device).unwrap();
            // SAFETY: fill(uint8_t *x, uint64_t n) writes n bytes of x; x holds 4096.
            let shared = unsafe { other.launch(&fill, 1, (a.clone(), 4096u64)) };
            sim::fail_kernel(&device, FILL, 1, ecc).unwrap();
            sim::fail_kernel(&device, FILL, 2, ecc).unwrap();
            // SAFETY: as above.
            let failing_a = unsafe { s.launch(&fill, 1, (a, 4096u64)) };
            // SAFETY: as above.
            let failing_b = unsafe { s.launch(&fill, 1, (b, 4096u64)) };
            held.release().unwrap();
            failed_with_a_memory_error(failing_a, &what);
            failed_with_a_memory_error(failing_b, &what);
            run(shared).unwrap();
            let stats = settled(&pool, &what);
            assert_eq!(stats.allocated, 0, "{what}: {stats:?}");
            assert_eq!(stats.quarantined, 2, "{what}: {stats:?}");
            assert_eq!(sim::clear_faults(&device).unwrap(), 0, "{what}");
        }
    }
}

/// Awaits `op`, which must fail with a memory error and hand its value back.
fn failed_with_a_memory_error<T: Send + 'static>(op: npu::Op<T>, what: &str) {
    let err = run(op).map(drop).unwrap_err();
    assert!(err.is_memory_error(), "{what}: {}", err.error);
    assert!(err.value.is_some(), "{what}: the block handed back");
}

/// Promise: safe code never reads or writes host bytes the device is writing (rule 1; the
/// last session's `Deref`/`DerefMut` on a host `View`). A pinned buffer of 8 KiB, split in
/// halves: a view of the tail's middle is the destination of a `copy_d2h` in flight on the
/// held device (every strategy), while the head and a view of it are read and written
/// through `Deref`/`DerefMut`; then the same with the copy refused by an injected task fault,
/// and with a registered page-aligned buffer's view in place of the pinned one.
///
/// Outcome: held. The head's bytes are the program's; the copy writes exactly the view's
/// range, and the tail's bytes outside it keep their pattern; a failed copy hands its view
/// back with the original bytes; joined, the whole buffer reads as expected.
#[test]
fn host_views_beside_a_copy_in_flight_into_the_other_half_see_only_their_bytes() {
    let (_guard, ctx) = devices();
    let device = ctx.device();
    let source = DeviceBuffer::from_host_blocking(&ctx, &[0xabu8; 2048]).unwrap();
    let source = Arc::new(source);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let pattern: Vec<u8> = (0..8192).map(|i| (i % 251) as u8).collect();
        let pinned = PinnedBuffer::from_slice(&ctx, &pattern).unwrap();
        let (mut head, tail) = pinned.into_halves(4096).unwrap();
        let window = tail.view(1024..3072).unwrap();
        let held = sim::hold(&device).unwrap();
        let mut copy = Box::pin(s.copy_d2h(source.clone(), window));
        assert!(polled_once(copy.as_mut()).is_pending(), "{what}: held");
        head.fill(0x11);
        let mut head_view = head.view(100..200).unwrap();
        assert!(head_view.iter().all(|&b| b == 0x11), "{what}");
        head_view[..].copy_from_slice(&[0x22; 100]);
        let head = head_view.into_inner();
        held.release().unwrap();
        let (_, window) = run(copy).unwrap();
        assert!(
            window.iter().all(|&b| b == 0xab),
            "{what}: the copy's bytes"
        );
        let whole = head
            .join(window.into_inner())
            .unwrap()
            .into_whole()
            .unwrap();
        for (i, &byte) in whole.iter().enumerate() {
            let expected = match i {
                100..200 => 0x22,
                0..4096 => 0x11,
                5120..7168 => 0xab,
                _ => pattern[i],
            };
            assert_eq!(byte, expected, "{what}: byte {i}");
        }
        // Refused by the device: the view comes back with what it held.
        let window = PinnedBuffer::from_slice(&ctx, &pattern).unwrap();
        let window = window.view(2048..4096).unwrap();
        sim::fail_task(&s, 1, TRAP).unwrap();
        let failed = run(s.copy_d2h(source.clone(), window)).unwrap_err();
        let (_, window) = failed.value.expect("the view handed back");
        assert_eq!(
            window[..],
            pattern[2048..4096],
            "{what}: a failed copy wrote"
        );
        // A registration's view, copied into and read.
        let page = PageAlignedBuffer::from_slice(&[7u8; 8192]).unwrap();
        let registered = npu::memory::HostRegistration::new(&ctx, page, RegisterFlags::PINNED);
        let view = registered.unwrap().view(4096..6144).unwrap();
        let (_, view) = run(s.copy_d2h(source.clone(), view)).unwrap();
        assert!(view.iter().all(|&b| b == 0xab), "{what}: registered");
        assert!(view.into_inner()[..4096].iter().all(|&b| b == 7), "{what}");
    }
}

/// Promise: a 2D copy refuses, typed and naming the API and the argument, every shape its
/// host view cannot hold or its sizes cannot express, hands both values back intact, and
/// never panics (the API conventions; rule 2). Views of pinned memory narrower than the
/// shape's pitches, a pitch whose byte count overflows with one row, a height whose extent
/// overflows, zero widths and heights, for `copy_2d_h2d` and `copy_2d_d2h`.
///
/// Outcome: held. Each refusal is `InvalidArgument` naming `Stream::copy_2d_h2d` or
/// `Stream::copy_2d_d2h` and `src`, `dst` or `shape`; the views come back with their bytes;
/// a zero-sized shape either completes or is refused by the runtime, typed.
#[test]
fn two_d_copies_of_views_at_the_edges_of_their_shapes_are_refused_typed() {
    let (_guard, ctx) = devices();
    let s = stream(&ctx, STRATEGIES[0]);
    let host = |n: usize| {
        let data: Vec<u16> = (0..n as u16).collect();
        PinnedBuffer::from_slice(&ctx, &data)
            .unwrap()
            .view(1..n)
            .unwrap()
    };
    let device = |n: usize| DeviceBuffer::<u16>::new(&ctx, n).unwrap();
    let shape = |width, height, src_pitch, dst_pitch| Copy2d {
        width,
        height,
        src_pitch,
        dst_pitch,
    };
    let huge = usize::MAX / 2 + 1;
    let cases = [
        (shape(4, 3, 4, 4), "src", "dst"), // the view holds 9: 4 * 2 + 4 = 12
        (shape(4, 2, 8, 4), "src", "dst"), // 8 + 4 = 12 > 9
        (shape(1, 1, huge, 1), "shape", "shape"), // the pitch's bytes overflow
        (shape(1, 3, huge, 1), "src", "dst"), // the extent overflows
        (shape(0, 1, huge, 0), "shape", "shape"),
    ];
    for (copy, h2d_argument, d2h_argument) in cases {
        let what = format!("{copy:?}");
        let err = run(s.copy_2d_h2d(host(10), device(16), copy)).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::copy_2d_h2d", h2d_argument),
            "{what}"
        );
        let (view, _) = err.value.expect("both handed back");
        assert_eq!(view[..], (1..10).collect::<Vec<u16>>()[..], "{what}");
        let d2h = shape(copy.width, copy.height, copy.dst_pitch, copy.src_pitch);
        let err = run(s.copy_2d_d2h(device(16), host(10), d2h)).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::copy_2d_d2h", d2h_argument),
            "{what}"
        );
        let (_, view) = err.value.expect("both handed back");
        assert_eq!(view[..], (1..10).collect::<Vec<u16>>()[..], "{what}");
    }
    for copy in [shape(0, 0, 0, 0), shape(0, 3, 2, 2), shape(2, 0, 2, 2)] {
        match run(s.copy_2d_h2d(host(10), device(16), copy)) {
            Ok((view, _)) => assert_eq!(view.len(), 9),
            Err(err) => {
                assert!(
                    matches!(err.error, Error::InvalidArgument { .. } | Error::Acl(_)),
                    "{copy:?}: {}",
                    err.error
                );
                assert!(err.value.is_some(), "{copy:?}: values lost");
            }
        }
    }
    a_memset_writes(&ctx, &s, 4, "after the refusals");
}

/// Promise: bad input to the facade's simulator controls is refused with
/// `Error::InvalidArgument` naming the API and the argument (the API conventions, as the last
/// session made `fail_task`'s and `fail_kernel`'s refusals): `npu::sim::fail_next_host_alloc`
/// with code 0, which is success and no failure; then a pinned allocation.
///
/// Outcome: **broke** before the fix: the refusal was the simulator's own, an `AclError` of
/// `npu-sim control` (100000) that named neither `npu::sim::fail_next_host_alloc` nor `code`.
/// It is now `InvalidArgument` naming both, and arms nothing: the next pinned allocation
/// succeeds.
#[test]
fn a_host_allocation_fault_of_code_zero_is_refused_naming_the_api() {
    let (_guard, ctx) = devices();
    let err = sim::fail_next_host_alloc(AclCode(0)).unwrap_err();
    assert_eq!(
        invalid(&err),
        ("npu::sim::fail_next_host_alloc", "code"),
        "{err}"
    );
    assert_eq!(
        PinnedBuffer::from_slice(&ctx, &[5u8; 64]).unwrap()[..],
        [5; 64]
    );
}

/// The environment variable that makes the `child` test run a case: the fork tests run in a
/// process of their own, which forks.
const CHILD_ENV: &str = "NPU_ATTACK36_CHILD";

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "subscriber" => forked_while_a_subscriber_blocks_under_npu_rs_locks(),
        "teardowns" => forked_while_another_thread_waits_for_the_teardowns(),
        "flush under a lock" => a_flush_from_a_subscriber_under_npu_rs_locks(),
        "waits in a waker" => blocking_waits_in_a_waker_on_the_completing_thread(),
        "waits under a lock" => blocking_waits_from_a_subscriber_under_a_submission_lock(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// How many callbacks [`BlocksInItsCallback`] holds, and whether it lets them go.
static BLOCKED: Mutex<(usize, bool)> = Mutex::new((0, false));
static BLOCKED_CHANGED: Condvar = Condvar::new();

/// Whether [`BlocksInItsCallback`] holds the simulator's next events.
static BLOCKING: AtomicBool = AtomicBool::new(false);

/// A tracing layer whose callback, for the simulator's events while armed, counts itself and
/// waits (bounded) until the test lets every held callback go.
struct BlocksInItsCallback;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for BlocksInItsCallback {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        if !BLOCKING.load(Ordering::SeqCst)
            || !["ascendcl", "npu_sim"]
                .iter()
                .any(|t| target.starts_with(t))
        {
            return;
        }
        let mut blocked = BLOCKED.lock().unwrap();
        blocked.0 += 1;
        BLOCKED_CHANGED.notify_all();
        let waited = BLOCKED_CHANGED.wait_timeout_while(blocked, HANG, |blocked| !blocked.1);
        drop(waited.unwrap());
    }
}

/// Promise: rule 8 with a parent thread blocked, at the fork, in a tracing subscriber's
/// callback under a stream's submission lock, and another under an event's recording lock
/// (each reached from the simulator's report of a call refused on a stopped stream).
/// In the child, on those streams and that event: a memset, a record, `synchronize`,
/// `abort`, `stop`, `set_failure_mode`, `Event::is_complete`, a new stream and
/// `wait_for_teardowns`; then every handle dropped.
///
/// Outcome: held. Each call is `Error::Forked` at once, none waits on the locks the parent's
/// threads hold, and every drop returns.
#[test]
fn a_child_forked_while_a_subscriber_blocks_under_npu_rs_locks_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "subscriber");
}

/// The child process's case of
/// [`a_child_forked_while_a_subscriber_blocks_under_npu_rs_locks_is_refused_not_hung`].
fn forked_while_a_subscriber_blocks_under_npu_rs_locks() {
    use tracing_subscriber::layer::SubscriberExt;
    let (_guard, ctx) = devices();
    see_every_callsite();
    let own = ctx.device().create_context().unwrap();
    let stopped = |strategy| {
        let s = stream(&own, strategy);
        s.set_failure_mode(FailureMode::Stop).unwrap();
        sim::fail_task(&s, 1, TRAP).unwrap();
        assert!(run(s.memset(dev(&own, 16), 1)).is_err(), "stopped");
        s
    };
    let (submitting, recording) = (stopped(STRATEGIES[0]), stopped(STRATEGIES[1]));
    let event = Event::new(&own).unwrap();
    let spare = [dev(&own, 16), dev(&own, 16)];
    BLOCKING.store(true, Ordering::SeqCst);
    let blocked = [
        {
            let (s, spare) = (submitting.clone(), dev(&own, 16));
            std::thread::spawn(move || {
                let subscriber = tracing_subscriber::registry().with(BlocksInItsCallback);
                tracing::subscriber::with_default(subscriber, || {
                    assert!(run(s.memset(spare, 1)).is_err(), "stopped");
                });
            })
        },
        {
            let (s, event) = (recording.clone(), event.clone());
            std::thread::spawn(move || {
                let subscriber = tracing_subscriber::registry().with(BlocksInItsCallback);
                tracing::subscriber::with_default(subscriber, || {
                    assert!(event.record(&s).is_err(), "stopped");
                });
            })
        },
    ];
    {
        let held = BLOCKED.lock().unwrap();
        let (held, waited) = BLOCKED_CHANGED
            .wait_timeout_while(held, HANG, |blocked| blocked.0 < 2)
            .unwrap();
        assert!(!waited.timed_out(), "the subscribers never blocked");
        drop(held);
    }
    BLOCKING.store(false, Ordering::SeqCst);
    let kept = std::cell::Cell::new(Some((
        submitting.clone(),
        recording.clone(),
        event.clone(),
        spare,
    )));
    let (ok, status) = fork_and_check(|| {
        let (submitting, recording, event, [first, second]) = kept.take().unwrap();
        assert_forked(&block_on(submitting.memset(first, 1)).unwrap_err().error);
        assert_forked(&event.record(&recording).unwrap_err());
        assert_forked(&block_on(recording.synchronize()).unwrap_err().error);
        assert_forked(&block_on(submitting.abort()).unwrap_err());
        assert_forked(&submitting.stop().unwrap_err());
        assert_forked(
            &recording
                .set_failure_mode(FailureMode::Continue)
                .unwrap_err(),
        );
        assert_forked(&event.is_complete().unwrap_err());
        assert_forked(&Stream::new(submitting.context()).unwrap_err());
        assert_forked(&wait_for_teardowns(HANG).unwrap_err());
        drop((submitting, recording, event, second));
    });
    {
        let mut held = BLOCKED.lock().unwrap();
        held.1 = true;
        BLOCKED_CHANGED.notify_all();
    }
    for thread in blocked {
        watchdog("the blocked subscribers", || thread.join().unwrap());
    }
    *BLOCKED.lock().unwrap() = (0, false);
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// Promise: rule 8 and `wait_for_teardowns`'s bound with a parent thread inside
/// `wait_for_teardowns` at the fork, waiting for streams of every strategy dropped with
/// memsets in flight on the held device. In the child: `wait_for_teardowns`, `Device::open`,
/// `Runtime::global`, a memset on a stream made before the fork, then every handle dropped;
/// in the parent, the waiting thread's answer once the device is released.
///
/// Outcome: held. In the child `wait_for_teardowns` and `Device::open` are `Error::Forked` at
/// once, `Runtime::global` (made before the fork) is the parent's, the memset `Error::Forked`,
/// the drops return; in the parent the waiting thread gets `Ok` after the release.
#[test]
fn a_child_forked_while_a_thread_waits_for_the_teardowns_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "teardowns");
}

/// The child process's case of
/// [`a_child_forked_while_a_thread_waits_for_the_teardowns_is_refused_not_hung`].
fn forked_while_another_thread_waits_for_the_teardowns() {
    let (_guard, ctx) = devices();
    let own = ctx.device().create_context().unwrap();
    let kept = stream(&own, STRATEGIES[0]);
    let spare = dev(&own, 64);
    let held = sim::hold(&ctx.device()).unwrap();
    for strategy in STRATEGIES {
        let s = stream(&own, strategy);
        drop(s.memset(dev(&own, 4096), 5));
    }
    let started = Arc::new(Barrier::new(2));
    let waiting = {
        let started = started.clone();
        std::thread::spawn(move || {
            started.wait();
            wait_for_teardowns(HANG)
        })
    };
    started.wait();
    let kept = std::cell::Cell::new(Some((kept, spare)));
    let (ok, status) = fork_and_check(|| {
        let (kept, spare) = kept.take().unwrap();
        assert_forked(&wait_for_teardowns(HANG).unwrap_err());
        assert_forked(&Device::open(1).unwrap_err());
        let global = npu::Runtime::global().unwrap();
        assert!(
            global.same_library(kept.context().runtime()),
            "the parent's runtime"
        );
        let refused = block_on(kept.memset(spare, 1)).unwrap_err();
        assert_forked(&refused.error);
        drop(kept);
    });
    held.release().unwrap();
    let answer = watchdog("the waiting thread", || waiting.join().unwrap());
    assert!(answer.is_ok(), "{answer:?}");
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// The reaper held by the test, for [`FlushesInItsCallback`] to let go of.
static HELD_REAPER: Mutex<Option<ReaperHeld>> = Mutex::new(None);

/// Whether [`FlushesInItsCallback`] flushed (armed while `false`; set once its flush returned).
static FLUSHED: AtomicBool = AtomicBool::new(true);

/// Whether [`FlushesInItsCallback`] found itself under one of npu-rs's locks, so that the test
/// keeps checking the case it means to: `wait_for_teardowns`, which refuses to wait there (and
/// on npu-rs's own threads, which the callback is not on), refused it.
static UNDER_A_LOCK: AtomicBool = AtomicBool::new(false);

/// The targets whose next event [`FlushesInItsCallback`] flushes from.
static FLUSH_ON: Mutex<&[&str]> = Mutex::new(&[]);

/// A tracing layer whose callback, once armed, lets the held reaper go and flushes the
/// releases (`npu::sim::flush_releases`) from the next event of the targets armed.
struct FlushesInItsCallback;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FlushesInItsCallback {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        let armed = *FLUSH_ON.lock().unwrap();
        if FLUSHED.load(Ordering::SeqCst) || !armed.iter().any(|t| target.starts_with(t)) {
            return;
        }
        drop(HELD_REAPER.lock().unwrap().take());
        sim::flush_releases();
        FLUSHED.store(true, Ordering::SeqCst);
        // After the flag: a refusal that logs comes back here and must not flush again.
        let refused = wait_for_teardowns(std::time::Duration::ZERO);
        let thread = matches!(
            refused,
            Err(Error::InvalidArgument {
                argument: "thread",
                ..
            })
        );
        UNDER_A_LOCK.store(thread, Ordering::SeqCst);
    }
}

/// Promise: no npu-rs wait called back from code npu-rs runs under one of its locks waits for
/// a thread that needs that lock (rules 5 and 6: a subscriber may call npu-rs back, and a call
/// that would wait for itself is refused or returns instead). Two cases, each with a release
/// queued on the held reaper that takes a lock, then a tracing subscriber's callback, called
/// under that lock, that lets the reaper go and flushes the releases
/// (`npu::sim::flush_releases`):
/// - the runtime's device and peer-access lock: a cross-device copy (device 0 to device 1,
///   peer access enabled) completed, so the release of its peer-access guard is queued; the
///   callback is the simulator's report of an `aclrtDeviceEnablePeerAccess` refused (the
///   peer, device 3, lost), which npu-rs calls under that lock;
/// - a device pool's drain lock: a block of a bounded caching pool with a request queued for
///   room, its memset dropped in flight and completed, so its return (which serves the queue
///   as one step with the frees, under the drain lock) is queued; the callback is the pool's
///   report of a trim's frees, made under that lock.
///
/// Outcome: **broke** before the fix: the flush waited for the reaper, and the reaper for the
/// lock the flushing thread held, for ever (the child process hung; every later deferred
/// release of the process would have waited too). A flush on a thread that holds one of
/// npu-rs's ranked locks now returns at once, as one on the reaper does; the call then
/// returns, the reaper runs the release, the access is disabled and the block serves the
/// queued request.
#[test]
fn a_flush_from_a_subscriber_under_npu_rs_locks_does_not_deadlock_the_reaper() {
    in_child_test("child", CHILD_ENV, "flush under a lock");
}

/// The child process's case of
/// [`a_flush_from_a_subscriber_under_npu_rs_locks_does_not_deadlock_the_reaper`].
fn a_flush_from_a_subscriber_under_npu_rs_locks() {
    let (_guard, ctx) = devices();
    see_every_callsite();
    let (device, peer, lost) = (
        ctx.device(),
        Device::open(1).unwrap(),
        Device::open(3).unwrap(),
    );
    sim::lose(&lost).unwrap();
    let peer_ctx = peer.primary_context().clone();
    let s = stream(&ctx, STRATEGIES[0]);
    let access = device.enable_peer_access(&peer).unwrap();
    let held = sim::hold(&device).unwrap();
    let copy = s.copy_d2d(dev(&ctx, 4096), dev(&peer_ctx, 4096));
    let done = copy.completion().clone();
    drop((copy, access));
    assert!(device.peer_access_to(&peer).is_some(), "the copy keeps it");
    *HELD_REAPER.lock().unwrap() = Some(hold_the_reaper());
    held.release().unwrap();
    until("the copy completes", || done.is_complete());
    let refused = flushed_in_a_callback(&["ascendcl", "npu_sim"], || {
        device.enable_peer_access(&lost)
    });
    assert!(refused.unwrap_err().is_device_lost());
    until_released("the copy's peer access is released", || {
        device.peer_access_to(&peer).is_none()
    });
    // A bounded pool: blocks `a` and `b` out, `c` cached, and a request for twice their size
    // queued for room.
    let pool = device_pool(&ctx, DevicePoolBackend::Caching, Some(3 * 4096));
    let [a, _b, c] = [0; 3].map(|_| run(pool.alloc::<u8>(&s, 4096)).unwrap());
    drop(c);
    let mut queued = Box::pin(pool.alloc::<u8>(&s, 2 * 4096));
    assert!(polled_once(queued.as_mut()).is_pending(), "no room");
    let held = sim::hold(&device).unwrap();
    let memset = s.memset(a, 1);
    let done = memset.completion().clone();
    drop(memset);
    *HELD_REAPER.lock().unwrap() = Some(hold_the_reaper());
    held.release().unwrap();
    until("the memset completes", || done.is_complete());
    let trimmed = flushed_in_a_callback(&["npu_stream::device_pool"], || pool.trim());
    assert_eq!(trimmed.unwrap(), 4096, "the cached block");
    drop(run(queued).unwrap());
}

/// Runs `call` with [`FlushesInItsCallback`] armed for `targets`; checks that the callback
/// flushed, under one of npu-rs's locks, and returned.
fn flushed_in_a_callback<R>(targets: &'static [&'static str], call: impl FnOnce() -> R) -> R {
    use tracing_subscriber::layer::SubscriberExt;
    *FLUSH_ON.lock().unwrap() = targets;
    FLUSHED.store(false, Ordering::SeqCst);
    UNDER_A_LOCK.store(false, Ordering::SeqCst);
    let subscriber = tracing_subscriber::registry().with(FlushesInItsCallback);
    let result = tracing::subscriber::with_default(subscriber, call);
    assert!(FLUSHED.load(Ordering::SeqCst), "the callback flushed");
    assert!(
        UNDER_A_LOCK.load(Ordering::SeqCst),
        "the callback ran under one of npu-rs's locks"
    );
    result
}

/// Promise: no npu-rs wait called back from code npu-rs runs on its own threads waits for the
/// thread it runs on (rules 5 and 6): `Completion::wait_blocking` and a `BlockingWaiter`'s
/// bounded wait, called from a waker that the completing thread wakes (the reactor, a callback
/// worker, a blocking waiter's thread: every strategy) for an operation of the same stream
/// still pending behind it (a wait on a notify that another stream sets afterwards, which
/// that thread completes next), and `wait_blocking` for the woken operation itself.
///
/// Outcome: **broke** before the fix: the waker's wait blocked the completing thread, which
/// was the one to complete the pending operation, for ever (the child process hung; every
/// operation that thread serves would have waited too). Both waits of a pending operation are
/// now refused there with `InvalidArgument` naming the API and `thread`, a look with a zero
/// timeout says pending, the complete operation's wait returns its result; the pending
/// operation completes once the notify is set.
#[test]
fn a_blocking_wait_in_a_waker_on_the_completing_thread_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "waits in a waker");
}

/// The child process's case of
/// [`a_blocking_wait_in_a_waker_on_the_completing_thread_is_refused_not_hung`].
fn blocking_waits_in_a_waker_on_the_completing_thread() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s, setting) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = npu::stream::Notify::new(&ctx).unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let mut first = s.memset(dev(&ctx, 64), 6);
        let behind = s.wait_notify(&notify);
        let (waker, heard) = WaitsWhenWoken::waker(behind.completion(), first.completion(), false);
        let polled = std::future::Future::poll(
            std::pin::Pin::new(&mut first),
            &mut std::task::Context::from_waker(&waker),
        );
        assert!(polled.is_pending(), "{what}: held");
        drop(waker);
        held.release().unwrap();
        let heard = heard
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{what}: the waker was not woken, or its wait hung"));
        assert!(
            heard.thread.starts_with("npu-"),
            "{what}: woken on {:?}",
            heard.thread
        );
        refused_not_waited(heard, &what);
        run(setting.record_notify(&notify)).unwrap();
        run(behind).unwrap();
        assert_eq!(
            run(first).unwrap().to_vec_blocking().unwrap(),
            [6; 64],
            "{what}"
        );
    }
}

/// The pair of operations [`WaitsInItsCallback`] waits for, and where it sends what it heard;
/// armed while set, taken by the first callback of the simulator's events.
static WAITS_FOR: Mutex<Option<(Completion, Completion, std::sync::mpsc::Sender<Heard>)>> =
    Mutex::new(None);

/// A tracing layer whose callback, once armed, makes [`blocking_waits`] from the simulator's
/// next event.
struct WaitsInItsCallback;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WaitsInItsCallback {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        if !["ascendcl", "npu_sim"]
            .iter()
            .any(|t| target.starts_with(t))
        {
            return;
        }
        let Some((pending, complete, told)) = WAITS_FOR.lock().unwrap().take() else {
            return;
        };
        let _ = told.send(blocking_waits(&pending, &complete));
    }
}

/// Promise: no npu-rs wait called back from code npu-rs runs under one of its locks is made
/// there (rules 5 and 6): `Completion::wait_blocking` and a `BlockingWaiter`'s bounded wait for
/// an operation still pending (a wait on a notify that another stream sets once the call
/// returns), and `wait_blocking` for one complete, from a tracing subscriber's callback under
/// a stream's submission lock (the simulator's report of a memset refused on a stream
/// stopped in a context of its own), every strategy.
///
/// Outcome: **broke** before the fix: the callback's wait blocked under the lock, and the
/// thread that would let the operation finish was the one waiting (the child process hung;
/// every thread of npu-rs's that takes the lock, an abort's ending the work it discarded,
/// would have waited too). Both waits are now refused with `InvalidArgument` naming the API
/// and `thread`, a look says pending, the complete operation's wait returns its result, the
/// memset is refused as before, and the pending operation completes once the notify is set.
#[test]
fn a_blocking_wait_from_a_subscriber_under_a_submission_lock_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "waits under a lock");
}

/// The child process's case of
/// [`a_blocking_wait_from_a_subscriber_under_a_submission_lock_is_refused_not_hung`].
fn blocking_waits_from_a_subscriber_under_a_submission_lock() {
    use tracing_subscriber::layer::SubscriberExt;
    let (_guard, ctx) = devices();
    see_every_callsite();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        // A context of its own: the stop stops the whole context.
        let own = ctx.device().create_context().unwrap();
        let stopped = stream(&own, strategy);
        stopped.set_failure_mode(FailureMode::Stop).unwrap();
        sim::fail_task(&stopped, 1, TRAP).unwrap();
        assert!(
            run(stopped.memset(dev(&own, 16), 1)).is_err(),
            "{what}: stopped"
        );
        let (waiting, setting) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = npu::stream::Notify::new(&ctx).unwrap();
        let pending = waiting.wait_notify(&notify);
        let complete = setting.synchronize();
        let done = complete.completion().clone();
        run(complete).unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        *WAITS_FOR.lock().unwrap() = Some((pending.completion().clone(), done, told));
        let subscriber = tracing_subscriber::registry().with(WaitsInItsCallback);
        // Made before the subscriber: the first of the simulator's events it hears is the
        // memset's refusal, under the submission lock.
        let spare = dev(&own, 16);
        let refused =
            tracing::subscriber::with_default(subscriber, || run(stopped.memset(spare, 2)));
        assert!(refused.is_err(), "{what}: the stopped stream ran a memset");
        let heard = heard
            .try_recv()
            .unwrap_or_else(|_| panic!("{what}: no callback under the lock"));
        assert_eq!(
            heard.thread,
            std::thread::current().name().unwrap_or(""),
            "{what}: the callback runs on the submitting thread"
        );
        refused_not_waited(heard, &what);
        run(setting.record_notify(&notify)).unwrap();
        run(pending).unwrap();
    }
}
