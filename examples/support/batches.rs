//! The batch pipeline of `examples/data_pipeline.rs`, which `crates/npu/tests/data_pipeline.rs`
//! includes too: batches of a strided image streamed host → device → host on three streams
//! ordered with an event, with bounded depth and results in order.
//!
//! Each batch: a pinned staging block (from a bounded `PinnedPool`) holds an `H × W` image at a
//! host pitch of `P` elements; a pitched copy (`copy_2d_h2d`) packs it densely into a
//! `DevicePool` block on the upload stream; `scale_f32` scales it in place on the compute
//! stream, which records an event; the download stream zeroes an output block of pitch `OP`
//! (`memset`), waits for that event, copies the scaled image into it (`copy_2d_d2d`), and
//! copies the whole output block to a staging block (a 1D `copy_d2h`). A semaphore bounds the
//! batches in flight (the pools' capacity would too); results come in order through
//! `futures`' `buffered`. Dropping the stream of results, or a batch's future, cancels nothing
//! on the device: each operation keeps its blocks until the device is done, and they go back
//! to their pools then (`PinnedPool::settled`, `DevicePool::settled` wait for that).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use npu::memory::PooledBuffer;
use npu::prelude::*;
use npu::stream::Copy2d;
use npu::{Error, Stream};
use tokio::sync::Semaphore;

/// Rows, row width, host pitch and output pitch of a batch's image, in `f32` elements.
pub(crate) const H: usize = 16;
pub(crate) const W: usize = 60;
pub(crate) const P: usize = 64;
pub(crate) const OP: usize = 72;
pub(crate) const ALPHA: f32 = 3.0;
/// What the staging block holds between the rows' ends and the next row: never copied.
pub(crate) const PAD: f32 = -7.0;
/// The pixel of batch `batch` at row `r`, column `c`: small integers, so scaling is exact.
pub(crate) fn pixel(batch: usize, r: usize, c: usize) -> f32 {
    ((batch * 7 + r * 13 + c) % 251) as f32
}

/// The streams, pools and kernel of a pipeline, and what it counts.
pub(crate) struct Pipeline {
    ctx: Context,
    pub(crate) upload: Stream,
    pub(crate) compute: Stream,
    pub(crate) download: Stream,
    pub(crate) staging: PinnedPool,
    pub(crate) memory: DevicePool,
    scale: Function,
    in_flight: Arc<Semaphore>,
    /// The most batches ever in flight at once.
    pub(crate) peak: AtomicUsize,
    /// Copies in about to be submitted so far (a batch dropped later still ran its copy).
    pub(crate) uploads: AtomicUsize,
    /// Batches started and not yet ended, finished or dropped.
    pub(crate) running: AtomicUsize,
    depth: usize,
}

/// A batch's result: the output image at pitch `OP`, in a staging block.
pub(crate) struct Batch {
    pub(crate) index: usize,
    pub(crate) image: PooledBuffer<f32>,
}

/// A batch that failed, and why.
#[derive(Debug)]
pub(crate) struct BatchError {
    pub(crate) index: usize,
    pub(crate) error: Error,
}

impl Pipeline {
    /// A pipeline in `ctx` running `scale` (`scale_f32`), with at most `depth` batches in
    /// flight.
    pub(crate) async fn new(
        ctx: &Context,
        scale: Function,
        depth: usize,
    ) -> npu::Result<Arc<Pipeline>> {
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
            scale,
            in_flight: Arc::new(Semaphore::new(depth)),
            peak: AtomicUsize::new(0),
            uploads: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            depth,
        }))
    }

    /// One batch through the three streams.
    pub(crate) async fn batch(self: Arc<Self>, index: usize) -> Result<Batch, BatchError> {
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
    pub(crate) fn run(
        self: &Arc<Self>,
        indices: std::ops::Range<usize>,
    ) -> impl futures::Stream<Item = Result<Batch, BatchError>> + Send + 'static + use<> {
        let pipeline = self.clone();
        futures::stream::iter(indices)
            .map(move |index| pipeline.clone().batch(index))
            .buffered(self.depth)
    }
}

/// Counts a batch out of the running ones however it ends (an error, a drop).
struct Leaving<'a>(&'a AtomicUsize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a result is right, byte for byte: the scaled image in the first `W` columns of
/// each row, the memset's zeros in the rest.
pub(crate) fn is_correct(batch: &Batch) -> bool {
    let expected: Vec<f32> = (0..H * OP)
        .map(|k| match (k / OP, k % OP) {
            (r, c) if c < W => pixel(batch.index, r, c) * ALPHA,
            _ => 0.0,
        })
        .collect();
    let got: &[u8] = bytemuck::cast_slice(&batch.image[..]);
    got == bytemuck::cast_slice::<f32, u8>(&expected)
}
