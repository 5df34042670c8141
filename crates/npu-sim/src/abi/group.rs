//! Compute groups (aclrtSetGroup, aclrtGetGroupCount, aclrtCreateGroupInfo and the rest): a
//! feature of the Atlas inference products' Control CPU form that the Atlas A2 does not have.
//! aclrtCreateGroupInfo returns NULL, as documented for a product without groups; the others
//! check their pointer arguments (NULL → 100000), then return 207000.

use std::ffi::c_void;

use npu_sys::*;

use super::check::unsupported_after_checks;
use crate::error::{Res, guard, guard_value};

/// The pointer checks, then the refusal.
fn refuse(pointers: &[(*const c_void, &str)]) -> Res<()> {
    unsupported_after_checks(pointers, "compute groups")
}

/// Not supported on an Atlas A2: 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetGroup(groupId: i32) -> aclError {
    let _ = groupId;
    guard("aclrtSetGroup", || refuse(&[]))
}

/// Not supported on an Atlas A2: NULL count → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetGroupCount(count: *mut u32) -> aclError {
    guard("aclrtGetGroupCount", || refuse(&[(count.cast(), "count")]))
}

/// No groups exist on an Atlas A2: NULL (the thread's last error is 207000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateGroupInfo() -> *mut aclrtGroupInfo {
    guard_value("aclrtCreateGroupInfo", std::ptr::null_mut(), || {
        refuse(&[])?;
        Ok(std::ptr::null_mut())
    })
}

/// Not supported on an Atlas A2 (no group info can exist): NULL → 100000, else 207000.
///
/// # Safety
/// No preconditions; nothing is read or freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyGroupInfo(groupInfo: *mut aclrtGroupInfo) -> aclError {
    guard("aclrtDestroyGroupInfo", || {
        refuse(&[(groupInfo.cast(), "groupInfo")])
    })
}

/// Not supported on an Atlas A2: NULL → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetAllGroupInfo(groupInfo: *mut aclrtGroupInfo) -> aclError {
    guard("aclrtGetAllGroupInfo", || {
        refuse(&[(groupInfo.cast(), "groupInfo")])
    })
}

/// Not supported on an Atlas A2: NULL groupInfo, attrValue or paramRetSize → 100000, else
/// 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetGroupInfoDetail(
    groupInfo: *const aclrtGroupInfo,
    groupIndex: i32,
    attr: aclrtGroupAttr,
    attrValue: *mut c_void,
    valueLen: usize,
    paramRetSize: *mut usize,
) -> aclError {
    let _ = (groupIndex, attr, valueLen);
    guard("aclrtGetGroupInfoDetail", || {
        refuse(&[
            (groupInfo.cast(), "groupInfo"),
            (attrValue.cast_const(), "attrValue"),
            (paramRetSize.cast(), "paramRetSize"),
        ])
    })
}
