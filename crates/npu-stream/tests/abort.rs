//! `Stream::abort` and `Stream::stop` under every completion strategy: an abort fails every
//! operation it discarded with `Error::Aborted` once the device has confirmed the discard,
//! releases their buffers, and leaves the stream usable; a stop fails the pending work once the
//! device reports it, and an abort then revives the stream. Its own process: it holds device 1.

mod common;
mod kernel_support;

use std::sync::mpsc;
use std::time::Duration;

use common::{STRATEGIES, run, stream};
use npu_core::{Device, Error};
use npu_mem::{DeviceBuffer, PinnedBuffer};
use npu_sim::control;
use npu_stream::Event;

#[test]
fn an_abort_fails_what_it_discarded_and_the_stream_runs_again() {
    let ctx = Device::open(1).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        // Work that completed before the abort is not affected.
        let done = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9)).unwrap();
        let before = control::device_stats(1).unwrap().live_allocations;
        control::hold(1).unwrap();
        let memsets: Vec<_> = (0..3)
            .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), i))
            .collect();
        let host = PinnedBuffer::from_slice(&ctx, &[1u8; 4096]).unwrap();
        let copy = s.copy_h2d(host, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        run(s.abort()).unwrap();
        for memset in memsets {
            let err = run(memset).unwrap_err();
            assert!(err.error.is_aborted(), "{strategy:?}: {err}");
            assert!(matches!(
                err.error,
                npu_core::Error::Aborted {
                    api: "aclrtMemsetAsync"
                }
            ));
        }
        assert!(run(copy).unwrap_err().error.is_aborted(), "{strategy:?}");
        npu_core::reaper::flush();
        assert_eq!(
            control::device_stats(1).unwrap().live_allocations,
            before,
            "{strategy:?}: the discarded operations' buffers were released"
        );
        control::release(1).unwrap();
        let again = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4))
            .unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(again.to_vec_blocking().unwrap(), [4; 64], "{strategy:?}");
        assert_eq!(done.to_vec_blocking().unwrap(), [9; 64]);
        run(s.synchronize()).unwrap();
    }
}

#[test]
fn aborting_an_idle_stream_is_harmless() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(s.abort()).unwrap();
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 3)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [3; 16], "{strategy:?}");
    }
}

#[test]
fn a_stopped_stream_fails_its_work_and_an_abort_revives_it() {
    // Device 0: the abort test holds device 1.
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        s.stop().unwrap();
        let stopped = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(
            run(stopped).is_err(),
            "{strategy:?}: a stopped stream's work never runs"
        );
        run(s.abort()).unwrap();
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
    }
}

#[test]
fn submissions_during_an_abort_are_discarded_at_once_instead_of_waiting_for_the_running_task() {
    // Device 0: the first test holds device 1.
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        let (running, _gate) = kernel_support::launch_gated(&s);
        let queued = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        let aborter = {
            let s = s.clone();
            std::thread::spawn(move || run(s.abort()))
        };
        // Until the abort has begun, a memset queues behind the running kernel; from then on
        // it must come back at once, refused, while the kernel still runs. On a regression
        // the submission blocks until the kernel returns, which only this thread can allow:
        // the bound below turns that deadlock into a failure.
        let (tx, rx) = mpsc::channel();
        let submitter = {
            let (s, ctx) = (s.clone(), ctx.clone());
            std::thread::spawn(move || {
                let mut behind = Vec::new();
                loop {
                    let memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
                    if memset.is_complete() {
                        let record = Event::new(&ctx).unwrap().record(&s);
                        tx.send(()).unwrap();
                        return (memset, record, behind);
                    }
                    behind.push(memset);
                    std::thread::yield_now();
                }
            })
        };
        let submitted = rx.recv_timeout(Duration::from_secs(60));
        if submitted.is_ok() {
            // The kernel's record is discarded only if the kernel returns once the runtime's
            // abort call has begun (the refusals start just before it).
            common::until_the_runtime_aborts(&s);
        }
        kernel_support::open_gate();
        submitted.unwrap_or_else(|_| {
            panic!("{strategy:?}: a submission waited behind the abort for the running task")
        });
        let (refused, record, behind) = submitter.join().unwrap();
        aborter.join().unwrap().unwrap();
        let err = run(refused).unwrap_err().error;
        assert!(
            matches!(
                err,
                Error::Aborted {
                    api: "aclrtMemsetAsync"
                }
            ),
            "{strategy:?}: {err}"
        );
        let err = record.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Aborted {
                    api: "aclrtRecordEvent"
                }
            ),
            "{strategy:?}: {err}"
        );
        // The kernel ran to its end, but its completion record was queued behind it: it fails
        // as discarded, like everything submitted before the abort.
        assert!(run(running).unwrap_err().error.is_aborted(), "{strategy:?}");
        for memset in std::iter::once(queued).chain(behind) {
            assert!(run(memset).unwrap_err().error.is_aborted(), "{strategy:?}");
        }
        // Once the abort is over, the stream takes work again.
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
    }
}

/// Aborts racing submissions and event records on other threads, under every strategy: every
/// operation resolves (done, or `Aborted` whether refused at once or discarded by the device),
/// a memset that succeeded wrote its value, every record that was accepted can be waited for,
/// and the stream takes work afterwards (no abort is left counted as in progress). (From the
/// eighth review.)
#[test]
fn aborts_racing_submissions_and_records_leave_nothing_behind() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let stop = Arc::new(AtomicBool::new(false));
        let submitters: Vec<_> = (0..2u8)
            .map(|thread| {
                let (s, ctx, stop) = (s.clone(), ctx.clone(), stop.clone());
                std::thread::spawn(move || {
                    let event = Event::new(&ctx).unwrap();
                    let mut round = 0u8;
                    while !stop.load(Ordering::Relaxed) {
                        round = round.wrapping_add(1);
                        let value = (thread * 100).wrapping_add(round % 100) | 1;
                        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 1 << 16).unwrap(), value);
                        let recorded = event.record(&s);
                        match run(op) {
                            Ok(buffer) => assert!(
                                buffer
                                    .to_vec_blocking()
                                    .unwrap()
                                    .iter()
                                    .all(|&b| b == value),
                                "{strategy:?}: a memset that succeeded wrote its value"
                            ),
                            Err(err) => assert!(err.error.is_aborted(), "{strategy:?}: {err}"),
                        }
                        if recorded.is_ok() {
                            let _ = run(event.wait());
                        }
                    }
                })
            })
            .collect();
        let aborters: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        run(s.abort()).unwrap();
                    }
                })
            })
            .collect();
        for aborter in aborters {
            aborter.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for submitter in submitters {
            submitter.join().unwrap();
        }
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3))
            .unwrap_or_else(|err| panic!("{strategy:?}: refused after the aborts: {err}"));
        assert_eq!(buffer.to_vec_blocking().unwrap(), [3; 64]);
        run(s.synchronize()).unwrap();
    }
}

/// Promise (rule 5): dropping a Tokio runtime while an abort waits for the device's running
/// task returns without waiting for it. The abort runs on a thread of its own, not on the
/// runtime's blocking pool (whose shutdown waits for its threads), and finishes there once the
/// task ends. (From the ninth review.)
#[test]
fn dropping_a_tokio_runtime_during_an_abort_does_not_wait_for_the_running_task() {
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let (running, _gate) = kernel_support::launch_gated(&s);
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let aborting = tokio.spawn({
            let s = s.clone();
            async move { s.abort().await }
        });
        // Until the abort has begun, a memset queues behind the running kernel; from then on
        // it is refused at once.
        let (refused, behind) = common::memsets_until_refused(&s, 1);
        common::until_the_runtime_aborts(&s);
        // On a regression the drop waits until the kernel returns, which only this thread can
        // allow: the bound turns that deadlock into a failure.
        let (tx, rx) = mpsc::channel();
        let dropper = std::thread::spawn(move || {
            drop(aborting);
            drop(tokio);
            tx.send(()).unwrap();
        });
        let dropped = rx.recv_timeout(Duration::from_secs(60));
        kernel_support::open_gate();
        dropper.join().unwrap();
        dropped.unwrap_or_else(|_| {
            panic!("{strategy:?}: dropping the Tokio runtime waited for the device's running task")
        });
        // The abort finishes on its own thread: until it has, submissions are refused; then
        // the stream takes work again.
        let buffer = loop {
            match run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)) {
                Ok(buffer) => break buffer,
                Err(err) if err.error.is_aborted() => std::thread::yield_now(),
                Err(err) => panic!("{strategy:?}: {err}"),
            }
        };
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
        assert!(run(refused).unwrap_err().error.is_aborted(), "{strategy:?}");
        assert!(run(running).unwrap_err().error.is_aborted(), "{strategy:?}");
        for memset in behind {
            assert!(run(memset).unwrap_err().error.is_aborted(), "{strategy:?}");
        }
    }
}

/// An abort starts when `abort` is called, like every operation, not when its future is first
/// polled: dropped unpolled (a `select!` whose other branch was ready), it still discards the
/// queued work. (From the tenth review.)
#[test]
fn an_abort_dropped_unpolled_still_aborts() {
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let (running, _gate) = kernel_support::launch_gated(&s);
        let queued = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        drop(s.abort());
        // The abort has begun once a submission is refused at once. (On a regression it never
        // begins: the bound makes that a failure.)
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        let refused = loop {
            let memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
            if memset.is_complete() {
                break memset;
            }
            if std::time::Instant::now() > give_up {
                kernel_support::open_gate();
                panic!("{strategy:?}: the abort dropped unpolled never began");
            }
            drop(memset);
            std::thread::yield_now();
        };
        // What was queued is discarded only if the kernel returns once the runtime's abort
        // call has begun.
        common::until_the_runtime_aborts(&s);
        kernel_support::open_gate();
        assert!(run(refused).unwrap_err().error.is_aborted(), "{strategy:?}");
        assert!(run(queued).unwrap_err().error.is_aborted(), "{strategy:?}");
        let _ = run(running);
    }
}
