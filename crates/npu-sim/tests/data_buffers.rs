//! aclDataBuffer through the C ABI: creation, queries, update, destruction and their errors.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn create(data: *mut c_void, size: usize) -> *mut aclDataBuffer {
    let buffer = code!(aclCreateDataBuffer(data, size));
    assert!(!buffer.is_null(), "{}", recent_message());
    buffer
}

#[test]
#[allow(deprecated)]
fn a_data_buffer_describes_memory_until_updated_and_destroyed() {
    set_device(0);
    let dev = malloc(4096);
    let buffer = create(dev, 4096);
    assert_eq!(code!(aclGetDataBufferAddr(buffer)), dev);
    assert_eq!(code!(aclGetDataBufferSizeV2(buffer)), 4096);
    assert_eq!(code!(aclGetDataBufferSize(buffer)), 4096);

    let host = malloc_host(64);
    acl!(aclUpdateDataBuffer(buffer, host, 64));
    assert_eq!(code!(aclGetDataBufferAddr(buffer)), host);
    assert_eq!(code!(aclGetDataBufferSizeV2(buffer)), 64);
    // The memory is the caller's: destroying the buffer leaves it allocated.
    acl!(aclDestroyDataBuffer(buffer));
    acl!(aclrtFree(dev));
    acl!(aclrtFreeHost(host));

    // An empty buffer: no address, no size.
    let empty = create(ptr::null_mut(), 0);
    assert!(code!(aclGetDataBufferAddr(empty)).is_null());
    assert_eq!(code!(aclGetDataBufferSizeV2(empty)), 0);
    acl!(aclDestroyDataBuffer(empty));
}

#[test]
#[allow(deprecated)]
fn every_error_path() {
    run_table(&[
        case(
            "create with NULL data and a size",
            "aclCreateDataBuffer",
            100000,
            -1,
            || {
                assert!(code!(aclCreateDataBuffer(ptr::null_mut(), 8)).is_null());
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case("destroy NULL", "aclDestroyDataBuffer", 100000, -1, || {
            code!(aclDestroyDataBuffer(ptr::null()))
        }),
        case("destroy twice", "aclDestroyDataBuffer", 107017, -1, || {
            let buffer = create(ptr::null_mut(), 0);
            acl!(aclDestroyDataBuffer(buffer));
            code!(aclDestroyDataBuffer(buffer))
        }),
        case(
            "destroy a forged buffer",
            "aclDestroyDataBuffer",
            107017,
            -1,
            || {
                let mut word = 0u64;
                code!(aclDestroyDataBuffer((&raw mut word).cast()))
            },
        ),
        case("update NULL", "aclUpdateDataBuffer", 100000, -1, || {
            code!(aclUpdateDataBuffer(ptr::null_mut(), ptr::null_mut(), 0))
        }),
        case(
            "update to NULL data with a size",
            "aclUpdateDataBuffer",
            100000,
            -1,
            || {
                let mut word = 0u64;
                let buffer = create((&raw mut word).cast(), 8);
                let code = code!(aclUpdateDataBuffer(buffer, ptr::null_mut(), 8));
                // The buffer is unchanged (the getters' successes leave the last error).
                assert_eq!(code!(aclGetDataBufferSizeV2(buffer)), 8);
                assert_eq!(
                    code!(aclGetDataBufferAddr(buffer)),
                    (&raw mut word).cast::<c_void>()
                );
                code
            },
        ),
        case(
            "update a destroyed buffer",
            "aclUpdateDataBuffer",
            107017,
            -1,
            || {
                let buffer = create(ptr::null_mut(), 0);
                acl!(aclDestroyDataBuffer(buffer));
                code!(aclUpdateDataBuffer(buffer, ptr::null_mut(), 0))
            },
        ),
        case(
            "update a destroyed buffer to NULL data with a size: the pointer is checked first",
            "aclUpdateDataBuffer",
            100000,
            -1,
            || {
                let buffer = create(ptr::null_mut(), 0);
                acl!(aclDestroyDataBuffer(buffer));
                code!(aclUpdateDataBuffer(buffer, ptr::null_mut(), 8))
            },
        ),
        case(
            "address of NULL",
            "aclGetDataBufferAddr",
            100000,
            -1,
            || {
                assert!(code!(aclGetDataBufferAddr(ptr::null())).is_null());
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case(
            "address of a destroyed buffer",
            "aclGetDataBufferAddr",
            107017,
            -1,
            || {
                let mut word = 0u64;
                let buffer = create((&raw mut word).cast(), 8);
                acl!(aclDestroyDataBuffer(buffer));
                assert!(code!(aclGetDataBufferAddr(buffer)).is_null());
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case("size of NULL", "aclGetDataBufferSizeV2", 100000, -1, || {
            assert_eq!(code!(aclGetDataBufferSizeV2(ptr::null())), 0);
            // SAFETY: no preconditions.
            unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
        }),
        case(
            "deprecated size of NULL",
            "aclGetDataBufferSize",
            100000,
            -1,
            || {
                assert_eq!(code!(aclGetDataBufferSize(ptr::null())), 0);
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case(
            "deprecated size of a destroyed buffer",
            "aclGetDataBufferSize",
            107017,
            -1,
            || {
                let mut word = 0u64;
                let buffer = create((&raw mut word).cast(), 8);
                acl!(aclDestroyDataBuffer(buffer));
                assert_eq!(code!(aclGetDataBufferSize(buffer)), 0);
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case(
            "size of a destroyed buffer",
            "aclGetDataBufferSizeV2",
            107017,
            -1,
            || {
                let buffer = create(ptr::null_mut(), 0);
                acl!(aclDestroyDataBuffer(buffer));
                assert_eq!(code!(aclGetDataBufferSizeV2(buffer)), 0);
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
        case(
            "deprecated size above 4 GiB",
            "aclGetDataBufferSize",
            100000,
            -1,
            || {
                // Only described, never touched.
                let buffer = create(ptr::dangling_mut(), 1 << 33);
                assert_eq!(code!(aclGetDataBufferSize(buffer)), 0);
                // SAFETY: no preconditions.
                unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
            },
        ),
    ]);
}
