//! What the pool reports about itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::state::Counts;

/// A snapshot of a pool's counters: a [`PinnedPool`](crate::PinnedPool)'s, or the cache of
/// npu-stream's `DevicePool`.
///
/// Byte counts are in whole blocks (requests rounded to their size class). They add up:
/// `reserved == allocated + awaiting_bytes + cached`, and every successful allocation was
/// either a hit or a miss.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::PinnedPool;
///
/// # tokio_test::block_on(async {
/// let pool = PinnedPool::new(Device::open(0)?.primary_context());
/// drop(pool.alloc::<u8>(1000).await?);
/// let _again = pool.alloc::<u8>(4000).await?; // same 4 KiB class: a hit
/// let stats = pool.stats();
/// assert_eq!((stats.hits, stats.misses), (1, 1));
/// assert_eq!(stats.reserved, stats.allocated + stats.awaiting_bytes + stats.cached);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Bytes of blocks handed out and not yet dropped.
    pub allocated: usize,
    /// Bytes the pool holds: allocated, awaiting events, and cached.
    pub reserved: usize,
    /// Bytes of free blocks ready for reuse.
    pub cached: usize,
    /// Dropped blocks waiting for the device operations that used them to complete (or, after
    /// a memory error, for the pool to look for uncorrectable errors in them).
    pub awaiting_blocks: usize,
    /// Bytes of those blocks.
    pub awaiting_bytes: usize,
    /// The most `allocated` has been.
    pub peak_allocated: usize,
    /// The most `reserved` has been.
    pub peak_reserved: usize,
    /// Allocations served from the cache.
    pub hits: u64,
    /// New blocks made (`aclrtMallocHost` for a pinned pool; `aclrtMalloc` or
    /// `aclrtMemPoolMallocAsync` for a device pool), for an allocation or by `reserve`.
    pub misses: u64,
    /// Cached blocks freed to make room under the capacity.
    pub evictions: u64,
    /// Requests waiting for capacity.
    pub waiters: usize,
    /// Bytes of room granted under the capacity for new blocks not yet made: from the grant
    /// (to a request, to a `reserve`, or to a queued request as it is served) until the block
    /// is made or the room given back. Not part of `reserved`, and not yet a miss. A device
    /// pool's stream-ordered allocation (the runtime pool's `aclrtMemPoolMallocAsync`) stays
    /// here until its stream has run it, and an allocation of either backend out of memory
    /// while it waits for blocks on their way back, so a device that makes no progress shows
    /// as requests stuck in it; a pinned pool's room counts from its grant until
    /// `aclrtMallocHost` returns.
    pub allocating: usize,
    /// Blocks returned after one of their operations failed with an uncorrectable memory
    /// error (UCE, `ACL_ERROR_RT_DEVICE_MEM_ERROR`) in their own range, whose error ranges the
    /// pool repaired (`aclrtMemUceRepair`) before caching them again. A repaired block's
    /// contents are lost. Always 0 for a pinned pool: host memory has no such errors to
    /// repair.
    pub repaired: u64,
    /// Blocks returned with such an error that the pool could not repair, or after an
    /// operation failed with an error that has no repair (`ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR`,
    /// 507054): quarantined, never handed out again. They are not counted in `reserved` (nor against the capacity), so the
    /// pool serves new requests in their place; it keeps their memory from the runtime, which
    /// could otherwise hand it back, until the pool's end.
    pub quarantined: u64,
    /// Bytes of the quarantined blocks.
    pub quarantined_bytes: usize,
    /// Blocks the pool gave back to the runtime (`aclrtFreeHost`, `aclrtFree` or
    /// `aclrtMemPoolFreeAsync`).
    pub frees: u64,
    /// Time spent making new blocks, in total.
    pub alloc_time: Duration,
    /// Time spent giving blocks back, in total.
    pub free_time: Duration,
}

/// The time counters, kept outside the lock because they are measured outside it.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    alloc_ns: AtomicU64,
    free_ns: AtomicU64,
    frees: AtomicU64,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Timing {
    pub(crate) fn allocated(&self, took: Duration) {
        self.alloc_ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    pub(crate) fn freed(&self, blocks: u64, took: Duration) {
        self.frees.fetch_add(blocks, Ordering::Relaxed);
        self.free_ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    pub(crate) fn stats(&self, counts: Counts) -> PoolStats {
        PoolStats {
            allocated: counts.allocated,
            reserved: counts.reserved(),
            cached: counts.cached,
            awaiting_blocks: counts.awaiting_blocks,
            awaiting_bytes: counts.awaiting_bytes,
            peak_allocated: counts.peak_allocated,
            peak_reserved: counts.peak_reserved,
            hits: counts.hits,
            misses: counts.misses,
            evictions: counts.evictions,
            waiters: counts.waiters,
            allocating: counts.growing,
            repaired: counts.repaired,
            quarantined: counts.quarantined,
            quarantined_bytes: counts.quarantined_bytes,
            frees: self.frees.load(Ordering::Relaxed),
            alloc_time: Duration::from_nanos(self.alloc_ns.load(Ordering::Relaxed)),
            free_time: Duration::from_nanos(self.free_ns.load(Ordering::Relaxed)),
        }
    }
}
