//! Attacks of the twenty-second session's second helper, through the `npu` facade:
//! `Stream::abort`'s error attribution (concurrent aborts and stops racing submissions, the
//! task running when an abort begins) and the paused-clock keeper under `Completion::wait`
//! (futures moved between executors and runtimes, runtimes shut down with keepers running,
//! a thousand pending waits on one paused runtime).
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::prelude::*;
use npu::sim;
use npu::{Error, Stream};

/// Rules 1 to 3 and the meaning of `Error::Aborted` under concurrent aborts (awaited and
/// dropped) and stops of one stream, from several threads holding clones, racing submissions
/// of memsets on a held device: every memset that failed hands its buffer back untouched or
/// whole (the task running when an abort or a stop began, which the runtime lets finish),
/// every one that succeeded wrote its value, and every future completes. Under every
/// strategy. A break: a partly written buffer, a success that did not write, or a hang.
#[test]
fn concurrent_aborts_and_stops_racing_submissions_fail_only_work_that_never_ran_or_was_running() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        for round in 0..4u8 {
            let what = format!("{strategy:?} round {round}");
            let s = stream(&d0, strategy);
            let threads = 4;
            // Zeroed before the hold: a synchronous copy to a held device would wait for it.
            let mut zeroed: Vec<Vec<DeviceBuffer<u8>>> = (0..threads)
                .map(|_| {
                    (0..24)
                        .map(|_| {
                            let mut buffer = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
                            buffer.copy_from_host_blocking(&[0u8; 64]).unwrap();
                            buffer
                        })
                        .collect()
                })
                .collect();
            let hold = sim::hold(&d0.device()).unwrap();
            let barrier = Arc::new(Barrier::new(threads));
            let mut handles = Vec::new();
            for t in 0..threads {
                let (s, barrier) = (s.clone(), barrier.clone());
                let mut buffers = zeroed.pop().unwrap();
                handles.push(std::thread::spawn(move || {
                    let mut ops = Vec::new();
                    let mut aborts = Vec::new();
                    barrier.wait();
                    for i in 0..24u8 {
                        let value = 1 + (t as u8) * 24 + i;
                        let buffer = buffers.pop().unwrap();
                        ops.push((value, s.memset(buffer, value)));
                        match (t + i as usize + round as usize) % 7 {
                            0 => aborts.push(s.abort()),
                            3 if t % 2 == 0 => {
                                let _ = s.stop();
                            }
                            5 => drop(s.abort()),
                            _ => {}
                        }
                    }
                    (ops, aborts)
                }));
            }
            let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            hold.release().unwrap();
            run(async {
                for (ops, aborts) in results {
                    for abort in aborts {
                        let _ = abort.await;
                    }
                    for (value, op) in ops {
                        match op.await {
                            Ok(buffer) => {
                                assert_eq!(buffer.to_vec_blocking().unwrap(), [value; 64], "{what}")
                            }
                            Err(err) => {
                                // Untouched, or the task that was running when an abort or
                                // a stop began, which the runtime lets finish (the record
                                // after it dropped or never reached): all of it, never part.
                                let buffer = err.value.expect("the buffer handed back");
                                let bytes = buffer.to_vec_blocking().unwrap();
                                assert!(
                                    bytes == [0; 64] || bytes == [value; 64],
                                    "{what}: memset {value} failed ({}) and holds {bytes:?}",
                                    err.error
                                );
                            }
                        }
                    }
                }
            });
            // A stop may be left: an abort clears it and the stream runs again.
            run(s.abort()).unwrap();
            let buffer = run(s.memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 7)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 16], "{what}");
        }
    }
}

/// Rule 3 and the meaning of `Error::Aborted` for the operation whose task is running when
/// an abort begins: the runtime's abort lets that task finish (it writes its buffer) and
/// drops only the record after it. The operation is reported `Error::Aborted` (the runtime
/// cannot tell it from a discarded one), and its buffer must come back only once the kernel
/// has returned, holding all it wrote, never written afterwards. Under every strategy.
///
/// Before this round `Error::Aborted` promised "discarded before the device ran it", which
/// this operation broke under every strategy (its buffer came back written); the promise is
/// now what the runtime can keep.
#[test]
fn the_task_running_when_an_abort_begins_returns_its_buffer_only_once_it_has_returned() {
    let (_guard, d0, _d1) = exclusive(None);
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let x = run(s.memset(DeviceBuffer::<u8>::new(&d0, 256).unwrap(), 0)).unwrap();
        set_gate(|gate| *gate = (false, false));
        RETURNED.store(false, Ordering::Release);
        // SAFETY: the kernel writes the 256 bytes of `x`, which the launch keeps.
        let running = unsafe { s.launch(&fill, 1, (x, 256u64)) };
        wait_gate(|gate| gate.0);
        let abort = s.abort();
        // The runtime's abort has begun once it refuses a raw submission to the stream
        // (npu-rs refuses its own from just before the call, so a raw one tells).
        let scratch = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
        d0.bind().unwrap();
        let api = d0.runtime().api();
        loop {
            // SAFETY: `scratch` holds 64 bytes and outlives the stream's work (it is kept
            // until after the stream is synchronized below); the stream is `s`'s, current.
            let code = unsafe { (api.aclrtMemsetAsync)(scratch.as_raw(), 64, 0, 64, s.as_raw()) };
            if code != 0 {
                break;
            }
            std::thread::yield_now();
        }
        set_gate(|gate| gate.1 = true);
        run(abort).unwrap();
        let err = run(running).unwrap_err();
        assert!(
            RETURNED.load(Ordering::Acquire),
            "{strategy:?}: the arguments came back before the kernel returned"
        );
        assert!(
            matches!(err.error, Error::Aborted { .. }),
            "{strategy:?}: {}",
            err.error
        );
        let (x, _) = err.value.expect("the arguments handed back");
        assert_eq!(x.to_vec_blocking().unwrap(), [0x5B; 256], "{strategy:?}");
        run(s.synchronize()).unwrap();
        drop(scratch);
    }
}

/// Rule 5 and the paused-clock keeper: a held memset polled first on a non-Tokio executor
/// (`futures::executor`), then moved to a paused current-thread runtime and raced there
/// against a one-hour timer; the device is released only once the runtime has polled it. The
/// timer must not fire first (the keeper must start for the new runtime, though the first
/// poll decided "no runtime"). Under every strategy.
#[test]
fn a_wait_polled_outside_tokio_then_on_a_paused_runtime_keeps_that_clock() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let hold = sim::hold(&d0.device()).unwrap();
        let mut op = Box::pin(s.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 3));
        // Outside any runtime, through futures' own executor.
        let first = futures::executor::block_on(futures::future::poll_fn(|cx| {
            Poll::Ready(op.as_mut().poll(cx).is_pending())
        }));
        assert!(first, "{strategy:?}: held work pending");
        let mut hold = Some(hold);
        let result = paused_runtime().block_on(async {
            tokio::time::timeout(
                Duration::from_secs(3600),
                futures::future::poll_fn(|cx| {
                    let polled = op.as_mut().poll(cx);
                    if polled.is_pending()
                        && let Some(hold) = hold.take()
                    {
                        std::thread::spawn(move || hold.release().unwrap());
                    }
                    polled
                }),
            )
            .await
        });
        let buffer = result
            .unwrap_or_else(|_| panic!("{strategy:?}: the paused clock ran past device work"))
            .unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [3; 64]);
    }
}

/// Rule 5 and the keeper's liveness: a thousand held memsets (a third per strategy) each
/// awaited by its own task on one paused runtime, far more keepers than Tokio's blocking
/// pool has threads (512), raced against a one-hour timer; a plain thread releases the
/// device once every task has polled. Every memset must complete, the timer must not fire,
/// and nothing may hang. Then the same thousand waits, the runtime dropped while they are
/// pending: the drop must return (never waiting for the held device) and every buffer must
/// be freed once the device runs.
#[test]
fn a_thousand_pending_waits_on_one_paused_runtime_neither_fire_the_clock_nor_hang() {
    let (_guard, d0, _d1) = exclusive(None);
    let baseline = live_allocations(&d0);
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&st| stream(&d0, st)).collect();
    const N: usize = 1000;
    let hold = sim::hold(&d0.device()).unwrap();
    let polled = Arc::new(AtomicUsize::new(0));
    let rt = paused_runtime();
    let outcome = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..N {
            let op = streams[i % 3].memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 9);
            let polled = polled.clone();
            tasks.push(tokio::spawn(async move {
                let mut op = pin!(op);
                let mut counted = false;
                futures::future::poll_fn(|cx| {
                    let p = op.as_mut().poll(cx);
                    if p.is_pending() && !counted {
                        counted = true;
                        polled.fetch_add(1, Ordering::AcqRel);
                    }
                    p
                })
                .await
            }));
        }
        let polled = polled.clone();
        let releaser = std::thread::spawn(move || {
            while polled.load(Ordering::Acquire) < N {
                std::thread::yield_now();
            }
            hold.release().unwrap();
        });
        let all = tokio::time::timeout(Duration::from_secs(3600), async {
            let mut ok = 0;
            for task in tasks {
                task.await.unwrap().unwrap();
                ok += 1;
            }
            ok
        })
        .await;
        (all, releaser)
    });
    outcome.1.join().unwrap();
    assert_eq!(outcome.0.expect("the paused clock ran past device work"), N);
    watchdog("dropping the first runtime", || drop(rt));

    // The same, the runtime dropped while every wait is pending and the device held.
    let hold = sim::hold(&d0.device()).unwrap();
    let polled = Arc::new(AtomicUsize::new(0));
    let rt = paused_runtime();
    rt.block_on(async {
        for i in 0..N {
            let op = streams[i % 3].memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 9);
            let polled = polled.clone();
            tokio::spawn(async move {
                let mut op = pin!(op);
                futures::future::poll_fn(|cx| {
                    let p = op.as_mut().poll(cx);
                    if p.is_pending() {
                        polled.fetch_add(1, Ordering::AcqRel);
                    }
                    p
                })
                .await
            });
        }
        while polled.load(Ordering::Acquire) < N {
            tokio::task::yield_now().await;
        }
    });
    watchdog("dropping a paused runtime with a thousand keepers", || {
        drop(rt)
    });
    hold.release().unwrap();
    until_released("every memset's buffer freed", || {
        live_allocations(&d0) <= baseline
    });
    drop(streams);
}

/// `Stream::abort`'s promise that its future is `'static` (it starts the abort at the call
/// and owns what it waits on): the future outlives the only stream handle, returned from the
/// scope that owned it, under every strategy, and still resolves once the held device is
/// released. A break: the borrow checker refusing it (before the fix, Rust 2024 captured
/// `&self`'s lifetime in the returned `impl Future`, so this did not compile), or a hang.
#[test]
fn an_abort_future_outlives_its_only_stream_handle() {
    let (_guard, d0, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let hold = sim::hold(&d0.device()).unwrap();
        let (queued, abort) = {
            let s = stream(&d0, strategy);
            let queued = s.memset(DeviceBuffer::<u8>::new(&d0, 32).unwrap(), 4);
            (queued, s.abort())
        };
        run(abort).unwrap();
        hold.release().unwrap();
        let err = run(queued).unwrap_err();
        assert!(matches!(err.error, Error::Aborted { .. }), "{strategy:?}");
        let buffer = err.value.expect("the buffer handed back");
        assert!(buffer.len() == 32, "{strategy:?}");
    }
}

/// `Error::Aborted`'s meaning for work the device finished before the abort was called: a
/// memset, then a gated kernel; once the kernel runs, the memset and its completion record
/// have run, and the stream is aborted. The memset must succeed, whatever the strategy's
/// completer had seen by then. Twenty rounds per strategy.
///
/// Before the fix, `EventPoll` reported it `Error::Aborted` in about 2 of 20 rounds (its
/// buffer written): the reactor, and the callback worker, failed every pending operation up
/// to the abort's mark without looking at its event.
#[test]
fn work_finished_before_an_abort_was_called_is_not_reported_aborted() {
    let (_guard, d0, _d1) = exclusive(None);
    let fill = gated_fill(&d0);
    let mut broke = Vec::new();
    for strategy in STRATEGIES {
        for round in 0..20 {
            let s = stream(&d0, strategy);
            let x = run(s.memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 0)).unwrap();
            let done = s.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 6);
            set_gate(|gate| *gate = (false, false));
            // SAFETY: the kernel writes the 16 bytes of `x`, which the launch keeps.
            let running = unsafe { s.launch(&fill, 1, (x, 16u64)) };
            wait_gate(|gate| gate.0);
            // `done`'s memset and its record ran before the kernel started.
            let abort = s.abort();
            set_gate(|gate| gate.1 = true);
            run(abort).unwrap();
            let _ = run(running);
            match run(done) {
                Ok(buffer) => assert_eq!(buffer.to_vec_blocking().unwrap(), [6; 64]),
                Err(err) => broke.push(format!("{strategy:?} round {round}: {}", err.error)),
            }
        }
    }
    assert!(broke.is_empty(), "{broke:#?}");
}
