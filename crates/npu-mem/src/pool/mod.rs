//! A caching allocator of pinned host memory that reuses a block only after the device is
//! done with it.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use bytemuck::Pod;
use npu_core::{Context, Error, Result, UseList};

use crate::device_buffer::byte_size;
use crate::host_block::{HostAllocConfig, HostBlock, PAGE, check_host_align};

mod buffer;
pub mod cache;
#[cfg(test)]
mod model;
mod repairs;
mod settling;
mod size_class;
mod state;
mod stats;

/// Std-backed primitives for [`repairs`] and [`settling`]; the loom model supplies loom's
/// instead.
mod sync {
    pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

pub use buffer::PooledBuffer;
pub use stats::PoolStats;

use cache::{Cache, Seal, Source};
use size_class::size_class;

/// A caching allocator of pinned host memory (`aclrtMallocHost`), tied to one [`Context`].
///
/// Pinning costs milliseconds per allocation; taking a cached block costs a lock. The pool
/// improves on PyTorch's CachingHostAllocator in four ways:
///
/// - **Size classes without power-of-two waste.** Requests up to 64 KiB round up to whole
///   4 KiB pages (pinning works on pages anyway). Larger requests get four classes per power
///   of two: a request in (2^k, 2^(k+1)] rounds up to a multiple of 2^(k-2), so a block is
///   1.25, 1.5, 1.75 or 2 times 2^k. A block is under 1.25 times its request (1.125 on
///   average), where power-of-two rounding gives up to 2 times. Finer classes would waste
///   less but split the cache into more lists and lower the hit rate. See
///   [`PinnedPool::size_class`].
/// - **Reuse follows the device, not polling.** A dropped block returns to its free list
///   when the last operation recorded against it (on any stream) completes, driven by the
///   completions themselves; nothing is queried on the allocation path.
/// - **No ACL call under the lock.** Allocation, eviction and freeing happen after the
///   lock is released; the locked part only does bookkeeping.
/// - **Optional capacity with FIFO backpressure.** At capacity, [`alloc`](PinnedPool::alloc)
///   waits in a first-come, first-served queue instead of growing; a block coming back goes
///   straight to a waiter of its class, and cached blocks of other classes are evicted when
///   that makes room for the head of the queue. The head is never overtaken, so large
///   requests do not starve. (A byte semaphore could not see that cached blocks are
///   reclaimable, nor hand a returning block to a waiter of the same class.)
///
/// The pool is `Clone + Send + Sync`; clones share the cache. Cached blocks are freed by
/// [`trim`](PinnedPool::trim) or when the last clone and the last block are gone.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, PinnedPool};
/// use npu_stream::Stream;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = PinnedPool::builder(&ctx).capacity(64 << 20).build()?;
/// let stream = Stream::new(&ctx)?;
///
/// let mut staging = pool.alloc::<f32>(1 << 16).await?;
/// staging.fill(1.5);
/// let device = DeviceBuffer::<f32>::new(&ctx, 1 << 16)?;
/// // Dropping `staging` after (or even during) the copy is safe: the block returns to the
/// // pool only once the copy has completed.
/// let (staging, _device) = stream.copy_h2d(staging, device).await?;
/// drop(staging);
/// assert_eq!(pool.alloc::<f32>(1 << 16).await?[0], 1.5); // the same block, reused
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct PinnedPool {
    shared: Arc<Cache<Pinned>>,
}

/// Where a pinned pool's blocks come from: `aclrtMallocHost(WithCfg)` in one context.
pub(crate) struct Pinned {
    context: Context,
    config: Option<HostAllocConfig>,
}

// SAFETY: `free` unpins with aclrtFreeHost, which does not wait for the device.
//
// `MEMORY_ERRORS` stays false: the runtime reports uncorrectable memory errors of device
// memory only (aclrtGetMemUceInfo lists a device's virtual addresses), so a pinned block
// whose copy failed with one was not the bad memory, and is cached as usual.
unsafe impl Source for Pinned {
    type Block = HostBlock;
    const NAME: &'static str = "PinnedPool::alloc";
    const SEAL: Seal = crate::SEAL;

    fn block_bytes(block: &HostBlock) -> usize {
        block.bytes()
    }

    fn free(&self, blocks: Vec<HostBlock>) {
        for block in blocks {
            block.free(&self.context);
        }
    }
}

/// Options for a [`PinnedPool`].
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HostAllocConfig, PinnedPool};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = PinnedPool::builder(&ctx)
///     .capacity(1 << 20)
///     .alloc_config(HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE))
///     .build()?;
/// assert_eq!(pool.capacity(), Some(1 << 20));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct PinnedPoolBuilder {
    context: Context,
    capacity: Option<usize>,
    config: Option<HostAllocConfig>,
}

impl PinnedPoolBuilder {
    /// Caps the pinned bytes the pool holds (in use, awaiting events and cached). At the cap,
    /// [`PinnedPool::alloc`] waits for blocks to come back.
    ///
    /// Blocks count at their size class ([`PinnedPool::size_class`]), not at the length
    /// asked for: room for `n` requests of `bytes` at once is `n *
    /// PinnedPool::size_class(bytes)`. A capacity of `n * bytes` holds fewer, and the request
    /// that does not fit waits (a block larger than the whole capacity is refused at once).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pool = PinnedPool::builder(&ctx).capacity(1 << 20).build()?;
    /// assert_eq!(pool.capacity(), Some(1 << 20));
    ///
    /// // Two requests of 3000 bytes at once: two 4 KiB blocks, not 6000 bytes.
    /// let class = PinnedPool::size_class(3000).unwrap();
    /// let pool = PinnedPool::builder(&ctx).capacity(2 * class).build()?;
    /// let _a = pool.try_alloc::<u8>(3000)?.expect("room");
    /// let _b = pool.try_alloc::<u8>(3000)?.expect("room for the second");
    /// let short = PinnedPool::builder(&ctx).capacity(2 * 3000).build()?;
    /// let _a = short.try_alloc::<u8>(3000)?.expect("room");
    /// assert!(short.try_alloc::<u8>(3000)?.is_none(), "the second would wait");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = Some(bytes);
        self
    }

    /// Pins new blocks with `aclrtMallocHostWithCfg` and these attributes.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostAllocConfig, PinnedPool};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let config = HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE);
    /// let pool = PinnedPool::builder(&ctx).alloc_config(config).build()?;
    /// assert!(pool.try_alloc::<u8>(100)?.is_some());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn alloc_config(mut self, config: HostAllocConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Creates the pool. Nothing is pinned until the first allocation.
    ///
    /// Fails if the capacity is smaller than one 4 KiB block, with an
    /// [`Error::InvalidArgument`](npu_core::Error::InvalidArgument) of `PinnedPoolBuilder::build`
    /// naming the `capacity` it was given.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert!(PinnedPool::builder(&ctx).capacity(100).build().is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn build(self) -> Result<PinnedPool> {
        if let Some(capacity) = self.capacity
            && capacity < PAGE
        {
            // Named as `StreamBuilder::build` names its settings: the method that
            // refuses, and the setting the caller gave it.
            return Err(Error::invalid(
                "PinnedPoolBuilder::build",
                "capacity",
                format!(
                    "{capacity} is less than the smallest block ({} bytes)",
                    PAGE
                ),
            ));
        }
        Ok(PinnedPool::with_options(
            self.context,
            self.capacity,
            self.config,
        ))
    }
}

impl PinnedPool {
    /// An unbounded pool allocating in `context`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// assert_eq!(pool.capacity(), None);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context) -> PinnedPool {
        PinnedPool::with_options(context.clone(), None, None)
    }

    fn with_options(
        context: Context,
        capacity: Option<usize>,
        config: Option<HostAllocConfig>,
    ) -> PinnedPool {
        PinnedPool {
            shared: Arc::new(Cache::new(Pinned { context, config }, capacity)),
        }
    }

    /// Options for a pool allocating in `context`: capacity, allocation attributes.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pool = PinnedPool::builder(&ctx).capacity(16 << 20).build()?;
    /// assert_eq!(pool.capacity(), Some(16 << 20));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn builder(context: &Context) -> PinnedPoolBuilder {
        PinnedPoolBuilder {
            context: context.clone(),
            capacity: None,
            config: None,
        }
    }

    /// The block size a request of `bytes` is served with, or `None` if it cannot be
    /// represented. See the type's documentation for the rounding rule.
    ///
    /// ```
    /// use npu_mem::PinnedPool;
    ///
    /// assert_eq!(PinnedPool::size_class(100), Some(4096));
    /// assert_eq!(PinnedPool::size_class(5000), Some(8192));
    /// assert_eq!(PinnedPool::size_class((1 << 20) + 1), Some(1_310_720)); // 1.25 MiB
    /// assert_eq!(PinnedPool::size_class((3 << 20) + 1), Some(3_670_016)); // 3.5 MiB, not 4
    /// ```
    pub fn size_class(bytes: usize) -> Option<usize> {
        size_class(bytes)
    }

    /// The context blocks are pinned in.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let device = Device::open(0)?;
    /// let pool = PinnedPool::new(device.primary_context());
    /// assert!(pool.context().same(device.primary_context()));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.shared.source().context
    }

    /// The capacity in bytes, if the pool has one.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// assert_eq!(PinnedPool::new(Device::open(0)?.primary_context()).capacity(), None);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.shared.capacity()
    }

    /// A block for `len` elements of `T`: a cached block of the request's size class if one
    /// is free, otherwise newly pinned memory (`aclrtMallocHost`, or `aclrtMallocHostWithCfg`
    /// with an [`alloc_config`](PinnedPoolBuilder::alloc_config); on this thread). At the
    /// capacity, waits in FIFO order for blocks to come back.
    ///
    /// Errors: `len == 0`, a size over `isize::MAX` bytes, an element type aligned to more
    /// than 64 bytes, or a block larger than the capacity (it could never be served) are
    /// [`Error::InvalidArgument`]; a failed pinning is its ACL error, after which the room it
    /// was granted is given back: `allocated`, `reserved`, `hits` and `misses` are as before
    /// the call (cached blocks evicted to make that room under the capacity stay freed). In
    /// a forked child (`npu_core::forked`) it is [`Error::Forked`], and so is a
    /// request queued before the fork once polled there (the blocks it waits for may be held
    /// by the parent's operations, which never complete in the child).
    ///
    /// Cancel safety: cancel-safe. Dropping the future while it waits leaves the queue;
    /// a block or capacity already granted to it goes back to the pool, so nothing is lost
    /// and the next waiter is served.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// # tokio_test::block_on(async {
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// let block = pool.alloc::<u16>(3000).await?;
    /// assert_eq!(block.len(), 3000);
    /// assert!(pool.alloc::<u16>(0).await.is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn alloc<T: Pod>(&self, len: usize) -> Result<PooledBuffer<T>> {
        let class = self.class_of::<T>("PinnedPool::alloc", len)?;
        // In a forked child a block out at the fork never comes back (its release waits for
        // work only the parent runs), so a request queued for room would wait for ever.
        npu_core::fork::refuse(crate::SEAL, "PinnedPool::alloc")?;
        let granted = self.shared.grant(class).await?;
        self.fulfil(granted, len)
    }

    /// Like [`alloc`](PinnedPool::alloc), but never waits for capacity: `Ok(None)` when the
    /// request would have to queue.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pool = PinnedPool::builder(&ctx).capacity(8192).build()?;
    /// let first = pool.try_alloc::<u8>(8192)?.expect("room for one block");
    /// assert!(pool.try_alloc::<u8>(1)?.is_none(), "full");
    /// drop(first);
    /// assert!(pool.try_alloc::<u8>(1)?.is_some(), "room after eviction");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn try_alloc<T: Pod>(&self, len: usize) -> Result<Option<PooledBuffer<T>>> {
        let class = self.class_of::<T>("PinnedPool::try_alloc", len)?;
        self.shared
            .try_grant(class)
            .map(|granted| self.fulfil(granted, len))
            .transpose()
    }

    /// Prewarms the pool: makes sure `count` blocks for requests of `bytes` bytes are cached,
    /// pinning the missing ones now (pinning costs milliseconds, better spent at start-up than
    /// on a request's path). Returns the bytes of the blocks it reserved.
    ///
    /// Fails like [`try_alloc`](PinnedPool::try_alloc) for a bad size (`bytes == 0` among
    /// them, argument `bytes`), and with [`Error::InvalidArgument`] when the capacity (or a
    /// queued waiter) leaves no room for `count` blocks; the blocks pinned before that stay
    /// cached (the capacity bounds them).
    ///
    /// On a pool without a capacity nothing bounds `count` but the host: a reserve of more
    /// than the process may pin pins until the runtime refuses, then fails with that ACL
    /// error ([`Error::is_out_of_memory`](npu_core::Error::is_out_of_memory):
    /// `ACL_ERROR_RT_MEMORY_ALLOCATION`; no panic, no abort) and unpins every block it
    /// pinned, so the host's pinned memory is what it was before the call (the blocks cached
    /// before stay). Any failed pinning does the same. Until the refusal the host is short of
    /// memory, and how short before the runtime refuses is the runtime's and the OS's limit
    /// (npu-sim refuses past its `pinned_host_limit`, physical RAM by default): give the pool
    /// a [`capacity`](PinnedPoolBuilder::capacity) to bound what it may pin at all.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// assert_eq!(pool.reserve(3, 10_000)?, 3 * 12_288);
    /// let block = pool.try_alloc::<u8>(10_000)?.expect("no capacity set");
    /// assert_eq!((pool.stats().hits, pool.stats().misses), (1, 3), "served from the cache");
    /// # drop(block);
    /// let small = PinnedPool::builder(pool.context()).capacity(16_384).build()?;
    /// let err = small.reserve(2, 10_000).unwrap_err();
    /// assert!(err.to_string().contains("room for 1 of 2 blocks"), "{err}");
    /// assert!(small.reserve(1, 0).is_err(), "no request of 0 bytes can be made");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn reserve(&self, count: usize, bytes: usize) -> Result<usize> {
        const API: &str = "PinnedPool::reserve";
        // The size check `try_alloc` makes, in bytes: a request of no bytes is refused there,
        // so a block reserved for one could never be asked for (it was rounded up to a page
        // and pinned all the same). `DevicePool::reserve` refuses it alike.
        byte_size::<u8>(crate::SEAL, API, "bytes", bytes)?;
        self.shared
            .reserve(API, count, bytes, |class| self.pin(class))
    }

    /// Returns every cached block to the OS (`aclrtFreeHost`) and reports the bytes freed.
    /// Blocks in use, or awaiting events, are unaffected.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// # tokio_test::block_on(async {
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// drop(pool.alloc::<u8>(10_000).await?);
    /// assert_eq!(pool.trim(), 12_288);
    /// assert_eq!(pool.stats().reserved, 0);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn trim(&self) -> usize {
        self.shared.trim_to(0)
    }

    /// Resolves once every block of the pool is back: none handed out, none dropped while
    /// the device still used it and awaiting its operations, none being pinned. Then
    /// [`stats`](PinnedPool::stats) shows `allocated` and `awaiting_blocks` 0. What a
    /// graceful shutdown, or a test checking that a cancelled pipeline lost no buffer, waits
    /// for, instead of polling the counters. Blocks handed out after it resolved are not
    /// waited for; while a task keeps one, it does not resolve (bound it with a timeout). A block that is never
    /// given back keeps it pending for good: one `mem::forget`-ed, or owned by a forgotten
    /// operation or allocation future. It resolves when a poll finds the pool settled, so stop
    /// handing blocks out first: tasks that keep allocating may never leave it settled when it
    /// looks. Quarantined blocks (after a memory error) do not count: they are not coming
    /// back. A pending `settled()` keeps the pool's cache, and its cached memory, alive.
    /// In a forked child (`npu_core::forked`) it resolves at
    /// once, whatever the counters show: no thread there completes the parent's operations, so
    /// their blocks never come back.
    ///
    /// A block dropped while an operation used it comes back once that operation completed
    /// (docs/cancellation.md, rule 3), so this waits for the device, failed or aborted work
    /// included. Under a paused Tokio clock it keeps nothing, as a queued
    /// [`alloc`](PinnedPool::alloc) keeps nothing: await the operations first.
    ///
    /// Cancel-safe: dropping it only stops waiting.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedPool};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (PinnedPool::new(&ctx), Stream::new(&ctx)?);
    /// let block = pool.alloc::<u8>(4096).await?;
    /// drop(stream.copy_h2d(block, DeviceBuffer::<u8>::new(&ctx, 4096)?)); // in flight
    /// pool.settled().await; // the copy completed and its block came back
    /// assert_eq!((pool.stats().allocated, pool.stats().awaiting_blocks), (0, 0));
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn settled(&self) -> impl Future<Output = ()> + Send + Unpin + 'static + use<> {
        self.shared.settled()
    }

    /// A snapshot of the pool's counters.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::PinnedPool;
    ///
    /// let pool = PinnedPool::new(Device::open(0)?.primary_context());
    /// let block = pool.try_alloc::<u8>(4096)?;
    /// assert_eq!(pool.stats().allocated, 4096);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }

    /// Checks a request and finds its size class.
    fn class_of<T: Pod>(&self, api: &'static str, len: usize) -> Result<usize> {
        check_host_align::<T>(api)?;
        let bytes = byte_size::<T>(crate::SEAL, api, "len", len)?;
        self.shared.class_for(api, "len", bytes)
    }

    fn pin(&self, class: usize) -> Result<HostBlock> {
        let source = self.shared.source();
        HostBlock::alloc(&source.context, class, source.config.as_ref())
    }

    /// Turns a grant into a buffer: a cached block as is, room by pinning a new block.
    fn fulfil<T: Pod>(
        &self,
        granted: cache::Granted<HostBlock>,
        len: usize,
    ) -> Result<PooledBuffer<T>> {
        let block = self.shared.fill(granted, |class| self.pin(class))?;
        Ok(PooledBuffer {
            shared: self.shared.clone(),
            block: ManuallyDrop::new(block),
            len,
            uses: UseList::new(),
            _elements: PhantomData,
        })
    }
}

impl fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedPool")
            .field("device", &self.context().device_id())
            .field("capacity", &self.capacity())
            .field("stats", &self.stats())
            .finish()
    }
}
