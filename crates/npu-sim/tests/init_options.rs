//! aclInit's `"err_msg_mode"` and `"defaultDevice"` keys, and a malformed `"npu_sim"` section.
//! The keys are process-wide, and aclInit is counted process-wide, so they are tested in a
//! process of their own, in one test.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// Runs `body` on a new thread (one that never set a device or context) and returns its
/// result.
fn on_fresh_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(body).join().unwrap()
}

fn device_of_a_fresh_thread() -> Result<i32, aclError> {
    on_fresh_thread(|| {
        let mut device = -1;
        match code!(aclrtGetDevice(&mut device)) {
            0 => Ok(device),
            error => Err(error),
        }
    })
}

/// Fails a call on a fresh thread; returns the messages that thread then sees.
fn error_on_a_fresh_thread() -> String {
    on_fresh_thread(|| {
        assert_eq!(
            code!(aclrtGetRunMode(ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM
        );
        recent_message()
    })
}

#[test]
fn err_msg_mode_and_default_device() {
    // Malformed values are refused before anything is applied.
    for (text, code) in [
        // A simulator section that is no configuration, or that its checks refuse.
        (r#"{"npu_sim": 5}"#, ACL_ERROR_INVALID_PARAM),
        (
            r#"{"npu_sim": {"devices": 100000}}"#,
            ACL_ERROR_INVALID_PARAM,
        ),
        (r#"{"err_msg_mode": "2"}"#, ACL_ERROR_INVALID_PARAM),
        (r#"{"err_msg_mode": 1}"#, ACL_ERROR_INVALID_PARAM),
        (r#"{"defaultDevice": 1}"#, ACL_ERROR_INVALID_PARAM),
        (
            r#"{"defaultDevice": {"default_device": "one"}}"#,
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            r#"{"defaultDevice": {"default_device": "99"}}"#,
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
    ] {
        let file = config_file("npu-sim-bad-init.json", text);
        assert_eq!(code!(aclInit(file.as_ptr())), code, "{text}");
        assert!(recent_message().contains(&format!("aclInit failed with {code}")));
    }

    // Without the keys: thread-level messages, no implicit device.
    assert_eq!(device_of_a_fresh_thread(), Err(ACL_ERROR_RT_CONTEXT_NULL));
    assert!(error_on_a_fresh_thread().contains("aclrtGetRunMode failed with 100000"));
    assert_eq!(recent_message(), "", "another thread's message is not ours");

    let file = config_file(
        "npu-sim-init-options.json",
        r#"{"err_msg_mode": "1", "defaultDevice": {"default_device": "1"}}"#,
    );
    acl!(aclInit(file.as_ptr()));

    // Process level: a message recorded on any thread is read (and cleared) on any other.
    code!(aclrtGetLastError(ACL_RT_THREAD_LEVEL));
    on_fresh_thread(|| code!(aclrtGetRunMode(ptr::null_mut())));
    assert!(recent_message().contains("aclrtGetRunMode failed with 100000"));
    assert_eq!(recent_message(), "");
    // The last error stays the failing thread's.
    assert_eq!(code!(aclrtGetLastError(ACL_RT_THREAD_LEVEL)), ACL_SUCCESS);

    // A thread that sets no device works on device 1, as after its own aclrtSetDevice(1).
    assert_eq!(device_of_a_fresh_thread(), Ok(1));
    on_fresh_thread(|| {
        let stream = create_stream();
        let (host, dev) = (malloc_host(64), malloc(64));
        acl!(aclrtMemsetAsync(dev, 64, 7, 64, stream));
        acl!(aclrtMemcpyAsync(
            host,
            64,
            dev,
            64,
            ACL_MEMCPY_DEVICE_TO_HOST,
            stream
        ));
        acl!(aclrtSynchronizeStream(stream));
        // SAFETY: 64 bytes of pinned memory the copy filled.
        let bytes = unsafe { std::slice::from_raw_parts(host.cast::<u8>(), 64) };
        assert!(bytes.iter().all(|&b| b == 7));
        acl!(aclrtFree(dev));
        acl!(aclrtFreeHost(host));
        acl!(aclrtDestroyStream(stream));
        acl!(aclrtResetDevice(1));
    });
    // A thread that chose a device keeps it.
    on_fresh_thread(|| {
        set_device(0);
        let mut device = -1;
        acl!(aclrtGetDevice(&mut device));
        assert_eq!(device, 0);
        acl!(aclrtResetDevice(0));
    });

    // aclFinalize undoes both.
    acl!(aclFinalize());
    assert_eq!(device_of_a_fresh_thread(), Err(ACL_ERROR_RT_CONTEXT_NULL));
    assert!(error_on_a_fresh_thread().contains("aclrtGetRunMode failed with 100000"));
    assert_eq!(recent_message(), "");
}
