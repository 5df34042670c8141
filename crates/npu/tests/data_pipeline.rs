//! A new user's async data pipeline, written from the README, docs/ and rustdoc only: batches
//! of a strided image streamed host → device → host on three streams ordered with events,
//! with bounded depth, cancelled every way a real pipeline is, faulted mid-run, and observed.
//!
//! Each batch: a pinned staging block (from a bounded `PinnedPool`) holds an `H × W` image at a
//! host pitch of `P` elements; a pitched copy (`copy_2d_h2d`) packs it densely into a
//! `DevicePool` block on the upload stream; `scale_f32` (the simulator's shipped kernel)
//! scales it in place on the compute stream, which records an event; the download stream
//! zeroes an output block of pitch `OP` (`memset`), waits for that event, copies the scaled
//! image into it (`copy_2d_d2d`), and copies the whole output block to a staging block (a 1D
//! `copy_d2h`). A semaphore bounds the batches in flight; results come in order through
//! `futures`' `buffered`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use npu::error::AclCode;
use npu::memory::{HostRegistration, PageAlignedBuffer, PooledBuffer, RegisterFlags};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, FailureMode};
use npu::{Error, Stream};
use tokio::sync::{Mutex, MutexGuard, Semaphore, watch};

/// Rows, row width, host pitch and output pitch of a batch's image, in `f32` elements.
const H: usize = 16;
const W: usize = 60;
const P: usize = 64;
const OP: usize = 72;
const ALPHA: f32 = 3.0;
/// What the staging block holds between the rows' ends and the next row: never copied.
const PAD: f32 = -7.0;
/// A hang detector, not a synchronisation: everything awaited finishes long before.
const HANG: Duration = Duration::from_secs(30);

/// The pixel of batch `batch` at row `r`, column `c`: small integers, so scaling is exact.
fn pixel(batch: usize, r: usize, c: usize) -> f32 {
    ((batch * 7 + r * 13 + c) % 251) as f32
}

/// One test at a time: the hold gate and the fault injections are per device.
async fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::const_new(());
    TURN.lock().await
}

/// A pipeline in a context of its own (a failure in STOP mode stops the whole context).
struct Pipeline {
    ctx: Context,
    upload: Stream,
    compute: Stream,
    download: Stream,
    staging: PinnedPool,
    memory: DevicePool,
    scale: Function,
    in_flight: Arc<Semaphore>,
    /// The most batches ever in flight at once.
    peak: AtomicUsize,
    /// Copies in about to be submitted so far: one counted after a hold of the device began
    /// is queued behind the hold.
    uploads: AtomicUsize,
    running: AtomicUsize,
    depth: usize,
}

/// A batch's result: the output image at pitch `OP`, in a staging block.
struct Batch {
    index: usize,
    image: PooledBuffer<f32>,
}

/// A batch that failed, and why.
#[derive(Debug)]
struct BatchError {
    index: usize,
    error: Error,
}

impl Pipeline {
    async fn new(ctx: &Context, depth: usize) -> npu::Result<Arc<Pipeline>> {
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }?;
        let block = PinnedPool::size_class(H * OP * size_of::<f32>()).unwrap();
        // Two staging blocks a batch (in and out): the pool is the second bound on depth.
        let staging = PinnedPool::builder(ctx)
            .capacity(2 * depth * block)
            .build()?;
        let (upload, memory) = (Stream::new(ctx)?, DevicePool::new(ctx)?);
        // Warm both pools, as a pipeline does before its first batch: every allocation of a
        // run is then a cache hit, which never waits for the device.
        for bytes in [H * P, H * OP].map(|len| len * size_of::<f32>()) {
            staging.reserve(depth, bytes)?;
        }
        for bytes in [H * W, H * OP].map(|len| len * size_of::<f32>()) {
            memory.reserve(&upload, depth, bytes).await?;
        }
        Ok(Arc::new(Pipeline {
            ctx: ctx.clone(),
            upload,
            compute: Stream::new(ctx)?,
            download: Stream::new(ctx)?,
            staging,
            memory,
            scale: module.function("scale_f32")?,
            in_flight: Arc::new(Semaphore::new(depth)),
            peak: AtomicUsize::new(0),
            uploads: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            depth,
        }))
    }

    /// One batch through the three streams.
    async fn batch(self: Arc<Self>, index: usize) -> Result<Batch, BatchError> {
        let failed = |error: Error| BatchError { index, error };
        let _permit = self.in_flight.clone().acquire_owned().await.unwrap();
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(running, Ordering::SeqCst);
        let _running = Leaving(&self.running);
        self.stages(index).await.map_err(failed)
    }

    async fn stages(&self, index: usize) -> npu::Result<Batch> {
        let mut host = self.staging.alloc::<f32>(H * P).await?;
        for (k, value) in host.iter_mut().enumerate() {
            let (r, c) = (k / P, k % P);
            *value = if c < W { pixel(index, r, c) } else { PAD };
        }
        let input = self.memory.alloc::<f32>(&self.upload, H * W).await?;
        let packed = Copy2d {
            width: W,
            height: H,
            src_pitch: P,
            dst_pitch: W,
        };
        self.uploads.fetch_add(1, Ordering::SeqCst);
        let (host, input) = self.upload.copy_2d_h2d(host, input, packed).await?;
        drop(host); // back to the pool: the copy is done with it
        let input = Arc::new(input);
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha, uint32_t reserved) scales n
        // elements of x in place; `input` holds H * W. The download stream reads `input` only
        // after `scaled`, recorded behind the launch.
        let launch = unsafe {
            self.compute
                .launch(&self.scale, 4, (input.clone(), (H * W) as u64, ALPHA, 0u32))
        };
        let scaled = Event::new(&self.ctx)?;
        scaled.record(&self.compute)?;
        let output = self.memory.alloc::<f32>(&self.download, H * OP).await?;
        let output = self.download.memset(output, 0).await?;
        self.download.wait_event(&scaled)?;
        let pitched = Copy2d {
            width: W,
            height: H,
            src_pitch: W,
            dst_pitch: OP,
        };
        let copy = self.download.copy_2d_d2d(input, output, pitched);
        // The kernel's own failure, not the copy's: the copy ran after it whatever it did.
        launch.await?;
        let (_input, output) = copy.await?;
        let image = self.staging.alloc::<f32>(H * OP).await?;
        let (_output, image) = self.download.copy_d2h(output, image).await?;
        Ok(Batch { index, image })
    }

    /// `indices` in order, at most `depth` batches in flight.
    fn run(
        self: &Arc<Self>,
        indices: std::ops::Range<usize>,
    ) -> impl futures::Stream<Item = Result<Batch, BatchError>> + Send + 'static + use<> {
        let pipeline = self.clone();
        futures::stream::iter(indices)
            .map(move |index| pipeline.clone().batch(index))
            .buffered(self.depth)
    }

    /// Waits (bounded) until every staging and device block is back in its pool.
    async fn settled(&self) {
        let both = futures::future::join(self.staging.settled(), self.memory.settled());
        tokio::time::timeout(HANG, both)
            .await
            .expect("every block came back");
        let (host, device) = (self.staging.stats(), self.memory.stats().cache);
        assert_eq!((host.allocated, host.awaiting_blocks), (0, 0), "{host:?}");
        assert_eq!(
            (device.allocated, device.awaiting_blocks),
            (0, 0),
            "{device:?}"
        );
    }

    /// Polls `results` (checking what it yields) until `count` copies in have been
    /// submitted since `since`.
    async fn until_uploads<R>(&self, results: &mut R, since: usize, count: usize)
    where
        R: futures::Stream<Item = Result<Batch, BatchError>> + Unpin,
    {
        while self.uploads.load(Ordering::SeqCst) < since + count {
            match results.next().now_or_never() {
                Some(result) => check(&result.unwrap().unwrap()),
                None => tokio::task::yield_now().await,
            }
        }
    }

    /// Blocks handed out or on their way back, in both pools.
    fn blocks_out(&self) -> (usize, usize) {
        let (host, device) = (self.staging.stats(), self.memory.stats().cache);
        (
            host.allocated + host.awaiting_bytes,
            device.allocated + device.awaiting_bytes,
        )
    }
}

/// Counts a batch out of the running ones however it ends (an error, a drop).
struct Leaving<'a>(&'a AtomicUsize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Checks a result byte for byte: the scaled image in the first `W` columns of each row,
/// the memset's zeros in the rest.
fn check(batch: &Batch) {
    let expected: Vec<f32> = (0..H * OP)
        .map(|k| match (k / OP, k % OP) {
            (r, c) if c < W => pixel(batch.index, r, c) * ALPHA,
            _ => 0.0,
        })
        .collect();
    let got: &[u8] = bytemuck::cast_slice(&batch.image[..]);
    assert!(
        got == bytemuck::cast_slice::<f32, u8>(&expected),
        "batch {} differs",
        batch.index
    );
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

async fn fresh_context() -> Context {
    Device::open(0).unwrap().create_context().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_come_back_byte_for_byte_with_bounded_depth() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let pipeline = Pipeline::new(&ctx, 3).await.unwrap();
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
    pipeline.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_vec_registers_only_page_aligned_and_a_page_aligned_buffer_streams() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let stream = Stream::new(&ctx).unwrap();
    // A user's frame in a Vec: the global allocator does not align it to a page, so ACL's
    // rule (4 KiB aligned, whole pages) refuses it, by name, and hands it back.
    let frame: Vec<f32> = (0..1024).map(|k| k as f32).collect();
    if frame.as_ptr() as usize % 4096 != 0 {
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
    let ctx = fresh_context().await;
    // One batch at a time: `buffered` starts the next batch only when the consumer asks for
    // it, so the one asked for after the hold is in flight behind it, deterministically.
    // (Deeper, batches started before the hold may or may not have run by then.)
    let pipeline = Pipeline::new(&ctx, 1).await.unwrap();
    let mut results = Box::pin(pipeline.run(0..100));
    for expected in 0..2 {
        let batch = results.next().await.unwrap().unwrap();
        assert_eq!(batch.index, expected);
        check(&batch);
    }
    let held = sim::hold(&ctx.device()).unwrap();
    let since = pipeline.uploads.load(Ordering::SeqCst);
    pipeline.until_uploads(&mut results, since, 1).await;
    assert!(pipeline.blocks_out() != (0, 0), "batch 2 is in flight");
    drop(results); // the consumer is gone
    assert!(
        pipeline.blocks_out() != (0, 0),
        "the device still owns the dropped batches' memory"
    );
    held.release().unwrap();
    pipeline.settled().await;
    // And the streams and pools carry on.
    let batch = pipeline.clone().batch(7).await.unwrap();
    check(&batch);
    drop(batch);
    pipeline.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_timing_out_keeps_its_memory_until_the_device_is_done() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let pipeline = Pipeline::new(&ctx, 2).await.unwrap();
    let held = sim::hold(&ctx.device()).unwrap();
    // The pools are warm, so the stage's first wait is its copy in, on the held device.
    let stage = tokio::time::timeout(Duration::from_millis(20), pipeline.clone().batch(0)).await;
    assert!(
        stage.is_err(),
        "the device is held: the deadline passes first"
    );
    let (host, device) = pipeline.blocks_out();
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
    pipeline.settled().await;
    check(&pipeline.clone().batch(1).await.unwrap());
    pipeline.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_with_batches_in_flight_returns_every_buffer() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let pipeline = Pipeline::new(&ctx, 3).await.unwrap();
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
    while pipeline.uploads.load(Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pipeline.running.load(Ordering::SeqCst), 3);
    shutdown.send(true).unwrap();
    let seen = tokio::time::timeout(HANG, worker).await.unwrap().unwrap();
    assert_eq!(seen, 0, "nothing finished on the held device");
    assert!(
        pipeline.blocks_out() != (0, 0),
        "the device still owns the dropped batches' memory"
    );
    assert_eq!(
        pipeline.running.load(Ordering::SeqCst),
        0,
        "every batch ended"
    );
    held.release().unwrap();
    pipeline.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_fault_fails_its_batch_only_and_the_streams_go_on() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let pipeline = Pipeline::new(&ctx, 1).await.unwrap();
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
    pipeline.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_in_stop_mode_stops_the_context_and_a_new_context_recovers() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    // One batch at a time: batch 0 is done before batch 1's kernel stops the context.
    let pipeline = Pipeline::new(&ctx, 1).await.unwrap();
    pipeline
        .compute
        .set_failure_mode(FailureMode::Stop)
        .unwrap();
    sim::fail_task(&pipeline.compute, 2, AclCode(507015)).unwrap();
    let results = consume(pipeline.run(0..5)).await;
    assert_eq!(*results[0].as_ref().unwrap(), 0);
    for result in &results[1..] {
        let failed = result.as_ref().err().expect("the context stopped");
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
    pipeline.settled().await;
    // A new context on the same device does, without reopening it.
    let recovered = Pipeline::new(&fresh_context().await, 2).await.unwrap();
    let results = consume(recovered.run(0..3)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    recovered.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_user_can_count_for_the_pipeline() {
    let _turn = turn().await;
    let ctx = fresh_context().await;
    let pipeline = Pipeline::new(&ctx, 2).await.unwrap();
    let before = npu::stream::reactor_stats();
    let results = consume(pipeline.run(0..4)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    pipeline.settled().await;
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
    assert_eq!(after.pending(), before.pending(), "at rest: {after:?}");
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
