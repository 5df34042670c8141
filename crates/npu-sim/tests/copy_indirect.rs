//! Copies whose addresses the device reads when they run, through the C ABI: a memcpy
//! descriptor in device memory and base pointers held in device memory, read at run time (a
//! descriptor rewritten while the copy is queued is the one used), a DMA fault for addresses
//! that are not the device's, and every error path.

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

const INNER: aclrtMemcpyKind = ACL_MEMCPY_INNER_DEVICE_TO_DEVICE;

fn desc_size() -> usize {
    let mut size = 0;
    acl!(aclrtGetMemcpyDescSize(INNER, &mut size));
    size
}

fn set_desc(desc: *mut c_void, src: *mut c_void, dst: *mut c_void, count: usize) -> aclError {
    code!(aclrtSetMemcpyDesc(
        desc,
        INNER,
        src,
        dst,
        count,
        ptr::null_mut()
    ))
}

#[test]
fn a_descriptor_is_read_when_the_copy_runs() {
    set_device(0);
    let stream = create_stream();
    let (src, first, second) = (malloc(256), malloc(256), malloc(256));
    upload(src, &[5u8; 256]);
    assert_eq!(desc_size(), 32);
    let desc = malloc(desc_size());
    assert_eq!(set_desc(desc, src, first, 256), 0);
    let words = download::<u64>(desc, 4);
    assert_eq!(words, [src as u64, first as u64, 256, 0]);

    control::hold(0).unwrap();
    acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    // Rewritten while the copy waits: the copy uses what the descriptor says when it runs.
    assert_eq!(set_desc(desc, src.wrapping_byte_add(128), second, 64), 0);
    control::release(0).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(first, 256), vec![0; 256]);
    let copied = download::<u8>(second, 256);
    assert_eq!(
        (&copied[..64], &copied[64..]),
        (&[5u8; 64][..], &[0u8; 192][..])
    );
    acl!(aclrtDestroyStream(stream));
    for ptr in [src, first, second, desc] {
        acl!(aclrtFree(ptr));
    }
}

#[test]
fn base_pointers_in_device_memory_plus_offsets() {
    set_device(1);
    let stream = create_stream();
    let (src, dst) = (malloc(128), malloc(128));
    let pattern: Vec<u8> = (0..128).collect();
    upload(src, &pattern);
    let bases = malloc(16);
    upload(bases, &[dst as u64, src as u64]);
    let (dst_slot, src_slot) = (
        bases.cast::<*mut c_void>(),
        bases.wrapping_byte_add(8).cast(),
    );
    acl!(aclrtMemcpyAsyncWithOffset(
        dst_slot, 100, 16, src_slot, 32, 8, INNER, stream
    ));
    acl!(aclrtSynchronizeStream(stream));
    let copied = download::<u8>(dst, 128);
    assert_eq!(&copied[16..48], &pattern[8..40]);
    assert!(copied[..16].iter().chain(&copied[48..]).all(|&b| b == 0));
    acl!(aclrtDestroyStream(stream));
    for ptr in [src, dst, bases] {
        acl!(aclrtFree(ptr));
    }
}

#[test]
fn addresses_that_are_not_the_devices_fault_the_copy() {
    set_device(0);
    let stream = create_stream();
    let (dev, desc) = (malloc(64), malloc(32));
    let host = malloc_host(64);
    // Written as raw words (aclrtSetMemcpyDesc refuses host memory): a host destination.
    upload(desc, &[dev as u64, host as u64, 64, 0]);
    acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    assert_eq!(code!(aclrtSynchronizeStream(stream)), ACL_ERROR_RT_SYS_DMA);
    assert!(recent_message().contains("not device memory of device 0"));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFreeHost(host));
}

#[test]
fn every_error_path() {
    run_table(&[
        case(
            "desc size into NULL",
            "aclrtGetMemcpyDescSize",
            100000,
            0,
            || code!(aclrtGetMemcpyDescSize(INNER, ptr::null_mut())),
        ),
        case(
            "desc size of D2D",
            "aclrtGetMemcpyDescSize",
            207000,
            0,
            || {
                let mut size = 0;
                code!(aclrtGetMemcpyDescSize(
                    ACL_MEMCPY_DEVICE_TO_DEVICE,
                    &mut size
                ))
            },
        ),
        // A value that is no aclrtMemcpyKind is a parameter error (100000), as for every
        // other copy; a kind these copies do not support is a missing feature (207000).
        case(
            "desc size of kind 9",
            "aclrtGetMemcpyDescSize",
            100000,
            0,
            || {
                let mut size = 0;
                code!(aclrtGetMemcpyDescSize(9, &mut size))
            },
        ),
        // NULL pointers come before the kind: 100000 where a valid pointer gets the kind's code.
        case(
            "desc size of a host-to-device kind into NULL",
            "aclrtGetMemcpyDescSize",
            100000,
            0,
            || {
                let kind = ACL_MEMCPY_HOST_TO_DEVICE;
                code!(aclrtGetMemcpyDescSize(kind, ptr::null_mut()))
            },
        ),
        case("set kind 9", "aclrtSetMemcpyDesc", 100000, 0, || {
            let (desc, src, dst) = (malloc(32), malloc(8), malloc(8));
            code!(aclrtSetMemcpyDesc(desc, 9, src, dst, 8, ptr::null_mut()))
        }),
        case(
            "set NULL dst with a host-to-device kind",
            "aclrtSetMemcpyDesc",
            100000,
            0,
            || {
                let (desc, src) = (malloc(32), malloc(8));
                let kind = ACL_MEMCPY_HOST_TO_DEVICE;
                code!(aclrtSetMemcpyDesc(
                    desc,
                    kind,
                    src,
                    ptr::null_mut(),
                    8,
                    ptr::null_mut()
                ))
            },
        ),
        case("set NULL desc", "aclrtSetMemcpyDesc", 100000, 0, || {
            set_desc(ptr::null_mut(), malloc(8), malloc(8), 8)
        }),
        case("set NULL src", "aclrtSetMemcpyDesc", 100000, 0, || {
            set_desc(malloc(32), ptr::null_mut(), malloc(8), 8)
        }),
        case("set config", "aclrtSetMemcpyDesc", 100000, 0, || {
            let mut config = 0u8;
            let (desc, src, dst) = (malloc(32), malloc(8), malloc(8));
            let config = (&raw mut config).cast();
            code!(aclrtSetMemcpyDesc(desc, INNER, src, dst, 8, config))
        }),
        case(
            "set host-to-device kind",
            "aclrtSetMemcpyDesc",
            207000,
            0,
            || {
                let (desc, src, dst) = (malloc(32), malloc(8), malloc(8));
                let kind = ACL_MEMCPY_HOST_TO_DEVICE;
                code!(aclrtSetMemcpyDesc(desc, kind, src, dst, 8, ptr::null_mut()))
            },
        ),
        case("set a host desc", "aclrtSetMemcpyDesc", 107000, 0, || {
            set_desc(malloc_host(32), malloc(8), malloc(8), 8)
        }),
        case(
            "set past the source",
            "aclrtSetMemcpyDesc",
            107000,
            0,
            || set_desc(malloc(32), malloc(8), malloc(4096), 4096),
        ),
        case(
            "set a source of another device",
            "aclrtSetMemcpyDesc",
            107000,
            1,
            || set_desc(malloc(32), malloc_on(0, 8), malloc(8), 8),
        ),
        case(
            "with NULL desc",
            "aclrtMemcpyAsyncWithDesc",
            100000,
            0,
            || {
                code!(aclrtMemcpyAsyncWithDesc(
                    ptr::null_mut(),
                    INNER,
                    ptr::null_mut()
                ))
            },
        ),
        case("with kind 9", "aclrtMemcpyAsyncWithDesc", 100000, 0, || {
            code!(aclrtMemcpyAsyncWithDesc(malloc(32), 9, ptr::null_mut()))
        }),
        case(
            "with a desc too small",
            "aclrtMemcpyAsyncWithDesc",
            107000,
            0,
            || {
                // 8 bytes at the end of a 64-byte allocation (aclrtMalloc's padding included).
                let dev = malloc(8);
                let end = dev.wrapping_byte_add(56);
                code!(aclrtMemcpyAsyncWithDesc(end, INNER, ptr::null_mut()))
            },
        ),
        case(
            "with a desc of another device",
            "aclrtMemcpyAsyncWithDesc",
            107000,
            1,
            || {
                code!(aclrtMemcpyAsyncWithDesc(
                    malloc_on(0, 32),
                    INNER,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "with no context",
            "aclrtMemcpyAsyncWithDesc",
            107002,
            -1,
            || {
                let mut desc = [0u64; 4];
                let desc = desc.as_mut_ptr().cast();
                code!(aclrtMemcpyAsyncWithDesc(desc, INNER, ptr::null_mut()))
            },
        ),
        case(
            "offset NULL dst",
            "aclrtMemcpyAsyncWithOffset",
            100000,
            0,
            || {
                let src = malloc(8).cast();
                code!(aclrtMemcpyAsyncWithOffset(
                    ptr::null_mut(),
                    8,
                    0,
                    src,
                    8,
                    0,
                    INNER,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "offset D2D kind",
            "aclrtMemcpyAsyncWithOffset",
            207000,
            0,
            || {
                let (dst, src) = (malloc(8).cast(), malloc(8).cast());
                let kind = ACL_MEMCPY_DEVICE_TO_DEVICE;
                code!(aclrtMemcpyAsyncWithOffset(
                    dst,
                    8,
                    0,
                    src,
                    8,
                    0,
                    kind,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "offset kind 9",
            "aclrtMemcpyAsyncWithOffset",
            100000,
            0,
            || {
                let (dst, src) = (malloc(8).cast(), malloc(8).cast());
                code!(aclrtMemcpyAsyncWithOffset(
                    dst,
                    8,
                    0,
                    src,
                    8,
                    0,
                    9,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "offset count > destMax",
            "aclrtMemcpyAsyncWithOffset",
            107000,
            0,
            || {
                let (dst, src) = (malloc(8).cast(), malloc(8).cast());
                code!(aclrtMemcpyAsyncWithOffset(
                    dst,
                    4,
                    0,
                    src,
                    8,
                    0,
                    INNER,
                    ptr::null_mut()
                ))
            },
        ),
        // destMax and count precede the kind: a count past destMax is refused before a kind
        // these copies do not support, as aclrtMemcpyAsync refuses it.
        case(
            "offset count > destMax of kind D2D",
            "aclrtMemcpyAsyncWithOffset",
            107000,
            0,
            || {
                let (dst, src) = (malloc(8).cast(), malloc(8).cast());
                let kind = ACL_MEMCPY_DEVICE_TO_DEVICE;
                code!(aclrtMemcpyAsyncWithOffset(
                    dst,
                    4,
                    0,
                    src,
                    8,
                    0,
                    kind,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "offset base pointer in host memory",
            "aclrtMemcpyAsyncWithOffset",
            107000,
            0,
            || {
                let (dst, src) = (malloc_host(8).cast(), malloc(8).cast());
                code!(aclrtMemcpyAsyncWithOffset(
                    dst,
                    8,
                    0,
                    src,
                    8,
                    0,
                    INNER,
                    ptr::null_mut()
                ))
            },
        ),
    ]);
}
