//! Floating-point overflow settings: the stream's overflow detection switch and the device's
//! overflow mode. The simulator's kernels are host code with no overflow detection, so both
//! are kept and reported.

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::context;
use crate::error::{ensure, guard, non_null, write_out};
use crate::sim::sim;
use crate::sync::lock;

/// Turns a stream's overflow detection off (0) or on (1) for the tasks submitted after it, as
/// aclrtSetStreamAttribute(FLOAT_OVERFLOW_CHECK) does. NULL is the default stream; a stream of
/// another context → 107003; another flag → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamOverflowSwitch(stream: aclrtStream, flag: u32) -> aclError {
    guard("aclrtSetStreamOverflowSwitch", || {
        let (_, target) = context::owned_stream(sim()?, stream)?;
        ensure!(
            flag <= 1,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag} is neither 0 (off) nor 1 (on)"
        );
        lock(&target.attributes).overflow_switch = flag;
        Ok(())
    })
}

/// A stream's overflow detection switch (0 until turned on). NULL is the default stream.
///
/// # Safety
/// `flag` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamOverflowSwitch(
    stream: aclrtStream,
    flag: *mut u32,
) -> aclError {
    guard("aclrtGetStreamOverflowSwitch", || {
        non_null(flag, "flag")?;
        let target = context::any_stream(sim()?, stream)?;
        let switch = lock(&target.attributes).overflow_switch;
        write_out(flag, "flag", switch)
    })
}

/// Sets the current device's float overflow mode, SATURATION or INFNAN (the default); streams
/// created afterwards use it. Another value → 100000; no context → 107002.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    guard("aclrtSetDeviceSatMode", || {
        ensure!(
            mode == ACL_RT_OVERFLOW_MODE_SATURATION || mode == ACL_RT_OVERFLOW_MODE_INFNAN,
            ACL_ERROR_INVALID_PARAM,
            "mode {mode} is neither ACL_RT_OVERFLOW_MODE_SATURATION nor ACL_RT_OVERFLOW_MODE_INFNAN"
        );
        let ctx = context::current(sim()?)?;
        ctx.device.check_alive()?;
        ctx.device.sat_mode.store(mode, Ordering::Relaxed);
        Ok(())
    })
}

/// The current device's float overflow mode. NULL → 100000; no context → 107002.
///
/// # Safety
/// `mode` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceSatMode(mode: *mut aclrtFloatOverflowMode) -> aclError {
    guard("aclrtGetDeviceSatMode", || {
        non_null(mode, "mode")?;
        let ctx = context::current(sim()?)?;
        write_out(mode, "mode", ctx.device.sat_mode.load(Ordering::Relaxed))
    })
}
