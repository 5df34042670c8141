//! The thirty-second session's second helper: the serving path under a context a fault
//! stopped, and the Tokio harness's runtimes as a test suite builds them, through the `npu`
//! facade only. Requests sharing a `StreamPool`, a `DevicePool` and a `PinnedPool` on a
//! context a `FailureMode::Stop` fault stops mid-flight; the same requests on Tokio runtimes
//! without a time driver, under `tokio_test::block_on`, and under a paused clock.
//!
//! Each test is named for the promise it attacks and asserts it. The tests take turns (the
//! hold gate and the live counters are the simulator's, process-wide).

mod common;

use std::time::Duration;

use common::*;
use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::sim;
use npu::{Error, Stream};

fn input(seed: usize) -> Vec<f32> {
    (0..N).map(|i| ((i + seed) % 97) as f32).collect()
}

fn doubled(data: &[f32]) -> Vec<f32> {
    data.iter().map(|x| x * 2.0).collect()
}

/// The process-wide span recorder (installed before any device is touched), then the
/// simulator's four devices to this test alone.
fn turn() -> (std::sync::MutexGuard<'static, ()>, Context) {
    record_op_spans();
    // Devices 2 and 3 are each lost by one test and opened by no other.
    let (guard, ctx, _) = exclusive(Some(4));
    (guard, ctx)
}

/// docs/observability.md for the spans made since `from`: each closed, at most one outcome
/// (`completed` or `failed`) each; returns how many failed with `code` in their `error`.
fn spans_closed_with_one_outcome_each(from: Mark, code: &str, what: &str) -> usize {
    let seen = since(from);
    assert!(!seen.spans.is_empty(), "{what}: no npu_op span recorded");
    let mut failed_with_code = 0;
    for span in &seen.spans {
        assert!(
            span.closed,
            "{what}: a span never closed: {:?}",
            span.fields
        );
        let outcomes = span
            .messages()
            .iter()
            .filter(|m| *m == "completed" || *m == "failed")
            .count();
        assert!(
            outcomes <= 1,
            "{what}: {outcomes} outcomes in {:?}",
            span.fields
        );
        if span.messages().iter().any(|m| m == "failed")
            && span.fields.get("error").is_some_and(|e| e.contains(code))
        {
            failed_with_code += 1;
        }
    }
    failed_with_code
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// Typed errors and "never a hang" for a serving backend whose context a fault stops: 12
/// requests over a three-stream `StreamPool` (`FailureMode::Stop`) with their copies in
/// queued on the held device, one task of one stream made to fail. Every request ends, served
/// or with a typed error; every block comes back to its pool; the next requests, whichever
/// stream the pool hands them, fail at once with a typed error; the stopped model drops
/// without waiting, every `npu_op` span closes with at most one outcome (the faulted one's
/// `failed` naming the code), and a model on a fresh context of the same device serves. Both backends,
/// every strategy.
#[test]
fn requests_on_a_context_a_fault_stopped_end_typed_and_give_every_block_back() {
    let (_turn, _) = turn();
    let device = Device::open(1).unwrap();
    let trap = npu::error::AclCode(507015);
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let from = mark();
            let ctx = device.create_context().unwrap();
            let builder = Stream::builder(&ctx).strategy(strategy);
            let model = Model::new(builder, 3, 4, backend);
            model.streams.streams()[0]
                .set_failure_mode(npu::FailureMode::Stop)
                .unwrap();
            let rt = multi_thread();
            let held = sim::hold(&device).unwrap();
            let requests: Vec<_> = (0..12)
                .map(|i| {
                    let model = model.clone();
                    rt.spawn(async move { (i, model.run(&input(i)).await) })
                })
                .collect();
            until(&format!("{what}: requests queued"), || {
                model.device.stats().cache.allocated >= 4 * BLOCK
            });
            // The next task of the second stream (a copy in) fails, and stops the context.
            sim::fail_task(&model.streams.streams()[1], 1, trap).unwrap();
            drop(held);
            let ended = rt.block_on(async {
                tokio::time::timeout(HANG, futures::future::join_all(requests))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: a request on the stopped context hung"))
            });
            let mut failed = 0;
            for ended in ended {
                let (i, answer) = ended.unwrap();
                match answer {
                    Ok(out) => assert_eq!(out, doubled(&input(i)), "{what}: request {i}"),
                    Err(err) => {
                        failed += 1;
                        assert!(
                            matches!(err, Error::Acl(_) | Error::Aborted { .. }),
                            "{what}: request {i}: a typed device error, got {err:?}"
                        );
                    }
                }
            }
            assert!(failed > 0, "{what}: the fault failed no request");
            until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
            // Whatever stream the pool hands out next, the request fails at once.
            for i in 0..model.streams.len() {
                let answer = rt.block_on(async {
                    tokio::time::timeout(HANG, model.run(&input(i)))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: a request after the stop hung"))
                });
                let err = answer.expect_err("a stopped context served a request");
                assert!(matches!(err, Error::Acl(_)), "{what}: {err:?}");
                until_released(
                    &format!("{what}: after the stop, {}", model.stats()),
                    || model.at_rest(),
                );
            }
            watchdog(&format!("{what}: dropping the stopped model"), || {
                drop(model);
                drop(ctx);
            });
            until_released(&format!("{what}: the reactor"), || {
                npu::stream::reactor_stats().pending() == 0
            });
            let failed = spans_closed_with_one_outcome_each(from, "507015", &what);
            assert!(failed >= 1, "{what}: no span failed with the injected code");
            let fresh = device.create_context().unwrap();
            let model = Model::new(Stream::builder(&fresh).strategy(strategy), 3, 4, backend);
            let out = rt.block_on(async {
                tokio::time::timeout(HANG, model.run(&input(7)))
                    .await
                    .unwrap()
            });
            assert_eq!(
                out.unwrap(),
                doubled(&input(7)),
                "{what}: a fresh context serves"
            );
            drop(model);
            watchdog(&format!("{what}: the runtime's drop"), || drop(rt));
        }
    }
}

/// Releases the device from another thread once `pending` says the request waits on it: the
/// request is polled first, so that its wake-up comes from the device's completion.
fn release_when(
    pending: std::sync::mpsc::Receiver<()>,
    held: sim::Hold,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        pending
            .recv_timeout(HANG)
            .expect("the request never waited");
        drop(held);
    })
}

/// The harness story for runtimes a test builds by hand: a current-thread Tokio runtime
/// without any driver (`Builder::new_current_thread().build()`, no time, no I/O) and
/// `tokio_test::block_on` run a request through the pools whose device block waits for room
/// another request holds while the device is held, the device let go from another thread once
/// both are pending. Neither panics for want of a driver (npu-rs uses no Tokio timer), both
/// requests are served with their own answers and both pools are at rest. Both backends,
/// every strategy.
#[test]
fn requests_on_runtimes_without_drivers_or_under_tokio_test_are_served() {
    let (_turn, ctx) = turn();
    type BlockOn = fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>);
    let bare: BlockOn = |f| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    };
    let tokio_test: BlockOn = |f| tokio_test::block_on(f);
    for (how, block_on) in [("driverless", bare), ("tokio_test", tokio_test)] {
        for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
            for strategy in STRATEGIES {
                let what = format!("{how}, {backend:?}, {strategy:?}");
                let model = Model::new(Stream::builder(&ctx).strategy(strategy), 2, 1, backend);
                let held = sim::hold(&ctx.device()).unwrap();
                let (pending_tx, pending_rx) = std::sync::mpsc::channel();
                let letting_go = release_when(pending_rx, held);
                watchdog(&what, || {
                    block_on(Box::pin(async {
                        let (one, two) = (input(1), input(2));
                        let first = model.run(&one);
                        let second = model.run(&two);
                        let (mut first, mut second) =
                            (std::pin::pin!(first), std::pin::pin!(second));
                        // Both polled until the first waits on the device and the second for
                        // the block the first holds.
                        std::future::poll_fn(|cx| {
                            assert!(first.as_mut().poll(cx).is_pending());
                            assert!(second.as_mut().poll(cx).is_pending());
                            std::task::Poll::Ready(())
                        })
                        .await;
                        assert!(
                            model.device.stats().cache.waiters + model.pinned.stats().waiters >= 1,
                            "{what}: the second request waits for room"
                        );
                        pending_tx.send(()).unwrap();
                        let (a, b) = tokio::join!(first, second);
                        assert_eq!(a.unwrap(), doubled(&input(1)), "{what}");
                        assert_eq!(b.unwrap(), doubled(&input(2)), "{what}");
                    }))
                });
                letting_go.join().unwrap();
                until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
            }
        }
    }
}

/// docs/observability.md, "Tests in paused time", when the awaited work fails because its
/// context stops: under a paused clock (`start_paused`, as `#[tokio::test(start_paused =
/// true)]` builds it), a request over a `StreamPool` whose copy in waits on the held device,
/// and a `Stream::synchronize` of a sibling stream, both raced against a one-hour `timeout`;
/// another thread makes the copy's task fail (`FailureMode::Stop`) and lets the device go.
/// Both end with the device's typed error, not the timeout, with the clock standing still;
/// every block comes back. Every strategy.
#[test]
fn under_a_paused_clock_work_a_stop_fails_ends_typed_before_a_one_hour_timeout() {
    let (_turn, _) = turn();
    let device = Device::open(1).unwrap();
    let trap = npu::error::AclCode(507015);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let ctx = device.create_context().unwrap();
        let model = Model::new(
            Stream::builder(&ctx).strategy(strategy),
            2,
            2,
            DevicePoolBackend::Caching,
        );
        let streams = model.streams.streams().to_vec();
        streams[0].set_failure_mode(npu::FailureMode::Stop).unwrap();
        let held = sim::hold(&device).unwrap();
        let (pending_tx, pending_rx) = std::sync::mpsc::channel::<()>();
        // The copy in is the first stream's next task: it fails once the device runs.
        sim::fail_task(&streams[0], 1, trap).unwrap();
        let stopping = release_when(pending_rx, held);
        let rt = paused_runtime();
        let hour = Duration::from_secs(3600);
        watchdog(&what, || {
            rt.block_on(async {
                let start = tokio::time::Instant::now();
                // The pool hands the first request the first stream.
                let data = input(3);
                let request = tokio::time::timeout(hour, model.run(&data));
                let sync = tokio::time::timeout(hour, streams[1].synchronize());
                let (mut request, mut sync) = (std::pin::pin!(request), std::pin::pin!(sync));
                std::future::poll_fn(|cx| {
                    assert!(request.as_mut().poll(cx).is_pending());
                    let _ = sync.as_mut().poll(cx);
                    std::task::Poll::Ready(())
                })
                .await;
                pending_tx.send(()).unwrap();
                let (answer, synced) = tokio::join!(request, sync);
                let err = answer
                    .expect("the paused clock jumped past the stopped request")
                    .expect_err("a request whose copy failed was served");
                assert_eq!(err.acl_code(), Some(trap), "{what}: {err:?}");
                let synced = synced.expect("the paused clock jumped past the synchronisation");
                assert!(
                    synced.is_ok() || synced.unwrap_err().acl_code().is_some(),
                    "{what}"
                );
                assert_eq!(start.elapsed(), Duration::ZERO, "{what}: the clock moved");
            })
        });
        stopping.join().unwrap();
        until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
        watchdog(&what, || {
            drop(model);
            drop(rt);
        });
    }
}

/// `DevicePool::reserve` racing `trim_to`, and both racing requests (left unattacked by the
/// thirty-first session): on a multi-thread runtime, two tasks reserve blocks of three size
/// classes, two trim to random sizes, two allocate, memset and drop (every third reserve and
/// request given up on after its first poll), while a thread reads the counters. Every reading adds up (`reserved` is `allocated + awaiting_bytes + cached`, and
/// within the capacity); each reserve succeeds or is refused for room with
/// `InvalidArgument` of `DevicePool::reserve`; nothing hangs; at rest a trim empties the pool,
/// every block it made (`misses`) was given back (`frees`), and once dropped the device holds
/// nothing of it. Both backends, with and without a capacity, every strategy.
#[test]
fn reserves_racing_trims_and_requests_keep_the_counters_exact() {
    let (_turn, ctx) = turn();
    const SIZES: [usize; 3] = [4096, 3 * 4096, 64 << 10];
    let baseline = live_allocations(&ctx);
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for capacity in [None, Some(8 * (64 << 10))] {
            for strategy in STRATEGIES {
                let what = format!("{backend:?}, {capacity:?}, {strategy:?}");
                let mut builder = DevicePool::builder(&ctx).backend(backend);
                if let Some(capacity) = capacity {
                    builder = builder.capacity(capacity);
                }
                let pool = builder.build().unwrap();
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let checker = {
                    let (pool, stop, what) = (pool.clone(), stop.clone(), what.clone());
                    std::thread::spawn(move || {
                        let mut readings = 0u64;
                        while !stop.load(std::sync::atomic::Ordering::Acquire) {
                            let s = pool.stats().cache;
                            assert_eq!(
                                s.reserved,
                                s.allocated + s.awaiting_bytes + s.cached,
                                "{what}: {s:?}"
                            );
                            if let Some(capacity) = capacity {
                                assert!(s.peak_reserved <= capacity, "{what}: {s:?}");
                            }
                            readings += 1;
                            std::thread::yield_now();
                        }
                        readings
                    })
                };
                let rt = multi_thread();
                watchdog(&what, || {
                    rt.block_on(async {
                        let mut tasks = tokio::task::JoinSet::new();
                        for task in 0..6usize {
                            let (pool, ctx, what) = (pool.clone(), ctx.clone(), what.clone());
                            tasks.spawn(async move {
                                let s = Stream::builder(&ctx).strategy(strategy).build().unwrap();
                                let mut rng = Rng(0x32b0 + task as u64);
                                for round in 0..60usize {
                                    let bytes = SIZES[rng.below(SIZES.len())];
                                    match task % 3 {
                                        // Every third reserve given up on after one poll.
                                        0 if round % 3 == 2 => {
                                            let reserve = pool.reserve(&s, 1 + round % 4, bytes);
                                            let _ =
                                                tokio::time::timeout(Duration::ZERO, reserve).await;
                                        }
                                        0 => match pool.reserve(&s, 1 + round % 4, bytes).await {
                                            Ok(total) => assert!(total >= bytes, "{what}"),
                                            Err(err) => {
                                                assert_eq!(
                                                    invalid(&err),
                                                    ("DevicePool::reserve", "count"),
                                                    "{what}"
                                                );
                                            }
                                        },
                                        1 => {
                                            pool.trim_to(rng.below(4) * (64 << 10)).unwrap();
                                        }
                                        // Every third request given up on after one poll.
                                        _ if round % 3 == 1 => {
                                            let alloc = pool.alloc::<u8>(&s, bytes);
                                            let _ =
                                                tokio::time::timeout(Duration::ZERO, alloc).await;
                                        }
                                        _ => {
                                            let block = pool.alloc::<u8>(&s, bytes).await.unwrap();
                                            let block = s.memset(block, round as u8).await.unwrap();
                                            drop(block);
                                        }
                                    }
                                    tokio::task::yield_now().await;
                                }
                                s.synchronize().await.unwrap();
                            });
                        }
                        while let Some(done) = tasks.join_next().await {
                            done.unwrap();
                        }
                    })
                });
                stop.store(true, std::sync::atomic::Ordering::Release);
                assert!(checker.join().unwrap() > 0, "{what}: no reading taken");
                until_released(&what, || {
                    let s = pool.stats().cache;
                    s.allocated == 0 && s.awaiting_blocks == 0 && s.waiters == 0
                });
                pool.trim().unwrap();
                let s = pool.stats().cache;
                assert_eq!((s.reserved, s.cached), (0, 0), "{what}: {s:?}");
                assert_eq!(s.quarantined, 0, "{what}: {s:?}");
                assert_eq!(
                    s.misses, s.frees,
                    "{what}: every block made was given back: {s:?}"
                );
                watchdog(&what, || {
                    drop(pool);
                    drop(rt);
                });
                until_released(&format!("{what}: the device's memory"), || {
                    live_allocations(&ctx) <= baseline
                });
            }
        }
    }
}

/// Requests of a serving backend left behind by everything at once: on a held device, tasks
/// whose runtime-pool allocations are queued on the device and tasks whose copies in are,
/// their runtime shut down (`shutdown_timeout`, which must not wait for the held device), then
/// the stream pool, the pools and the context dropped, and only then the device let go
/// (device 1), or lost (device 2, every strategy at once). docs/observability.md: every `npu_op` span closes (the allocations' once
/// the device has run them) and none tells an outcome, since no future lived to see one; the
/// reactor has nothing pending and the device holds nothing of them.
#[test]
fn requests_whose_runtime_pools_and_context_go_before_the_device_close_every_span() {
    let (_turn, _) = turn();
    let from = mark();
    // Where each round's requests start in the record, and how many spans they made.
    let rounds = std::cell::RefCell::new(Vec::new());
    let serve_and_leave = |device: &Device, strategies: &[npu::stream::Strategy]| {
        // Two blocks made while the device runs, so that two requests reach their copies;
        // the allocations of the unbounded pool must be made by the held device.
        let left: Vec<_> = strategies
            .iter()
            .map(|&strategy| {
                let ctx = device.create_context().unwrap();
                let model = Model::new(
                    Stream::builder(&ctx).strategy(strategy),
                    2,
                    2,
                    DevicePoolBackend::RuntimePool,
                );
                let unbounded = DevicePool::builder(&ctx)
                    .backend(DevicePoolBackend::RuntimePool)
                    .build()
                    .unwrap();
                (model, unbounded, ctx)
            })
            .collect();
        let left_from = mark();
        let held = sim::hold(device).unwrap();
        let rt = multi_thread();
        for (model, unbounded, _) in &left {
            for i in 0..2 {
                let model = model.clone();
                rt.spawn(async move { model.run(&input(i)).await });
            }
            let stream = model.streams.next();
            for _ in 0..3 {
                let (pool, stream) = (unbounded.clone(), stream.clone());
                rt.spawn(async move { pool.alloc::<u8>(&stream, BLOCK).await.map(drop) });
            }
        }
        // Two copies in and three allocations per model.
        let queued = 5 * left.len();
        until("the work queued on the held device", || {
            left.iter()
                .all(|(model, ..)| model.device.stats().cache.allocated == 2 * BLOCK)
                && since(left_from).spans.iter().filter(|s| !s.closed).count() >= queued
        });
        // `shutdown_timeout` rather than `shutdown_background`: it returns once the workers
        // have dropped every task (the device held, rule 5 says it must), where the background
        // one may leave a task's poll running after the device is let go, whose operation then
        // rightly tells its outcome.
        watchdog("the runtime's shutdown", || rt.shutdown_timeout(HANG));
        watchdog("dropping the models", || drop(left));
        let made = since(left_from).spans.len();
        rounds.borrow_mut().push((left_from, made));
        held
    };
    let device = Device::open(1).unwrap();
    let baseline = live_allocations(device.primary_context());
    for strategy in STRATEGIES {
        serve_and_leave(&device, &[strategy]).release().unwrap();
        until_released(&format!("{strategy:?}: the reactor"), || {
            npu::stream::reactor_stats().pending() == 0
        });
        until_released(&format!("{strategy:?}: the device's memory"), || {
            live_allocations(device.primary_context()) <= baseline
        });
    }
    let lost = Device::open(2).unwrap();
    let held = serve_and_leave(&lost, &STRATEGIES);
    sim::lose(&lost).unwrap();
    held.release().unwrap();
    until_released("the lost device's operations", || {
        npu::stream::reactor_stats().pending() == 0
    });
    let seen = since(from);
    let allocations = seen
        .spans
        .iter()
        .filter(|span| {
            span.fields
                .get("op")
                .is_some_and(|op| op == "aclrtMemPoolMallocAsync")
        })
        .count();
    assert!(
        allocations >= 3 * 4,
        "the allocations' spans: {allocations}"
    );
    until_released("every span closed", || {
        since(from).spans.iter().all(|span| span.closed)
    });
    for &(left_from, made) in rounds.borrow().iter() {
        for span in &since(left_from).spans[..made] {
            let told = span
                .messages()
                .iter()
                .any(|m| m == "completed" || m == "failed");
            assert!(
                !told,
                "a dropped operation told an outcome: {:?}",
                span.fields
            );
        }
    }
}

/// What `DevicePool::alloc`'s documented retry does to a one-shot allocation fault
/// (`npu::sim::fail_next_alloc`), which the model-based attack assumed the next allocation
/// always reports: with a block cached, a request for a block of another size takes the fault,
/// gives the cached block back and retries, and succeeds, so the fault never reaches the
/// caller and the allocation after it succeeds too; with nothing cached and no block out, the
/// same request fails out of memory at once. Both backends, on a fresh context each.
#[test]
fn a_pool_request_retries_past_a_one_shot_allocation_fault_only_when_it_holds_memory() {
    let (_turn, _) = turn();
    let device = Device::open(1).unwrap();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let ctx = device.create_context().unwrap();
        let s = Stream::new(&ctx).unwrap();
        let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
        // Nothing cached, nothing out: the fault is the request's error.
        sim::fail_next_alloc(&device).unwrap();
        let err = run(pool.alloc::<u8>(&s, 64 << 10)).unwrap_err();
        assert!(err.is_out_of_memory(), "{what}: {err:?}");
        // A block cached: the request gives it back and retries past the fault.
        drop(run(pool.alloc::<u8>(&s, 4096)).unwrap());
        until_released(&what, || pool.stats().cache.cached == 4096);
        sim::fail_next_alloc(&device).unwrap();
        let block = run(pool.alloc::<u8>(&s, 64 << 10));
        assert!(block.is_ok(), "{what}: the retry did not run: {block:?}");
        let after = pool.stats().cache;
        assert_eq!((after.cached, after.frees), (0, 1), "{what}: {after:?}");
        assert!(
            DeviceBuffer::<u8>::new(&ctx, 1).is_ok(),
            "{what}: the fault was the pool's to take"
        );
        drop(block);
        drop((pool, s));
    }
}

/// `StreamPool`'s docs ("stopping work already queued is per stream") as a server meets it
/// afterwards: one stream of a two-stream pool stopped (`Stream::stop`) under requests queued
/// on the held device, the device let go. Every request on the stopped stream ends with a typed
/// error, the other stream's are served; then, before anyone aborts it, each later request the
/// pool hands the stopped stream ends with a typed error at once, never a hang (its
/// allocation, copies and launch); once it is aborted, every request is served. Both
/// backends, every strategy.
#[test]
fn a_stopped_stream_in_the_pool_fails_each_later_request_until_an_abort_mends_it() {
    let (_turn, _) = turn();
    let device = Device::open(1).unwrap();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let ctx = device.create_context().unwrap();
            let model = Model::new(Stream::builder(&ctx).strategy(strategy), 2, 8, backend);
            let rt = multi_thread();
            let held = sim::hold(&device).unwrap();
            let requests: Vec<_> = (0..6)
                .map(|i| {
                    let model = model.clone();
                    rt.spawn(async move { (i, model.run(&input(i)).await) })
                })
                .collect();
            until(&format!("{what}: requests queued"), || {
                model.device.stats().cache.allocated >= 6 * BLOCK
            });
            let stopped = model.streams.streams()[0].clone();
            stopped.stop().unwrap();
            drop(held);
            let ended = rt.block_on(async {
                tokio::time::timeout(HANG, futures::future::join_all(requests))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: a request hung"))
            });
            let failed = ended
                .into_iter()
                .map(|ended| ended.unwrap())
                .filter(|(i, answer)| match answer {
                    Ok(out) => {
                        assert_eq!(out, &doubled(&input(*i)), "{what}: request {i}");
                        false
                    }
                    Err(err) => {
                        assert!(
                            matches!(err, Error::Acl(_) | Error::Aborted { .. }),
                            "{what}: request {i}: {err:?}"
                        );
                        true
                    }
                })
                .count();
            assert_eq!(
                failed, 3,
                "{what}: the stopped stream's requests, and only they"
            );
            until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
            // Each later request the pool hands the stopped stream (every other one) fails.
            let mut later_failed = 0;
            for round in 0..4 {
                let answer = rt.block_on(async {
                    tokio::time::timeout(HANG, model.run(&input(round)))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: a request after the stop hung"))
                });
                match answer {
                    Ok(out) => assert_eq!(out, doubled(&input(round)), "{what}"),
                    Err(err) => {
                        later_failed += 1;
                        assert!(
                            matches!(err, Error::Acl(_) | Error::Aborted { .. }),
                            "{what}: {err:?}"
                        );
                    }
                }
                until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
            }
            assert_eq!(later_failed, 2, "{what}: the stopped stream ran later work");
            rt.block_on(async { stopped.abort().await.unwrap() });
            rt.block_on(async {
                for round in 0..4 {
                    let out = tokio::time::timeout(HANG, model.run(&input(round)))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: a request after the abort hung"));
                    assert_eq!(
                        out.unwrap(),
                        doubled(&input(round)),
                        "{what}: after the abort"
                    );
                }
            });
            until_released(&format!("{what}: {}", model.stats()), || model.at_rest());
            watchdog(&what, || {
                drop(model);
                drop(rt);
            });
        }
    }
}

/// docs/observability.md, "Tests in paused time", for work its device's loss ends: on a paused
/// runtime, requests over a `StreamPool` of each strategy (device 3), their copies in queued on
/// the held device, each raced against a one-hour `timeout`; another thread loses the device
/// once all are pending. Every request ends with the loss as a typed error, not the timeout,
/// the clock does not move, every block comes back, and dropping the models and the runtime
/// returns.
#[test]
fn under_a_paused_clock_requests_on_a_device_lost_end_typed_before_a_one_hour_timeout() {
    let (_turn, _) = turn();
    let device = Device::open(3).unwrap();
    let models: Vec<_> = STRATEGIES
        .iter()
        .map(|&strategy| {
            let ctx = device.primary_context();
            Model::new(
                Stream::builder(ctx).strategy(strategy),
                2,
                2,
                DevicePoolBackend::Caching,
            )
        })
        .collect();
    let held = sim::hold(&device).unwrap();
    let (pending_tx, pending_rx) = std::sync::mpsc::channel::<()>();
    let losing = {
        let device = device.clone();
        std::thread::spawn(move || {
            pending_rx
                .recv_timeout(HANG)
                .expect("the requests never waited");
            sim::lose(&device).unwrap();
            drop(held);
        })
    };
    let rt = paused_runtime();
    let hour = Duration::from_secs(3600);
    watchdog("requests on the lost device", || {
        rt.block_on(async {
            let start = tokio::time::Instant::now();
            let inputs: Vec<_> = (0..4).map(input).collect();
            let mut requests: Vec<_> = models
                .iter()
                .flat_map(|model| {
                    inputs
                        .iter()
                        .map(|data| Box::pin(tokio::time::timeout(hour, model.run(data))))
                })
                .collect();
            std::future::poll_fn(|cx| {
                for request in &mut requests {
                    assert!(request.as_mut().poll(cx).is_pending());
                }
                std::task::Poll::Ready(())
            })
            .await;
            pending_tx.send(()).unwrap();
            for answer in futures::future::join_all(requests).await {
                let err = answer
                    .expect("the paused clock jumped past a request on the lost device")
                    .expect_err("a lost device served a request");
                assert!(
                    matches!(err, Error::Acl(_) | Error::Aborted { .. }),
                    "a typed device error, got {err:?}"
                );
            }
            assert_eq!(start.elapsed(), Duration::ZERO, "the clock moved");
        })
    });
    losing.join().unwrap();
    for model in &models {
        until_released(&model.stats(), || model.at_rest());
    }
    watchdog("dropping the lost device's models and runtime", || {
        drop(models);
        drop(rt);
    });
}

/// The flow arrows of every `"f"` (a wait's end) in the trace file at `path`, paired with
/// their `"s"` (the record's start): `None` for an end no record starts.
fn trace_flows(path: &std::path::Path) -> Vec<(serde_json::Value, Option<serde_json::Value>)> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let start = |id: &serde_json::Value| {
        events
            .iter()
            .find(|e| e["ph"] == "s" && &e["id"] == id)
            .cloned()
    };
    events
        .iter()
        .filter(|e| e["ph"] == "f")
        .map(|end| (end.clone(), start(&end["id"])))
        .collect()
}

/// docs/observability.md, the timeline: "a flow arrow (`"s"` at the record, `"f"` at each wait
/// on it) shows which record released which wait", and the trace's checks ("flows that pair
/// up: every end has its start, never earlier"), for waits no record released: a
/// `Stream::wait_event_timeout` that timed out (the record, behind a notify wait, runs only
/// afterwards), one whose record an abort discarded, and one whose record ran before the trace
/// began (`Guard::start` mid-program). None may end an arrow; a wait the record did release
/// still does.
#[test]
fn the_trace_draws_no_arrow_to_a_wait_no_record_released() {
    let (_turn, _) = turn();
    let device = Device::open(1).unwrap();
    let ctx = device.create_context().unwrap();
    let path = std::env::temp_dir().join(format!("npu-attack32b-{}.json", std::process::id()));
    let [a, b, c, d, e] = [0; 5].map(|_| Stream::new(&ctx).unwrap());
    let (late, never) = (
        npu::stream::Notify::new(&ctx).unwrap(),
        npu::stream::Notify::new(&ctx).unwrap(),
    );
    let (timed_out, discarded, released) = (
        npu::Event::new(&ctx).unwrap(),
        npu::Event::new(&ctx).unwrap(),
        npu::Event::new(&ctx).unwrap(),
    );
    // A record made before the trace begins, waited on once it has.
    let early = npu::Event::new(&ctx).unwrap();
    early.record(&a).unwrap();
    run(a.synchronize()).unwrap();
    let guard = sim::trace::Guard::start(&path);
    run(async {
        b.wait_event(&early).unwrap();
        // A record that runs only after the wait on it timed out.
        let blocked = a.wait_notify(&late);
        timed_out.record(&a).unwrap();
        let err = b
            .wait_event_timeout(&timed_out, Duration::from_secs(1))
            .await
            .expect_err("the record cannot have run");
        assert!(err.error.is_timeout(), "{err:?}");
        c.record_notify(&late).await.unwrap();
        blocked.await.unwrap();
        timed_out.wait().await.unwrap();
        // A record an abort discards, and a wait on it.
        let stuck = d.wait_notify(&never);
        discarded.record(&d).unwrap();
        let waiting = e.wait_event_timeout(&discarded, Duration::from_secs(30));
        d.abort().await.unwrap();
        assert!(stuck.await.is_err());
        assert!(
            waiting.await.is_err(),
            "a wait on a discarded record was released"
        );
        // A record that releases its wait.
        released.record(&a).unwrap();
        b.wait_event(&released).unwrap();
        // The first synchronisation of a stream reports its failed wait once.
        for s in [&a, &b, &c, &d, &e] {
            let _ = s.synchronize().await;
            s.synchronize().await.unwrap();
        }
    });
    assert_eq!(guard.finish().unwrap().as_deref(), Some(path.as_path()));
    // The trace is the process's: only this test's streams' waits are judged (earlier tests'
    // pools and streams may still be wound down on the device meanwhile).
    let ours: Vec<u64> = [&a, &b, &c, &d, &e].iter().map(|s| s.id()).collect();
    let flows: Vec<_> = trace_flows(&path)
        .into_iter()
        .filter(|(end, _)| end["tid"].as_u64().is_some_and(|tid| ours.contains(&tid)))
        .collect();
    std::fs::remove_file(&path).ok();
    for (end, start) in &flows {
        let start = start
            .as_ref()
            .unwrap_or_else(|| panic!("an arrow ends at a wait no record starts: {end}"));
        assert!(
            end["ts"].as_f64() >= start["ts"].as_f64(),
            "an arrow ends before its record: {start} -> {end}"
        );
    }
    assert_eq!(
        flows.len(),
        1,
        "only the released wait ends an arrow: {flows:?}"
    );
}
