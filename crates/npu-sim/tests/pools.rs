//! Stream-ordered memory pools through the C ABI: reuse in stream order, across streams by
//! each reuse rule, the release threshold, trimming, attributes, and every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// The tests of this file take turns. `error_paths` frees an address after its pool was
/// destroyed and expects the free to fail; a test running beside it could meanwhile have been
/// given that address by a pool of its own, and the free would then return its block.
fn serial() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    take_turn(&TURN)
}

fn props(device: u32, max_size: usize) -> aclrtMemPoolProps {
    aclrtMemPoolProps {
        maxSize: max_size,
        ..device_pool_props(device)
    }
}

fn create_pool(device: u32, max_size: usize) -> aclrtMemPool {
    let mut pool = ptr::null_mut();
    acl!(aclrtMemPoolCreate(&mut pool, &props(device, max_size)));
    pool
}

fn pool_malloc(pool: aclrtMemPool, size: usize, stream: aclrtStream) -> *mut c_void {
    let mut ptr = ptr::null_mut();
    acl!(aclrtMemPoolMallocAsync(&mut ptr, size, pool, stream));
    ptr
}

fn get_u64(pool: aclrtMemPool, attr: aclrtMemPoolAttr) -> u64 {
    let mut value = 0u64;
    acl!(aclrtMemPoolGetAttr(pool, attr, (&raw mut value).cast()));
    value
}

fn set_u32(pool: aclrtMemPool, attr: aclrtMemPoolAttr, value: u32) {
    let mut value = value;
    acl!(aclrtMemPoolSetAttr(pool, attr, (&raw mut value).cast()));
}

fn set_u64(pool: aclrtMemPool, attr: aclrtMemPoolAttr, value: u64) {
    let mut value = value;
    acl!(aclrtMemPoolSetAttr(pool, attr, (&raw mut value).cast()));
}

/// Turns every reuse rule off except `keep` (0: none).
fn only_rule(pool: aclrtMemPool, keep: aclrtMemPoolAttr) {
    for rule in [
        ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES,
        ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC,
        ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    ] {
        set_u32(pool, rule, u32::from(rule == keep));
    }
}

#[test]
fn memory_freed_on_a_stream_is_reused_by_its_later_allocations() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    let stream = create_stream();
    let a = pool_malloc(pool, 1000, stream);
    upload(a, &[7u8; 1000]);
    acl!(aclrtMemPoolFreeAsync(a, stream));
    // Stream order: the smaller request reuses the block at once.
    let b = pool_malloc(pool, 500, stream);
    assert_eq!(a, b);
    let c = pool_malloc(pool, 1000, stream);
    assert_ne!(c, a);
    // reserved: two blocks of 1000 rounded up to 32 plus 32 of padding.
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
        2 * 1056
    );
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT),
        2 * 1056
    );
    acl!(aclrtMemPoolFreeAsync(b, stream));
    acl!(aclrtMemPoolFreeAsync(c, stream));
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT), 0);
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH), 2 * 1056);
    // The synchronisation releases the idle memory above the threshold (0).
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT), 0);
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH),
        2 * 1056
    );
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn another_stream_reuses_only_what_an_event_orders_after_the_free() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    only_rule(pool, ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES);
    let (s1, s2) = (create_stream(), create_stream());
    let a = pool_malloc(pool, 256, s1);
    acl!(aclrtMemPoolFreeAsync(a, s1));
    let unordered = pool_malloc(pool, 256, s2);
    assert_ne!(unordered, a, "nothing orders s2 after the free");
    let event = create_event();
    acl!(aclrtRecordEvent(event, s1));
    acl!(aclrtStreamWaitEvent(s2, event));
    assert_eq!(pool_malloc(pool, 256, s2), a);
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyStream(s1));
    acl!(aclrtDestroyStream(s2));
}

#[test]
fn opportunistic_reuse_takes_memory_whose_free_has_executed() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    only_rule(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC);
    set_u64(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, u64::MAX);
    let (s1, s2) = (create_stream(), create_stream());
    let a = pool_malloc(pool, 256, s1);
    acl!(aclrtMemPoolFreeAsync(a, s1));
    acl!(aclrtSynchronizeStream(s1));
    // The threshold kept the idle block; its free has run, so any stream may take it.
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
        288
    );
    assert_eq!(pool_malloc(pool, 256, s2), a);
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(s1));
    acl!(aclrtDestroyStream(s2));
}

static GATE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn hold_until_gate(_: *mut c_void) {
    while !GATE.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
}

#[test]
fn internal_dependencies_make_the_reusing_stream_wait_for_the_free() {
    let _turn = serial();
    set_device(1);
    let pool = create_pool(1, 0);
    only_rule(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES);
    let (s1, s2) = (create_stream(), create_stream());
    let a = pool_malloc(pool, 64, s1);
    acl!(aclrtLaunchHostFunc(
        s1,
        Some(hold_until_gate),
        ptr::null_mut()
    ));
    acl!(aclrtMemPoolFreeAsync(a, s1));
    let b = pool_malloc(pool, 64, s2);
    assert_eq!(b, a);
    acl!(aclrtMemsetAsync(b, 64, 9, 64, s2));
    // s2 now waits for s1 to pass the free, which the held host function prevents.
    let mut status = 0;
    acl!(aclrtStreamQuery(s2, &mut status));
    assert_eq!(status, ACL_STREAM_STATUS_NOT_READY);
    GATE.store(true, Ordering::Release);
    acl!(aclrtSynchronizeStream(s2));
    assert_eq!(download::<u8>(b, 64), vec![9; 64]);
    acl!(aclrtMemPoolFreeAsync(b, s2));
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(s1));
    acl!(aclrtDestroyStream(s2));
}

#[test]
fn trimming_releases_idle_memory_only() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    set_u64(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 1 << 20);
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD),
        1 << 20
    );
    let stream = create_stream();
    let kept = pool_malloc(pool, 4064, stream);
    let idle = pool_malloc(pool, 4064, stream);
    acl!(aclrtMemPoolFreeAsync(idle, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
        8192
    );
    acl!(aclrtMemPoolTrimTo(pool, 0));
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
        4096
    );
    // Resetting a high-water mark brings it down to the current value.
    set_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH, 0);
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH), 4096);
    set_u64(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH, 0);
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH), 4096);
    let mut address = ptr::null_mut();
    let mut size = 0;
    acl!(aclrtMemGetAddressRange(
        kept.cast::<u8>().wrapping_add(100).cast(),
        &mut address,
        &mut size
    ));
    assert_eq!((address, size), (kept, 4096));
    acl!(aclrtMemPoolFreeAsync(kept, stream));
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn a_pool_cannot_grow_past_its_size() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 8192);
    let stream = create_stream();
    // One block larger than the whole pool, into an empty pool.
    let mut whole = ptr::null_mut();
    fails!(
        aclrtMemPoolMallocAsync(&mut whole, 8192, pool, stream),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "aclrtMemPoolMallocAsync"
    );
    assert!(whole.is_null(), "nothing written on failure");
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT), 0);
    let a = pool_malloc(pool, 4064, stream);
    let _b = pool_malloc(pool, 4064, stream);
    let mut c = ptr::null_mut();
    fails!(
        aclrtMemPoolMallocAsync(&mut c, 1, pool, stream),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "aclrtMemPoolMallocAsync"
    );
    // Idle memory is released to make room, once its free has executed.
    acl!(aclrtMemPoolFreeAsync(a, stream));
    set_u64(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, u64::MAX);
    acl!(aclrtSynchronizeStream(stream));
    let other = create_stream();
    only_rule(pool, 0);
    pool_malloc(pool, 64, other);
    // The idle block was released to make room, not reused: no rule lets `other` reuse it.
    assert_eq!(
        get_u64(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
        4096 + 96
    );
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtDestroyStream(other));
}

#[test]
fn attributes_have_their_defaults_and_types() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    for rule in [
        ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES,
        ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC,
        ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    ] {
        let mut on = 7u32;
        acl!(aclrtMemPoolGetAttr(pool, rule, (&raw mut on).cast()));
        assert_eq!(on, 1);
    }
    assert_eq!(get_u64(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD), 0);
    acl!(aclrtMemPoolDestroy(pool));
}

#[test]
fn error_paths() {
    let _turn = serial();
    set_device(0);
    let pool = create_pool(0, 0);
    let stream = create_stream();
    let mut out = ptr::null_mut();
    let mut value = 0u64;
    let v = (&raw mut value).cast::<c_void>();

    // Create.
    fails!(
        aclrtMemPoolCreate(ptr::null_mut(), &props(0, 0)),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolCreate"
    );
    fails!(
        aclrtMemPoolCreate(&mut out, ptr::null()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolCreate"
    );
    let bad_alloc = aclrtMemPoolProps {
        allocType: 1,
        ..props(0, 0)
    };
    fails!(
        aclrtMemPoolCreate(&mut out, &bad_alloc),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolCreate"
    );
    let mut on_host = props(0, 0);
    on_host.location.type_ = ACL_MEM_LOCATION_TYPE_HOST;
    fails!(
        aclrtMemPoolCreate(&mut out, &on_host),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolCreate"
    );
    let mut reserved = props(0, 0);
    reserved.reserved[31] = 1;
    fails!(
        aclrtMemPoolCreate(&mut out, &reserved),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolCreate"
    );
    let shared = aclrtMemPoolProps {
        handleType: ACL_MEM_HANDLE_TYPE_POSIX,
        ..props(0, 0)
    };
    fails!(
        aclrtMemPoolCreate(&mut out, &shared),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMemPoolCreate"
    );
    let unknown_handle = aclrtMemPoolProps {
        handleType: 5,
        ..props(0, 0)
    };
    fails!(
        aclrtMemPoolCreate(&mut out, &unknown_handle),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolCreate"
    );
    fails!(
        aclrtMemPoolCreate(&mut out, &props(99, 0)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtMemPoolCreate"
    );

    // Attributes.
    fails!(
        aclrtMemPoolGetAttr(ptr::null_mut(), ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, v),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolGetAttr"
    );
    fails!(
        aclrtMemPoolGetAttr(
            pool,
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolGetAttr"
    );
    fails!(
        aclrtMemPoolGetAttr(pool, 9, v),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolGetAttr"
    );
    fails!(
        aclrtMemPoolSetAttr(
            pool,
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolSetAttr"
    );
    fails!(
        aclrtMemPoolSetAttr(pool, 0, v),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolSetAttr"
    );
    fails!(
        aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, v),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolSetAttr"
    );
    let mut five = 5u64;
    fails!(
        aclrtMemPoolSetAttr(
            pool,
            ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH,
            (&raw mut five).cast()
        ),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolSetAttr"
    );
    let mut two = 2u32;
    fails!(
        aclrtMemPoolSetAttr(
            pool,
            ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC,
            (&raw mut two).cast()
        ),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolSetAttr"
    );

    // Allocation.
    fails!(
        aclrtMemPoolMallocAsync(ptr::null_mut(), 64, pool, stream),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolMallocAsync"
    );
    fails!(
        aclrtMemPoolMallocAsync(&mut out, 0, pool, stream),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolMallocAsync"
    );
    fails!(
        aclrtMemPoolMallocAsync(&mut out, 64, ptr::null_mut(), stream),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolMallocAsync"
    );
    let other_device = create_pool(1, 0);
    fails!(
        aclrtMemPoolMallocAsync(&mut out, 64, other_device, stream),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolMallocAsync"
    );
    let foreign = stream_of_device(1);
    fails!(
        aclrtMemPoolMallocAsync(&mut out, 64, pool, foreign),
        ACL_ERROR_RT_STREAM_CONTEXT,
        "aclrtMemPoolMallocAsync"
    );

    // Release.
    let block = pool_malloc(pool, 64, stream);
    fails!(aclrtFree(block), ACL_ERROR_RT_MEMORY_FREE, "aclrtFree");
    fails!(
        aclrtMemPoolFreeAsync(ptr::null_mut(), stream),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolFreeAsync"
    );
    let plain = malloc(64);
    fails!(
        aclrtMemPoolFreeAsync(plain, stream),
        ACL_ERROR_RT_MEMORY_FREE,
        "aclrtMemPoolFreeAsync"
    );
    acl!(aclrtFree(plain));
    acl!(aclrtMemPoolFreeAsync(block, stream));
    fails!(
        aclrtMemPoolFreeAsync(block, stream),
        ACL_ERROR_RT_MEMORY_FREE,
        "aclrtMemPoolFreeAsync"
    );
    let other_pool = other_device as usize;
    let on_other = std::thread::spawn(move || {
        set_device(1);
        let stream = create_stream();
        let block = pool_malloc(other_pool as aclrtMemPool, 64, stream) as usize;
        (block, stream as usize)
    })
    .join()
    .unwrap();
    fails!(
        aclrtMemPoolFreeAsync(on_other.0 as *mut c_void, stream),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemPoolFreeAsync"
    );

    // Trim and destroy; afterwards the handle is stale and the blocks are gone.
    fails!(
        aclrtMemPoolTrimTo(ptr::null_mut(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolTrimTo"
    );
    fails!(
        aclrtMemPoolDestroy(ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolDestroy"
    );
    acl!(aclrtMemPoolDestroy(other_device));
    fails!(
        aclrtMemPoolDestroy(other_device),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMemPoolDestroy"
    );
    fails!(
        aclrtMemPoolTrimTo(other_device, 0),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMemPoolTrimTo"
    );
    // A NULL value is the ACL layer's refusal, made before the pool is looked up.
    fails!(
        aclrtMemPoolGetAttr(
            other_device,
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolGetAttr"
    );
    fails!(
        aclrtMemPoolSetAttr(
            other_device,
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemPoolSetAttr"
    );
    fails!(
        aclrtMemPoolGetAttr(other_device, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, v),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMemPoolGetAttr"
    );
    fails!(
        aclrtMemPoolFreeAsync(on_other.0 as *mut c_void, stream),
        ACL_ERROR_RT_MEMORY_FREE,
        "aclrtMemPoolFreeAsync"
    );
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(stream));
}
