//! Device pools at the device's limits: built by backend and capacity, filling the device, and
//! blocks given uncorrectable memory errors (npu-sim's control), as the out-of-memory and
//! memory-error tests use them.

use npu::error::AclCode;
use npu::memory::{DevicePool, DevicePoolBackend, DeviceSlice, MemoryMut, PooledDeviceBuffer};
use npu::prelude::*;
use npu::{Stream, ffi, sim};

use super::{exclusive, run, until_released};

/// Devices 0 and 1 to this test alone ([`exclusive`]), of a simulator of `devices` devices of
/// `memory` bytes each (installed by the binary's first call): small enough for a pool to
/// fill one. Device 0's primary context.
pub(crate) fn devices_of(
    devices: u32,
    memory: u64,
) -> (std::sync::MutexGuard<'static, ()>, Context) {
    static CONFIG: std::sync::Once = std::sync::Once::new();
    CONFIG.call_once(|| {
        sim::SimConfig::default()
            .devices(devices)
            .memory_per_device(memory)
            .install()
            .unwrap()
    });
    let (guard, d0, _d1) = exclusive(None);
    (guard, d0)
}

/// A `DevicePool` of `ctx` on `backend`, of at most `capacity` bytes when given.
pub(crate) fn device_pool(
    ctx: &Context,
    backend: DevicePoolBackend,
    capacity: Option<usize>,
) -> DevicePool {
    let builder = DevicePool::builder(ctx).backend(backend);
    match capacity {
        Some(bytes) => builder.capacity(bytes),
        None => builder,
    }
    .build()
    .unwrap()
}

/// 4 MiB blocks of `pool`, allocated on `filler` until the device is out of memory.
pub(crate) fn fill_the_device(pool: &DevicePool, filler: &Stream) -> Vec<PooledDeviceBuffer<u8>> {
    let mut blocks = Vec::new();
    let full = loop {
        match run(pool.alloc::<u8>(filler, 4 << 20)) {
            Ok(block) => blocks.push(block),
            Err(err) => break err,
        }
    };
    assert!(full.is_out_of_memory(), "{full}");
    blocks
}

/// A runtime-pool `DevicePool` whose cache holds idle 4 MiB blocks filling `ctx`'s device
/// (allocated on `filler`, then dropped): nothing else fits until they are freed.
pub(crate) fn pool_holding_the_device(ctx: &Context, filler: &Stream) -> DevicePool {
    let pool = device_pool(ctx, DevicePoolBackend::RuntimePool, None);
    let blocks = fill_the_device(&pool, filler);
    assert!(blocks.len() >= 12, "{} blocks", blocks.len());
    drop(blocks);
    assert!(pool.stats().cache.cached >= 48 << 20);
    pool
}

/// Gives `len` bytes of `block` from byte `at` an uncorrectable memory error.
pub(crate) fn inject(block: &PooledDeviceBuffer<u8>, at: usize, len: usize) {
    let ptr = block.as_raw().wrapping_byte_add(at);
    sim::raw_control::inject_mem_uce(ptr, len).unwrap();
}

/// The device's uncorrectable error ranges, as one `aclrtGetMemUceInfo` call lists them (at
/// most 128).
pub(crate) fn uce_ranges(ctx: &Context) -> Vec<(usize, usize)> {
    ctx.bind().unwrap();
    let api = ctx.runtime().api();
    let get = api
        .aclrtGetMemUceInfo
        .expect("npu-sim exports aclrtGetMemUceInfo");
    const N: usize = ffi::MAX_MEM_UCE_INFO_ARRAY_SIZE as usize;
    let mut listed = vec![ffi::aclrtMemUceInfo::default(); N];
    let mut count = 0;
    // SAFETY: the array holds N entries and `count` is a valid out-pointer.
    let code = unsafe { get(ctx.device_id() as i32, listed.as_mut_ptr(), N, &mut count) };
    ctx.runtime().check("aclrtGetMemUceInfo", code).unwrap();
    listed[..count]
        .iter()
        .map(|r| (r.addr as usize, r.len))
        .collect()
}

/// A memset of `block` that must fail with the memory error: the block handed back.
pub(crate) fn fails_with_the_memory_error(
    s: &Stream,
    block: PooledDeviceBuffer<u8>,
    what: &str,
) -> PooledDeviceBuffer<u8> {
    fails_with_memory_error(s, block, AclCode::DEVICE_MEM_ERROR, what)
}

/// A memset of `block` (or a part of one) that must fail with the memory error `code`: the
/// memory handed back.
pub(crate) fn fails_with_memory_error<
    M: DeviceSlice + MemoryMut + std::fmt::Debug + Send + 'static,
>(
    s: &Stream,
    block: M,
    code: AclCode,
    what: &str,
) -> M {
    let err = run(s.memset(block, 7)).unwrap_err();
    assert_eq!(err.error.acl_code(), Some(code), "{what}: {}", err.error);
    assert!(err.error.is_memory_error(), "{what}");
    err.value.expect("the block handed back")
}

/// Waits until no dropped block of `pool` awaits its operations or its examination.
pub(crate) fn settled(pool: &DevicePool, what: &str) -> npu::PoolStats {
    until_released(what, || pool.stats().cache.awaiting_blocks == 0);
    pool.stats().cache
}
