//! The copy pipeline of `examples/copy_pipeline.rs`, also measured by `benches/` (which
//! includes this file): chunks of data copied host → device, through a kernel, and device →
//! host, done serially on one stream and pipelined on three.
//!
//! The kernel is `vector_add_f32(in, bias, out, n)`: each chunk plus a bias vector that stays
//! on the device. The pipelined run overlaps the copy in of chunk `t + 1`, the kernel of chunk
//! `t` and the copy out of chunk `t - 1`, each on its own stream, with double buffering: two
//! device input buffers and two device output buffers, used by alternate chunks.
//!
//! How the stages are ordered:
//! - **copy in → kernel**: the copy owns the input buffer and hands it back when it is done;
//!   the kernel is launched with it after that (a host-side hand-over, by ownership).
//! - **kernel → copy out**: the output buffer is shared (`Arc`) by the kernel and the copy
//!   out, so the copy out is submitted right after the launch, without waiting for it, and an
//!   event recorded after the kernel orders it on the device (`wait_event`).
//! - **copy out → next kernel into the same output buffer**: another event, recorded after the
//!   copy out, makes the compute stream wait before the kernel two chunks later overwrites it.
//!
//! Host buffers come from a [`PinnedPool`]; a block goes back to the pool once the device is
//! done with it.
//! The device buffers are allocated once per run and circulate between the stages (double
//! buffering), so they are not taken from a `DevicePool`: nothing is allocated per chunk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use npu::Stream;
use npu::prelude::*;
use npu::sim::TimingModel;
use tokio::sync::mpsc;

/// Blocks per kernel launch.
const BLOCKS: u32 = 8;
/// Input and output buffers on the device: double buffering.
const SLOTS: usize = 2;
/// Pool blocks the pipeline may hold at once: a copy in, the copies out queued behind the
/// compute stage, the one being verified, and blocks on their way back to the pool.
const POOL_BLOCKS: usize = 8;

/// The kernel name, as the timing model knows it.
pub(crate) const KERNEL: &str = "vector_add_f32";

/// A timing model in which a copy of `chunk_bytes` (either direction) and one kernel launch
/// each take `stage` of simulated device time.
pub(crate) fn equal_stages(chunk_bytes: usize, stage: Duration) -> TimingModel {
    let stage_ns = stage.as_nanos().max(1) as u64;
    let bytes_per_sec = (chunk_bytes as u128 * 1_000_000_000 / u128::from(stage_ns)) as u64;
    TimingModel::default()
        .h2d_bandwidth(bytes_per_sec)
        .d2h_bandwidth(bytes_per_sec)
        .kernel(KERNEL, stage_ns)
}

/// Watches the operations a run submits. The example records events around each one to draw
/// its timeline from event timestamps where there is no simulator trace (on CANN); `()`
/// watches nothing.
pub(crate) trait Marks {
    /// Submits `op` (on `stream`; `bytes` it moves, 0 for a kernel), recording whatever marks
    /// the implementation wants before and after it.
    fn mark<T: Send + 'static>(
        &self,
        stream: &Stream,
        name: &'static str,
        bytes: usize,
        op: impl FnOnce() -> npu::Op<T>,
    ) -> npu::Result<npu::Op<T>>;

    /// Records `event` on `stream`, marking the record if the implementation wants.
    fn record(&self, event: &Event, stream: &Stream) -> npu::Result<()> {
        event.record(stream)
    }

    /// Makes `stream` wait for `event`, marking the wait if the implementation wants.
    fn wait(&self, stream: &Stream, event: &Event) -> npu::Result<()> {
        stream.wait_event(event)
    }
}

impl Marks for () {
    fn mark<T: Send + 'static>(
        &self,
        _: &Stream,
        _: &'static str,
        _: usize,
        op: impl FnOnce() -> npu::Op<T>,
    ) -> npu::Result<npu::Op<T>> {
        Ok(op())
    }
}

/// The kernel's arguments: input, bias, output, element count.
type KernelArgs = (
    DeviceBuffer<f32>,
    Arc<DeviceBuffer<f32>>,
    Arc<DeviceBuffer<f32>>,
    u64,
);

/// What one run measured.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Wall time from the first submission to the last verified chunk.
    pub(crate) wall: Duration,
    /// Chunks whose result differed from the host's computation.
    pub(crate) wrong_chunks: usize,
    /// The ids of the streams the run used (the tracks of its timeline).
    pub(crate) streams: Vec<u64>,
}

/// The work both runs do, and what they share.
pub(crate) struct Work {
    ctx: Context,
    /// Uploads the bias, then runs the serial version.
    stream: Stream,
    pool: PinnedPool,
    add: Function,
    bias: Arc<DeviceBuffer<f32>>,
    chunk_len: usize,
    chunks: usize,
    input: Vec<f32>,
    expected: Vec<f32>,
}

impl Work {
    /// `chunks` chunks of `chunk_len` elements, processed by `add` (`vector_add_f32`).
    pub(crate) async fn new(
        ctx: &Context,
        add: Function,
        chunks: usize,
        chunk_len: usize,
    ) -> npu::Result<Work> {
        let chunk_bytes = chunk_len * size_of::<f32>();
        let pool = PinnedPool::builder(ctx)
            .capacity(POOL_BLOCKS * PinnedPool::size_class(chunk_bytes).unwrap_or(chunk_bytes))
            .build()?;
        // Pinning costs milliseconds a block: pin them all now, not inside the timed run.
        pool.reserve(POOL_BLOCKS, chunk_bytes)?;
        // Small integers: every sum is exact in f32, so results compare bit for bit.
        let bias = |i: usize| (i % 7) as f32;
        let input: Vec<f32> = (0..chunks * chunk_len).map(|k| (k % 1021) as f32).collect();
        let expected = input
            .iter()
            .enumerate()
            .map(|(k, x)| x + bias(k % chunk_len))
            .collect();
        let stream = Stream::new(ctx)?;
        let bias_values: Vec<f32> = (0..chunk_len).map(bias).collect();
        let bias = stream.upload(&bias_values).await?;
        Ok(Work {
            ctx: ctx.clone(),
            stream,
            pool,
            add,
            bias: Arc::new(bias),
            chunk_len,
            chunks,
            input,
            expected,
        })
    }

    fn range(&self, t: usize) -> std::ops::Range<usize> {
        t * self.chunk_len..(t + 1) * self.chunk_len
    }

    /// A pool block holding chunk `t`'s input.
    async fn staged_input(&self, t: usize) -> npu::Result<PooledBuffer<f32>> {
        let mut host = self.pool.alloc::<f32>(self.chunk_len).await?;
        host.copy_from_slice(&self.input[self.range(t)]);
        Ok(host)
    }

    /// Whether `out` is chunk `t`'s expected result, bit for bit.
    fn is_correct(&self, t: usize, out: &[f32]) -> bool {
        let expected: &[u8] = bytemuck::cast_slice(&self.expected[self.range(t)]);
        bytemuck::cast_slice::<f32, u8>(out) == expected
    }

    /// Launches the kernel for one chunk: `output = input + bias`.
    fn launch(
        &self,
        stream: &Stream,
        input: DeviceBuffer<f32>,
        output: Arc<DeviceBuffer<f32>>,
    ) -> npu::Op<KernelArgs> {
        let n = self.chunk_len as u64;
        // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
        // elements of `input` and the bias and writes n of `output`; all hold chunk_len.
        // `output` is shared with copies out on another stream: callers order them with
        // events (the copy out after this launch, and this launch after the previous copy
        // out of the same buffer), so no device work touches it while the kernel writes.
        unsafe { stream.launch(&self.add, BLOCKS, (input, self.bias.clone(), output, n)) }
    }

    /// Every chunk on one stream, each stage awaited before the next.
    pub(crate) async fn serial(&self, marks: &impl Marks) -> npu::Result<Outcome> {
        let stream = &self.stream;
        let mut input = DeviceBuffer::<f32>::new(&self.ctx, self.chunk_len)?;
        let output = Arc::new(DeviceBuffer::<f32>::new(&self.ctx, self.chunk_len)?);
        let mut wrong_chunks = 0;
        let start = Instant::now();
        let bytes = self.chunk_len * size_of::<f32>();
        for t in 0..self.chunks {
            let host = self.staged_input(t).await?;
            let (host, device_in) = marks
                .mark(stream, "H2D", bytes, || stream.copy_h2d(host, input))?
                .await?;
            let (device_in, ..) = marks
                .mark(stream, KERNEL, 0, || {
                    self.launch(stream, device_in, output.clone())
                })?
                .await?;
            input = device_in;
            let (_, host) = marks
                .mark(stream, "D2H", bytes, || {
                    stream.copy_d2h(output.clone(), host)
                })?
                .await?;
            wrong_chunks += usize::from(!self.is_correct(t, &host));
        }
        Ok(Outcome {
            wall: start.elapsed(),
            wrong_chunks,
            streams: vec![stream.id()],
        })
    }

    /// The same chunks on three streams (copy in, compute, copy out), overlapped.
    pub(crate) async fn pipelined(&self, marks: &impl Marks) -> npu::Result<Outcome> {
        let ctx = &self.ctx;
        let bytes = self.chunk_len * size_of::<f32>();
        let (h2d, compute, d2h) = (Stream::new(ctx)?, Stream::new(ctx)?, Stream::new(ctx)?);
        // Device input buffers circulate between the copy-in and compute stages.
        let (free_tx, mut free_rx) = mpsc::channel::<DeviceBuffer<f32>>(SLOTS);
        for _ in 0..SLOTS {
            let buffer = DeviceBuffer::new(ctx, self.chunk_len)?;
            free_tx.send(buffer).await.map_err(|_| closed())?;
        }
        let (loaded_tx, mut loaded_rx) = mpsc::channel::<(usize, DeviceBuffer<f32>)>(SLOTS);
        let (out_tx, mut out_rx) = mpsc::channel(SLOTS);
        let start = Instant::now();

        // Copy in: the next free input buffer receives the next chunk.
        let copy_in = async {
            for t in 0..self.chunks {
                let host = self.staged_input(t).await?;
                let buffer = free_rx.recv().await.ok_or_else(closed)?;
                let copy = marks.mark(&h2d, "H2D", bytes, || h2d.copy_h2d(host, buffer))?;
                let (_host, buffer) = copy.await?;
                loaded_tx.send((t, buffer)).await.map_err(|_| closed())?;
            }
            Ok::<_, npu::Error>(())
        };

        // Compute: the kernel into the chunk's output slot, and the copy out behind it.
        let kernels = async {
            let outputs = (0..SLOTS)
                .map(|_| DeviceBuffer::new(ctx, self.chunk_len).map(Arc::new))
                .collect::<npu::Result<Vec<_>>>()?;
            let kernel_done = [Event::new(ctx)?, Event::new(ctx)?];
            let copied_out = [Event::new(ctx)?, Event::new(ctx)?];
            for _ in 0..self.chunks {
                let (t, input) = loaded_rx.recv().await.ok_or_else(closed)?;
                let slot = t % SLOTS;
                if t >= SLOTS {
                    // The copy out of chunk t - 2 reads this output buffer.
                    marks.wait(&compute, &copied_out[slot])?;
                }
                let output = outputs[slot].clone();
                let launch =
                    marks.mark(&compute, KERNEL, 0, || self.launch(&compute, input, output))?;
                marks.record(&kernel_done[slot], &compute)?;
                marks.wait(&d2h, &kernel_done[slot])?;
                let host = self.pool.alloc::<f32>(self.chunk_len).await?;
                let output = outputs[slot].clone();
                let copy = marks.mark(&d2h, "D2H", bytes, || d2h.copy_d2h(output, host))?;
                marks.record(&copied_out[slot], &d2h)?;
                out_tx.send((t, copy)).await.map_err(|_| closed())?;
                let (input, ..) = launch.await?;
                if t + SLOTS < self.chunks {
                    free_tx.send(input).await.map_err(|_| closed())?;
                }
            }
            Ok::<_, npu::Error>(())
        };

        // Copy out: results arrive in order; check each.
        let verify = async {
            let mut wrong_chunks = 0;
            for _ in 0..self.chunks {
                let (t, copy) = out_rx.recv().await.ok_or_else(closed)?;
                let (_, host): (_, PooledBuffer<f32>) = copy.await?;
                wrong_chunks += usize::from(!self.is_correct(t, &host));
            }
            Ok::<_, npu::Error>(wrong_chunks)
        };

        let ((), (), wrong_chunks) = tokio::try_join!(copy_in, kernels, verify)?;
        Ok(Outcome {
            wall: start.elapsed(),
            wrong_chunks,
            streams: vec![h2d.id(), compute.id(), d2h.id()],
        })
    }
}

/// A stage stopped early: the stage that failed returns the cause, and `try_join!` reports
/// whichever error comes first.
fn closed() -> npu::Error {
    npu::Error::invalid("copy_pipeline", "stage", "a pipeline stage ended early")
}
