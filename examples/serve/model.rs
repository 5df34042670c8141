//! The model on the device, kept apart from HTTP: the only code that touches the NPU.

use std::sync::Arc;

use npu::prelude::*;
use npu::stream::StreamPool;

use crate::config::Config;
use crate::kernels;

/// The model's bias: small integers, so every output is exact in f32 and in JSON.
pub(crate) fn bias(i: usize) -> f32 {
    (i % 7) as f32
}

/// Why the model did not run a request.
pub(crate) enum RunError {
    /// The named pool (`"pinned"` or `"device"`) had no free block: requests given up on still
    /// have the device using theirs.
    NoRoom(&'static str),
    /// The NPU reported a failure.
    Device(npu::Error),
}

impl<E: Into<npu::Error>> From<E> for RunError {
    fn from(err: E) -> Self {
        RunError::Device(err.into())
    }
}

/// The model on the device: everything here touches the NPU, and nothing else does.
pub(crate) struct Model {
    pub(crate) streams: StreamPool,
    pub(crate) pool: PinnedPool,
    /// Two device blocks per admitted request (input and output), prewarmed at load, so no
    /// request allocates device memory synchronously.
    pub(crate) device_pool: DevicePool,
    scale: Function,
    add: Function,
    bias: Arc<DeviceBuffer<f32>>,
    alpha: f32,
}

impl Model {
    /// Loads the kernels, creates the streams, a pinned pool with a block for each request
    /// `config` admits (and one for the bias) and a device pool with two, all made now, and
    /// uploads the bias.
    pub(crate) async fn load(config: &Config) -> npu::Result<Model> {
        let device = Device::open(config.device)?;
        let ctx = device.primary_context().clone();
        let kernels = kernels::load(&ctx)?;
        let (scale, add) = (
            kernels.function("scale_f32")?,
            kernels.function("vector_add_f32")?,
        );
        let streams = StreamPool::new(&ctx, config.streams.max(1))?;
        let block = PinnedPool::size_class(config.input_len * size_of::<f32>())
            .unwrap_or(config.input_len * size_of::<f32>());
        let pool = PinnedPool::builder(&ctx)
            .capacity(block * (config.max_in_flight + 1))
            .build()?;
        // Pinned now, so that no request pins memory (a synchronous `aclrtMallocHost`) on its
        // way to the device.
        let bytes = config.input_len * size_of::<f32>();
        pool.reserve(config.max_in_flight + 1, bytes)?;
        let mut host = pool.alloc::<f32>(config.input_len).await?;
        for (i, b) in host.iter_mut().enumerate() {
            *b = bias(i);
        }
        let blocks = 2 * config.max_in_flight;
        let device_block = DevicePool::size_class(bytes).unwrap_or(bytes);
        let device_pool = DevicePool::builder(&ctx)
            .capacity(device_block * blocks)
            .build()?;
        let first = streams.next();
        device_pool.reserve(&first, blocks, bytes).await?;
        let device_bias = DeviceBuffer::new(&ctx, config.input_len)?;
        let (_, device_bias) = first.copy_h2d(host, device_bias).await?;
        Ok(Model {
            streams,
            pool,
            device_pool,
            scale,
            add,
            bias: Arc::new(device_bias),
            alpha: config.alpha,
        })
    }

    /// Runs the model on `data` (of the model's input length): copy in, scale, add the bias,
    /// copy out, all awaited.
    pub(crate) async fn run(&self, data: &[f32]) -> Result<Vec<f32>, RunError> {
        let n = data.len();
        let stream = self.streams.next();
        // Blocks are taken, never waited for: an admitted request finds its blocks free unless
        // requests given up on (timed out, or their client gone) still have the device using
        // theirs; then it is refused at once, as a request over the admission limit is. (A
        // device block lost to a memory error is made again: `device_block`.)
        let mut host = self
            .pool
            .try_alloc::<f32>(n)?
            .ok_or(RunError::NoRoom("pinned"))?;
        host.copy_from_slice(data);
        let x = self.device_block(&stream, n).await?;
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds n.
        let (x, ..) = unsafe { stream.launch(&self.scale, 4, (x, n as u64, self.alpha)) }.await?;
        let y = self.device_block(&stream, n).await?;
        // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
        // elements of x and the bias and writes n of y; all hold n (the bias has the model's
        // input length, which the handler checked n against). The bias is only ever read.
        let (_, _, y, _) =
            unsafe { stream.launch(&self.add, 4, (x, self.bias.clone(), y, n as u64)) }.await?;
        let (_, host) = stream.copy_d2h(y, host).await?;
        Ok(host.to_vec())
    }

    /// A free device block of `n` elements, never waited for: a cached one, or `NoRoom` while
    /// requests given up on hold the rest. A block the pool quarantined after an uncorrectable
    /// memory error on it leaves the pool's capacity, and the pool has room for one in its
    /// place; but a runtime-pool `try_alloc` takes only cached blocks and never makes one, so
    /// without this the server lost that block for good (a server admitting one request
    /// refused every later one with 503). The replacement is made here, on the request's
    /// stream, as `load` made the others (`reserve`).
    async fn device_block(
        &self,
        stream: &npu::Stream,
        n: usize,
    ) -> Result<npu::memory::PooledDeviceBuffer<f32>, RunError> {
        if let Some(block) = self.device_pool.try_alloc::<f32>(stream, n)? {
            return Ok(block);
        }
        let bytes = n * size_of::<f32>();
        let class = DevicePool::size_class(bytes).unwrap_or(bytes);
        let room = self
            .device_pool
            .capacity()
            .is_none_or(|capacity| self.device_pool.stats().cache.reserved + class <= capacity);
        if room {
            match self.device_pool.reserve(stream, 1, bytes).await {
                Ok(_) => {}
                // Taken meanwhile by another request's replacement.
                Err(npu::Error::InvalidArgument { .. }) => {}
                Err(err) => return Err(RunError::Device(err)),
            }
            if let Some(block) = self.device_pool.try_alloc::<f32>(stream, n)? {
                return Ok(block);
            }
        }
        Err(RunError::NoRoom("device"))
    }
}
