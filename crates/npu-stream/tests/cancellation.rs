//! Cancellation stress: 100,000 operations on 16 streams, with futures dropped at random
//! points (before their first poll, after one poll, after the device finished but before
//! they were polled again). Checks that no data was corrupted (every job that ran to the end
//! reads back exactly what it wrote, so a buffer released while the device still wrote into
//! it, then reused, would show), that the device still ran every dropped operation, and that
//! every buffer was released (the simulator's live allocation counts return to where they
//! started).
//!
//! `NPU_STRESS_OPERATIONS` overrides the operation count, e.g. for a valgrind run (see
//! docs/cancellation.md). Its own process: the allocation counts must be this test's alone.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Poll;
use std::time::Instant;

use common::{HANG, Rng, STRATEGIES, in_process};
use npu_core::{Completion, Context};
use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
use npu_sim::control;
use npu_stream::{Op, Stream};

const STREAMS: usize = 16;
const OPERATIONS: usize = 100_000;
const SEED: u64 = 0x5eed_cafe;
/// Buffer sizes: small, page-sized, and large enough for the simulator to map it separately.
const SIZES: [usize; 3] = [96, 4096, 70_000];

/// What happens to one operation's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Awaited to the end.
    Await,
    /// Dropped before it was ever polled.
    DropUnpolled,
    /// Polled once (registering a waker), then dropped.
    DropAfterPoll,
    /// Dropped after the device finished it, without polling it again.
    DropWhenDone,
}

impl Fate {
    fn pick(rng: &mut Rng) -> Fate {
        match rng.below(20) {
            0..=9 => Fate::Await,
            10..=13 => Fate::DropUnpolled,
            14..=16 => Fate::DropAfterPoll,
            _ => Fate::DropWhenDone,
        }
    }
}

/// What one stream's driver did.
#[derive(Default)]
struct Report {
    operations: usize,
    verified_jobs: usize,
    fates: [usize; 4],
    /// Completions of dropped operations, to check the device still ran them.
    abandoned: Vec<Completion>,
}

impl Report {
    /// Applies `fate` to `op`: returns its output if it is awaited, `None` if it is dropped.
    async fn settle<T: Send + 'static>(&mut self, mut op: Op<T>, fate: Fate) -> Option<T> {
        self.operations += 1;
        self.fates[fate as usize] += 1;
        if fate == Fate::Await {
            return Some(op.await.expect("an awaited operation succeeds"));
        }
        self.abandoned.push(op.completion().clone());
        match fate {
            Fate::DropAfterPoll => {
                std::future::poll_fn(|cx| {
                    // Completing on this first poll is fine too: the value is dropped anyway.
                    let _ = Pin::new(&mut op).poll(cx);
                    Poll::Ready(())
                })
                .await
            }
            Fate::DropWhenDone => op.completion().wait().await.unwrap(),
            Fate::Await | Fate::DropUnpolled => {}
        }
        None
    }
}

/// Buffers recycled between jobs of one stream, per size; dropped jobs lose theirs and new
/// ones are allocated, so freed addresses get reused.
struct Pools {
    context: Context,
    host: [Vec<PinnedBuffer<u8>>; 3],
    device: [Vec<DeviceBuffer<u8>>; 3],
}

impl Pools {
    fn host(&mut self, size: usize) -> PinnedBuffer<u8> {
        self.host[size].pop().unwrap_or_else(|| {
            PinnedBuffer::new(&self.context, SIZES[size]).expect("pinned allocation")
        })
    }

    fn device(&mut self, size: usize) -> DeviceBuffer<u8> {
        self.device[size].pop().unwrap_or_else(|| {
            DeviceBuffer::new(&self.context, SIZES[size]).expect("device allocation")
        })
    }
}

/// Distinctive bytes for one job: a window of a random pattern at a seed-chosen offset (one
/// `memcpy`, so the stress measures the library rather than a byte loop).
fn fill(buffer: &mut [u8], seed: u64) {
    static PATTERN: OnceLock<Vec<u8>> = OnceLock::new();
    const OFFSETS: usize = 4096;
    let pattern = PATTERN.get_or_init(|| common::pattern(SEED, SIZES[2] + OFFSETS));
    let offset = seed as usize % OFFSETS;
    buffer.copy_from_slice(&pattern[offset..offset + buffer.len()]);
}

/// One stream's share: jobs of H2D copy, memset of a random range, D2H copy and check, each
/// operation with a random fate. A dropped operation ends its job.
async fn drive(context: Context, stream: Stream, index: usize, operations: usize) -> Report {
    let mut rng = Rng(SEED ^ index as u64);
    let mut pools = Pools {
        context,
        host: Default::default(),
        device: Default::default(),
    };
    let mut report = Report::default();
    while report.operations < operations {
        let size = rng.below(3) as usize;
        let len = SIZES[size];
        let seed = rng.next();
        let mut source = pools.host(size);
        fill(&mut source, seed);
        let mut expected = source.to_vec();

        let op = stream.copy_h2d(source, pools.device(size));
        let Some((source, device)) = report.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };
        pools.host[size].push(source);

        let start = rng.below(len as u64) as usize;
        let end = start + rng.below((len - start) as u64 + 1) as usize;
        let value = rng.next() as u8;
        expected[start..end].fill(value);
        let op = stream.memset(device.view(start..end).unwrap(), value);
        let Some(view) = report.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };

        let op = stream.copy_d2h(view.into_inner(), pools.host(size));
        let Some((device, back)) = report.settle(op, Fate::pick(&mut rng)).await else {
            continue;
        };
        assert!(
            back[..] == expected[..],
            "stream {index}: corrupted data in a job of {len} bytes"
        );
        report.verified_jobs += 1;
        pools.device[size].push(device);
        pools.host[size].push(back);
    }
    report
}

fn live_buffers() -> (u64, u64) {
    (
        control::device_stats(0).unwrap().live_allocations,
        control::host_stats().unwrap().pinned_allocations,
    )
}

#[test]
fn dropping_futures_at_random_points_corrupts_nothing_and_leaks_nothing() {
    let total: usize = std::env::var("NPU_STRESS_OPERATIONS")
        .map(|v| v.parse().expect("NPU_STRESS_OPERATIONS is a number"))
        .unwrap_or(OPERATIONS);
    let runtime = in_process();
    let context = runtime.device(0).unwrap().primary_context().clone();
    let baseline = live_buffers();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let started = Instant::now();

    let reports: Vec<Report> = tokio.block_on(async {
        let drivers: Vec<_> = (0..STREAMS)
            .map(|i| {
                // Mostly the default strategy, plus two streams of each of the others.
                let strategy = STRATEGIES[if i < 12 { 0 } else { 1 + i % 2 }];
                let stream = Stream::builder(&context)
                    .strategy(strategy)
                    .build()
                    .unwrap();
                tokio::spawn(drive(context.clone(), stream, i, total.div_ceil(STREAMS)))
            })
            .collect();
        let mut reports = Vec::new();
        for driver in drivers {
            let report = tokio::time::timeout(HANG, driver).await.expect("hung");
            reports.push(report.expect("a driver panicked"));
        }
        // Dropping a future never cancels the device work: every dropped operation ran.
        for report in &reports {
            for completion in &report.abandoned {
                completion
                    .wait()
                    .await
                    .expect("a dropped operation still ran");
            }
        }
        reports
    });

    let operations: usize = reports.iter().map(|r| r.operations).sum();
    let verified: usize = reports.iter().map(|r| r.verified_jobs).sum();
    let fates: Vec<usize> = (0..4)
        .map(|f| reports.iter().map(|r| r.fates[f]).sum())
        .collect();
    println!(
        "{operations} operations in {:.2?}: {verified} jobs verified; fates (await, drop \
         unpolled, drop after a poll, drop when done) {fates:?}",
        started.elapsed()
    );
    assert!(operations >= total);
    assert!(fates.iter().all(|&n| n > 0), "every fate occurred");
    assert!(verified > 0);

    // Every buffer is released: those dropped with their futures after their operations
    // completed, the recycled ones now. A completion that was already done when it was
    // awaited above may still be handing its releases to the reaper (Completion::complete
    // marks it done first), so the reaper is flushed until the counts settle, bounded by the
    // hang detector.
    drop(reports);
    let deadline = Instant::now() + HANG;
    loop {
        npu_core::reaper::flush();
        if live_buffers() == baseline {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "buffers leaked: {:?} vs {baseline:?}",
            live_buffers()
        );
        std::thread::yield_now();
    }
}
