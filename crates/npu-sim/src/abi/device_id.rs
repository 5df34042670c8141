//! Device ID mapping between user IDs (what aclrtSetDevice takes), logical IDs and physical
//! IDs, and the process ID the device knows the caller by.
//!
//! The IDs differ only when ASCEND_RT_VISIBLE_DEVICES selects devices (user → logical) or a
//! container exposes some of the host's devices (logical → physical). The simulator models a
//! host without either: its devices are the machine's, all visible, so the three IDs of a
//! device are equal, and an ID that names no device is ACL_ERROR_RT_INVALID_DEVICEID.

use npu_sys::*;

use crate::error::{guard, non_null, write_out};
use crate::sim::sim;

/// Maps a device ID of one kind to another: the same device, checked to exist.
fn map(api: &'static str, from: i32, out: *mut i32, out_name: &str) -> aclError {
    guard(api, || {
        non_null(out, out_name)?;
        let device = sim()?.device(from.into())?;
        write_out(out, out_name, device.id)
    })
}

/// The logical ID of a user device ID (equal on the simulator).
///
/// # Safety
/// `logicDevId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLogicDevIdByUserDevId(
    userDevid: i32,
    logicDevId: *mut i32,
) -> aclError {
    map(
        "aclrtGetLogicDevIdByUserDevId",
        userDevid,
        logicDevId,
        "logicDevId",
    )
}

/// The user device ID of a logical ID (equal on the simulator).
///
/// # Safety
/// `userDevid` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetUserDevIdByLogicDevId(
    logicDevId: i32,
    userDevid: *mut i32,
) -> aclError {
    map(
        "aclrtGetUserDevIdByLogicDevId",
        logicDevId,
        userDevid,
        "userDevid",
    )
}

/// The ID of a physical device as the application names it. CANN documents that this older
/// function returns the *user* ID despite its name (aclrtGetUserDevIdByPhyDevId replaces it);
/// on the simulator every ID of a device is the same.
///
/// # Safety
/// `logicDevId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLogicDevIdByPhyDevId(
    phyDevId: i32,
    logicDevId: *mut i32,
) -> aclError {
    map(
        "aclrtGetLogicDevIdByPhyDevId",
        phyDevId,
        logicDevId,
        "logicDevId",
    )
}

/// The physical ID of a device the application names (its user ID, as CANN documents for
/// this older function; aclrtGetPhyDevIdByUserDevId replaces it).
///
/// # Safety
/// `phyDevId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetPhyDevIdByLogicDevId(
    logicDevId: i32,
    phyDevId: *mut i32,
) -> aclError {
    map(
        "aclrtGetPhyDevIdByLogicDevId",
        logicDevId,
        phyDevId,
        "phyDevId",
    )
}

/// The user device ID of a physical device (equal on the simulator).
///
/// # Safety
/// `userDevId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetUserDevIdByPhyDevId(
    phyDevId: i32,
    userDevId: *mut i32,
) -> aclError {
    map(
        "aclrtGetUserDevIdByPhyDevId",
        phyDevId,
        userDevId,
        "userDevId",
    )
}

/// The physical ID of a user device ID (equal on the simulator).
///
/// # Safety
/// `phyDevId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetPhyDevIdByUserDevId(
    userDevId: i32,
    phyDevId: *mut i32,
) -> aclError {
    map(
        "aclrtGetPhyDevIdByUserDevId",
        userDevId,
        phyDevId,
        "phyDevId",
    )
}

/// The calling process's ID as the device sees it. CANN adapts it for virtual machines, whose
/// guest IDs differ from the host's; the simulator's devices live in the process itself, so it
/// is the process's own ID (getpid). NULL → 100000.
///
/// # Safety
/// `pid` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetBareTgid(pid: *mut i32) -> aclError {
    guard("aclrtDeviceGetBareTgid", || {
        non_null(pid, "pid")?;
        // SAFETY: getpid has no preconditions and cannot fail.
        let own = unsafe { libc::getpid() };
        write_out(pid, "pid", own)
    })
}
