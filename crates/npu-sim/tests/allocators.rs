//! Custom allocator descriptors and their registration per stream, through the C ABI, with
//! every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

unsafe extern "C" fn alloc_block(_: aclrtAllocator, _: usize) -> *mut c_void {
    ptr::null_mut()
}
unsafe extern "C" fn free_block(_: aclrtAllocator, _: aclrtAllocatorBlock) {}
unsafe extern "C" fn alloc_advised(
    _: aclrtAllocator,
    _: usize,
    _: aclrtAllocatorAddr,
) -> *mut c_void {
    ptr::null_mut()
}
unsafe extern "C" fn block_address(_: aclrtAllocatorBlock) -> *mut c_void {
    ptr::null_mut()
}

/// A descriptor with every required part, and the advise callback if `advise`.
fn full_desc(object: usize, advise: bool) -> aclrtAllocatorDesc {
    // SAFETY: no preconditions.
    let desc = unsafe { aclrtAllocatorCreateDesc() };
    assert!(!desc.is_null());
    acl!(aclrtAllocatorSetObjToDesc(desc, object as aclrtAllocator));
    acl!(aclrtAllocatorSetAllocFuncToDesc(desc, Some(alloc_block)));
    acl!(aclrtAllocatorSetFreeFuncToDesc(desc, Some(free_block)));
    acl!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(
        desc,
        Some(block_address)
    ));
    if advise {
        acl!(aclrtAllocatorSetAllocAdviseFuncToDesc(
            desc,
            Some(alloc_advised)
        ));
    }
    desc
}

struct Registration {
    desc: aclrtAllocatorDesc,
    object: aclrtAllocator,
    alloc: aclrtAllocatorAllocFunc,
    free: aclrtAllocatorFreeFunc,
    advise: aclrtAllocatorAllocAdviseFunc,
    get_addr: aclrtAllocatorGetAddrFromBlockFunc,
}

fn get(stream: aclrtStream) -> (aclError, Registration) {
    let mut r = Registration {
        desc: ptr::null_mut(),
        object: ptr::null_mut(),
        alloc: None,
        free: None,
        advise: None,
        get_addr: None,
    };
    let code = code!(aclrtAllocatorGetByStream(
        stream,
        &mut r.desc,
        &mut r.object,
        &mut r.alloc,
        &mut r.free,
        &mut r.advise,
        &mut r.get_addr
    ));
    (code, r)
}

#[test]
fn registrations_are_copies_kept_per_stream() {
    set_device(0);
    let (s1, s2) = (create_stream(), create_stream());
    let first = full_desc(0x1000, false);
    acl!(aclrtAllocatorRegister(s1, first));
    // The registration outlives its descriptor.
    acl!(aclrtAllocatorDestroyDesc(first));
    let (code, r) = get(s1);
    assert_eq!(code, 0, "{}", recent_message());
    assert_eq!((r.desc, r.object as usize), (first, 0x1000));
    assert_eq!(
        r.alloc.map(|f| f as usize),
        Some(alloc_block as *const () as usize)
    );
    assert_eq!(
        r.free.map(|f| f as usize),
        Some(free_block as *const () as usize)
    );
    assert_eq!(
        r.get_addr.map(|f| f as usize),
        Some(block_address as *const () as usize)
    );
    assert!(r.advise.is_none());

    // The latest registration of a stream wins; other streams are unaffected.
    let second = full_desc(0x2000, true);
    acl!(aclrtAllocatorRegister(s1, second));
    let (_, r) = get(s1);
    assert_eq!((r.desc, r.object as usize), (second, 0x2000));
    assert_eq!(
        r.advise.map(|f| f as usize),
        Some(alloc_advised as *const () as usize)
    );
    assert_eq!(get(s2).0, ACL_ERROR_INVALID_PARAM);

    acl!(aclrtAllocatorUnregister(s1));
    assert_eq!(get(s1).0, ACL_ERROR_INVALID_PARAM);
    // Unregistering again, or a stream never registered, is fine.
    acl!(aclrtAllocatorUnregister(s1));
    acl!(aclrtAllocatorUnregister(s2));
    acl!(aclrtAllocatorDestroyDesc(second));
    acl!(aclrtDestroyStream(s1));
    acl!(aclrtDestroyStream(s2));
    // Even a stream that no longer exists.
    acl!(aclrtAllocatorUnregister(s1));
}

#[test]
fn error_paths() {
    set_device(1);
    let stream = create_stream();
    // SAFETY: no preconditions.
    let empty = unsafe { aclrtAllocatorCreateDesc() };
    fails!(
        aclrtAllocatorDestroyDesc(ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorDestroyDesc"
    );
    fails!(
        aclrtAllocatorSetObjToDesc(ptr::null_mut(), 1 as aclrtAllocator),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetObjToDesc"
    );
    fails!(
        aclrtAllocatorSetObjToDesc(empty, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetObjToDesc"
    );
    fails!(
        aclrtAllocatorSetAllocFuncToDesc(empty, None),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetAllocFuncToDesc"
    );
    fails!(
        aclrtAllocatorSetFreeFuncToDesc(empty, None),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetFreeFuncToDesc"
    );
    fails!(
        aclrtAllocatorSetAllocAdviseFuncToDesc(empty, None),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetAllocAdviseFuncToDesc"
    );
    fails!(
        aclrtAllocatorSetGetAddrFromBlockFuncToDesc(empty, None),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetGetAddrFromBlockFuncToDesc"
    );
    fails!(
        aclrtAllocatorRegister(ptr::null_mut(), empty),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorRegister"
    );
    fails!(
        aclrtAllocatorRegister(stream, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorRegister"
    );
    fails!(
        aclrtAllocatorRegister(stream, empty),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorRegister"
    );
    let full = full_desc(0x3000, false);
    let gone = create_stream();
    acl!(aclrtDestroyStream(gone));
    fails!(
        aclrtAllocatorRegister(gone, full),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtAllocatorRegister"
    );
    // The stream is looked up before the descriptor, whose contents are only known after its
    // lookup: a destroyed stream is named even with a descriptor lacking its callbacks.
    fails!(
        aclrtAllocatorRegister(gone, empty),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtAllocatorRegister"
    );
    assert_eq!(get(gone).0, ACL_ERROR_RT_INVALID_HANDLE);
    assert_eq!(get(ptr::null_mut()).0, ACL_ERROR_INVALID_PARAM);
    let mut desc = ptr::null_mut();
    let mut object = ptr::null_mut();
    let (mut alloc, mut free, mut advise, mut get_addr) = (None, None, None, None);
    fails!(
        aclrtAllocatorGetByStream(
            stream,
            &mut desc,
            &mut object,
            &mut alloc,
            &mut free,
            &mut advise,
            ptr::null_mut()
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorGetByStream"
    );
    fails!(
        aclrtAllocatorGetByStream(
            stream,
            ptr::null_mut(),
            &mut object,
            &mut alloc,
            &mut free,
            &mut advise,
            &mut get_addr
        ),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorGetByStream"
    );
    // Every other out pointer NULL in turn, each refused before the stream is looked up.
    for null in 0..4 {
        /// `out`, or NULL for the pointer under test.
        fn or_null<T>(out: &mut T, null: bool) -> *mut T {
            if null { ptr::null_mut() } else { out }
        }
        fails!(
            aclrtAllocatorGetByStream(
                gone,
                &mut desc,
                or_null(&mut object, null == 0),
                or_null(&mut alloc, null == 1),
                or_null(&mut free, null == 2),
                or_null(&mut advise, null == 3),
                &mut get_addr
            ),
            ACL_ERROR_INVALID_PARAM,
            "aclrtAllocatorGetByStream"
        );
    }
    acl!(aclrtAllocatorDestroyDesc(full));
    fails!(
        aclrtAllocatorDestroyDesc(full),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtAllocatorDestroyDesc"
    );
    fails!(
        aclrtAllocatorSetObjToDesc(full, 1 as aclrtAllocator),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtAllocatorSetObjToDesc"
    );
    // A NULL value is the ACL layer's to refuse, before the descriptor is looked up.
    fails!(
        aclrtAllocatorSetObjToDesc(full, ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetObjToDesc"
    );
    fails!(
        aclrtAllocatorSetFreeFuncToDesc(full, None),
        ACL_ERROR_INVALID_PARAM,
        "aclrtAllocatorSetFreeFuncToDesc"
    );
    fails!(
        aclrtAllocatorRegister(stream, full),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtAllocatorRegister"
    );
    acl!(aclrtAllocatorDestroyDesc(empty));
    acl!(aclrtDestroyStream(stream));
}
