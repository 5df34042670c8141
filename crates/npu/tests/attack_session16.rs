//! Attacks of the sixteenth session, through the `npu` facade: composite futures (staged
//! copies, uploads, pool allocations, reservations, `timed`, `into_inner`, aborts) dropped
//! after every one of their polls, and the memory accounting after each.
//!
//! Each test is named for the promise it attacks and asserts it, under all three strategies
//! where a stream is involved. The simulator's hold gate and live counters are process-wide,
//! so every test takes the file's lock; every wait is bounded, so a hang fails its test with a
//! message instead of stalling the suite.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Poll, Wake, Waker};
use std::time::Instant;

use common::*;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::Completion;
use npu::{Error, Stream};

/// A waker that says it was woken and unparks the polling thread.
struct Flag {
    woken: AtomicBool,
    thread: std::thread::Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Polls `future` at most `limit` times, each poll after the previous one's wake-up, outside
/// any Tokio runtime. Returns how many polls it took and the output if it resolved. A future
/// that stays pending without ever waking its task fails the test: that is a lost wake-up.
fn drive<F: Future>(
    mut future: Pin<&mut F>,
    limit: usize,
    what: &str,
) -> (usize, Option<F::Output>) {
    let flag = Arc::new(Flag {
        woken: AtomicBool::new(true),
        thread: std::thread::current(),
    });
    let waker = Waker::from(flag.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    for polls in 0..limit {
        let deadline = Instant::now() + HANG;
        while !flag.woken.swap(false, Ordering::AcqRel) {
            assert!(
                Instant::now() < deadline,
                "{what}: pending after poll {polls} and never woken"
            );
            std::thread::park_timeout(HANG / 100);
        }
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return (polls + 1, Some(output));
        }
    }
    (limit, None)
}

/// Runs the future `make` builds to the end to count its polls, then once more for every
/// count below that, dropping it after that many polls; `settled` checks what must hold once
/// the device is done with whatever a dropped future left behind.
fn every_poll_point<F: Future>(
    what: &str,
    mut make: impl FnMut() -> F,
    mut settled: impl FnMut(usize),
) {
    let polls = {
        let future = std::pin::pin!(make());
        let (polls, output) = drive(future, usize::MAX, what);
        assert!(output.is_some());
        polls
    };
    settled(polls);
    for stop in 0..polls {
        {
            let future = std::pin::pin!(make());
            // The device's timing decides how many polls a run takes: one may resolve sooner.
            let (_, _output) = drive(future, stop, what);
        }
        settled(stop);
    }
}

/// Device memory, pinned memory and registrations in use in the simulator, once every
/// deferred release has run.
fn live(ctx: &Context) -> (u64, u64, u64) {
    sim::flush_releases();
    let host = sim::host_stats().unwrap();
    (
        live_allocations(ctx),
        host.pinned_allocations,
        host.registrations,
    )
}

/// What the simulator holds for device 0 before an attack: every earlier test and iteration
/// of this file releases everything it made, but some of it in the background (the runtime
/// pool's queued frees, a stream the reactor or a shut-down runtime's thread lets go of
/// later), so a count taken at once could still fall. Waits (bounded) until nothing is left:
/// no device or pinned memory, no registration, no event; the checks then compare with that.
fn clean_slate(ctx: &Context) -> (u64, u64, u64) {
    let deadline = Instant::now() + HANG;
    loop {
        let now = live(ctx);
        let events = sim::device_stats(&ctx.device()).unwrap().live_events;
        if now == (0, 0, 0) && events == 0 {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "an earlier attack left {now:?} and {events} events behind"
        );
        std::thread::yield_now();
    }
}

/// Waits for everything submitted to `s`, then for every deferred release.
/// A synchronisation submitted while an abort a dropped future started is still in progress
/// is refused with `Error::Aborted` (it would be discarded): it is tried again then.
fn quiesce(s: &Stream) {
    watchdog("synchronising the stream", || {
        loop {
            let done = drive(std::pin::pin!(s.synchronize()), usize::MAX, "synchronize");
            match done.1.unwrap() {
                Ok(()) => break,
                Err(failed) if failed.error.is_aborted() => std::thread::yield_now(),
                Err(failed) => panic!("{}", failed.error),
            }
        }
    });
    sim::flush_releases();
}

/// Rules 2 and 3 and the accounting after every failure path: the staged copies, `upload` and
/// `download` dropped after every poll (with two of them contending for a one-block pool, so
/// that one waits for the other's block) leave every pool block returned, no device or pinned
/// memory behind, and the pool able to serve its whole capacity again.
#[test]
fn staged_copies_dropped_after_every_poll_lose_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    const N: usize = 3000;
    for strategy in STRATEGIES {
        clean_slate(&ctx);
        let s = stream(&ctx, strategy);
        let pool = PinnedPool::builder(&ctx).capacity(16384).build().unwrap();
        let data: Vec<u32> = (0..N as u32).collect();
        let source = DeviceBuffer::from_host_blocking(&ctx, &data).unwrap();
        let source = Arc::new(source);
        let before = live(&ctx);
        let check = |what: &str, stop: usize| {
            quiesce(&s);
            let stats = pool.stats();
            assert_eq!(
                (stats.allocated, stats.awaiting_blocks, stats.waiters),
                (0, 0, 0),
                "{strategy:?} {what} dropped after {stop} polls: {stats:?}"
            );
            pool.trim();
            s.staging_pool().trim();
            assert_eq!(live(&ctx), before, "{strategy:?} {what} after {stop} polls");
            // The whole capacity can be had at once: no room was lost.
            let whole = pool.try_alloc::<u8>(16384).unwrap();
            assert!(
                whole.is_some(),
                "{strategy:?} {what} after {stop}: capacity lost"
            );
        };
        every_poll_point(
            "two staged copies through a one-block pool",
            || {
                let (s, pool, data, ctx) = (&s, &pool, &data, &ctx);
                async move {
                    let a = DeviceBuffer::<u32>::new(ctx, N).unwrap();
                    let b = DeviceBuffer::<u32>::new(ctx, N).unwrap();
                    let (a, b) = tokio::join!(
                        s.copy_from_slice_staged(pool, data, a),
                        s.copy_to_vec_staged(pool, b)
                    );
                    a.unwrap();
                    b.unwrap();
                }
            },
            |stop| check("two staged copies", stop),
        );
        every_poll_point(
            "an upload and a download",
            || {
                let (s, data, source) = (&s, &data, source.clone());
                async move {
                    let (up, down) = tokio::join!(s.upload(data), s.download(source));
                    assert_eq!(up.unwrap().len(), N);
                    assert_eq!(down.unwrap(), *data);
                }
            },
            |stop| check("an upload and a download", stop),
        );
    }
}

/// The device pool's awaited allocations, reservations and capacity waits dropped after every
/// poll, on both backends: no block is lost or counted twice, the runtime pool hands every
/// block back, and the whole capacity can be allocated again.
#[test]
fn device_pool_requests_dropped_after_every_poll_lose_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    const BLOCK: usize = 1 << 16;
    // The caching backend first: the runtime pool's queued frees run in the background after
    // its pool is gone, and a count of live allocations taken while they are pending would
    // move under the caching backend's checks.
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            clean_slate(&ctx);
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx)
                .capacity(2 * BLOCK)
                .backend(backend)
                .build()
                .unwrap();
            let before = live(&ctx);
            let check = |what: &str, stop: usize| {
                quiesce(&s);
                let stats = pool.stats().cache;
                assert_eq!(
                    (stats.allocated, stats.awaiting_blocks, stats.waiters),
                    (0, 0, 0),
                    "{backend:?} {strategy:?} {what} dropped after {stop} polls: {stats:?}"
                );
                pool.trim().unwrap();
                assert_eq!(
                    pool.stats().cache.reserved,
                    0,
                    "{backend:?} {strategy:?} {what} after {stop}"
                );
                if let Some(usage) = pool.stats().runtime {
                    assert_eq!(
                        usage.used, 0,
                        "{backend:?} {strategy:?} {what} after {stop}"
                    );
                }
                let whole = run(pool.reserve(&s, 2, BLOCK));
                assert_eq!(
                    whole.unwrap(),
                    2 * BLOCK,
                    "{backend:?} {strategy:?} {what} after {stop}: capacity lost"
                );
                pool.trim().unwrap();
                quiesce(&s);
                // The runtime pool keeps what it was given back until its queued frees have
                // run, which nothing here waits for: its own counter says nothing is in use.
                if backend == DevicePoolBackend::Caching {
                    assert_eq!(live(&ctx), before, "{strategy:?} {what} after {stop}");
                }
            };
            every_poll_point(
                "three allocations contending for two blocks",
                || {
                    let (s, pool) = (&s, &pool);
                    async move {
                        let first = pool.alloc::<u8>(s, BLOCK).await.unwrap();
                        let first = s.memset(first, 1).await.unwrap();
                        let (second, third) = tokio::join!(pool.alloc::<u8>(s, BLOCK), async {
                            // Waits for `first`, which returns once its memset is done.
                            let queued = pool.alloc::<u8>(s, BLOCK);
                            drop(s.memset(first, 2));
                            queued.await
                        });
                        let (second, third) = (second.unwrap(), third.unwrap());
                        assert_ne!(second.addr(), third.addr());
                    }
                },
                |stop| check("three allocations", stop),
            );
            every_poll_point(
                "a reservation",
                || pool.reserve(&s, 2, BLOCK),
                |stop| check("a reservation", stop),
            );
        }
    }
}

/// `timed`, `HostRegistration::into_inner` and `Stream::abort` dropped after every poll: the
/// events, the registration and the discarded work are all released once the device is done.
#[test]
fn timed_into_inner_and_abort_dropped_after_every_poll_lose_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        clean_slate(&ctx);
        let s = stream(&ctx, strategy);
        let before = live(&ctx);
        let check = |what: &str, stop: usize| {
            quiesce(&s);
            assert_eq!(live(&ctx), before, "{strategy:?} {what} after {stop} polls");
        };
        every_poll_point(
            "a timed memset",
            || {
                let (s, ctx) = (&s, &ctx);
                async move {
                    let buffer = DeviceBuffer::<u8>::new(ctx, 4096).unwrap();
                    let (buffer, _took) = s.timed(|s| s.memset(buffer, 3)).await.unwrap();
                    assert_eq!(buffer.len(), 4096);
                }
            },
            |stop| check("a timed memset", stop),
        );
        every_poll_point(
            "into_inner after a recorded use",
            || {
                let (s, ctx) = (&s, &ctx);
                async move {
                    let owned = npu::memory::PageAlignedBuffer::from_slice(&[7u8; 8192]).unwrap();
                    let reg = npu::memory::HostRegistration::new(
                        ctx,
                        owned,
                        npu::memory::RegisterFlags::PINNED,
                    )
                    .unwrap();
                    // A use recorded by hand: the one way into_inner has something to wait for.
                    let memset = s.memset(DeviceBuffer::<u8>::new(ctx, 8192).unwrap(), 1);
                    reg.record_use(memset.completion());
                    drop(memset);
                    let owned = reg.into_inner().await.unwrap();
                    assert_eq!(owned[0], 7);
                }
            },
            |stop| check("into_inner", stop),
        );
        every_poll_point(
            "an abort of queued memsets",
            || {
                let (s, ctx) = (&s, &ctx);
                async move {
                    let queued: Vec<_> = (0..3)
                        .map(|i| s.memset(DeviceBuffer::<u8>::new(ctx, 4096).unwrap(), i))
                        .collect();
                    s.abort().await.unwrap();
                    for op in queued {
                        match op.await {
                            Ok(_) => {}
                            Err(failed) => assert!(failed.error.is_aborted(), "{}", failed.error),
                        }
                    }
                }
            },
            |stop| check("an abort", stop),
        );
    }
}

/// Bad input gets a typed error naming the API the caller called, and the argument of theirs
/// at fault: the staged copies, `upload` and `download` are one call to the caller, whatever
/// they call inside (the pool's allocation, a device buffer's, the device copy). The buffers
/// come back, nothing is left allocated, and the stream goes on working.
#[test]
fn staged_copies_name_their_own_api_in_argument_errors() {
    let (_guard, ctx, ctx1) = exclusive(None);
    for strategy in STRATEGIES {
        clean_slate(&ctx);
        let s = stream(&ctx, strategy);
        let small = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let before = live(&ctx);
        let check = |err: &Error, api: &str, argument: &str| {
            assert_eq!(invalid(err), (api, argument), "{strategy:?}: {err}");
        };

        {
            // A pool too small for the staging block.
            let dst = DeviceBuffer::<u8>::new(&ctx, 8192).unwrap();
            let failed = run(s.copy_from_slice_staged(&small, &[1u8; 8192], dst)).unwrap_err();
            check(&failed.error, "Stream::copy_from_slice_staged", "pool");
            assert_eq!(failed.value.expect("dst handed back").len(), 8192);
            let src = DeviceBuffer::<u8>::new(&ctx, 8192).unwrap();
            let failed = run(s.copy_to_vec_staged(&small, src)).unwrap_err();
            check(&failed.error, "Stream::copy_to_vec_staged", "pool");
            assert_eq!(failed.value.expect("src handed back").len(), 8192);

            // Device memory of another device than the stream's.
            let elsewhere = DeviceBuffer::<u8>::new(&ctx1, 16).unwrap();
            let failed = run(s.copy_from_slice_staged(&small, &[1u8; 16], elsewhere)).unwrap_err();
            check(&failed.error, "Stream::copy_from_slice_staged", "dst");
            let elsewhere = failed.value.expect("dst handed back");
            let failed = run(s.copy_to_vec_staged(&small, elsewhere)).unwrap_err();
            check(&failed.error, "Stream::copy_to_vec_staged", "src");
            let elsewhere = failed.value.expect("src handed back");
            let failed = run(s.download(elsewhere)).unwrap_err();
            check(&failed.error, "Stream::download", "src");
            assert_eq!(failed.value.expect("src handed back").len(), 16);

            // An element type that cannot be allocated.
            let err = run(s.upload(&[(); 4])).unwrap_err();
            check(&err, "Stream::upload", "T");

            // What each already named itself keeps its name.
            let dst = DeviceBuffer::<u8>::new(&ctx, 8).unwrap();
            let failed = run(s.copy_from_slice_staged(&small, &[1u8; 4], dst)).unwrap_err();
            check(&failed.error, "Stream::copy_from_slice_staged", "dst");
            let err = run(s.upload::<u8>(&[])).unwrap_err();
            check(&err, "Stream::upload", "data");
        }

        let small_stats = small.stats();
        assert_eq!(small_stats.allocated, 0, "{strategy:?}: {small_stats:?}");
        let round_trip = run(async {
            let device = s.upload(&[3u16; 100]).await.unwrap();
            s.download(device).await.unwrap()
        });
        assert_eq!(round_trip, [3u16; 100], "{strategy:?}");
        quiesce(&s);
        s.staging_pool().trim();
        small.trim();
        assert_eq!(live(&ctx), before, "{strategy:?}");
    }
}

/// A panic in the closure `timed` runs (user code, after its start event was recorded on a
/// held device) unwinds without leaking the events or blocking; and a Tokio runtime shut down
/// in the background with timed work, staged copies and pool waits in flight under a held
/// device loses nothing once the device is released.
#[test]
fn a_panicking_timed_closure_and_a_background_shutdown_lose_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let before = clean_slate(&ctx);
        let s = stream(&ctx, strategy);
        let pool = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(s.timed(|_| -> npu::Op<()> { panic!("the closure panics") }))
        }));
        assert!(panicked.is_err(), "{strategy:?}");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (started, mut running) = tokio::sync::mpsc::unbounded_channel();
        for task in 0..3 {
            let (s, pool, ctx, started) = (s.clone(), pool.clone(), ctx.clone(), started.clone());
            runtime.spawn(async move {
                started.send(()).unwrap();
                match task {
                    0 => drop(
                        s.timed(|s| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1))
                            .await,
                    ),
                    1 => drop(
                        s.copy_to_vec_staged(&pool, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap())
                            .await,
                    ),
                    _ => drop(
                        s.copy_from_slice_staged(
                            &pool,
                            &[2u8; 4096],
                            DeviceBuffer::new(&ctx, 4096).unwrap(),
                        )
                        .await,
                    ),
                }
            });
        }
        run(async {
            for _ in 0..3 {
                running.recv().await.unwrap();
            }
        });
        watchdog("shutting the runtime down", || {
            runtime.shutdown_background()
        });
        held.release().unwrap();
        quiesce(&s);
        let stats = pool.stats();
        assert_eq!(
            (stats.allocated, stats.awaiting_blocks, stats.waiters),
            (0, 0, 0),
            "{strategy:?}: {stats:?}"
        );
        pool.trim();
        assert_eq!(live(&ctx), before, "{strategy:?}");
        // The stream's pooled completion events go with the last stream of the context, and
        // the stream with its last clone: the shut-down runtime's thread drops its tasks' clones
        // in the background, and the reactor lets go of the stream after it completed the
        // synchronisation above. Both happen without anything to wait on: the timing events
        // are destroyed if the slate comes back clean.
        drop(s);
        clean_slate(&ctx);
    }
}

/// A synchronisation submitted after an abort resolves only once every operation the abort
/// discarded has: completions keep submission order under every strategy, so the buffers of
/// discarded operations whose futures were dropped are released by the time it resolves. (The
/// callback thread failed discarded operations only at its next quiet moment, up to 50 ms
/// after the synchronisation behind them had resolved.)
#[test]
fn a_synchronize_after_an_abort_resolves_after_the_discarded_operations() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for round in 0..20 {
            let held = sim::hold(&ctx.device()).unwrap();
            let queued: Vec<_> = (0..3)
                .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), i))
                .collect();
            let discarded: Vec<Completion> =
                queued.iter().map(|op| op.completion().clone()).collect();
            drop(queued);
            let aborting = s.abort();
            held.release().unwrap();
            run(aborting).unwrap();
            run(s.synchronize()).unwrap();
            let pending = discarded.iter().filter(|c| !c.is_complete()).count();
            assert_eq!(
                pending, 0,
                "{strategy:?}, round {round}: discarded operations still pending after a \
                 later synchronize resolved"
            );
        }
    }
}
