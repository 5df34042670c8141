//! 32-bit fills, address ranges and memory-use reports through the C ABI, with every error
//! path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::{CStr, c_void};
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

#[test]
fn d32_fills_device_and_pinned_memory_word_by_word() {
    set_device(0);
    let dev = malloc(64);
    acl!(aclrtMemsetD32(dev, 64, 0xdead_beef, 15));
    let words = download::<u32>(dev, 16);
    assert_eq!(&words[..15], &[0xdead_beef; 15]);
    assert_eq!(words[15], 0, "only N words are written");

    let stream = create_stream();
    acl!(aclrtMemsetD32Async(dev, 64, 7, 16, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u32>(dev, 16), vec![7; 16]);

    // Pinned memory is filled at once, not on the stream; an unaligned start is fine.
    let pinned = malloc_host(64);
    let unaligned = pinned.cast::<u8>().wrapping_add(1).cast::<c_void>();
    acl!(aclrtMemsetD32Async(unaligned, 63, 0x0102_0304, 15, stream));
    // SAFETY: 61 bytes of the 64-byte pinned allocation.
    let bytes = unsafe { std::slice::from_raw_parts(unaligned.cast::<u8>(), 61) };
    assert_eq!(&bytes[..4], &0x0102_0304u32.to_ne_bytes());
    assert_eq!(&bytes[56..60], &0x0102_0304u32.to_ne_bytes());
    assert_eq!(bytes[60], 0);
    // N = 0 does nothing, once the pointer has passed its NULL check (parameter order): the
    // pointer is not looked up.
    fails!(
        aclrtMemsetD32(ptr::null_mut(), 0, 1, 0),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemsetD32"
    );
    acl!(aclrtMemsetD32(0x10usize as *mut c_void, 0, 1, 0));
    acl!(aclrtFreeHost(pinned));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn d32_error_paths() {
    set_device(0);
    let dev = malloc(64);
    fails!(
        aclrtMemsetD32(ptr::null_mut(), 64, 0, 1),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemsetD32"
    );
    fails!(
        aclrtMemsetD32(dev, 63, 0, 16),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemsetD32"
    );
    fails!(
        aclrtMemsetD32(dev, usize::MAX, 0, usize::MAX / 2),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemsetD32"
    );
    // Past the allocation (its 64 bytes plus 32 of padding), and memory the runtime does not own.
    fails!(
        aclrtMemsetD32(dev, 4096, 0, 1024),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemsetD32"
    );
    let mut stack = [0u32; 4];
    fails!(
        aclrtMemsetD32Async(stack.as_mut_ptr().cast(), 16, 1, 4, ptr::null_mut()),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemsetD32Async"
    );
    assert_eq!(stack, [0; 4]);
    let foreign = stream_of_device(1);
    fails!(
        aclrtMemsetD32Async(dev, 64, 1, 4, foreign),
        ACL_ERROR_RT_STREAM_CONTEXT,
        "aclrtMemsetD32Async"
    );
    acl!(aclrtFree(dev));
}

#[test]
fn address_ranges_are_those_of_the_allocation() {
    set_device(0);
    let dev = malloc(1000);
    let pinned = malloc_host(100);
    let (mut base, mut size) = (ptr::null_mut(), 0);
    let inner = dev.cast::<u8>().wrapping_add(999).cast();
    acl!(aclrtMemGetAddressRange(inner, &mut base, &mut size));
    assert_eq!((base, size), (dev, 1056));
    acl!(aclrtMemGetAddressRange(pinned, &mut base, &mut size));
    assert_eq!((base, size), (pinned, 4096));

    fails!(
        aclrtMemGetAddressRange(ptr::null_mut(), &mut base, &mut size),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAddressRange"
    );
    fails!(
        aclrtMemGetAddressRange(dev, ptr::null_mut(), &mut size),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAddressRange"
    );
    fails!(
        aclrtMemGetAddressRange(dev, &mut base, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtMemGetAddressRange"
    );
    let mut stack = 0u8;
    fails!(
        aclrtMemGetAddressRange((&raw mut stack).cast(), &mut base, &mut size),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAddressRange"
    );
    acl!(aclrtFree(dev));
    fails!(
        aclrtMemGetAddressRange(dev, &mut base, &mut size),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtMemGetAddressRange"
    );
    acl!(aclrtFreeHost(pinned));
}

fn usage(device: i32) -> (String, u64, u64) {
    let mut info = [aclrtMemUsageInfo::default(); 4];
    let mut count = 0;
    acl!(aclrtGetMemUsageInfo(
        device,
        info.as_mut_ptr(),
        4,
        &mut count
    ));
    assert_eq!(count, 1);
    // SAFETY: the simulator NUL-terminates the name within its 32 bytes.
    let name = unsafe { CStr::from_ptr(info[0].name.as_ptr()) };
    (
        name.to_string_lossy().into_owned(),
        info[0].curMemSize,
        info[0].memPeakSize,
    )
}

#[test]
fn memory_use_is_reported_with_its_peak() {
    // Device 1 is this test's alone.
    set_device(1);
    let (name, before, _) = usage(1);
    assert_eq!(name, "runtime");
    let dev = malloc(1 << 20);
    let (_, during, peak) = usage(1);
    assert_eq!(during, before + (1 << 20) + 32);
    acl!(aclrtFree(dev));
    let (_, after, peak_after) = usage(1);
    assert_eq!(after, before);
    assert!(peak_after >= during && peak_after == peak);

    let mut info = aclrtMemUsageInfo::default();
    let mut count = 0;
    fails!(
        aclrtGetMemUsageInfo(1, ptr::null_mut(), 1, &mut count),
        ACL_ERROR_INVALID_PARAM,
        "aclrtGetMemUsageInfo"
    );
    fails!(
        aclrtGetMemUsageInfo(1, &mut info, 1, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtGetMemUsageInfo"
    );
    fails!(
        aclrtGetMemUsageInfo(1, &mut info, 0, &mut count),
        ACL_ERROR_INVALID_PARAM,
        "aclrtGetMemUsageInfo"
    );
    fails!(
        aclrtGetMemUsageInfo(99, &mut info, 1, &mut count),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtGetMemUsageInfo"
    );
}
