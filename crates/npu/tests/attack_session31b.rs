//! Attacks of the thirty-first session's second half on the day's changes, through the `npu`
//! facade (and the raw ACL calls a program holding `Stream::as_raw` can make): the idle probe
//! that fails work an abort npu-rs never heard of discarded, the refusal of waits on legacy
//! events npu-rs never recorded, and the paused clock's shared keeper chains.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `watchdog`), so a hang fails its test.

mod common;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::stream::{Notify, Op, OpError, Strategy};
use npu::{Error, Stream, sim};

/// The value the attacks' memsets write; buffers start zeroed on the simulator.
const WRITTEN: u8 = 7;

/// The memory of each of the two simulated devices: small enough for a pool to fill one.
const MEMORY: u64 = 64 << 20;

/// The size of the blocks `fill_the_device` fills a device with.
const BLOCK: usize = 4 << 20;

/// The device lock and the primary contexts of devices 0 and 1, of this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    let (guard, d0) = devices_of(2, MEMORY);
    let d1 = Device::open(1).unwrap().primary_context().clone();
    (guard, d0, d1)
}

/// `aclrtStreamAbort` of `s`'s handle through the raw API, as a program holding
/// `Stream::as_raw` may call it.
fn raw_stream_abort(ctx: &Context, s: &Stream) -> AclCode {
    ctx.bind().unwrap();
    let abort = ctx.runtime().api().aclrtStreamAbort;
    let abort = abort.expect("npu-sim exports aclrtStreamAbort");
    // SAFETY: the stream is alive (`s`) and its context is bound on this thread.
    AclCode(unsafe { abort(s.as_raw()) })
}

/// A memset of a fresh (zeroed) 64-byte buffer to [`WRITTEN`].
fn a_memset(ctx: &Context, s: &Stream) -> Op<DeviceBuffer<u8>> {
    s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), WRITTEN)
}

/// How a memset of [`a_memset`] ended, checked against what the device did to its buffer: a
/// memset that succeeded wrote it; one that failed handed it back, and the device is done
/// with it: what it reads when handed back is what it reads once every stream that could
/// still touch it is synchronised (`settle`). A memset an abort discarded may have run before
/// its completion record was dropped; one the idle probe failed while the device still had it
/// queued would be written only after it was handed back. Returns whether it ended
/// `Error::Aborted`.
fn ended_soundly(
    result: Result<DeviceBuffer<u8>, OpError<DeviceBuffer<u8>>>,
    settle: impl Fn(),
    what: &str,
) -> bool {
    match result {
        Ok(buffer) => {
            assert_eq!(buffer.to_vec_blocking().unwrap(), [WRITTEN; 64], "{what}");
            false
        }
        Err(failed) => {
            let buffer = failed.value.unwrap_or_else(|| panic!("{what}: no value"));
            let handed_back = buffer.to_vec_blocking().unwrap();
            settle();
            assert_eq!(
                buffer.to_vec_blocking().unwrap(),
                handed_back,
                "{what}: the device wrote a memset's buffer after the memset failed ({}): it \
                 was failed while the device still had it queued",
                failed.error
            );
            failed.error.is_aborted()
        }
    }
}

/// Promise attacked: the idle probe never fails an operation the device may still run.
/// Three threads submit memsets to one stream of a held device in rounds, and between rounds
/// (no submission in progress, as `Stream::as_raw` requires of a raw abort) the test's thread
/// aborts the raw handle, new work following each abort at once; the probe runs throughout.
/// Once the device is released every memset ends: those the aborts discarded `Aborted`, their
/// buffers never written (the device was held until then) even after the stream has run
/// everything; the others succeed, written. Under every strategy.
#[test]
fn raw_aborts_between_rounds_of_three_submitting_threads_fail_only_the_work_they_discarded() {
    const ROUNDS: usize = 4;
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = Arc::new(stream(&d0, strategy));
        a_memset_writes(&d0, &s, 3, &what);
        let held = sim::hold(&device).unwrap();
        let round = Arc::new(Barrier::new(4));
        let submitters: Vec<_> = (0..3)
            .map(|_| {
                let (ctx, s, round) = (d0.clone(), s.clone(), round.clone());
                std::thread::spawn(move || {
                    let mut ops = Vec::new();
                    for _ in 0..ROUNDS {
                        ops.extend((0..4).map(|_| a_memset(&ctx, &s)));
                        round.wait(); // this round is submitted
                        round.wait(); // the abort between rounds is over
                    }
                    ops
                })
            })
            .collect();
        for _ in 1..ROUNDS {
            round.wait();
            assert_eq!(raw_stream_abort(&d0, &s), AclCode(0), "{what}");
            round.wait();
        }
        round.wait();
        round.wait();
        let ops: Vec<_> = submitters
            .into_iter()
            .flat_map(|submitter| submitter.join().unwrap())
            .collect();
        held.release().unwrap();
        let settle = || {
            let _ = run(s.synchronize());
        };
        let ended: Vec<bool> = ops
            .into_iter()
            .map(|op| ended_soundly(run(op), settle, &what))
            .collect();
        // Each thread's first three rounds were discarded, its last one ran.
        let discarded = [true; 12].into_iter().chain([false; 4]);
        let expected: Vec<bool> = (0..3).flat_map(|_| discarded.clone()).collect();
        assert_eq!(ended, expected, "{what}");
        a_memset_writes(&d0, &s, 2, &what);
    }
}

/// Promise attacked: the idle probe judges each stream by its own queue, and a stream held by
/// a device-side wait on another stream's event is not idle. Stream `a` waits on a legacy
/// event recorded on `b` behind a notify wait nothing satisfies, then queues a memset.
/// A raw abort of `b` drops `b`'s notify wait and the record: `a`'s wait then fails (its
/// record is gone), and `a`, never aborted, must not see its memset fail `Aborted`; it ends
/// (with the stream's failure or written). A raw abort of `a` instead discards `a`'s wait and
/// memset: the memset fails `Aborted`, never written, while `b` stays blocked until
/// `Stream::abort`. Under every strategy.
#[test]
fn a_stream_waiting_on_another_streams_discarded_record_is_judged_by_its_own_queue() {
    let (_guard, d0, _d1) = devices();
    for strategy in STRATEGIES {
        for abort_waiter in [false, true] {
            let what = format!("{strategy:?}, raw abort of the waiter: {abort_waiter}");
            let (a, b) = (stream(&d0, strategy), stream(&d0, strategy));
            let gate = Notify::new(&d0).unwrap();
            let blocked = b.wait_notify(&gate);
            let ready = Event::new(&d0).unwrap();
            ready.record(&b).unwrap();
            a.wait_event(&ready).unwrap();
            let queued = a_memset(&d0, &a);
            let aborted = if abort_waiter { &a } else { &b };
            assert_eq!(raw_stream_abort(&d0, aborted), AclCode(0), "{what}");
            let settle = || {
                let _ = run(a.synchronize());
            };
            let was_aborted = ended_soundly(run(queued), settle, &what);
            assert_eq!(was_aborted, abort_waiter, "{what}");
            if abort_waiter {
                run(b.abort()).unwrap_or_else(|err| panic!("{what}: {err}"));
            }
            assert!(run(blocked).unwrap_err().error.is_aborted(), "{what}");
            a_memset_writes(&d0, &a, 2, &what);
            a_memset_writes(&d0, &b, 2, &what);
        }
    }
}

/// Promise attacked: the idle probe never fails a kernel still running. A gated kernel runs
/// on a stream and a memset waits behind it; the raw handle is aborted from another thread
/// (which the runtime lets finish only once the kernel returns). Whatever the probe sees
/// meanwhile, the kernel's launch ends only after the kernel has returned, and the memset
/// ends soundly: written, or `Aborted` with its buffer as the device left it (the abort may
/// begin before or after the kernel returns). Under every strategy.
#[test]
fn a_raw_abort_waiting_for_a_running_kernel_fails_nothing_before_the_kernel_returns() {
    let (_guard, d0, _d1) = devices();
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let (running, queued) =
            a_held_fill_and_behind_it(&d0, &s, &fill, &what, || a_memset(&d0, &s));
        let aborting = std::thread::scope(|scope| {
            let abort = scope.spawn(|| raw_stream_abort(&d0, &s));
            // The launch cannot end while the kernel runs, whatever the probe concludes.
            let mut running = std::pin::pin!(running);
            assert!(polled_once(running.as_mut()).is_pending(), "{what}");
            set_gate(|gate| gate.1 = true);
            let ended = run(running);
            assert!(
                RETURNED.load(Ordering::Acquire),
                "{what}: the launch ended before its kernel returned"
            );
            if let Err(failed) = ended {
                assert!(failed.error.is_aborted(), "{what}: {}", failed.error);
            }
            abort.join().unwrap()
        });
        assert_eq!(aborting, AclCode(0), "{what}");
        let settle = || {
            let _ = run(s.synchronize());
        };
        // Aborted if the abort began before the kernel returned, written otherwise.
        ended_soundly(run(queued), settle, &what);
        a_memset_writes(&d0, &s, 2, &what);
    }
}

/// Promise attacked: every discarded operation ends, and soundly, when a raw abort races
/// npu-rs's own `Stream::abort` of the same stream, or follows a `Stream::stop`. Memsets
/// queued behind a held device; then either another thread aborts the raw handle while this
/// one awaits `Stream::abort`, or the stream is stopped (`Stream::stop`) and its raw handle
/// aborted. Once the device is released each memset ends with an error and a buffer the
/// device left alone, and the stream runs new work. Every strategy.
#[test]
fn raw_aborts_racing_a_stream_abort_or_following_a_stop_end_every_operation() {
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        for stop_first in [false, true] {
            let what = format!("{strategy:?}, stopped first: {stop_first}");
            let s = stream(&d0, strategy);
            a_memset_writes(&d0, &s, 3, &what);
            let held = sim::hold(&device).unwrap();
            let queued: Vec<_> = (0..6).map(|_| a_memset(&d0, &s)).collect();
            if stop_first {
                s.stop().unwrap();
                assert_eq!(raw_stream_abort(&d0, &s), AclCode(0), "{what}");
            } else {
                std::thread::scope(|scope| {
                    let raw = scope.spawn(|| raw_stream_abort(&d0, &s));
                    run(s.abort()).unwrap_or_else(|err| panic!("{what}: {err}"));
                    // Two aborts of one stream at once both succeed: each waits for the
                    // stream's running task (none, the device being held) and discards.
                    assert_eq!(raw.join().unwrap(), AclCode(0), "{what}");
                });
            }
            held.release().unwrap();
            let settle = || {
                let _ = run(s.synchronize());
            };
            for op in queued {
                let result = run(op);
                assert!(result.is_err(), "{what}: a discarded memset succeeded");
                ended_soundly(result, settle, &what);
            }
            a_memset_writes(&d0, &s, 2, &what);
        }
    }
}

/// Promise attacked: `Stream::wait_event` refuses a legacy event npu-rs never recorded, and a
/// wait it accepts never holds its stream for ever. Variants: an event of device 1 recorded
/// there and waited on by device 0's stream (a typed error or a wait that passes); an event
/// whose only record a raw abort discarded (the wait must end: the runtime fails it, or it
/// passes; the work behind it ends either way); an event recorded on a stopped stream then
/// aborted with `Stream::abort`; an event re-recorded after such a discard (the wait passes
/// once the new record is reached). The stream waiting runs new work afterwards.
#[test]
fn waits_on_legacy_events_whose_records_went_elsewhere_or_were_discarded_end() {
    let (_guard, d0, d1) = devices();
    let device = Device::open(0).unwrap();
    let (waiter, other) = (Stream::new(&d0).unwrap(), Stream::new(&d0).unwrap());

    // Never recorded, then refused: the wait queues nothing.
    let never = Event::new(&d0).unwrap();
    assert!(matches!(
        waiter.wait_event(&never),
        Err(Error::InvalidArgument { .. })
    ));
    a_memset_writes(&d0, &waiter, 1, "never recorded");

    // Recorded on another device's stream.
    let elsewhere = Event::new(&d1).unwrap();
    let s1 = Stream::new(&d1).unwrap();
    elsewhere.record(&s1).unwrap();
    run(s1.synchronize()).unwrap();
    match waiter.wait_event(&elsewhere) {
        Ok(()) => a_memset_writes(&d0, &waiter, 2, "another device's event, accepted"),
        Err(err) => {
            assert!(
                matches!(err, Error::Acl(_) | Error::InvalidArgument { .. }),
                "{err:?}"
            );
            a_memset_writes(&d0, &waiter, 2, "another device's event, refused");
        }
    }

    // The only record discarded by a raw abort, then waited on.
    let discarded = Event::new(&d0).unwrap();
    let held = sim::hold(&device).unwrap();
    discarded.record(&other).unwrap();
    assert_eq!(raw_stream_abort(&d0, &other), AclCode(0));
    held.release().unwrap();
    let accepted = waiter.wait_event(&discarded);
    let behind = a_memset(&d0, &waiter);
    let settle = || {
        let _ = run(waiter.synchronize());
    };
    let _ = ended_soundly(run(behind), settle, "behind a wait on a discarded record");
    if let Err(err) = accepted {
        assert!(matches!(err, Error::Acl(_)), "{err:?}");
    }
    a_memset_writes(&d0, &waiter, 3, "after a wait on a discarded record");

    // Recorded on a stopped stream, the record discarded by Stream::abort.
    let stopped = Event::new(&d0).unwrap();
    let gate = Notify::new(&d0).unwrap();
    let blocked = other.wait_notify(&gate);
    other.stop().unwrap();
    let behind = stopped
        .record(&other)
        .and_then(|()| waiter.wait_event(&stopped))
        .map(|()| a_memset(&d0, &waiter));
    run(other.abort()).unwrap();
    // Ends with the stop's error: the abort ends what a stop had stopped with that fault.
    assert!(run(blocked).is_err());
    if let Ok(behind) = behind {
        let _ = ended_soundly(run(behind), settle, "behind a stopped stream's record");
    }

    // Re-recorded after the discard: the wait is for the new record.
    discarded.record(&other).unwrap();
    waiter.wait_event(&discarded).unwrap();
    a_memset_writes(&d0, &waiter, 4, "after a re-recorded event");
    assert!(discarded.is_complete().unwrap());
    a_memset_writes(&d0, &other, 5, "the recording stream");
}

/// Promise attacked: under a paused clock, a wait polled first while the clock ran, then
/// moved to another runtime whose clock is paused, keeps that clock from jumping past the
/// device: a one-hour sleep raced against it never wins while the device is held, and the
/// clock moves again once the work is done (the sleep then completes in no real time). The
/// first runtime is shut down mid-chain: its shutdown is not held for the device.
#[test]
fn a_wait_moved_from_a_running_clock_to_a_paused_runtime_keeps_that_clock() {
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    let s = stream(&d0, Strategy::EventPoll);
    let held = sim::hold(&device).unwrap();
    let mut op = Box::pin(a_memset(&d0, &s));
    // Polled on a running clock, then on a paused one that is shut down while its chain runs.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { assert!(polled_once(op.as_mut()).is_pending()) });
    let first = paused_runtime();
    first.block_on(async {
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(op.as_mut().poll(cx)));
        assert!(pending.await.is_pending());
    });
    watchdog("shutting the first paused runtime down", || drop(first));
    let (polled, first_poll) = std::sync::mpsc::channel::<()>();
    let releaser = std::thread::spawn(move || {
        first_poll.recv().unwrap();
        held.release().unwrap();
    });
    let second = paused_runtime();
    let written = watchdog("the moved wait", || {
        second.block_on(async {
            let mut polled = Some(polled);
            let mut sleep = std::pin::pin!(tokio::time::sleep(Duration::from_secs(3600)));
            let outcome = std::future::poll_fn(|cx| {
                if let std::task::Poll::Ready(done) = op.as_mut().poll(cx) {
                    return std::task::Poll::Ready(Some(done));
                }
                if let Some(polled) = polled.take() {
                    polled.send(()).unwrap();
                }
                sleep.as_mut().poll(cx).map(|()| None)
            })
            .await;
            let done = outcome.expect("the one-hour sleep won against a held device");
            // The work is done: the clock moves again.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            done
        })
    });
    releaser.join().unwrap();
    assert_eq!(written.unwrap().to_vec_blocking().unwrap(), [WRITTEN; 64]);
}

/// Promise attacked: the keeper chain ends once the work is done, even when the future that
/// wanted it was forgotten (`mem::forget`) while pending, its claim never given back: a
/// one-hour sleep on the same paused runtime completes once the stream has run the work.
#[test]
fn a_forgotten_wait_stops_keeping_the_clock_once_its_work_is_done() {
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    let s = stream(&d0, Strategy::EventPoll);
    let held = sim::hold(&device).unwrap();
    let runtime = paused_runtime();
    // Never dropped while the runtime lives, as `mem::forget` would leave it; kept reachable
    // so that the test leaks nothing.
    let mut forgotten = std::mem::ManuallyDrop::new(Box::pin(a_memset(&d0, &s)));
    watchdog("the forgotten wait", || {
        runtime.block_on(async {
            let op = &mut *forgotten;
            let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(op.as_mut().poll(cx)));
            assert!(pending.await.is_pending());
            held.release().unwrap();
            s.synchronize().await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
    });
    drop(runtime);
    // Dropped only now, its runtime gone: its claim on a chain of that runtime goes quietly.
    drop(std::mem::ManuallyDrop::into_inner(forgotten));
}

/// The device state changes the callback of [`nested_opens_of_a_device_in_use_change_no_state`]
/// was told of: (device, state).
static STATE_CHANGES: std::sync::Mutex<Vec<(i32, u32)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn note_state_change(
    device: i32,
    state: npu::ffi::aclrtDeviceState,
    _: *mut std::ffi::c_void,
) {
    STATE_CHANGES.lock().unwrap().push((device, state));
}

/// `aclrtRegDeviceStateCallback` of `callback` (`None` unregisters) under this file's name.
fn register_state_callback(ctx: &Context, callback: npu::ffi::aclrtDeviceStateCallback) {
    let register = ctx.runtime().api().aclrtRegDeviceStateCallback;
    let register = register.expect("npu-sim exports aclrtRegDeviceStateCallback");
    // SAFETY: a static name; the callback only pushes to a locked vector.
    let code = unsafe {
        register(
            c"attack_session31b".as_ptr(),
            callback,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0);
}

/// Promise attacked: the device state callbacks are told only of real state changes. With
/// device 1's primary context in use (the file's lock keeps it), nested `Device::open`s of
/// device 1, a stream and work on them, and their drops, change nothing: no callback.
#[test]
fn nested_opens_of_a_device_in_use_change_no_state() {
    let (_guard, d0, d1) = devices();
    d1.bind().unwrap();
    STATE_CHANGES.lock().unwrap().clear();
    register_state_callback(&d0, Some(note_state_change));
    for _ in 0..2 {
        let outer = Device::open(1).unwrap();
        let inner = Device::open(1).unwrap();
        let ctx = inner.primary_context().clone();
        let s = Stream::new(&ctx).unwrap();
        a_memset_writes(&ctx, &s, 1, "nested opens");
        drop((s, ctx, inner, outer));
    }
    register_state_callback(&d0, None);
    assert_eq!(*STATE_CHANGES.lock().unwrap(), []);
}

/// A request of `pool` for one more block while every block it could get is out: out of
/// memory, it waits one reaper pass and then fails.
fn one_more_block(pool: &DevicePool, s: &Stream) -> impl Future<Output = npu::Result<()>> {
    let request = pool.alloc::<u8>(s, BLOCK);
    async move { request.await.map(drop) }
}

/// The bytes allocated on `ctx`'s device.
fn allocated(ctx: &Context) -> u64 {
    sim::flush_releases();
    sim::device_stats(&ctx.device()).unwrap().bytes_allocated
}

/// Once `pool` is dropped, every byte it allocated is given back: the device is back to the
/// `before` bytes it had allocated before the pool was made (a dropped runtime pool gives its
/// memory back on a thread of its own, hence the bounded wait).
fn nothing_left(pool: DevicePool, ctx: &Context, before: u64, what: &str) {
    settled(&pool, what);
    drop(pool);
    until(what, || allocated(ctx) == before);
}

/// Promise attacked: `DevicePool::alloc` is cancel-safe while a request out of memory waits
/// for the reaper's pass. Every block is out (the pool filled the device) and the reaper is
/// held, so a request out of memory waits for its pass: one is dropped there, a second is
/// kept waiting, and a third is forgotten there (never dropped while the pool is used). Once
/// the reaper goes on, the second fails out of memory; a block given back serves the next
/// request, and once everything is dropped (the forgotten request last) the pool gives every
/// byte back. Both backends, every strategy.
#[test]
fn requests_out_of_memory_dropped_or_forgotten_at_the_reaper_pass_leave_the_pool_whole() {
    let (_guard, ctx, _d1) = devices();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let s = stream(&ctx, strategy);
            let before = allocated(&ctx);
            let pool = device_pool(&ctx, backend, None);
            let mut blocks = fill_the_device(&pool, &s);
            let reaper = hold_the_reaper();
            let mut dropped = Box::pin(one_more_block(&pool, &s));
            let mut kept = Box::pin(one_more_block(&pool, &s));
            let mut forgotten = std::mem::ManuallyDrop::new(Box::pin(one_more_block(&pool, &s)));
            for request in [&mut dropped, &mut kept, &mut *forgotten] {
                let polled = polled_once(request.as_mut());
                assert!(polled.is_pending(), "{what}: waits for the reaper");
            }
            drop(dropped);
            reaper.open();
            let failed = run(kept).unwrap_err();
            assert!(failed.is_out_of_memory(), "{what}: {failed}");
            drop(blocks.pop());
            settled(&pool, &what);
            run(one_more_block(&pool, &s)).unwrap_or_else(|err| panic!("{what}: {err}"));
            drop(blocks);
            drop(std::mem::ManuallyDrop::into_inner(forgotten));
            nothing_left(pool, &ctx, before, &what);
        }
    }
}

/// Promise attacked: a request out of memory waits for the reaper without letting a paused
/// Tokio clock jump: with the reaper held, a one-hour timeout around the request, polled on a
/// paused runtime, gives the request's own failure once another thread lets the reaper go
/// after the first poll. Both backends.
#[test]
fn a_request_out_of_memory_keeps_a_paused_clock_while_the_reaper_is_held() {
    let (_guard, ctx, _d1) = devices();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let s = stream(&ctx, Strategy::EventPoll);
        let before = allocated(&ctx);
        let pool = device_pool(&ctx, backend, None);
        let blocks = fill_the_device(&pool, &s);
        let reaper = hold_the_reaper();
        let (polled, first_poll) = std::sync::mpsc::channel::<()>();
        let opener = std::thread::spawn(move || {
            let _ = first_poll.recv();
            reaper.open();
        });
        let timed = paused_runtime().block_on(async {
            let timed = tokio::time::timeout(Duration::from_secs(3600), one_more_block(&pool, &s));
            let mut timed = std::pin::pin!(timed);
            let first = std::future::poll_fn(|cx| Poll::Ready(timed.as_mut().poll(cx))).await;
            assert!(first.is_pending(), "{what}: waits for the reaper");
            polled.send(()).unwrap();
            timed.await
        });
        opener.join().unwrap();
        let failed = timed
            .unwrap_or_else(|_| panic!("{what}: the paused clock jumped to the timeout"))
            .unwrap_err();
        assert!(failed.is_out_of_memory(), "{what}: {failed}");
        drop(blocks);
        nothing_left(pool, &ctx, before, &what);
    }
}

/// Promise attacked: a failed reserve frees as many blocks of its class as it allocated. Two
/// reserves of one pool, each larger than the device, run at once; both fail out of memory,
/// and afterwards the pool caches nothing, whichever blocks each took back, and gives every
/// byte back once dropped. Both backends.
#[test]
fn two_reserves_larger_than_the_device_at_once_leave_nothing_cached() {
    let (_guard, ctx, _d1) = devices();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let (a, b) = (
            stream(&ctx, Strategy::EventPoll),
            stream(&ctx, Strategy::CallbackThread),
        );
        let before = allocated(&ctx);
        let pool = device_pool(&ctx, backend, None);
        let count = usize::try_from(MEMORY).unwrap() / BLOCK;
        let (first, second) = run(async {
            tokio::join!(
                pool.reserve(&a, count, BLOCK),
                pool.reserve(&b, count, BLOCK)
            )
        });
        for reserved in [first, second] {
            let failed = reserved.expect_err(&what);
            assert!(failed.is_out_of_memory(), "{what}: {failed}");
        }
        assert_eq!(settled(&pool, &what).cached, 0, "{what}");
        nothing_left(pool, &ctx, before, &what);
    }
}

/// Promise attacked: a memset of another device's memory needs peer access (the runtime
/// refuses it otherwise, 207006). Through npu-rs it never reaches the runtime: a stream of
/// device 0 memsetting a buffer of device 1 is refused first (`InvalidArgument`, `dst`), with
/// peer access from device 0 to device 1 enabled or not, the buffer handed back untouched and
/// the stream running new work. Every strategy.
#[test]
fn a_memset_of_another_devices_buffer_is_refused_with_or_without_peer_access() {
    let (_guard, d0, d1) = devices();
    let (dev0, dev1) = (Device::open(0).unwrap(), Device::open(1).unwrap());
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let mut buffer = DeviceBuffer::<u8>::new(&d1, 64).unwrap();
        for peer in [false, true] {
            let access = peer.then(|| dev0.enable_peer_access(&dev1).unwrap());
            let refused = run(s.memset(buffer, WRITTEN)).expect_err(&what);
            assert_eq!(
                invalid(&refused.error),
                ("Stream::memset", "dst"),
                "{what}, peer access: {peer}"
            );
            buffer = refused.value.expect("the buffer handed back");
            assert_eq!(buffer.to_vec_blocking().unwrap(), [0; 64], "{what}");
            drop(access);
        }
        a_memset_writes(&d0, &s, 2, &what);
    }
}
