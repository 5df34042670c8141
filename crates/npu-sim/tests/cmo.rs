//! Cache maintenance operations through the C ABI: prefetches (direct and through a descriptor
//! in device memory) are stream tasks in stream order that leave memory as it was; the types
//! and barrier forms an Atlas A2 lacks are refused; every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

fn query(stream: aclrtStream) -> aclrtStreamStatus {
    let mut status = ACL_STREAM_STATUS_RESERVED;
    acl!(aclrtStreamQuery(stream, &mut status));
    status
}

/// A barrier prefetch (unsupported on an Atlas A2) of 64 bytes at `src` on `stream`.
fn barrier(src: *mut std::ffi::c_void, stream: aclrtStream) -> aclError {
    code!(aclrtCmoAsyncWithBarrier(
        src,
        64,
        ACL_RT_CMO_TYPE_PREFETCH,
        1,
        stream
    ))
}

/// A wait for barrier 0 (unsupported on an Atlas A2) on `stream`.
fn wait_barrier(stream: aclrtStream) -> aclError {
    // SAFETY: plain integers.
    let mut info: aclrtBarrierTaskInfo = unsafe { std::mem::zeroed() };
    code!(aclrtCmoWaitBarrier(&mut info, stream, 0))
}

fn desc_size() -> usize {
    let mut size = 0;
    acl!(aclrtCmoGetDescSize(&mut size));
    size
}

#[test]
fn prefetches_are_ordered_stream_tasks_that_change_nothing() {
    set_device(0);
    let stream = create_stream();
    let dev = malloc(4096);
    upload(dev, &[9u8; 4096]);
    assert_eq!(desc_size(), 16);
    let desc = malloc(desc_size());
    acl!(aclrtCmoSetDesc(desc, dev.wrapping_byte_add(1024), 2048));
    // The descriptor records the address and the size, as two 64-bit words.
    let recorded = download::<u64>(desc, 2);
    assert_eq!(recorded, [dev as u64 + 1024, 2048]);

    control::hold(0).unwrap();
    acl!(aclrtCmoAsync(dev, 4096, ACL_RT_CMO_TYPE_PREFETCH, stream));
    acl!(aclrtCmoAsyncWithDesc(
        desc,
        ACL_RT_CMO_TYPE_PREFETCH,
        stream,
        ptr::null()
    ));
    assert_eq!(
        query(stream),
        ACL_STREAM_STATUS_NOT_READY,
        "queued, held with the device"
    );
    control::release(0).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(query(stream), ACL_STREAM_STATUS_COMPLETE);
    assert_eq!(download::<u8>(dev, 4096), vec![9; 4096]);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(desc));
    acl!(aclrtFree(dev));
}

#[test]
fn every_error_path() {
    fn cmo(src: *mut c_void, size: usize, cmo_type: aclrtCmoType) -> aclError {
        code!(aclrtCmoAsync(src, size, cmo_type, ptr::null_mut()))
    }
    fn with_desc(desc: *mut c_void, cmo_type: aclrtCmoType, reserve: *const c_void) -> aclError {
        code!(aclrtCmoAsyncWithDesc(
            desc,
            cmo_type,
            ptr::null_mut(),
            reserve
        ))
    }
    const PREFETCH: aclrtCmoType = ACL_RT_CMO_TYPE_PREFETCH;
    run_table(&[
        case("NULL src", "aclrtCmoAsync", 100000, 0, || {
            cmo(ptr::null_mut(), 64, PREFETCH)
        }),
        case("size 0", "aclrtCmoAsync", 100000, 0, || {
            cmo(malloc(64), 0, PREFETCH)
        }),
        // Pointers and sizes are checked before the stream is looked up.
        case(
            "NULL src on a destroyed stream",
            "aclrtCmoAsync",
            100000,
            0,
            || {
                let stream = destroyed_stream();
                code!(aclrtCmoAsync(ptr::null_mut(), 64, PREFETCH, stream))
            },
        ),
        case(
            "size 0 on a destroyed stream",
            "aclrtCmoAsync",
            100000,
            0,
            || {
                let stream = destroyed_stream();
                code!(aclrtCmoAsync(malloc(64), 0, PREFETCH, stream))
            },
        ),
        case("unknown type", "aclrtCmoAsync", 107000, 0, || {
            cmo(malloc(64), 64, 9)
        }),
        case("host memory", "aclrtCmoAsync", 107000, 0, || {
            cmo(malloc_host(64), 64, PREFETCH)
        }),
        case("past the allocation", "aclrtCmoAsync", 107000, 0, || {
            cmo(malloc(64), 4096, PREFETCH)
        }),
        case(
            "another device's memory",
            "aclrtCmoAsync",
            107000,
            1,
            || cmo(malloc_on(0, 64), 64, PREFETCH),
        ),
        case("writeback on A2", "aclrtCmoAsync", 207000, 0, || {
            cmo(malloc(64), 64, ACL_RT_CMO_TYPE_WRITEBACK)
        }),
        case("invalidate on A2", "aclrtCmoAsync", 207000, 0, || {
            cmo(malloc(64), 64, ACL_RT_CMO_TYPE_INVALID)
        }),
        case("flush on A2", "aclrtCmoAsync", 207000, 0, || {
            cmo(malloc(64), 64, ACL_RT_CMO_TYPE_FLUSH)
        }),
        case("no context", "aclrtCmoAsync", 107002, -1, || {
            let mut word = 0u64;
            cmo((&raw mut word).cast(), 8, PREFETCH)
        }),
        case(
            "barrier on A2",
            "aclrtCmoAsyncWithBarrier",
            207000,
            0,
            || {
                let invalid = ACL_RT_CMO_TYPE_INVALID;
                code!(aclrtCmoAsyncWithBarrier(
                    malloc(64),
                    64,
                    invalid,
                    1,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "wait barrier on A2",
            "aclrtCmoWaitBarrier",
            207000,
            0,
            || {
                // SAFETY: plain integers.
                let mut info: aclrtBarrierTaskInfo = unsafe { std::mem::zeroed() };
                code!(aclrtCmoWaitBarrier(&mut info, ptr::null_mut(), 0))
            },
        ),
        case(
            "barrier on NULL src",
            "aclrtCmoAsyncWithBarrier",
            100000,
            0,
            || {
                let invalid = ACL_RT_CMO_TYPE_INVALID;
                code!(aclrtCmoAsyncWithBarrier(
                    ptr::null_mut(),
                    64,
                    invalid,
                    1,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "wait barrier on NULL info",
            "aclrtCmoWaitBarrier",
            100000,
            0,
            || code!(aclrtCmoWaitBarrier(ptr::null_mut(), ptr::null_mut(), 0)),
        ),
        // The barrier forms look their stream up, as every stream-taking call does, before
        // refusing the feature; a NULL pointer comes before the lookup.
        case(
            "barrier on a destroyed stream",
            "aclrtCmoAsyncWithBarrier",
            107017,
            0,
            || barrier(malloc(64), destroyed_stream()),
        ),
        case(
            "barrier on another context's stream",
            "aclrtCmoAsyncWithBarrier",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                barrier(malloc(64), stream)
            },
        ),
        case(
            "barrier without a context",
            "aclrtCmoAsyncWithBarrier",
            107002,
            -1,
            || {
                let mut word = 0u64;
                barrier((&raw mut word).cast(), ptr::null_mut())
            },
        ),
        case(
            "barrier on NULL src and a destroyed stream",
            "aclrtCmoAsyncWithBarrier",
            100000,
            0,
            || barrier(ptr::null_mut(), destroyed_stream()),
        ),
        case(
            "wait barrier on a destroyed stream",
            "aclrtCmoWaitBarrier",
            107017,
            0,
            || wait_barrier(destroyed_stream()),
        ),
        case(
            "wait barrier on another context's stream",
            "aclrtCmoWaitBarrier",
            107003,
            1,
            || {
                let stream = create_stream();
                set_device(0);
                wait_barrier(stream)
            },
        ),
        case(
            "wait barrier without a context",
            "aclrtCmoWaitBarrier",
            107002,
            -1,
            || wait_barrier(ptr::null_mut()),
        ),
        case(
            "wait barrier on NULL info and a destroyed stream",
            "aclrtCmoWaitBarrier",
            100000,
            0,
            || code!(aclrtCmoWaitBarrier(ptr::null_mut(), destroyed_stream(), 0)),
        ),
        case(
            "desc size into NULL",
            "aclrtCmoGetDescSize",
            100000,
            0,
            || code!(aclrtCmoGetDescSize(ptr::null_mut())),
        ),
        case("set NULL desc", "aclrtCmoSetDesc", 100000, 0, || {
            code!(aclrtCmoSetDesc(ptr::null_mut(), malloc(64), 64))
        }),
        case("set NULL src", "aclrtCmoSetDesc", 100000, 0, || {
            code!(aclrtCmoSetDesc(malloc(16), ptr::null_mut(), 64))
        }),
        case("set size 0", "aclrtCmoSetDesc", 100000, 0, || {
            code!(aclrtCmoSetDesc(malloc(16), malloc(64), 0))
        }),
        case("desc in host memory", "aclrtCmoSetDesc", 107000, 0, || {
            code!(aclrtCmoSetDesc(malloc_host(16), malloc(64), 64))
        }),
        case("desc too small", "aclrtCmoSetDesc", 107000, 0, || {
            // aclrtMalloc rounds 8 bytes up to 64 with its padding: use the allocation's end.
            let dev = malloc(8);
            let mut base = ptr::null_mut();
            let mut size = 0;
            acl!(aclrtMemGetAddressRange(dev, &mut base, &mut size));
            let last = base.wrapping_byte_add(size - 8);
            code!(aclrtCmoSetDesc(last, malloc(64), 64))
        }),
        case(
            "src of another device",
            "aclrtCmoSetDesc",
            107000,
            1,
            || code!(aclrtCmoSetDesc(malloc(16), malloc_on(0, 64), 64)),
        ),
        case("with NULL desc", "aclrtCmoAsyncWithDesc", 100000, 0, || {
            with_desc(ptr::null_mut(), PREFETCH, ptr::null())
        }),
        case(
            "with NULL desc on a destroyed stream",
            "aclrtCmoAsyncWithDesc",
            100000,
            0,
            || {
                let stream = destroyed_stream();
                code!(aclrtCmoAsyncWithDesc(
                    ptr::null_mut(),
                    PREFETCH,
                    stream,
                    ptr::null()
                ))
            },
        ),
        case(
            "with reserve on a destroyed stream",
            "aclrtCmoAsyncWithDesc",
            100000,
            0,
            || {
                let stream = destroyed_stream();
                let reserve = 0u8;
                code!(aclrtCmoAsyncWithDesc(
                    malloc(16),
                    PREFETCH,
                    stream,
                    (&raw const reserve).cast()
                ))
            },
        ),
        case("with reserve", "aclrtCmoAsyncWithDesc", 100000, 0, || {
            let reserve = 0u8;
            with_desc(malloc(16), PREFETCH, (&raw const reserve).cast())
        }),
        case(
            "with flush on A2",
            "aclrtCmoAsyncWithDesc",
            207000,
            0,
            || with_desc(malloc(16), ACL_RT_CMO_TYPE_FLUSH, ptr::null()),
        ),
        case(
            "with a host desc",
            "aclrtCmoAsyncWithDesc",
            107000,
            0,
            || with_desc(malloc_host(16), PREFETCH, ptr::null()),
        ),
        case(
            "L2 flush with rsv",
            "aclrtDeviceL2CacheFlush",
            100000,
            0,
            || {
                let rsv = 0u8;
                code!(aclrtDeviceL2CacheFlush((&raw const rsv).cast_mut().cast()))
            },
        ),
        case(
            "L2 flush without a context",
            "aclrtDeviceL2CacheFlush",
            107002,
            -1,
            || code!(aclrtDeviceL2CacheFlush(ptr::null_mut())),
        ),
    ]);
}

#[test]
fn an_l2_flush_of_the_current_device_succeeds_and_changes_no_memory() {
    set_device(0);
    let dev = malloc(64);
    acl!(aclrtMemset(dev, 64, 7, 64));
    acl!(aclrtDeviceL2CacheFlush(ptr::null_mut()));
    assert_eq!(download::<u8>(dev, 64), vec![7; 64]);
    acl!(aclrtFree(dev));
}
