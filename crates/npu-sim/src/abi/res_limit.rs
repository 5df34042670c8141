//! Device resource limits: the process-level core limits of each device.

use npu_sys::*;

use crate::context;
use crate::error::{guard, non_null, write_out};
use crate::sim::sim;

/// Limits the cores of one type the process's later tasks on the device may use (1 to the
/// hardware's count, else 107000); the last setting wins. Unknown device → 107001, unknown
/// type → 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDeviceResLimit(
    deviceId: i32,
    type_: aclrtDevResLimitType,
    value: u32,
) -> aclError {
    guard("aclrtSetDeviceResLimit", || {
        sim()?.device(deviceId.into())?.res_limits.set(type_, value)
    })
}

/// The device's core limit of one type: the process's, or the hardware's count when unset.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceResLimit(
    deviceId: i32,
    type_: aclrtDevResLimitType,
    value: *mut u32,
) -> aclError {
    guard("aclrtGetDeviceResLimit", || {
        non_null(value, "value")?;
        let limit = sim()?.device(deviceId.into())?.res_limits.get(type_)?;
        write_out(value, "value", limit)
    })
}

/// Restores the hardware's counts as the device's limits.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDeviceResLimit(deviceId: i32) -> aclError {
    guard("aclrtResetDeviceResLimit", || {
        sim()?.device(deviceId.into())?.res_limits.reset();
        Ok(())
    })
}

/// The core limit in force for the calling thread: its current device's (the simulator has no
/// stream-level limits, which would come first). No current context → 107002.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetResInCurrentThread(
    type_: aclrtDevResLimitType,
    value: *mut u32,
) -> aclError {
    guard("aclrtGetResInCurrentThread", || {
        non_null(value, "value")?;
        let ctx = context::current(sim()?)?;
        let limit = ctx.device.res_limits.get(type_)?;
        write_out(value, "value", limit)
    })
}
