//! Arbitrary handle values and pointers never crash the simulator: handles are checked tokens,
//! never dereferenced, and pointers are looked up before they are trusted.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn garbage_handles_are_invalid_handles(value in 1u64..) {
        set_device(0);
        let handle = value as usize as *mut c_void;
        let (mut stream_status, mut event_status) = (0, 0);
        prop_assert_eq!(code!(aclrtStreamQuery(handle, &mut stream_status)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtSynchronizeStream(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtMemsetAsync(malloc(64), 64, 0, 64, handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtQueryEventStatus(handle, &mut event_status)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtSynchronizeEvent(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtDestroyEvent(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtDestroyContext(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtSetCurrentContext(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtBinaryUnLoad(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtLaunchKernel(handle, 1, ptr::null(), 0, ptr::null_mut())), ACL_ERROR_RT_INVALID_HANDLE);
        prop_assert_eq!(code!(aclrtKernelArgsFinalize(handle)), ACL_ERROR_RT_INVALID_HANDLE);
        recent_message();
    }

    #[test]
    fn foreign_pointers_are_not_freed_or_registered_twice(value in 1usize..) {
        set_device(0);
        let pointer = value as *mut c_void;
        prop_assert_eq!(code!(aclrtFree(pointer)), ACL_ERROR_RT_MEMORY_FREE);
        prop_assert_eq!(code!(aclrtFreeHost(pointer)), ACL_ERROR_RT_MEMORY_FREE);
        prop_assert_eq!(code!(aclrtHostUnregister(pointer)), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);
        let mut attributes = aclrtPtrAttributes::default();
        acl!(aclrtPointerGetAttributes(pointer, &mut attributes));
        prop_assert_eq!(attributes.location.type_, ACL_MEM_LOCATION_TYPE_UNREGISTERED);
        recent_message();
    }
}
