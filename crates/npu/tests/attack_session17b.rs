//! Attacks of the seventeenth session's second helper, through the `npu` facade: the serving
//! path under load with cancellation (timeouts, `select!`, `JoinHandle::abort`, a runtime
//! shut down under held work) and the accounting afterwards; futures moved between runtimes
//! and executors; contexts, devices and modules dropped under in-flight work; notifies,
//! value words and cross-device event waits; views, splits and casts with parts in flight;
//! `Debug` of every public type at every stage.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::*;
use futures::executor::block_on;
use npu::Stream;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Strategy, StreamPool};

/// Waits (bounded) until the simulator's counters for `ctx`'s device are back to `baseline`
/// ([`within`] it).
fn back_to(ctx: &Context, baseline: LiveObjects, what: &str) {
    let deadline = Instant::now() + HANG;
    loop {
        let now = live_objects(ctx);
        if within(now, baseline) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now:?} live, {baseline:?} before"
        );
        std::thread::yield_now();
    }
}

/// A future that is ready after `n` polls, waking itself each time: a cancellation that lands
/// at a chosen poll of the future raced against it, whatever the device's timing.
struct AfterPolls(usize);

impl Future for AfterPolls {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The serve example's model: two kernels, a bias, a stream pool, a pinned and a device pool.
struct Model {
    streams: StreamPool,
    pool: PinnedPool,
    device_pool: DevicePool,
    scale: Function,
    add: Function,
    bias: Arc<DeviceBuffer<f32>>,
}

const N: usize = 1024;
const ALPHA: f32 = 2.0;

fn bias(i: usize) -> f32 {
    (i % 13) as f32
}

impl Model {
    fn load(ctx: &Context, strategy: Strategy, backend: DevicePoolBackend) -> Model {
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
        let block = PinnedPool::size_class(N * 4).unwrap();
        let streams = StreamPool::with_builder(Stream::builder(ctx).strategy(strategy), 3).unwrap();
        let pool = PinnedPool::builder(ctx)
            .capacity(block * 4)
            .build()
            .unwrap();
        let device_pool = DevicePool::builder(ctx)
            .capacity(block * 5)
            .backend(backend)
            .build()
            .unwrap();
        let host: Vec<f32> = (0..N).map(bias).collect();
        let device_bias = DeviceBuffer::from_host_blocking(ctx, &host).unwrap();
        Model {
            streams,
            pool,
            device_pool,
            scale: module.function("scale_f32").unwrap(),
            add: module.function("vector_add_f32").unwrap(),
            bias: Arc::new(device_bias),
        }
    }

    /// The serve example's request: copy in, scale, add the bias, copy out, all awaited.
    async fn run(&self, data: &[f32]) -> npu::Result<Vec<f32>> {
        let n = data.len();
        let stream = self.streams.next();
        let mut host = self.pool.alloc::<f32>(n).await?;
        host.copy_from_slice(data);
        let x = self.device_pool.alloc::<f32>(&stream, n).await?;
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x.
        let (x, ..) = unsafe { stream.launch(&self.scale, 4, (x, n as u64, ALPHA)) }.await?;
        let y = self.device_pool.alloc::<f32>(&stream, n).await?;
        // SAFETY: vector_add_f32(a, b, c, n) reads n of x and the bias, writes n of y.
        let (_, _, y, _) =
            unsafe { stream.launch(&self.add, 4, (x, self.bias.clone(), y, n as u64)) }.await?;
        let (_, host) = stream.copy_d2h(y, host).await?;
        Ok(host.to_vec())
    }

    fn expected(data: &[f32]) -> Vec<f32> {
        data.iter()
            .enumerate()
            .map(|(i, x)| x * ALPHA + bias(i))
            .collect()
    }

    /// Nothing is lent, reserved for a waiter or awaited in either pool.
    fn idle(&self) -> bool {
        let (p, d) = (self.pool.stats(), self.device_pool.stats().cache);
        p.allocated == 0
            && p.waiters == 0
            && p.awaiting_blocks == 0
            && d.allocated == 0
            && d.waiters == 0
            && d.awaiting_blocks == 0
    }
}

/// Rules 2, 3 and 5 and the accounting, on the serving path: on a four-worker runtime, 96
/// requests (pinned pool, device pool, copy in, two launches, copy out) are cancelled at
/// chosen polls (`select!`), by timeouts and by `JoinHandle::abort`; every request that
/// finishes reads back exactly what it computed. Then, with the device held, 24 more requests
/// are left in flight or queued on the pools and the runtime is shut down with
/// `shutdown_timeout(0)`, which must return without waiting for the device. Once the device
/// runs again, both pools are idle and serve their whole capacity, and after the model is
/// dropped the simulator holds exactly what it held before. Every strategy, both device-pool
/// backends.
#[test]
fn serving_under_cancellation_and_shutdown_loses_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for strategy in STRATEGIES {
        for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
            let what = format!("{strategy:?}, {backend:?}");
            let baseline = live_objects(&ctx);
            let model = Arc::new(Model::load(&ctx, strategy, backend));
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .unwrap();
            let finished = Arc::new(AtomicUsize::new(0));
            let plan: Vec<(u64, u64)> = (0..96).map(|_| (rng.next() % 4, rng.next())).collect();
            rt.block_on(async {
                let mut handles = Vec::new();
                let mut aborts = Vec::new();
                for (i, &(kind, r)) in plan.iter().enumerate() {
                    let model = model.clone();
                    let finished = finished.clone();
                    let data: Vec<f32> = (0..N).map(|j| (i * 7 + j) as f32).collect();
                    let handle = tokio::spawn(async move {
                        let expected = Model::expected(&data);
                        let out = match kind {
                            0 => Some(model.run(&data).await),
                            1 => tokio::time::timeout(
                                Duration::from_micros(r % 3000),
                                model.run(&data),
                            )
                            .await
                            .ok(),
                            _ => tokio::select! {
                                out = model.run(&data) => Some(out),
                                () = AfterPolls((r % 40) as usize) => None,
                            },
                        };
                        if let Some(out) = out {
                            assert_eq!(out.unwrap(), expected, "request {i}");
                            finished.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    if kind == 3 {
                        aborts.push((handle, (r >> 8) % 30));
                    } else {
                        handles.push(handle);
                    }
                }
                for (handle, polls) in aborts {
                    AfterPolls(polls as usize).await;
                    handle.abort();
                    match handle.await {
                        Ok(()) => {}
                        Err(e) => assert!(e.is_cancelled(), "{what}: {e}"),
                    }
                }
                for handle in handles {
                    handle.await.unwrap();
                }
            });
            assert!(
                finished.load(Ordering::Relaxed) > 0,
                "{what}: nothing finished"
            );
            until_released(&format!("{what}: pools idle after cancellations"), || {
                model.idle()
            });

            // Held: the requests stay in flight or queued on the pools.
            let held = sim::hold(&ctx.device()).unwrap();
            let submitted = Arc::new(AtomicUsize::new(0));
            rt.block_on(async {
                for i in 0..24 {
                    let model = model.clone();
                    let submitted = submitted.clone();
                    tokio::spawn(async move {
                        submitted.fetch_add(1, Ordering::Relaxed);
                        let data = vec![i as f32; N];
                        let _ = model.run(&data).await;
                        unreachable!("the device is held");
                    });
                }
                while submitted.load(Ordering::Relaxed) < 24 {
                    tokio::task::yield_now().await;
                }
                AfterPolls(50).await;
            });
            watchdog("shutting the runtime down under held work", || {
                rt.shutdown_timeout(Duration::ZERO)
            });
            held.release().unwrap();
            until_released(&format!("{what}: pools idle after the shutdown"), || {
                model.idle()
            });

            // Both pools serve their whole capacity again.
            let s = model.streams.next();
            let mut pinned = Vec::new();
            while let Some(b) = model.pool.try_alloc::<f32>(N).unwrap() {
                pinned.push(b);
            }
            assert_eq!(pinned.len(), 4, "{what}: pinned pool lost blocks");
            let blocks = run(async {
                let mut blocks = Vec::new();
                for _ in 0..5 {
                    blocks.push(model.device_pool.alloc::<f32>(&s, N).await.unwrap());
                }
                blocks
            });
            assert!(
                model.device_pool.try_alloc::<f32>(&s, N).unwrap().is_none(),
                "{what}: more than the capacity"
            );
            drop((pinned, blocks, s));
            let model = Arc::into_inner(model).expect("every task dropped its model");
            model.device_pool.trim().unwrap();
            model.pool.trim();
            drop(model);
            back_to(&ctx, baseline, &what);
        }
    }
}

/// Bad input is a typed error naming the API the caller called, not an inner one: the
/// constructors that build on another (`DeviceBuffer::from_host_blocking` on
/// `DeviceBuffer::new`, `PinnedBuffer::from_slice` on `PinnedBuffer::new`,
/// `PageAlignedBuffer::from_slice` on `PageAlignedBuffer::new`, `StreamPool::with_builder` on
/// `StreamBuilder::build`) refuse empty slices, zero-sized and over-aligned elements and
/// unwatchable stream flags in their own name.
#[test]
fn constructors_built_on_others_name_themselves_in_their_errors() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_objects(&ctx);

    let err = DeviceBuffer::<u32>::from_host_blocking(&ctx, &[]).unwrap_err();
    assert_eq!(invalid(&err).0, "DeviceBuffer::from_host_blocking");
    let err = DeviceBuffer::<()>::from_host_blocking(&ctx, &[(); 3]).unwrap_err();
    assert_eq!(invalid(&err).0, "DeviceBuffer::from_host_blocking");

    let err = PinnedBuffer::<u32>::from_slice(&ctx, &[]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");
    let err = PinnedBuffer::<()>::from_slice(&ctx, &[(); 3]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");
    #[derive(Clone, Copy)]
    #[repr(C, align(8192))]
    struct Aligned([u8; 8192]);
    // SAFETY: plain bytes, no padding (size equals alignment).
    unsafe impl bytemuck::Zeroable for Aligned {}
    // SAFETY: as above.
    unsafe impl bytemuck::Pod for Aligned {}
    let err = PinnedBuffer::<Aligned>::from_slice(&ctx, &[Aligned([0; 8192])]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");

    let err = npu::PageAlignedBuffer::<u32>::from_slice(&[]).unwrap_err();
    assert_eq!(invalid(&err).0, "PageAlignedBuffer::from_slice");

    let unwatchable = Stream::builder(&ctx).flags(npu::ffi::ACL_STREAM_PERSISTENT);
    let err = StreamPool::with_builder(unwatchable, 2).unwrap_err();
    assert_eq!(invalid(&err), ("StreamPool::with_builder", "builder"));

    back_to(&ctx, baseline, "after the refusals");
}

/// Wraps a future and raises `flag` after its first pending poll: the moment another thread
/// may let the device go, knowing the future has registered (and kept its clock, if any).
struct Flagged<F> {
    inner: Pin<Box<F>>,
    flag: Arc<std::sync::atomic::AtomicBool>,
}

impl<F: Future> Future for Flagged<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let polled = self.inner.as_mut().poll(cx);
        if polled.is_pending() {
            self.flag.store(true, Ordering::Release);
        }
        polled
    }
}

/// Releases `hold` on a thread of its own once `flag` is raised.
fn release_when(
    flag: &Arc<std::sync::atomic::AtomicBool>,
    hold: sim::Hold,
) -> std::thread::JoinHandle<()> {
    let flag = flag.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + HANG;
        while !flag.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "the future was never polled pending"
            );
            std::thread::yield_now();
        }
        hold.release().unwrap();
    })
}

/// Rules 1 and 7 and the paused-clock promise for futures that move: an `Op` first polled on
/// a multi-thread runtime (then dropped), then awaited under a paused clock inside a one-hour
/// timeout, resolves with its data instead of the timeout firing; an `Op` first polled on a
/// paused runtime that is then dropped finishes under a plain `block_on`, without
/// Tokio; an `Event::wait`, a runtime-pool `DevicePool::alloc` and a `PinnedPool::alloc`
/// waiting for a block another thread returns all resolve under `block_on` too (this file's own executor). Every
/// strategy; nothing is left allocated.
#[test]
fn futures_moved_between_runtimes_and_executors_resolve_with_their_data() {
    let (_guard, ctx, _) = exclusive(None);
    let device = ctx.device();
    for strategy in STRATEGIES {
        let baseline = live_objects(&ctx);
        let s = stream(&ctx, strategy);
        let data: Vec<u32> = (0..4096).collect();

        // Multi-thread runtime first, then a paused one under a one-hour timer.
        let held = sim::hold(&device).unwrap();
        let src = PinnedBuffer::from_slice(&ctx, &data).unwrap();
        let mut op = Box::pin(s.copy_h2d(src, DeviceBuffer::<u32>::new(&ctx, 4096).unwrap()));
        let mt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        mt.block_on(std::future::poll_fn(|cx| {
            assert!(op.as_mut().poll(cx).is_pending(), "the device is held");
            Poll::Ready(())
        }));
        watchdog("dropping a multi-thread runtime with an op polled", || {
            drop(mt)
        });
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let releaser = release_when(&flag, held);
        let rt = paused_runtime();
        let out = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(3600), Flagged { inner: op, flag }).await
        });
        releaser.join().unwrap();
        let (_, dst) = out
            .expect("a one-hour timer overtook the device under a paused clock")
            .unwrap();
        assert_eq!(dst.to_vec_blocking().unwrap(), data, "{strategy:?}");
        drop(rt);

        // A paused runtime first, dropped, then no Tokio at all.
        let held = sim::hold(&device).unwrap();
        let mut op = Box::pin(s.copy_d2h(dst, PinnedBuffer::<u32>::new(&ctx, 4096).unwrap()));
        let rt = paused_runtime();
        rt.block_on(std::future::poll_fn(|cx| {
            assert!(op.as_mut().poll(cx).is_pending(), "the device is held");
            Poll::Ready(())
        }));
        watchdog("dropping a paused runtime with an op polled", || drop(rt));
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let releaser = release_when(&flag, held);
        let (dst, host) = watchdog("an op finished under block_on", || {
            block_on(Flagged { inner: op, flag }).unwrap()
        });
        releaser.join().unwrap();
        assert_eq!(&host[..], &data[..]);

        // An event wait, a stream-ordered pool allocation and a pinned-pool wait, no Tokio.
        let held = sim::hold(&device).unwrap();
        let event = Event::new(&ctx).unwrap();
        let memset = s.memset(dst, 0);
        event.record(&s).unwrap();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let releaser = release_when(&flag, held);
        watchdog("an event wait under block_on", || {
            block_on(Flagged {
                inner: Box::pin(event.wait()),
                flag,
            })
        })
        .unwrap();
        releaser.join().unwrap();
        assert!(
            memset.is_complete(),
            "the event resolved before the work behind it"
        );
        let dst = block_on(memset).unwrap();
        assert_eq!(dst.to_vec_blocking().unwrap(), vec![0; 4096]);

        let pool = DevicePool::builder(&ctx)
            .backend(DevicePoolBackend::RuntimePool)
            .build()
            .unwrap();
        let block = watchdog("a runtime-pool allocation under block_on", || {
            block_on(pool.alloc::<u32>(&s, 1024))
        })
        .unwrap();
        assert_eq!(block.len(), 1024);

        let pinned = PinnedPool::builder(&ctx)
            .capacity(PinnedPool::size_class(4096).unwrap())
            .build()
            .unwrap();
        let first = pinned.try_alloc::<u8>(4096).unwrap().unwrap();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let giver = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                drop(first);
            })
        };
        let second = watchdog("a pinned-pool wait under block_on", || {
            block_on(Flagged {
                inner: Box::pin(pinned.alloc::<u8>(4096)),
                flag,
            })
        })
        .unwrap();
        giver.join().unwrap();
        drop((second, block, dst, host, event, s));
        drop((pool, pinned));
        back_to(&ctx, baseline, &format!("{strategy:?}"));
    }
}

/// Rules 2 and 3 for the objects a launch depends on: with device 0 held, kernels of a module
/// loaded in an explicit context are launched on three streams of that context, with an event
/// recorded behind them, and then every other handle the caller has is dropped: the first
/// launch's future, the function, the module, the streams, the event, the context and the
/// device. Nothing may be freed under the queued work: once the device runs, the two launches
/// still awaited hand back the kernels' results, and the simulator then holds exactly what it
/// held before. Every strategy.
#[test]
fn an_explicit_context_and_its_module_outlive_work_queued_in_them() {
    let (_guard, ctx, _) = exclusive(None);
    let device = ctx.device();
    for strategy in STRATEGIES {
        let baseline = live_objects(&ctx);
        let n = 2048usize;
        let explicit = Device::open(0).unwrap().create_context().unwrap();
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(&explicit, sim::kernel::LIBRARY_PATH) }.unwrap();
        let scale = module.function("scale_f32").unwrap();
        let held = sim::hold(&device).unwrap();
        let streams: Vec<Stream> = (0..3).map(|_| stream(&explicit, strategy)).collect();
        let mut launches: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let x =
                    DeviceBuffer::from_host_blocking(&explicit, &vec![(i + 1) as f32; n]).unwrap();
                // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x.
                unsafe { s.launch(&scale, 4, (x, n as u64, 3.0f32)) }
            })
            .collect();
        let event = Event::new(&explicit).unwrap();
        event.record(&streams[2]).unwrap();
        drop(launches.remove(0));
        drop((scale, module, streams, event, explicit));
        held.release().unwrap();
        for (i, launch) in launches.into_iter().enumerate() {
            let (x, ..) = run(launch).unwrap();
            let expected = vec![(i + 2) as f32 * 3.0; n];
            assert_eq!(x.to_vec_blocking().unwrap(), expected, "{strategy:?}");
        }
        back_to(&ctx, baseline, &format!("{strategy:?}"));
    }
}

/// Rules 1-3 for split parts shared with value operations while a sibling part is in flight,
/// and `Debug`/`Display` never panicking: a buffer of 16 words is split into a part a copy
/// writes (held on the device), a one-word part made a shared `ValueWord` that one stream
/// waits on and another writes behind the copy, and a rest. Joins of parts that are not
/// adjacent are refused with both parts handed back. While everything is in flight, after a
/// task fault, and after completion, every value involved is formatted. Once the device runs,
/// the parts rejoin into the whole buffer, which holds the copy's data, the word's value and
/// the rest's zeros. Every strategy.
#[test]
fn value_words_of_split_parts_beside_parts_in_flight() {
    use npu::memory::Memory;
    use npu::stream::{ValueCondition, ValueWord};
    let (_guard, ctx, _) = exclusive(None);
    let device = ctx.device();
    for strategy in STRATEGIES {
        let baseline = live_objects(&ctx);
        let (s1, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let whole = DeviceBuffer::<u64>::from_host_blocking(&ctx, &[0; 16]).unwrap();
        let (a, b) = whole.into_halves(8).unwrap();
        let (w, rest) = b.into_halves(1).unwrap();
        let (a, rest) = match a.join(rest) {
            Ok(_) => panic!("joined parts that are not adjacent"),
            Err(refused) => {
                assert_eq!(invalid(&refused.error), ("Split::join", "other"));
                let _ = format!("{refused:?} {refused}");
                refused.value.expect("both parts handed back")
            }
        };
        let held = sim::hold(&device).unwrap();
        let copy = s1.copy_h2d(PinnedBuffer::from_slice(&ctx, &[7u64; 8]).unwrap(), a);
        let word = Arc::new(ValueWord::from_memory(w).unwrap());
        let waited = s2.wait_value(word.clone(), 5, ValueCondition::Equal);
        let after = s2.memset(rest, 0);
        let written = s1.write_value(word.clone(), 5);
        let pool = DevicePool::new(&ctx).unwrap();
        let pinned = PinnedPool::new(&ctx);
        let notify = npu::stream::Notify::new(&ctx).unwrap();
        let shown = format!(
            "{copy:?} {word:?} {waited:?} {after:?} {written:?} {pool:?} {pinned:?} {notify:?} \
             {s1:?} {ctx:?} {device:?} {:?} {:?}",
            copy.completion(),
            npu::reactor_stats()
        );
        assert!(shown.contains("Op"), "{shown}");
        held.release().unwrap();
        let (_, a) = run(copy).unwrap();
        run(written).unwrap();
        run(waited).unwrap();
        let rest = run(after).unwrap();
        let w = Arc::into_inner(word)
            .expect("every operation gave its clone back")
            .into_inner();
        let whole = a.join(w).unwrap().join(rest).unwrap().into_whole().unwrap();
        let mut expected = vec![7u64; 8];
        expected.push(5);
        expected.extend([0; 7]);
        assert_eq!(whole.to_vec_blocking().unwrap(), expected, "{strategy:?}");
        assert_eq!(whole.len(), 16);

        // A faulted operation, formatted before and after it resolves.
        sim::fail_task(&s1, 1, npu::AclCode(507015)).unwrap();
        let faulted = s1.memset(whole, 1);
        let _ = format!("{faulted:?}");
        let failed = run(faulted).unwrap_err();
        let shown = format!("{failed:?} {failed} {}", failed.error);
        assert!(shown.contains("507015"), "{shown}");
        let _ = run(s1.synchronize());
        drop((failed, pool, pinned, notify, s1, s2));
        back_to(&ctx, baseline, &format!("{strategy:?}"));
    }
}

/// Rule 5 for the last handle of a device's primary context: with device 1 held, work is
/// queued on a stream of it (a memset, a copy, a record), the stream is stopped, and every
/// handle of the device is dropped, so that the context is released (`aclrtResetDevice`,
/// which tears the context down) by whichever thread lets go of its last handle once the
/// stopped work is failed. While device 1 stays held, the reaper must still run releases of
/// device 0 and device 0's work must complete: no shared thread waits for the held device.
/// Every strategy.
#[test]
fn the_last_handle_of_a_held_device_goes_without_waiting_for_it() {
    let (_guard, ctx0, ctx1) = exclusive(None);
    let dev1 = ctx1.device();
    drop(ctx1);
    for strategy in STRATEGIES {
        let baseline = live_objects(&ctx0);
        let s0 = stream(&ctx0, strategy);
        let held = sim::hold(&dev1).unwrap();
        {
            let ctx1 = Device::open(1).unwrap().primary_context().clone();
            let s1 = stream(&ctx1, strategy);
            let memset = s1.memset(DeviceBuffer::<u8>::new(&ctx1, 4096).unwrap(), 1);
            let copy = s1.copy_h2d(
                PinnedBuffer::from_slice(&ctx1, &[3u8; 4096]).unwrap(),
                DeviceBuffer::<u8>::new(&ctx1, 4096).unwrap(),
            );
            let event = Event::new(&ctx1).unwrap();
            event.record(&s1).unwrap();
            watchdog("stopping a held stream", || s1.stop()).unwrap();
            watchdog("dropping every handle of the held device", || {
                drop((memset, copy, event, s1, ctx1))
            });
        }
        // Device 0 works and its releases run while device 1 stays held.
        let filled = watchdog("device 0's memset while device 1 is held", || {
            run(s0.memset(DeviceBuffer::<u8>::new(&ctx0, 64).unwrap(), 9)).unwrap()
        });
        assert_eq!(filled.to_vec_blocking().unwrap(), [9; 64]);
        drop(filled);
        let dropped = s0.memset(DeviceBuffer::<u8>::new(&ctx0, 64).unwrap(), 1);
        watchdog("device 0's synchronize while device 1 is held", || {
            run(s0.synchronize()).unwrap()
        });
        drop(dropped);
        watchdog("device 0's releases while device 1 is held", || {
            until_released(&format!("{strategy:?}: device 0 releases"), || {
                live_allocations(&ctx0) <= baseline[0]
            })
        });
        held.release().unwrap();
        // Once device 1 runs again, its stopped work's pinned buffer is released too.
        drop(s0);
        back_to(&ctx0, baseline, &format!("{strategy:?}: after the hold"));
    }
    drop(dev1);
    sim::flush_releases();
}
