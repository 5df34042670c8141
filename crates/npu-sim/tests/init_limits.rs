//! aclInit's device resource limit keys (`"StackSize": {"aicore_stack_size": N}` and
//! `"simd_printf_fifo_size_per_core": N`), which set the limits aclrtDeviceSetLimit sets. The
//! limits and aclInit are process-wide, so this file is a process of its own, with one test.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn limit(limit: aclrtDeviceLimit) -> usize {
    let mut value = 0;
    acl!(aclrtDeviceGetLimit(limit, &mut value));
    value
}

fn init_limit_keys(text: &str) -> aclError {
    let file = config_file("npu-sim-init-limits.json", text);
    code!(aclInit(file.as_ptr()))
}

#[test]
fn the_init_file_sets_the_simd_limits_as_device_set_limit_does() {
    let stack = ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE;
    let fifo = ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE;
    // Values of another form, or outside the limits' ranges, are refused before anything is
    // applied.
    for text in [
        r#"{"StackSize": 32768}"#,
        r#"{"StackSize": {"aicore_stack_size": "32768"}}"#,
        r#"{"StackSize": {"aicore_stack_size": -1}}"#,
        r#"{"StackSize": {"aicore_stack_size": 196609}}"#,
        r#"{"simd_printf_fifo_size_per_core": 1023}"#,
        r#"{"simd_printf_fifo_size_per_core": 67108865}"#,
        r#"{"simd_printf_fifo_size_per_core": 1.5}"#,
        r#"{"StackSize": {"aicore_stack_size": 65536}, "simd_printf_fifo_size_per_core": 1}"#,
    ] {
        assert_eq!(init_limit_keys(text), ACL_ERROR_INVALID_PARAM, "{text}");
        assert!(recent_message().contains("aclInit failed with 100000"));
        assert_eq!(limit(stack), 32 << 10, "{text}");
        assert_eq!(limit(fifo), 32 << 10, "{text}");
    }

    // The values take effect as aclrtDeviceSetLimit's do: the stack rounded up to 16 KiB, the
    // FIFO to 8 bytes. The Ascend 950's SIMT keys are not an Atlas A2's and change nothing.
    let text = r#"{"StackSize": {"aicore_stack_size": 40000, "simt_stack_size": 1024},
                   "simd_printf_fifo_size_per_core": 1048577, "simt_printf_fifo_size": 1048576}"#;
    assert_eq!(init_limit_keys(text), ACL_SUCCESS);
    assert_eq!(limit(stack), 48 << 10);
    assert_eq!(limit(fifo), 1048584);

    // Whichever is set last wins; aclFinalize keeps the limits, and the next aclInit sets them
    // again.
    acl!(aclrtDeviceSetLimit(stack, 192 << 10));
    assert_eq!(limit(stack), 192 << 10);
    acl!(aclFinalize());
    assert_eq!(limit(stack), 192 << 10);
    assert_eq!(init_limit_keys(text), ACL_SUCCESS);
    assert_eq!(limit(stack), 48 << 10);
    acl!(aclFinalize());

    // Found (fourteenth race session): a failing init callback undoes the file's limits, not
    // a setting made since. aclrtDeviceSetLimit calls made while aclInit ran (here by the
    // callback itself; another thread's alike) were put back to the values before aclInit,
    // though they returned 0 and came after the file's.
    acl!(aclrtDeviceSetLimit(stack, 32 << 10));
    acl!(aclrtDeviceSetLimit(fifo, 2048));
    acl!(aclInitCallbackRegister(
        ACL_REG_TYPE_ACL_MODEL,
        Some(set_limit_and_fail),
        std::ptr::null_mut()
    ));
    assert_eq!(init_limit_keys(text), ACL_ERROR_FAILURE);
    assert_eq!(
        limit(stack),
        64 << 10,
        "the setting made after the file's stays"
    );
    assert_eq!(limit(fifo), 2048, "the file's FIFO size is undone");
    acl!(aclInitCallbackUnRegister(
        ACL_REG_TYPE_ACL_MODEL,
        Some(set_limit_and_fail)
    ));
}

/// An init callback that sets the SIMD stack to 64 KiB and fails.
unsafe extern "C" fn set_limit_and_fail(
    _: *const std::ffi::c_char,
    _: usize,
    _: *mut std::ffi::c_void,
) -> aclError {
    // SAFETY: no pointers.
    let code = unsafe { aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, 64 << 10) };
    assert_eq!(code, 0);
    ACL_ERROR_FAILURE
}
