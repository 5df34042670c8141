//! The pools against allocating directly: `PinnedPool` alloc + free on a cache hit versus
//! `aclrtMallocHost` + `aclrtFreeHost` of the same size, on the simulator, which really
//! page-locks (mlock) pinned memory; and `DevicePool` alloc + free on a cache hit versus
//! `aclrtMalloc` + `aclrtFree`, and the same hit on a bounded pool of the caching backend.

use std::ffi::c_void;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use npu_core::{Context, Device, acl_call};
use npu_mem::PinnedPool;
use npu_stream::{DevicePool, DevicePoolBackend, Stream};

use crate::Table;
use crate::stats::{micros, proc_status};
use crate::stream::verdict;

const SECTION: &str = "pinned pool";
const DEVICE_SECTION: &str = "device pool";
/// The speed-up a pool hit must reach over allocating directly.
const TARGET: f64 = 50.0;
const BLOCK: usize = 1 << 20;
const ROUNDS: usize = 15;
const DIRECT_PER_ROUND: u32 = 20;
const POOL_PER_ROUND: u32 = 20_000;

/// Runs the pinned-pool section.
pub fn run(table: &mut Table) {
    let context = Device::open(0)
        .expect("the simulator's device 0")
        .primary_context()
        .clone();
    let pinned = pinning_is_real(&context);
    let direct = best_of(|| direct_round(&context, "aclrtMallocHost", pin_pair));

    let pool = PinnedPool::new(&context);
    drop(block_on(pool.alloc::<u8>(BLOCK)).expect("warming the pool"));
    let pooled = best_of(|| {
        hit_round(|| async {
            let block = pool.alloc::<u8>(BLOCK).await.expect("a cached block");
            drop(std::hint::black_box(block));
        })
    });
    let stats = pool.stats();
    assert_eq!(stats.misses, 1, "every measured allocation must be a hit");

    table.push(
        SECTION,
        "aclrtMallocHost + aclrtFreeHost, 1 MiB, best round",
        format!("{:.1} µs", micros(direct)),
        match pinned {
            Some(true) => "pinning is real (VmLck grows by the block)",
            Some(false) => "NOT page-locked here (mlock refused): the ratio understates",
            None => "page locking not observable on this OS",
        },
    );
    table.push(
        SECTION,
        "PinnedPool alloc + free on a hit, 1 MiB, best round",
        format!("{:.3} µs", micros(pooled)),
        format!("{} hits", stats.hits),
    );
    push_speedup(
        table,
        SECTION,
        "pool hit / direct pinning speed-up",
        direct,
        pooled,
    );
    device_pool(table, &context);
}

/// `DevicePool` alloc + free of a cached block against `aclrtMalloc` + `aclrtFree`; and the
/// same hit on a bounded pool of the caching backend, the one whose evictions must be seen by
/// a request out of memory (the drain lock), which a hit and its return never make.
fn device_pool(table: &mut Table, context: &Context) {
    let direct = best_of(|| direct_round(context, "aclrtMalloc", malloc_pair));
    let stream = Stream::new(context).expect("a stream");
    let pool = DevicePool::new(context).expect("a device pool");
    let (pooled, hits) = device_hits(&pool, &stream);
    table.push(
        DEVICE_SECTION,
        "aclrtMalloc + aclrtFree, 1 MiB, best round",
        format!("{:.1} µs", micros(direct)),
        "",
    );
    table.push(
        DEVICE_SECTION,
        "DevicePool alloc + free on a hit, 1 MiB, best round",
        format!("{:.3} µs", micros(pooled)),
        hits,
    );
    push_speedup(
        table,
        DEVICE_SECTION,
        "pool hit / aclrtMalloc speed-up",
        direct,
        pooled,
    );
    let bounded = DevicePool::builder(context)
        .backend(DevicePoolBackend::Caching)
        .capacity(BOUNDED_CAPACITY)
        .build()
        .expect("a bounded caching device pool");
    let (pooled, hits) = device_hits(&bounded, &stream);
    table.push(
        DEVICE_SECTION,
        "bounded (16 MiB) caching DevicePool alloc + free on a hit, 1 MiB, best round",
        format!("{:.3} µs", micros(pooled)),
        hits,
    );
}

/// The capacity of the bounded device pool: room for the measured block and more.
const BOUNDED_CAPACITY: usize = 16 * BLOCK;

/// The best round of `pool`'s alloc + drop of a cached block on `stream`, and its hits and
/// backend for the table's note.
fn device_hits(pool: &DevicePool, stream: &Stream) -> (Duration, String) {
    drop(block_on(pool.alloc::<u8>(stream, BLOCK)).expect("warming the pool"));
    let pooled = best_of(|| {
        hit_round(|| async {
            let block = pool.alloc::<u8>(stream, BLOCK).await;
            drop(std::hint::black_box(block.expect("a cached block")));
        })
    });
    let stats = pool.stats();
    assert_eq!(
        stats.cache.misses, 1,
        "every measured allocation must be a hit"
    );
    let hits = format!("{} hits, backend {:?}", stats.cache.hits, stats.backend);
    (pooled, hits)
}

fn push_speedup(
    table: &mut Table,
    section: &'static str,
    row: &str,
    direct: Duration,
    pooled: Duration,
) {
    let speedup = direct.as_secs_f64() / pooled.as_secs_f64();
    table.push(
        section,
        row,
        format!("{speedup:.0}×"),
        format!("target ≥ {TARGET:.0}×: {}", verdict(speedup >= TARGET)),
    );
}

/// The fastest per-operation time over the rounds (the least disturbed by the machine).
fn best_of(mut round: impl FnMut() -> Duration) -> Duration {
    (0..ROUNDS).map(|_| round()).min().unwrap_or_default()
}

/// The time of one `alloc` + `free` pair (raw ACL calls on `context`), best round.
fn direct_round(
    context: &Context,
    alloc: &str,
    pair: unsafe fn(&npu_core::Runtime) -> npu_core::Result<()>,
) -> Duration {
    context.bind().expect("binding the context");
    let runtime = context.runtime();
    let start = Instant::now();
    for _ in 0..DIRECT_PER_ROUND {
        // SAFETY: the context is bound on this thread; `pair` frees what it allocates.
        unsafe { pair(runtime) }.unwrap_or_else(|err| panic!("{alloc}: {err}"));
    }
    start.elapsed() / DIRECT_PER_ROUND
}

/// `aclrtMallocHost` + `aclrtFreeHost` of one block.
///
/// # Safety
/// The runtime's context must be bound on this thread.
unsafe fn pin_pair(runtime: &npu_core::Runtime) -> npu_core::Result<()> {
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: `host` is a valid out-pointer; the allocation is freed at once and never used.
    unsafe {
        acl_call!(runtime, aclrtMallocHost(&mut host, BLOCK))?;
        acl_call!(runtime, aclrtFreeHost(host))
    }
}

/// `aclrtMalloc` + `aclrtFree` of one block.
///
/// # Safety
/// The runtime's context must be bound on this thread.
unsafe fn malloc_pair(runtime: &npu_core::Runtime) -> npu_core::Result<()> {
    let mut device: *mut c_void = std::ptr::null_mut();
    // SAFETY: `device` is a valid out-pointer; the allocation is freed at once and never used.
    unsafe {
        acl_call!(runtime, aclrtMalloc(&mut device, BLOCK, 0))?;
        acl_call!(runtime, aclrtFree(device))
    }
}

/// The time of one pool `alloc` + drop (`cycle`), averaged over a round.
fn hit_round<F: Future<Output = ()>>(mut cycle: impl FnMut() -> F) -> Duration {
    block_on(async {
        let start = Instant::now();
        for _ in 0..POOL_PER_ROUND {
            cycle().await;
        }
        start.elapsed() / POOL_PER_ROUND
    })
}

/// Whether an aclrtMallocHost block shows up in the process's locked memory.
fn pinning_is_real(context: &Context) -> Option<bool> {
    context.bind().expect("binding the context");
    let runtime = context.runtime();
    let before = locked_kib()?;
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: `host` is a valid out-pointer; the context is bound; the block is freed below.
    unsafe { acl_call!(runtime, aclrtMallocHost(&mut host, BLOCK)).expect("aclrtMallocHost") };
    let during = locked_kib();
    // SAFETY: frees the block just allocated, which nothing uses.
    unsafe { acl_call!(runtime, aclrtFreeHost(host)).expect("aclrtFreeHost") };
    Some(during? >= before + (BLOCK as u64 >> 10))
}

/// The process's page-locked memory in KiB (`VmLck`), where the OS reports it.
fn locked_kib() -> Option<u64> {
    proc_status("VmLck:")
}
