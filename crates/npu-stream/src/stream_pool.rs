//! A fixed set of streams handed out in turn, as a server spreads requests over streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use npu_core::{Context, Error, Result};

use crate::stream::{Stream, StreamBuilder};

/// A fixed set of streams of one context, handed out round-robin by [`next`](StreamPool::next):
/// concurrent requests land on different streams and so overlap on the device.
///
/// Clones share the streams and the turn. Round-robin rather than least-loaded: every stream
/// gets the same share of work, and picking never queries the device.
///
/// Cancelling one request is dropping its futures: its work still runs on the device, and
/// nothing else is touched (docs/cancellation.md). Stopping work already queued is per stream:
/// [`Stream::abort`] and [`Stream::stop`] discard every operation queued on that stream, those
/// of the other requests the pool gave the same stream included. A server that must cut one
/// request's device work short, not only stop awaiting it, gives that request a stream of its
/// own ([`Stream::new`]) instead of one from the pool.
///
/// Failures are per stream as well: [`Stream::synchronize`] on a pooled stream fails with the
/// first failure on that stream since its previous `synchronize`, which may be another
/// request's, already reported to that request by its own operation. A request learns of its
/// own failures from its operations' futures, not from synchronising a shared stream.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::StreamPool;
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = StreamPool::new(&ctx, 3)?;
/// let (a, b, c, d) = (pool.next(), pool.next(), pool.next(), pool.next());
/// assert!(!a.same(&b) && !b.same(&c) && !a.same(&c));
/// assert!(d.same(&a), "round-robin");
/// assert_eq!(pool.len(), 3);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StreamPool {
    streams: Arc<[Stream]>,
    turn: Arc<AtomicUsize>,
}

impl StreamPool {
    /// `count` streams of `context` with default options.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::StreamPool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert!(StreamPool::new(&ctx, 2)?.next().context().same(&ctx));
    /// assert!(StreamPool::new(&ctx, 0).unwrap_err().to_string().contains("at least one"));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context, count: usize) -> Result<StreamPool> {
        StreamPool::build(Stream::builder(context), count, "StreamPool::new")
    }

    /// `count` streams built from `builder` (priority, flags, strategy).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Strategy, Stream, StreamPool};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let builder = Stream::builder(&ctx).strategy(Strategy::CallbackThread);
    /// let pool = StreamPool::with_builder(builder, 2)?;
    /// assert_eq!(pool.next().strategy(), Strategy::CallbackThread);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn with_builder(builder: StreamBuilder, count: usize) -> Result<StreamPool> {
        StreamPool::build(builder, count, "StreamPool::with_builder")
    }

    /// The pool for `new` and `with_builder`; `api` is the one the caller called, for errors.
    fn build(builder: StreamBuilder, count: usize, api: &'static str) -> Result<StreamPool> {
        if count == 0 {
            return Err(Error::invalid(api, "count", "must be at least one stream"));
        }
        let streams = (0..count)
            // The builder's own refusals (unwatchable flags) are the caller's input to `api`.
            .map(|_| {
                builder.clone().build().map_err(|err| match err {
                    Error::InvalidArgument { argument, rule, .. } => {
                        Error::invalid(api, "builder", format!("its {argument}: {rule}"))
                    }
                    other => other,
                })
            })
            .collect::<Result<Arc<[Stream]>>>()?;
        Ok(StreamPool {
            streams,
            turn: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The next stream in turn.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::StreamPool;
    ///
    /// # tokio_test::block_on(async {
    /// let pool = StreamPool::new(Device::open(0)?.primary_context(), 2)?;
    /// pool.next().synchronize().await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn next(&self) -> Stream {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        self.streams[turn % self.streams.len()].clone()
    }

    /// The number of streams.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::StreamPool;
    ///
    /// assert_eq!(StreamPool::new(Device::open(0)?.primary_context(), 4)?.len(), 4);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a pool is never empty
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Every stream, for synchronising them all.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::StreamPool;
    ///
    /// # tokio_test::block_on(async {
    /// let pool = StreamPool::new(Device::open(0)?.primary_context(), 2)?;
    /// for stream in pool.streams() {
    ///     stream.synchronize().await?;
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }
}
