//! Stream-ordered device memory for servers: a caching pool of device blocks that hands a
//! block out again, to any stream, only once the device is done with it.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytemuck::Pod;
use npu_core::{Context, Error, Result, UseList};
use npu_mem::PoolStats;
use npu_mem::pool_cache::{Cache, Granted, Reserving, byte_size};

use crate::stream::Stream;

mod buffer;
#[cfg(test)]
mod model;
mod returns;
mod source;

/// Std-backed primitives for [`returns`]; the loom model supplies loom's instead.
mod sync {
    pub(crate) use std::sync::Mutex;
    pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

    /// The drain lock, ranked (`contain::lock_here`, `Rank::Drain`): `None`, not waited for,
    /// on a thread that holds it already or holds a lock ranked above it, and in a forked
    /// child.
    pub(crate) fn lock_drain<T>(
        mutex: &Mutex<T>,
    ) -> Option<impl std::ops::DerefMut<Target = T> + '_> {
        // A thread of the parent may have held it at the fork, across its frees, and that
        // thread does not exist in the child: a block dropped there (which serves a waiter
        // by evicting) would wait for ever. The frees made unlocked there are refused anyway.
        if npu_core::forked() {
            return None;
        }
        npu_core::contain::lock_here(crate::SEAL, mutex, npu_core::contain::Rank::Drain)
    }
}

pub use buffer::PooledDeviceBuffer;
pub use source::RuntimePoolUsage;

use returns::{Attempted, Drain};
use source::{DeviceBlock, DeviceSource};

/// Which allocator a [`DevicePool`] builds on.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{DevicePool, DevicePoolBackend};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = DevicePool::builder(&ctx).backend(DevicePoolBackend::Caching).build()?;
/// assert_eq!(pool.backend(), DevicePoolBackend::Caching);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DevicePoolBackend {
    /// The runtime's stream-ordered pool: new blocks come from `aclrtMemPoolMallocAsync`,
    /// evicted and trimmed ones go back with `aclrtMemPoolFreeAsync` and
    /// `aclrtMemPoolTrimTo`.
    RuntimePool,
    /// A caching allocator on `aclrtMalloc` / `aclrtFree`, for runtimes without the pool API.
    Caching,
}

/// A snapshot of a [`DevicePool`]'s counters.
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{DevicePool, DevicePoolBackend, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
/// drop(pool.alloc::<u8>(&stream, 1000).await?);
/// let _again = pool.alloc::<u8>(&stream, 4000).await?; // same 4 KiB class: a hit
/// let stats = pool.stats();
/// assert_eq!((stats.cache.hits, stats.cache.misses), (1, 1));
/// assert_eq!(stats.cache.allocated, 4096);
/// assert_eq!(stats.backend, DevicePoolBackend::RuntimePool);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DevicePoolStats {
    /// The cache's counters: bytes in use (`allocated`), awaiting their operations, cached
    /// and reserved, their high-water marks, hits, misses, evictions and waiters.
    pub cache: PoolStats,
    /// The allocator underneath.
    pub backend: DevicePoolBackend,
    /// The runtime pool's own counters, for [`DevicePoolBackend::RuntimePool`].
    pub runtime: Option<RuntimePoolUsage>,
}

/// Options for a [`DevicePool`].
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{DevicePool, DevicePoolBackend};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = DevicePool::builder(&ctx)
///     .capacity(64 << 20)
///     .backend(DevicePoolBackend::RuntimePool)
///     .build()?;
/// assert_eq!(pool.capacity(), Some(64 << 20));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct DevicePoolBuilder {
    context: Context,
    capacity: Option<usize>,
    backend: Option<DevicePoolBackend>,
}

impl DevicePoolBuilder {
    /// Caps the device bytes the pool holds (in use, awaiting operations and cached). At the
    /// cap, [`DevicePool::alloc`] waits for blocks to come back.
    ///
    /// Blocks count at their size class ([`DevicePool::size_class`]), not at the length asked
    /// for: room for `n` requests of `bytes` at once is `n * DevicePool::size_class(bytes)`.
    /// A capacity of `n * bytes` holds fewer, and the request that does not fit waits (a
    /// block larger than the whole capacity is refused at once; [`DevicePool::reserve`] of
    /// `n` blocks says so at start-up).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(DevicePool::builder(&ctx).capacity(1 << 20).build()?.capacity(), Some(1 << 20));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = Some(bytes);
        self
    }

    /// Forces a backend instead of choosing one. Forcing
    /// [`RuntimePool`](DevicePoolBackend::RuntimePool) makes [`build`](Self::build) fail on a
    /// runtime without the pool API.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, DevicePoolBackend};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pool = DevicePool::builder(&ctx).backend(DevicePoolBackend::Caching).build()?;
    /// assert!(pool.backend_reason().contains("forced"));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend(mut self, backend: DevicePoolBackend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Creates the pool: the runtime pool when the runtime exports `aclrtMemPool*` and can
    /// make one, otherwise the caching allocator (unless a backend was forced). Nothing is
    /// allocated until the first request.
    ///
    /// Errors: a capacity under one 4 KiB block is an [`Error::InvalidArgument`] of
    /// `DevicePoolBuilder::build` naming the `capacity` it was given; a forced
    /// runtime pool on a runtime without the API is [`Error::Unsupported`], and its creation
    /// failing is that ACL error. Unforced, a creation that fails falls back to the caching
    /// allocator (a runtime may lack the feature, refuse the pool's release stream or one of
    /// its attributes), except on a lost device, whose error is returned: it would fail the
    /// caching allocator's allocations too. In a forked child (`npu_core::forked`)
    /// it is [`Error::Forked`] whatever the backend, forced or planned (a caching pool would
    /// make no runtime call to be made, but its every allocation would be refused).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let err = DevicePool::builder(&ctx).capacity(100).build().unwrap_err();
    /// assert!(err.to_string().starts_with("DevicePoolBuilder::build: invalid argument `capacity`"));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn build(self) -> Result<DevicePool> {
        const SMALLEST: usize = 4096;
        if let Some(capacity) = self.capacity
            && capacity < SMALLEST
        {
            // Named as `StreamBuilder::build` names its settings: the method that refuses, and
            // the setting the caller gave it.
            return Err(Error::invalid(
                "DevicePoolBuilder::build",
                "capacity",
                format!("{capacity} is less than the smallest block ({SMALLEST} bytes)"),
            ));
        }
        let source = DeviceSource::new(self.context, self.backend)?;
        Ok(DevicePool {
            cache: Arc::new(Cache::new(source, self.capacity)),
        })
    }
}

/// A caching pool of device memory, tied to one [`Context`]: `alloc(&stream, len).await`
/// costs a lock on a cache hit, where `aclrtMalloc` + `aclrtFree` synchronise with the
/// runtime on every request.
///
/// - **Two backends, one type.** On a runtime that exports the stream-ordered pool API
///   (`aclrtMemPoolCreate` and friends) new blocks come from a runtime pool; otherwise from
///   `aclrtMalloc`. [`backend`](DevicePool::backend) and
///   [`backend_reason`](DevicePool::backend_reason) say which and why; the builder can force
///   either.
/// - **Reuse follows the device.** A dropped block returns to the pool's free list only once
///   every operation recorded against it, on any stream, has completed; only then can another
///   request, on any stream, get it. Blocks go back to the runtime (`aclrtFree`, or
///   `aclrtMemPoolFreeAsync` on the pool's own stream) only when idle, so the runtime never
///   reuses memory that work still touches, and no release waits for the device.
/// - **Size classes without power-of-two waste**, FIFO backpressure at an optional capacity,
///   counters, [`trim`](DevicePool::trim) and [`reserve`](DevicePool::reserve): the same
///   machinery as [`PinnedPool`](npu_mem::PinnedPool).
///
/// The pool is `Clone + Send + Sync`; clones share the cache. The runtime pool is destroyed
/// (on a thread of its own, as `aclrtMemPoolDestroy` synchronises the device) once the last
/// clone and the last block are gone; `npu::sim::flush_releases` does not wait for that
/// thread, so a leak check of code using a pool reads the pool's [`stats`](DevicePool::stats)
/// while the pool lives, or the simulated device's allocation count after
/// [`npu_core::wait_for_teardowns`], which waits for that thread, once the pool is dropped.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::Memory;
/// use npu_stream::{DevicePool, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = DevicePool::builder(&ctx).capacity(64 << 20).build()?;
/// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
///
/// let block = pool.alloc::<f32>(&a, 1 << 16).await?;
/// let address = block.addr();
/// let block = a.memset(block, 0).await?;
/// drop(block); // the memset has completed: the block is back in the free list
/// let again = pool.alloc::<f32>(&b, 1 << 16).await?; // reused on another stream
/// assert_eq!(again.addr(), address);
/// assert_eq!(pool.stats().cache.hits, 1);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct DevicePool {
    cache: Arc<Cache<DeviceSource>>,
}

impl DevicePool {
    /// An unbounded pool allocating in `context`, on the backend the runtime supports.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let pool = DevicePool::new(Device::open(0)?.primary_context())?;
    /// assert_eq!(pool.capacity(), None);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context) -> Result<DevicePool> {
        DevicePool::builder(context).build()
    }

    /// Options for a pool allocating in `context`: capacity, backend.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let pool = DevicePool::builder(&ctx).capacity(16 << 20).build()?;
    /// assert_eq!(pool.capacity(), Some(16 << 20));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn builder(context: &Context) -> DevicePoolBuilder {
        DevicePoolBuilder {
            context: context.clone(),
            capacity: None,
            backend: None,
        }
    }

    /// The context blocks are allocated in.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let device = Device::open(0)?;
    /// let pool = DevicePool::new(device.primary_context())?;
    /// assert!(pool.context().same(device.primary_context()));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.cache.source().context
    }

    /// The capacity in bytes, if the pool has one.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// assert_eq!(DevicePool::new(Device::open(0)?.primary_context())?.capacity(), None);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.cache.capacity()
    }

    /// The allocator the pool builds on.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, DevicePoolBackend};
    ///
    /// let pool = DevicePool::new(Device::open(0)?.primary_context())?;
    /// assert_eq!(pool.backend(), DevicePoolBackend::RuntimePool); // npu-sim has the pool API
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend(&self) -> DevicePoolBackend {
        self.cache.source().backend()
    }

    /// Why the pool builds on [`backend`](DevicePool::backend): forced, the runtime lacking a
    /// function of the pool API (named), or creating a runtime pool having failed (with the
    /// error).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::DevicePool;
    ///
    /// let pool = DevicePool::new(Device::open(0)?.primary_context())?;
    /// assert!(pool.backend_reason().contains("aclrtMemPool"), "{}", pool.backend_reason());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend_reason(&self) -> &str {
        &self.cache.source().reason
    }

    /// The block size a request of `bytes` is served with, or `None` if it cannot be
    /// represented: the [`PinnedPool`](npu_mem::PinnedPool)'s classes (whole 4 KiB pages up to
    /// 64 KiB, then four classes per power of two), so a block is under 1.25 times its request.
    ///
    /// ```
    /// use npu_stream::DevicePool;
    ///
    /// assert_eq!(DevicePool::size_class(100), Some(4096));
    /// assert_eq!(DevicePool::size_class((3 << 20) + 1), Some(3_670_016)); // 3.5 MiB, not 4
    /// ```
    pub fn size_class(bytes: usize) -> Option<usize> {
        npu_mem::PinnedPool::size_class(bytes)
    }

    /// A block for `len` elements of `T`, for use on `stream` (and, once this returns, on any
    /// stream of the pool's context).
    ///
    /// A cached block of the request's size class is taken with no ACL call at all. Otherwise
    /// a new block is allocated: on the runtime pool, `aclrtMemPoolMallocAsync` submitted on
    /// `stream` and awaited (so the memory is valid on every stream before it is handed out);
    /// on the caching backend, `aclrtMalloc`. At the capacity, waits in FIFO order for blocks
    /// to come back. When the device is out of memory, the pool first lets memory already on
    /// its way back arrive (blocks the device is done with whose release is queued on
    /// npu-rs's reaper: a dropped operation's block, an abandoned allocation's; one pass of
    /// the reaper, only while the pool has blocks out), then frees its cached blocks, waits
    /// until the runtime has them back (with any other blocks it gave back before: trimmed,
    /// evicted; on the caching backend, frees another thread is making), and tries once more.
    /// It never waits for the work of operations: a block whose operations have not
    /// completed is not waited for (the release stream it synchronises carries only the
    /// pool's own frees), and with no block out the request fails at once (with blocks out,
    /// after one pass of the reaper, even if none was on its way back).
    ///
    /// Errors: `len == 0`, a zero-sized `T`, a size over `isize::MAX` bytes, a block larger
    /// than the capacity (it could never be served: it fails at once) and a stream of another
    /// context are [`Error::InvalidArgument`]; an allocation the device cannot serve is the
    /// ACL error ([`Error::is_out_of_memory`]), after which the pool's counters are as before.
    /// In a forked child (`npu_core::forked`) it is [`Error::Forked`], and so is a
    /// request queued before the fork once polled there (the blocks it waits for may be held
    /// by the parent's operations, which never complete in the child).
    ///
    /// Cancel safety: cancel-safe. Dropping the future while it waits for capacity leaves the
    /// queue (a grant already on its way goes back to the pool); dropped during a new
    /// block's allocation, the block goes back to the runtime once that allocation completes;
    /// dropped while it waits for the reaper or for the frees of an out-of-memory retry, it
    /// drops only that wait (the frees still run, and other requests waiting for them still
    /// retry) and gives its room back.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::Memory;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// let block = pool.alloc::<u16>(&stream, 3000).await?;
    /// assert_eq!(block.len(), 3000);
    /// assert!(pool.alloc::<u16>(&stream, 0).await.is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn alloc<T: Pod>(
        &self,
        stream: &Stream,
        len: usize,
    ) -> Result<PooledDeviceBuffer<T>> {
        let class = self.check::<T>(("DevicePool::alloc", "len"), stream, len)?;
        // In a forked child a block out at the fork never comes back (its release waits for
        // work only the parent runs), so a request queued for room would wait for ever.
        npu_core::fork::refuse(crate::SEAL, "DevicePool::alloc")?;
        let block = match self.cache.grant(class).await? {
            Granted::Block(block) => block,
            // Boxed: the awaited allocation is a whole stream operation, and carrying it
            // inline would make every `alloc` future, hits included, several times larger.
            Granted::Room(class) => {
                let (block, took) =
                    Box::pin(self.new_block("DevicePool::alloc", stream, class, None)).await?;
                self.cache.room_filled_in(class, took);
                block
            }
        };
        Ok(self.buffer(block, len))
    }

    /// Like [`alloc`](DevicePool::alloc), but never waits: `Ok(None)` when the request would
    /// have to queue for capacity, or when only a new stream-ordered allocation (which must be
    /// awaited) could serve it. On the caching backend a miss allocates with `aclrtMalloc`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, DevicePoolBackend, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let pool = DevicePool::builder(&ctx).capacity(8192).build()?;
    /// let first = pool.alloc::<u8>(&stream, 8192).await?;
    /// assert!(pool.try_alloc::<u8>(&stream, 1)?.is_none(), "full");
    /// drop(first);
    /// assert!(pool.try_alloc::<u8>(&stream, 8192)?.is_some(), "a cached block");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn try_alloc<T: Pod>(
        &self,
        stream: &Stream,
        len: usize,
    ) -> Result<Option<PooledDeviceBuffer<T>>> {
        let class = self.check::<T>(("DevicePool::try_alloc", "len"), stream, len)?;
        if self.cache.source().stream_ordered() {
            // Only a cached block can serve it without waiting. Asking for room would evict
            // cached blocks of other classes to make it, and then give nothing: a `try_alloc`
            // that returned `None` emptied the cache.
            return Ok(self
                .cache
                .try_hit(class)
                .map(|block| self.buffer(block, len)));
        }
        let Some(granted) = self.cache.try_grant(class) else {
            return Ok(None);
        };
        let block = self
            .cache
            .fill(granted, |class| self.malloc_now(class, None))?;
        Ok(Some(self.buffer(block, len)))
    }

    /// Prewarms the pool: makes sure `count` blocks for requests of `bytes` bytes are cached,
    /// allocating the missing ones now (on `stream` for the runtime pool, awaited), so the
    /// first requests do not pay for them. Returns the bytes of the blocks it reserved.
    ///
    /// Fails like [`alloc`](DevicePool::alloc) for a bad size or stream, and with
    /// [`Error::InvalidArgument`] when the capacity leaves no room for `count` blocks (the
    /// blocks allocated before that stay cached: the capacity bounds them) or when `count`
    /// blocks would not even fit in the address space (refused before allocating any). An
    /// allocation that fails (the device out of memory, after the retry `alloc` makes) fails
    /// the reserve with its error, and as many cached blocks of its size class as this call
    /// allocated are freed again (the latest cached first, which are this call's unless
    /// another call cached or took blocks of that class meanwhile): a reserve larger than the
    /// device would otherwise leave it full for the pool's life.
    ///
    /// It never queues for capacity (it fails instead), so dropping the future leaves no
    /// queue. Cancel safety: cancel-safe in that nothing is lost or held: the blocks reserved
    /// so far are cached, as if the reserve had stopped there, and a runtime-pool allocation
    /// submitted for the next one goes back to the runtime once it completes.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// assert_eq!(pool.reserve(&stream, 3, 10_000).await?, 3 * 12_288);
    /// let _block = pool.alloc::<u8>(&stream, 10_000).await?;
    /// let stats = pool.stats().cache;
    /// assert_eq!((stats.hits, stats.misses), (1, 3), "served from the cache");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn reserve(&self, stream: &Stream, count: usize, bytes: usize) -> Result<usize> {
        const API: &str = "DevicePool::reserve";
        let class = self.check::<u8>((API, "bytes"), stream, bytes)?;
        let total = Cache::<DeviceSource>::reserved_bytes(API, count, class)?;
        // Allocations are awaited one by one (a stream-ordered one, or a wait for memory on
        // its way back) and cached as they arrive; at most `count` of them, even if others
        // take cached blocks meanwhile. A failed one frees those this call cached, as
        // `Cache::reserve` does.
        let mut added = 0;
        for _ in 0..count {
            match self.cache.reserve_next(class, count) {
                Reserving::Done => break,
                Reserving::Full(cached) => {
                    return Err(self.cache.no_room(API, cached, count, (bytes, class)));
                }
                Reserving::Room => match self.new_block(API, stream, class, Some(class)).await {
                    Ok((block, took)) => {
                        self.cache.room_reserved_in(block, took);
                        added += 1;
                    }
                    Err(err) => {
                        self.cache.unreserve(class, added);
                        return Err(err);
                    }
                },
            }
        }
        Ok(total)
    }

    /// Gives every cached block back to the runtime and reports the bytes freed; on the
    /// runtime pool, also asks it to release its idle memory (`aclrtMemPoolTrimTo(0)`).
    /// Blocks in use, or awaiting their operations, are unaffected. Fails as
    /// [`trim_to`](DevicePool::trim_to) does.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// drop(pool.alloc::<u8>(&stream, 10_000).await?);
    /// assert_eq!(pool.trim()?, 12_288);
    /// assert_eq!(pool.stats().cache.reserved, 0);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn trim(&self) -> Result<usize> {
        self.trim_named("DevicePool::trim", 0)
    }

    /// Gives cached blocks back to the runtime, largest first, until the pool holds at most
    /// `bytes` (blocks in use and awaiting their operations count, and stay); on the runtime
    /// pool, then asks it to keep at most `bytes` (`aclrtMemPoolTrimTo`), which releases the
    /// idle memory whose frees have executed. Returns the bytes the pool gave back.
    ///
    /// Fails only if `aclrtMemPoolTrimTo` does (the blocks are given back regardless), and
    /// in a process forked from one that used npu-rs ([`Error::Forked`], nothing given back:
    /// the blocks are the parent's memory).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// pool.reserve(&stream, 2, 4096).await?;
    /// assert_eq!(pool.trim_to(4096)?, 4096, "one of the two blocks");
    /// assert_eq!(pool.stats().cache.cached, 4096);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn trim_to(&self, bytes: usize) -> Result<usize> {
        self.trim_named("DevicePool::trim_to", bytes)
    }

    /// [`trim_to`](DevicePool::trim_to), refused in a forked child as `api`: the blocks are
    /// the parent's memory, which the child's frees (refused) would not give back, so it
    /// would report bytes given back that were leaked.
    fn trim_named(&self, api: &'static str, bytes: usize) -> Result<usize> {
        npu_core::fork::refuse(crate::SEAL, api)?;
        // Under the drain lock from taking the blocks out of the cache until their frees are
        // queued and counted (`Source::giving_back`), as a drain frees the cache.
        let freed = self.cache.trim_to(bytes);
        self.cache.source().trim_runtime(bytes)?;
        Ok(freed)
    }

    /// Resolves once every block of the pool is back: none handed out, none dropped while
    /// the device still used it and awaiting its operations (or, after a memory error, its
    /// examination), none being allocated. Then [`stats`](DevicePool::stats)`.cache` shows
    /// `allocated` and `awaiting_blocks` 0. Blocks handed out after it resolved are not
    /// waited for; while a task keeps one, it does not resolve (bound it with a timeout). A block that is never
    /// given back keeps it pending for good: one `mem::forget`-ed, or owned by a forgotten
    /// operation or allocation future. It resolves when a poll finds the pool settled, so stop
    /// handing blocks out first: tasks that keep allocating may never leave it settled when it
    /// looks. Quarantined blocks (after a memory error) do not count: they are not coming
    /// back. A pending `settled()` keeps the pool's cache, and its cached memory, alive.
    /// In a forked child (`npu_core::forked`) it resolves at
    /// once, whatever the counters show: no thread there completes the parent's operations, so
    /// their blocks never come back.
    /// Under a paused Tokio clock it keeps nothing, as a queued [`alloc`](DevicePool::alloc)
    /// keeps nothing. Cancel-safe: dropping it only stops waiting.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// let block = pool.alloc::<u8>(&stream, 4096).await?;
    /// drop(stream.memset(block, 7)); // in flight: the block comes back after it
    /// pool.settled().await;
    /// assert_eq!(pool.stats().cache.awaiting_blocks, 0);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn settled(&self) -> impl Future<Output = ()> + Send + Unpin + 'static + use<> {
        self.cache.settled()
    }

    /// A snapshot of the pool's counters.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (pool, stream) = (DevicePool::new(&ctx)?, Stream::new(&ctx)?);
    /// let _block = pool.alloc::<u8>(&stream, 4096).await?;
    /// assert_eq!(pool.stats().cache.allocated, 4096);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// A new block of the runtime's pool is made on the allocating stream, and counts in
    /// `allocating` until the stream has run its allocation (here, until the held device
    /// runs again; a program of its own, since holding the device would hold other examples'
    /// work on it):
    ///
    /// ```standalone_crate
    /// use futures::FutureExt;
    /// use npu_core::Device;
    /// use npu_stream::{DevicePool, DevicePoolBackend, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let pool = DevicePool::builder(&ctx).backend(DevicePoolBackend::RuntimePool).build()?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// let mut alloc = Box::pin(pool.alloc::<u8>(&stream, 4096));
    /// assert!((&mut alloc).now_or_never().is_none());
    /// let making = pool.stats().cache;
    /// assert_eq!((making.allocating, making.reserved, making.misses), (4096, 0, 0));
    /// npu_sim::control::release(1).unwrap();
    /// let _block = alloc.await?;
    /// let made = pool.stats().cache;
    /// assert_eq!((made.allocating, made.allocated, made.misses), (0, 4096, 1));
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn stats(&self) -> DevicePoolStats {
        let source = self.cache.source();
        DevicePoolStats {
            cache: self.cache.stats(),
            backend: source.backend(),
            runtime: source.usage(),
        }
    }

    /// Checks a request and finds its size class; errors name the method the caller called
    /// and what it gave the size as (`len` or `bytes`).
    fn check<T: Pod>(
        &self,
        (api, argument): (&'static str, &'static str),
        stream: &Stream,
        len: usize,
    ) -> Result<usize> {
        let bytes = byte_size::<T>(crate::SEAL, api, argument, len)?;
        if !stream.context().same(self.context()) {
            let (theirs, ours) = (stream.context(), self.context());
            let problem = if theirs.runtime().same_library(ours.runtime()) {
                format!(
                    "belongs to another context (device {}) than the pool's (device {})",
                    theirs.device_id(),
                    ours.device_id()
                )
            } else {
                format!(
                    "belongs to another AscendCL runtime than the pool's (device {} of {}, the \
                     pool on device {} of {})",
                    theirs.device_id(),
                    theirs.runtime().backend(),
                    ours.device_id(),
                    ours.runtime().backend()
                )
            };
            // What to do about it: a pool's blocks are memory of its context, ordered on its
            // streams, so the only fix is a stream of that context.
            let problem = format!(
                "{problem}: allocate on a stream of the pool's context (DevicePool::context)"
            );
            return Err(Error::invalid(api, "stream", problem));
        }
        self.cache.class_for(api, argument, bytes)
    }

    /// Frees the cached blocks for an allocation out of memory; returns the bytes freed.
    /// `keep`: a class whose cached blocks stay, for a reserve of that class, which must not
    /// free the blocks it reserved to make room for the next (it then reported blocks
    /// reserved that it had freed itself).
    fn free_cache(&self, keep: Option<usize>) -> usize {
        match keep {
            None => self.cache.trim_to(0),
            Some(class) => self.cache.trim_except(class),
        }
    }

    /// A new block with `aclrtMalloc`; out of memory, frees the cache (but `keep`'s class,
    /// see [`free_cache`](DevicePool::free_cache)) and tries once more, if that freed blocks
    /// or blocks were freed since the attempt began (another thread's trim or eviction).
    ///
    /// Whether any were is asked under the drain lock, which every way blocks leave the cache
    /// holds until their `aclrtFree` is made and counted (`Source::giving_back`): without it,
    /// a request that found the cache emptied by a trim on another thread, its frees not yet
    /// made, failed out of memory while the memory was on its way back.
    fn malloc_now(&self, class: usize, keep: Option<usize>) -> Result<DeviceBlock> {
        match self.malloc_counting(class) {
            (attempted, Err(err)) if err.is_out_of_memory() => {
                self.malloc_again(class, keep, attempted, err)
            }
            (_, allocated) => allocated,
        }
    }

    /// `aclrtMalloc` of `class` bytes, with the frees counted before it
    /// ([`Returns::attempt`](returns::Returns::attempt)), for
    /// [`malloc_again`](DevicePool::malloc_again).
    fn malloc_counting(&self, class: usize) -> (Attempted, Result<DeviceBlock>) {
        let source = self.cache.source();
        // The caching backend ignores the stream.
        source
            .returns
            .attempt(|| source.malloc(class, std::ptr::null_mut()))
    }

    /// After `attempted`, an `aclrtMalloc`, failed out of memory with `err`: one more if
    /// memory came back since it began or freeing the cache (but `keep`'s class) gave some
    /// back, after the frees in progress on other threads are made (the drain lock, refused
    /// on this thread as for a drain, is then not waited for)
    /// ([`Returns::retry`](returns::Returns::retry)); else `err`.
    fn malloc_again(
        &self,
        class: usize,
        keep: Option<usize>,
        attempted: Attempted,
        err: Error,
    ) -> Result<DeviceBlock> {
        let source = self.cache.source();
        source
            .returns
            .retry(
                attempted,
                || self.free_cache(keep) > 0,
                || source.malloc(class, std::ptr::null_mut()),
            )
            .unwrap_or(Err(err))
    }

    /// Fills granted room with a new block: on the runtime pool a stream-ordered allocation
    /// on `stream`, awaited so that the memory is valid on every stream; on the caching
    /// backend `aclrtMalloc`. `api` is the pool method the caller called, which a refused
    /// submission names; `keep` is a class whose cached blocks stay (see
    /// [`free_cache`](DevicePool::free_cache)). The block and how long it took; the caller
    /// counts it as handed out or cached (the room is its own from here: a failure, or a
    /// dropped future, gives it back).
    ///
    /// Out of memory, it lets memory already on its way back arrive
    /// ([`returns_arrived`](DevicePool::returns_arrived)), then frees the cache and, on the
    /// runtime pool, awaits the release stream's run of every free queued so far
    /// ([`drain_cache`](DevicePool::drain_cache)); on the caching backend, whose frees are
    /// immediate, it retries if any were made ([`malloc_now`](DevicePool::malloc_now)).
    async fn new_block(
        &self,
        api: &'static str,
        stream: &Stream,
        class: usize,
        keep: Option<usize>,
    ) -> Result<(DeviceBlock, Duration)> {
        let room = Arc::new(Room {
            cache: self.cache.clone(),
            class,
            filled: AtomicBool::new(false),
        });
        let started = Instant::now();
        let block = match self.cache.source().release_stream() {
            Some(release) => self.malloc_on(api, stream, &room, release, keep).await,
            None => match self.malloc_counting(class) {
                (attempted, Err(err)) if err.is_out_of_memory() => {
                    self.returns_arrived(class).await;
                    self.malloc_again(class, keep, attempted, err)
                }
                (_, allocated) => allocated,
            },
        }?;
        room.filled.store(true, Ordering::Release);
        Ok((block, started.elapsed()))
    }

    /// For a request out of memory holding `own` bytes of room: when the pool has blocks out
    /// beyond it (handed out, awaiting their operations, or an allocation in progress),
    /// awaits one pass of the reaper ([`npu_core::reaper::passed`]).
    ///
    /// A block whose operations the device has finished, or an abandoned allocation's block
    /// once its allocation completed, comes back in a release the completion hands to the
    /// reaper (an operation's value, a buffer's deferred return, the unclaimed slot). Until
    /// that release ran, the block was neither cached nor its free counted, and a request out
    /// of memory failed while it was on its way back (`tests/pool_memory_on_its_way_back.rs`
    /// holds the reaper in front of each). The reaper runs immediate calls alone, so the pass
    /// waits for no device work: blocks whose operations have not completed are not waited
    /// for (their stream may never run them), and with nothing out nothing is.
    async fn returns_arrived(&self, own: usize) {
        if self.cache.holds_beyond(own) {
            npu_core::reaper::passed().await;
        }
    }

    /// A stream-ordered allocation on `stream` for `room`; out of memory, the waits of
    /// [`new_block`](DevicePool::new_block) and one retry.
    async fn malloc_on(
        &self,
        api: &'static str,
        stream: &Stream,
        room: &Arc<Room>,
        release: &Stream,
        keep: Option<usize>,
    ) -> Result<DeviceBlock> {
        match self.submit_malloc(api, stream, room).await {
            Err(err) if err.is_out_of_memory() => {
                self.returns_arrived(room.class).await;
                if !self.drain_cache(release, keep).await {
                    return Err(err);
                }
                self.cache.source().trim_runtime(0)?;
                self.submit_malloc(api, stream, room).await
            }
            allocated => allocated,
        }
    }

    /// Out of memory on the runtime pool: gives every cached block back to the runtime pool
    /// (on the pool's own release stream, as any eviction) and waits until that stream has
    /// run those frees, so that the runtime can reuse or release their memory when the
    /// allocation is tried again. (Frees queued and not yet run when the retry came left it
    /// failing as the first attempt had.) Whether memory may be on its way back: blocks were
    /// cached, or frees no earlier drain covers are queued.
    ///
    /// The wait is an operation like any other: a synchronisation of the release stream (an
    /// `npu_stream::Stream` of `Strategy::EventPoll`), that is, an event recorded on it after
    /// the frees, which the reactor watches and which wakes this task once the device has run
    /// them. No thread blocks meanwhile, and a paused clock stands still, as for any device
    /// wait. Whatever becomes of the stream, the operation ends: a device fault that stops it,
    /// a lost device (the sentinel finds it dead), a forked child (the record is refused with
    /// `Error::Forked`) end it with an error, and the retry then says whether the memory came
    /// back. Dropping the `alloc` future mid-drain drops only its wait: the device still runs
    /// the frees, and the operation still completes for any request waiting on it.
    ///
    /// The frees are not queued on the caller's stream: there they would run only once the
    /// stream ran, and never on a stream that does not (stopped, or blocked and then aborted),
    /// which left the memory of every block the cache held reusable by that stream alone, and
    /// every other stream of the pool out of memory for the pool's life.
    ///
    /// A request that finds nothing left to free while another's drain is on its way (two
    /// requests out of memory at once: the first freed the whole cache) waits for that drain
    /// and retries too: it failed out of memory while the memory it needed was being given
    /// back. The cache is freed and the drain published under one lock (`draining`), so a
    /// request never finds the cache emptied by a drain it cannot see yet.
    ///
    /// Nor by frees no drain waits for: blocks the pool gave back otherwise (a trim, the
    /// eviction that made room for this very request in a bounded pool, an allocation whose
    /// `alloc` was dropped) are on the release stream too, and until it runs them their memory
    /// is neither the device's nor reusable on another stream. The source counts the batches
    /// of frees it queued and each drain the batches it covers; a request that finds nothing
    /// to free but frees no drain covers synchronises the stream itself. Before, such a
    /// request failed out of memory at once: a `trim` followed by a request for the memory it
    /// gave back, or a bounded pool evicting its cache for a request, on a device they filled.
    async fn drain_cache(&self, release: &Stream, keep: Option<usize>) -> bool {
        // The drain lock is held across the frees and the synchronisation's submission, which
        // make only the runtime's immediate calls: the cache's lock is released before the
        // frees, and the release stream's submission lock ranks above the drain lock. Taken
        // again on this thread (a tracing subscriber called back from inside those calls that
        // runs a request out of memory), it is not waited for (`Returns::drain`).
        let drain = self.cache.source().returns.drain(
            || self.free_cache(keep) > 0,
            || {
                let own = release.synchronize();
                let completion = own.completion().clone();
                (own, completion)
            },
        );
        // Failed or not, the retry says whether the memory came back.
        match drain {
            // Nothing was ever given back: no memory is on its way.
            None => return false,
            Some(Drain::Own(own)) => drop(own.await),
            Some(Drain::Theirs(theirs)) => drop(theirs.wait().await),
        }
        true
    }

    async fn submit_malloc(
        &self,
        api: &'static str,
        stream: &Stream,
        room: &Arc<Room>,
    ) -> Result<DeviceBlock> {
        let class = room.class;
        let slot = Unclaimed {
            cache: self.cache.clone(),
            block: None,
            _room: room.clone(),
        };
        let op = stream.submit(
            (api, "stream"),
            "aclrtMemPoolMallocAsync",
            class,
            slot,
            |_, _| {},
            |slot, raw| {
                slot.block = Some(self.cache.source().malloc(class, raw)?);
                Ok(())
            },
        );
        match op.await {
            Ok(mut slot) => slot.block.take().ok_or_else(|| {
                Error::invalid("aclrtMemPoolMallocAsync", "ptr", "no block was returned")
            }),
            // The slot, dropped with the error, gives an allocated block back.
            Err(failed) => Err(failed.error),
        }
    }

    fn buffer<T: Pod>(&self, block: DeviceBlock, len: usize) -> PooledDeviceBuffer<T> {
        PooledDeviceBuffer {
            pool: self.cache.clone(),
            block: ManuallyDrop::new(block),
            len,
            uses: UseList::new(),
            _elements: PhantomData,
        }
    }
}

/// Granted room an awaited allocation is filling, shared by the `alloc` future and the
/// stream-ordered allocations it submitted: given back unless filled once neither holds it.
/// So a dropped `alloc` future does not keep capacity, nor give it back while its allocation
/// is still queued on the device (each dropped future would otherwise queue another block
/// while the pool counted none).
struct Room {
    cache: Arc<Cache<DeviceSource>>,
    class: usize,
    filled: AtomicBool,
}

impl Drop for Room {
    fn drop(&mut self) {
        if !self.filled.load(Ordering::Acquire) {
            self.cache.room_unused(self.class);
        }
    }
}

/// The block a stream-ordered allocation produced, until `alloc` claims it. Dropped unclaimed
/// (the allocation failed after the runtime wrote the address, or the `alloc` future was
/// dropped and the operation completed later), it goes back to the runtime: nothing used it;
/// then its share of the room goes (fields drop after `drop`).
struct Unclaimed {
    cache: Arc<Cache<DeviceSource>>,
    block: Option<DeviceBlock>,
    _room: Arc<Room>,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            use npu_mem::pool_cache::Source;
            // As one step under the drain lock, as the cache's blocks are given back: a
            // request out of memory meanwhile saw neither the block nor its free, and failed
            // while its memory was on its way back.
            let source = self.cache.source();
            source.giving_back(|| source.free(vec![block]));
        }
    }
}

impl fmt::Debug for DevicePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePool")
            .field("device", &self.context().device_id())
            .field("capacity", &self.capacity())
            .field("backend", &self.backend())
            .field("stats", &self.cache.stats())
            .finish()
    }
}
