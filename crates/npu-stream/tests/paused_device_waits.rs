//! Every future of npu-rs that waits on device work keeps a paused Tokio clock still, as an
//! `Op` does: `Completion::wait`, `HostRegistration::into_inner`, and a pool allocation queued
//! for a block the device still uses. Each is awaited under a one-hour timeout on a paused
//! runtime while device 0 is held; a thread releases the device once the future is pending.
//! A paused clock that cannot see the work jumps to the timeout as soon as the runtime idles.
//!
//! A file of its own: it closes device 0's hold gate (the tests take turns on it).

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::mpsc;
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu_mem::{
    DeviceBuffer, HostRegistration, Memory, PageAlignedBuffer, PinnedBuffer, PinnedPool,
    RegisterFlags,
};
use npu_sim::control;
use npu_stream::{DevicePool, Op, Strategy, Stream};
use tokio::runtime::Runtime;

const HOUR: Duration = Duration::from_secs(3600);
const PAGE: usize = 4096;

fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Device 0's hold gate, closed while this lives: opened again on drop, so that a failing test
/// does not leave the device held for the next one.
struct Held;

impl Held {
    fn hold() -> Held {
        control::hold(0).unwrap();
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = control::release(0);
    }
}

/// A copy of one page that the held device keeps in flight.
fn held_copy(stream: &Stream) -> Op<(PinnedBuffer<u8>, DeviceBuffer<u8>)> {
    let ctx = stream.context();
    let host = PinnedBuffer::from_slice(ctx, &[7u8; PAGE]).unwrap();
    stream.copy_h2d(host, DeviceBuffer::new(ctx, PAGE).unwrap())
}

/// Polls `future` once, with the task's waker: whether it is pending.
async fn pending_after_one_poll<F: Future>(future: Pin<&mut F>) -> bool {
    let mut future = Some(future);
    std::future::poll_fn(|cx| Poll::Ready(future.take().unwrap().poll(cx).is_pending())).await
}

/// Awaits `wait` under a one-hour timeout: polled once (it must be pending, the device being
/// held), then the device is released from another thread and the rest is awaited. Fails if
/// the timeout fired or the paused clock moved.
async fn outlives_a_one_hour_timeout<F: Future>(what: &str, held: Held, wait: F) -> F::Output {
    let (release, released) = mpsc::channel::<()>();
    let releaser = std::thread::spawn(move || {
        // Only once the future is pending (a failed assertion drops the sender instead).
        if released.recv().is_ok() {
            drop(held);
        }
    });
    let start = tokio::time::Instant::now();
    let mut timed = pin!(tokio::time::timeout(HOUR, wait));
    assert!(
        pending_after_one_poll(timed.as_mut()).await,
        "{what}: the device is held"
    );
    release.send(()).unwrap();
    let output = timed
        .await
        .unwrap_or_else(|_| panic!("{what}: the one-hour timeout fired while the device worked"));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "{what}: paused time stood still"
    );
    releaser.join().unwrap();
    output
}

#[test]
fn a_completion_wait_keeps_a_paused_clock_while_the_device_works() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        paused_runtime().block_on(async {
            let stream = stream(&ctx, strategy);
            let held = Held::hold();
            let copy = held_copy(&stream);
            let wait = copy.completion().wait();
            let what = format!("{strategy:?}: Completion::wait");
            outlives_a_one_hour_timeout(&what, held, wait)
                .await
                .unwrap();
            copy.await.unwrap();
        });
    }
}

#[test]
fn host_registration_into_inner_keeps_a_paused_clock_while_the_device_works() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        paused_runtime().block_on(async {
            let stream = stream(&ctx, strategy);
            let buffer = PageAlignedBuffer::from_slice(&[3u8; PAGE]).unwrap();
            let registration = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap();
            let held = Held::hold();
            let copy = held_copy(&stream);
            // A use recorded by hand: an operation that owned the registration would keep it
            // until it completed, and `into_inner` would not be reachable before.
            registration.record_use(copy.completion());
            let what = format!("{strategy:?}: HostRegistration::into_inner");
            let inner = registration.into_inner();
            let buffer = outlives_a_one_hour_timeout(&what, held, inner)
                .await
                .unwrap();
            assert_eq!(buffer[0], 3);
            copy.await.unwrap();
        });
    }
}

/// The pool's only block is owned by a copy whose future was dropped in flight: it comes back
/// once the device is done, from the reaper, and the queued allocation gets it.
#[test]
fn a_pinned_pool_allocation_queued_behind_device_work_keeps_a_paused_clock() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        paused_runtime().block_on(async {
            let stream = stream(&ctx, strategy);
            let pool = PinnedPool::builder(&ctx).capacity(PAGE).build().unwrap();
            let block = pool.alloc::<u8>(PAGE).await.unwrap();
            let held = Held::hold();
            drop(stream.copy_h2d(block, DeviceBuffer::new(&ctx, PAGE).unwrap()));
            let what = format!("{strategy:?}: PinnedPool::alloc");
            let alloc = pool.alloc::<u8>(PAGE);
            let block = outlives_a_one_hour_timeout(&what, held, alloc)
                .await
                .unwrap();
            assert_eq!(block.len(), PAGE);
        });
    }
}

/// The pool's only block was dropped while an operation recorded against it is in flight
/// (retired): it comes back when that operation completes.
#[test]
fn a_device_pool_allocation_queued_behind_device_work_keeps_a_paused_clock() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        paused_runtime().block_on(async {
            let stream = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx)
                .capacity(PAGE)
                .backend(backend)
                .build()
                .unwrap();
            let block = pool.alloc::<u8>(&stream, PAGE).await.unwrap();
            let held = Held::hold();
            let copy = held_copy(&stream);
            block.record_use(copy.completion());
            drop(block);
            assert_eq!(pool.stats().cache.awaiting_blocks, 1, "retired");
            let what = format!("{backend:?}, {strategy:?}: DevicePool::alloc");
            let alloc = pool.alloc::<u8>(&stream, PAGE);
            let block = outlives_a_one_hour_timeout(&what, held, alloc)
                .await
                .unwrap();
            assert_eq!(block.len(), PAGE);
            copy.await.unwrap();
        });
    }
}

/// A queued allocation keeps the clock only while the device holds a block it could get: one
/// waiting for a block a task holds lets the clock move to the task's timers (that wait is host
/// work, which Tokio sees), and once the task gives the block to an operation that the device
/// holds, the same allocation keeps the clock until the device is done.
#[test]
fn a_pool_allocation_keeps_the_clock_only_while_the_device_holds_its_block() {
    let (_device, ctx) = exclusive_device0();
    paused_runtime().block_on(async {
        let stream = stream(&ctx, Strategy::EventPoll);
        let pool = PinnedPool::builder(&ctx).capacity(PAGE).build().unwrap();
        let block = pool.alloc::<u8>(PAGE).await.unwrap();

        let start = tokio::time::Instant::now();
        let waited = tokio::time::timeout(HOUR, pool.alloc::<u8>(PAGE)).await;
        assert!(waited.is_err(), "a task holds the only block");
        assert_eq!(start.elapsed(), HOUR, "the clock moved to the timeout");

        // Queued while a task holds the block: nothing for the device to finish yet.
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.alloc::<u8>(PAGE).await.map(|block| block.len()) }
        });
        while pool.stats().waiters == 0 {
            tokio::task::yield_now().await;
        }
        let held = Held::hold();
        // The task hands the block to a copy and drops it in flight: now the device holds it.
        drop(stream.copy_h2d(block, DeviceBuffer::new(&ctx, PAGE).unwrap()));
        let what = "an allocation queued before the device took its block";
        let served = outlives_a_one_hour_timeout(what, held, waiter).await;
        assert_eq!(served.unwrap().unwrap(), PAGE);
    });
}

/// A runtime whose tasks await device waits that nothing satisfies (the device stays held) keeps
/// its paused clock still, and still shuts down: its keepers wait one slice at most.
#[test]
fn a_paused_runtime_with_unsatisfied_device_waits_shuts_down() {
    let (_device, ctx) = exclusive_device0();
    let held = Held::hold();
    let stream = stream(&ctx, Strategy::CallbackThread);
    let (pending, pending_rx) = mpsc::channel();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (down, down_rx) = mpsc::channel();
    let runtime_thread = std::thread::spawn({
        let (ctx, stream) = (ctx.clone(), stream.clone());
        move || {
            let runtime = paused_runtime();
            let copy = runtime.block_on(async {
                let (polled, mut polled_rx) = tokio::sync::mpsc::unbounded_channel();
                let (fired, mut fired_rx) = tokio::sync::mpsc::unbounded_channel();
                let copy = held_copy(&stream);
                let pool = PinnedPool::builder(&ctx).capacity(PAGE).build().unwrap();
                let block = pool.alloc::<u8>(PAGE).await.unwrap();
                block.record_use(copy.completion());
                drop(block);
                let buffer = PageAlignedBuffer::from_slice(&[1u8; PAGE]).unwrap();
                let registration =
                    HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap();
                registration.record_use(copy.completion());
                let waits: [(&str, DeviceWait); 3] = [
                    (
                        "Completion::wait",
                        Box::pin(ignore(copy.completion().wait())),
                    ),
                    (
                        "HostRegistration::into_inner",
                        Box::pin(ignore(registration.into_inner())),
                    ),
                    (
                        "PinnedPool::alloc",
                        Box::pin(ignore(async move { pool.alloc::<u8>(PAGE).await })),
                    ),
                ];
                for (what, wait) in waits {
                    let (polled, fired) = (polled.clone(), fired.clone());
                    tokio::spawn(async move {
                        let mut timed = pin!(tokio::time::timeout(HOUR, wait));
                        if pending_after_one_poll(timed.as_mut()).await {
                            polled.send(()).unwrap();
                        }
                        if timed.await.is_err() {
                            let _ = fired.send(what);
                        }
                    });
                }
                for _ in 0..3 {
                    polled_rx.recv().await.unwrap();
                }
                pending.send(()).unwrap();
                tokio::select! {
                    biased;
                    Some(what) = fired_rx.recv() => {
                        panic!("{what}: the timeout fired while the device was held")
                    }
                    _ = stop_rx => {}
                }
                // The operation stays in flight; its completion tells when the device is done.
                copy.completion().clone()
            });
            drop(runtime);
            down.send(()).unwrap();
            copy
        }
    });
    pending_rx.recv().unwrap();
    stop.send(()).unwrap();
    // A hang detector: on a regression the runtime's drop would wait for the device.
    let shut_down = down_rx.recv_timeout(HANG);
    drop(held);
    let copy = runtime_thread.join().unwrap();
    shut_down.expect("the runtime's drop waited for the held device");
    copy.wait_blocking().unwrap();
}

/// One of the device waits a test races against a timer, its output ignored.
type DeviceWait = Pin<Box<dyn Future<Output = ()> + Send>>;

async fn ignore<T>(future: impl Future<Output = T>) {
    future.await;
}
