//! Devices and contexts: the thread-local current context, the shared ref-counted primary
//! context, explicit contexts, default streams, and what synchronising a device covers.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::Once;
use std::sync::mpsc;
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| npu_sim::SimConfig::default().devices(6).install().unwrap());
}

fn current() -> aclrtContext {
    let mut ctx = ptr::null_mut();
    acl!(aclrtGetCurrentContext(&mut ctx));
    ctx
}

fn current_device() -> Result<i32, aclError> {
    let mut device = -1;
    match code!(aclrtGetDevice(&mut device)) {
        0 => Ok(device),
        code => {
            recent_message();
            Err(code)
        }
    }
}

#[test]
fn the_primary_context_is_shared_and_reference_counted() {
    install();
    set_device(0);
    let primary = current();
    let other = thread::spawn(|| {
        assert_eq!(
            current_device(),
            Err(ACL_ERROR_RT_CONTEXT_NULL),
            "contexts are per thread"
        );
        set_device(0);
        current() as usize
    })
    .join()
    .unwrap();
    assert_eq!(
        other, primary as usize,
        "both threads share the device's primary context"
    );
    // Two references (this thread and the other one): the first reset keeps it alive.
    acl!(aclrtResetDevice(0));
    assert_eq!(current(), primary);
    acl!(aclrtResetDevice(0));
    assert_eq!(current_device(), Err(ACL_ERROR_RT_CONTEXT_NULL));
    assert_eq!(
        code!(aclrtResetDevice(0)),
        ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    );
    assert_eq!(
        code!(aclrtResetDeviceForce(0)),
        ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    );
    // Force releases whatever the count; a second force, or a reset after it, fails.
    set_device(0);
    set_device(0);
    assert_ne!(current(), primary, "a new primary context");
    acl!(aclrtResetDeviceForce(0));
    assert_eq!(
        code!(aclrtResetDeviceForce(0)),
        ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    );
    assert_eq!(
        code!(aclrtResetDevice(0)),
        ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    );
    recent_message();
}

#[test]
fn explicit_contexts() {
    install();
    set_device(1);
    let primary = current();
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 2));
    assert_eq!(current(), ctx, "a new context becomes current");
    assert_eq!(current_device(), Ok(2));
    set_device(1);
    assert_eq!(
        current(),
        primary,
        "aclrtSetDevice clears the explicit context"
    );
    acl!(aclrtSetCurrentContext(ctx));
    assert_eq!(current_device(), Ok(2));
    // Other threads may use the context too.
    let ctx_addr = ctx as usize;
    thread::spawn(move || {
        acl!(aclrtSetCurrentContext(ctx_addr as aclrtContext));
        assert_eq!(current_device(), Ok(2));
    })
    .join()
    .unwrap();
    acl!(aclrtDestroyContext(ctx));
    assert_eq!(
        current_device(),
        Err(ACL_ERROR_RT_CONTEXT_NULL),
        "destroying the current context leaves none"
    );
    acl!(aclrtResetDevice(1));
}

/// The reference counts two streams for the first aclrtCreateContext on a device no
/// aclrtSetDevice has opened: the device's default stream, which it binds, and the context's
/// own. The primary context an aclrtSetDevice creates later has that bound stream as its
/// default stream, and the device keeps it while any of its contexts lives.
#[test]
fn the_first_context_of_an_unopened_device_binds_its_default_stream() {
    install();
    const DEVICE: i32 = 5;
    let available = || {
        let mut count = u32::MAX;
        acl!(aclrtGetStreamAvailableNum(&mut count));
        count
    };
    let mut first = ptr::null_mut();
    acl!(aclrtCreateContext(&mut first, DEVICE));
    assert_eq!(available(), 1984 - 2, "the device's and the context's");
    let mut second = ptr::null_mut();
    acl!(aclrtCreateContext(&mut second, DEVICE));
    assert_eq!(available(), 1984 - 3, "the device binds one default stream");
    set_device(DEVICE);
    assert_eq!(
        available(),
        1984 - 3,
        "the primary context's default stream is the bound one"
    );
    acl!(aclrtResetDevice(DEVICE));
    acl!(aclrtSetCurrentContext(second));
    assert_eq!(
        available(),
        1984 - 3,
        "still bound for the explicit contexts"
    );
    acl!(aclrtDestroyContext(second));
    acl!(aclrtSetCurrentContext(first));
    assert_eq!(available(), 1984 - 2);
    acl!(aclrtDestroyContext(first));
    set_device(DEVICE);
    assert_eq!(
        available(),
        1984 - 1,
        "the last context gave the bound stream back"
    );
    acl!(aclrtResetDevice(DEVICE));
}

#[test]
fn streams_belong_to_contexts_and_null_is_the_default_stream() {
    install();
    set_device(3);
    let mut default = ptr::null_mut();
    acl!(aclrtCtxGetCurrentDefaultStream(&mut default));
    let dev = malloc(64);
    acl!(aclrtMemsetAsync(dev, 64, 5, 64, default));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 5));

    let mut stream = ptr::null_mut();
    acl!(aclrtCreateStreamWithConfig(
        &mut stream,
        42,
        ACL_STREAM_FAST_LAUNCH | 0x4000
    ));
    let (mut priority, mut flags, mut id, mut default_id) = (0, 0, 0, 0);
    acl!(aclrtStreamGetPriority(stream, &mut priority));
    acl!(aclrtStreamGetFlags(stream, &mut flags));
    acl!(aclrtStreamGetId(stream, &mut id));
    acl!(aclrtStreamGetId(ptr::null_mut(), &mut default_id));
    assert_eq!(
        (priority, flags),
        (7, ACL_STREAM_FAST_LAUNCH),
        "priority clamped, unknown flags ignored"
    );
    assert_ne!(id, default_id);
    let (mut least, mut greatest) = (0, 0);
    acl!(aclrtDeviceGetStreamPriorityRange(&mut least, &mut greatest));
    assert_eq!((least, greatest), (7, 0));

    // Synchronising and querying work from another context; destroying does not.
    let mut other = ptr::null_mut();
    acl!(aclrtCreateContext(&mut other, 3));
    acl!(aclrtSynchronizeStream(stream));
    let mut status = 0;
    acl!(aclrtStreamQuery(stream, &mut status));
    assert_eq!(
        code!(aclrtDestroyStream(stream)),
        ACL_ERROR_RT_STREAM_CONTEXT
    );
    recent_message();
    acl!(aclrtDestroyContext(other));
    set_device(3);
    acl!(aclrtDestroyStream(stream));
}

unsafe extern "C" fn wait_for_go(data: *mut c_void) {
    // SAFETY: the test passes a pointer to a Receiver it keeps alive until this returns.
    let go = unsafe { &*data.cast::<mpsc::Receiver<()>>() };
    go.recv().unwrap();
}

#[test]
fn synchronizing_a_device_covers_only_the_current_context() {
    install();
    // A stream of another context on the same device is blocked in a host function.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut other = ptr::null_mut();
    acl!(aclrtCreateContext(&mut other, 4));
    let blocked = create_stream();
    acl!(aclrtLaunchHostFunc(
        blocked,
        Some(wait_for_go),
        ptr::from_ref(&go_rx).cast_mut().cast()
    ));

    set_device(4);
    let mine = create_stream();
    acl!(aclrtMemsetAsync(malloc(64), 64, 1, 64, mine));
    acl!(aclrtSynchronizeDevice());
    acl!(aclrtSynchronizeDeviceWithTimeout(1000));

    acl!(aclrtSetCurrentContext(other));
    assert_eq!(
        code!(aclrtSynchronizeDeviceWithTimeout(10)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    recent_message();
    go_tx.send(()).unwrap();
    acl!(aclrtSynchronizeDevice());
    acl!(aclrtDestroyContext(other));
}

#[test]
fn device_information() {
    install();
    let mut count = 0;
    acl!(aclrtGetDeviceCount(&mut count));
    assert_eq!(count, 6);
    let info = |attr| {
        let mut value = 0;
        acl!(aclrtGetDeviceInfo(1, attr, &mut value));
        value
    };
    assert_eq!(info(ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE), 16 << 30);
    assert_eq!(info(ACL_DEV_ATTR_AICORE_CORE_NUM), 20);
    assert_eq!(info(ACL_DEV_ATTR_NPU_ARCH), 2201);
    // SIMT attributes read 0 on an Atlas A2; the host link and the form factor, which only an
    // Ascend 950 reports, fail there, and the value is left as it was.
    assert_eq!(info(ACL_DEV_ATTR_WARP_SIZE), 0);
    for attr in [
        ACL_DEV_ATTR_HD_CONNECT_TYPE,
        ACL_DEV_ATTR_DEVICE_FORM_FACTOR,
    ] {
        let mut value = -7;
        fails!(
            aclrtGetDeviceInfo(1, attr, &mut value),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "aclrtGetDeviceInfo"
        );
        assert_eq!(value, -7);
    }
    // SAFETY: a non-NULL result is a NUL-terminated static string.
    let soc = unsafe { CStr::from_ptr(aclrtGetSocName()) };
    assert_eq!(soc.to_str().unwrap(), "Ascend910B3");
    let mut mode = ACL_DEVICE;
    acl!(aclrtGetRunMode(&mut mode));
    assert_eq!(mode, ACL_HOST);
    let (mut version, mut number) = (
        [0 as std::ffi::c_char; ACL_PKG_VERSION_MAX_SIZE as usize],
        0,
    );
    let package = c_string("runtime");
    acl!(aclsysGetVersionStr(
        package.as_ptr().cast_mut(),
        version.as_mut_ptr()
    ));
    acl!(aclsysGetVersionNum(
        package.as_ptr().cast_mut(),
        &mut number
    ));
    // SAFETY: the buffer was NUL-terminated by the call.
    let version = unsafe { CStr::from_ptr(version.as_ptr()) };
    let expected = npu_sim::config::DEFAULT_CANN_VERSION;
    assert_eq!(version.to_str().unwrap(), expected);
    assert_eq!(
        Some(number),
        npu_sim::version::package_version_number(expected)
    );
    let mut status = 9;
    acl!(aclrtQueryDeviceStatus(1, &mut status));
    assert_eq!(status, ACL_RT_DEVICE_STATUS_NORMAL);
}
