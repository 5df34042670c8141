//! The thirtieth session's helper: the serving path and the Tokio-user story, as a
//! model-serving backend or a test harness uses the `npu` crate. Requests sharing a
//! `StreamPool`, a `DevicePool` and a `PinnedPool` given up on by `tokio::time::timeout`,
//! `select!`, `JoinSet::abort_all` and `JoinHandle::abort` while the device holds their work;
//! npu futures polled by executors other than Tokio's multi-thread runtime (`LocalSet`,
//! `futures::executor::block_on`, `LocalPool`, a blocking task of a paused runtime) with a
//! waker that changes between polls; pool futures forgotten; the paused clock around pool
//! requests and around work first polled while the clock ran; a device lost under requests
//! in flight.
//!
//! Each test is named for the promise it attacks and asserts it. The simulator of the file has
//! four devices; device 3 is lost by one test and used by no other. The tests take turns (the
//! hold gate and the live counters are the simulator's, process-wide).

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

use common::*;
use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;
use npu::{Error, Stream};

impl Model {
    /// Every block of both pools is back, and `count` requests at once are served whole.
    async fn serves(&self, count: usize) {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..count {
            let model = self.clone();
            set.spawn(async move {
                let data = input(i);
                let out = model.run(&data).await.unwrap();
                assert_eq!(out, doubled(&data), "request {i} got its own answer");
            });
        }
        while let Some(done) = set.join_next().await {
            done.unwrap();
        }
    }
}

fn input(seed: usize) -> Vec<f32> {
    (0..N).map(|i| ((i + seed) % 97) as f32).collect()
}

fn doubled(data: &[f32]) -> Vec<f32> {
    data.iter().map(|x| x * 2.0).collect()
}

/// Waits (bounded) until the reactor has nothing pending (`reactor_stats().pending()`, as the
/// serve example's `GET /stats` reports it): every operation it was handed has completed.
fn until_the_reactor_is_idle(what: &str) {
    until_released(what, || npu::stream::reactor_stats().pending() == 0);
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

fn counting() -> (Arc<Counting>, Waker) {
    let counter = Arc::new(Counting::default());
    (counter.clone(), Waker::from(counter))
}

fn woken(counter: &Counting) -> usize {
    counter.0.load(Ordering::Acquire)
}

/// Waits (bounded) until `counter` has been woken.
fn until_woken(what: &str, counter: &Counting) {
    until(&format!("{what} is woken"), || woken(counter) > 0);
}

/// Rules 2, 3 and 5 for a serving backend's shared state: 24 requests over a three-stream
/// `StreamPool` and pools with room for four blocks each, on a multi-thread runtime with the
/// device held, given up on in every way a server gives up on a request — a `timeout` that
/// runs out (while waiting for room or for the device), a `select!` that a cancellation wins,
/// `JoinHandle::abort`, and the rest at once by `JoinSet::abort_all` — then the device let
/// go. Nothing waits on the device meanwhile (the gives-up return at once), the blocks the
/// held work owns stay out until the device is done, then every block is back, no waiter is
/// left in either pool, and the pools serve every request of a second wave. Both device-pool
/// backends, every strategy.
#[test]
fn requests_given_up_on_in_every_way_over_shared_pools_give_every_block_back() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let model = Model::new(Stream::builder(&ctx).strategy(strategy), 3, 4, backend);
            let rt = multi_thread();
            rt.block_on(async {
                tokio::time::timeout(HANG, async {
                    let held = sim::hold(&ctx.device()).unwrap();
                    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
                    let mut set = tokio::task::JoinSet::new();
                    let mut handles = Vec::new();
                    for i in 0..24 {
                        let model = model.clone();
                        let mut cancel = cancel_rx.clone();
                        let request = async move {
                            let data = input(i);
                            match i % 4 {
                                0 => {
                                    let r = tokio::time::timeout(
                                        Duration::from_millis(5 + i as u64),
                                        model.run(&data),
                                    )
                                    .await;
                                    assert!(r.is_err(), "{i}: the held device let it finish");
                                }
                                1 => {
                                    tokio::select! {
                                        r = model.run(&data) => panic!("{i}: finished held: {r:?}"),
                                        _ = cancel.wait_for(|c| *c) => {}
                                    }
                                }
                                _ => {
                                    let r = model.run(&data).await;
                                    panic!("{i}: finished on a held device: {r:?}");
                                }
                            }
                        };
                        if i % 4 == 2 {
                            handles.push(tokio::spawn(request));
                        } else {
                            set.spawn(request);
                        }
                    }
                    // Until the four blocks of each pool are out: four requests have their
                    // work queued on the held device, the rest wait for room.
                    while model.device.stats().cache.allocated < 4 * BLOCK
                        || model.pinned.stats().waiters == 0
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    cancel_tx.send(true).unwrap();
                    for handle in &handles {
                        handle.abort();
                    }
                    for handle in handles {
                        let r = handle.await;
                        assert!(r.unwrap_err().is_cancelled(), "{what}: aborted");
                    }
                    // The timeouts and selects end on their own, the rest are aborted.
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    set.abort_all();
                    while let Some(r) = set.join_next().await {
                        if let Err(err) = r {
                            assert!(err.is_cancelled(), "{what}: {err}");
                        }
                    }
                    // Every request is gone; the held work still owns its blocks.
                    let (pinned, device) = (model.pinned.stats(), model.device.stats().cache);
                    assert_eq!(pinned.waiters + device.waiters, 0, "{what}: no waiter left");
                    assert!(
                        device.allocated > 0 && pinned.allocated > 0,
                        "{what}: the held work keeps its blocks: {}",
                        model.stats()
                    );
                    drop(held);
                    for stream in model.streams.streams() {
                        stream.synchronize().await.unwrap();
                    }
                })
                .await
                .unwrap_or_else(|_| panic!("hung: {what}"));
            });
            until_released(&what, || model.at_rest());
            rt.block_on(async {
                tokio::time::timeout(HANG, model.serves(12))
                    .await
                    .unwrap_or_else(|_| panic!("the second wave hung: {what}"));
            });
            assert!(model.at_rest(), "{what}: {}", model.stats());
            until_the_reactor_is_idle(&what);
            drop(rt);
        }
    }
}

/// Rule 7 and the executor story: the same request, an `Op`, an `Event::wait`, a
/// `Completion::wait` and a pool allocation queued for room, each awaited on the held device
/// by `futures::executor::block_on` on a thread of its own, by a `LocalPool`, by a
/// `spawn_local` task of a `LocalSet` on a current-thread runtime and by
/// `futures::executor::block_on` inside a blocking task of a paused runtime; the device let go
/// from another thread. Every one wakes and resolves with its result, every strategy.
#[test]
fn npu_futures_driven_by_other_executors_wake_and_resolve() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        let model = Model::new(
            Stream::builder(&ctx).strategy(strategy),
            2,
            2,
            DevicePoolBackend::RuntimePool,
        );
        let stream = model.streams.next();
        // The executors, each given the same work: a memset, an event recorded after it and
        // waited on, its completion waited on, a pinned block waited for while the other
        // block's memset owns it... and the whole request.
        let work = move |model: Model, stream: Stream, ctx: Context| async move {
            let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 7);
            let done = op.completion().clone();
            let event = Event::new(&ctx).unwrap();
            event.record(&stream).unwrap();
            let blocks = [
                model.pinned.alloc::<f32>(N).await.unwrap(),
                model.pinned.alloc::<f32>(N).await.unwrap(),
            ];
            let [a, b] = blocks;
            let x = model.device.alloc::<f32>(&stream, N).await.unwrap();
            let held_copy = stream.copy_h2d(a, x);
            drop(b);
            // The room is taken by `held_copy`'s block until the device runs it.
            let third = model.pinned.alloc::<f32>(N);
            let (buffer, (), (), third, copied) = tokio::join!(
                op,
                async { event.wait().await.unwrap() },
                async { done.wait().await.unwrap() },
                async {
                    let b = model.pinned.alloc::<f32>(N).await.unwrap();
                    drop(b);
                    third.await
                },
                held_copy,
            );
            let buffer = buffer.unwrap();
            let mut back = vec![0u8; 4096];
            buffer.copy_to_host_blocking(&mut back).unwrap();
            assert!(back.iter().all(|&b| b == 7));
            drop((third.unwrap(), copied.unwrap()));
            let data = input(3);
            assert_eq!(model.run(&data).await.unwrap(), doubled(&data));
        };
        for executor in [
            "block_on",
            "LocalPool",
            "LocalSet",
            "block_on in a paused blocking task",
        ] {
            let what = format!("{executor}, {strategy:?}");
            // The device block is then made by the held device (`aclrtMemPoolMallocAsync`).
            model.device.trim().unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            let (model, stream, ctx2) = (model.clone(), stream.clone(), ctx.clone());
            let future = work(model.clone(), stream, ctx2);
            let (tx, rx) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                match executor {
                    "block_on" => futures::executor::block_on(future),
                    "LocalPool" => {
                        let mut pool = futures::executor::LocalPool::new();
                        pool.run_until(future);
                    }
                    "LocalSet" => {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        let local = tokio::task::LocalSet::new();
                        local.block_on(&rt, async move {
                            tokio::task::spawn_local(future).await.unwrap();
                        });
                    }
                    _ => {
                        let rt = paused_runtime();
                        rt.block_on(async move {
                            let blocking = tokio::task::spawn_blocking(move || {
                                futures::executor::block_on(future)
                            });
                            let waited = tokio::time::timeout(Duration::from_secs(3600), blocking);
                            waited
                                .await
                                .expect("a paused clock jumped past device work")
                                .unwrap();
                        });
                    }
                }
                tx.send(()).unwrap();
            });
            // The work is queued on the held device before it is let go.
            std::thread::sleep(Duration::from_millis(20));
            assert!(rx.try_recv().is_err(), "{what}: finished on a held device");
            drop(held);
            rx.recv_timeout(HANG)
                .unwrap_or_else(|_| panic!("hung: {what}"));
            thread.join().unwrap();
            until_released(&what, || model.at_rest());
        }
    }
}

/// Rule 7 with a waker that changes between polls: an `Op`, a `Completion::wait`, an
/// `Event::wait`, a `PinnedPool::alloc` and a `DevicePool::alloc` (each queued for room) polled
/// first with one waker, then with another, then the device let go or the room given back:
/// the second waker is woken. A future polled again after it resolved: the `Op` says so with
/// a typed error naming `Op::poll`, the waits tell their result again.
#[test]
fn a_waker_replaced_between_polls_is_the_one_woken() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let model = Model::new(
            Stream::builder(&ctx).strategy(strategy),
            1,
            1,
            DevicePoolBackend::Caching,
        );
        let stream = model.streams.next();
        let held = sim::hold(&ctx.device()).unwrap();
        let mut op = pin!(stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
        let done = op.completion().clone();
        let mut wait = pin!(done.wait());
        let event = Event::new(&ctx).unwrap();
        event.record(&stream).unwrap();
        let mut event_wait = pin!(event.wait());
        let pinned_block = model.pinned.try_alloc::<f32>(N).unwrap().unwrap();
        let device_block = model.device.try_alloc::<f32>(&stream, N).unwrap().unwrap();
        let mut pinned_alloc = pin!(model.pinned.alloc::<f32>(N));
        let mut device_alloc = pin!(model.device.alloc::<f32>(&stream, N));

        let (_first, first_waker) = counting();
        let (second, second_waker) = counting();
        let mut cx = TaskContext::from_waker(&first_waker);
        assert!(op.as_mut().poll(&mut cx).is_pending());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(event_wait.as_mut().poll(&mut cx).is_pending());
        assert!(pinned_alloc.as_mut().poll(&mut cx).is_pending());
        assert!(device_alloc.as_mut().poll(&mut cx).is_pending());
        let mut cx = TaskContext::from_waker(&second_waker);
        assert!(op.as_mut().poll(&mut cx).is_pending());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(event_wait.as_mut().poll(&mut cx).is_pending());
        assert!(pinned_alloc.as_mut().poll(&mut cx).is_pending());
        assert!(device_alloc.as_mut().poll(&mut cx).is_pending());
        let before = woken(&second);

        // The pools first: their room comes back through a task, not the device.
        drop(pinned_block);
        until_woken(&format!("{what}: the pinned allocation"), &second);
        let Poll::Ready(pinned) = pinned_alloc.as_mut().poll(&mut cx) else {
            panic!("{what}: woken, the pinned allocation is served");
        };
        drop(pinned.unwrap());
        let woken_by_pinned = woken(&second);
        drop(device_block);
        until(&format!("{what}: the device alloc is woken"), || {
            woken(&second) > woken_by_pinned
        });
        let deadline = std::time::Instant::now() + HANG;
        let device = loop {
            if let Poll::Ready(block) = device_alloc.as_mut().poll(&mut cx) {
                break block.unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: device alloc never served"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        drop(device);
        assert!(woken(&second) > before);

        // Then the device.
        let settled = woken(&second);
        drop(held);
        let deadline = std::time::Instant::now() + HANG;
        let mut results = (None, None, None);
        while results.0.is_none() || results.1.is_none() || results.2.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: never resolved"
            );
            if results.0.is_none()
                && let Poll::Ready(r) = op.as_mut().poll(&mut cx)
            {
                results.0 = Some(r.map(drop).map_err(|e| e.error));
            }
            if results.1.is_none()
                && let Poll::Ready(r) = wait.as_mut().poll(&mut cx)
            {
                results.1 = Some(r);
            }
            if results.2.is_none()
                && let Poll::Ready(r) = event_wait.as_mut().poll(&mut cx)
            {
                results.2 = Some(r);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            woken(&second) > settled,
            "{what}: the second waker was woken by the device"
        );
        assert!(results.0.unwrap().is_ok() && results.1.unwrap().is_ok());
        assert!(results.2.unwrap().is_ok());
        // Polled again after it resolved.
        let Poll::Ready(Err(again)) = op.as_mut().poll(&mut cx) else {
            panic!("{what}: an op polled after it resolved says so");
        };
        assert_eq!(invalid(&again.error), ("Op::poll", "self"), "{what}");
        assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        assert!(matches!(
            event_wait.as_mut().poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
        until_released(&what, || model.at_rest());
    }
}

/// "`mem::forget` can only leak" for the pools' futures: a `PinnedPool::alloc` and a
/// `DevicePool::alloc` queued for room and then forgotten take at most the block they are
/// served (leaked into them); the waiters queued behind them are served with the next block,
/// and a forgotten `PooledBuffer` or `PooledDeviceBuffer` keeps its room only. Nothing hangs.
#[test]
fn forgotten_pool_futures_leak_at_most_their_block_and_the_waiters_behind_them_are_served() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        let what = format!("{backend:?}");
        let model = Model::new(
            Stream::builder(&ctx).strategy(Strategy::EventPoll),
            1,
            3,
            backend,
        );
        let stream = model.streams.next();
        run(async {
            let pinned: Vec<_> = (0..3)
                .map(|_| model.pinned.try_alloc::<f32>(N).unwrap().unwrap())
                .collect();
            let device: Vec<_> = (0..3)
                .map(|_| model.device.try_alloc::<f32>(&stream, N).unwrap().unwrap())
                .collect();
            // Forgotten while queued (polled once, so in the queue), then a waiter behind.
            let mut forgotten_pinned = Box::pin(model.pinned.alloc::<f32>(N));
            assert!(polled_once(forgotten_pinned.as_mut()).is_pending());
            std::mem::forget(forgotten_pinned);
            let mut forgotten_device = Box::pin(model.device.alloc::<f32>(&stream, N));
            assert!(polled_once(forgotten_device.as_mut()).is_pending());
            std::mem::forget(forgotten_device);
            let behind_pinned = tokio::spawn({
                let model = model.clone();
                async move { model.pinned.alloc::<f32>(N).await.map(drop) }
            });
            let behind_device = tokio::spawn({
                let (model, stream) = (model.clone(), stream.clone());
                async move { model.device.alloc::<f32>(&stream, N).await.map(drop) }
            });
            tokio::task::yield_now().await;
            let mut pinned = pinned.into_iter();
            let mut device = device.into_iter();
            // The first block back goes to the forgotten waiter, the second to the one behind.
            drop(pinned.next());
            drop(device.next());
            drop(pinned.next());
            drop(device.next());
            behind_pinned.await.unwrap().unwrap();
            behind_device.await.unwrap().unwrap();
            // A forgotten guard keeps its room, nothing else.
            std::mem::forget(pinned.next().unwrap());
            std::mem::forget(device.next().unwrap());
            let p = model.pinned.try_alloc::<f32>(N).unwrap();
            let d = model.device.try_alloc::<f32>(&stream, N).unwrap();
            assert!(
                p.is_some() && d.is_some(),
                "{what}: the room not leaked is served"
            );
        });
        let (pinned, device) = (model.pinned.stats(), model.device.stats().cache);
        assert_eq!(pinned.waiters + device.waiters, 0, "{what}: nobody waits");
        assert_eq!(
            (pinned.allocated, device.allocated),
            (2 * BLOCK, 2 * BLOCK),
            "{what}: the forgotten waiter's block and the forgotten guard, nothing more"
        );
        // The leaked pools are leaked with their blocks (forgotten on purpose).
        std::mem::forget(model);
    }
}

/// docs/observability.md, "Tests in paused time", for a serving handler: under a paused clock a
/// request through the pools (a runtime-pool allocation the device must run, a copy, a kernel)
/// bounded by a one-hour `timeout` answers once the held device is let go by another thread,
/// on a plain task and on a `LocalSet`'s; and work first polled while the clock ran keeps the
/// clock once a test pauses it (`tokio::time::pause`) and polls the work again under a
/// `select!` against a one-hour sleep. The clock stands still throughout.
#[test]
fn under_a_paused_clock_a_request_through_the_pools_beats_its_one_hour_deadline() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let model = Model::new(
            Stream::builder(&ctx).strategy(strategy),
            2,
            2,
            DevicePoolBackend::RuntimePool,
        );
        for how in ["task", "LocalSet", "paused mid-flight"] {
            let what = format!("{what}, {how}");
            let held = sim::hold(&ctx.device()).unwrap();
            let letting_go = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                drop(held);
            });
            let rt = if how == "paused mid-flight" {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
            } else {
                paused_runtime()
            };
            let model2 = model.clone();
            let request = async move {
                let data = input(9);
                let hour = Duration::from_secs(3600);
                let start = tokio::time::Instant::now();
                let answer =
                    match how {
                        "task" => tokio::spawn(async move {
                            tokio::time::timeout(hour, model2.run(&data)).await
                        })
                        .await
                        .unwrap(),
                        "LocalSet" => {
                            let local = tokio::task::LocalSet::new();
                            local
                                .run_until(async move {
                                    tokio::task::spawn_local(async move {
                                        tokio::time::timeout(hour, model2.run(&data)).await
                                    })
                                    .await
                                    .unwrap()
                                })
                                .await
                        }
                        _ => {
                            let mut run = pin!(model2.run(&data));
                            // Polled while the clock runs: the request's copy is queued.
                            tokio::select! {
                                biased;
                                r = &mut run => panic!("finished on a held device: {r:?}"),
                                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                            }
                            tokio::time::pause();
                            let start = tokio::time::Instant::now();
                            let answer = tokio::select! {
                                r = &mut run => Ok(r),
                                () = tokio::time::sleep(hour) => Err(()),
                            };
                            let answer = answer.expect("the paused clock jumped past device work");
                            assert!(start.elapsed() < Duration::from_secs(1), "time stood still");
                            assert_eq!(answer.unwrap(), doubled(&input(9)));
                            return;
                        }
                    };
                let answer = answer.expect("the paused clock jumped past device work");
                assert_eq!(answer.unwrap(), doubled(&input(9)));
                assert!(start.elapsed() < Duration::from_secs(1), "time stood still");
            };
            watchdog(&what, || rt.block_on(request));
            letting_go.join().unwrap();
            drop(rt);
            until_released(&what, || model.at_rest());
        }
    }
}

/// Rules 3 and 5 and typed errors when the device is lost under a serving backend: 16
/// requests over a `StreamPool` of device 3, their work queued on the held device, the device
/// lost and let go. Every request ends (none hangs) with the device's loss as a typed error,
/// every block returns to its pool, and the next request, and each entry it uses, fails at
/// once with an error, never a hang; dropping everything returns at once. Every strategy
/// (one pool each, the device lost for the rest of the process after the first).
#[test]
fn requests_in_flight_when_their_device_is_lost_end_with_its_error_and_give_every_block_back() {
    let (_turn, _, _) = exclusive(Some(4));
    let ctx = Device::open(3).unwrap().primary_context().clone();
    let models: Vec<_> = STRATEGIES
        .iter()
        .map(|&s| {
            Model::new(
                Stream::builder(&ctx).strategy(s),
                3,
                8,
                DevicePoolBackend::Caching,
            )
        })
        .collect();
    let rt = multi_thread();
    let held = sim::hold(&ctx.device()).unwrap();
    let requests: Vec<_> = models
        .iter()
        .flat_map(|model| {
            (0..16).map(|i| {
                let model = model.clone();
                rt.spawn(async move { model.run(&input(i)).await })
            })
        })
        .collect();
    until("the requests queued", || {
        models
            .iter()
            .all(|m| m.device.stats().cache.allocated >= 8 * BLOCK)
    });
    sim::lose(&ctx.device()).unwrap();
    drop(held);
    let ended = rt.block_on(async {
        tokio::time::timeout(HANG, futures::future::join_all(requests))
            .await
            .expect("a request on the lost device hung")
    });
    for (i, ended) in ended.into_iter().enumerate() {
        let err = ended
            .unwrap()
            .expect_err("a request on a lost device was served");
        let text = err.to_string();
        assert!(
            matches!(err, Error::Acl(_)) || matches!(err, Error::Aborted { .. }),
            "request {i}: a typed device error, got {err:?}"
        );
        assert!(!text.is_empty());
    }
    for model in &models {
        until_released("the lost device's blocks", || model.at_rest());
    }
    // The next request fails at once, whatever it reaches first.
    for model in &models {
        let r = rt.block_on(async {
            tokio::time::timeout(HANG, model.run(&input(1)))
                .await
                .expect("a request to a lost device hung")
        });
        assert!(r.is_err(), "a lost device served a request");
        until_released("the next request's blocks", || model.at_rest());
    }
    watchdog("dropping the lost device's models and runtime", || {
        drop(models);
        drop(rt);
    });
    until_the_reactor_is_idle("the lost device's operations");
}

/// Rule 5 for several Tokio runtimes sharing one device pool: tasks of a current-thread
/// runtime and of a multi-thread runtime queue for the same room while a third runtime's task
/// holds it with work on the held device; the holding runtime is shut down with
/// `shutdown_timeout(0)`, the current-thread one dropped with its waiter pending. Neither end
/// waits for the device, the surviving runtime's waiter is served once the device runs, and
/// nothing is lost. Both backends, every strategy.
#[test]
fn runtimes_sharing_a_pool_end_under_its_waiters_without_waiting_and_lose_nothing() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let model = Model::new(Stream::builder(&ctx).strategy(strategy), 2, 1, backend);
            let held = sim::hold(&ctx.device()).unwrap();
            let holder = multi_thread();
            let (queued_tx, queued_rx) = std::sync::mpsc::channel();
            holder.spawn({
                let model = model.clone();
                async move {
                    let stream = model.streams.next();
                    let host = model.pinned.alloc::<f32>(N).await.unwrap();
                    let x = model.device.alloc::<f32>(&stream, N).await.unwrap();
                    let copy = stream.copy_h2d(host, x);
                    queued_tx.send(()).unwrap();
                    let _ = copy.await;
                    std::future::pending::<()>().await;
                }
            });
            queued_rx.recv_timeout(HANG).unwrap();
            let current = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let survivor = multi_thread();
            let served = survivor.spawn({
                let model = model.clone();
                async move { model.run(&input(5)).await }
            });
            // The current-thread runtime's waiter, polled once, then the runtime dropped
            // under it.
            current.block_on({
                let model = model.clone();
                async move {
                    let waiter = tokio::spawn(async move { model.run(&input(6)).await });
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    drop(waiter);
                }
            });
            until(&format!("{what}: queued"), || {
                model.pinned.stats().waiters >= 2
            });
            watchdog(&format!("{what}: ending the runtimes"), || {
                holder.shutdown_timeout(Duration::ZERO);
                drop(current);
            });
            drop(held);
            let answer = survivor.block_on(async {
                tokio::time::timeout(HANG, served)
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the survivor's waiter hung"))
            });
            assert_eq!(answer.unwrap().unwrap(), doubled(&input(5)), "{what}");
            until_released(&what, || model.at_rest());
            drop(survivor);
        }
    }
}

/// "Each operation reports only its own work" for requests sharing the streams of a
/// `StreamPool`: 16 requests at once over one and over two streams, their copies in queued on
/// the held device, and the nth task of a stream from then on made to fail (an AI Core trap,
/// n drawn over the kernels and copies out the requests submit from then on). Exactly one
/// request fails, with that code, and every other request gets its own, correct answer; the
/// pools are at rest afterwards. Every strategy, 12 draws each.
#[test]
fn a_fault_in_one_request_on_a_shared_stream_fails_that_request_only() {
    let (_turn, ctx, _) = exclusive(Some(4));
    let trap = npu::error::AclCode(507015);
    let mut rng = Rng(0x5eed_3030);
    for strategy in STRATEGIES {
        for streams in [1, 2] {
            let model = Model::new(
                Stream::builder(&ctx).strategy(strategy),
                streams,
                16,
                DevicePoolBackend::Caching,
            );
            let rt = multi_thread();
            for round in 0..12 {
                let what = format!("{strategy:?}, {streams} streams, round {round}");
                let held = sim::hold(&ctx.device()).unwrap();
                let requests: Vec<_> = (0..16)
                    .map(|i| {
                        let model = model.clone();
                        rt.spawn(async move {
                            let data = input(i + round);
                            (model.run(&data).await, data)
                        })
                    })
                    .collect();
                until(&format!("{what}: queued"), || {
                    model.device.stats().cache.allocated >= 16 * BLOCK
                });
                // The simulator counts device tasks from their submission: each stream has
                // 16 / streams requests' kernels and copies out still to come.
                let target = rng.below(streams);
                let per_stream = 2 * 16 / streams;
                let nth = 1 + rng.below(per_stream) as u64;
                sim::fail_task(&model.streams.streams()[target], nth, trap).unwrap();
                drop(held);
                let ended = rt.block_on(async {
                    tokio::time::timeout(HANG, futures::future::join_all(requests))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: hung"))
                });
                let mut failed = 0;
                for (i, ended) in ended.into_iter().enumerate() {
                    let (answer, data) = ended.unwrap();
                    match answer {
                        Ok(answer) => assert_eq!(answer, doubled(&data), "{what}: request {i}"),
                        Err(err) => {
                            assert_eq!(err.acl_code(), Some(trap), "{what}: request {i}: {err}");
                            failed += 1;
                        }
                    }
                }
                assert_eq!(
                    failed, 1,
                    "{what}: task {nth} of stream {target} failed one request"
                );
                rt.block_on(async {
                    for stream in model.streams.streams() {
                        let _ = stream.synchronize().await;
                    }
                });
                until_released(&what, || model.at_rest());
            }
        }
    }
}

/// Rules 5 and 7 for a Tokio runtime gone under its own context: a thread that still has a
/// dropped (or shut-down-in-the-background) runtime's handle entered (`Handle::enter`) submits
/// work on every strategy and awaits it with `futures::executor::block_on` while the device is
/// held: the `BlockingSync` wait and the paused clock's keeper that Tokio refuses to start
/// there leave the work to the reactor, and the memset, an event wait and a completion wait
/// all resolve once the device is let go. Runtimes of both flavours, paused or not.
#[test]
fn work_awaited_inside_a_gone_runtimes_context_completes() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        for flavour in [
            "current",
            "current paused",
            "multi",
            "multi in the background",
        ] {
            let what = format!("{strategy:?}, {flavour}");
            let rt = match flavour {
                "current" => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap(),
                "current paused" => paused_runtime(),
                _ => multi_thread(),
            };
            let handle = rt.handle().clone();
            if flavour == "multi in the background" {
                rt.shutdown_background();
            } else {
                drop(rt);
            }
            let stream = common::stream(&ctx, strategy);
            let held = sim::hold(&ctx.device()).unwrap();
            let letting_go = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                drop(held);
            });
            let _entered = handle.enter();
            watchdog(&what, || {
                let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 256).unwrap(), 3);
                let done = op.completion().clone();
                let event = Event::new(&ctx).unwrap();
                event.record(&stream).unwrap();
                let (buffer, waited, completed) = futures::executor::block_on(async {
                    let waited = event.wait();
                    let completed = done.wait();
                    tokio::join!(op, waited, completed)
                });
                let buffer = buffer.unwrap_or_else(|e| panic!("{what}: {}", e.error));
                let mut back = [0u8; 256];
                buffer.copy_to_host_blocking(&mut back).unwrap();
                assert!(back.iter().all(|&b| b == 3), "{what}");
                waited.unwrap();
                completed.unwrap();
            });
            letting_go.join().unwrap();
        }
    }
}

/// "`DevicePool::alloc()` is cancel-safe", raced rather than held: on a multi-thread runtime,
/// eight tasks each give up on up to 400 allocations of a runtime-pool `DevicePool` with room for
/// four blocks (over a two-stream `StreamPool`) after a random few microseconds, a yield or
/// at once — while the stream-ordered allocation is being submitted, queued or completing,
/// or while the request waits for room — and some tasks are aborted midway. Afterwards no
/// room is lost and none is double counted: nothing is allocated or awaited, nobody waits,
/// the pool's reserve never passed its capacity, and a reserve of all four blocks succeeds.
/// Every strategy, both backends.
#[test]
fn allocations_given_up_on_at_random_moments_lose_no_room() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let model = Model::new(Stream::builder(&ctx).strategy(strategy), 2, 4, backend);
            let rt = multi_thread();
            rt.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                let mut handles = Vec::new();
                for t in 0..8u64 {
                    let model = model.clone();
                    handles.push(tasks.spawn(async move {
                        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                        for _ in 0..400 {
                            let stream = model.streams.next();
                            // Trimmed now and then, so that allocations go to the device.
                            if rng.below(4) == 0 {
                                model.device.trim().unwrap();
                            }
                            let alloc = model.device.alloc::<f32>(&stream, N);
                            match rng.below(4) {
                                0 => {
                                    let micros = rng.below(200) as u64;
                                    let r =
                                        tokio::time::timeout(Duration::from_micros(micros), alloc)
                                            .await;
                                    if let Ok(block) = r {
                                        let block = block.unwrap();
                                        if rng.below(2) == 0 {
                                            drop(stream.memset(block, 1));
                                        }
                                    }
                                }
                                1 => {
                                    tokio::select! {
                                        block = alloc => drop(block.unwrap()),
                                        () = tokio::task::yield_now() => {}
                                    }
                                }
                                2 => {
                                    let mut alloc = Box::pin(alloc);
                                    let _ = polled_once(alloc.as_mut());
                                }
                                _ => {
                                    let block = alloc.await.unwrap();
                                    tokio::task::yield_now().await;
                                    drop(block);
                                }
                            }
                        }
                    }));
                }
                // Two of them aborted wherever they are.
                tokio::time::sleep(Duration::from_millis(5)).await;
                handles[0].abort();
                handles[5].abort();
                tokio::time::timeout(HANG, async {
                    while let Some(done) = tasks.join_next().await {
                        if let Err(err) = done {
                            assert!(err.is_cancelled(), "{err}");
                        }
                    }
                })
                .await
                .unwrap_or_else(|_| panic!("hung: {what}"));
                for stream in model.streams.streams() {
                    stream.synchronize().await.unwrap();
                }
            });
            until_released(&what, || model.at_rest());
            let stats = model.device.stats().cache;
            assert!(
                stats.peak_reserved <= 4 * BLOCK,
                "{what}: the capacity held: {stats:?}"
            );
            rt.block_on(async {
                let stream = model.streams.next();
                let reserved = tokio::time::timeout(HANG, model.device.reserve(&stream, 4, BLOCK))
                    .await
                    .unwrap_or_else(|_| panic!("hung: {what}"));
                assert_eq!(
                    reserved.unwrap(),
                    4 * BLOCK,
                    "{what}: every block's room is back"
                );
                let blocks: Vec<_> = (0..4)
                    .map(|_| model.device.try_alloc::<f32>(&stream, N).unwrap())
                    .collect();
                assert!(
                    blocks.iter().all(Option::is_some),
                    "{what}: {:?}",
                    model.device.stats()
                );
            });
            until_released(&what, || model.at_rest());
            drop(rt);
        }
    }
}

/// StreamPool's docs ("abort and stop are per stream and discard the other requests' work on
/// it"), rules 3 and 7: 12 requests over a one-stream `StreamPool`, their copies in queued on
/// the held device, the stream aborted by another task (the abort's own future dropped by a
/// `timeout` on half the rounds) and the device let go. Every request ends, served (its copy
/// ran before the discard) or with `Error::Aborted`; every block returns to its pool; and the
/// same stream serves a second wave whole. Every strategy.
#[test]
fn an_abort_of_a_shared_stream_ends_every_request_on_it_and_loses_no_block() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        for drop_the_abort in [false, true] {
            let what = format!("{strategy:?}, abort future dropped: {drop_the_abort}");
            let model = Model::new(
                Stream::builder(&ctx).strategy(strategy),
                1,
                12,
                DevicePoolBackend::RuntimePool,
            );
            let rt = multi_thread();
            let held = sim::hold(&ctx.device()).unwrap();
            let requests: Vec<_> = (0..12)
                .map(|i| {
                    let model = model.clone();
                    rt.spawn(async move {
                        let data = input(i);
                        (model.run(&data).await, data)
                    })
                })
                .collect();
            until(&format!("{what}: queued"), || {
                model.device.stats().cache.allocated >= 12 * BLOCK
            });
            let stream = model.streams.next();
            let aborted = rt.spawn(async move {
                let abort = stream.abort();
                if drop_the_abort {
                    let _ = tokio::time::timeout(Duration::from_millis(1), abort).await;
                    None
                } else {
                    Some(abort.await)
                }
            });
            // While the device is held only the abort's discard can end a request: once one
            // has ended, the abort has discarded the queued work.
            until(&format!("{what}: the abort ends a request"), || {
                requests.iter().any(|request| request.is_finished())
            });
            drop(held);
            let ended = rt.block_on(async {
                tokio::time::timeout(HANG, futures::future::join_all(requests))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: a request hung"))
            });
            let mut discarded = 0;
            for (i, ended) in ended.into_iter().enumerate() {
                match ended.unwrap() {
                    (Ok(answer), data) => assert_eq!(answer, doubled(&data), "{what}: {i}"),
                    (Err(Error::Aborted { .. }), _) => discarded += 1,
                    (Err(err), _) => panic!("{what}: request {i}: {err:?}"),
                }
            }
            let abort = rt.block_on(async {
                tokio::time::timeout(HANG, aborted)
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the abort hung"))
            });
            if let Some(abort) = abort.unwrap() {
                abort.unwrap();
            }
            assert!(discarded > 0, "{what}: the held copies were discarded");
            until_released(&what, || model.at_rest());
            rt.block_on(async {
                tokio::time::timeout(HANG, model.serves(6))
                    .await
                    .unwrap_or_else(|_| panic!("the second wave hung: {what}"));
            });
            until_released(&what, || model.at_rest());
            drop(rt);
        }
    }
}

/// docs/observability.md, "Tests in paused time": "a future dropped while pending (a
/// `select!` branch that lost) lets the clock move again within 100 ms". A loop whose
/// `Completion::wait` or `Event::wait` on the held device loses 200 `select!` turns in a row
/// (each turn a fresh wait, polled once and dropped, as a `select!` in a loop does), on a
/// paused runtime with two blocking threads, then a one-hour `sleep`: the paused clock moves
/// on to it once the waits are gone, within two seconds of real time (a slice of 100 ms per
/// queued keeper, two at a time, would be ten). Every strategy.
#[test]
fn waits_that_lose_every_select_turn_under_a_paused_clock_let_it_move_once_dropped() {
    let (_turn, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        for which in ["Completion::wait", "Event::wait"] {
            let what = format!("{which}, {strategy:?}");
            let stream = common::stream(&ctx, strategy);
            let held = sim::hold(&ctx.device()).unwrap();
            let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let done = op.completion().clone();
            let event = Event::new(&ctx).unwrap();
            event.record(&stream).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .max_blocking_threads(2)
                .build()
                .unwrap();
            let moved_after = watchdog(&what, || {
                rt.block_on(async {
                    for _ in 0..200 {
                        if which == "Completion::wait" {
                            tokio::select! {
                                biased;
                                r = done.wait() => panic!("resolved on a held device: {r:?}"),
                                () = std::future::ready(()) => {}
                            }
                        } else {
                            tokio::select! {
                                biased;
                                r = event.wait() => panic!("resolved on a held device: {r:?}"),
                                () = std::future::ready(()) => {}
                            }
                        }
                    }
                    let real = std::time::Instant::now();
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    real.elapsed()
                })
            });
            assert!(
                moved_after < Duration::from_secs(2),
                "{what}: the paused clock stood still {moved_after:?} after the last wait was \
                 dropped"
            );
            watchdog(&what, || drop(rt));
            drop(held);
            run(async { op.await.unwrap() });
        }
    }
}
