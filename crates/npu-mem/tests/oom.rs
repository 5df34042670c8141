//! Out-of-memory is a typed error and leaves every counter as it was.
//!
//! Its own process, and one test: it injects failures into the process's next host allocation
//! and device 1's next allocation and compares process-wide host counters, which a concurrent
//! test would disturb.

use npu_core::{AclCode, Device};
use npu_mem::{DeviceBuffer, PinnedBuffer, PinnedPool};

const OOM: AclCode = AclCode(npu_core::ffi::ACL_ERROR_RT_MEMORY_ALLOCATION);

#[tokio::test]
async fn out_of_memory_is_typed_and_leaves_usage_unchanged() {
    let ctx = Device::open(1).unwrap().primary_context().clone();
    let kept = PinnedBuffer::<u8>::new(&ctx, 4096).unwrap();
    let host_before = npu_sim::control::host_stats().unwrap();

    npu_sim::control::fail_next_host_alloc(OOM.0).unwrap();
    let pinned = PinnedBuffer::<u8>::new(&ctx, 4096).unwrap_err();
    assert_eq!(pinned.acl_code(), Some(OOM), "{pinned}");
    assert!(pinned.to_string().contains("aclrtMallocHost"), "{pinned}");
    assert_eq!(npu_sim::control::host_stats().unwrap(), host_before);

    let pool = PinnedPool::new(&ctx);
    let warm = pool.alloc::<u8>(4096).await.unwrap();
    let pool_before = pool.stats();
    // A size class with no cached block: the pool allocates, and that allocation fails.
    npu_sim::control::fail_next_host_alloc(OOM.0).unwrap();
    let pooled = pool.alloc::<u8>(8192).await.unwrap_err();
    assert_eq!(pooled.acl_code(), Some(OOM), "{pooled}");
    let pool_after = pool.stats();
    assert_eq!(
        (
            pool_after.allocated,
            pool_after.reserved,
            pool_after.hits,
            pool_after.misses
        ),
        (
            pool_before.allocated,
            pool_before.reserved,
            pool_before.hits,
            pool_before.misses
        ),
    );
    drop(warm);
    assert!(pool.alloc::<u8>(4096).await.is_ok(), "the pool still works");

    let device_before = npu_sim::control::device_stats(1).unwrap();
    npu_sim::control::fail_next_alloc(1).unwrap();
    let device = DeviceBuffer::<f32>::new(&ctx, 1 << 20).unwrap_err();
    assert_eq!(device.acl_code(), Some(OOM), "{device}");
    assert!(device.to_string().contains("aclrtMalloc"), "{device}");
    let device_after = npu_sim::control::device_stats(1).unwrap();
    assert_eq!(device_after.bytes_allocated, device_before.bytes_allocated);
    assert_eq!(
        device_after.live_allocations,
        device_before.live_allocations
    );
    let recovered = DeviceBuffer::<f32>::new(&ctx, 1 << 20).unwrap();
    assert_eq!(
        npu_sim::control::device_stats(1).unwrap().live_allocations,
        device_before.live_allocations + 1
    );
    drop((recovered, kept));
}
