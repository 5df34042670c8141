//! The chaos stress: every way a user can abandon device work, at once, on many streams of two
//! devices under all three completion strategies:
//!
//! - futures dropped at random points (unpolled, after a poll, after the device finished),
//!   and polled with wakers that panic;
//! - injected task failures on streams in `FailureMode::Continue` and `FailureMode::Stop` (each
//!   stop-mode stream in a context of its own, so a stop ends only its own work);
//! - the Tokio runtime shut down under the drivers at the end of every round, with operations
//!   in flight;
//! - device 1 lost in the middle of a round.
//!
//! Checks: every job that ran to the end read back exactly what it wrote (a buffer released
//! while the device still wrote into it, then reused, would show); every abandoned operation
//! completes; nothing hangs; and every buffer is released (the simulator's live allocation
//! counts return to where they started).
//!
//! `NPU_CHAOS_OPERATIONS` sets the operation count (default 12,000): docs/cancellation.md gives
//! the larger manual mode and the valgrind command. Its own process: it loses device 1.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Instant;

use common::{HANG, Rng, STRATEGIES, in_process};
use npu_core::{Completion, Context, Device};
use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
use npu_sim::control;
use npu_stream::{FailureMode, Op, Strategy, Stream};

const OPERATIONS: usize = 12_000;
const ROUNDS: usize = 4;
const STREAMS_PER_ROUND: usize = 12;
const SEED: u64 = 0xc4a0_5eed;
const SIZES: [usize; 3] = [64, 4096, 40_000];
/// The round in which device 1 is lost, part-way through.
const LOSS_ROUND: usize = 2;

/// What happens to one operation's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Await,
    DropUnpolled,
    DropAfterPoll,
    DropWhenDone,
    /// Polled once with a waker that panics when woken, then dropped.
    PanickingWaker,
}

impl Fate {
    fn pick(rng: &mut Rng) -> Fate {
        match rng.below(20) {
            0..=9 => Fate::Await,
            10..=12 => Fate::DropUnpolled,
            13..=15 => Fate::DropAfterPoll,
            16..=17 => Fate::DropWhenDone,
            _ => Fate::PanickingWaker,
        }
    }
}

struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a hostile waker (expected in the chaos test)");
    }
}

/// What every driver shares: the abandoned operations to check, and the tallies.
#[derive(Default)]
struct Shared {
    abandoned: Mutex<Vec<Completion>>,
    operations: AtomicUsize,
    verified: AtomicUsize,
    failed: AtomicUsize,
}

impl Shared {
    /// Applies `fate` to `op`: its output if awaited and successful, `None` otherwise.
    async fn settle<T: Send + 'static>(&self, mut op: Op<T>, fate: Fate) -> Option<T> {
        self.operations.fetch_add(1, Ordering::Relaxed);
        if fate == Fate::Await {
            return match op.await {
                Ok(value) => Some(value),
                Err(_) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
        }
        self.abandoned.lock().unwrap().push(op.completion().clone());
        match fate {
            Fate::DropAfterPoll => {
                std::future::poll_fn(|cx| {
                    let _ = Pin::new(&mut op).poll(cx);
                    Poll::Ready(())
                })
                .await
            }
            Fate::PanickingWaker => {
                let waker = Waker::from(Arc::new(PanickingWaker));
                // A completion racing the registration wakes the new waker at once, inside
                // this poll: that panic is this task's own, and is caught here.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let _ = Pin::new(&mut op).poll(&mut TaskContext::from_waker(&waker));
                }));
            }
            Fate::DropWhenDone => {
                let _ = op.completion().wait().await;
            }
            Fate::Await | Fate::DropUnpolled => {}
        }
        None
    }
}

/// One driver's stream and how it misbehaves.
struct Plan {
    device: u32,
    strategy: Strategy,
    stop: bool,
    seed: u64,
    operations: usize,
}

/// Jobs of H2D copy, memset of a random range and D2H copy with a check, each operation with a
/// random fate, and now and then an injected failure of the next task. A dropped or failed
/// operation ends its job.
async fn drive(plan: Plan, pinned: Context, shared: Arc<Shared>) {
    let mut rng = Rng(plan.seed);
    let device = Device::open(plan.device).unwrap();
    // A stop-mode stream stops its whole context: it gets one of its own.
    let context = if plan.stop {
        match device.create_context() {
            Ok(context) => context,
            Err(_) => return, // the device was lost
        }
    } else {
        device.primary_context().clone()
    };
    let Ok(stream) = Stream::builder(&context).strategy(plan.strategy).build() else {
        return;
    };
    if plan.stop {
        stream.set_failure_mode(FailureMode::Stop).unwrap();
    }
    for _ in 0..plan.operations / 3 {
        let size = SIZES[rng.below(3) as usize];
        let (Ok(mut host), Ok(target)) = (
            PinnedBuffer::<u8>::new(&pinned, size),
            DeviceBuffer::<u8>::new(&context, size),
        ) else {
            return; // the device was lost
        };
        let seed = rng.next();
        let data = common::pattern(seed, size);
        host.copy_from_slice(&data);
        let mut expected = data;
        if rng.below(25) == 0 {
            let _ = control::fail_task(stream.as_raw(), rng.below(3) + 1, 507015);
        }

        let op = stream.copy_h2d(host, target);
        let Some((host, target)) = shared.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };
        let start = rng.below(size as u64) as usize;
        let end = start + rng.below((size - start) as u64 + 1) as usize;
        let value = rng.next() as u8;
        expected[start..end].fill(value);
        let op = stream.memset(target.view(start..end).unwrap(), value);
        let Some(view) = shared.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };
        let op = stream.copy_d2h(view.into_inner(), host);
        let Some((_target, back)) = shared.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };
        assert!(
            back[..] == expected[..],
            "corrupted data in a job of {size} bytes"
        );
        shared.verified.fetch_add(1, Ordering::Relaxed);
    }
}

/// The hostile wakers panic by the thousand; their messages would bury everything else.
fn quiet_hostile_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .unwrap_or_default();
        if !message.starts_with("a hostile waker") {
            default(info);
        }
    }));
}

fn live() -> (u64, u64, u64) {
    (
        control::device_stats(0).unwrap().live_allocations,
        control::device_stats(1).unwrap().live_allocations,
        control::host_stats().unwrap().pinned_allocations,
    )
}

#[test]
fn chaos_corrupts_nothing_leaks_nothing_and_hangs_nothing() {
    let total: usize = std::env::var("NPU_CHAOS_OPERATIONS")
        .map(|v| v.parse().expect("NPU_CHAOS_OPERATIONS is a number"))
        .unwrap_or(OPERATIONS);
    quiet_hostile_panics();
    let runtime = in_process();
    let pinned = runtime.device(0).unwrap().primary_context().clone();
    let baseline = live();
    let shared = Arc::new(Shared::default());
    let lost = Arc::new(AtomicBool::new(false));
    let per_stream = total.div_ceil(ROUNDS * STREAMS_PER_ROUND);
    let started = Instant::now();
    let mut rng = Rng(SEED);

    for round in 0..ROUNDS {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let drivers: Vec<_> = (0..STREAMS_PER_ROUND)
            .map(|i| {
                let plan = Plan {
                    device: if lost.load(Ordering::SeqCst) {
                        0
                    } else {
                        (i % 2) as u32
                    },
                    strategy: STRATEGIES[i % 3],
                    stop: rng.below(4) == 0,
                    seed: rng.next(),
                    operations: per_stream,
                };
                tokio.spawn(drive(plan, pinned.clone(), shared.clone()))
            })
            .collect();
        tokio.block_on(async {
            if round == LOSS_ROUND {
                // Part-way through: once a third of this round's drivers are done.
                while drivers.iter().filter(|d| d.is_finished()).count() < STREAMS_PER_ROUND / 3 {
                    tokio::task::yield_now().await;
                }
                control::lose_device(1).unwrap();
                lost.store(true, Ordering::SeqCst);
            }
            // Half the drivers are waited for; the rest are cut off by the shutdown below.
            for driver in drivers.into_iter().step_by(2) {
                let finished = tokio::time::timeout(HANG, driver)
                    .await
                    .expect("a driver hung");
                if let Err(err) = finished {
                    assert!(!err.is_panic(), "a driver panicked: {err}");
                }
            }
        });
        // The runtime goes away with operations in flight: their futures are dropped.
        tokio.shutdown_background();
    }

    // Every abandoned operation completes (successfully or not), without anyone polling it.
    let abandoned = std::mem::take(&mut *shared.abandoned.lock().unwrap());
    let deadline = Instant::now() + HANG;
    for completion in &abandoned {
        while !completion.is_complete() {
            // A hang detector, not a synchronisation.
            assert!(
                Instant::now() < deadline,
                "an abandoned operation never completed"
            );
            std::thread::yield_now();
        }
    }
    println!(
        "{} operations in {:.2?}: {} jobs verified, {} awaited operations failed, {} abandoned",
        shared.operations.load(Ordering::Relaxed),
        started.elapsed(),
        shared.verified.load(Ordering::Relaxed),
        shared.failed.load(Ordering::Relaxed),
        abandoned.len(),
    );
    assert!(shared.verified.load(Ordering::Relaxed) > 0);
    assert!(
        shared.failed.load(Ordering::Relaxed) > 0,
        "faults were injected"
    );
    drop(abandoned);

    // Nothing leaked: the drivers' buffers are released once their operations completed.
    loop {
        npu_core::reaper::flush();
        if live() == baseline {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "buffers leaked: {:?} vs {baseline:?}",
            live()
        );
        std::thread::yield_now();
    }
}
