//! A new user's async data pipeline, written from the README, docs/ and rustdoc only: batches
//! of a strided image streamed host → device → host on three streams ordered with events,
//! with bounded depth, cancelled every way a real pipeline is, faulted mid-run, and observed.
//!
//! The pipeline is the one `examples/data_pipeline.rs` runs (`examples/support/batches.rs`),
//! with `scale_f32` from the simulator's shipped kernel library.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use npu::Stream;
use npu::device::DeviceStatus;
use npu::error::AclCode;
use npu::memory::{HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::sim;
use npu::stream::FailureMode;
use tokio::sync::{Mutex, MutexGuard, watch};

#[path = "../../../examples/support/batches.rs"]
mod batches;
mod common;

use batches::{Batch, BatchError, H, OP, Pipeline, W, is_correct};
use common::{OpSpan, mark, record_op_spans, since};

/// A hang detector, not a synchronisation: everything awaited finishes long before.
const HANG: Duration = Duration::from_secs(30);

/// One test at a time: the hold gate and the fault injections are per device, and the
/// reactor's counters and the recorded spans are the process's. The recording subscriber is
/// installed before any test touches a device (docs/observability.md says why).
async fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::const_new(());
    record_op_spans();
    TURN.lock().await
}

/// A pipeline of depth `depth` in a context of its own (a failure in STOP mode stops the
/// whole context).
async fn new_pipeline(ctx: &Context, depth: usize) -> Arc<Pipeline> {
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
    let scale = module.function("scale_f32").unwrap();
    Pipeline::new(ctx, scale, depth).await.unwrap()
}

/// Waits (bounded) until every staging and device block of `pipeline` is back in its pool.
async fn settled(pipeline: &Pipeline) {
    let both = futures::future::join(pipeline.staging.settled(), pipeline.memory.settled());
    tokio::time::timeout(HANG, both)
        .await
        .expect("every block came back");
    let (host, device) = (pipeline.staging.stats(), pipeline.memory.stats().cache);
    assert_eq!((host.allocated, host.awaiting_blocks), (0, 0), "{host:?}");
    assert_eq!(
        (device.allocated, device.awaiting_blocks),
        (0, 0),
        "{device:?}"
    );
}

/// Polls `results` (checking what it yields) until `count` copies in of `pipeline` have been
/// submitted since `since`.
async fn until_uploads<R>(pipeline: &Pipeline, results: &mut R, since: usize, count: usize)
where
    R: futures::Stream<Item = Result<Batch, BatchError>> + Unpin,
{
    let uploaded = async {
        while pipeline.uploads.load(Ordering::SeqCst) < since + count {
            match results.next().now_or_never() {
                Some(result) => check(&result.unwrap().unwrap()),
                None => tokio::task::yield_now().await,
            }
        }
    };
    tokio::time::timeout(HANG, uploaded)
        .await
        .expect("the copies in were submitted");
}

/// Blocks handed out or on their way back, in both pools of `pipeline`.
fn blocks_out(pipeline: &Pipeline) -> (usize, usize) {
    let (host, device) = (pipeline.staging.stats(), pipeline.memory.stats().cache);
    (
        host.allocated + host.awaiting_bytes,
        device.allocated + device.awaiting_bytes,
    )
}

/// Asserts a result is right, byte for byte.
fn check(batch: &Batch) {
    assert!(is_correct(batch), "batch {} differs", batch.index);
}

/// Consumes a run as a real consumer does: each result checked and its staging block given
/// back before the next (a consumer that kept every result would hold the staging pool's
/// whole capacity and stall the run: that is the pool's backpressure). The outcome of each
/// batch, in order: its index, or its failure.
async fn consume(
    results: impl futures::Stream<Item = Result<Batch, BatchError>>,
) -> Vec<Result<usize, BatchError>> {
    let checked = results.map(|result| {
        result.map(|batch| {
            check(&batch);
            batch.index
        })
    });
    tokio::time::timeout(HANG, checked.collect())
        .await
        .expect("the run ended")
}

/// A context of its own on device 0, so that a stop or a fault of one test stays there.
fn fresh_context() -> Context {
    Device::open(0).unwrap().create_context().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_come_back_byte_for_byte_with_bounded_depth() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 3).await;
    let indices: Vec<usize> = consume(pipeline.run(0..24))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(indices, (0..24).collect::<Vec<_>>(), "all, in order");
    let peak = pipeline.peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "at most the depth in flight: {peak}");
    let block = PinnedPool::size_class(H * OP * 4).unwrap();
    let host = pipeline.staging.stats();
    assert!(
        host.peak_reserved <= 6 * block,
        "the pool's capacity held: {host:?}"
    );
    settled(&pipeline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_vec_registers_only_page_aligned_and_a_page_aligned_buffer_streams() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let stream = Stream::new(&ctx).unwrap();
    // A user's frame in a Vec: the global allocator does not align it to a page, so ACL's
    // rule (4 KiB aligned, whole pages) refuses it, by name, and hands it back.
    let frame: Vec<f32> = (0..1024).map(|k| k as f32).collect();
    if !(frame.as_ptr() as usize).is_multiple_of(4096) {
        let refused = HostRegistration::new(&ctx, frame, RegisterFlags::PINNED).unwrap_err();
        let text = refused.error.to_string();
        assert!(
            text.contains("HostRegistration::new") && text.contains("4 KiB"),
            "{text}"
        );
        assert_eq!(refused.buffer.len(), 1024, "handed back");
    }
    // What the docs offer for memory to register: a page-aligned buffer, filled in place.
    let mut aligned = PageAlignedBuffer::<f32>::new(1024).unwrap();
    for (k, x) in aligned.iter_mut().enumerate() {
        *x = k as f32;
    }
    let host = HostRegistration::new(&ctx, aligned, RegisterFlags::PINNED).unwrap();
    let device = DeviceBuffer::<f32>::new(&ctx, 1024).unwrap();
    let (host, device) = stream.copy_h2d(host, device).await.unwrap();
    let back: PageAlignedBuffer<f32> = host.into_inner().await.unwrap();
    assert_eq!(device.to_vec_blocking().unwrap(), back.to_vec());
    assert_eq!(sim::host_stats().unwrap().registrations, 0, "unregistered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_stops_early_gets_every_buffer_back() {
    let _turn = turn().await;
    let ctx = fresh_context();
    // One batch at a time: `buffered` starts the next batch only when the consumer asks for
    // it, so the one asked for after the hold is in flight behind it, deterministically.
    // (Deeper, batches started before the hold may or may not have run by then.)
    let pipeline = new_pipeline(&ctx, 1).await;
    let mut results = Box::pin(pipeline.run(0..100));
    for expected in 0..2 {
        let batch = results.next().await.unwrap().unwrap();
        assert_eq!(batch.index, expected);
        check(&batch);
    }
    let held = sim::hold(&ctx.device()).unwrap();
    let since = pipeline.uploads.load(Ordering::SeqCst);
    until_uploads(&pipeline, &mut results, since, 1).await;
    assert!(blocks_out(&pipeline) != (0, 0), "batch 2 is in flight");
    drop(results); // the consumer is gone
    assert!(
        blocks_out(&pipeline) != (0, 0),
        "the device still owns the dropped batches' memory"
    );
    held.release().unwrap();
    settled(&pipeline).await;
    // And the streams and pools carry on.
    let batch = pipeline.clone().batch(7).await.unwrap();
    check(&batch);
    drop(batch);
    settled(&pipeline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_timing_out_keeps_its_memory_until_the_device_is_done() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 2).await;
    let held = sim::hold(&ctx.device()).unwrap();
    // The pools are warm, so the stage's first wait is its copy in, on the held device.
    let stage = tokio::time::timeout(Duration::from_millis(20), pipeline.clone().batch(0)).await;
    assert!(
        stage.is_err(),
        "the device is held: the deadline passes first"
    );
    let (host, device) = blocks_out(&pipeline);
    assert!(host > 0 && device > 0, "the dropped copy owns its blocks");
    // Waiting for the pools to settle: pending while the device owns the blocks, woken by
    // their return once it is done.
    let mut settling = tokio_test::task::spawn(pipeline.staging.settled());
    let mut device_settling = tokio_test::task::spawn(pipeline.memory.settled());
    assert!(settling.poll().is_pending() && device_settling.poll().is_pending());
    held.release().unwrap();
    let woken = async {
        while !(settling.is_woken() && device_settling.is_woken()) {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(HANG, woken)
        .await
        .expect("the returns woke both");
    assert!(settling.poll().is_ready() && device_settling.poll().is_ready());
    settled(&pipeline).await;
    check(&pipeline.clone().batch(1).await.unwrap());
    settled(&pipeline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_with_batches_in_flight_returns_every_buffer() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 3).await;
    let (shutdown, mut stop) = watch::channel(false);
    // The device is held from the start: every batch the worker starts stays in flight.
    let held = sim::hold(&ctx.device()).unwrap();
    let worker = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            let cancelled = async move { stop.wait_for(|stop| *stop).await.map(drop) };
            let results = pipeline.run(0..1000).take_until(Box::pin(cancelled));
            consume(results).await.len()
        }
    });
    // Three batches (the depth) have queued their copies in behind the hold.
    let uploaded = async {
        while pipeline.uploads.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(HANG, uploaded)
        .await
        .expect("three copies in were submitted");
    assert_eq!(pipeline.running.load(Ordering::SeqCst), 3);
    shutdown.send(true).unwrap();
    let seen = tokio::time::timeout(HANG, worker).await.unwrap().unwrap();
    assert_eq!(seen, 0, "nothing finished on the held device");
    assert!(
        blocks_out(&pipeline) != (0, 0),
        "the device still owns the dropped batches' memory"
    );
    assert_eq!(
        pipeline.running.load(Ordering::SeqCst),
        0,
        "every batch ended"
    );
    held.release().unwrap();
    settled(&pipeline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_fault_fails_its_batch_only_and_the_streams_go_on() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 1).await;
    // The compute stream runs one device task a batch: its third is batch 2's kernel.
    sim::fail_task(&pipeline.compute, 3, AclCode(507015)).unwrap();
    for (index, result) in consume(pipeline.run(0..6)).await.into_iter().enumerate() {
        match result {
            Ok(batch) => assert_eq!(batch, index),
            Err(BatchError {
                index: failed,
                error,
            }) => {
                assert_eq!((index, failed), (2, 2), "{error}");
                assert_eq!(error.acl_code(), Some(AclCode(507015)), "{error}");
                let text = error.to_string();
                assert!(
                    text.contains(&format!("stream {}", pipeline.compute.id())),
                    "{text}"
                );
            }
        }
    }
    // The stream's record keeps the first failure since the last `synchronize`, awaited or
    // not: the next one reports the kernel's fault again, once.
    let again = pipeline.compute.synchronize().await.unwrap_err().error;
    assert_eq!(again.acl_code(), Some(AclCode(507015)), "{again}");
    assert!(
        again
            .to_string()
            .starts_with("aclrtLaunchKernelWithHostArgs failed"),
        "{again}"
    );
    pipeline.compute.synchronize().await.unwrap();
    // A failed operation hands its buffers back (`OpError::value`), as the docs promise: the
    // block is ours again, and dropping it returns it to its pool.
    sim::fail_task(&pipeline.compute, 1, AclCode(507015)).unwrap();
    let block = pipeline
        .memory
        .alloc::<f32>(&pipeline.compute, H * W)
        .await
        .unwrap();
    let failed = pipeline.compute.memset(block, 0).await.unwrap_err();
    assert_eq!(failed.error.acl_code(), Some(AclCode(507015)));
    let block = failed
        .value
        .expect("the failed memset's block, handed back");
    assert_eq!(block.len(), H * W);
    drop(block);
    settled(&pipeline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_device_fails_its_batches_as_lost_and_another_device_serves() {
    let _turn = turn().await;
    // Device 1, which no other test of this file uses: a loss is final for the process.
    let device = Device::open(1).unwrap();
    let ctx = device.create_context().unwrap();
    let pipeline = new_pipeline(&ctx, 2).await;
    assert_eq!(consume(pipeline.run(0..2)).await.len(), 2);
    // Batches in flight on the held device when it is lost.
    let held = sim::hold(&device).unwrap();
    let mut results = Box::pin(pipeline.run(2..10));
    let since = pipeline.uploads.load(Ordering::SeqCst);
    until_uploads(&pipeline, &mut results, since, 2).await;
    // `lose` waits for the device's running tasks: not on a Tokio worker.
    let losing = device.clone();
    tokio::task::spawn_blocking(move || sim::lose(&losing))
        .await
        .unwrap()
        .unwrap();
    for outcome in consume(results).await {
        let failed = outcome.expect_err("nothing runs on a lost device");
        assert!(
            failed.error.is_device_lost(),
            "batch {}: {}",
            failed.index,
            failed.error
        );
    }
    drop(held);
    // The failed batches' blocks still come back: the device will never touch them again.
    settled(&pipeline).await;
    assert_eq!(device.status().unwrap(), DeviceStatus::Abnormal);
    assert!(
        Stream::new(&ctx).is_err(),
        "no new stream on the lost device"
    );
    // Recovery is another device, not a new stream, context or open of this one.
    let other = new_pipeline(&fresh_context(), 2).await;
    assert!(consume(other.run(0..4)).await.iter().all(Result::is_ok));
    settled(&other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_in_stop_mode_stops_the_context_and_a_new_context_recovers() {
    let _turn = turn().await;
    let ctx = fresh_context();
    // One batch at a time: batch 0 is done before batch 1's kernel stops the context.
    let pipeline = new_pipeline(&ctx, 1).await;
    pipeline
        .compute
        .set_failure_mode(FailureMode::Stop)
        .unwrap();
    sim::fail_task(&pipeline.compute, 2, AclCode(507015)).unwrap();
    let results = consume(pipeline.run(0..5)).await;
    assert_eq!(*results[0].as_ref().unwrap(), 0);
    for result in &results[1..] {
        let failed = result.as_ref().expect_err("the context stopped");
        assert!(failed.error.acl_code().is_some(), "typed: {}", failed.error);
    }
    // Every stream of the context is stopped, a new one too: a new stream cannot recover.
    let again = Stream::new(&ctx).unwrap();
    let refused = again
        .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)
        .await;
    assert!(
        refused.is_err(),
        "the stopped context refuses a new stream's work"
    );
    // Its blocks still came back: the failed work is done with them.
    settled(&pipeline).await;
    // A new context on the same device does, without reopening it.
    let recovered = new_pipeline(&fresh_context(), 2).await;
    let results = consume(recovered.run(0..3)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    settled(&recovered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_user_can_count_for_the_pipeline() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 2).await;
    let before = npu::stream::reactor_stats();
    let results = consume(pipeline.run(0..4)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    settled(&pipeline).await;
    // The event record and the stream's wait on it are watched by the reactor like the
    // operations, and nothing awaits them: the compute stream's record is its last work, so
    // every operation awaited does not mean the reactor has seen it done. A `synchronize` of
    // each stream, which completes after everything queued before it, does.
    for stream in [&pipeline.upload, &pipeline.compute, &pipeline.download] {
        stream.synchronize().await.unwrap();
    }
    let after = npu::stream::reactor_stats();
    // Seven a batch went through the reactor (the 2D copy in, the kernel, the event record,
    // the memset, the wait, the 2D copy out, the 1D copy out; the pools are warm, so no
    // allocation is on the device), then the three synchronisations.
    assert_eq!(
        after.registered - before.registered,
        4 * 7 + 3,
        "{before:?} {after:?}"
    );
    // At most where it started: an event record an earlier test left unawaited (they take
    // turns, but do not all synchronise) may be seen done meanwhile.
    assert!(
        after.pending() <= before.pending(),
        "at rest: {before:?} {after:?}"
    );
    let host = pipeline.staging.stats();
    // Two staging and two device blocks a batch, all cache hits; the misses are the blocks
    // the warm-up reserved (two sizes, `depth` of each).
    let device = pipeline.memory.stats().cache;
    for stats in [host, device] {
        assert_eq!((stats.hits, stats.misses), (4 * 2, 2 * 2), "{stats:?}");
    }
    let stats = sim::device_stats(&ctx.device()).unwrap();
    assert!(!stats.lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_batch_is_a_trace_of_spans_on_its_three_streams() {
    let _turn = turn().await;
    let ctx = fresh_context();
    let pipeline = new_pipeline(&ctx, 1).await;
    let from = mark();
    // Batch 1's kernel faults: its span carries the error, and the batch stops there.
    sim::fail_task(&pipeline.compute, 2, AclCode(507015)).unwrap();
    let outcomes = consume(pipeline.run(0..3)).await;
    assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 1);
    settled(&pipeline).await;
    let seen = since(from);
    let on = |stream: &Stream, op: &str| -> Vec<OpSpan> {
        let id = stream.id().to_string();
        let of = |span: &&OpSpan| {
            span.fields.get("stream") == Some(&id)
                && span.fields.get("op").map(String::as_str) == Some(op)
        };
        seen.spans.iter().filter(of).cloned().collect()
    };
    let field = |span: &OpSpan, name: &str| span.fields.get(name).cloned().unwrap_or_default();
    let image_bytes = (H * W * size_of::<f32>()).to_string();
    let uploads = on(&pipeline.upload, "aclrtMemcpy2dAsync");
    assert_eq!(uploads.len(), 3);
    for span in &uploads {
        assert_eq!(
            (field(span, "direction"), field(span, "bytes")),
            ("h2d".into(), image_bytes.clone())
        );
        assert_eq!(span.messages(), ["completed"], "{:?}", span.fields);
    }
    let kernels = on(&pipeline.compute, "aclrtLaunchKernelWithHostArgs");
    assert_eq!(kernels.len(), 3);
    for (index, span) in kernels.iter().enumerate() {
        assert_eq!(field(span, "kernel"), "scale_f32");
        match index {
            1 => {
                assert!(field(span, "error").contains("507015"), "{:?}", span.fields);
                assert_eq!(span.messages(), ["failed"]);
            }
            _ => assert_eq!(span.messages(), ["completed"], "{:?}", span.fields),
        }
    }
    assert_eq!(on(&pipeline.download, "aclrtMemsetAsync").len(), 3);
    // The failed batch's pitched copy out was submitted, then dropped unawaited when its
    // kernel's error ended the batch: a span with no outcome, closed all the same.
    let pitched = on(&pipeline.download, "aclrtMemcpy2dAsync");
    let outcomes: Vec<_> = pitched.iter().map(OpSpan::messages).collect();
    assert_eq!(outcomes, [vec!["completed"], vec![], vec!["completed"]]);
    assert_eq!(
        on(&pipeline.download, "aclrtMemcpyAsync").len(),
        2,
        "no copy out for batch 1"
    );
    assert!(
        seen.spans.iter().all(|span| span.closed),
        "every span closed"
    );
}
