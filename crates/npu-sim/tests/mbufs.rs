//! Shared buffers (aclrtMbuf) through the C ABI: CANN reserves them and does not support them
//! yet, so each function refuses a NULL pointer argument with 100000 and everything else with
//! 207000, writing nothing.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use npu_sim::abi::*;
use npu_sys::*;

/// A handle no allocation made: the functions must refuse it without reading it.
fn forged() -> aclrtMbuf {
    ptr::dangling_mut::<u64>().cast()
}

#[test]
fn allocation_is_refused_and_writes_nothing() {
    let mut buf = forged();
    assert_eq!(code!(aclrtAllocBuf(&mut buf, 64)), 207000);
    assert_eq!(buf, forged(), "a refused allocation wrote its out-pointer");

    let (mut data, mut size) = (ptr::null_mut::<c_void>(), 7usize);
    assert_eq!(
        code!(aclrtGetBufData(forged(), &mut data, &mut size)),
        207000
    );
    assert!(data.is_null());
    assert_eq!(size, 7);
}

#[test]
fn every_error_path() {
    run_table(&[
        case("allocate into NULL", "aclrtAllocBuf", 100000, -1, || {
            code!(aclrtAllocBuf(ptr::null_mut(), 64))
        }),
        case("allocate", "aclrtAllocBuf", 207000, 0, || {
            let mut buf = ptr::null_mut();
            code!(aclrtAllocBuf(&mut buf, 64))
        }),
        case("free NULL", "aclrtFreeBuf", 100000, -1, || {
            code!(aclrtFreeBuf(ptr::null_mut()))
        }),
        case("free", "aclrtFreeBuf", 207000, 0, || {
            code!(aclrtFreeBuf(forged()))
        }),
        case("data of NULL", "aclrtGetBufData", 100000, -1, || {
            let (mut data, mut size) = (ptr::null_mut(), 0);
            code!(aclrtGetBufData(ptr::null_mut(), &mut data, &mut size))
        }),
        case("data into NULL", "aclrtGetBufData", 100000, -1, || {
            let mut size = 0;
            code!(aclrtGetBufData(forged(), ptr::null_mut(), &mut size))
        }),
        case("data size into NULL", "aclrtGetBufData", 100000, -1, || {
            let mut data = ptr::null_mut();
            code!(aclrtGetBufData(forged(), &mut data, ptr::null_mut()))
        }),
        case("data", "aclrtGetBufData", 207000, 0, || {
            let (mut data, mut size) = (ptr::null_mut(), 0);
            code!(aclrtGetBufData(forged(), &mut data, &mut size))
        }),
        case(
            "set user data of NULL",
            "aclrtSetBufUserData",
            100000,
            -1,
            || {
                let word = 0u64;
                code!(aclrtSetBufUserData(
                    ptr::null_mut(),
                    (&raw const word).cast(),
                    8,
                    0
                ))
            },
        ),
        case(
            "set user data from NULL",
            "aclrtSetBufUserData",
            100000,
            -1,
            || code!(aclrtSetBufUserData(forged(), ptr::null(), 8, 0)),
        ),
        case("set user data", "aclrtSetBufUserData", 207000, 0, || {
            let word = 0u64;
            code!(aclrtSetBufUserData(
                forged(),
                (&raw const word).cast(),
                8,
                0
            ))
        }),
        case(
            "get user data of NULL",
            "aclrtGetBufUserData",
            100000,
            -1,
            || {
                let mut word = 0u64;
                code!(aclrtGetBufUserData(
                    ptr::null_mut(),
                    (&raw mut word).cast(),
                    8,
                    0
                ))
            },
        ),
        case(
            "get user data into NULL",
            "aclrtGetBufUserData",
            100000,
            -1,
            || code!(aclrtGetBufUserData(forged(), ptr::null_mut(), 8, 0)),
        ),
        case("get user data", "aclrtGetBufUserData", 207000, 0, || {
            let mut word = 0u64;
            code!(aclrtGetBufUserData(forged(), (&raw mut word).cast(), 8, 0))
        }),
        case(
            "data length of NULL",
            "aclrtGetBufDataLen",
            100000,
            -1,
            || {
                let mut len = 0;
                code!(aclrtGetBufDataLen(ptr::null_mut(), &mut len))
            },
        ),
        case(
            "data length into NULL",
            "aclrtGetBufDataLen",
            100000,
            -1,
            || code!(aclrtGetBufDataLen(forged(), ptr::null_mut())),
        ),
        case("data length", "aclrtGetBufDataLen", 207000, 0, || {
            let mut len = 0;
            code!(aclrtGetBufDataLen(forged(), &mut len))
        }),
        case(
            "set data length of NULL",
            "aclrtSetBufDataLen",
            100000,
            -1,
            || code!(aclrtSetBufDataLen(ptr::null_mut(), 8)),
        ),
        case("set data length", "aclrtSetBufDataLen", 207000, 0, || {
            code!(aclrtSetBufDataLen(forged(), 8))
        }),
        case(
            "reference copy of NULL",
            "aclrtCopyBufRef",
            100000,
            -1,
            || {
                let mut copy = ptr::null_mut();
                code!(aclrtCopyBufRef(ptr::null_mut(), &mut copy))
            },
        ),
        case(
            "reference copy into NULL",
            "aclrtCopyBufRef",
            100000,
            -1,
            || code!(aclrtCopyBufRef(forged(), ptr::null_mut())),
        ),
        case("reference copy", "aclrtCopyBufRef", 207000, 0, || {
            let mut copy = ptr::null_mut();
            code!(aclrtCopyBufRef(forged(), &mut copy))
        }),
        case("append to NULL", "aclrtAppendBufChain", 100000, -1, || {
            code!(aclrtAppendBufChain(ptr::null_mut(), forged()))
        }),
        case("append NULL", "aclrtAppendBufChain", 100000, -1, || {
            code!(aclrtAppendBufChain(forged(), ptr::null_mut()))
        }),
        case("append", "aclrtAppendBufChain", 207000, 0, || {
            code!(aclrtAppendBufChain(forged(), forged()))
        }),
        case(
            "chain entry of NULL",
            "aclrtGetBufFromChain",
            100000,
            -1,
            || {
                let mut buf = ptr::null_mut();
                code!(aclrtGetBufFromChain(ptr::null_mut(), 0, &mut buf))
            },
        ),
        case(
            "chain entry into NULL",
            "aclrtGetBufFromChain",
            100000,
            -1,
            || code!(aclrtGetBufFromChain(forged(), 0, ptr::null_mut())),
        ),
        case("chain entry", "aclrtGetBufFromChain", 207000, 0, || {
            let mut buf = ptr::null_mut();
            code!(aclrtGetBufFromChain(forged(), 0, &mut buf))
        }),
        case(
            "chain length of NULL",
            "aclrtGetBufChainNum",
            100000,
            -1,
            || {
                let mut num = 0;
                code!(aclrtGetBufChainNum(ptr::null_mut(), &mut num))
            },
        ),
        case(
            "chain length into NULL",
            "aclrtGetBufChainNum",
            100000,
            -1,
            || code!(aclrtGetBufChainNum(forged(), ptr::null_mut())),
        ),
        case("chain length", "aclrtGetBufChainNum", 207000, 0, || {
            let mut num = 0;
            code!(aclrtGetBufChainNum(forged(), &mut num))
        }),
    ]);
}
