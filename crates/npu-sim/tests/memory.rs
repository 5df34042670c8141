//! Device and host memory: rounding and capacity accounting, alignment, zero fill, pointer
//! classes, copy-kind correction, the pageable fallback of async copies, host registration and
//! 2D copies, memsets of another device's memory, and freed addresses held back from reuse.
//! Devices have 64 MiB here, and each test has its own device (8 and 9 for
//! `memsets_of_another_devices_memory_need_peer_access`).

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::Once;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

const CAPACITY: usize = 64 << 20;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default()
            .devices(10)
            .memory_per_device(CAPACITY as u64)
            .install()
            .unwrap();
    });
}

/// Device 5 is shared by a test that compares its allocated bytes with a baseline and one
/// that allocates there: run together (libtest runs tests on several threads, more on a
/// bigger machine), the count saw the other's allocation (`left: 96, right: 0`). Each takes
/// this turn ([`take_turn`]) for its whole run.
static DEVICE_5: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn used(device: i32) -> u64 {
    control::device_stats(device).unwrap().bytes_allocated
}

fn mem_info() -> (usize, usize) {
    let (mut free, mut total) = (0, 0);
    acl!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total));
    (free, total)
}

fn attributes(ptr: *const c_void) -> aclrtPtrAttributes {
    let mut attributes = aclrtPtrAttributes::default();
    acl!(aclrtPointerGetAttributes(ptr, &mut attributes));
    attributes
}

#[test]
fn allocations_are_rounded_aligned_zeroed_and_counted_against_the_capacity() {
    install();
    set_device(0);
    assert_eq!(mem_info(), (CAPACITY, CAPACITY));
    // An Ascend910B has HBM: DDR attributes report nothing, the kind-free ones the HBM.
    for (attr, expected) in [
        (ACL_DDR_MEM, (0, 0)),
        (ACL_DDR_MEM_P2P_NORMAL, (0, 0)),
        (ACL_HBM_MEM_HUGE1G, (CAPACITY, CAPACITY)),
        (ACL_MEM_NORMAL, (CAPACITY, CAPACITY)),
        (ACL_MEM_P2P_HUGE1G, (CAPACITY, CAPACITY)),
        (ACL_MEM_P2P_HUGE1G + 1, (0, 0)),
    ] {
        let (mut free, mut total) = (1, 1);
        acl!(aclrtGetMemInfo(attr, &mut free, &mut total));
        assert_eq!((free, total), expected, "attribute {attr}");
    }
    let mut p = ptr::null_mut();
    acl!(aclrtMalloc(&mut p, 1, ACL_MEM_MALLOC_HUGE_FIRST));
    assert_eq!(
        used(0),
        64,
        "1 byte: rounded to 32 plus 32 bytes of padding"
    );
    assert_eq!(p as usize % 64, 0);
    let mut q = ptr::null_mut();
    acl!(aclrtMalloc(&mut q, 100, ACL_MEM_MALLOC_NORMAL_ONLY));
    assert_eq!(used(0), 64 + 160);
    let mut r = ptr::null_mut();
    acl!(aclrtMallocAlign32(&mut r, 100, ACL_MEM_MALLOC_HUGE_FIRST));
    assert_eq!(
        used(0),
        64 + 160 + 128,
        "aclrtMallocAlign32 adds no padding"
    );
    assert_eq!(mem_info(), (CAPACITY - 352, CAPACITY));
    assert!(
        download::<u8>(q, 100).iter().all(|&b| b == 0),
        "device memory starts zeroed"
    );
    for ptr in [p, q, r] {
        acl!(aclrtFree(ptr));
    }
    assert_eq!(control::device_stats(0).unwrap().live_allocations, 0);

    // Huge pages are taken whole: 3 MiB under HUGE_ONLY (or HUGE_FIRST, above 1 MiB) takes
    // two 2 MiB pages, and so does exactly 4 MiB once the padding is added; aclrtMallocAlign32
    // of 4 MiB fits two pages exactly. 1 GiB pages do not fit a 64 MiB device at all.
    for (size, policy, pages) in [
        (3 << 20, ACL_MEM_MALLOC_HUGE_ONLY, 2),
        (3 << 20, ACL_MEM_MALLOC_HUGE_FIRST, 2),
        (4 << 20, ACL_MEM_MALLOC_HUGE_ONLY_P2P, 3),
    ] {
        acl!(aclrtMalloc(&mut p, size, policy));
        assert_eq!(used(0), pages << 21, "{size} bytes under policy {policy}");
        acl!(aclrtFree(p));
    }
    acl!(aclrtMallocAlign32(
        &mut p,
        4 << 20,
        ACL_MEM_MALLOC_HUGE_ONLY
    ));
    assert_eq!(used(0), 4 << 20);
    acl!(aclrtFree(p));
    assert_eq!(
        code!(aclrtMalloc(&mut p, 100, ACL_MEM_MALLOC_HUGE1G_ONLY)),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "a whole 1 GiB page"
    );

    // HUGE_FIRST falls back to normal pages when whole huge pages do not fit; HUGE_ONLY fails.
    let mut most = ptr::null_mut();
    acl!(aclrtMalloc(
        &mut most,
        CAPACITY - (4 << 20),
        ACL_MEM_MALLOC_NORMAL_ONLY
    ));
    let three = 3 << 20;
    assert_eq!(
        code!(aclrtMalloc(&mut p, three, ACL_MEM_MALLOC_HUGE_ONLY)),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "two whole pages do not fit in the 4 MiB - 32 left"
    );
    acl!(aclrtMalloc(&mut p, three, ACL_MEM_MALLOC_HUGE_FIRST));
    assert_eq!(mem_info().0, (4 << 20) - 32 - (three + 32));
    acl!(aclrtFree(p));
    acl!(aclrtFree(most));
    assert_eq!(
        code!(aclrtMalloc(
            &mut p,
            usize::MAX - 200,
            ACL_MEM_MALLOC_HUGE_FIRST
        )),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "no overflow in the rounding"
    );

    // With normal pages the capacity is exact: 64 MiB - 64 requested takes 64 MiB - 32 with
    // padding.
    let mut big = ptr::null_mut();
    let normal = ACL_MEM_MALLOC_NORMAL_ONLY;
    assert_eq!(
        code!(aclrtMalloc(&mut big, CAPACITY, normal)),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    acl!(aclrtMalloc(&mut big, CAPACITY - 64, normal));
    assert_eq!(mem_info().0, 32);
    assert_eq!(
        code!(aclrtMalloc(&mut p, 1, normal)),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    acl!(aclrtMallocAlign32(&mut p, 32, normal));
    assert_eq!(mem_info().0, 0);
    acl!(aclrtFree(p));
    acl!(aclrtFreeWithDevSync(big));
    assert_eq!(mem_info(), (CAPACITY, CAPACITY));
}

/// The reference (aclrtMalloc's policy parameter): a rule outside aclrtMemMallocPolicy takes
/// huge pages when size >= 2 MiB, normal pages below, unlike HUGE_FIRST, which takes huge pages
/// above 1 MiB.
#[test]
fn a_policy_outside_the_enumeration_takes_huge_pages_from_2_mib() {
    install();
    set_device(7);
    let unknown = (ACL_MEM_MALLOC_HUGE1G_ONLY_P2P + 1) as aclrtMemMallocPolicy;
    let mut p = ptr::null_mut();
    for (size, policy, expected) in [
        (3 << 19, unknown, (3 << 19) + 32),
        (3 << 19, 0x7f, (3 << 19) + 32),
        (3 << 19, ACL_MEM_MALLOC_HUGE_FIRST, 2 << 20),
        ((2 << 20) - 32, unknown, (2 << 20) - 32 + 32),
        (2 << 20, unknown, 4 << 20),
    ] {
        acl!(aclrtMalloc(&mut p, size, policy));
        assert_eq!(used(7), expected, "{size} bytes under policy {policy:#x}");
        acl!(aclrtFree(p));
    }
    acl!(aclrtMallocCached(&mut p, 3 << 19, unknown));
    assert_eq!(used(7), (3 << 19) + 32, "aclrtMallocCached is aclrtMalloc");
    acl!(aclrtFree(p));
}

/// HUGE_FIRST keeps requests up to 1 MiB on normal pages; the reference gives HUGE_FIRST_P2P
/// no such threshold: it takes a huge page for any size (page size read back, the device's
/// counters being shared with the other tests).
#[test]
fn huge_first_p2p_takes_huge_pages_below_1_mib_too() {
    let _device_5 = take_turn(&DEVICE_5);
    install();
    set_device(5);
    let mut p = ptr::null_mut();
    for (policy, page) in [
        (ACL_MEM_MALLOC_HUGE_FIRST, 4096),
        (ACL_MEM_MALLOC_HUGE_FIRST_P2P, 2 << 20),
    ] {
        acl!(aclrtMalloc(&mut p, 64, policy));
        assert_eq!(
            attributes(p).pageSize,
            page,
            "64 bytes under policy {policy}"
        );
        acl!(aclrtFree(p));
    }
}

/// aclrtMallocCached takes four rules, none of them P2P: a P2P rule is one outside its range,
/// so the size chooses the pages, where aclrtMalloc takes the rule (page size read back, the
/// device's counters being shared with the other tests).
#[test]
fn aclrt_malloc_cached_takes_no_p2p_rule() {
    install();
    set_device(6);
    let mut p = ptr::null_mut();
    for (policy, page) in [
        (ACL_MEM_MALLOC_HUGE_ONLY, 2 << 20),
        (ACL_MEM_MALLOC_HUGE_ONLY_P2P, 4096),
        (ACL_MEM_MALLOC_HUGE_FIRST_P2P, 4096),
    ] {
        acl!(aclrtMallocCached(&mut p, 64, policy));
        assert_eq!(attributes(p).pageSize, page, "64 bytes under rule {policy}");
        acl!(aclrtFree(p));
    }
    acl!(aclrtMallocCached(
        &mut p,
        2 << 20,
        ACL_MEM_MALLOC_NORMAL_ONLY_P2P
    ));
    assert_eq!(
        attributes(p).pageSize,
        2 << 20,
        "2 MiB under NORMAL_ONLY_P2P"
    );
    acl!(aclrtFree(p));
    acl!(aclrtMalloc(&mut p, 64, ACL_MEM_MALLOC_HUGE_ONLY_P2P));
    assert_eq!(
        attributes(p).pageSize,
        2 << 20,
        "aclrtMalloc takes the rule"
    );
    acl!(aclrtFree(p));
}

/// aclrtMalloc, aclrtMallocAlign32 and aclrtMallocCached take one enumerator: a rule or-ed
/// with a band-width bit is no aclrtMemMallocPolicy value, so the size chooses the pages (huge
/// from 2 MiB on). aclrtMallocWithCfg's policy may or them, and its rule alone decides. The
/// page size is read back, as the device's counters are shared with the other tests.
#[test]
fn aclrt_malloc_takes_an_or_ed_policy_as_one_outside_the_enumeration() {
    install();
    set_device(6);
    let huge_fast = ACL_MEM_MALLOC_HUGE_ONLY | ACL_MEM_TYPE_HIGH_BAND_WIDTH;
    let normal_slow = ACL_MEM_MALLOC_NORMAL_ONLY | ACL_MEM_TYPE_LOW_BAND_WIDTH;
    type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize, aclrtMemMallocPolicy) -> aclError;
    let single: [(&str, Malloc); 3] = [
        ("aclrtMalloc", aclrtMalloc),
        ("aclrtMallocAlign32", aclrtMallocAlign32),
        ("aclrtMallocCached", aclrtMallocCached),
    ];
    let mut p = ptr::null_mut();
    for (name, malloc) in single {
        for (size, policy, page) in [(64, huge_fast, 4096), (3 << 20, normal_slow, 2 << 20)] {
            acl!(malloc(&mut p, size, policy));
            assert_eq!(attributes(p).pageSize, page, "{name}({size}, {policy:#x})");
            acl!(aclrtFree(p));
        }
    }
    acl!(aclrtMallocWithCfg(&mut p, 64, huge_fast, ptr::null_mut()));
    assert_eq!(
        attributes(p).pageSize,
        2 << 20,
        "aclrtMallocWithCfg: the HUGE_ONLY rule"
    );
    acl!(aclrtFree(p));
    acl!(aclrtMallocWithCfg(
        &mut p,
        3 << 20,
        normal_slow,
        ptr::null_mut()
    ));
    assert_eq!(
        attributes(p).pageSize,
        4096,
        "aclrtMallocWithCfg: the NORMAL_ONLY rule"
    );
    acl!(aclrtFree(p));
}

#[test]
fn host_register_v2_checks_the_flags_not_the_alignment() {
    install();
    set_device(1);
    // Not page-aligned: aclrtHostRegisterV2 accepts it (aclrtHostRegister refuses it, see
    // tests/error_codes.rs "register misaligned").
    let unaligned = pageable(3 * 4096).cast::<u8>().wrapping_add(100).cast();
    acl!(aclrtHostRegisterV2(unaligned, 5000, ACL_HOST_REG_MAPPED));
    let mut alias = ptr::null_mut();
    acl!(aclrtHostGetDevicePointer(unaligned, &mut alias, 0));
    assert_eq!(alias, unaligned);
    acl!(aclrtHostUnregister(unaligned));
    assert_eq!(
        code!(aclrtHostRegisterV2(unaligned, 5000, 0x1)),
        ACL_ERROR_RT_PARAM_INVALID,
        "the flags are still checked"
    );
}

#[test]
fn freeing_registered_pinned_memory_ends_its_registration() {
    install();
    set_device(1);
    let pinned = malloc_host(8192);
    let mut mapped = ptr::null_mut();
    acl!(aclrtHostRegister(
        pinned,
        4096,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    acl!(aclrtFreeHost(pinned));
    // The registration went with the memory: the freed address is no host memory any more.
    // (It counted as registered host memory, and this copy wrote the freed range: SIGSEGV.)
    let data = [7u8; 64];
    assert_eq!(
        code!(aclrtMemcpy(
            pinned,
            64,
            data.as_ptr().cast(),
            64,
            ACL_MEMCPY_HOST_TO_HOST
        )),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(
        attributes(pinned).location.type_,
        ACL_MEM_LOCATION_TYPE_UNREGISTERED
    );
    assert_eq!(
        code!(aclrtHostUnregister(pinned)),
        ACL_ERROR_HOST_MEMORY_NOT_REGISTERED
    );
}

#[test]
fn pointers_are_classified() {
    install();
    set_device(1);
    let dev = malloc(4096);
    let pinned = malloc_host(4096);
    let plain = pageable(8192);
    assert_eq!(pinned as usize % 64, 0);
    let device = attributes(dev);
    assert_eq!(
        (device.location.type_, device.location.id, device.pageSize),
        (ACL_MEM_LOCATION_TYPE_DEVICE, 1, 4096)
    );
    assert_eq!(
        attributes(pinned).location.type_,
        ACL_MEM_LOCATION_TYPE_HOST
    );
    assert_eq!(
        attributes(plain).location.type_,
        ACL_MEM_LOCATION_TYPE_UNREGISTERED
    );
    acl!(aclrtHostRegisterV2(
        plain,
        8192,
        ACL_HOST_REG_MAPPED | ACL_HOST_REG_PINNED
    ));
    assert_eq!(
        attributes(plain.cast::<u8>().wrapping_add(100).cast())
            .location
            .type_,
        ACL_MEM_LOCATION_TYPE_HOST
    );
    let mut alias = ptr::null_mut();
    acl!(aclrtHostGetDevicePointer(
        plain.cast::<u8>().wrapping_add(4096).cast(),
        &mut alias,
        0
    ));
    assert_eq!(
        alias,
        plain.cast::<u8>().wrapping_add(4096).cast(),
        "the device alias of host memory"
    );
    // Process-wide counter: other tests of this file register memory concurrently.
    assert!(control::host_stats().unwrap().registrations >= 1);
    acl!(aclrtHostUnregister(plain));
    assert_eq!(
        attributes(plain).location.type_,
        ACL_MEM_LOCATION_TYPE_UNREGISTERED
    );
    let mut huge = ptr::null_mut();
    acl!(aclrtMalloc(&mut huge, 4 << 20, ACL_MEM_MALLOC_HUGE_FIRST));
    assert_eq!(
        attributes(huge).pageSize,
        2 << 20,
        "HUGE_FIRST above 1 MiB uses 2 MiB pages"
    );
    // aclrtMallocHost memory may be registered (MAPPED) too.
    let mut mapped = ptr::null_mut();
    acl!(aclrtHostRegister(
        pinned,
        4096,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    assert_eq!(mapped, pinned);
    acl!(aclrtHostUnregister(pinned));
    acl!(aclrtFreeHostWithDevSync(pinned));
}

#[test]
fn copy_kinds_are_corrected_from_the_pointers() {
    install();
    set_device(2);
    let dev = malloc(64);
    let pinned = malloc_host(64);
    // SAFETY: 64 bytes of pinned memory.
    unsafe { pinned.cast::<u8>().write_bytes(0x11, 64) };
    // Pinned host → device with a contradicting kind: the pointers decide.
    acl!(aclrtMemcpy(dev, 64, pinned, 64, ACL_MEMCPY_DEVICE_TO_HOST));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0x11));
    // Pageable memory with DEFAULT: inferred.
    let data = [0x22u8; 64];
    acl!(aclrtMemcpy(
        dev,
        64,
        data.as_ptr().cast(),
        64,
        ACL_MEMCPY_DEFAULT
    ));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0x22));
    // Zero bytes succeed once the arguments have passed (a NULL pointer or a bad kind is
    // refused whatever the count: the checks go in parameter order), without the pointers
    // being looked up; dst == src succeeds without copying.
    fails!(
        aclrtMemcpy(ptr::null_mut(), 0, dev, 0, ACL_MEMCPY_DEFAULT),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemcpy"
    );
    fails!(
        aclrtMemcpyAsync(dev, 0, ptr::null(), 0, ACL_MEMCPY_DEFAULT, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemcpyAsync"
    );
    fails!(
        aclrtMemcpy(dev, 0, dev, 0, 99),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemcpy"
    );
    let unknown = 0x10usize as *mut c_void;
    acl!(aclrtMemcpy(unknown, 0, unknown.wrapping_add(8), 0, 0));
    acl!(aclrtMemcpy(dev, 64, dev, 64, ACL_MEMCPY_DEVICE_TO_DEVICE));
    // Staged host data may be reused as soon as the call returns.
    let mut staged = [0x33u8; 64];
    acl!(aclrtMemcpyAsync(
        dev,
        64,
        staged.as_ptr().cast(),
        64,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        ptr::null_mut()
    ));
    staged.fill(0);
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0x33));
    // memset is byte-wise: the low byte of the value.
    acl!(aclrtMemset(dev, 64, 0x1ff, 64));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 0xff));
    // The within-device and between-devices kinds are device-to-device kinds: the pointers
    // decide, as for every kind.
    let other = malloc(64);
    acl!(aclrtMemcpy(
        other,
        64,
        dev,
        64,
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
    ));
    assert!(download::<u8>(other, 64).iter().all(|&b| b == 0xff));
    acl!(aclrtMemset(dev, 64, 0x44, 64));
    acl!(aclrtMemcpyAsync(
        other,
        64,
        dev,
        64,
        ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
        ptr::null_mut()
    ));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert!(download::<u8>(other, 64).iter().all(|&b| b == 0x44));
    acl!(aclrtFree(other));

    // aclrtMemcpy's kind is reserved: with pageable memory too, every kind copies the way the
    // pointers say, host to device, device to host and host to host alike.
    let kinds = [
        ACL_MEMCPY_HOST_TO_HOST,
        ACL_MEMCPY_HOST_TO_DEVICE,
        ACL_MEMCPY_DEVICE_TO_HOST,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let value = 0x50 + i as u8;
        let source = [value; 64];
        acl!(aclrtMemcpy(dev, 64, source.as_ptr().cast(), 64, kind));
        let mut back = [0u8; 64];
        acl!(aclrtMemcpy(back.as_mut_ptr().cast(), 64, dev, 64, kind));
        assert_eq!(back, source, "kind {kind}");
        let mut host = [0u8; 64];
        acl!(aclrtMemcpy(
            host.as_mut_ptr().cast(),
            64,
            back.as_ptr().cast(),
            64,
            kind
        ));
        assert_eq!(host, source, "kind {kind}");
    }
    // What the pointers cannot be is host memory the runtime took back: a device address just
    // freed is refused (whatever the kind), not written as host memory.
    let freed = freed_device_address(64);
    let mut managed = ptr::null_mut();
    acl!(aclrtMemAllocManaged(
        &mut managed,
        64,
        ACL_RT_MEM_ATTACH_GLOBAL
    ));
    acl!(aclrtFree(managed));
    for stale in [freed, managed] {
        for kind in [ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_HOST_TO_HOST] {
            let code = code!(aclrtMemcpy(stale, 64, data.as_ptr().cast(), 64, kind));
            assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "kind {kind}");
            let message = recent_message();
            assert!(message.contains("no longer holds"), "{message}");
        }
    }
}

#[test]
fn async_copies_of_pageable_memory_are_synchronous_and_pinned_ones_are_queued() {
    install();
    set_device(3);
    let stream = create_stream();
    let dev = malloc(4096);
    control::hold(3).unwrap();
    // Pageable source: the call itself copies (the stream has nothing queued to wait for).
    let data = [7u8; 4096];
    acl!(aclrtMemcpyAsync(
        dev,
        4096,
        data.as_ptr().cast(),
        4096,
        ACL_MEMCPY_HOST_TO_DEVICE,
        stream
    ));
    assert!(download::<u8>(dev, 4096).iter().all(|&b| b == 7));
    // Pinned and registered sources: genuine stream tasks, held with the device.
    let pinned = malloc_host(4096);
    // SAFETY: 4096 bytes of pinned memory.
    unsafe { pinned.cast::<u8>().write_bytes(8, 4096) };
    acl!(aclrtMemcpyAsync(
        dev,
        4096,
        pinned,
        4096,
        ACL_MEMCPY_HOST_TO_DEVICE,
        stream
    ));
    let registered = pageable(4096);
    acl!(aclrtHostRegisterV2(registered, 4096, ACL_HOST_REG_PINNED));
    acl!(aclrtMemcpyAsync(
        registered,
        4096,
        dev,
        4096,
        ACL_MEMCPY_DEVICE_TO_HOST,
        stream
    ));
    let mut status = 0;
    acl!(aclrtStreamQuery(stream, &mut status));
    assert_eq!(status, ACL_STREAM_STATUS_NOT_READY);
    assert!(
        download::<u8>(dev, 4096).iter().all(|&b| b == 7),
        "not copied while held"
    );
    control::release(3).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    // SAFETY: 4096 bytes of registered memory, no longer written by the stream.
    let back = unsafe { std::slice::from_raw_parts(registered.cast::<u8>(), 4096) };
    assert!(back.iter().all(|&b| b == 8));
    acl!(aclrtHostUnregister(registered));
}

#[test]
fn two_dimensional_copies() {
    install();
    set_device(4);
    const WIDTH: usize = 48;
    const HEIGHT: usize = 10;
    const HOST_PITCH: usize = 64;
    const DEV_PITCH: usize = 128;
    let host: Vec<u8> = (0..HOST_PITCH * HEIGHT).map(|i| (i % 251) as u8).collect();
    let dev = malloc(DEV_PITCH * HEIGHT);
    acl!(aclrtMemcpy2d(
        dev,
        DEV_PITCH,
        host.as_ptr().cast(),
        HOST_PITCH,
        WIDTH,
        HEIGHT,
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
    let on_device = download::<u8>(dev, DEV_PITCH * HEIGHT);
    for row in 0..HEIGHT {
        assert_eq!(
            on_device[row * DEV_PITCH..][..WIDTH],
            host[row * HOST_PITCH..][..WIDTH]
        );
        assert!(
            on_device[row * DEV_PITCH + WIDTH..(row + 1) * DEV_PITCH]
                .iter()
                .all(|&b| b == 0)
        );
    }
    // Device to device on a stream, then back to the host with the host pitch.
    let dev2 = malloc(DEV_PITCH * HEIGHT);
    acl!(aclrtMemcpy2dAsync(
        dev2,
        DEV_PITCH,
        dev,
        DEV_PITCH,
        WIDTH,
        HEIGHT,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        ptr::null_mut()
    ));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    let mut back = vec![0u8; HOST_PITCH * HEIGHT];
    acl!(aclrtMemcpy2d(
        back.as_mut_ptr().cast(),
        HOST_PITCH,
        dev2,
        DEV_PITCH,
        WIDTH,
        HEIGHT,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    for row in 0..HEIGHT {
        assert_eq!(
            back[row * HOST_PITCH..][..WIDTH],
            host[row * HOST_PITCH..][..WIDTH]
        );
    }
    // Zero width or height is a successful no-op once the arguments have passed (NULL
    // pointers and the kind are checked first, in parameter order); the pointers are not
    // looked up.
    fails!(
        aclrtMemcpy2d(ptr::null_mut(), 0, ptr::null(), 0, 0, 5, 99),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemcpy2d"
    );
    fails!(
        aclrtMemcpy2d(dev, 0, dev, 0, 0, 5, 99),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemcpy2d"
    );
    let unknown = 0x10usize as *mut c_void;
    acl!(aclrtMemcpy2d(
        unknown,
        0,
        unknown,
        0,
        0,
        5,
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
}

#[test]
fn engines_that_can_reach_registered_host_memory() {
    install();
    let capability = |hac| {
        let mut cap = 9;
        acl!(aclrtHostMemMapCapabilities(5, hac, &mut cap));
        cap
    };
    assert_eq!(
        capability(ACL_RT_HAC_TYPE_AIC),
        ACL_RT_HOST_MEM_MAP_SUPPORTED
    );
    assert_eq!(
        capability(ACL_RT_HAC_TYPE_SDMA),
        ACL_RT_HOST_MEM_MAP_SUPPORTED
    );
    assert_eq!(
        capability(ACL_RT_HAC_TYPE_RDMA),
        ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED
    );
    // The engine type is checked before the device is looked up, and a failure writes nothing.
    let mut cap = 9;
    for (device, hac, code) in [
        (99, ACL_RT_HAC_TYPE_AIC, ACL_ERROR_RT_INVALID_DEVICEID),
        (99, 10, ACL_ERROR_RT_PARAM_INVALID),
    ] {
        fails!(
            aclrtHostMemMapCapabilities(device, hac, &mut cap),
            code,
            "aclrtHostMemMapCapabilities"
        );
    }
    assert_eq!(cap, 9);
}

#[test]
fn cached_memory_is_device_memory_and_cache_maintenance_keeps_it() {
    let _device_5 = take_turn(&DEVICE_5);
    install();
    set_device(5);
    let before = used(5);
    let mut p = ptr::null_mut();
    acl!(aclrtMallocCached(&mut p, 100, ACL_MEM_MALLOC_HUGE_FIRST));
    assert_eq!(used(5) - before, 160, "accounted as aclrtMalloc: 128 + 32");
    assert_eq!(attributes(p).location.type_, ACL_MEM_LOCATION_TYPE_DEVICE);
    upload(p, &[7u8; 100]);
    // Host and device see the same memory: flushing and invalidating change nothing.
    acl!(aclrtMemFlush(p, 100));
    acl!(aclrtMemInvalidate(p, 100));
    assert_eq!(download::<u8>(p, 100), [7u8; 100]);
    acl!(aclrtFree(p));
    assert_eq!(used(5), before);
    // Memory for the task scheduler is device memory too, configured as aclrtMallocWithCfg's.
    acl!(aclrtMallocForTaskScheduler(
        &mut p,
        100,
        ACL_MEM_MALLOC_HUGE_FIRST,
        ptr::null_mut()
    ));
    assert_eq!(used(5) - before, 160);
    assert_eq!(attributes(p).location.type_, ACL_MEM_LOCATION_TYPE_DEVICE);
    acl!(aclrtFree(p));
    assert_eq!(used(5), before);
}

/// The device that runs a memset writes the memory it sets: memory of another device needs
/// peer access from it, as a copy between two devices does (207006 ACL_ERROR_RT_NO_PERMISSION
/// otherwise, nothing written), for every memset; host memory needs none. The simulator
/// accepted every memset of another device's memory.
#[test]
fn memsets_of_another_devices_memory_need_peer_access() {
    install();
    set_device(9);
    let remote = malloc(64);
    upload(remote, &[5u8; 64]);
    set_device(8);
    let stream = create_stream();
    // Each memset of every form, of `value`, with the code it returned and the message it left.
    let memsets = |value: u8| {
        let word = u32::from_ne_bytes([value; 4]);
        let calls: [(&str, &dyn Fn() -> aclError); 4] = [
            ("aclrtMemset", &|| {
                code!(aclrtMemset(remote, 64, value.into(), 64))
            }),
            ("aclrtMemsetAsync", &|| {
                code!(aclrtMemsetAsync(remote, 64, value.into(), 64, stream))
            }),
            ("aclrtMemsetD32", &|| {
                code!(aclrtMemsetD32(remote, 64, word, 16))
            }),
            ("aclrtMemsetD32Async", &|| {
                code!(aclrtMemsetD32Async(remote, 64, word, 16, stream))
            }),
        ];
        calls.map(|(api, call)| (api, call(), recent_message()))
    };
    for (api, code, message) in memsets(7) {
        assert_eq!(code, ACL_ERROR_RT_NO_PERMISSION, "{api}");
        assert!(
            message.contains(api) && message.contains("peer access from device 8 to device 9"),
            "{message}"
        );
    }
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(remote, 64), vec![5; 64], "nothing written");
    // Peer access is one way: device 9's access to device 8 does not let device 8 in.
    set_device(9);
    acl!(aclrtDeviceEnablePeerAccess(8, 0));
    set_device(8);
    for (api, code, _) in memsets(7) {
        assert_eq!(code, ACL_ERROR_RT_NO_PERMISSION, "{api}");
    }
    acl!(aclrtDeviceEnablePeerAccess(9, 0));
    for (api, code, message) in memsets(3) {
        assert_eq!(code, ACL_SUCCESS, "{api}: {message}");
    }
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(remote, 64), vec![3; 64]);
    acl!(aclrtDeviceDisablePeerAccess(9));
    set_device(9);
    acl!(aclrtDeviceDisablePeerAccess(8));
    acl!(aclrtFree(remote));
    set_device(8);
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn peer_mappings_need_peer_access_and_change_nothing() {
    install();
    set_device(2);
    let dev = malloc(4096);
    upload(dev, &[6u8; 4096]);
    set_device(4);
    let map = |size, peer, flags| code!(aclrtMemP2PMap(dev, size, peer, flags));
    assert_eq!(map(4096, 4, 0), ACL_ERROR_RT_NO_PERMISSION);
    assert!(recent_message().contains("has not enabled peer access to device 2"));
    // Device 4 (current) enables access to device 2's memory.
    acl!(aclrtDeviceEnablePeerAccess(2, 0));
    acl!(aclrtMemP2PMap(dev, 4096, 4, 0));
    assert_eq!(download::<u8>(dev, 4096), vec![6; 4096]);
    for (size, peer, flags, code) in [
        (0, 4, 0, ACL_ERROR_INVALID_PARAM),
        (1 << 20, 4, 0, ACL_ERROR_RT_PARAM_INVALID),
        (4096, 2, 0, ACL_ERROR_RT_PARAM_INVALID),
        (4096, 4, 1, ACL_ERROR_RT_PARAM_INVALID),
        (4096, 99, 0, ACL_ERROR_RT_INVALID_DEVICEID),
        // The reserved flags are checked before the device and the memory are looked up.
        (4096, 99, 1, ACL_ERROR_RT_PARAM_INVALID),
        (1 << 20, 2, 1, ACL_ERROR_RT_PARAM_INVALID),
    ] {
        assert_eq!(map(size, peer, flags), code, "{size} {peer} {flags}");
        let message = recent_message();
        assert!(message.contains("aclrtMemP2PMap"));
        if flags != 0 {
            assert!(message.contains("flags is reserved"), "{message}");
        }
    }
    let host = malloc_host(64);
    assert_eq!(
        code!(aclrtMemP2PMap(host, 64, 4, 0)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    recent_message();
    acl!(aclrtDeviceDisablePeerAccess(2));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(dev));
}

#[test]
#[allow(deprecated)]
fn the_deprecated_conditional_copy_is_an_async_copy() {
    install();
    set_device(1);
    let stream = create_stream();
    let (dev, pinned) = (malloc(256), malloc_host(256));
    // SAFETY: 256 bytes of pinned memory.
    unsafe { ptr::write_bytes(pinned.cast::<u8>(), 4, 256) };
    let kind = ACL_MEMCPY_HOST_TO_DEVICE;
    acl!(aclrtMemcpyAsyncWithCondition(
        dev, 256, pinned, 256, kind, stream
    ));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 256), vec![4; 256]);
    // Its errors are aclrtMemcpyAsync's, under its own name.
    let host_to_host = code!(aclrtMemcpyAsyncWithCondition(
        pinned,
        256,
        pinned.wrapping_byte_add(128),
        64,
        ACL_MEMCPY_HOST_TO_HOST,
        stream
    ));
    assert_eq!(host_to_host, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    assert!(recent_message().contains("aclrtMemcpyAsyncWithCondition"));
    // The kind is refused whatever the pointers name: device to device, pinned to device and
    // device to pinned under HOST_TO_HOST all fail, for both names, and copy nothing.
    let other = malloc(256);
    type AsyncCopy = unsafe extern "C" fn(
        *mut c_void,
        usize,
        *const c_void,
        usize,
        aclrtMemcpyKind,
        aclrtStream,
    ) -> aclError;
    let copies: [AsyncCopy; 2] = [aclrtMemcpyAsyncWithCondition, aclrtMemcpyAsync];
    for (to, from) in [(dev, other), (dev, pinned), (pinned, dev)] {
        for copy in copies {
            let code = code!(copy(to, 64, from, 64, ACL_MEMCPY_HOST_TO_HOST, stream));
            assert_eq!(code, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
            assert!(recent_message().contains("ACL_MEMCPY_HOST_TO_HOST"));
        }
    }
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 256), vec![4; 256]);
    acl!(aclrtFree(other));
    let too_long = code!(aclrtMemcpyAsyncWithCondition(
        dev, 64, pinned, 65, kind, stream
    ));
    assert_eq!(too_long, ACL_ERROR_RT_PARAM_INVALID);
    recent_message();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFreeHost(pinned));
    acl!(aclrtFree(dev));
}

/// Promise: a freed address is held back from reuse. A task queued before the free faults with
/// 507013 although allocations of the same size follow at once (the host would hand them the
/// freed range), and a second free of the address is refused with 207002 instead of freeing
/// one of them.
#[test]
fn a_freed_address_stays_unallocated_for_the_allocations_right_after() {
    install();
    set_device(6);
    let stream = create_stream();
    let dev = malloc(4096);
    control::hold(6).unwrap();
    acl!(aclrtMemsetAsync(dev, 4096, 1, 4096, stream));
    acl!(aclrtFree(dev));
    let later: Vec<*mut c_void> = (0..64).map(|_| malloc(4096)).collect();
    assert!(!later.contains(&dev), "a freed address was given out again");
    control::release(6).unwrap();
    assert_eq!(code!(aclrtSynchronizeStream(stream)), ACL_ERROR_RT_SYS_DMA);
    assert_eq!(code!(aclrtFree(dev)), ACL_ERROR_RT_MEMORY_FREE);
    for ptr in later {
        assert!(
            download::<u8>(ptr, 4096).iter().all(|&b| b == 0),
            "the memset touched a later allocation"
        );
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(stream));
}

/// The VA_FLAG attribute of a malloc configuration is 0 or 1 (the reference's two values):
/// another value is refused with 107000 by every configured allocation, nothing allocated;
/// with 1, pinned memory registered for the device keeps its address.
#[test]
fn the_va_flag_is_zero_or_one() {
    set_device(0);
    let mut attr = aclrtMallocAttribute {
        attr: ACL_RT_MEM_ATTR_VA_FLAG,
        value: aclrtMallocAttrValue { vaFlag: 2 },
    };
    let mut cfg = aclrtMallocConfig {
        attrs: &raw mut attr,
        numAttrs: 1,
    };
    let mut host = ptr::null_mut();
    let code = code!(aclrtMallocHostWithCfg(&mut host, 4096, &mut cfg));
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "{}", recent_message());
    assert!(host.is_null());
    let mut dev = ptr::null_mut();
    let policy = ACL_MEM_MALLOC_NORMAL_ONLY;
    let code = code!(aclrtMallocWithCfg(&mut dev, 64, policy, &mut cfg));
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "{}", recent_message());
    let code = code!(aclrtMallocForTaskScheduler(&mut dev, 64, policy, &mut cfg));
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "{}", recent_message());
    assert!(dev.is_null());

    attr.value.vaFlag = 1;
    // Borrowed again after the write: the configuration reads the attribute through it.
    cfg.attrs = &raw mut attr;
    acl!(aclrtMallocHostWithCfg(&mut host, 4096, &mut cfg));
    let mut mapped = ptr::null_mut();
    acl!(aclrtHostRegister(
        host,
        4096,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    assert_eq!(mapped, host);
    acl!(aclrtHostUnregister(host));
    acl!(aclrtFreeHost(host));
}
