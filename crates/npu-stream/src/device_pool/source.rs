//! Where a device pool's blocks come from: the runtime's stream-ordered pool
//! (`aclrtMemPool*`) or plain `aclrtMalloc`, and how each gives blocks back.

use std::ffi::c_void;
use std::fmt;

use npu_core::ffi::{self, AclApi};
use npu_core::{Context, Error, Result, acl_call, acl_call_opt};
use npu_mem::pool_cache::{Repair, Seal, Source};

use super::DevicePoolBackend;
use super::returns::Returns;
use crate::stream::Stream;

/// One device allocation the pool caches. Owning it means owning the memory; it goes back
/// only through [`DeviceSource::free`] (dropping it leaks until the pool is destroyed).
pub(crate) struct DeviceBlock {
    pub(crate) ptr: *mut c_void,
    pub(crate) bytes: usize,
}

// SAFETY: a device address is an integer to the host; whoever owns the block may use and
// free it from any thread.
unsafe impl Send for DeviceBlock {}
// The impl above vouches for `ptr` alone: every other field is `Send` of its own, checked here, and
// a field added later breaks this pattern until it is checked too.
const _: fn(&DeviceBlock) = |fields| {
    let DeviceBlock { ptr: _, bytes } = fields;
    let _: [&dyn Send; 1] = [bytes];
};

/// The functions the runtime-pool backend calls: all optional in `AclApi` (newer CANN).
const POOL_API: [&str; 6] = [
    "aclrtMemPoolCreate",
    "aclrtMemPoolDestroy",
    "aclrtMemPoolSetAttr",
    "aclrtMemPoolMallocAsync",
    "aclrtMemPoolFreeAsync",
    "aclrtMemPoolTrimTo",
];

/// The first function of the pool API the runtime does not export, if any.
pub(crate) fn missing_pool_api(api: &AclApi) -> Option<&'static str> {
    let exported = [
        api.aclrtMemPoolCreate.is_some(),
        api.aclrtMemPoolDestroy.is_some(),
        api.aclrtMemPoolSetAttr.is_some(),
        api.aclrtMemPoolMallocAsync.is_some(),
        api.aclrtMemPoolFreeAsync.is_some(),
        api.aclrtMemPoolTrimTo.is_some(),
    ];
    POOL_API
        .into_iter()
        .zip(exported)
        .find_map(|(name, present)| (!present).then_some(name))
}

/// What the builder's choice and the runtime's exports allow, before creating anything.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// The caching allocator, for this reason.
    Caching(String),
    /// Try a runtime pool; `forced` makes its failure the builder's.
    Runtime { forced: bool },
}

fn plan(api: &AclApi, forced: Option<DevicePoolBackend>) -> Result<Plan> {
    if forced == Some(DevicePoolBackend::Caching) {
        return Ok(Plan::Caching("forced by DevicePoolBuilder::backend".into()));
    }
    let forced = forced == Some(DevicePoolBackend::RuntimePool);
    match missing_pool_api(api) {
        Some(api) if forced => Err(Error::Unsupported { api }),
        Some(api) => Ok(Plan::Caching(format!("the runtime does not export {api}"))),
        None => Ok(Plan::Runtime { forced }),
    }
}

/// Whether the caching backend stands in for a runtime pool whose creation failed with `err`:
/// for every failure but those its own allocations would meet as well, a lost device and a
/// forked child, which are the caller's to hear. Creating a runtime pool takes more than
/// `aclrtMemPoolCreate` (a release stream, an attribute set on the pool), and a runtime may
/// refuse any of it in ways the caching backend does not need (a function or feature its
/// driver or chip lacks, an attribute it does not take: the reference calls the pool API
/// experimental, and names no codes for it), so those fall back.
fn caching_stands_in(err: &Error) -> bool {
    !err.is_device_lost() && !matches!(err, Error::Forked { .. })
}

/// The runtime's counters for the pool (`aclrtMemPoolGetAttr`), in bytes.
///
/// They are the runtime's own accounting, not the blocks' sizes that
/// [`DevicePoolStats::cache`](crate::DevicePoolStats) counts: a runtime may count each block
/// with its allocation padding (npu-sim counts a pool block as `aclrtMalloc` does, with 32
/// bytes of padding, to a multiple of 32), so at rest `used` can exceed the cache's `cached`
/// (two cached 4 KiB blocks are 8256 bytes `used` on npu-sim).
///
/// ```
/// use npu_core::Device;
/// use npu_stream::{DevicePool, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let pool = DevicePool::new(&ctx)?; // npu-sim exports the pool API
/// let stream = Stream::new(&ctx)?;
/// let _block = pool.alloc::<u8>(&stream, 4096).await?;
/// let usage = pool.stats().runtime.expect("the runtime pool reports its counters");
/// assert!(usage.used >= 4096 && usage.reserved >= usage.used);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimePoolUsage {
    /// Memory the runtime pool holds (`ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved: u64,
    /// The most it has held (`ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH`).
    pub reserved_high: u64,
    /// Memory handed out and not returned (`ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT`).
    pub used: u64,
    /// The most it has handed out (`ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH`).
    pub used_high: u64,
}

/// A runtime memory pool and the stream its frees are queued on.
struct RuntimePool {
    pool: ffi::aclrtMemPool,
    /// A stream of the pool's own for `aclrtMemPoolFreeAsync`: nothing else runs on it, so a
    /// free executes as soon as the device reaches it and never waits behind user work.
    ///
    /// An npu-stream [`Stream`] (`Strategy::EventPoll`), so that the out-of-memory drain can
    /// await "the stream has run the frees queued so far" as any operation is awaited: an
    /// event recorded on it, which the reactor watches (`DevicePool::drain_cache`). The frees
    /// themselves are raw `aclrtMemPoolFreeAsync` calls on its handle: they are made from
    /// drops and the reaper, and are no operation anyone awaits.
    release: Stream,
    /// Held across `aclrtMemPoolTrimTo`, so that one trim of this pool never overlaps
    /// another. A trim takes its blocks out of the pool before their memory is back on the
    /// device: requests retrying out of memory at once each trim before they retry, and one
    /// whose trim found nothing left (another's had taken every block) retried while the
    /// other's was still giving the memory back, and failed out of memory again with the
    /// pool empty (`pool_out_of_memory_drain`, about 1 run in 6). Once this trim has the lock,
    /// every earlier trim has returned.
    trims: std::sync::Mutex<()>,
}

// SAFETY: the pool is a runtime handle, usable from any thread once the context is bound;
// the stream is `Send`.
unsafe impl Send for RuntimePool {}
// SAFETY: every use of the pool is an ACL call, which the runtime makes thread-safe; the
// stream is `Sync`.
unsafe impl Sync for RuntimePool {}
// The impls above vouch for `pool` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&RuntimePool) = |fields| {
    let RuntimePool {
        pool: _,
        release,
        trims,
    } = fields;
    let _: [&(dyn Send + Sync); 2] = [release, trims];
};

/// How the blocks are allocated and freed.
enum Backend {
    Runtime(RuntimePool),
    Caching,
}

/// A device pool's source of blocks, in one context.
pub(crate) struct DeviceSource {
    pub(crate) context: Context,
    backend: Backend,
    /// Why this backend was chosen.
    pub(crate) reason: String,
    /// The frees it queued and the latest out-of-memory drain of the release stream
    /// (`DevicePool::drain_cache`): a request out of memory that finds the cache already freed
    /// by another waits for that drain before its retry, as the memory is on its way back.
    pub(crate) returns: Returns<npu_core::Completion>,
}

impl DeviceSource {
    /// The source the builder asked for: `Some` forces a backend, `None` takes the runtime pool
    /// when the runtime exports its API and creating one succeeds.
    pub(crate) fn new(context: Context, forced: Option<DevicePoolBackend>) -> Result<Self> {
        // Whatever the plan: a pool of the caching backend makes no runtime call to be made
        // (on a runtime without the pool API too), but every allocation from it would be
        // refused in the child all the same.
        npu_core::fork::refuse(crate::SEAL, "DevicePoolBuilder::build")?;
        let caching = |reason: String| DeviceSource {
            context: context.clone(),
            backend: Backend::Caching,
            reason: format!("{reason}: aclrtMalloc with completion-tracked reuse"),
            returns: Returns::new(),
        };
        let force = match plan(context.runtime().api(), forced)? {
            Plan::Caching(reason) => return Ok(caching(reason)),
            Plan::Runtime { forced } => forced,
        };
        match RuntimePool::create(&context) {
            Ok(pool) => Ok(DeviceSource {
                reason: if force {
                    "forced by DevicePoolBuilder::backend: the runtime's stream-ordered pool".into()
                } else {
                    "the runtime exports the stream-ordered pool API (aclrtMemPool*)".into()
                },
                context,
                backend: Backend::Runtime(pool),
                returns: Returns::new(),
            }),
            Err(err) if !force && caching_stands_in(&err) => {
                Ok(caching(format!("creating a runtime pool failed ({err})")))
            }
            Err(err) => Err(err),
        }
    }

    /// Which backend this is.
    pub(crate) fn backend(&self) -> DevicePoolBackend {
        match self.backend {
            Backend::Runtime(_) => DevicePoolBackend::RuntimePool,
            Backend::Caching => DevicePoolBackend::Caching,
        }
    }

    /// Whether allocations are stream operations (`aclrtMemPoolMallocAsync`), which must be
    /// submitted on a stream and waited for before the memory is used on another stream.
    pub(crate) fn stream_ordered(&self) -> bool {
        matches!(self.backend, Backend::Runtime(_))
    }

    /// A new block of `bytes`: `aclrtMemPoolMallocAsync` on `stream` (the caller holds its
    /// submission lock, with the context bound), or `aclrtMalloc`, which ignores `stream`.
    pub(crate) fn malloc(&self, bytes: usize, stream: ffi::aclrtStream) -> Result<DeviceBlock> {
        let runtime = self.context.runtime();
        let mut ptr = std::ptr::null_mut();
        match &self.backend {
            Backend::Caching => {
                self.context.bind()?;
                // SAFETY: `ptr` is a valid out-pointer; the context is bound on this thread.
                unsafe {
                    acl_call!(
                        runtime,
                        aclrtMalloc(&mut ptr, bytes, ffi::ACL_MEM_MALLOC_HUGE_FIRST)
                    )
                }?;
            }
            Backend::Runtime(pool) => {
                // SAFETY: `ptr` is a valid out-pointer, `pool` is our live pool and `stream`
                // a live stream of the bound context.
                unsafe {
                    acl_call_opt!(
                        runtime,
                        aclrtMemPoolMallocAsync(&mut ptr, bytes, pool.pool, stream)
                    )
                }?;
            }
        }
        Ok(DeviceBlock { ptr, bytes })
    }

    /// The runtime pool's release stream, where its frees are queued; `None` on the caching
    /// backend, whose frees are immediate. `DevicePool::drain_cache` awaits a synchronisation
    /// of it (an event the reactor watches) for the frees queued so far to have run: nothing
    /// blocks meanwhile, no drop and no shared thread waits for it.
    pub(crate) fn release_stream(&self) -> Option<&Stream> {
        match &self.backend {
            Backend::Runtime(pool) => Some(&pool.release),
            Backend::Caching => None,
        }
    }

    /// Asks the runtime pool to release idle memory down to `keep` bytes.
    pub(crate) fn trim_runtime(&self, keep: usize) -> Result<()> {
        let Backend::Runtime(pool) = &self.backend else {
            return Ok(());
        };
        // Before the trims' lock, which a thread of the parent may have held at the fork
        // across the call (and on the thread that forked the bind below answers `Ok`).
        npu_core::fork::refuse(crate::SEAL, "aclrtMemPoolTrimTo")?;
        // Bound although the reference states no context for the pool's calls, as for its
        // frees (docs/architecture.md).
        self.context.bind()?;
        // A plain lock: a trim makes one immediate runtime call and never waits for the device.
        let _trimming = pool.trims.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `pool` is our live pool.
        unsafe { acl_call_opt!(self.context.runtime(), aclrtMemPoolTrimTo(pool.pool, keep)) }
    }

    /// The runtime pool's counters, for the runtime-pool backend.
    pub(crate) fn usage(&self) -> Option<RuntimePoolUsage> {
        let Backend::Runtime(pool) = &self.backend else {
            return None;
        };
        // Bound for the reason `trim_runtime` gives.
        self.context.bind().ok()?;
        let read = |attr| {
            let mut value = 0u64;
            // SAFETY: `pool` is our live pool; these attributes are uint64_t values.
            let got = unsafe {
                acl_call_opt!(
                    self.context.runtime(),
                    aclrtMemPoolGetAttr(pool.pool, attr, (&raw mut value).cast())
                )
            };
            got.map(|()| value)
        };
        Some(RuntimePoolUsage {
            reserved: read(ffi::ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT).ok()?,
            reserved_high: read(ffi::ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH).ok()?,
            used: read(ffi::ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT).ok()?,
            used_high: read(ffi::ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH).ok()?,
        })
    }
}

// SAFETY: `free` makes only the runtime's immediate calls (aclrtFree, and
// aclrtMemPoolFreeAsync, which queues the free on the pool's release stream): it waits for
// neither the device nor another operation. `giving_back` waits only for the drain lock, which
// is held across immediate calls alone (frees, and the submission of the release stream's
// synchronisation) and never across a wait for the device or the reaper.
unsafe impl Source for DeviceSource {
    type Block = DeviceBlock;
    const NAME: &'static str = "DevicePool::alloc";
    const SEAL: Seal = crate::SEAL;

    fn block_bytes(block: &DeviceBlock) -> usize {
        block.bytes
    }

    fn library(&self) -> Option<usize> {
        Some(self.context.runtime().library_id(crate::SEAL))
    }

    /// The blocks are idle: every operation that used them, on any stream, has completed. So
    /// `aclrtFree` frees at once, and `aclrtMemPoolFreeAsync` hands the runtime memory nothing
    /// will touch again, which it may give to any stream.
    fn free(&self, blocks: Vec<DeviceBlock>) {
        let runtime = self.context.runtime();
        let freed = match &self.backend {
            // Bound as for `DeviceBuffer`'s free: the reference does not say aclrtFree ignores
            // the current context.
            Backend::Caching => {
                // Out of the cache and not yet freed, as for the runtime pool's frees below:
                // every way here holds the drain lock across (`giving_back`), and a request
                // out of memory takes it before it looks (`Returns::retry`).
                npu_core::log!(trace, blocks = blocks.len(), "freeing cached blocks");
                let freed = self.context.bind().and_then(|()| {
                    blocks.into_iter().try_for_each(|block| {
                        // SAFETY: the allocation is ours and idle.
                        unsafe { acl_call!(runtime, aclrtFree(block.ptr)) }
                    })
                });
                self.returns.counted();
                freed
            }
            Backend::Runtime(pool) => {
                // Out of the cache (or the unclaimed allocation) and not yet counted: a
                // request out of memory cannot see these frees until they are, so every way
                // here holds the drain lock across (`giving_back`; `tests/fault_accounting.rs`
                // holds a trim, evictions and an unclaimed block here).
                npu_core::log!(
                    trace,
                    blocks = blocks.len(),
                    "queueing frees on the release stream"
                );
                let freed = self.context.bind().and_then(|()| {
                    blocks.into_iter().try_for_each(|block| {
                        // SAFETY: the block came from this pool and is idle; `release` is our
                        // live stream in the bound context.
                        unsafe {
                            acl_call_opt!(
                                runtime,
                                aclrtMemPoolFreeAsync(block.ptr, pool.release.as_raw())
                            )
                        }
                    })
                });
                // Counted after the calls, failed or not (one that failed only costs a
                // request out of memory a synchronisation it did not need).
                self.returns.counted();
                freed
            }
        };
        if let Err(err) = freed {
            npu_core::log!(warn, %err, "pooled device memory was not freed (leaked)");
        }
    }

    /// Under the drain lock, from the blocks leaving the cache until their frees are made
    /// and counted: a request out of memory meanwhile found the cache without them and no
    /// frees counted, took no memory to be on its way back, and failed out of memory while it
    /// was. It now waits for these immediate calls, then counts the frees: on the runtime
    /// pool it synchronises the release stream (`DevicePool::drain_cache`), on the caching
    /// backend, whose `aclrtFree` is done when `free` returns, it retries (`Returns::retry`,
    /// from `DevicePool::malloc_again`). Refused on this thread (held already, as by a drain
    /// freeing the cache, or against the lock order), it goes ahead unlocked.
    fn giving_back<R>(&self, give_back: impl FnOnce() -> R) -> R {
        self.returns.giving_back(give_back)
    }

    const MEMORY_ERRORS: bool = true;

    /// CANN's way back from an uncorrectable memory error (UCE): `aclrtGetMemUceInfo` lists
    /// the device's error ranges, and `aclrtMemUceRepair` repairs those inside the block
    /// (its memory then reads as zeros on npu-sim; what it held is lost). The block is idle,
    /// so none of its own work can touch it meanwhile. A device-wide recovery
    /// (`aclrtDeviceTaskAbort` and `aclrtRepairError`) is not the pool's to make: it would
    /// drop every user's work on the device.
    fn repair(&self, block: &DeviceBlock) -> Repair {
        match self.repair_errors(block) {
            Ok(found) => found,
            Err(err) => Repair::Unrepairable(err.to_string()),
        }
    }
}

/// The most error ranges one `aclrtGetMemUceInfo` call lists (the reference's array size).
const UCE_LIST: usize = ffi::MAX_MEM_UCE_INFO_ARRAY_SIZE as usize;

impl DeviceSource {
    /// Lists the device's error ranges and repairs the block's; an error (a runtime without
    /// either function, a product that does not support them, a failed repair) leaves the
    /// block unrepaired.
    ///
    /// One listing holds at most [`UCE_LIST`] ranges, so a full one that held some of the
    /// block's may have left others out: the block is listed again after each repair, until
    /// a listing is not full (it then holds every range left) or holds none of the block's
    /// (then its remaining ones may be among those left out: unrepairable). Repairing only
    /// the first listing's ranges cached a block with errors still in it.
    fn repair_errors(&self, block: &DeviceBlock) -> Result<Repair> {
        /// Listings after which a block whose ranges keep coming back is given up.
        const ROUNDS: usize = 64;
        let runtime = self.context.runtime();
        self.context.bind()?;
        let device = i32::try_from(self.context.device_id())
            .map_err(|_| Error::invalid("aclrtGetMemUceInfo", "deviceId", "out of range"))?;
        let mut repaired: Vec<String> = Vec::new();
        for _ in 0..ROUNDS {
            let (listed, every) = self.list_errors(device)?;
            let mut ours = match errors_in_block(block, &listed, every) {
                Ok(ours) if ours.is_empty() && repaired.is_empty() => return Ok(Repair::Sound),
                Ok(ours) if ours.is_empty() => break,
                Ok(ours) => ours,
                Err(why) => return Ok(Repair::Unrepairable(why)),
            };
            // SAFETY: `ours` holds entries exactly as the runtime listed them; the block is
            // idle and ours, and the context is bound.
            unsafe {
                acl_call_opt!(
                    runtime,
                    aclrtMemUceRepair(device, ours.as_mut_ptr(), ours.len())
                )
            }?;
            repaired.extend(ours.iter().map(|r| format!("{:p}+{}", r.addr, r.len)));
            if every {
                break;
            }
        }
        // Every range left is listed now, or some may not be (a full listing without the
        // block's, or the rounds used up): only a listing clear of the block's clears it.
        if self.still_listed(block, device)? {
            return Ok(Repair::Unrepairable(format!(
                "error ranges are still listed in the block at {:p}+{} after {} were repaired",
                block.ptr,
                block.bytes,
                repaired.len()
            )));
        }
        Ok(Repair::Repaired(format!(
            "{} in the block at {:p}+{}",
            repaired.join(", "),
            block.ptr,
            block.bytes
        )))
    }

    /// Whether a listing still holds (or may hold, being full) a range of `block`.
    fn still_listed(&self, block: &DeviceBlock, device: i32) -> Result<bool> {
        let (listed, every) = self.list_errors(device)?;
        Ok(!matches!(errors_in_block(block, &listed, every), Ok(ours) if ours.is_empty()))
    }

    /// One listing of the device's error ranges (`aclrtGetMemUceInfo`), and whether it holds
    /// every range (it is not full). The caller has bound the context on this thread.
    fn list_errors(&self, device: i32) -> Result<(Vec<ffi::aclrtMemUceInfo>, bool)> {
        let mut listed = vec![ffi::aclrtMemUceInfo::default(); UCE_LIST];
        let mut count = 0;
        // SAFETY: `listed` holds UCE_LIST entries and `count` is a valid out-pointer; the
        // context is bound (by the caller, on this thread).
        unsafe {
            acl_call_opt!(
                self.context.runtime(),
                aclrtGetMemUceInfo(device, listed.as_mut_ptr(), UCE_LIST, &mut count)
            )
        }?;
        let every = count < UCE_LIST;
        listed.truncate(count.min(UCE_LIST));
        Ok((listed, every))
    }
}

/// The listed error ranges inside `block`, to repair (none: the error was in other memory);
/// or why the block cannot be repaired alone. `every` says whether the list is complete
/// (shorter than one call can return).
///
/// A range that overlaps the block but reaches past it is not repaired: the rest may be
/// another allocation's (a neighbouring block of the runtime pool, say), whose contents a
/// repair would lose. When the list is full and holds none of the block's, its own may be
/// among those the runtime did not return. Either way the block may still be bad, so it is
/// not reused.
fn errors_in_block(
    block: &DeviceBlock,
    listed: &[ffi::aclrtMemUceInfo],
    every: bool,
) -> std::result::Result<Vec<ffi::aclrtMemUceInfo>, String> {
    let (start, end) = (
        block.ptr as usize,
        (block.ptr as usize).saturating_add(block.bytes),
    );
    let mut ours = Vec::new();
    for range in listed {
        let (at, until) = (
            range.addr as usize,
            (range.addr as usize).saturating_add(range.len),
        );
        if until <= start || at >= end {
            continue;
        }
        if at < start || until > end {
            return Err(format!(
                "the error range {:p}+{} reaches past the block at {:p}+{}: repairing it \
                 would touch memory that is not the block's",
                range.addr, range.len, block.ptr, block.bytes
            ));
        }
        ours.push(*range);
    }
    if ours.is_empty() && !every {
        return Err(format!(
            "the runtime listed {} error ranges, as many as one call returns, none in the \
             block at {:p}+{}: its own may be among the others",
            listed.len(),
            block.ptr,
            block.bytes
        ));
    }
    Ok(ours)
}

impl RuntimePool {
    /// A pool on the context's device, its reuse limited to what needs no hidden wait.
    fn create(context: &Context) -> Result<RuntimePool> {
        context.bind()?;
        let runtime = context.runtime();
        let props = ffi::aclrtMemPoolProps {
            allocType: ffi::ACL_MEM_ALLOCATION_TYPE_PINNED,
            handleType: ffi::ACL_MEM_HANDLE_TYPE_NONE,
            location: ffi::aclrtMemLocation {
                id: context.device_id(),
                type_: ffi::ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            // The device's capacity: the pool's own capacity is counted in size classes, which
            // the runtime pads, so a runtime limit would refuse what the pool admits.
            maxSize: 0,
            ..Default::default()
        };
        let mut pool = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call; the context is bound.
        unsafe { acl_call_opt!(runtime, aclrtMemPoolCreate(&mut pool, &props)) }?;
        let release = match Stream::new(context) {
            Ok(release) => release,
            Err(err) => {
                Teardown {
                    pool,
                    release: None,
                }
                .spawn(context);
                return Err(err);
            }
        };
        let pool = RuntimePool {
            pool,
            release,
            trims: std::sync::Mutex::new(()),
        };
        // Every block is freed only once idle, so any reuse is safe; but the runtime's
        // "internal dependencies" reuse would queue a wait for our release stream on the
        // user's stream, work npu-rs would not watch. Without it, another stream reuses a
        // block once its free has executed.
        let mut off = 0u32;
        // SAFETY: the attribute takes a uint32_t; the pool is live.
        let set = unsafe {
            acl_call_opt!(
                runtime,
                aclrtMemPoolSetAttr(
                    pool.pool,
                    ffi::ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                    (&raw mut off).cast()
                )
            )
        };
        if let Err(err) = set {
            pool.destroy(context);
            return Err(err);
        }
        Ok(pool)
    }

    /// Destroys the pool and its release stream, on a thread of its own:
    /// `aclrtMemPoolDestroy` synchronises the device, which no shared thread may wait for.
    fn destroy(self, context: &Context) {
        Teardown {
            pool: self.pool,
            release: Some(self.release),
        }
        .spawn(context);
    }
}

/// A runtime pool being destroyed, and its release stream if it got one.
struct Teardown {
    pool: ffi::aclrtMemPool,
    release: Option<Stream>,
}

// SAFETY: as for `RuntimePool`: a runtime handle, and a `Send` stream.
unsafe impl Send for Teardown {}
// The impl above vouches for `pool` alone: every other field is `Send` of its own, checked here,
// and a field added later breaks this pattern until it is checked too.
const _: fn(&Teardown) = |fields| {
    let Teardown { pool: _, release } = fields;
    let _: [&dyn Send; 1] = [release];
};

impl Teardown {
    /// Destroys the pool on a thread of its own: `aclrtMemPoolDestroy` synchronises the
    /// device, which no shared thread may wait for. The thread holds the context, and so may
    /// drop its last handle: it counts as a teardown (`npu_core::wait_for_teardowns` waits for
    /// it).
    fn spawn(self, context: &Context) {
        let library = context.runtime().library_id(crate::SEAL);
        let context = context.clone();
        let spawned =
            npu_core::reaper::spawn_counted(crate::SEAL, "npu-pool-destroy", library, move || {
                self.destroy_now(&context)
            });
        if let Err(err) = spawned {
            npu_core::log!(warn, %err, "no thread to destroy a device memory pool (leaked)");
        }
    }

    fn destroy_now(self, context: &Context) {
        let runtime = context.runtime();
        if let Err(err) = context.bind() {
            npu_core::log!(warn, %err, "a device memory pool was not destroyed (leaked)");
            return;
        }
        let Some(release) = self.release else {
            // SAFETY: the pool is ours and was never used.
            let destroyed = unsafe { acl_call_opt!(runtime, aclrtMemPoolDestroy(self.pool)) };
            if let Err(err) = destroyed {
                npu_core::log!(warn, %err, "a device memory pool was not destroyed (leaked)");
            }
            return;
        };
        // Waits for the frees queued on `release`. A failure (the device lost, a free that
        // failed) is reported only once the stream has run everything queued on it or can
        // never run it again, so the pool is destroyed all the same: stopping at the error
        // leaked it for good (nothing retries), a device lost under a pool leaking every
        // block the pool still held.
        // SAFETY: `release` is our live stream in the bound context.
        let synced = unsafe { acl_call!(runtime, aclrtSynchronizeStream(release.as_raw())) };
        // SAFETY: the pool is ours and no block of it is in use (the last buffer and the last
        // pool handle are gone); only frees ran on `release`, which has nothing left to run.
        let pool = unsafe { acl_call_opt!(runtime, aclrtMemPoolDestroy(self.pool)) };
        // The stream goes with its last handle: this one, or the reactor's, if it still
        // watches an out-of-memory drain's synchronisation (then on the reaper, once that
        // completes). Either way as every `Stream` goes: a stream whose synchronisation failed
        // may hold work it can never run, which an unforced destruction would wait for on
        // CANN, so one the runtime does not report done is forced.
        drop(release);
        if let Err(err) = &synced {
            npu_core::log!(warn, %err, "a device memory pool's frees failed");
        }
        if let Err(err) = pool {
            npu_core::log!(warn, %err, "a device memory pool was not destroyed (leaked)");
        }
    }
}

impl Drop for DeviceSource {
    fn drop(&mut self) {
        if let Backend::Runtime(pool) = std::mem::replace(&mut self.backend, Backend::Caching) {
            pool.destroy(&self.context);
        }
    }
}

impl fmt::Debug for DeviceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSource")
            .field("device", &self.context.device_id())
            .field("backend", &self.backend())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_without_the_pool_api_gets_the_caching_allocator_unless_forced() {
        let mut api = npu_sim::api();
        assert_eq!(plan(&api, None).unwrap(), Plan::Runtime { forced: false });
        api.aclrtMemPoolTrimTo = None;
        let Plan::Caching(reason) = plan(&api, None).unwrap() else {
            panic!("the caching allocator");
        };
        assert!(reason.contains("aclrtMemPoolTrimTo"), "{reason}");
        let forced = plan(&api, Some(DevicePoolBackend::RuntimePool)).unwrap_err();
        assert!(
            matches!(
                forced,
                Error::Unsupported {
                    api: "aclrtMemPoolTrimTo"
                }
            ),
            "{forced}"
        );
        assert!(forced.to_string().contains("aclrtMemPoolTrimTo"));
        assert!(matches!(
            plan(&api, Some(DevicePoolBackend::Caching)).unwrap(),
            Plan::Caching(_)
        ));
    }

    #[test]
    fn only_a_lost_device_or_a_forked_child_keeps_the_caching_backend_from_standing_in() {
        let acl =
            |code| npu_core::AclError::new("aclrtMemPoolCreate", npu_core::AclCode(code), None);
        for falls_back in [
            Error::Unsupported {
                api: "aclrtMemPoolCreate",
            },
            Error::from(acl(ffi::ACL_ERROR_RT_FEATURE_NOT_SUPPORT)),
            Error::from(acl(ffi::ACL_ERROR_API_NOT_SUPPORT)),
            Error::from(acl(ffi::ACL_ERROR_FEATURE_UNSUPPORTED)),
            Error::from(acl(ffi::ACL_ERROR_RT_MEMORY_ALLOCATION)),
            Error::from(acl(ffi::ACL_ERROR_RT_PARAM_INVALID)),
        ] {
            assert!(caching_stands_in(&falls_back), "{falls_back}");
        }
        for returned in [
            Error::Forked {
                api: "aclrtMemPoolCreate",
            },
            Error::from(acl(ffi::ACL_ERROR_RT_LOST_HEARTBEAT)),
        ] {
            assert!(!caching_stands_in(&returned), "{returned}");
        }
    }

    fn range(addr: usize, len: usize) -> ffi::aclrtMemUceInfo {
        ffi::aclrtMemUceInfo {
            addr: addr as *mut c_void,
            len,
            ..Default::default()
        }
    }

    fn ranges(found: &[ffi::aclrtMemUceInfo]) -> Vec<(usize, usize)> {
        found.iter().map(|r| (r.addr as usize, r.len)).collect()
    }

    #[test]
    fn only_the_error_ranges_inside_a_block_are_its_to_repair() {
        let block = DeviceBlock {
            ptr: 0x10000 as *mut c_void,
            bytes: 0x1000,
        };
        let listed = [
            range(0x8000, 0x100),
            range(0x10000, 0x40),
            range(0x10fc0, 0x40),
            range(0x11000, 0x40),
        ];
        let ours = errors_in_block(&block, &listed, true).unwrap();
        assert_eq!(ranges(&ours), [(0x10000, 0x40), (0x10fc0, 0x40)]);
        // Another memory's error: nothing to repair, the block is sound.
        assert!(
            errors_in_block(&block, &listed[..1], true)
                .unwrap()
                .is_empty()
        );
        // Reaching past either end: not the block's alone.
        for straddling in [range(0xffc0, 0x80), range(0x10fe0, 0x40)] {
            let why = errors_in_block(&block, &[straddling], true).unwrap_err();
            assert!(why.contains("reaches past the block"), "{why}");
        }
        // A full list without the block's ranges does not clear it.
        let why = errors_in_block(&block, &listed[..1], false).unwrap_err();
        assert!(why.contains("as many as one call returns"), "{why}");
        assert_eq!(
            errors_in_block(&block, &listed[1..2], false).map(|r| ranges(&r)),
            Ok(vec![(0x10000, 0x40)])
        );
    }

    #[test]
    fn every_pool_function_is_checked() {
        for name in POOL_API {
            let mut api = npu_sim::api();
            match name {
                "aclrtMemPoolCreate" => api.aclrtMemPoolCreate = None,
                "aclrtMemPoolDestroy" => api.aclrtMemPoolDestroy = None,
                "aclrtMemPoolSetAttr" => api.aclrtMemPoolSetAttr = None,
                "aclrtMemPoolMallocAsync" => api.aclrtMemPoolMallocAsync = None,
                "aclrtMemPoolFreeAsync" => api.aclrtMemPoolFreeAsync = None,
                _ => api.aclrtMemPoolTrimTo = None,
            }
            assert_eq!(missing_pool_api(&api), Some(name));
        }
    }
}
