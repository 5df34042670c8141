//! A Tokio data pipeline: batches of a strided image streamed host → device → host on three
//! streams ordered with an event, a few batches in flight at once, results in order; then a
//! consumer that stops early, dropping the stream of results with batches in flight, and
//! every buffer back in its pool once the device is done with it.
//!
//! ```sh
//! cargo run --example data_pipeline               # 64 batches, 3 in flight
//! cargo run --example data_pipeline -- 256 4      # 256 batches, 4 in flight
//! cargo build --example data_pipeline             # on CANN, started directly (docs/ascend.md)
//! NPU_BACKEND=acl NPU_EXAMPLE_KERNELS=/path/kernels.o target/debug/examples/data_pipeline
//! ```
//!
//! `support/batches.rs` is the pipeline (pinned staging from a bounded `PinnedPool`, device
//! blocks from a `DevicePool`, a pitched copy in, `scale_f32`, a memset, a pitched copy and a
//! 1D copy out); `crates/npu/tests/data_pipeline.rs` cancels and faults it every other way.
//! It prints what it did and exits non-zero if a result is wrong or a block never came back.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use npu::memory::PoolStats;
use npu::prelude::*;

#[path = "support/batches.rs"]
mod batches;
#[path = "support/kernels.rs"]
mod kernels;

/// What one run did and found.
#[derive(Debug)]
struct Report {
    batches: usize,
    wrong: usize,
    /// The most batches in flight at once.
    peak: usize,
    /// Batches the early-stopping consumer read before it dropped the stream.
    read: usize,
    /// Copies in the second run submitted: more than it read, the rest dropped in flight.
    submitted: usize,
    staging: PoolStats,
    device: PoolStats,
}

async fn run(count: usize, depth: usize) -> npu::Result<Report> {
    let ctx = Device::open(0)?.primary_context().clone();
    let scale = kernels::load(&ctx)?.function("scale_f32")?;
    let pipeline = batches::Pipeline::new(&ctx, scale, depth).await?;

    // Every batch, each checked and dropped (its staging block back to the pool) as it comes.
    let mut wrong = 0;
    let mut results = Box::pin(pipeline.run(0..count));
    while let Some(result) = results.next().await {
        wrong += usize::from(!batches::is_correct(&result.map_err(failed)?));
    }

    // A consumer that stops early: half the batches, then the stream is dropped. Dropping
    // cancels nothing on the device; each operation keeps its blocks until it is done.
    let (read, before) = (count / 2, pipeline.uploads.load(Ordering::SeqCst));
    let mut results = Box::pin(pipeline.run(0..count));
    for _ in 0..read {
        let result = results.next().await.expect("more batches");
        wrong += usize::from(!batches::is_correct(&result.map_err(failed)?));
    }
    drop(results);
    let submitted = pipeline.uploads.load(Ordering::SeqCst) - before;

    // Every block back in its pool, bounded: a device that never finishes is an error.
    let both = futures::future::join(pipeline.staging.settled(), pipeline.memory.settled());
    tokio::time::timeout(Duration::from_secs(30), both)
        .await
        .map_err(|_| npu::Error::invalid("data_pipeline", "pools", "blocks never came back"))?;
    Ok(Report {
        batches: count,
        wrong,
        peak: pipeline.peak.load(Ordering::SeqCst),
        read,
        submitted,
        staging: pipeline.staging.stats(),
        device: pipeline.memory.stats().cache,
    })
}

/// A failed batch's error, said with its index.
fn failed(failed: batches::BatchError) -> npu::Error {
    eprintln!("batch {} failed: {}", failed.index, failed.error);
    failed.error
}

impl Report {
    fn ok(&self) -> bool {
        let back = |pool: &PoolStats| pool.allocated == 0 && pool.awaiting_blocks == 0;
        self.wrong == 0 && back(&self.staging) && back(&self.device)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|arg| arg.parse::<usize>());
    let count = args.next().and_then(Result::ok).unwrap_or(64).max(2);
    let depth = args.next().and_then(Result::ok).unwrap_or(3).max(1);
    let report = match run(count, depth).await {
        Ok(report) => report,
        Err(err) => {
            eprintln!("data_pipeline failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} batches, at most {} in flight, {} wrong; a consumer read {} and dropped the rest \
         with {} copies in submitted",
        report.batches, report.peak, report.wrong, report.read, report.submitted
    );
    for (name, pool) in [("staging", &report.staging), ("device", &report.device)] {
        println!(
            "{name} pool: {} hits, {} misses, {} bytes handed out, {} awaiting",
            pool.hits, pool.misses, pool.allocated, pool.awaiting_blocks
        );
    }
    match report.ok() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_batch_checks_out_and_every_block_comes_back() {
        let report = run(12, 3).await.unwrap();
        assert!(report.ok(), "{report:?}");
        assert!((1..=3).contains(&report.peak), "{report:?}");
        assert!(report.submitted >= report.read, "{report:?}");
    }
}
