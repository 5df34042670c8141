//! Managed memory through the C ABI: allocation in the unified-address window, host and
//! device access, advice, prefetch, and every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const MIB: usize = 1 << 20;
const WINDOW: std::ops::Range<usize> = 0x900_0000_0000..0x900_0000_0000 + (3 << 40);

fn alloc_managed(size: u64) -> *mut c_void {
    let mut ptr = ptr::null_mut();
    acl!(aclrtMemAllocManaged(
        &mut ptr,
        size,
        ACL_RT_MEM_ATTACH_GLOBAL
    ));
    ptr
}

fn on_device(id: i32) -> aclrtMemManagedLocation {
    aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_DEVICE,
        id,
    }
}

#[test]
fn managed_memory_is_reachable_from_host_and_device() {
    set_device(0);
    let a = alloc_managed(1);
    let b = alloc_managed(3 * MIB as u64);
    for p in [a, b] {
        assert!(
            WINDOW.contains(&(p as usize)),
            "{p:p} is outside the window"
        );
    }
    let (mut base, mut size) = (ptr::null_mut(), 0);
    acl!(aclrtMemGetAddressRange(b, &mut base, &mut size));
    assert_eq!(size, 4 * MIB, "rounded up to 2 MiB");
    let mut attributes = aclrtPtrAttributes::default();
    acl!(aclrtPointerGetAttributes(a, &mut attributes));
    assert_eq!(attributes.location.type_, ACL_MEM_LOCATION_TYPE_MANAGED);

    // The host writes it directly; device operations see the writes.
    // SAFETY: 2 MiB of managed memory, accessible from the host.
    unsafe { ptr::write_bytes(a.cast::<u8>(), 4, 2 * MIB) };
    let stream = create_stream();
    acl!(aclrtMemManagedAdvise(
        a,
        2 * MIB as u64,
        ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
        on_device(0)
    ));
    acl!(aclrtMemManagedAdvise(
        a,
        2 * MIB as u64,
        ACL_MEM_ADVISE_SET_READ_MOSTLY,
        aclrtMemManagedLocation::default()
    ));
    acl!(aclrtMemManagedPrefetchAsync(
        a,
        2 * MIB,
        on_device(0),
        0,
        stream
    ));
    acl!(aclrtMemcpyAsync(
        b,
        4096,
        a,
        4096,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        stream
    ));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(b, 4096), vec![4; 4096]);
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn error_paths() {
    set_device(1);
    let mut out = ptr::null_mut();
    fails!(
        aclrtMemAllocManaged(ptr::null_mut(), 1, ACL_RT_MEM_ATTACH_GLOBAL),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemAllocManaged"
    );
    fails!(
        aclrtMemAllocManaged(&mut out, 0, ACL_RT_MEM_ATTACH_GLOBAL),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemAllocManaged"
    );
    fails!(
        aclrtMemAllocManaged(&mut out, 1, 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemAllocManaged"
    );
    fails!(
        aclrtMemAllocManaged(&mut out, 4 << 40, ACL_RT_MEM_ATTACH_GLOBAL),
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        "aclrtMemAllocManaged"
    );
    std::thread::spawn(|| {
        let mut out = ptr::null_mut();
        fails!(
            aclrtMemAllocManaged(&mut out, 1, ACL_RT_MEM_ATTACH_GLOBAL),
            ACL_ERROR_RT_CONTEXT_NULL,
            "aclrtMemAllocManaged"
        );
    })
    .join()
    .unwrap();

    let m = alloc_managed(2 * MIB as u64);
    let plain = malloc(64);
    let two = 2 * MIB as u64;
    let here = on_device(1);
    for (p, size, advise, location, code) in [
        (
            ptr::null(),
            two,
            ACL_MEM_ADVISE_SET_READ_MOSTLY,
            here,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            plain.cast_const(),
            two,
            ACL_MEM_ADVISE_SET_READ_MOSTLY,
            here,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            4096,
            ACL_MEM_ADVISE_SET_READ_MOSTLY,
            here,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            0,
            ACL_MEM_ADVISE_SET_READ_MOSTLY,
            here,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            2 * two,
            ACL_MEM_ADVISE_SET_READ_MOSTLY,
            here,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (m.cast_const(), two, 6, here, ACL_ERROR_RT_PARAM_INVALID),
        (
            m.cast_const(),
            two,
            ACL_MEM_ADVISE_SET_ACCESSED_BY,
            aclrtMemManagedLocation::default(),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            two,
            ACL_MEM_ADVISE_SET_ACCESSED_BY,
            on_device(99),
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
    ] {
        fails!(
            aclrtMemManagedAdvise(p, size, advise, location),
            code,
            "aclrtMemManagedAdvise"
        );
    }
    let host = aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_HOST,
        id: 0,
    };
    acl!(aclrtMemManagedAdvise(
        m,
        two,
        ACL_MEM_ADVISE_SET_ACCESSED_BY,
        host
    ));

    let stream = create_stream();
    let foreign = stream_of_device(0);
    for (p, size, location, flags, s, code) in [
        (
            ptr::null(),
            2 * MIB,
            here,
            0,
            stream,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            m.cast_const(),
            MIB,
            here,
            0,
            stream,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            2 * MIB,
            on_device(-1),
            0,
            stream,
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
        (
            m.cast_const(),
            2 * MIB,
            here,
            1,
            stream,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            m.cast_const(),
            2 * MIB,
            here,
            0,
            foreign,
            ACL_ERROR_RT_STREAM_CONTEXT,
        ),
    ] {
        fails!(
            aclrtMemManagedPrefetchAsync(p, size, location, flags, s),
            code,
            "aclrtMemManagedPrefetchAsync"
        );
    }
    acl!(aclrtMemManagedPrefetchAsync(m, 2 * MIB, host, 0, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtFree(m));
    acl!(aclrtFree(plain));
    acl!(aclrtDestroyStream(stream));
}

/// aclrtMemManagedPrefetchBatchAsync of `ranges`, with `locations[k]` from range `starts[k]` on.
fn prefetch_batch(
    ranges: &[(*mut c_void, usize)],
    locations: &[aclrtMemManagedLocation],
    starts: &[usize],
    flags: u64,
    stream: aclrtStream,
) -> aclError {
    let mut ptrs: Vec<*const c_void> = ranges.iter().map(|r| r.0.cast_const()).collect();
    let mut sizes: Vec<usize> = ranges.iter().map(|r| r.1).collect();
    let (mut locations, mut starts) = (locations.to_vec(), starts.to_vec());
    code!(aclrtMemManagedPrefetchBatchAsync(
        ptrs.as_mut_ptr(),
        sizes.as_mut_ptr(),
        ptrs.len(),
        locations.as_mut_ptr(),
        starts.as_mut_ptr(),
        locations.len(),
        flags,
        stream
    ))
}

#[test]
fn batch_prefetches_check_every_range_and_location() {
    set_device(0);
    let stream = create_stream();
    let (a, b) = (alloc_managed(4 * MIB as u64), alloc_managed(2 * MIB as u64));
    let host = aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_HOST,
        id: 0,
    };
    let ranges = [
        (a, 2 * MIB),
        (a.wrapping_byte_add(2 * MIB), 2 * MIB),
        (b, 2 * MIB),
    ];
    let code = prefetch_batch(&ranges, &[on_device(0), host], &[0, 2], 0, stream);
    assert_eq!(code, 0, "{}", recent_message());
    acl!(aclrtSynchronizeStream(stream));

    let plain = malloc(64);
    let one = [(a, 2 * MIB)];
    for (ranges, locations, starts, flags, expected) in [
        (
            &one[..],
            &[on_device(0)][..],
            &[0][..],
            1,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            &one[..],
            &[on_device(0)],
            &[1],
            0,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            &one[..],
            &[on_device(0), host],
            &[0, 0],
            0,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (&one[..], &[], &[], 0, ACL_ERROR_RT_PARAM_INVALID),
        (
            &[(a, MIB)][..],
            &[on_device(0)],
            &[0],
            0,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            &[(plain, 2 * MIB)][..],
            &[on_device(0)],
            &[0],
            0,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            &one[..],
            &[on_device(99)],
            &[0],
            0,
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
        (&[][..], &[on_device(0)], &[0], 0, ACL_ERROR_INVALID_PARAM),
    ] {
        let code = prefetch_batch(ranges, locations, starts, flags, stream);
        assert_eq!(code, expected, "{ranges:?} {starts:?} {flags}");
        assert!(recent_message().contains("aclrtMemManagedPrefetchBatchAsync"));
    }
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
    acl!(aclrtFree(plain));
    acl!(aclrtDestroyStream(stream));
}
