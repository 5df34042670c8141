//! Attacks of the thirty-fourth session through the `npu` facade: futures awaited by an
//! executor that is not Tokio (`futures::executor::block_on`), futures moved from a runtime
//! shut down under them to a paused one, a thousand operations per stream polled by hand
//! (`tokio_test::task::spawn`) and dropped in reverse order, thousands of waits on one
//! completion in `FuturesUnordered` sets dropped while pending, registered host memory handed
//! to copies whose submission fails (another device's memory, a stopped stream, a lost
//! device), and pitched copies at their edges (empty shapes, views ending where their
//! allocation does, pitches that overflow).
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `watchdog`), so a hang fails its test. Devices 2 and 3 are each lost for the rest of the
//! process by one test; device 4 by a fork test, in a process of its own.

mod common;

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use common::*;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use npu::Stream;
use npu::memory::{DevicePoolBackend, HostRegistration, Memory, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::stream::Copy2d;
use npu::{Error, sim};

/// The memory of each of the five simulated devices.
const MEMORY: u64 = 64 << 20;

/// How many operations per stream the hand-polled attack queues.
const MANY: usize = 1000;

/// How many waits on one completion each `FuturesUnordered` set holds.
const WAITERS: usize = 2000;

/// The device lock and device 0's primary context, of this file's five-device simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(5, MEMORY)
}

/// A zeroed device buffer of `n` bytes.
fn dev(ctx: &Context, n: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, n).unwrap()
}

/// A device buffer of `n` bytes, each `byte`.
fn dev_of(ctx: &Context, n: usize, byte: u8) -> DeviceBuffer<u8> {
    DeviceBuffer::from_host_blocking(ctx, &vec![byte; n]).unwrap()
}

/// A pinned buffer of `n` bytes, each `byte`.
fn pinned(ctx: &Context, n: usize, byte: u8) -> PinnedBuffer<u8> {
    PinnedBuffer::from_slice(ctx, &vec![byte; n]).unwrap()
}

/// Polls `future` once in the current task and tells `polled` whether that poll left it
/// pending, then awaits it to the end.
async fn after_a_first_poll<F: Future>(future: F, polled: mpsc::Sender<bool>) -> F::Output {
    let mut future = pin!(future);
    match poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await {
        Poll::Ready(output) => {
            polled.send(false).unwrap();
            output
        }
        Poll::Pending => {
            polled.send(true).unwrap();
            future.await
        }
    }
}

/// Rules 5 and 7 and "every future completes" under an executor that is not Tokio: a memset,
/// a `Completion::wait` of it, an `Event::wait` of a record behind it and a `synchronize`,
/// joined and driven by `futures::executor::block_on` on a plain thread (no Tokio runtime
/// anywhere on it, so a `BlockingSync` wait has no blocking pool to run on), first polled
/// while the device is held, then the device released; every strategy.
///
/// Outcome: held. Every future resolves, the memset writes its bytes.
#[test]
fn futures_driven_by_a_plain_executor_outside_tokio_complete_on_every_strategy() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let held = sim::hold(&ctx.device()).unwrap();
        let s = stream(&ctx, strategy);
        let event = Event::new(&ctx).unwrap();
        let memset = s.memset(dev(&ctx, 64), 7);
        let done = memset.completion().wait();
        event.record(&s).unwrap();
        let (recorded, synchronized) = (event.wait(), s.synchronize());
        let (polled, first) = mpsc::channel();
        let executor = std::thread::spawn(move || {
            let all = async { futures::future::join4(memset, done, recorded, synchronized).await };
            futures::executor::block_on(after_a_first_poll(all, polled))
        });
        assert!(first.recv().unwrap(), "{strategy:?}: pending while held");
        held.release().unwrap();
        let (memset, done, recorded, synchronized) =
            watchdog("the plain executor's futures", || executor.join().unwrap());
        let memset = memset.unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(memset.to_vec_blocking().unwrap(), [7; 64], "{strategy:?}");
        done.unwrap();
        recorded.unwrap();
        synchronized.unwrap();
    }
}

/// Rules 5 and 7 for futures that outlive the runtime that first polled them: a memset, a
/// `Completion::wait` of it, an `Event::wait` behind it and a `synchronize`, each polled once
/// on a multi-thread runtime (a `BlockingSync` wait queued on its blocking pool) while the
/// device is held; that runtime shut down in the background; the same futures then polled on
/// a current-thread runtime whose clock is paused, the device released from inside it, and
/// awaited there (a one-hour timeout: the paused clock must not jump past work the keepers
/// hold it for); every strategy.
///
/// Outcome: held. Everything resolves on the second runtime before the paused clock moves.
#[test]
fn futures_moved_from_a_runtime_shut_down_under_them_to_a_paused_one_complete() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let held = sim::hold(&ctx.device()).unwrap();
        let s = stream(&ctx, strategy);
        let event = Event::new(&ctx).unwrap();
        let mut memset = Box::pin(s.memset(dev(&ctx, 64), 9));
        let mut done = Box::pin(memset.completion().wait());
        event.record(&s).unwrap();
        let mut recorded = Box::pin(event.wait());
        let mut synchronized = Box::pin(s.synchronize());
        let first = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        first.block_on(async {
            assert!(poll_once(memset.as_mut()).await, "{strategy:?}");
            assert!(poll_once(done.as_mut()).await, "{strategy:?}");
            assert!(poll_once(recorded.as_mut()).await, "{strategy:?}");
            assert!(poll_once(synchronized.as_mut()).await, "{strategy:?}");
        });
        first.shutdown_background();
        let (memset, done, recorded, synchronized) = paused_runtime().block_on(async {
            assert!(poll_once(memset.as_mut()).await, "{strategy:?}");
            held.release().unwrap();
            let start = tokio::time::Instant::now();
            let all = tokio::time::timeout(std::time::Duration::from_secs(3600), async {
                futures::future::join4(memset, done, recorded, synchronized).await
            })
            .await
            .unwrap_or_else(|_| panic!("{strategy:?}: the paused clock ran past the work"));
            assert_eq!(start.elapsed(), std::time::Duration::ZERO, "{strategy:?}");
            all
        });
        let memset = memset.unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(memset.to_vec_blocking().unwrap(), [9; 64], "{strategy:?}");
        done.unwrap();
        recorded.unwrap();
        synchronized.unwrap();
    }
}

/// Polls `future` once in the current task: whether it was left pending.
async fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> bool {
    let mut future = future;
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_pending())).await
}

/// Rules 2, 5 and 7 at volume, polled by hand: a thousand memsets per stream, each in a task
/// of its own (`tokio_test::task::spawn`) polled once while the device is held; every third
/// dropped, from the last to the first; the device released. Then `WAITERS` waits on the last
/// memset's completion in each of two `FuturesUnordered` sets, both polled once, one set
/// dropped while pending, the other awaited; every strategy.
///
/// Outcome: held. Every kept task is woken and resolves with its own bytes, every waiter of
/// the kept set resolves, and the dropped memsets' buffers are released (the device's
/// allocations back to the baseline).
#[test]
fn a_thousand_hand_polled_operations_dropped_in_reverse_and_thousands_of_waiters_settle() {
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let baseline = live_allocations(&ctx);
        let held = sim::hold(&ctx.device()).unwrap();
        let s = stream(&ctx, strategy);
        let mut completions = Vec::new();
        let mut tasks: Vec<_> = (0..MANY)
            .map(|i| {
                let op = s.memset(dev(&ctx, 16), i as u8);
                completions.push(op.completion().clone());
                tokio_test::task::spawn(op)
            })
            .collect();
        for task in &mut tasks {
            assert!(task.poll().is_pending(), "{strategy:?}: pending while held");
        }
        let mut kept = Vec::new();
        while let Some(task) = tasks.pop() {
            let i = tasks.len();
            if i % 3 == 0 {
                drop(task);
            } else {
                kept.push((i, task));
            }
        }
        let last = completions.last().unwrap().clone();
        let mut dropped_set: FuturesUnordered<_> = (0..WAITERS).map(|_| last.wait()).collect();
        let mut awaited_set: FuturesUnordered<_> = (0..WAITERS).map(|_| last.wait()).collect();
        run(async {
            assert!(poll_once(Pin::new(&mut dropped_set.next())).await);
            assert!(poll_once(Pin::new(&mut awaited_set.next())).await);
        });
        drop(dropped_set);
        held.release().unwrap();
        all_completed(&completions);
        let resolved = run(async {
            let mut resolved = 0;
            while let Some(result) = awaited_set.next().await {
                result.unwrap();
                resolved += 1;
            }
            resolved
        });
        assert_eq!(resolved, WAITERS, "{strategy:?}");
        for (i, mut task) in kept {
            assert!(task.is_woken(), "{strategy:?}: task {i} was woken");
            let Poll::Ready(result) = task.poll() else {
                panic!("{strategy:?}: task {i} still pending after its completion");
            };
            let bytes = result.unwrap().to_vec_blocking().unwrap();
            assert_eq!(bytes, [i as u8; 16], "{strategy:?}: task {i}");
        }
        drop(s);
        until_released("the dropped memsets' buffers", || {
            live_allocations(&ctx) <= baseline
        });
    }
}

/// Page-aligned host memory of `n` bytes, each `byte`, registered (pinned) in `ctx`.
fn registered(ctx: &Context, n: usize, byte: u8) -> HostRegistration<PageAlignedBuffer<u8>> {
    let pages = PageAlignedBuffer::from_slice(&vec![byte; n]).unwrap();
    HostRegistration::new(ctx, pages, RegisterFlags::PINNED).unwrap()
}

/// Whether `err` is an `InvalidArgument` of `api` naming `argument`.
fn refused_by(err: &Error, api: &str, argument: &str) -> bool {
    matches!(err, Error::InvalidArgument { .. }) && invalid(err) == (api, argument)
}

/// A registration handed to a copy whose submission fails comes back intact, and then
/// unregisters (rule 3: a failed operation's memory is free to release), through three
/// failures: a device buffer of another device (refused by npu-rs before the runtime), a
/// stream a `FailureMode::Stop` fault stopped (refused by the runtime), and a device lost
/// (device 2) with the registration made before the loss; both directions; every strategy.
///
/// Outcome: held. Each refusal is typed (npu-rs's names `Stream::copy_h2d`/`copy_d2h` and the
/// argument; the runtime's carries its code), hands back the registration with its bytes
/// unchanged, and `HostRegistration::into_inner` then returns the buffer (on the lost device
/// the unregistration fails, and the buffer is kept rather than freed, as documented).
#[test]
fn registered_memory_handed_to_copies_whose_submission_fails_comes_back_intact() {
    let (_guard, ctx) = devices();
    let other = Device::open(1).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        // Another device's memory: npu-rs refuses before the runtime sees anything.
        let failed = run(s.copy_h2d(registered(&ctx, 4096, 1), dev(&other, 4096))).unwrap_err();
        assert!(
            refused_by(&failed.error, "Stream::copy_h2d", "dst"),
            "{failed}"
        );
        let (host, _) = failed.value.expect("the buffers come back");
        assert!(host.iter().all(|&b| b == 1));
        let failed = run(s.copy_d2h(dev(&other, 4096), registered(&ctx, 4096, 2))).unwrap_err();
        assert!(
            refused_by(&failed.error, "Stream::copy_d2h", "src"),
            "{failed}"
        );
        let (_, host) = failed.value.expect("the buffers come back");
        assert!(host.iter().all(|&b| b == 2));
        let back = run(host.into_inner()).unwrap();
        assert!(back.iter().all(|&b| b == 2), "{strategy:?}");

        // A stopped stream (of a context of its own: the stop is the context's): the runtime
        // refuses the submission.
        let own = ctx.device().create_context().unwrap();
        let s = stream(&own, strategy);
        s.set_failure_mode(npu::FailureMode::Stop).unwrap();
        sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
        assert!(run(s.memset(dev(&own, 16), 1)).is_err(), "{strategy:?}");
        let failed = run(s.copy_h2d(registered(&own, 4096, 3), dev(&own, 4096))).unwrap_err();
        assert!(failed.error.acl_code().is_some(), "{strategy:?}: {failed}");
        let (host, _) = failed
            .value
            .expect("a refused submission hands its buffers back");
        assert!(host.iter().all(|&b| b == 3));
        let back = run(host.into_inner()).unwrap();
        assert!(back.iter().all(|&b| b == 3), "{strategy:?}");
    }
    // A lost device: every strategy's stream, made before the loss, with registrations made
    // before it too.
    let lost = Device::open(2).unwrap();
    let lost_ctx = lost.primary_context().clone();
    let baseline = live_objects(&lost_ctx)[3];
    let streams = STRATEGIES.map(|strategy| stream(&lost_ctx, strategy));
    let hosts: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(i, _)| registered(&lost_ctx, 4096, 10 + i as u8))
        .collect();
    let devs: Vec<_> = streams.iter().map(|_| dev(&lost_ctx, 4096)).collect();
    sim::lose(&lost).unwrap();
    for ((i, s), (host, device)) in streams.iter().enumerate().zip(hosts.into_iter().zip(devs)) {
        let failed = run(s.copy_h2d(host, device)).unwrap_err();
        assert!(failed.error.is_device_lost(), "{failed}");
        let (host, _) = failed
            .value
            .expect("a refused submission hands its buffers back");
        assert!(host.iter().all(|&b| b == 10 + i as u8));
        // Unregistering on a lost device fails: the buffer is kept, not freed under the
        // runtime's mapping, and the error is typed.
        let kept = run(host.into_inner());
        if let Err(err) = kept {
            assert!(err.acl_code().is_some(), "{err}");
        }
    }
    drop(streams);
    until_released("the lost device's streams", || {
        live_objects(&lost_ctx)[3] <= baseline
    });
}

/// Typed errors or exact copies for pitched copies at their edges, in every direction: empty
/// shapes (no rows; rows of no elements, with and without a pitch) between empty views that
/// end where their allocation does, one row ending exactly at a view's end, and pitches whose
/// extent or byte count overflows; every strategy.
///
/// Outcome: held. Each copy resolves: an empty one with its buffers, unchanged, or a typed
/// error handing them back; a refusal of npu-rs names the method and the argument; the bytes
/// around each copy are untouched and a one-row copy ending at its view's end writes exactly
/// that row.
#[test]
fn pitched_copies_at_their_edges_are_exact_or_refused_by_name() {
    let (_guard, ctx) = devices();
    let empty = |width, height, pitch| Copy2d {
        width,
        height,
        src_pitch: pitch,
        dst_pitch: pitch,
    };
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for shape in [empty(0, 0, 0), empty(5, 0, 8), empty(0, 3, 0)] {
            let what = format!("{strategy:?} {shape:?}");
            let src = pinned(&ctx, 64, 1).view(64..).unwrap();
            let dst = dev_of(&ctx, 64, 2).view(64..).unwrap();
            let (src, dst) = edge_outcome(run(s.copy_2d_h2d(src, dst, shape)), &what);
            assert!(src.into_inner().iter().all(|&b| b == 1), "{what}");
            assert_eq!(
                dst.into_inner().to_vec_blocking().unwrap(),
                [2; 64],
                "{what}"
            );
            let src = dev_of(&ctx, 64, 3).view(64..).unwrap();
            let dst = pinned(&ctx, 64, 4).view(64..).unwrap();
            let (src, dst) = edge_outcome(run(s.copy_2d_d2h(src, dst, shape)), &what);
            assert_eq!(
                src.into_inner().to_vec_blocking().unwrap(),
                [3; 64],
                "{what}"
            );
            assert!(dst.into_inner().iter().all(|&b| b == 4), "{what}");
            let src = dev_of(&ctx, 64, 5).view(64..).unwrap();
            let dst = dev_of(&ctx, 64, 6).view(64..).unwrap();
            let (_, dst) = edge_outcome(run(s.copy_2d_d2d(src, dst, shape)), &what);
            assert_eq!(
                dst.into_inner().to_vec_blocking().unwrap(),
                [6; 64],
                "{what}"
            );
        }
        // One row ending exactly where the views, and their allocations, end; a pitch far
        // past both, which a single row never steps over.
        let row = Copy2d {
            width: 8,
            height: 1,
            src_pitch: usize::MAX / 2,
            dst_pitch: 8,
        };
        let src = dev_of(&ctx, 64, 7).view(56..).unwrap();
        let dst = pinned(&ctx, 64, 0).view(56..).unwrap();
        let what = format!("{strategy:?} {row:?}");
        match run(s.copy_2d_d2h(src, dst, row)) {
            Ok((_, dst)) => {
                let dst = dst.into_inner();
                assert!(dst[..56].iter().all(|&b| b == 0), "{what}");
                assert!(dst[56..].iter().all(|&b| b == 7), "{what}");
            }
            Err(failed) => {
                assert!(failed.value.is_some(), "{what}: {failed}");
                assert_eq!(invalid(&failed.error).0, "Stream::copy_2d_d2h", "{what}");
            }
        }
        // Two rows a pitch of half the address space apart overflow: refused by name.
        for (pitch, argument) in [(usize::MAX / 2 + 1, "src"), (usize::MAX, "src")] {
            let tall = Copy2d {
                width: 1,
                height: 2,
                src_pitch: pitch,
                dst_pitch: 1,
            };
            let src = dev(&ctx, 64).view(60..).unwrap().cast::<u32>().unwrap();
            let dst = pinned(&ctx, 64, 0).cast::<u32>().unwrap();
            let failed = run(s.copy_2d_d2h(src, dst, tall)).unwrap_err();
            assert_eq!(
                invalid(&failed.error),
                ("Stream::copy_2d_d2h", argument),
                "{strategy:?} {tall:?}"
            );
            assert!(failed.value.is_some(), "{strategy:?} {tall:?}");
        }
    }
}

/// An empty pitched copy's outcome: its buffers, whether it ran (and so touched nothing) or
/// was refused with a typed error that hands them back.
fn edge_outcome<T>(result: Result<T, npu::stream::OpError<T>>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(failed) => {
            let named = matches!(&failed.error, Error::InvalidArgument { api, .. }
                if api.starts_with("Stream::copy_2d_"));
            assert!(
                named || failed.error.acl_code().is_some(),
                "{what}: {}",
                failed.error
            );
            failed.value.expect("a refused copy hands its buffers back")
        }
    }
}

/// A task whose waker polls it again from inside `wake`, on whatever thread wakes it (the
/// reactor, a callback worker, a blocking waiter, the reaper serving a pool's waiter): the
/// most eager executor there is. Its future reports through a channel.
struct Repolled {
    future: Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    /// A wake that came while the future was being polled (its poll then runs again).
    again: AtomicBool,
}

impl Repolled {
    /// Starts `future`: polls it once on this thread.
    fn start(future: impl Future<Output = ()> + Send + 'static) -> Arc<Repolled> {
        let task = Arc::new(Repolled {
            future: Mutex::new(Some(Box::pin(future))),
            again: AtomicBool::new(false),
        });
        task.drive();
        task
    }

    /// Polls the future until it is done or a poll leaves it pending with no wake meanwhile.
    fn drive(self: &Arc<Self>) {
        loop {
            self.again.store(false, Ordering::SeqCst);
            let Ok(mut slot) = self.future.try_lock() else {
                // Polled right now (by this thread, inside the poll, or by another): that
                // poll runs again when it sees the flag.
                self.again.store(true, Ordering::SeqCst);
                return;
            };
            if let Some(future) = slot.as_mut() {
                let waker = Waker::from(self.clone());
                if future
                    .as_mut()
                    .poll(&mut TaskContext::from_waker(&waker))
                    .is_ready()
                {
                    *slot = None;
                }
            }
            drop(slot);
            if !self.again.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}

impl Wake for Repolled {
    fn wake(self: Arc<Self>) {
        self.drive();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.drive();
    }
}

/// Rules 5, 6 and 7 for wakers that poll their task again from inside `wake`, and drop the
/// last handles of what the task used there: a memset, a `Completion::wait` of it, an
/// `Event::wait` behind it, a `PinnedPool::alloc` and a `DevicePool::alloc` waiting for room
/// that held work's blocks give back, each in a task whose waker re-polls it on the thread that
/// wakes it; each task owns the last handle of the stream, the event or the pool it used once
/// the test has dropped its own, and drops them there; every strategy.
///
/// Outcome: held. Every task completes with what it awaited (the memset's bytes, a block of
/// each pool), on the waking threads, without a deadlock between a completion and the poll it
/// wakes.
#[test]
fn wakers_that_poll_their_task_again_inside_wake_and_drop_its_last_handles() {
    let (_guard, ctx) = devices();
    let streams = || live_objects(&ctx)[3];
    let baseline = streams();
    for strategy in STRATEGIES {
        let held = sim::hold(&ctx.device()).unwrap();
        let s = stream(&ctx, strategy);
        let (done, results) = mpsc::channel::<&'static str>();
        let mut tasks = Vec::new();
        // The memset, and waits on it.
        let memset = s.memset(dev(&ctx, 64), 0x5A);
        let completion = memset.completion().clone();
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let (sent, own) = (done.clone(), s.clone());
        tasks.push(Repolled::start(async move {
            let buffer = memset.await.unwrap();
            drop(own);
            // Checked on the test's thread: a synchronous read here would wait for the device.
            KEPT_BUFFERS.lock().unwrap().push(buffer);
            sent.send("memset").unwrap();
        }));
        let sent = done.clone();
        tasks.push(Repolled::start(async move {
            completion.wait().await.unwrap();
            sent.send("completion").unwrap();
        }));
        let (sent, waited) = (done.clone(), event.wait());
        tasks.push(Repolled::start(async move {
            waited.await.unwrap();
            drop(event);
            sent.send("event").unwrap();
        }));
        // The pinned pool: its one block is the source of a held copy, dropped at once, so it
        // comes back through the reaper once the copy has run, and serves the waiter there.
        let pinned_pool = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let mut block = pinned_pool.try_alloc::<u8>(4096).unwrap().unwrap();
        block.fill(0x11);
        drop(s.copy_h2d(block, dev(&ctx, 4096)));
        let (sent, pool) = (done.clone(), pinned_pool.clone());
        tasks.push(Repolled::start(async move {
            let block = pool.alloc::<u8>(4096).await.unwrap();
            drop(pool);
            drop(block);
            sent.send("pinned pool").unwrap();
        }));
        drop(pinned_pool);
        // The device pool: its one block is the destination of a held memset, dropped.
        let device_pool = device_pool(&ctx, DevicePoolBackend::Caching, Some(4096));
        let block = run(device_pool.alloc::<u8>(&s, 4096)).unwrap();
        drop(s.memset(block, 1));
        let (sent, pool, own) = (done.clone(), device_pool.clone(), s.clone());
        tasks.push(Repolled::start(async move {
            let block = pool.alloc::<u8>(&own, 4096).await.unwrap();
            drop((pool, own, block));
            sent.send("device pool").unwrap();
        }));
        drop((device_pool, s, done));
        held.release().unwrap();
        let mut finished: Vec<_> = watchdog("the re-polled tasks", || results.iter().collect());
        finished.sort_unstable();
        assert_eq!(
            finished,
            [
                "completion",
                "device pool",
                "event",
                "memset",
                "pinned pool"
            ],
            "{strategy:?}"
        );
        for task in &tasks {
            assert!(task.future.lock().unwrap().is_none(), "{strategy:?}: done");
        }
        let buffer = KEPT_BUFFERS.lock().unwrap().pop().unwrap();
        assert_eq!(
            buffer.to_vec_blocking().unwrap(),
            [0x5A; 64],
            "{strategy:?}"
        );
        drop(tasks);
        until_released("the stream whose last handles a wake dropped", || {
            streams() <= baseline
        });
    }
}

/// The memset buffers the re-polled tasks hand to the test's thread.
static KEPT_BUFFERS: Mutex<Vec<DeviceBuffer<u8>>> = Mutex::new(Vec::new());

/// One submitting thread's rounds on `ctx`'s device until the device refuses one: a memset,
/// a copy in from pinned memory, a record waited on by a second stream (with a memset behind
/// the wait), a device-pool block set and copied out into a pinned-pool block; after the first
/// round it meets the test at `start`. Every outcome must be the work's own bytes or a typed
/// error, and the refusal must come within `ROUNDS` rounds of the loss (which `lost` says
/// has returned). How many rounds it ran.
fn submit_until_refused(
    ctx: &Context,
    strategy: npu::stream::Strategy,
    start: &std::sync::Barrier,
    lost: &AtomicBool,
) -> usize {
    const ROUNDS: usize = 10_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let typed = |err: &Error, what: &str| {
        assert!(
            err.acl_code().is_some() || err.is_device_lost(),
            "{strategy:?} {what}: {err:?}"
        );
    };
    let pinned_pool = PinnedPool::new(ctx);
    let device_pool = DevicePool::new(ctx).unwrap();
    let mut rounds_after_the_loss = 0;
    for round in 0.. {
        if lost.load(Ordering::SeqCst) {
            rounds_after_the_loss += 1;
            assert!(
                rounds_after_the_loss < ROUNDS,
                "{strategy:?}: never refused"
            );
        }
        let byte = (round % 250) as u8 + 1;
        let made = (|| {
            let s = Stream::builder(ctx).strategy(strategy).build()?;
            let behind = Stream::builder(ctx).strategy(strategy).build()?;
            let event = Event::new(ctx)?;
            let target = DeviceBuffer::<u8>::new(ctx, 256)?;
            let copied = DeviceBuffer::<u8>::new(ctx, 256)?;
            let source = PinnedBuffer::from_slice(ctx, &[byte; 256])?;
            Ok::<_, Error>((s, behind, event, target, copied, source))
        })();
        let (s, behind, event, target, copied, source) = match made {
            Ok(made) => made,
            Err(err) => {
                typed(&err, "making the round's objects");
                assert!(
                    round > 0,
                    "{strategy:?}: the first round is before the loss"
                );
                return round;
            }
        };
        let refused = runtime.block_on(async {
            tokio::time::timeout(HANG, async {
                let set = s.memset(target, byte);
                let copy = s.copy_h2d(source, copied);
                let waited = event
                    .record(&s)
                    .and_then(|()| behind.wait_event(&event))
                    .map(|()| behind.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), byte));
                let pooled = async {
                    let block = device_pool.alloc::<u8>(&s, 512).await?;
                    let block = s.memset(block, byte).await.map_err(|e| e.error)?;
                    let host = pinned_pool.alloc::<u8>(512).await?;
                    let (_, host) = s.copy_d2h(block, host).await.map_err(|e| e.error)?;
                    assert!(
                        host.iter().all(|&b| b == byte),
                        "{strategy:?}: pooled bytes"
                    );
                    Ok::<(), Error>(())
                };
                let (set, copy, pooled) = futures::future::join3(set, copy, pooled).await;
                let mut refused = false;
                match set {
                    Ok(buffer) => assert_eq!(
                        buffer.to_vec_blocking().unwrap_or(vec![byte; 256]),
                        [byte; 256]
                    ),
                    Err(err) => {
                        typed(&err.error, "memset");
                        refused = true;
                    }
                }
                if let Err(err) = copy {
                    typed(&err.error, "copy");
                    refused = true;
                }
                match waited {
                    Ok(op) => {
                        if let Err(err) = op.await {
                            typed(&err.error, "the memset behind the wait");
                            refused = true;
                        }
                    }
                    Err(err) => {
                        typed(&err, "record or wait");
                        refused = true;
                    }
                }
                if let Err(err) = pooled {
                    typed(&err, "pooled");
                    refused = true;
                }
                refused
            })
            .await
            .expect("a round hung")
        });
        if round == 0 {
            assert!(!refused, "{strategy:?}: the first round is before the loss");
            start.wait();
        } else if refused && lost.load(Ordering::SeqCst) {
            return round;
        }
    }
    unreachable!()
}

/// "Never a hang, never UB, typed errors" for a device lost while several threads submit to
/// it (device 3): one thread per strategy, each making new streams, events and buffers every
/// round and submitting memsets, copies in and out, a record waited on by a second stream and
/// device-pool and pinned-pool blocks, until the device refuses; the test loses the device
/// once every thread has run one round. Device 0 serves afterwards.
///
/// Outcome: held. `npu::sim::lose` returns, every round's work resolves with its bytes or a
/// typed error, every thread sees the refusal and ends.
#[test]
fn a_device_lost_while_threads_of_every_strategy_submit_ends_every_thread_typed() {
    let (_guard, d0) = devices();
    let device = Device::open(3).unwrap();
    let ctx = device.primary_context().clone();
    let baseline = live_objects(&ctx);
    let start = Arc::new(std::sync::Barrier::new(STRATEGIES.len() + 1));
    let lost = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = STRATEGIES
        .map(|strategy| {
            let (ctx, start, lost) = (ctx.clone(), start.clone(), lost.clone());
            std::thread::spawn(move || submit_until_refused(&ctx, strategy, &start, &lost))
        })
        .into_iter()
        .collect();
    start.wait();
    watchdog("losing the device under the submitters", || {
        sim::lose(&device).unwrap()
    });
    lost.store(true, Ordering::SeqCst);
    for thread in threads {
        let rounds = watchdog("a submitter", || thread.join().unwrap());
        assert!(rounds >= 1);
    }
    until_released("the lost device's streams, events and memory", || {
        within(live_objects(&ctx), baseline)
    });
    for strategy in STRATEGIES {
        a_memset_writes(&d0, &stream(&d0, strategy), 0x42, "device 0 after the loss");
    }
}

/// Rules 5 and 6 for pool waiters whose tasks run again inside `wake`, on whichever thread
/// serves them, and call the pool back there: a `DevicePool` of one block's capacity whose
/// block a memory error failed (so it comes back through the pool's repair thread), and
/// three waiters for room, each polled again by its own waker: once served, each reads the
/// pool's counters, trims it, asks it for more (`try_alloc`, which must find it full) and
/// drops its block, which serves the next waiter from inside the previous one's wake. Both
/// backends, every strategy.
///
/// Outcome: held. The three waiters are served in turn, all on the pool's repair thread (the
/// first as it settled the repaired block, each next inside the previous wake), nothing
/// deadlocks, the pool comes back to rest with the block
/// repaired once.
#[test]
fn pool_waiters_run_inside_their_wake_call_the_pool_back_and_serve_each_other() {
    let (_guard, ctx) = devices();
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let s = stream(&ctx, strategy);
            let pool = device_pool(&ctx, backend, Some(4096));
            let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
            sim::inject_memory_error(&block, 0..16).unwrap();
            let (done, served) = mpsc::channel::<(usize, String)>();
            let waiters: Vec<_> = (0..3)
                .map(|i| {
                    let (pool, s, done) = (pool.clone(), s.clone(), done.clone());
                    Repolled::start(async move {
                        let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                        assert_eq!(pool.stats().cache.allocated, 4096);
                        pool.trim().unwrap();
                        assert!(pool.try_alloc::<u8>(&s, 16).unwrap().is_none(), "full");
                        let thread = std::thread::current().name().unwrap_or("").to_owned();
                        // Before the drop, which serves the next waiter inside this wake.
                        done.send((i, thread)).unwrap();
                        drop(block);
                    })
                })
                .collect();
            drop(done);
            assert_eq!(pool.stats().cache.waiters, 3, "{what}");
            let failed = run(s.memset(block, 0)).unwrap_err();
            assert!(failed.error.is_memory_error(), "{what}: {failed}");
            drop(failed);
            let order: Vec<_> = watchdog("the pool's waiters", || served.iter().collect());
            let served: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
            assert_eq!(served, [0, 1, 2], "{what}: served in turn: {order:?}");
            assert!(
                order.iter().all(|(_, thread)| thread == "npu-pool-repair"),
                "{what}: each served inside the previous wake, from the repair: {order:?}"
            );
            for waiter in &waiters {
                assert!(waiter.future.lock().unwrap().is_none(), "{what}");
            }
            let at_rest = settled(&pool, &what);
            assert_eq!((at_rest.allocated, at_rest.waiters), (0, 0), "{what}");
            assert_eq!(at_rest.repaired, 1, "{what}");
        }
    }
}

/// Cancel safety of `DevicePool::alloc` in a `select!` loop that polls and cancels it a
/// hundred times per backend while the device is held, with a pool of two blocks' capacity:
/// on the runtime-pool backend each cancelled request leaves a stream-ordered allocation
/// queued behind held work; on the caching backend (which allocates at once) both blocks are
/// out, so each request queues for room. Then the device released: every strategy.
///
/// Outcome: held. Every cancelled request gives its room back (once its allocation has
/// completed, on the runtime pool), so both blocks of the capacity are served afterwards and
/// the pool comes back to rest with nothing allocated and no waiter.
#[test]
fn device_pool_requests_cancelled_by_a_select_loop_behind_held_work_give_their_room_back() {
    let (_guard, ctx) = devices();
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let s = stream(&ctx, strategy);
            let pool = device_pool(&ctx, backend, Some(8192));
            // The caching backend allocates at once: with its capacity taken, requests queue.
            let filler: Vec<_> = match backend {
                DevicePoolBackend::Caching => (0..2)
                    .map(|_| run(pool.alloc::<u8>(&s, 4096)).unwrap())
                    .collect(),
                _ => Vec::new(),
            };
            let held = sim::hold(&ctx.device()).unwrap();
            drop(s.memset(dev(&ctx, 64), 1));
            let cancelled = run(async {
                let mut cancelled = 0;
                for _ in 0..100 {
                    tokio::select! {
                        biased;
                        block = pool.alloc::<u8>(&s, 4096) => drop(block),
                        () = std::future::ready(()) => cancelled += 1,
                    }
                }
                cancelled
            });
            assert_eq!(
                cancelled, 100,
                "{what}: the ready branch wins after one poll"
            );
            assert_eq!(
                pool.stats().cache.waiters,
                0,
                "{what}: every request left the queue"
            );
            drop(filler);
            held.release().unwrap();
            until_released(&what, || {
                let stats = pool.stats().cache;
                stats.awaiting_blocks == 0 && stats.allocated == 0
            });
            let (a, b) = run(async {
                let a = pool.alloc::<u8>(&s, 4096).await;
                let b = pool.alloc::<u8>(&s, 4096).await;
                (a, b)
            });
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(pool.stats().cache.allocated, 8192, "{what}");
            drop((a, b));
            let at_rest = settled(&pool, &what);
            assert_eq!((at_rest.allocated, at_rest.waiters), (0, 0), "{what}");
            assert!(at_rest.reserved <= 8192, "{what}: {at_rest:?}");
        }
    }
}

/// One thread's rounds across two runtimes: each round picks a runtime (the in-process
/// simulator or npu-sim's cdylib), a device (0 or 1), a context (primary or a new explicit
/// one) and a strategy from `seed`, copies a pattern in and out through an event another
/// stream waits on, and hands a buffer of the other runtime to a copy (which must be refused
/// by name, the buffers handed back). Everything is dropped at the end of each round.
fn rounds_across_runtimes(runtimes: &[npu::Runtime; 2], seed: u64, rounds: usize) {
    let mut rng = Rng(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..rounds {
        let which = rng.below(2);
        let device = runtimes[which].device(rng.below(2) as u32).unwrap();
        let ctx = match rng.below(2) {
            0 => device.primary_context().clone(),
            _ => device.create_context().unwrap(),
        };
        let strategy = STRATEGIES[rng.below(3)];
        let other = runtimes[1 - which]
            .device(0)
            .unwrap()
            .primary_context()
            .clone();
        let byte = (seed as usize + round) as u8;
        let what = format!("seed {seed} round {round}: runtime {which} {strategy:?}");
        runtime.block_on(async {
            tokio::time::timeout(HANG, async {
                let (s, behind) = (stream(&ctx, strategy), stream(&ctx, strategy));
                let (host, dev) = s
                    .copy_h2d(pinned(&ctx, 256, byte), dev(&ctx, 256))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let event = Event::new(&ctx).unwrap();
                event.record(&s).unwrap();
                behind.wait_event(&event).unwrap();
                let (dev, back) = behind
                    .copy_d2h(dev, pinned(&ctx, 256, 0))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(back.iter().all(|&b| b == byte), "{what}");
                let failed = s.copy_d2h(dev, pinned(&other, 256, 0)).await.unwrap_err();
                assert_eq!(
                    invalid(&failed.error),
                    ("Stream::copy_d2h", "dst"),
                    "{what}"
                );
                assert!(failed.value.is_some(), "{what}");
                let stranger = Event::new(&other).unwrap();
                assert!(matches!(
                    stranger.record(&s),
                    Err(Error::InvalidArgument { .. })
                ));
                drop(host);
            })
            .await
            .unwrap_or_else(|_| panic!("hung"))
        });
    }
}

/// "Never UB, typed errors" for devices, contexts and runtimes interleaved across threads:
/// four threads, each running rounds on a runtime, device, context and strategy picked at
/// random among two runtimes (the in-process simulator and npu-sim's cdylib, each with two
/// devices), primary and new explicit contexts and the three strategies, handing buffers and
/// events of the other runtime to its streams; then every handle dropped and the cdylib's
/// runtime finalised.
///
/// Outcome: held. Every round reads back its own pattern, every cross-runtime use is refused
/// by name with the buffers handed back, and the cdylib's device holds no context, stream or
/// allocation once everything is dropped.
#[test]
fn devices_contexts_and_runtimes_interleaved_across_threads_keep_their_own_data() {
    let (_guard, _d0) = devices();
    let own = dlopened_simulator();
    let runtimes = Arc::new([npu::Runtime::global().unwrap(), own]);
    let threads: Vec<_> = (0..4u64)
        .map(|seed| {
            let runtimes = runtimes.clone();
            std::thread::spawn(move || rounds_across_runtimes(&runtimes, seed * 7919 + 1, 40))
        })
        .collect();
    for thread in threads {
        watchdog("a thread of rounds", || thread.join().unwrap());
    }
    let controls = CdylibControls::of_the_loaded_library();
    drop(runtimes);
    until_released("the cdylib's device 0 and 1", || {
        [0, 1].iter().all(|&device| {
            let stats = controls.stats(device);
            (
                stats.live_contexts,
                stats.live_streams,
                stats.live_allocations,
            ) == (0, 0, 0)
        })
    });
}

/// The environment variable that makes the `child` test run a case: the fork tests run in a
/// process of their own, which forks (so that a leak checker following this process does not
/// follow the forked child, whose memory `_exit` never frees), and whose tracing layer no
/// other test sees.
const CHILD_ENV: &str = "NPU_ATTACK34_CHILD";

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "submission" => forked_inside_a_submission(),
        "runtime lock" => forked_under_the_runtimes_lock(),
        "drain lock" => forked_under_a_device_pools_drain_lock(),
        "global runtime" => forked_while_another_thread_makes_the_global_runtime(),
        "first global runtime" => {
            forked_while_another_thread_loads_the_first_runtime(npu::Runtime::global)
        }
        "first built runtime" => forked_while_another_thread_loads_the_first_runtime(|| {
            npu::Runtime::builder()
                .backend(npu::runtime::BackendChoice::Auto)
                .build()
        }),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// The name of the thread whose submission [`HoldsInsideAclCalls`] holds.
const HOLDER: &str = "npu34-holder";

/// The targets of the simulator's own reports of failed calls, made inside the call.
const SIMULATOR: &[&str] = &["ascendcl", "npu_sim"];

/// The target of the device pool's own events, among them its report of the frees it makes
/// under the drain lock.
const DEVICE_POOL: &[&str] = &["npu_stream::device_pool"];

/// Whether the holder's call is being held, whether the test has let it go, and the targets
/// of the events it is held at.
#[derive(Default)]
struct Holding {
    held: bool,
    go: bool,
    targets: &'static [&'static str],
}

static HOLDING: Mutex<Holding> = Mutex::new(Holding {
    held: false,
    go: false,
    targets: &[],
});
static HOLDING_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

/// A tracing layer that, on the first event of the thread named [`HOLDER`] with one of the
/// targets the test chose (npu-sim logging the refusal of a submission from inside the ACL
/// call, under the locks npu-rs holds across it; the device pool logging its frees under its
/// drain lock), holds that thread there (bounded) until the test lets it go: how a thread of
/// a process that forks is caught in the middle of a submission, deterministically.
struct HoldsInsideAclCalls;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for HoldsInsideAclCalls {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if std::thread::current().name() != Some(HOLDER) {
            return;
        }
        let target = event.metadata().target();
        let mut holding = HOLDING.lock().unwrap();
        if holding.held || !holding.targets.iter().any(|held| target.starts_with(held)) {
            return;
        }
        holding.held = true;
        HOLDING_CHANGED.notify_all();
        let waited = HOLDING_CHANGED.wait_timeout_while(holding, HANG, |h| !h.go);
        drop(waited.unwrap());
    }
}

/// "A forked child is refused with `Error::Forked`, never a hang" for a fork taken while
/// another thread is inside a submission: a thread records an event on a stream (of a
/// context a `FailureMode::Stop` fault stopped, so the runtime refuses the record and logs
/// it from inside the call) and is held there by a tracing layer, holding the event's
/// recording lock and the stream's submission lock; the test's thread forks. In the child,
/// the stream's `abort`, a record of that event, a memset and a `synchronize` on the stream,
/// and dropping everything must each return (bounded by the child's alarm); every strategy.
///
/// Outcome: **broke** before the fix: `Stream::abort` took the stream's submission lock,
/// and `Event::record` the event's recording lock, before asking whether the process is a
/// forked child, and in the child those locks belong to a thread that does not exist there:
/// the child waited for ever (killed by its alarm). Both now refuse first.
#[test]
fn a_child_forked_while_another_thread_is_inside_a_submission_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "submission");
}

/// The child process's case of
/// [`a_child_forked_while_another_thread_is_inside_a_submission_is_refused_not_hung`].
fn forked_inside_a_submission() {
    subscribe_the_holding_layer();
    let (_guard, ctx) = devices();
    for strategy in STRATEGIES {
        let own = ctx.device().create_context().unwrap();
        let s = stream(&own, strategy);
        s.set_failure_mode(npu::FailureMode::Stop).unwrap();
        sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
        assert!(run(s.memset(dev(&own, 16), 1)).is_err(), "{strategy:?}");
        let event = Event::new(&own).unwrap();
        let (held_s, held_event) = (s.clone(), event.clone());
        let holder = held_inside_an_acl_call(move || held_event.record(&held_s));
        let spare = dev(&own, 16);
        let (ok, status) = fork_and_check(|| {
            let aborted = futures::executor::block_on(s.abort());
            assert_forked(&aborted.unwrap_err());
            assert_forked(&event.record(&s).unwrap_err());
            let (err, back) = futures::executor::block_on(s.memset(spare, 1))
                .unwrap_err()
                .into_parts();
            assert_forked(&err);
            assert!(back.is_some(), "the refused memset hands its buffer back");
            let synced = futures::executor::block_on(s.synchronize());
            assert_forked(&synced.unwrap_err().error);
            drop((s.clone(), event.clone()));
        });
        let recorded = let_the_holder_go(holder);
        assert!(
            recorded.is_err(),
            "{strategy:?}: a stopped stream refuses the record"
        );
        assert!(
            ok,
            "{strategy:?}: the child failed or hung (status {status:#x})"
        );
    }
}

/// Installs [`HoldsInsideAclCalls`] as the process's subscriber (once).
fn subscribe_the_holding_layer() {
    static SUBSCRIBED: std::sync::Once = std::sync::Once::new();
    SUBSCRIBED.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(HoldsInsideAclCalls);
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
}

/// Runs `call` on a thread named [`HOLDER`] and returns once the layer holds it inside the
/// ACL call whose failure the simulator reports.
fn held_inside_an_acl_call<R: Send + 'static>(
    call: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<R> {
    held_at(SIMULATOR, call)
}

/// Runs `call` on a thread named [`HOLDER`] and returns once the layer holds it at its first
/// event of one of `targets`.
fn held_at<R: Send + 'static>(
    targets: &'static [&'static str],
    call: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<R> {
    *HOLDING.lock().unwrap() = Holding {
        targets,
        ..Holding::default()
    };
    let holder = std::thread::Builder::new()
        .name(HOLDER.into())
        .spawn(call)
        .unwrap();
    let holding = HOLDING.lock().unwrap();
    let waited = HOLDING_CHANGED.wait_timeout_while(holding, HANG, |h| !h.held);
    assert!(!waited.unwrap().1.timed_out(), "never held inside the call");
    holder
}

/// Lets the held thread go and returns what its call returned.
fn let_the_holder_go<R>(holder: std::thread::JoinHandle<R>) -> R {
    {
        let mut holding = HOLDING.lock().unwrap();
        holding.go = true;
        HOLDING_CHANGED.notify_all();
    }
    watchdog("the held call", || holder.join().unwrap())
}

/// "A forked child is refused, never hung" for a fork taken while another thread holds the
/// runtime's device and peer-access lock across an ACL call: that thread opens device 4,
/// lost with every handle of it dropped, so that the runtime refuses its `aclrtSetDevice`
/// (which the simulator logs, and a tracing layer holds it there). In the child, peer access
/// from device 0 to device 1 enabled before the fork is dropped, looked up and enabled again,
/// and the last handles of device 1 (an explicit context and the device) are dropped: each
/// must return (bounded by the child's alarm).
///
/// Outcome: **broke** before the fix: the peer-access guard's drop, the look-up and the
/// release of device 1's primary context took the runtime's lock, which in the child belongs
/// to a thread that does not exist there: the child waited for ever. They now leave the lock
/// alone in a forked child (ACL is not the child's to call, and the guard and the context
/// only tidy the parent's bookkeeping there); enabling access is `Error::Forked`.
#[test]
fn a_child_forked_while_another_thread_holds_the_runtimes_lock_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "runtime lock");
}

/// The child process's case of
/// [`a_child_forked_while_another_thread_holds_the_runtimes_lock_is_refused_not_hung`].
fn forked_under_the_runtimes_lock() {
    subscribe_the_holding_layer();
    let (_guard, d0) = devices();
    let lost = Device::open(4).unwrap();
    sim::lose(&lost).unwrap();
    drop(lost);
    let (from, to) = (d0.device(), Device::open(1).unwrap());
    let access = from.enable_peer_access(&to).unwrap();
    let explicit = to.create_context().unwrap();
    let holder = held_inside_an_acl_call(|| Device::open(4).map(drop));
    // Borrowed by the child's body, so that the parent drops its own copies only once the
    // holder has let go of the runtime's lock (a drop takes it).
    let kept = std::cell::Cell::new(Some((access, explicit, to)));
    let (ok, status) = fork_and_check(|| {
        let (access, explicit, to) = kept.take().unwrap();
        drop(access);
        let _ = from.peer_access_to(&to);
        assert_forked(&from.enable_peer_access(&to).unwrap_err());
        drop((explicit, to));
    });
    let opened = let_the_holder_go(holder);
    drop(kept);
    assert!(opened.is_err(), "a lost device does not open");
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// "A forked child is refused, never hung" for a fork taken while another thread holds a
/// device pool's drain lock across the frees of an eviction: a pool of three 4 KiB blocks'
/// capacity with two blocks out and two requests of 8 KiB queued; the holder drops one
/// block, which the first request's room evicts (freed under the drain lock, where a tracing
/// layer holds the thread at the pool's report of the frees). In the child, `trim` and
/// `trim_to` are `Error::Forked`, and the other block and the queued requests are dropped
/// (the block's return serves the queue, which takes the drain lock): each must return
/// (bounded by the child's alarm). Both backends.
///
/// Outcome: **broke** before the fix: `trim` and the block's drop took the drain lock,
/// which in the child belongs to a thread that does not exist there, and waited for ever
/// (killed by the child's alarm). In a forked child the drain lock is now left alone (the
/// frees made there are refused anyway), and a trim is `Error::Forked` before it gives any
/// block back (it would report bytes given back that only leaked).
#[test]
fn a_child_forked_while_another_thread_holds_a_device_pools_drain_lock_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "drain lock");
}

/// "A forked child is refused, never hung" for a fork taken while another thread makes the
/// process-wide runtime, after another runtime started: that thread's `Runtime::global`
/// chooses its backend (`NPU_BACKEND=auto`, which finds no CANN here and logs that it falls
/// back to the simulator, where a tracing layer holds it). In the child, `Runtime::global` and
/// `Device::open` must be `Error::Forked` (bounded by the child's alarm), and the runtime
/// built before the fork drops.
///
/// Outcome: **broke** before the fix: the child's `Runtime::global` waited for the
/// process-wide runtime's making, which in the child belongs to a thread that does not exist
/// there, for ever (killed by its alarm). It is now `Error::Forked` there unless the runtime
/// was made before the fork.
#[test]
fn a_child_forked_while_another_thread_makes_the_global_runtime_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "global runtime");
}

/// The child process's case of
/// [`a_child_forked_while_another_thread_makes_the_global_runtime_is_refused_not_hung`].
fn forked_while_another_thread_makes_the_global_runtime() {
    // SAFETY: this process runs this case alone, and none of its threads reads the
    // environment meanwhile (the runtime is made below, on the holder's thread).
    unsafe { std::env::set_var("NPU_BACKEND", "auto") };
    subscribe_the_holding_layer();
    let built = npu::Runtime::builder()
        .backend(npu::runtime::BackendChoice::Sim)
        .build()
        .unwrap();
    let holder = held_at(&["npu_core::backend::auto"], npu::Runtime::global);
    let kept = std::cell::Cell::new(Some(built));
    let (ok, status) = fork_and_check(|| {
        assert_forked(&npu::Runtime::global().unwrap_err());
        assert_forked(&Device::open(0).unwrap_err());
        drop(kept.take());
    });
    let made = let_the_holder_go(holder);
    drop(kept);
    assert!(made.is_ok(), "the parent makes its runtime: {made:?}");
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// "A forked child is refused, never hung" for a fork taken while another thread makes the
/// process's first runtime, before any `aclInit`: that thread's `Runtime::global`, or its
/// build with `BackendChoice::Auto`, chooses its backend (`auto` finds no CANN here and logs
/// that it falls back to the simulator, where a tracing layer holds it), in a process where no
/// runtime started yet. In the child, `Runtime::global`, a build of the simulator's runtime
/// and `Device::open` must be `Error::Forked` (bounded by the child's alarm), and the child
/// counts as forked.
///
/// Outcome: **broke** before the fix (the gap rule 8 left open): no runtime had started and
/// no `aclInit` had begun at the fork, so the child was no forked child: under the held
/// `Runtime::global` its `Runtime::global` waited for the parent's making of the runtime,
/// which never ends there (killed by its alarm); under the held build it made a runtime of its
/// own (its library's loading was done by chance, not waited for). The making of a runtime is
/// now a window in which a fork makes a forked child.
#[test]
fn a_child_forked_while_another_thread_loads_the_first_runtime_is_refused_not_hung() {
    in_child_test("child", CHILD_ENV, "first global runtime");
    in_child_test("child", CHILD_ENV, "first built runtime");
}

/// The child process's cases of
/// [`a_child_forked_while_another_thread_loads_the_first_runtime_is_refused_not_hung`]:
/// `make` makes the first runtime.
fn forked_while_another_thread_loads_the_first_runtime(
    make: impl FnOnce() -> npu::Result<npu::Runtime> + Send + 'static,
) {
    // SAFETY: this process runs this case alone, and none of its threads reads the
    // environment meanwhile (the runtime is made below, on the holder's thread).
    unsafe { std::env::set_var("NPU_BACKEND", "auto") };
    subscribe_the_holding_layer();
    let holder = held_at(&["npu_core::backend::auto"], make);
    let (ok, status) = fork_and_check(|| {
        assert_forked(&npu::Runtime::global().unwrap_err());
        let built = npu::Runtime::builder()
            .backend(npu::runtime::BackendChoice::Sim)
            .build();
        assert_forked(&built.unwrap_err());
        assert_forked(&Device::open(0).unwrap_err());
        assert!(npu::runtime::forked(), "forked while a runtime was made");
    });
    let made = let_the_holder_go(holder);
    assert!(made.is_ok(), "the parent makes its runtime: {made:?}");
    assert!(!npu::runtime::forked(), "the parent is no forked child");
    assert!(ok, "the child failed or hung (status {status:#x})");
}

/// The child process's case of
/// [`a_child_forked_while_another_thread_holds_a_device_pools_drain_lock_is_refused_not_hung`].
fn forked_under_a_device_pools_drain_lock() {
    subscribe_the_holding_layer();
    let (_guard, ctx) = devices();
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        let s = stream(&ctx, npu::Strategy::EventPoll);
        let pool = device_pool(&ctx, backend, Some(3 * 4096));
        let (evicted, kept) = run(async {
            let evicted = pool.alloc::<u8>(&s, 4096).await.unwrap();
            (evicted, pool.alloc::<u8>(&s, 4096).await.unwrap())
        });
        let mut queued = [0, 1].map(|_| Box::pin(pool.alloc::<u8>(&s, 8192)));
        for request in &mut queued {
            assert!(polled_once(request.as_mut()).is_pending(), "{backend:?}");
        }
        assert_eq!(pool.stats().cache.waiters, 2, "{backend:?}");
        let holder = held_at(DEVICE_POOL, move || drop(evicted));
        assert_eq!(
            pool.stats().cache.waiters,
            1,
            "{backend:?}: the first request got the room the eviction made"
        );
        // Borrowed by the child's body, so that the parent drops its own copies only once the
        // holder has let go of the drain lock (the block's drop takes it).
        let kept = std::cell::Cell::new(Some((kept, queued)));
        let (ok, status) = fork_and_check(|| {
            let (kept, queued) = kept.take().unwrap();
            assert_forked(&pool.trim().unwrap_err());
            assert_forked(&pool.trim_to(0).unwrap_err());
            drop(kept);
            drop(queued);
        });
        let_the_holder_go(holder);
        drop(kept);
        assert!(
            ok,
            "{backend:?}: the child failed or hung (status {status:#x})"
        );
    }
}

/// Rule 2 for kernel arguments shared and dropped: one `Arc<DeviceBuffer>` passed as both
/// inputs of `vector_add_f32` to twenty launches on three streams (one per strategy) queued
/// while the device is held, every other launch dropped, the `Module` and `Function` handles
/// dropped, then the device released.
///
/// Outcome: held. Every kept launch writes twice the shared input, the dropped launches' own
/// outputs are released, and the shared input's `Arc` is unique again once every launch has
/// completed (each launch kept its clone, and its binary, until then).
#[test]
fn a_shared_kernel_argument_and_a_dropped_module_outlive_every_queued_launch() {
    let (_guard, ctx) = devices();
    let baseline = live_allocations(&ctx);
    let n = 64;
    let held = sim::hold(&ctx.device()).unwrap();
    let input = Arc::new(DeviceBuffer::from_host_blocking(&ctx, &[1.5f32; 64]).unwrap());
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
    let add = module.function("vector_add_f32").unwrap();
    let streams = STRATEGIES.map(|strategy| stream(&ctx, strategy));
    let mut kept = Vec::new();
    for i in 0..20 {
        let out = DeviceBuffer::<f32>::new(&ctx, n).unwrap();
        let args = (input.clone(), input.clone(), out, n as u64);
        // SAFETY: vector_add_f32(a, b, c, n) reads n elements of a and b and writes n of c;
        // all hold n, and only c, the launch's own, is written.
        let launch = unsafe { streams[i % 3].launch(&add, 2, args) };
        if i % 2 == 0 {
            kept.push(launch);
        }
    }
    drop((add, module));
    assert!(
        Arc::strong_count(&input) > 1,
        "the queued launches hold the input"
    );
    held.release().unwrap();
    for launch in kept {
        let (_, _, out, _) = run(launch).unwrap();
        assert_eq!(out.to_vec_blocking().unwrap(), [3.0f32; 64]);
    }
    until_released("the dropped launches' values", || {
        Arc::strong_count(&input) == 1
    });
    drop((input, streams));
    until_released("every buffer", || live_allocations(&ctx) <= baseline);
}
