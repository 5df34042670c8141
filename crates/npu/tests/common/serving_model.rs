//! The model a serving backend's request handlers share, for the serving-path attacks.

use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::stream::StreamPool;

use super::{in_process, run};

/// What a request handler of a serving backend shares: a stream pool, a pinned pool for the
/// staging blocks, a device pool and the kernel it runs.
#[derive(Clone)]
pub(crate) struct Model {
    pub(crate) streams: StreamPool,
    pub(crate) pinned: PinnedPool,
    pub(crate) device: DevicePool,
    pub(crate) scale: Function,
}

/// Elements per request, and the bytes of one block.
pub(crate) const N: usize = 1024;
pub(crate) const BLOCK: usize = N * 4;

impl Model {
    /// `blocks` blocks of room in each pool (made now, as a server does at start-up),
    /// `streams` streams built from `builder`.
    pub(crate) fn new(
        builder: npu::stream::StreamBuilder,
        streams: usize,
        blocks: usize,
        backend: DevicePoolBackend,
    ) -> Model {
        let streams = StreamPool::with_builder(builder, streams).unwrap();
        let ctx = streams.next().context().clone();
        let model = Model {
            streams,
            pinned: PinnedPool::builder(&ctx)
                .capacity(BLOCK * blocks)
                .build()
                .unwrap(),
            device: DevicePool::builder(&ctx)
                .capacity(BLOCK * blocks)
                .backend(backend)
                .build()
                .unwrap(),
            scale: in_process(&ctx, "scale_f32"),
        };
        model.pinned.reserve(blocks, BLOCK).unwrap();
        let stream = model.streams.next();
        run(async { model.device.reserve(&stream, blocks, BLOCK).await.unwrap() });
        model
    }

    /// A request: a staging block, a device block (each waiting for room), copy in, scale by
    /// 2, copy out.
    pub(crate) async fn run(&self, data: &[f32]) -> npu::Result<Vec<f32>> {
        let stream = self.streams.next();
        let mut host = self.pinned.alloc::<f32>(data.len()).await?;
        host.copy_from_slice(data);
        let x = self.device.alloc::<f32>(&stream, data.len()).await?;
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds data.len().
        let (x, ..) =
            unsafe { stream.launch(&self.scale, 4, (x, data.len() as u64, 2.0f32)) }.await?;
        let (_, host) = stream.copy_d2h(x, host).await?;
        Ok(host.to_vec())
    }

    /// Both pools have every block back and nobody waiting.
    pub(crate) fn at_rest(&self) -> bool {
        let (pinned, device) = (self.pinned.stats(), self.device.stats().cache);
        pinned.allocated == 0
            && device.allocated == 0
            && pinned.awaiting_blocks == 0
            && device.awaiting_blocks == 0
            && pinned.waiters == 0
            && device.waiters == 0
    }

    pub(crate) fn stats(&self) -> String {
        format!(
            "pinned {:?}, device {:?}",
            self.pinned.stats(),
            self.device.stats().cache
        )
    }
}
