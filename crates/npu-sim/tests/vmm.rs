//! Virtual memory through the C ABI: reserve, allocate physical memory, map, use, set access,
//! unmap, free and release, with every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const MIB: usize = 1 << 20;

/// Three devices: the flow test has device 2 to itself, so its accounting is exact.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // aclrtMemRetainAllocationHandle needs a 26.0.RC1 driver (tests/versions.rs checks the
        // default one refuses it).
        npu_sim::SimConfig::default()
            .devices(3)
            .package_version("driver", "26.0.0-rc.1")
            .install()
            .unwrap()
    });
}

fn prop(device: u32, attr: aclrtMemAttr) -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: attr,
        location: aclrtMemLocation {
            id: device,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

fn reserve(size: usize) -> *mut c_void {
    let mut va = ptr::null_mut();
    acl!(aclrtReserveMemAddress(&mut va, size, 0, ptr::null_mut(), 0));
    va
}

fn physical(device: u32, size: usize) -> aclrtDrvMemHandle {
    let mut handle = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut handle,
        size,
        &prop(device, ACL_MEM_HUGE),
        0
    ));
    handle
}

fn access(va: *mut c_void, device: u32) -> u64 {
    access_of(va, device, ACL_MEM_LOCATION_TYPE_DEVICE)
}

fn access_of(va: *mut c_void, id: u32, type_: aclrtMemLocationType) -> u64 {
    let mut location = aclrtMemLocation { id, type_ };
    let mut flags = 99;
    acl!(aclrtMemGetAccess(va, &mut location, &mut flags));
    flags
}

#[test]
fn the_documented_flow_maps_physical_memory_into_reserved_addresses() {
    install();
    set_device(2);
    let mut granularity = 0;
    let mut huge = prop(2, ACL_MEM_HUGE);
    acl!(aclrtMemGetAllocationGranularity(
        &mut huge,
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
        &mut granularity
    ));
    assert_eq!(granularity, 2 * MIB);
    let mut giant = prop(2, ACL_MEM_HUGE1G);
    acl!(aclrtMemGetAllocationGranularity(
        &mut giant,
        ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        &mut granularity
    ));
    assert_eq!(granularity, 1 << 30);

    let used = npu_sim::control::device_stats(2).unwrap().bytes_allocated;
    let va = reserve(8 * MIB);
    let (a, b) = (physical(2, 4 * MIB), physical(2, 3 * MIB));
    // Physical memory counts against the device, rounded to the granularity.
    assert_eq!(
        npu_sim::control::device_stats(2).unwrap().bytes_allocated,
        used + 8 * MIB as u64
    );
    let upper = va.cast::<u8>().wrapping_add(4 * MIB).cast::<c_void>();
    acl!(aclrtMapMem(va, 4 * MIB, 0, a, 0));
    // A mapping's size is the allocation's and a whole number of granules: 3 MiB of 2 MiB
    // pages is allocated (rounded) but cannot be mapped.
    fails!(
        aclrtMapMem(upper, 3 * MIB, 0, b, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    acl!(aclrtFreePhysical(b));
    let b = physical(2, 4 * MIB);
    acl!(aclrtMapMem(upper, 4 * MIB, 0, b, 0));

    // Mapped memory is device memory of device 2.
    upload(upper, &[3u8; 4096]);
    acl!(aclrtMemset(va, 4 * MIB, 1, 4 * MIB));
    assert_eq!(download::<u8>(upper, 4096), vec![3; 4096]);
    assert_eq!(
        download::<u8>(va.cast::<u8>().wrapping_add(4 * MIB - 16).cast(), 16),
        vec![1; 16]
    );
    let mut attributes = aclrtPtrAttributes::default();
    acl!(aclrtPointerGetAttributes(upper, &mut attributes));
    assert_eq!(attributes.location.type_, ACL_MEM_LOCATION_TYPE_DEVICE);
    let (mut base, mut size) = (ptr::null_mut(), 0);
    acl!(aclrtMemGetAddressRange(
        upper.cast::<u8>().wrapping_add(100).cast(),
        &mut base,
        &mut size
    ));
    assert_eq!((base, size), (upper, 4 * MIB));

    // Access: READWRITE for the memory's device, NONE for another until it is set.
    assert_eq!(access(va, 2), u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE));
    assert_eq!(access(va, 1), u64::from(ACL_RT_MEM_ACCESS_FLAGS_NONE));
    let mut desc = device_access(1, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    // Access is set per mapping, with the address and size aclrtMapMem was given.
    acl!(aclrtMemSetAccess(va, 4 * MIB, &mut desc, 1));
    acl!(aclrtMemSetAccess(upper, 4 * MIB, &mut desc, 1));
    assert_eq!(
        access(upper, 1),
        u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE)
    );
    // Not across two mappings, not from inside one, not with another size.
    for (at, size) in [
        (va, 8 * MIB),
        (va.cast::<u8>().wrapping_add(2 * MIB).cast(), 2 * MIB),
        (upper, 3 * MIB),
        (upper, 2 * MIB),
    ] {
        fails!(
            aclrtMemSetAccess(at, size, &mut desc, 1),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtMemSetAccess"
        );
    }
    let inside = upper.cast::<u8>().wrapping_add(100).cast::<c_void>();
    let (mut location, mut flags) = (
        aclrtMemLocation {
            id: 1,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        0,
    );
    fails!(
        aclrtMemGetAccess(inside, &mut location, &mut flags),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAccess"
    );
    // The host is a location too, its id ignored: NONE until set.
    let host = ACL_MEM_LOCATION_TYPE_HOST;
    assert_eq!(
        access_of(va, 0, host),
        u64::from(ACL_RT_MEM_ACCESS_FLAGS_NONE)
    );
    desc.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
    desc.location = aclrtMemLocation { id: 7, type_: host };
    acl!(aclrtMemSetAccess(va, 4 * MIB, &mut desc, 1));
    acl!(aclrtMemSetAccess(upper, 4 * MIB, &mut desc, 1));
    let readwrite = u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    assert_eq!(access_of(upper, 0, host), readwrite);
    assert_eq!(access_of(upper, 3, host), readwrite);
    assert_eq!(
        access(upper, 1),
        u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE)
    );

    // The mapping's handle and properties.
    let mut retained = ptr::null_mut();
    fails!(
        aclrtMemRetainAllocationHandle(inside, &mut retained),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemRetainAllocationHandle"
    );
    acl!(aclrtMemRetainAllocationHandle(upper, &mut retained));
    assert_eq!(retained, b);
    let mut props = aclrtPhysicalMemProp::default();
    acl!(aclrtMemGetAllocationPropertiesFromHandle(
        retained, &mut props
    ));
    assert_eq!(props.memAttr, ACL_MEM_HUGE);
    assert_eq!(props.location.id, 2);

    // Mapped memory is not aclrtMalloc memory; freeing a mapped allocation keeps it alive.
    fails!(aclrtFree(va), ACL_ERROR_RT_MEMORY_FREE, "aclrtFree");
    acl!(aclrtFreePhysical(a));
    acl!(aclrtFreePhysical(b));
    acl!(aclrtFreePhysical(retained));
    assert_eq!(download::<u8>(upper, 16), vec![3; 16]);
    acl!(aclrtUnmapMem(upper));
    acl!(aclrtUnmapMem(va));
    assert_eq!(
        npu_sim::control::device_stats(2).unwrap().bytes_allocated,
        used
    );
    // Unmapped addresses are neither device nor host memory.
    fails!(
        aclrtMemset(va, 16, 0, 16),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemset"
    );
    acl!(aclrtReleaseMemAddress(va));
}

#[test]
fn a_reservation_can_be_placed() {
    install();
    let mut va = ptr::null_mut();
    let wanted = (20usize << 40) as *mut c_void;
    acl!(aclrtReserveMemAddress(&mut va, 4 * MIB, 0, wanted, 0));
    assert_eq!(va, wanted);
    let mut again = ptr::null_mut();
    fails!(
        aclrtReserveMemAddress(&mut again, 4 * MIB, 0, wanted, 0),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "aclrtReserveMemAddress"
    );
    acl!(aclrtReleaseMemAddress(va));
    // Released, the addresses are no host memory of the caller's: a copy there fails with a
    // code (placed by expectPtr or by the runtime alike), and expectPtr can have them again.
    let mut placed = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut placed,
        4 * MIB,
        0,
        ptr::null_mut(),
        0
    ));
    acl!(aclrtReleaseMemAddress(placed));
    set_device(0);
    let data = [1u8; 64];
    for released in [wanted, placed] {
        fails!(
            aclrtMemcpy(
                released,
                64,
                data.as_ptr().cast(),
                64,
                ACL_MEMCPY_HOST_TO_DEVICE
            ),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtMemcpy"
        );
    }
    acl!(aclrtReserveMemAddress(&mut va, 4 * MIB, 0, wanted, 0));
    assert_eq!(va, wanted);
    acl!(aclrtReleaseMemAddress(va));
    for bad in [1usize << 40, (20usize << 40) + 4096, 24usize << 40] {
        fails!(
            aclrtReserveMemAddress(&mut va, 4 * MIB, 0, bad as *mut c_void, 0),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtReserveMemAddress"
        );
    }
}

/// A reservation starts where physical memory can be mapped at once: on a multiple of the
/// allocation granularity (and of its size's power of two, up to 1 GiB), whatever alignment
/// the host's mmap happens to give (valgrind's gives only pages).
#[test]
fn reservations_start_aligned_for_mapping() {
    install();
    set_device(1);
    let mut held = Vec::new();
    for size in [MIB, 2 * MIB, 6 * MIB, 2 * MIB + 4096, 64 * MIB] {
        // Interleaved with small mappings, so the next free address is only page-aligned.
        held.push(reserve(4096));
        let va = reserve(size);
        let align = size.next_power_of_two().max(2 * MIB);
        assert_eq!(va as usize % align, 0, "{size} bytes reserved at {va:?}");
        if size % (2 * MIB) == 0 {
            let handle = physical(1, 2 * MIB);
            acl!(aclrtMapMem(va, 2 * MIB, 0, handle, 0));
            acl!(aclrtUnmapMem(va));
            acl!(aclrtFreePhysical(handle));
        }
        held.push(va);
    }
    for va in held {
        acl!(aclrtReleaseMemAddress(va));
    }
}

#[test]
fn error_paths() {
    install();
    set_device(1);
    let mut va = ptr::null_mut();
    let mut handle = ptr::null_mut();
    let mut granularity = 0;

    // Reserve and release.
    fails!(
        aclrtReserveMemAddress(ptr::null_mut(), MIB, 0, ptr::null_mut(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtReserveMemAddress"
    );
    fails!(
        aclrtReserveMemAddress(&mut va, 0, 0, ptr::null_mut(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtReserveMemAddress"
    );
    fails!(
        aclrtReserveMemAddress(&mut va, MIB, 4096, ptr::null_mut(), 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtReserveMemAddress"
    );
    fails!(
        aclrtReserveMemAddress(&mut va, usize::MAX, 0, ptr::null_mut(), 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtReserveMemAddress"
    );
    fails!(
        aclrtReleaseMemAddress(ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtReleaseMemAddress"
    );
    let plain = malloc(64);
    fails!(
        aclrtReleaseMemAddress(plain),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtReleaseMemAddress"
    );
    acl!(aclrtFree(plain));

    // Physical memory and its properties.
    let good = prop(1, ACL_MEM_HUGE);
    fails!(
        aclrtMallocPhysical(ptr::null_mut(), MIB, &good, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMallocPhysical"
    );
    fails!(
        aclrtMallocPhysical(&mut handle, 0, &good, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMallocPhysical"
    );
    fails!(
        aclrtMallocPhysical(&mut handle, MIB, ptr::null(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMallocPhysical"
    );
    fails!(
        aclrtMallocPhysical(&mut handle, MIB, &good, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMallocPhysical"
    );
    // The properties come before the later flags, and the option after the properties.
    let on_host = aclrtPhysicalMemProp {
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_HOST,
        },
        ..good
    };
    fails!(
        aclrtMallocPhysical(&mut handle, MIB, &on_host, 1),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMallocPhysical"
    );
    let mut on_host_mut = on_host;
    fails!(
        aclrtMemGetAllocationGranularity(&mut on_host_mut, 2, &mut granularity),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMemGetAllocationGranularity"
    );
    let cases: [(aclrtPhysicalMemProp, aclError); 7] = [
        (
            aclrtPhysicalMemProp {
                allocationType: 1,
                ..good
            },
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            aclrtPhysicalMemProp {
                handleType: ACL_MEM_HANDLE_TYPE_POSIX,
                ..good
            },
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            aclrtPhysicalMemProp {
                handleType: 7,
                ..good
            },
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            aclrtPhysicalMemProp {
                location: aclrtMemLocation {
                    id: 0,
                    type_: ACL_MEM_LOCATION_TYPE_HOST,
                },
                ..good
            },
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            aclrtPhysicalMemProp {
                location: aclrtMemLocation {
                    id: 0,
                    type_: ACL_MEM_LOCATION_TYPE_UNREGISTERED,
                },
                ..good
            },
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            prop(1, ACL_MEM_P2P_HUGE1G),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (prop(1, ACL_DDR_MEM_HUGE), ACL_ERROR_RT_PARAM_INVALID),
    ];
    for (bad, code) in cases {
        fails!(
            aclrtMallocPhysical(&mut handle, MIB, &bad, 0),
            code,
            "aclrtMallocPhysical"
        );
        let mut bad = bad;
        fails!(
            aclrtMemGetAllocationGranularity(
                &mut bad,
                ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                &mut granularity
            ),
            code,
            "aclrtMemGetAllocationGranularity"
        );
    }
    fails!(
        aclrtMallocPhysical(&mut handle, MIB, &prop(99, ACL_MEM_HUGE), 0),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtMallocPhysical"
    );
    fails!(
        aclrtMallocPhysical(&mut handle, 1 << 40, &good, 0),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "aclrtMallocPhysical"
    );
    let mut good_mut = good;
    fails!(
        aclrtMemGetAllocationGranularity(&mut good_mut, 2, &mut granularity),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAllocationGranularity"
    );
    fails!(
        aclrtMemGetAllocationGranularity(
            ptr::null_mut(),
            ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
            &mut granularity
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAllocationGranularity"
    );
    fails!(
        aclrtMemGetAllocationGranularity(
            &mut good_mut,
            ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAllocationGranularity"
    );

    // Mapping.
    let va = reserve(8 * MIB);
    let phys = physical(1, 2 * MIB);
    let other_device = physical(0, 2 * MIB);
    let odd = va.cast::<u8>().wrapping_add(4096).cast::<c_void>();
    let beyond = va.cast::<u8>().wrapping_add(8 * MIB).cast::<c_void>();
    for (at, size, offset, flags, code) in [
        (va, MIB, 0, 0, ACL_ERROR_RT_PARAM_INVALID),
        (va, 2 * MIB, 4096, 0, ACL_ERROR_RT_PARAM_INVALID),
        (va, 2 * MIB, 0, 1, ACL_ERROR_RT_PARAM_INVALID),
        (odd, 2 * MIB, 0, 0, ACL_ERROR_RT_PARAM_INVALID),
        (beyond, 2 * MIB, 0, 0, ACL_ERROR_RT_PARAM_INVALID),
    ] {
        fails!(
            aclrtMapMem(at, size, offset, phys, flags),
            code,
            "aclrtMapMem"
        );
    }
    fails!(
        aclrtMapMem(ptr::null_mut(), 2 * MIB, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMapMem"
    );
    fails!(
        aclrtMapMem(va, 2 * MIB, 0, ptr::null_mut(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMapMem"
    );
    acl!(aclrtMapMem(va, 2 * MIB, 0, phys, 0));
    fails!(
        aclrtMapMem(va, 2 * MIB, 0, phys, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    let next = va.cast::<u8>().wrapping_add(2 * MIB).cast::<c_void>();
    fails!(
        aclrtMapMem(next, 2 * MIB, 0, other_device, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    fails!(
        aclrtReleaseMemAddress(va),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtReleaseMemAddress"
    );

    // Access.
    let mut location = aclrtMemLocation {
        id: 1,
        type_: ACL_MEM_LOCATION_TYPE_DEVICE,
    };
    let mut flag = 0;
    let mut desc = aclrtMemAccessDesc {
        flags: ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
        location,
        rsv: [0; 12],
    };
    fails!(
        aclrtMemGetAccess(ptr::null_mut(), &mut location, &mut flag),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAccess"
    );
    fails!(
        aclrtMemGetAccess(va, ptr::null_mut(), &mut flag),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAccess"
    );
    fails!(
        aclrtMemGetAccess(va, &mut location, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAccess"
    );
    fails!(
        aclrtMemGetAccess(next, &mut location, &mut flag),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAccess"
    );
    let mut on_numa = aclrtMemLocation {
        id: 0,
        type_: ACL_MEM_LOCATION_TYPE_HOST_NUMA,
    };
    fails!(
        aclrtMemGetAccess(va, &mut on_numa, &mut flag),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAccess"
    );
    let mut nowhere = aclrtMemLocation {
        id: 99,
        type_: ACL_MEM_LOCATION_TYPE_DEVICE,
    };
    fails!(
        aclrtMemGetAccess(va, &mut nowhere, &mut flag),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtMemGetAccess"
    );
    // The address is checked before the location, in parameter order.
    fails!(
        aclrtMemGetAccess(next, &mut nowhere, &mut flag),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAccess"
    );
    let mut to_nowhere = aclrtMemAccessDesc {
        location: nowhere,
        ..desc
    };
    fails!(
        aclrtMemSetAccess(va, 2 * MIB, &mut to_nowhere, 1),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(next, 2 * MIB, &mut to_nowhere, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(va, 4 * MIB, &mut to_nowhere, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(ptr::null_mut(), MIB, &mut desc, 1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(va, MIB, ptr::null_mut(), 1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(va, 0, &mut desc, 1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(va, MIB, &mut desc, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemSetAccess"
    );
    fails!(
        aclrtMemSetAccess(va, 4 * MIB, &mut desc, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemSetAccess"
    );
    let mut bad_flags = aclrtMemAccessDesc { flags: 2, ..desc };
    fails!(
        aclrtMemSetAccess(va, 2 * MIB, &mut bad_flags, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemSetAccess"
    );
    // A count no array can have is refused before anything is sized by it (it used to abort
    // the process on the allocation).
    for count in [70_000, 1 << 32, 1 << 40, usize::MAX] {
        fails!(
            aclrtMemSetAccess(va, 2 * MIB, &mut desc, count),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtMemSetAccess"
        );
    }

    // Handles.
    let mut retained = ptr::null_mut();
    let mut props = aclrtPhysicalMemProp::default();
    fails!(
        aclrtMemRetainAllocationHandle(ptr::null_mut(), &mut retained),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemRetainAllocationHandle"
    );
    fails!(
        aclrtMemRetainAllocationHandle(va, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemRetainAllocationHandle"
    );
    fails!(
        aclrtMemRetainAllocationHandle(next, &mut retained),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemRetainAllocationHandle"
    );
    fails!(
        aclrtMemGetAllocationPropertiesFromHandle(ptr::null_mut(), &mut props),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAllocationPropertiesFromHandle"
    );
    fails!(
        aclrtMemGetAllocationPropertiesFromHandle(phys, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAllocationPropertiesFromHandle"
    );
    fails!(
        aclrtFreePhysical(ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtFreePhysical"
    );
    acl!(aclrtFreePhysical(other_device));
    fails!(
        aclrtFreePhysical(other_device),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtFreePhysical"
    );
    fails!(
        aclrtMapMem(next, 2 * MIB, 0, other_device, 0),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMapMem"
    );
    // The offset and the flags need no lookup and come before the handle, in parameter order.
    fails!(
        aclrtMapMem(next, 2 * MIB, 4096, other_device, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    fails!(
        aclrtMapMem(next, 2 * MIB, 0, other_device, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    fails!(
        aclrtMemGetAllocationPropertiesFromHandle(other_device, &mut props),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMemGetAllocationPropertiesFromHandle"
    );

    // A handle freed while mapped can be retained back.
    acl!(aclrtFreePhysical(phys));
    acl!(aclrtMemRetainAllocationHandle(va, &mut retained));
    acl!(aclrtFreePhysical(retained));

    // Unmapping.
    fails!(
        aclrtUnmapMem(ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtUnmapMem"
    );
    fails!(
        aclrtUnmapMem(next),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtUnmapMem"
    );
    acl!(aclrtUnmapMem(va));
    fails!(
        aclrtUnmapMem(va),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtUnmapMem"
    );
    acl!(aclrtReleaseMemAddress(va));
    fails!(
        aclrtReleaseMemAddress(va),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtReleaseMemAddress"
    );
}

/// aclrtCheckMemType's answer for `addresses` and `mem_type`.
fn check_mem_type(addresses: &[*mut c_void], mem_type: u32) -> u32 {
    let mut list = addresses.to_vec();
    let mut result = 99;
    acl!(aclrtCheckMemType(
        list.as_mut_ptr(),
        list.len() as u32,
        mem_type,
        &mut result,
        0
    ));
    result
}

#[test]
fn memory_types_are_device_reserved_or_neither() {
    install();
    set_device(0);
    let dev = malloc(4096);
    let inside = dev.wrapping_byte_add(100);
    let va = reserve(4 * MIB);
    let mapped = reserve(2 * MIB);
    let phys = physical(0, 2 * MIB);
    acl!(aclrtMapMem(mapped, 2 * MIB, 0, phys, 0));
    let host = malloc_host(64);
    let (dev_type, rsvd) = (ACL_RT_MEM_TYPE_DEV, ACL_RT_MEM_TYPE_RSVD);
    assert_eq!(check_mem_type(&[dev, inside], dev_type), 1);
    assert_eq!(check_mem_type(&[dev], rsvd), 0);
    assert_eq!(check_mem_type(&[dev], ACL_RT_MEM_TYPE_DVPP), 0);
    // Reserved addresses are RSVD whether physical memory is mapped at them or not.
    assert_eq!(check_mem_type(&[va, mapped], rsvd), 1);
    assert_eq!(check_mem_type(&[mapped], dev_type), 0);
    // A mixed list needs every type it holds.
    assert_eq!(check_mem_type(&[dev, va], dev_type), 0);
    assert_eq!(check_mem_type(&[dev, va], dev_type | rsvd), 1);
    // Host memory is none of them.
    assert_eq!(check_mem_type(&[dev, host], dev_type | rsvd), 0);
    // The NULL pointers come before the values: a NULL result is named whatever else is wrong.
    let mut list = [dev];
    let code = code!(aclrtCheckMemType(
        list.as_mut_ptr(),
        0,
        0,
        ptr::null_mut(),
        1
    ));
    let message = recent_message();
    assert_eq!(code, ACL_ERROR_INVALID_PARAM, "{message}");
    assert!(message.contains("checkResult is NULL"), "{message}");
    acl!(aclrtUnmapMem(mapped));
    acl!(aclrtFreePhysical(phys));
    acl!(aclrtReleaseMemAddress(mapped));
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(dev));
}

#[test]
fn a_mapping_without_access_gets_it_from_set_access() {
    install();
    set_device(0);
    let va = reserve(2 * MIB);
    let phys = physical(0, 2 * MIB);
    acl!(aclrtMemMapNoAccess(va, 2 * MIB, 0, phys, 0));
    assert_eq!(access(va, 0), u64::from(ACL_RT_MEM_ACCESS_FLAGS_NONE));
    let mut desc = device_access(0, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    acl!(aclrtMemSetAccess(va, 2 * MIB, &mut desc, 1));
    assert_eq!(access(va, 0), u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE));
    upload(va, &[3u8; 64]);
    assert_eq!(download::<u8>(va, 64), vec![3; 64]);
    // aclrtMapMem's checks, with the code aclrtMemMapNoAccess's header gives for an invalid
    // virPtr, size, handle or flags: ACL_ERROR_INVALID_PARAM (aclrtMapMem answers 107000, and
    // 107017 for a stale handle).
    let again = reserve(2 * MIB);
    fails!(
        aclrtMemMapNoAccess(again, MIB, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(again, 0, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(again, 2 * MIB, 0, phys, 1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(ptr::null_mut(), 2 * MIB, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(again, 2 * MIB, 0, ptr::null_mut(), 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    let unaligned = (again as usize + 4096) as *mut c_void;
    fails!(
        aclrtMemMapNoAccess(unaligned, 2 * MIB, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(va, 2 * MIB, 0, phys, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    let freed = physical(0, 2 * MIB);
    acl!(aclrtFreePhysical(freed));
    fails!(
        aclrtMemMapNoAccess(again, 2 * MIB, 0, freed, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    // The header does not name offset; it stays aclrtMapMem's 107000.
    fails!(
        aclrtMemMapNoAccess(again, 2 * MIB, 1, phys, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemMapNoAccess"
    );
    // In parameter order: size 0 before the offset, the offset before a freed handle.
    fails!(
        aclrtMemMapNoAccess(again, 0, 1, freed, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMemMapNoAccess(again, 2 * MIB, 1, freed, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemMapNoAccess"
    );
    fails!(
        aclrtMapMem(again, 2 * MIB, 0, freed, 0),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtMapMem"
    );
    fails!(
        aclrtMapMem(again, MIB, 0, phys, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMapMem"
    );
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(phys));
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtReleaseMemAddress(again));

    // Variants an Atlas A2 lacks.
    let mut out = ptr::null_mut();
    let wanted = (48usize << 40) as *mut c_void;
    fails!(
        aclrtReserveMemAddressNoUCMemory(&mut out, 1 << 30, 0, wanted, 0),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtReserveMemAddressNoUCMemory"
    );
    fails!(
        aclrtMemMapSelectedLink(va, 2 * MIB, va, ACL_RT_MEM_LINK_IDX_1),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMemMapSelectedLink"
    );
    // Their pointer arguments are checked first, as everywhere in the ACL layer.
    fails!(
        aclrtReserveMemAddressNoUCMemory(ptr::null_mut(), 1 << 30, 0, wanted, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtReserveMemAddressNoUCMemory"
    );
    fails!(
        aclrtMemMapSelectedLink(ptr::null_mut(), 2 * MIB, va, ACL_RT_MEM_LINK_IDX_1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapSelectedLink"
    );
    fails!(
        aclrtMemMapSelectedLink(va, 2 * MIB, ptr::null_mut(), ACL_RT_MEM_LINK_IDX_1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapSelectedLink"
    );
    // The handle is refused before it is looked at: any non-NULL one reaches the link checks.
    let handle: aclrtDrvMemHandle = ptr::NonNull::dangling().as_ptr();
    fails!(
        aclrtMemMapSetLink(ptr::null_mut(), ACL_RT_MEM_ACCESS_LINK_HCCS),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemMapSetLink"
    );
    fails!(
        aclrtMemMapSetLink(handle, 4),
        ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED,
        "aclrtMemMapSetLink"
    );
    for link in [
        ACL_RT_MEM_ACCESS_LINK_SIO,
        ACL_RT_MEM_ACCESS_LINK_HCCS,
        ACL_RT_MEM_ACCESS_UB_ONE_PORT_PATH,
        ACL_RT_MEM_ACCESS_UB_MULTI_PORT_PATH,
    ] {
        fails!(
            aclrtMemMapSetLink(handle, link),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "aclrtMemMapSetLink"
        );
    }
}

/// Promise: aclrtMemSetAccess, aclrtMemGetAccess and aclrtMemRetainAllocationHandle racing the
/// mapping's aclrtUnmapMem, aclrtFreePhysical and aclrtReleaseMemAddress on another thread
/// each succeed or find no mapping at the address (107000); a handle retained in the race
/// stays valid and frees once.
#[test]
fn mapping_queries_racing_the_teardown_succeed_or_find_no_mapping() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    install();
    set_device(0);
    for round in 0..100 {
        let va = reserve(4 * MIB);
        let handle = physical(0, 2 * MIB);
        acl!(aclrtMapMem(va, 2 * MIB, 0, handle, 0));
        let (at, done, go) = (
            va as usize,
            Arc::new(AtomicBool::new(false)),
            Arc::new(Barrier::new(2)),
        );
        let asker = {
            let (done, go) = (done.clone(), go.clone());
            std::thread::spawn(move || {
                set_device(0);
                let va = at as *mut c_void;
                let (mut codes, mut retained) = (Vec::new(), Vec::new());
                go.wait();
                while !done.load(Ordering::Acquire) {
                    let mut desc = device_access(1, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
                    codes.push(code!(aclrtMemSetAccess(va, 2 * MIB, &mut desc, 1)));
                    let mut location = aclrtMemLocation {
                        id: 1,
                        type_: ACL_MEM_LOCATION_TYPE_DEVICE,
                    };
                    let mut flags = 0;
                    codes.push(code!(aclrtMemGetAccess(va, &mut location, &mut flags)));
                    let mut again = ptr::null_mut();
                    let code = code!(aclrtMemRetainAllocationHandle(va, &mut again));
                    if code == 0 {
                        retained.push(again as usize);
                    }
                    codes.push(code);
                }
                (codes, retained)
            })
        };
        go.wait();
        acl!(aclrtUnmapMem(va));
        acl!(aclrtFreePhysical(handle));
        acl!(aclrtReleaseMemAddress(va));
        done.store(true, Ordering::Release);
        let (codes, retained) = asker.join().unwrap();
        for code in codes {
            assert!(
                code == 0 || code == ACL_ERROR_RT_PARAM_INVALID,
                "round {round}: {code}"
            );
        }
        for again in retained {
            acl!(aclrtFreePhysical(again as aclrtDrvMemHandle));
        }
    }
}

/// Mappings that adjoin in one reserved range are one stretch of device memory, as the
/// reference's "address-contiguous virtual memory" has them: a copy or a task may run from one
/// into the next, not into addresses left unmapped. A task queued across the boundary whose
/// second mapping is unmapped before it runs faults and touches neither mapping.
#[test]
fn adjoining_mappings_are_one_stretch_of_memory() {
    install();
    set_device(1);
    let va = reserve(6 * MIB);
    let (a, b) = (physical(1, 2 * MIB), physical(1, 2 * MIB));
    let upper = va.cast::<u8>().wrapping_add(2 * MIB).cast::<c_void>();
    acl!(aclrtMapMem(va, 2 * MIB, 0, a, 0));
    acl!(aclrtMapMem(upper, 2 * MIB, 0, b, 0));
    let data: Vec<u8> = (0..4 * MIB).map(|i| (i * 7 + 1) as u8).collect();
    upload(va, &data);
    assert_eq!(download::<u8>(va, 4 * MIB), data);
    let seam = va.cast::<u8>().wrapping_add(2 * MIB - 8).cast::<c_void>();
    acl!(aclrtMemset(seam, 16, 0xEE, 16));
    assert_eq!(download::<u8>(seam, 16), vec![0xEE; 16]);
    // The third 2 MiB are reserved but not mapped.
    let mut host = vec![0u8; 4 * MIB + 1];
    fails!(
        aclrtMemcpy(
            host.as_mut_ptr().cast(),
            host.len(),
            va,
            host.len(),
            ACL_MEMCPY_DEVICE_TO_HOST
        ),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemcpy"
    );

    // A memset held behind a value wait, its second mapping unmapped meanwhile.
    let stream = create_stream();
    let word = malloc(8);
    upload(word, &[0u64]);
    acl!(aclrtValueWait(word, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    acl!(aclrtMemsetAsync(seam, 16, 0x11, 16, stream));
    acl!(aclrtUnmapMem(upper));
    upload(word, &[1u64]);
    sync_fails_with_dma(stream);
    assert_eq!(
        download::<u8>(seam, 8),
        vec![0xEE; 8],
        "the first mapping's bytes"
    );
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(word));
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(a));
    acl!(aclrtFreePhysical(b));
    acl!(aclrtReleaseMemAddress(va));
}

/// aclrtMemSetAccess takes only ACL_RT_MEM_ACCESS_FLAGS_READWRITE, with `rsv` 0, as the
/// reference's aclrtMemAccessDesc says; the refusal changes nothing.
#[test]
fn access_descriptors_are_readwrite_with_rsv_zero() {
    install();
    set_device(1);
    let va = reserve(2 * MIB);
    let handle = physical(1, 2 * MIB);
    acl!(aclrtMapMem(va, 2 * MIB, 0, handle, 0));
    for flags in [
        ACL_RT_MEM_ACCESS_FLAGS_NONE,
        ACL_RT_MEM_ACCESS_FLAGS_READ,
        7,
    ] {
        let mut desc = device_access(0, flags);
        fails!(
            aclrtMemSetAccess(va, 2 * MIB, &mut desc, 1),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtMemSetAccess"
        );
    }
    let mut desc = device_access(0, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    desc.rsv[11] = 1;
    fails!(
        aclrtMemSetAccess(va, 2 * MIB, &mut desc, 1),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemSetAccess"
    );
    assert_eq!(access(va, 0), u64::from(ACL_RT_MEM_ACCESS_FLAGS_NONE));
    desc.rsv[11] = 0;
    acl!(aclrtMemSetAccess(va, 2 * MIB, &mut desc, 1));
    assert_eq!(access(va, 0), u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE));
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(handle));
    acl!(aclrtReleaseMemAddress(va));
}

/// An uncorrectable error in mapped memory goes with its mapping: once unmapped, the device
/// lists no such range, and physical memory mapped at the same addresses again works (the
/// error was in the first allocation's pages, not in the addresses).
#[test]
fn a_memory_error_in_mapped_memory_goes_with_its_mapping() {
    install();
    set_device(1);
    let va = reserve(2 * MIB);
    let (first, second) = (physical(1, 2 * MIB), physical(1, 2 * MIB));
    acl!(aclrtMapMem(va, 2 * MIB, 0, first, 0));
    npu_sim::control::inject_mem_uce(va, 64).unwrap();
    assert_eq!(uce_ranges(1), [(va as usize, 64)]);
    assert_eq!(
        code!(aclrtMemset(va, 64, 0, 64)),
        ACL_ERROR_RT_DEVICE_MEM_ERROR
    );
    recent_message();
    acl!(aclrtUnmapMem(va));
    assert_eq!(uce_ranges(1), [], "the range went with the mapping");
    acl!(aclrtMapMem(va, 2 * MIB, 0, second, 0));
    acl!(aclrtMemset(va, 64, 7, 64));
    assert_eq!(download::<u8>(va, 64), vec![7; 64]);
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(first));
    acl!(aclrtFreePhysical(second));
    acl!(aclrtReleaseMemAddress(va));
}
