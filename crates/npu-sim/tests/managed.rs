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

/// A value wait on managed memory is released by the host writing the word directly, as the
/// device reads the word whoever writes it (it waited on until a runtime operation happened to
/// write memory).
#[test]
fn a_value_wait_sees_the_hosts_own_write_of_managed_memory() {
    set_device(0);
    let word = alloc_managed(8);
    let stream = create_stream();
    acl!(aclrtValueWait(word, 5, ACL_STREAM_WAIT_VALUE_EQ, stream));
    // The word is still 0: the wait holds the stream (and has read the word meanwhile).
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 200)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    recent_message();
    // SAFETY: 8 bytes of managed memory, accessible from the host, 8-byte aligned.
    unsafe { word.cast::<u64>().write_volatile(5) };
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000)),
        0,
        "the host's write satisfies the wait: {}",
        recent_message()
    );
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(word));
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
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            m.cast_const(),
            2 * MIB,
            on_device(-1),
            0,
            stream,
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
        // The prefetch functions' headers name 100000 for error input, where
        // aclrtMemManagedAdvise answers 107000 for the same range and location.
        (
            plain.cast_const(),
            2 * MIB,
            here,
            0,
            stream,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            m.cast_const(),
            4 * MIB,
            here,
            0,
            stream,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            m.cast_const(),
            2 * MIB,
            aclrtMemManagedLocation::default(),
            0,
            stream,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            m.cast_const(),
            2 * MIB,
            here,
            1,
            stream,
            ACL_ERROR_INVALID_PARAM,
        ),
        // The flags, a value, before the location's device is looked up (as in a batch).
        (
            m.cast_const(),
            2 * MIB,
            on_device(99),
            1,
            stream,
            ACL_ERROR_INVALID_PARAM,
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
            ACL_ERROR_INVALID_PARAM,
        ),
        (&one[..], &[on_device(0)], &[1], 0, ACL_ERROR_INVALID_PARAM),
        (
            &one[..],
            &[on_device(0), host],
            &[0, 0],
            0,
            ACL_ERROR_INVALID_PARAM,
        ),
        (&one[..], &[], &[], 0, ACL_ERROR_INVALID_PARAM),
        (
            &[(a, MIB)][..],
            &[on_device(0)],
            &[0],
            0,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            &[(plain, 2 * MIB)][..],
            &[on_device(0)],
            &[0],
            0,
            ACL_ERROR_INVALID_PARAM,
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
    // Each array NULL in turn: 100000 before the ranges or the stream are checked.
    for null in 0..4 {
        /// The array's pointer, or NULL for the one under test.
        fn or_null<T>(array: &mut [T], null: bool) -> *mut T {
            if null {
                ptr::null_mut()
            } else {
                array.as_mut_ptr()
            }
        }
        let (mut ptrs, mut sizes) = ([a.cast_const()], [2 * MIB]);
        let (mut locations, mut starts) = ([on_device(0)], [0usize]);
        fails!(
            aclrtMemManagedPrefetchBatchAsync(
                or_null(&mut ptrs, null == 0),
                or_null(&mut sizes, null == 1),
                1,
                or_null(&mut locations, null == 2),
                or_null(&mut starts, null == 3),
                1,
                0,
                stream
            ),
            ACL_ERROR_INVALID_PARAM,
            "aclrtMemManagedPrefetchBatchAsync"
        );
    }
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
    acl!(aclrtFree(plain));
    acl!(aclrtDestroyStream(stream));
}

/// One 4-byte attribute of a managed range.
fn attr(attribute: aclrtMemManagedRangeAttribute, ptr: *mut c_void, size: usize) -> i32 {
    let mut value = 0x5555_5555i32;
    acl!(aclrtMemManagedGetAttr(
        attribute,
        ptr,
        size,
        (&raw mut value).cast(),
        4
    ));
    value
}

#[test]
fn attributes_report_what_every_page_was_told() {
    set_device(0);
    let m = alloc_managed(4 * MIB as u64);
    let (lower, upper) = (m, m.wrapping_byte_add(2 * MIB));
    let two = 2 * MIB as u64;
    let host = aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_HOST,
        id: 0,
    };
    // Nothing said yet.
    assert_eq!(attr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 4 * MIB), 0);
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 4 * MIB),
        -2
    );
    let invalid = ACL_MEM_LOCATIONTYPE_INVALID as i32;
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, m, 1),
        invalid
    );

    let advise = |ptr, size, advice, location| {
        acl!(aclrtMemManagedAdvise(ptr, size, advice, location));
    };
    advise(m, 2 * two, ACL_MEM_ADVISE_SET_READ_MOSTLY, host);
    advise(upper, two, ACL_MEM_ADVISE_UNSET_READ_MOSTLY, host);
    assert_eq!(attr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, lower, 2 * MIB), 1);
    assert_eq!(attr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 4 * MIB), 0);

    advise(
        m,
        2 * two,
        ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
        on_device(1),
    );
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 4 * MIB),
        1
    );
    let device = ACL_MEM_LOCATIONTYPE_DEVICE as i32;
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, m, 4 * MIB),
        device
    );
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, m, 4 * MIB),
        1
    );
    advise(upper, two, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, upper, 1),
        -1
    );
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, upper, 1),
        -2
    );
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 4 * MIB),
        -2
    );

    // ACCESSED_BY: the places every page names, then -2.
    advise(m, 2 * two, ACL_MEM_ADVISE_SET_ACCESSED_BY, on_device(0));
    advise(lower, two, ACL_MEM_ADVISE_SET_ACCESSED_BY, on_device(1));
    let mut ids = [7i32; 3];
    acl!(aclrtMemManagedGetAttr(
        ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
        m,
        4 * MIB,
        ids.as_mut_ptr().cast(),
        12
    ));
    assert_eq!(ids, [0, -2, -2]);

    // The latest prefetch request, single or batched, whether or not it has run.
    let stream = create_stream();
    acl!(aclrtMemManagedPrefetchAsync(
        m,
        4 * MIB,
        on_device(1),
        0,
        stream
    ));
    let prefetched = ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION;
    assert_eq!(attr(prefetched, m, 4 * MIB), 1);
    let code = prefetch_batch(&[(upper, 2 * MIB)], &[host], &[0], 0, stream);
    assert_eq!(code, 0, "{}", recent_message());
    assert_eq!(attr(prefetched, upper, 2 * MIB), -1);
    let host_type = ACL_MEM_LOCATIONTYPE_HOST as i32;
    let prefetched_type = ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE;
    assert_eq!(attr(prefetched_type, upper, 2 * MIB), host_type);
    assert_eq!(attr(prefetched_type, m, 4 * MIB), invalid);
    acl!(aclrtSynchronizeStream(stream));

    // Several at once.
    let mut attributes = [
        ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
        ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID,
    ];
    let (mut read_mostly, mut prefetch_id) = (9i32, 9i32);
    let mut data: [*mut c_void; 2] = [(&raw mut read_mostly).cast(), (&raw mut prefetch_id).cast()];
    let mut sizes = [4usize, 4];
    acl!(aclrtMemManagedGetAttrs(
        attributes.as_mut_ptr(),
        2,
        lower,
        2 * MIB,
        data.as_mut_ptr(),
        sizes.as_mut_ptr()
    ));
    assert_eq!((read_mostly, prefetch_id), (1, 1));

    // Errors.
    let mut word = 0i32;
    let word_ptr: *mut c_void = (&raw mut word).cast();
    let plain = malloc(64);
    for (attribute, ptr, size, data, data_size, code) in [
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            m,
            4 * MIB,
            word_ptr,
            8,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
            m,
            4 * MIB,
            word_ptr,
            6,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (99, m, 4 * MIB, word_ptr, 4, ACL_ERROR_RT_PARAM_INVALID),
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            m,
            0,
            word_ptr,
            4,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            m,
            8 * MIB,
            word_ptr,
            4,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            plain,
            64,
            word_ptr,
            4,
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        // A NULL data pointer is the ACL layer's refusal, before the range is checked.
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            plain,
            64,
            ptr::null_mut(),
            4,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            m,
            64,
            ptr::null_mut(),
            4,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            ptr::null_mut(),
            64,
            word_ptr,
            4,
            ACL_ERROR_INVALID_PARAM,
        ),
    ] {
        fails!(
            aclrtMemManagedGetAttr(attribute, ptr, size, data, data_size),
            code,
            "aclrtMemManagedGetAttr"
        );
    }
    fails!(
        aclrtMemManagedGetAttrs(
            attributes.as_mut_ptr(),
            0,
            m,
            64,
            data.as_mut_ptr(),
            sizes.as_mut_ptr()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemManagedGetAttrs"
    );
    // Each array NULL in turn, then a NULL range and a NULL entry of data, all 100000.
    for null in 0..4 {
        /// The array's pointer, or NULL for the one under test.
        fn or_null<T>(array: &mut [T], null: bool) -> *mut T {
            if null {
                ptr::null_mut()
            } else {
                array.as_mut_ptr()
            }
        }
        let range = if null == 3 { ptr::null_mut() } else { lower };
        fails!(
            aclrtMemManagedGetAttrs(
                or_null(&mut attributes, null == 0),
                2,
                range,
                2 * MIB,
                or_null(&mut data, null == 1),
                or_null(&mut sizes, null == 2)
            ),
            ACL_ERROR_INVALID_PARAM,
            "aclrtMemManagedGetAttrs"
        );
    }
    data[1] = ptr::null_mut();
    fails!(
        aclrtMemManagedGetAttrs(
            attributes.as_mut_ptr(),
            2,
            lower,
            2 * MIB,
            data.as_mut_ptr(),
            sizes.as_mut_ptr()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemManagedGetAttrs"
    );

    acl!(aclrtFree(m));
    acl!(aclrtFree(plain));
    acl!(aclrtDestroyStream(stream));
}

/// The simulated host is one NUMA node, 0 (HOST_NUMA_CURRENT's): a HOST_NUMA location naming
/// another node is refused by advice (107000) and by prefetches (100000, their code for every
/// refused location), and nothing is recorded; node 0 is accepted, and HOST ignores its id.
#[test]
fn a_numa_location_names_the_hosts_one_node() {
    set_device(0);
    let stream = create_stream();
    let m = alloc_managed(2 * MIB as u64);
    let numa = |id| aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_HOST_NUMA,
        id,
    };
    let two = 2 * MIB as u64;
    let preferred = ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION;
    let prefetched = ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION;
    for id in [1, -1] {
        let code = code!(aclrtMemManagedAdvise(
            m,
            two,
            ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
            numa(id)
        ));
        assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "advice to NUMA node {id}");
        let code = code!(aclrtMemManagedPrefetchAsync(
            m,
            2 * MIB,
            numa(id),
            0,
            stream
        ));
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "prefetch to NUMA node {id}");
        let code = prefetch_batch(&[(m, 2 * MIB)], &[numa(id)], &[0], 0, stream);
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "batch to NUMA node {id}");
    }
    let _ = recent_message();
    assert_eq!(attr(preferred, m, 2 * MIB), -2);
    assert_eq!(attr(prefetched, m, 2 * MIB), -2);

    acl!(aclrtMemManagedAdvise(
        m,
        two,
        ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
        numa(0)
    ));
    assert_eq!(attr(preferred, m, 2 * MIB), 0);
    assert_eq!(
        attr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, m, 2 * MIB),
        ACL_MEM_LOCATIONTYPE_HOST_NUMA as i32
    );
    let host = aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_HOST,
        id: 9,
    };
    acl!(aclrtMemManagedPrefetchAsync(m, 2 * MIB, host, 0, stream));
    assert_eq!(attr(prefetched, m, 2 * MIB), -1);
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtFree(m));
    acl!(aclrtDestroyStream(stream));
}

/// aclrtMemManagedGetAttrs checks every attribute, output and dataSize before writing any: a
/// query refused for its second attribute leaves the first one's output as it was.
#[test]
fn a_refused_attribute_query_writes_nothing() {
    set_device(0);
    let m = alloc_managed(2 * MIB as u64);
    let mut attributes = [
        ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
        ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
    ];
    let (mut read_mostly, mut accessed_by) = (9i32, [9i32; 2]);
    let mut data: [*mut c_void; 2] = [
        (&raw mut read_mostly).cast(),
        accessed_by.as_mut_ptr().cast(),
    ];
    let query = |attributes: &mut [aclrtMemManagedRangeAttribute; 2],
                 data: &mut [*mut c_void; 2],
                 sizes: &mut [usize; 2]| {
        code!(aclrtMemManagedGetAttrs(
            attributes.as_mut_ptr(),
            2,
            m,
            2 * MIB,
            data.as_mut_ptr(),
            sizes.as_mut_ptr()
        ))
    };
    // A dataSize, an attribute and an output refused in turn.
    let code = query(&mut attributes, &mut data, &mut [4, 6]);
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
    attributes[1] = 42;
    let code = query(&mut attributes, &mut data, &mut [4, 8]);
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
    attributes[1] = ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY;
    let kept = data[1];
    data[1] = ptr::null_mut();
    let code = query(&mut attributes, &mut data, &mut [4, 8]);
    assert_eq!(code, ACL_ERROR_INVALID_PARAM);
    let _ = recent_message();
    assert_eq!((read_mostly, accessed_by), (9, [9, 9]));
    data[1] = kept;
    assert_eq!(query(&mut attributes, &mut data, &mut [4, 8]), 0);
    assert_eq!((read_mostly, accessed_by), (0, [-2, -2]));
    acl!(aclrtFree(m));
}
