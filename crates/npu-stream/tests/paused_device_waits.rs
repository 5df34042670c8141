//! The futures of npu-rs that wait on device work keep a paused Tokio clock still, as an `Op`
//! does: `Completion::wait` and `HostRegistration::into_inner`. Each is awaited under a one-hour timeout on a paused
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
    DeviceBuffer, HostRegistration, Memory, PageAlignedBuffer, PinnedBuffer, RegisterFlags,
};
use npu_sim::control;
use npu_stream::{Op, Strategy, Stream};
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

/// A `select!` loop whose device wait loses every turn makes a new wait each turn, polled once
/// and dropped at the turn's end, while another wait of the same operation stays pending (a
/// second task awaiting it). The waits of one operation share one keeper per runtime: 100 such
/// turns, each doing 1 ms of host work after the wait's poll (time for a keeper that poll
/// started to begin its slice), leave the runtime with a few blocking threads (one keeper, and
/// the threads its hand-overs every 100 ms land on). With a keeper per wait, each turn's keeper
/// waited out its 100 ms slice on a thread of its own: dozens at once.
#[test]
fn waits_losing_every_select_turn_share_one_keeper() {
    const NAME: &str = "keeper-turns";
    let (_device, ctx) = exclusive_device0();
    let stream = stream(&ctx, Strategy::EventPoll);
    let held = Held::hold();
    let copy = held_copy(&stream);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .thread_name(NAME)
        .build()
        .unwrap();
    let threads = runtime.block_on(async {
        let mut awaited = pin!(copy.completion().wait());
        assert!(pending_after_one_poll(awaited.as_mut()).await);
        for _ in 0..100 {
            tokio::select! {
                biased;
                r = copy.completion().wait() => panic!("resolved on a held device: {r:?}"),
                () = async { std::thread::sleep(Duration::from_millis(1)) } => {}
            }
        }
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == NAME)
            .count()
    });
    drop(runtime);
    drop(held);
    paused_runtime().block_on(copy).unwrap();
    assert!(
        threads <= 10,
        "{threads} blocking threads after 100 lost turns of one operation's waits"
    );
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
                let buffer = PageAlignedBuffer::from_slice(&[1u8; PAGE]).unwrap();
                let registration =
                    HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap();
                registration.record_use(copy.completion());
                let waits: [(&str, DeviceWait); 2] = [
                    (
                        "Completion::wait",
                        Box::pin(ignore(copy.completion().wait())),
                    ),
                    (
                        "HostRegistration::into_inner",
                        Box::pin(ignore(registration.into_inner())),
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
                for _ in 0..2 {
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
