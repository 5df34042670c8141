//! aclrtReduceAsync through the exported C ABI: SUM, MAX and MIN of every data type an Atlas
//! A2 reduces, in stream order, and every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{Case, case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const SUM: aclrtReduceKind = ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM;
const MAX: aclrtReduceKind = ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX;
const MIN: aclrtReduceKind = ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN;

/// Reduces `src` into `dst` on a device of its own thread's stream; returns the result.
fn reduced<T: Copy + Default>(
    dst: &[T],
    src: &[T],
    kind: aclrtReduceKind,
    data_type: aclDataType,
) -> Vec<T> {
    let bytes = std::mem::size_of_val(dst);
    let (d, s) = (malloc(bytes), malloc(bytes));
    let stream = create_stream();
    upload(d, dst);
    upload(s, src);
    acl!(aclrtReduceAsync(
        d,
        s,
        bytes as u64,
        kind,
        data_type,
        stream,
        ptr::null_mut()
    ));
    acl!(aclrtSynchronizeStream(stream));
    let out = download(d, dst.len());
    assert_eq!(download::<T>(s, src.len()).len(), src.len());
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(d));
    acl!(aclrtFree(s));
    out
}

/// IEEE half precision of small exact values (sign, exponent, 10-bit mantissa by hand).
fn half(value: f32) -> u16 {
    let table = [
        (0.25f32, 0x3400u16),
        (1.0, 0x3c00),
        (1.5, 0x3e00),
        (2.0, 0x4000),
        (3.5, 0x4300),
        (-4.0, 0xc400),
    ];
    table
        .iter()
        .find(|(v, _)| *v == value)
        .map(|&(_, h)| h)
        .unwrap()
}

#[test]
fn every_type_reduces_elementwise() {
    set_device(0);
    assert_eq!(
        reduced(&[1.5f32, -2.0, 8.0], &[2.0, 0.5, -8.0], SUM, ACL_FLOAT),
        [3.5, -1.5, 0.0]
    );
    assert_eq!(
        reduced(&[5i32, -7, 0], &[3, -2, 0], MAX, ACL_INT32),
        [5, -2, 0]
    );
    assert_eq!(reduced(&[5i16, -7], &[3, -2], MIN, ACL_INT16), [3, -7]);
    assert_eq!(
        reduced(&[100i8, -128], &[28, -1], SUM, ACL_INT8),
        [-128, 127],
        "integers wrap"
    );
    assert_eq!(
        reduced(
            &[half(1.5), half(-4.0)],
            &[half(2.0), half(0.25)],
            SUM,
            ACL_FLOAT16
        ),
        [half(3.5), 0xc380],
        "-4 + 0.25 = -3.75"
    );
    // bfloat16 is the top half of an f32: 1.5 = 0x3fc0, 2.0 = 0x4000.
    assert_eq!(
        reduced(&[0x3fc0u16, 0x4000], &[0x4000, 0x3fc0], MIN, ACL_BF16),
        [0x3fc0, 0x3fc0]
    );
    acl!(aclrtResetDevice(0));
}

#[test]
fn a_reduction_keeps_stream_order_and_may_reduce_a_range_into_itself() {
    set_device(0);
    let stream = create_stream();
    let (d, s) = (malloc(16), malloc(16));
    let host = malloc_host(16);
    // SAFETY: 16 bytes of pinned memory.
    unsafe {
        host.cast::<f32>()
            .copy_from([1.0f32, 2.0, 3.0, 4.0].as_ptr(), 4)
    };
    h2d_async(s, host, 16, stream);
    acl!(aclrtMemsetAsync(d, 16, 0, 16, stream));
    acl!(aclrtReduceAsync(
        d,
        s,
        16,
        SUM,
        ACL_FLOAT,
        stream,
        ptr::null_mut()
    ));
    acl!(aclrtReduceAsync(
        d,
        d,
        16,
        SUM,
        ACL_FLOAT,
        stream,
        ptr::null_mut()
    ));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<f32>(d, 4), [2.0, 4.0, 6.0, 8.0]);
    acl!(aclrtReduceAsync(
        d,
        s,
        0,
        SUM,
        ACL_FLOAT,
        stream,
        ptr::null_mut()
    ));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(d));
    acl!(aclrtFree(s));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtResetDevice(0));
}

/// Device memory of the calling thread's device, kept for the process.
fn device_block() -> *mut c_void {
    malloc(64)
}

fn reduce_with(
    dst: *mut c_void,
    src: *const c_void,
    count: u64,
    kind: aclrtReduceKind,
    data_type: aclDataType,
    stream: aclrtStream,
    reserve: *mut c_void,
) -> aclError {
    code!(aclrtReduceAsync(
        dst, src, count, kind, data_type, stream, reserve
    ))
}

const API: &str = "aclrtReduceAsync";

const CASES: &[Case] = &[
    case("NULL dst", API, ACL_ERROR_INVALID_PARAM, 0, || {
        reduce_with(
            ptr::null_mut(),
            device_block(),
            4,
            SUM,
            ACL_FLOAT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    }),
    case("NULL src", API, ACL_ERROR_INVALID_PARAM, 0, || {
        reduce_with(
            device_block(),
            ptr::null(),
            4,
            SUM,
            ACL_FLOAT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    }),
    case("reserve not NULL", API, ACL_ERROR_INVALID_PARAM, 0, || {
        let block = device_block();
        reduce_with(block, block, 4, SUM, ACL_FLOAT, ptr::null_mut(), block)
    }),
    case("unknown kind", API, ACL_ERROR_INVALID_PARAM, 0, || {
        let block = device_block();
        reduce_with(
            block,
            block,
            4,
            9,
            ACL_FLOAT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    }),
    case("EQUAL", API, ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 0, || {
        let block = device_block();
        reduce_with(
            block,
            block,
            4,
            ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL,
            ACL_FLOAT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    }),
    case(
        "int64 on an Atlas A2",
        API,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        0,
        || {
            let block = device_block();
            reduce_with(
                block,
                block,
                8,
                SUM,
                ACL_INT64,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
    ),
    case(
        "part of an element",
        API,
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let block = device_block();
            reduce_with(
                block,
                block,
                6,
                SUM,
                ACL_FLOAT,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
    ),
    case("host memory", API, ACL_ERROR_RT_PARAM_INVALID, 0, || {
        reduce_with(
            pageable(64),
            device_block(),
            4,
            SUM,
            ACL_FLOAT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    }),
    case(
        "past the allocation",
        API,
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let block = device_block();
            reduce_with(
                device_block(),
                block,
                4096,
                SUM,
                ACL_FLOAT,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
    ),
    case(
        "memory of another device",
        API,
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let other = std::thread::spawn(|| {
                set_device(1);
                device_block() as usize
            })
            .join()
            .unwrap() as *mut c_void;
            reduce_with(
                other,
                device_block(),
                4,
                SUM,
                ACL_FLOAT,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
    ),
    case(
        "partial overlap",
        API,
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let block = device_block();
            reduce_with(
                block.wrapping_byte_add(4),
                block,
                8,
                SUM,
                ACL_FLOAT,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
    ),
    case(
        "stream of another device",
        API,
        ACL_ERROR_RT_STREAM_CONTEXT,
        0,
        || {
            let block = device_block();
            reduce_with(
                block,
                block,
                4,
                SUM,
                ACL_FLOAT,
                stream_of_device(1),
                ptr::null_mut(),
            )
        },
    ),
    // The stream is looked up before a kind or type an Atlas A2 does not reduce is refused.
    case(
        "EQUAL on a destroyed stream",
        API,
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let block = device_block();
            let stream = create_stream();
            acl!(aclrtDestroyStream(stream));
            let equal = ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL;
            reduce_with(block, block, 4, equal, ACL_FLOAT, stream, ptr::null_mut())
        },
    ),
    case(
        "int64 on a stream of another device",
        API,
        ACL_ERROR_RT_STREAM_CONTEXT,
        0,
        || {
            let block = device_block();
            let stream = stream_of_device(1);
            reduce_with(block, block, 8, SUM, ACL_INT64, stream, ptr::null_mut())
        },
    ),
    case(
        "EQUAL without a context",
        API,
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || {
            let mut x = 0u64;
            let p = (&raw mut x).cast::<c_void>();
            let equal = ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL;
            reduce_with(p, p, 4, equal, ACL_FLOAT, ptr::null_mut(), ptr::null_mut())
        },
    ),
    case(
        "without a context",
        API,
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || {
            let mut x = 0u64;
            let p = (&raw mut x).cast::<c_void>();
            reduce_with(p, p, 4, SUM, ACL_FLOAT, ptr::null_mut(), ptr::null_mut())
        },
    ),
];

#[test]
fn every_error_path() {
    run_table(CASES);
}
