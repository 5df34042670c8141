//! The capture modes: which threads may call the functions CANN calls unsafe (synchronous
//! copies and memsets, asynchronous copies of pageable memory) while a capture goes on. A
//! GLOBAL capture restricts every thread of the process, so this file is a process of its own
//! with one test.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const GLOBAL: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
const THREAD_LOCAL: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL;
const RELAXED: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;

fn exchange(mode: aclmdlRICaptureMode) -> aclmdlRICaptureMode {
    let mut mode = mode;
    acl!(aclmdlRICaptureThreadExchangeMode(&mut mode));
    mode
}

/// What the unsafe functions return on the calling thread: a synchronous memcpy and memset,
/// and an asynchronous copy of pageable memory on a stream that is not captured.
fn unsafe_calls(dev: *mut c_void, stream: aclrtStream) -> [aclError; 3] {
    let host = pageable(64);
    [
        code!(aclrtMemcpy(dev, 64, host, 64, ACL_MEMCPY_HOST_TO_DEVICE)),
        code!(aclrtMemset(dev, 64, 0, 64)),
        code!(aclrtMemcpyAsync(
            dev,
            64,
            host,
            64,
            ACL_MEMCPY_HOST_TO_DEVICE,
            stream
        )),
    ]
}

const ALLOWED: [aclError; 3] = [0, 0, 0];
const REFUSED: [aclError; 3] = [
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
    ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
];

/// The unsafe calls on a new thread, whose mode is first set to `mode` (None: left GLOBAL).
fn on_other_thread(mode: Option<aclmdlRICaptureMode>) -> [aclError; 3] {
    std::thread::spawn(move || {
        set_device(0);
        if let Some(mode) = mode {
            exchange(mode);
        }
        let (dev, stream) = (malloc(64), create_stream());
        let codes = unsafe_calls(dev, stream);
        acl!(aclrtDestroyStream(stream));
        acl!(aclrtFree(dev));
        codes
    })
    .join()
    .unwrap()
}

#[test]
fn capture_modes_decide_which_threads_may_call_unsafe_functions() {
    set_device(0);
    let (captured, free) = (create_stream(), create_stream());
    let dev = malloc(64);
    assert_eq!(exchange(GLOBAL), GLOBAL, "a thread starts in GLOBAL mode");

    // GLOBAL: no thread may, until it switches: this one to RELAXED, others to RELAXED or
    // THREAD_LOCAL.
    acl!(aclmdlRICaptureBegin(captured, GLOBAL));
    assert_eq!(unsafe_calls(dev, free), REFUSED);
    assert_eq!(on_other_thread(None), REFUSED);
    assert_eq!(on_other_thread(Some(THREAD_LOCAL)), ALLOWED);
    assert_eq!(on_other_thread(Some(RELAXED)), ALLOWED);
    assert_eq!(exchange(THREAD_LOCAL), GLOBAL);
    assert_eq!(unsafe_calls(dev, free), REFUSED);
    assert_eq!(exchange(RELAXED), THREAD_LOCAL);
    assert_eq!(unsafe_calls(dev, free), ALLOWED);
    assert_eq!(exchange(GLOBAL), RELAXED);
    // A refused call does not invalidate the capture.
    let mut status = 0;
    let mut model = ptr::null_mut();
    acl!(aclmdlRICaptureGetInfo(captured, &mut status, &mut model));
    assert_eq!(status, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    acl!(aclmdlRIDestroy(capture_end(captured)));
    assert_eq!(unsafe_calls(dev, free), ALLOWED);

    // THREAD_LOCAL: only the capturing thread may not (unless it switches to RELAXED).
    acl!(aclmdlRICaptureBegin(captured, THREAD_LOCAL));
    assert_eq!(unsafe_calls(dev, free), REFUSED);
    assert_eq!(on_other_thread(None), ALLOWED);
    exchange(RELAXED);
    assert_eq!(unsafe_calls(dev, free), ALLOWED);
    exchange(GLOBAL);
    acl!(aclmdlRIDestroy(capture_end(captured)));

    // RELAXED: every thread may, whatever its mode.
    acl!(aclmdlRICaptureBegin(captured, RELAXED));
    assert_eq!(unsafe_calls(dev, free), ALLOWED);
    assert_eq!(on_other_thread(None), ALLOWED);
    acl!(aclmdlRIDestroy(capture_end(captured)));

    acl!(aclrtSynchronizeStream(free));
    acl!(aclrtDestroyStream(free));
    acl!(aclrtDestroyStream(captured));
    acl!(aclrtFree(dev));
}
