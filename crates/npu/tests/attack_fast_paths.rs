//! Attacks on what the last session changed, through the `npu` facade: the Tokio test-harness
//! story (paused clock), the pools' fast paths, the per-future waker slots, and the staged
//! copies.
//!
//! Each test is named for the promise it attacks and asserts it, under all three strategies
//! where a stream is involved. The simulator's hold gate is device-global, so every test takes
//! the file's lock; every wait is bounded by [`watchdog`] or a real-time Tokio timeout, so a
//! hang fails its test with a message instead of stalling the suite.

mod common;

use std::sync::MutexGuard;
use std::time::Duration;

use common::*;
use npu::Event;
use npu::prelude::*;
use npu::sim;

/// Device 0 to this test alone: the hold gate and the live counters are the simulator's,
/// shared by every test of this process.
fn exclusive() -> (MutexGuard<'static, ()>, Context) {
    let (guard, ctx, _) = common::exclusive(None);
    (guard, ctx)
}

/// Rule 5 under the test harness: a paused clock is kept from jumping while an operation is in
/// flight, but dropping the runtime (the end of a `#[tokio::test(start_paused = true)]`) must
/// not wait for the device: here it is held for the whole drop.
#[test]
fn dropping_a_paused_runtime_does_not_wait_for_held_device_work() {
    let (_guard, ctx) = exclusive();
    for strategy in STRATEGIES {
        let held = sim::hold(&ctx.device()).unwrap();
        let runtime = paused_runtime();
        let copy = runtime.block_on(async {
            let stream = stream(&ctx, strategy);
            let host = PinnedBuffer::from_slice(&ctx, &[5u8; 4096]).unwrap();
            let device = DeviceBuffer::<u8>::new(&ctx, 4096).unwrap();
            let mut copy = stream.copy_h2d(host, device);
            // Polled under the paused clock, then given up: the device is still held.
            let waited = tokio::time::timeout(Duration::from_secs(3600), &mut copy);
            assert!(
                tokio::time::timeout(Duration::ZERO, waited).await.is_err(),
                "{strategy:?}: the held copy cannot have finished"
            );
            let completion = copy.completion().clone();
            drop(copy);
            completion
        });
        watchdog(&format!("{strategy:?}: dropping a paused runtime"), || {
            drop(runtime)
        });
        assert!(!copy.is_complete(), "{strategy:?}: still held");
        held.release().unwrap();
        copy.wait_blocking().unwrap();
    }
    sim::flush_releases();
}

const PAGE: usize = 4096;

/// FIFO liveness of both pools' fast paths: the head waiter asks for more than can ever be
/// free while a block is held, a smaller request queues behind it (no overtaking); cancelling
/// the head must serve the one behind at once, with nothing returned meanwhile.
#[test]
fn cancelling_the_head_waiter_serves_the_one_behind_it() {
    let (_guard, ctx) = exclusive();
    run(async {
        let pinned = PinnedPool::builder(&ctx)
            .capacity(2 * PAGE)
            .build()
            .unwrap();
        let held = pinned.alloc::<u8>(PAGE).await.unwrap();
        let mut head = Box::pin(pinned.alloc::<u8>(2 * PAGE));
        assert!(polled_once(head.as_mut()).is_pending(), "the head queues");
        let behind = pinned.alloc::<u8>(PAGE);
        let mut behind = Box::pin(behind);
        assert!(
            polled_once(behind.as_mut()).is_pending(),
            "FIFO: the smaller request waits behind the head"
        );
        drop(head);
        let served = behind.await.unwrap();
        assert_eq!(served.len(), PAGE);
        drop((held, served));
        assert_eq!(pinned.stats().waiters, 0);
    });
    for strategy in STRATEGIES {
        run(async {
            let stream = stream(&ctx, strategy);
            let device = DevicePool::builder(&ctx)
                .capacity(2 * PAGE)
                .build()
                .unwrap();
            let held = device.alloc::<u8>(&stream, PAGE).await.unwrap();
            let mut head = Box::pin(device.alloc::<u8>(&stream, 2 * PAGE));
            assert!(
                polled_once(head.as_mut()).is_pending(),
                "{strategy:?}: head queues"
            );
            let mut behind = Box::pin(device.alloc::<u8>(&stream, PAGE));
            assert!(
                polled_once(behind.as_mut()).is_pending(),
                "{strategy:?}: FIFO"
            );
            drop(head);
            let served = behind.await.unwrap();
            assert_eq!(served.len(), PAGE, "{strategy:?}");
            drop((held, served));
        });
    }
}

/// Rule 7 with waker slots moving: an operation polled by one task and then moved to another
/// wakes the task that polls it last, even after thousands of `Completion::wait` futures were
/// polled and dropped on it meanwhile (each dropped one gives its slot up).
#[test]
fn an_operation_moved_between_tasks_wakes_the_last_poller() {
    let (_guard, ctx) = exclusive();
    for strategy in STRATEGIES {
        let held = sim::hold(&ctx.device()).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let stream = stream(&ctx, strategy);
        let buffer = DeviceBuffer::<u8>::new(&ctx, PAGE).unwrap();
        let mut op = Box::pin(stream.memset(buffer, 3));
        let completion = op.completion().clone();
        // First polled by a task of its own, which gives it up while it is pending.
        let (op_tx, op_rx) = tokio::sync::oneshot::channel();
        runtime.block_on(async {
            tokio::spawn(async move {
                let pending = tokio::time::timeout(Duration::ZERO, &mut op).await;
                assert!(pending.is_err(), "held: the memset cannot have run");
                op_tx.send(op).ok().unwrap();
            })
            .await
            .unwrap();
        });
        for _ in 0..10_000 {
            let mut wait = Box::pin(completion.wait());
            assert!(polled_once(wait.as_mut()).is_pending());
        }
        let op = runtime.block_on(op_rx).unwrap();
        let last = runtime.spawn(async move { op.await.map_err(|e| e.error) });
        held.release().unwrap();
        let buffer = runtime
            .block_on(async { tokio::time::timeout(HANG, last).await })
            .expect("the last poller was never woken")
            .unwrap()
            .unwrap();
        assert_eq!(
            buffer.to_vec_blocking().unwrap(),
            vec![3; PAGE],
            "{strategy:?}"
        );
        watchdog("dropping the runtime", || drop(runtime));
    }
    sim::flush_releases();
}

/// The harness story beyond `Op`: under a paused clock, a task awaiting an event recorded
/// after a copy (whose own future it never polls) must see the copy finish before a one-hour
/// timer. Device 0 copies at 1 GB/s meanwhile: 4 MiB take about 4 ms of real time.
#[test]
fn an_event_wait_beats_a_one_hour_timer_under_a_paused_clock() {
    const SIZE: usize = 4 << 20;
    const HOUR: Duration = Duration::from_secs(3600);
    let (_guard, ctx) = exclusive();
    let model = sim::TimingModel::default().h2d_bandwidth(1_000_000_000);
    sim::set_timing(&ctx.device(), Some(model)).unwrap();
    for strategy in STRATEGIES {
        let runtime = paused_runtime();
        runtime.block_on(async {
            let stream = stream(&ctx, strategy);
            let host = PinnedBuffer::from_slice(&ctx, &vec![7u8; SIZE]).unwrap();
            let copy = stream.copy_h2d(host, DeviceBuffer::<u8>::new(&ctx, SIZE).unwrap());
            let done = Event::new(&ctx).unwrap();
            done.record(&stream).unwrap();
            let start = tokio::time::Instant::now();
            tokio::select! {
                waited = done.wait() => waited.unwrap(),
                () = tokio::time::sleep(HOUR) => {
                    panic!("{strategy:?}: the timer fired while the copy was in flight")
                }
            }
            assert_eq!(
                start.elapsed(),
                Duration::ZERO,
                "{strategy:?}: paused time stood still"
            );
            let (_, device) = copy.await.unwrap();
            assert_eq!(device.len(), SIZE);
        });
    }
    sim::set_timing(&ctx.device(), None).unwrap();
}
