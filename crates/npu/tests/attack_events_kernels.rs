//! Attacks on events, kernels, contexts, devices and executors through the `npu` facade only,
//! as a user would write them: events recorded on one stream and waited on another, across
//! contexts and devices, re-recorded while a wait is pending, outliving their stream, context
//! and device; modules dropped and launches forgotten in flight, launches on stopped, aborted
//! and faulted streams and with arguments of another context; operations awaited under a
//! non-Tokio executor, under `block_in_place`, moved between runtimes, aborted in `JoinSet`s,
//! raced in `select!` and owned by tasks that panic.
//!
//! Every test takes the file's lock (the simulator's hold gate and live counters are shared
//! by the process), and every wait is bounded by [`run`]'s timeout or [`watchdog`].

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, Once};
use std::task::Poll;
use std::time::Duration;

use common::*;
use futures::executor::block_on;
use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::{FailureMode, Strategy};
use npu::{Error, Stream};

/// Device 2 exists for [`a_lost_device_resolves_everything_that_lives_on_it`] alone: a loss is
/// final for the process, and devices 0 and 1 serve the other tests.
const DOOMED: u32 = 2;

fn exclusive() -> (MutexGuard<'static, ()>, Context, Context) {
    common::exclusive(Some(3))
}

/// Polls `future` once with the current task's waker.
async fn poll_now<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx))).await
}

/// The gate kernel `{uint8_t *x, uint64_t n}`: block 0 marks itself started, waits for the
/// gate, writes 0xAB over x, and returns.
static STARTED: AtomicBool = AtomicBool::new(false);
static GATE: AtomicBool = AtomicBool::new(false);
const GATE_KERNEL: &str = "attack_events_kernels_gate";

fn gate_function(ctx: &Context) -> Function {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(GATE_KERNEL, 16, |block, _, args| {
            // SAFETY: launched with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe { fill_args(args) };
            if block == 0 {
                STARTED.store(true, Ordering::SeqCst);
                while !GATE.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, 0xAB, n) };
            }
            0
        })
        .unwrap();
    });
    in_process(ctx, GATE_KERNEL)
}

/// Launches the gate kernel over a fresh buffer of `n` bytes and waits until it runs.
fn gated_launch(s: &Stream, gate: &Function, n: usize) -> npu::Op<(DeviceBuffer<u8>, u64)> {
    STARTED.store(false, Ordering::SeqCst);
    GATE.store(false, Ordering::SeqCst);
    let x = DeviceBuffer::<u8>::new(s.context(), n).unwrap();
    // SAFETY: the gate kernel takes {uint8_t *x, uint64_t n}; x holds n bytes.
    let op = unsafe { s.launch(gate, 1, (x, n as u64)) };
    watchdog("the gate kernel starts", || {
        while !STARTED.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    });
    op
}

fn open_gate() {
    GATE.store(true, Ordering::SeqCst);
}

/// An event re-recorded while a wait on its earlier record is pending: the earlier wait keeps
/// watching the earlier record (resolving only when it is reached), later waits and stream
/// waits watch the newer one.
#[test]
fn an_event_re_recorded_while_a_wait_is_pending_keeps_each_wait_on_its_record() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        let (s1, s2, s3) = (
            stream(&ctx, strategy),
            stream(&ctx, strategy),
            stream(&ctx, strategy),
        );
        let launch = gated_launch(&s1, &gate, 256);
        let event = Event::new(&ctx).unwrap();
        event.record(&s1).unwrap();
        let mut early = event.wait();
        assert!(
            polled_once(std::pin::Pin::new(&mut early)).is_pending(),
            "{strategy:?}"
        );
        assert!(!event.is_complete().unwrap());
        // Re-recorded on an idle stream: the event now stands for that point.
        event.record(&s2).unwrap();
        run(async {
            event.wait().await.unwrap();
            s3.wait_event(&event).unwrap();
            let filled = s3
                .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)
                .await
                .unwrap();
            // Not `to_vec_blocking`: a synchronous copy waits for the gated kernel.
            assert_eq!(s3.download(filled).await.unwrap(), [5; 64]);
        });
        assert!(
            polled_once(std::pin::Pin::new(&mut early)).is_pending(),
            "{strategy:?}: s1 is still gated"
        );
        open_gate();
        run(async {
            early.await.unwrap();
            let (x, _) = launch.await.unwrap();
            assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 256]);
        });
    }
}

/// A wait (host or stream) on a record its stream discarded (abort) or can never reach (stop)
/// resolves, and the waiting stream runs again.
#[test]
fn waits_on_a_record_its_stream_discards_or_never_reaches_resolve() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        for stop in [false, true] {
            let what = format!("{strategy:?}, stop {stop}");
            let (s1, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let held = sim::hold(&ctx.device()).unwrap();
            let first = s1.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let event = Event::new(&ctx).unwrap();
            event.record(&s1).unwrap();
            s2.wait_event(&event).unwrap();
            let behind = s2.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
            let host_wait = event.wait();
            if stop {
                s1.stop().unwrap();
            } else {
                run(s1.abort()).unwrap();
            }
            held.release().unwrap();
            run(async {
                assert!(first.await.is_err(), "{what}");
                assert!(
                    host_wait.await.is_err(),
                    "{what}: the record is never reached"
                );
                // The stream waiting on the record: its work resolves one way or the other.
                match tokio::time::timeout(Duration::from_secs(5), behind).await {
                    Ok(result) => drop(result),
                    Err(_) => panic!("{what}: a stream waiting on a dropped record hangs"),
                }
                let again = s2
                    .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3)
                    .await;
                let again = match again {
                    Ok(buffer) => buffer,
                    Err(err) => panic!("{what}: the waiting stream is broken: {}", err.error),
                };
                assert_eq!(again.to_vec_blocking().unwrap(), [3; 64], "{what}");
                if stop {
                    s1.abort().await.unwrap();
                }
                s1.synchronize().await.ok();
                s1.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 4)
                    .await
                    .unwrap();
            });
        }
    }
}

/// Events outlive their stream, context and device handles: recorded under a held device,
/// with every other handle dropped, they still resolve, time and report.
#[test]
fn events_outlive_their_stream_context_and_device() {
    let (_guard, _, ctx1) = exclusive();
    let device = ctx1.device();
    for strategy in STRATEGIES {
        let (start, end, never) = {
            let ctx = device.create_context().unwrap();
            let s = stream(&ctx, strategy);
            let (start, end, never) = (
                Event::new(&ctx).unwrap(),
                Event::new(&ctx).unwrap(),
                Event::new(&ctx).unwrap(),
            );
            let held = sim::hold(&device).unwrap();
            start.record(&s).unwrap();
            drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 1));
            end.record(&s).unwrap();
            // Every handle but the events goes while the work is held.
            drop(s);
            drop(ctx);
            held.release().unwrap();
            (start, end, never)
        };
        run(async {
            end.wait().await.unwrap();
            start.wait().await.unwrap();
            never.wait().await.unwrap();
        });
        assert!(end.is_complete().unwrap());
        assert!(!never.is_complete().unwrap());
        Event::elapsed(&start, &end).unwrap();
        assert!(Event::elapsed(&start, &never).is_err());
        assert!(Event::elapsed(&never, &never).is_err());
        // Reversed: a typed error, never a panic.
        if let Err(err) = Event::elapsed(&end, &start) {
            assert!(err.acl_code().is_some() || matches!(err, Error::InvalidArgument { .. }));
        }
        end.timestamp_us().unwrap();
        let _ = never.timestamp_us();
    }
}

/// Events used across contexts and devices: another device's event or stream is a typed error
/// naming the API; another context of the same device works like its own.
#[test]
fn events_across_contexts_and_devices_are_typed_errors_or_work() {
    let (_guard, ctx, ctx1) = exclusive();
    let other = ctx.device().create_context().unwrap();
    for strategy in STRATEGIES {
        let (s0, s1, so) = (
            stream(&ctx, strategy),
            stream(&ctx1, strategy),
            stream(&other, strategy),
        );
        let e0 = Event::new(&ctx).unwrap();
        let err = e0.record(&s1).unwrap_err();
        assert!(err.acl_code().is_some(), "{strategy:?}: {err}");
        assert!(err.to_string().contains("aclrtRecordEvent"), "{err}");
        // s1 still works after the refused record.
        run(s1.memset(DeviceBuffer::<u8>::new(&ctx1, 8).unwrap(), 1)).unwrap();

        e0.record(&s0).unwrap();
        let err = s1.wait_event(&e0).unwrap_err();
        assert!(err.to_string().contains("aclrtStreamWaitEvent"), "{err}");
        let err = run(s1.wait_event_timeout(&e0, Duration::from_secs(1))).unwrap_err();
        assert!(err.value.is_some(), "the event comes back");

        // Another context of the same device: an event recorded on the other context's
        // stream, waited on this one's.
        let held = sim::hold(&ctx.device()).unwrap();
        let filled = so.memset(DeviceBuffer::<u8>::new(&other, 4096).unwrap(), 9);
        let eo = Event::new(&other).unwrap();
        let recorded = eo.record(&s0);
        let recorded_other = eo.record(&so);
        let waited = s0.wait_event(&eo);
        let after = s0.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 8);
        held.release().unwrap();
        run(async {
            filled.await.unwrap();
            eo.wait().await.unwrap();
            after.await.unwrap();
        });
        eprintln!(
            "{strategy:?}: record on another context's stream {:?}, on its own {:?}, wait {:?}",
            recorded.err(),
            recorded_other.err(),
            waited.err()
        );
    }
}

/// Launches on the function's stream with arguments of another context of the same device,
/// on stopped, aborting and faulted streams: each resolves, hands its arguments back on
/// failure, and the stream works again.
#[test]
fn launches_on_dead_streams_and_with_foreign_arguments_resolve_and_hand_arguments_back() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    let other = ctx.device().create_context().unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        // An argument allocated in another context of the same device.
        let foreign = DeviceBuffer::<u8>::new(&other, 128).unwrap();
        GATE.store(true, Ordering::SeqCst);
        // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
        let (foreign, _) = run(unsafe { s.launch(&gate, 1, (foreign, 128u64)) }).unwrap();
        assert_eq!(foreign.to_vec_blocking().unwrap(), [0xAB; 128], "{what}");

        // A stopped stream.
        s.stop().unwrap();
        // SAFETY: as above.
        let err = run(unsafe { s.launch(&gate, 1, (foreign, 128u64)) }).unwrap_err();
        assert!(err.acl_code().is_some(), "{what}: {}", err.error);
        let (foreign, _) = err.value.expect("arguments back");
        run(s.abort()).unwrap();

        // A launch submitted while an abort waits for a running kernel.
        let running = gated_launch(&s, &gate, 64);
        let abort = s.abort();
        // SAFETY: as above.
        let during = unsafe { s.launch(&gate, 1, (foreign, 128u64)) };
        open_gate();
        let foreign = run(async {
            abort.await.unwrap();
            let _ = running.await;
            match during.await {
                Ok((foreign, _)) => foreign,
                Err(err) => {
                    assert!(err.error.is_aborted(), "{what}: {}", err.error);
                    err.value.expect("arguments back").0
                }
            }
        });

        // A kernel that faults.
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        // SAFETY: as above.
        let err = run(unsafe { s.launch(&gate, 1, (foreign, 128u64)) }).unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(507015)), "{what}");
        let (foreign, _) = err.value.expect("arguments back");
        // SAFETY: as above.
        let (foreign, _) = run(unsafe { s.launch(&gate, 1, (foreign, 128u64)) }).unwrap();
        drop(foreign);

        // A STOP-mode fault on a sibling stream of an explicit context stops the context: a
        // launch there is refused with the fault, its arguments handed back.
        let stopped_ctx = ctx.device().create_context().unwrap();
        let local_gate = gate_function(&stopped_ctx);
        let (faulty, sibling) = (
            stream(&stopped_ctx, strategy),
            stream(&stopped_ctx, strategy),
        );
        faulty.set_failure_mode(FailureMode::Stop).unwrap();
        sim::fail_task(&faulty, 1, AclCode(507015)).unwrap();
        let faulted = run(faulty.memset(DeviceBuffer::<u8>::new(&stopped_ctx, 8).unwrap(), 0));
        assert!(faulted.is_err(), "{what}");
        let x = DeviceBuffer::<u8>::new(&stopped_ctx, 64).unwrap();
        // SAFETY: as above.
        let err = run(unsafe { sibling.launch(&local_gate, 1, (x, 64u64)) }).unwrap_err();
        assert!(err.acl_code().is_some(), "{what}: {}", err.error);
        assert!(err.value.is_some(), "{what}: arguments back");
    }
}

/// A launch whose `Op` is forgotten, with its module and function dropped, keeps the binary
/// loaded (it leaks); a launch whose module is dropped while it runs completes.
#[test]
fn a_forgotten_launch_and_a_dropped_module_never_unload_a_running_kernel() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let gate = gate_function(&ctx);
        let launch = gated_launch(&s, &gate, 4096);
        let done = launch.completion().clone();
        std::mem::forget(launch);
        drop(gate);
        open_gate();
        run(done.wait()).unwrap();
        run(s.synchronize()).unwrap();

        let gate = gate_function(&ctx);
        let launch = gated_launch(&s, &gate, 4096);
        drop(gate);
        let second = gate_function(&ctx);
        // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
        let queued = unsafe {
            s.launch(
                &second,
                2,
                (DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 64u64),
            )
        };
        drop(second);
        drop(queued);
        open_gate();
        let (x, _) = run(launch).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 4096]);
        run(s.synchronize()).unwrap();
    }
}

/// Operations awaited under `futures::executor::block_on` (no Tokio at all), from a thread
/// the device work does not know, complete under every strategy.
#[test]
fn operations_complete_under_a_non_tokio_executor() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let launch = gated_launch(&s, &gate, 128);
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let after = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7);
        let opener = std::thread::spawn(open_gate);
        watchdog("block_on", || {
            block_on(async {
                let (x, _) = launch.await.unwrap();
                assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 128]);
                event.wait().await.unwrap();
                after.await.unwrap();
                s.synchronize().await.unwrap();
                let _ = s.abort().await;
                s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1)
                    .await
                    .unwrap();
            })
        });
        opener.join().unwrap();
    }
}

/// `block_in_place` on a multi-thread runtime, blocking on an operation from inside a task.
#[test]
fn operations_complete_inside_block_in_place() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let launch = gated_launch(&s, &gate, 128);
        let s2 = s.clone();
        let ctx2 = ctx.clone();
        watchdog("block_in_place", || {
            rt.block_on(async move {
                let opener = tokio::spawn(async { open_gate() });
                let inner = tokio::spawn(async move {
                    tokio::task::block_in_place(|| {
                        tokio::runtime::Handle::current().block_on(async {
                            launch.await.unwrap();
                            s2.memset(DeviceBuffer::<u8>::new(&ctx2, 8).unwrap(), 1)
                                .await
                                .unwrap();
                        })
                    })
                });
                opener.await.unwrap();
                inner.await.unwrap();
            })
        });
        drop(rt);
    }
}

/// An operation polled on one runtime, that runtime dropped, then awaited on another (and on
/// a non-Tokio executor): its old waker is never needed, the new task is woken.
#[test]
fn an_operation_moved_to_another_runtime_after_its_first_is_dropped_completes() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        for paused in [false, true] {
            let s = stream(&ctx, strategy);
            let launch = gated_launch(&s, &gate, 128);
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            let mut wait = event.wait();
            let mut builder = tokio::runtime::Builder::new_current_thread();
            builder.enable_time();
            if paused {
                builder.start_paused(true);
            }
            let first = builder.build().unwrap();
            let (launch, wait) = first.block_on(async move {
                let mut launch = launch;
                assert!(poll_now(&mut launch).await.is_pending());
                assert!(poll_now(&mut wait).await.is_pending());
                (launch, wait)
            });
            watchdog("dropping the first runtime", move || drop(first));
            let opener = std::thread::spawn(open_gate);
            let second = async {
                launch.await.unwrap();
                wait.await.unwrap();
            };
            // The second executor alternates: Tokio, or none at all.
            if paused {
                watchdog("awaiting under block_on", || block_on(second));
            } else {
                run(second);
            }
            opener.join().unwrap();
        }
    }
}

/// One operation polled in turn on two live paused runtimes, many times: each switch hands
/// the clock keeping to the runtime polling it, nothing hangs, and both runtimes drop at once.
#[test]
fn an_operation_polled_in_turn_on_two_paused_runtimes_completes() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let mut launch = gated_launch(&s, &gate, 64);
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        let (a, b) = (paused(), paused());
        for round in 0..200 {
            let rt = if round % 2 == 0 { &a } else { &b };
            assert!(rt.block_on(poll_now(&mut launch)).is_pending());
        }
        open_gate();
        let (x, _) = b.block_on(async {
            tokio::time::timeout(Duration::from_secs(3600), launch)
                .await
                .expect("the paused clock stood still")
                .unwrap()
        });
        assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 64]);
        watchdog("dropping both runtimes", move || drop((a, b)));
    }
}

/// Found: an operation first polled under one paused runtime, then awaited under another
/// paused runtime (the first dropped), did not keep the second one's clock: a one-hour
/// timeout fired at once while the device work was in flight. The keeper was decided once,
/// at the first pending poll, for the runtime of that poll. As the existing paused-clock
/// attack, the work takes a few milliseconds of wall time (a timing model), which a paused
/// clock must not jump past.
#[test]
fn an_operation_moved_between_paused_runtimes_still_keeps_the_clock() {
    let (_guard, ctx, _) = exclusive();
    let model = sim::TimingModel::default().d2d_bandwidth(1_000_000_000);
    sim::set_timing(&ctx.device(), Some(model)).unwrap();
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    for strategy in STRATEGIES {
        for first_paused in [true, false] {
            let s = stream(&ctx, strategy);
            let held = sim::hold(&ctx.device()).unwrap();
            // 4 MiB at 1 GB/s: about 4 ms once released.
            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 4 << 20).unwrap(), 1);
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            let wait = event.wait();
            let first = if first_paused {
                paused()
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap()
            };
            let (op, wait) = first.block_on(async move {
                let (mut op, mut wait) = (op, wait);
                assert!(poll_now(&mut op).await.is_pending());
                assert!(poll_now(&mut wait).await.is_pending());
                (op, wait)
            });
            watchdog("dropping the first runtime", move || drop(first));
            held.release().unwrap();
            let outcome = watchdog("the second runtime", || {
                paused().block_on(async move {
                    let hour = Duration::from_secs(3600);
                    let waited = tokio::time::timeout(hour, wait).await;
                    let done = tokio::time::timeout(hour, op).await;
                    (waited.is_ok(), done.is_ok())
                })
            });
            assert_eq!(
                outcome,
                (true, true),
                "{strategy:?}, first runtime paused {first_paused}: a one-hour paused timer \
                 fired before the device work completed"
            );
        }
    }
    sim::set_timing(&ctx.device(), None).unwrap();
}

/// A `JoinSet` of tasks with operations in flight on a held device, aborted all at once: every
/// buffer is released once the device is done, and the streams keep working.
#[test]
fn a_join_set_abort_storm_loses_no_buffer() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    let before = live_allocations(&ctx);
    for strategy in STRATEGIES {
        let streams: Vec<Stream> = (0..4).map(|_| stream(&ctx, strategy)).collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let submitted = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for i in 0..64 {
                let s = streams[i % 4].clone();
                let ctx = ctx.clone();
                let gate = gate.clone();
                let submitted = submitted.clone();
                set.spawn(async move {
                    let a = s.memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), i as u8);
                    // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
                    let b = unsafe {
                        s.launch(
                            &gate,
                            1,
                            (DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 64u64),
                        )
                    };
                    let event = Event::new(&ctx).unwrap();
                    event.record(&s).unwrap();
                    submitted.fetch_add(1, Ordering::SeqCst);
                    tokio::select! {
                        _ = a => {}
                        _ = b => {}
                        _ = event.wait() => {}
                    }
                });
            }
            while submitted.load(Ordering::SeqCst) < 64 {
                tokio::task::yield_now().await;
            }
            set.abort_all();
            while let Some(joined) = set.join_next().await {
                assert!(joined.unwrap_err().is_cancelled());
            }
        });
        drop(rt);
        GATE.store(true, Ordering::SeqCst);
        held.release().unwrap();
        run(async {
            for s in &streams {
                s.synchronize().await.unwrap();
            }
        });
    }
    assert!(live_allocations(&ctx) <= before);
}

/// A task that panics while it owns operations in flight (polled and unpolled): its buffers
/// are released only after the device is done, and the runtime and streams go on.
#[test]
fn a_task_panicking_with_operations_in_flight_releases_after_the_device() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    let before = live_allocations(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let launch_gate = gate.clone();
        let running = gated_launch(&s, &launch_gate, 4096);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let s2 = s.clone();
        let ctx2 = ctx.clone();
        let panicked = rt.block_on(async move {
            tokio::spawn(async move {
                let mut queued = s2.memset(DeviceBuffer::<u8>::new(&ctx2, 4096).unwrap(), 1);
                assert!(poll_now(&mut queued).await.is_pending());
                let _unpolled = s2.copy_d2d(
                    DeviceBuffer::<u8>::new(&ctx2, 4096).unwrap(),
                    DeviceBuffer::<u8>::new(&ctx2, 4096).unwrap(),
                );
                panic!("a task panics with operations in flight");
            })
            .await
        });
        assert!(panicked.unwrap_err().is_panic());
        drop(rt);
        // Nothing behind the running kernel was released yet: the launch's buffer, the
        // memset's and the copy's two.
        sim::flush_releases();
        assert_eq!(live_allocations(&ctx), before + 4, "{strategy:?}");
        open_gate();
        run(async {
            running.await.unwrap();
            s.synchronize().await.unwrap();
        });
        assert!(live_allocations(&ctx) <= before, "{strategy:?}");
    }
}

/// `select!` between operations of two streams and an event wait: the losers keep running,
/// their buffers come back to nobody but are released after the device, and the winner's
/// value is whole.
#[test]
fn select_races_between_operations_lose_nothing() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    let before = live_allocations(&ctx);
    for strategy in STRATEGIES {
        let (slow, fast) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let running = gated_launch(&slow, &gate, 1024);
        let event = Event::new(&ctx).unwrap();
        event.record(&slow).unwrap();
        let behind = slow.memset(DeviceBuffer::<u8>::new(&ctx, 1024).unwrap(), 1);
        let quick = fast.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
        let winner = run(async {
            tokio::select! {
                biased;
                _ = running => panic!("the gated kernel cannot finish"),
                _ = behind => panic!("the memset behind it cannot finish"),
                _ = event.wait() => panic!("the event after it cannot be reached"),
                quick = quick => quick.unwrap(),
            }
        });
        assert_eq!(run(fast.download(winner)).unwrap(), [2; 64]);
        assert_eq!(
            live_allocations(&ctx),
            before + 2,
            "{strategy:?}: the losers' buffers"
        );
        open_gate();
        run(async { slow.synchronize().await.unwrap() });
        assert!(live_allocations(&ctx) <= before, "{strategy:?}");
    }
}

/// Contexts, streams and devices dropped (every handle) while their operations, event records
/// and stream waits are held on the device: nothing blocks, every operation resolves, and
/// every buffer is released once the device is done.
#[test]
fn contexts_and_streams_dropped_with_work_in_flight_release_everything_after_the_device() {
    let (_guard, _, ctx1) = exclusive();
    let device = ctx1.device();
    let gate = gate_function(&ctx1);
    let before = live_allocations(&ctx1);
    for strategy in STRATEGIES {
        let held = sim::hold(&device).unwrap();
        let (ops, event, wait) = {
            let ctx = device.create_context().unwrap();
            let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let module_gate = gate_function(&ctx);
            let first = a.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 1);
            let event = Event::new(&ctx).unwrap();
            event.record(&a).unwrap();
            b.wait_event(&event).unwrap();
            // A kernel of the explicit context with an argument of the primary one.
            let foreign = DeviceBuffer::<u8>::new(&ctx1, 256).unwrap();
            // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
            let launch = unsafe { b.launch(&module_gate, 1, (foreign, 256u64)) };
            let wait = event.wait();
            let ops = (first, launch, b.synchronize());
            watchdog("dropping streams, module and context", move || {
                drop((a, b, module_gate, ctx));
            });
            (ops, event, wait)
        };
        GATE.store(true, Ordering::SeqCst);
        held.release().unwrap();
        let (first, launch, synchronized) = ops;
        run(async {
            assert_eq!(first.await.unwrap().len(), 4096);
            wait.await.unwrap();
            let (foreign, _) = launch.await.unwrap();
            assert_eq!(foreign.len(), 256);
            synchronized.await.unwrap();
        });
        drop(event);
        // The primary context still works, with its own module.
        let s = stream(&ctx1, strategy);
        let x = DeviceBuffer::<u8>::new(&ctx1, 64).unwrap();
        // SAFETY: as above.
        let (x, _) = run(unsafe { s.launch(&gate, 1, (x, 64u64)) }).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 64]);
    }
    assert!(live_allocations(&ctx1) <= before);
}

/// A device lost while a kernel runs on it, with operations queued, an event record pending,
/// a stream waiting on it, a host wait on it, a module loaded, and a peer copy of a healthy
/// device reading its memory: every future resolves with a typed error (or the work's
/// result), later calls are typed errors, and the healthy device keeps working.
#[test]
fn a_lost_device_resolves_everything_that_lives_on_it() {
    let (_guard, ctx0, _) = exclusive();
    let doomed = Device::open(DOOMED).unwrap();
    let ctx = doomed.primary_context().clone();
    let explicit = doomed.create_context().unwrap();
    let gate = gate_function(&ctx);
    let peer = ctx0.device().enable_peer_access(&doomed).ok();
    let source = DeviceBuffer::from_host_blocking(&ctx, &[5u8; 256]).unwrap();
    let healthy = stream(&ctx0, Strategy::EventPoll);
    let mut pending = Vec::new();
    let mut waits = Vec::new();
    let mut streams = Vec::new();
    let running = gated_launch(&stream(&ctx, Strategy::EventPoll), &gate, 512);
    for strategy in STRATEGIES {
        for context in [&ctx, &explicit] {
            let (a, b) = (stream(context, strategy), stream(context, strategy));
            // Queued behind the gated kernel's device.
            let queued = a.memset(DeviceBuffer::<u8>::new(context, 64).unwrap(), 1);
            let event = Event::new(context).unwrap();
            event.record(&a).unwrap();
            b.wait_event(&event).unwrap();
            let behind = b.memset(DeviceBuffer::<u8>::new(context, 64).unwrap(), 2);
            waits.push((event.wait(), event));
            pending.push((strategy, queued, behind));
            streams.push((a, b));
        }
    }
    let loser = std::thread::spawn(move || sim::lose(&doomed));
    open_gate();
    loser.join().unwrap().unwrap();
    run(async {
        let _ = running.await;
        for (strategy, queued, behind) in pending {
            if let Err(err) = queued.await {
                assert!(err.value.is_some(), "{strategy:?}: the buffer comes back");
            }
            if let Err(err) = behind.await {
                assert!(err.value.is_some(), "{strategy:?}: the buffer comes back");
            }
        }
        for (wait, _) in waits.iter_mut() {
            let _ = wait.await;
        }
    });
    // Later calls on the lost device: typed errors, never a panic or a hang.
    for (a, b) in &streams {
        let event = Event::new(a.context());
        if let Ok(event) = event {
            let _ = event.record(a);
            let _ = b.wait_event(&event);
            run(async {
                let _ = event.wait().await;
            });
        }
        let _ = run(a.synchronize());
        let _ = run(a.abort());
        if let Ok(x) = DeviceBuffer::<u8>::new(a.context(), 8) {
            // SAFETY: as above.
            let err = run(unsafe { a.launch(&gate, 1, (x, 8u64)) }).unwrap_err();
            assert!(err.value.is_some(), "{}", err.error);
        }
    }
    for (_, event) in &waits {
        let _ = event.is_complete();
        let _ = Event::elapsed(event, event);
        let _ = event.timestamp_us();
    }
    // A healthy device's stream copying from the lost device's memory.
    let copy = run(healthy.copy_d2d(source, DeviceBuffer::<u8>::new(&ctx0, 256).unwrap()));
    eprintln!(
        "peer copy from a lost device: {:?}",
        copy.as_ref().err().map(|e| &e.error)
    );
    drop(copy);
    drop(peer);
    watchdog("dropping everything of the lost device", move || {
        drop((streams, waits, gate, explicit, ctx));
    });
    let _ = Device::open(DOOMED).map(|d| d.create_context());
    // The healthy device works.
    let filled = run(healthy.memset(DeviceBuffer::<u8>::new(&ctx0, 64).unwrap(), 3)).unwrap();
    assert_eq!(filled.to_vec_blocking().unwrap(), [3; 64]);
}

/// Faults injected around event records and stream waits (`fail_task` counts device tasks:
/// the memsets, not the events, nor under `CallbackThread` the callback npu-rs queues):
/// every future resolves, no failure is reported twice, and the streams work afterwards.
#[test]
fn faults_in_records_and_waits_resolve_every_future() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        for nth in 1..=3u64 {
            let what = format!("{strategy:?}, task {nth} fails");
            let (s, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let event = Event::new(&ctx).unwrap();
            sim::fail_task(&s, nth, AclCode(507015)).unwrap();
            let first = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let recorded = event.record(&s);
            let waited = s2.wait_event(&event);
            let behind = s2.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
            let outcome = run(async {
                let five = Duration::from_secs(5);
                let bounded = |f| tokio::time::timeout(five, f);
                let first = bounded(first)
                    .await
                    .map(|r| r.map(drop).map_err(|e| e.error));
                let event_wait = tokio::time::timeout(five, event.wait()).await;
                let behind = bounded(behind)
                    .await
                    .map(|r| r.map(drop).map_err(|e| e.error));
                (first, event_wait, behind)
            });
            eprintln!(
                "{what}: record {:?}, wait_event {:?}, outcome {outcome:?}",
                recorded.as_ref().err(),
                waited.as_ref().err()
            );
            assert!(outcome.0.is_ok(), "{what}: the operation hangs");
            assert!(outcome.1.is_ok(), "{what}: the event wait hangs");
            assert!(outcome.2.is_ok(), "{what}: the waiting stream hangs");
            let _ = run(s.synchronize());
            // A failure injected further on may land on the next device tasks; the stream
            // resolves them and then works.
            let mut attempts = 0;
            while run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 3)).is_err() {
                attempts += 1;
                assert!(attempts < 4, "{what}: the stream keeps failing");
            }
            run(s2.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 3)).unwrap();
        }
    }
}

/// Malformed registry images (truncated, a count or a name length of `u32::MAX`, invalid
/// UTF-8, unknown kernels) and malformed function names are typed errors, never a panic or
/// an abort; the context still loads and launches afterwards.
#[test]
fn malformed_binaries_and_function_names_are_typed_errors() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    let good = sim::kernel::registry_image(&[GATE_KERNEL]);
    let mut images: Vec<(&str, Vec<u8>)> = vec![
        ("magic only", good[..8].to_vec()),
        ("half a count", good[..10].to_vec()),
        ("truncated name", good[..good.len() - 1].to_vec()),
        ("garbage", vec![0xFF; 64]),
        ("one byte", vec![0]),
    ];
    let mut huge_count = good[..8].to_vec();
    huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
    images.push(("count u32::MAX", huge_count));
    let mut huge_name = good[..8].to_vec();
    huge_name.extend_from_slice(&1u32.to_le_bytes());
    huge_name.extend_from_slice(&u32::MAX.to_le_bytes());
    huge_name.extend_from_slice(b"abc");
    images.push(("name length u32::MAX", huge_name));
    let mut bad_utf8 = good[..8].to_vec();
    bad_utf8.extend_from_slice(&1u32.to_le_bytes());
    bad_utf8.extend_from_slice(&2u32.to_le_bytes());
    bad_utf8.extend_from_slice(&[0xC3, 0x28]);
    images.push(("invalid UTF-8", bad_utf8));
    images.push((
        "unknown kernel",
        sim::kernel::registry_image(&["no_such_kernel_anywhere"]),
    ));
    for (what, image) in &images {
        // SAFETY: a registry image, or bytes the simulator must refuse; none runs code.
        match unsafe { Module::from_data(&ctx, image) } {
            Ok(module) => {
                let err = module.function("no_such_kernel_anywhere").unwrap_err();
                assert!(err.acl_code().is_some(), "{what}: {err}");
            }
            Err(err) => assert!(
                err.acl_code().is_some() || matches!(err, Error::InvalidArgument { .. }),
                "{what}: {err:?}"
            ),
        }
    }
    let module = gate.module().clone();
    for name in ["", "\0", "a\0b", &"x".repeat(1 << 20), "gate\u{1F600}"] {
        let err = module.function(name).unwrap_err();
        assert!(
            err.acl_code().is_some() || matches!(err, Error::InvalidArgument { .. }),
            "{name:.20}: {err:?}"
        );
    }
    for path in [
        "/nonexistent/kernels.so",
        "/dev/null",
        "/proc/self/status",
        "a\0b",
    ] {
        // SAFETY: no path here names a shared object: none loads, so none runs code.
        if let Err(err) = unsafe { Module::from_file(&ctx, path) } {
            assert!(
                err.acl_code().is_some() || matches!(err, Error::InvalidArgument { .. }),
                "{path}: {err:?}"
            );
        }
    }
    let s = stream(&ctx, Strategy::EventPoll);
    GATE.store(true, Ordering::SeqCst);
    let x = DeviceBuffer::<u8>::new(&ctx, 8).unwrap();
    // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
    let (x, _) = run(unsafe { s.launch(&gate, 1, (x, 8u64)) }).unwrap();
    assert_eq!(x.to_vec_blocking().unwrap(), [0xAB; 8]);
}

/// Peer copies: without peer access, with neither side on the stream's device, with the
/// access dropped while the copy is held, and an explicit context's stream copying from the
/// peer's memory: typed errors or correct data, buffers always handed back.
#[test]
fn peer_copies_are_typed_errors_or_correct_data() {
    let (_guard, ctx0, ctx1) = exclusive();
    let (d0, d1) = (ctx0.device(), ctx1.device());
    for strategy in STRATEGIES {
        let s0 = stream(&ctx0, strategy);
        let src = DeviceBuffer::from_host_blocking(&ctx1, &[7u8; 64]).unwrap();
        let dst = DeviceBuffer::<u8>::new(&ctx0, 64).unwrap();
        let (src, dst) = match run(s0.copy_d2d(src, dst)) {
            Ok(pair) => pair,
            Err(err) => {
                assert!(
                    err.acl_code().is_some() || matches!(err.error, Error::InvalidArgument { .. }),
                    "{strategy:?}: {}",
                    err.error
                );
                err.value.expect("buffers back")
            }
        };
        // Neither side on the stream's device.
        let other = DeviceBuffer::<u8>::new(&ctx1, 64).unwrap();
        let err = run(s0.copy_d2d(src, other)).unwrap_err();
        assert!(
            matches!(err.error, Error::InvalidArgument { .. }),
            "{}",
            err.error
        );
        let (src, _) = err.value.expect("buffers back");

        let access = d0.enable_peer_access(&d1).unwrap();
        let held = sim::hold(&d0).unwrap();
        let explicit = d0.create_context().unwrap();
        let se = stream(&explicit, strategy);
        let copy = se.copy_d2d(src, DeviceBuffer::<u8>::new(&explicit, 64).unwrap());
        drop(access);
        drop(d0.peer_access_to(&d1));
        held.release().unwrap();
        let (src, copied) = run(copy).unwrap();
        assert_eq!(copied.to_vec_blocking().unwrap(), [7; 64], "{strategy:?}");
        drop((src, dst, copied, se, explicit));
    }
}

/// Event records and stream waits submitted while an abort waits for a running kernel are
/// refused at once with `Error::Aborted` (never queued behind the kernel, never blocking); the
/// records accepted before the abort marked what it discards are discarded, and the event
/// then stands for a record that is never reached: its wait fails with `Error::Aborted`.
#[test]
fn records_and_waits_during_an_abort_are_refused_or_discarded() {
    let (_guard, ctx, _) = exclusive();
    let gate = gate_function(&ctx);
    for strategy in STRATEGIES {
        let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let event = Event::new(&ctx).unwrap();
        event.record(&other).unwrap();
        run(event.wait()).unwrap();
        let running = gated_launch(&s, &gate, 64);
        let abort = s.abort();
        // Accepted until the abort's thread marks what it discards, refused from then on
        // (until the kernel ends, which only this thread allows).
        let mut accepted = 0;
        let refused = watchdog("records until one is refused", || {
            loop {
                match event.record(&s) {
                    Ok(()) => accepted += 1,
                    Err(err) => break err,
                }
            }
        });
        assert!(refused.is_aborted(), "{strategy:?}: {refused}");
        let waited = s.wait_event(&event).unwrap_err();
        assert!(waited.is_aborted(), "{strategy:?}: {waited}");
        let timed = s.wait_event_timeout(&event, Duration::from_secs(1));
        assert!(timed.is_complete(), "{strategy:?}: refused at once");
        if accepted == 0 {
            // The event still stands for its record on `other`, which is complete.
            assert!(event.is_complete().unwrap());
            run(event.wait()).unwrap();
        }
        // The records accepted are discarded only if the kernel returns once the runtime's
        // abort call has begun (the refusals start just before it).
        until_the_runtime_aborts(&s);
        open_gate();
        run(async {
            abort.await.unwrap();
            // The running kernel was submitted before the abort: it fails as aborted, once the
            // device is done with it, and hands its buffer back.
            if let Err(err) = running.await {
                assert!(
                    err.error.is_aborted() && err.value.is_some(),
                    "{}",
                    err.error
                );
            }
            let err = timed.await.unwrap_err();
            assert!(err.error.is_aborted(), "{strategy:?}: {}", err.error);
            assert!(err.value.is_some(), "the event comes back");
            if accepted > 0 {
                let err = event.wait().await.unwrap_err();
                assert!(
                    err.is_aborted(),
                    "{strategy:?}: the record was discarded: {err}"
                );
            }
            event.record(&s).unwrap();
            event.wait().await.unwrap();
        });
    }
}

/// Two threads opening a device, using its primary context and dropping every handle, over
/// and over, while a third keeps an explicit context of it: the primary context is retained
/// and reset concurrently (`aclrtSetDevice` / `aclrtResetDevice`), and every operation still
/// completes. Devices that do not exist are typed errors.
#[test]
fn devices_opened_and_dropped_concurrently_keep_working() {
    let (_guard, _, _) = exclusive();
    for id in [3, 1000, u32::MAX] {
        let err = Device::open(id).unwrap_err();
        assert!(
            err.acl_code().is_some() || matches!(err, Error::InvalidArgument { .. }),
            "{id}: {err:?}"
        );
    }
    for strategy in STRATEGIES {
        let keeper = {
            let ctx = Device::open(1).unwrap().create_context().unwrap();
            let s = stream(&ctx, strategy);
            (ctx, s)
        };
        let failures = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let failures = failures.clone();
                std::thread::spawn(move || {
                    for round in 0..100u32 {
                        let device = Device::open(1).unwrap();
                        let ctx = device.primary_context().clone();
                        drop(device);
                        let s = stream(&ctx, strategy);
                        let event = Event::new(&ctx).unwrap();
                        let value = (t * 100 + round) as u8;
                        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), value);
                        event.record(&s).unwrap();
                        let result = block_on(async {
                            let buffer = op.await?;
                            event.wait().await?;
                            Ok::<_, Error>(buffer)
                        });
                        match result {
                            Ok(buffer) if buffer.to_vec_blocking().unwrap() == [value; 16] => {}
                            _ => {
                                failures.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        watchdog("threads opening and dropping device 1", || {
            for thread in threads {
                thread.join().unwrap();
            }
        });
        assert_eq!(failures.load(Ordering::SeqCst), 0, "{strategy:?}");
        let (ctx, s) = keeper;
        let filled = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 4)).unwrap();
        assert_eq!(filled.to_vec_blocking().unwrap(), [4; 8]);
    }
    // And with nothing keeping it: every primary context handle goes between the rounds.
    for _ in 0..50 {
        let ctx = Device::open(1).unwrap().primary_context().clone();
        let s = stream(&ctx, Strategy::EventPoll);
        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1)).unwrap();
    }
}
