//! Core limits: the process-level ones of each device, those of streams, and which stream's
//! the calling thread uses.

use npu_sys::*;

use crate::context;
use crate::error::{ensure, guard, non_null, write_out};
use crate::res_limit;
use crate::sim::sim;

/// Limits the cores of one type the process's later tasks on the device may use (1 to the
/// hardware's count, else 107000); the last setting wins. Unknown type or a value out of
/// range → 107000, checked before the device is looked up (unknown → 107001).
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
        let limit = res_limit::Limit::new(type_, value)?;
        sim()?.device(deviceId.into())?.res_limits.set(limit);
        Ok(())
    })
}

/// The device's core limit of one type: the process's, or the hardware's count when unset.
/// NULL `value` → 100000, then an unknown type → 107000, both before the device is looked up.
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
        let kind = res_limit::Kind::of(type_)?;
        let limit = sim()?.device(deviceId.into())?.res_limits.get(kind);
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

/// The core limit in force for the calling thread: the limit of the stream it uses
/// (aclrtUseStreamResInCurrentThread), where that stream sets one and still exists, else its
/// current device's (the process's, else the hardware's count). NULL `value` → 100000, then an
/// unknown type → 107000, both before the context is looked up (none → 107002).
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
        let kind = res_limit::Kind::of(type_)?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        let in_use = res_limit::in_thread().and_then(|handle| sim.streams.get(handle));
        let stream_limit = in_use.and_then(|stream| stream.res_limits.get_set(kind));
        let limit = stream_limit.unwrap_or_else(|| ctx.device.res_limits.get(kind));
        write_out(value, "value", limit)
    })
}

/// The core limit of one type on a stream: the stream's own (aclrtSetStreamResLimit), else its
/// device's (the process's, else the hardware's count). NULL is the current context's default
/// stream. NULL `value` → 100000, then an unknown type → 107000, both before the stream is
/// looked up (a destroyed stream → 107017).
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamResLimit(
    stream: aclrtStream,
    type_: aclrtDevResLimitType,
    value: *mut u32,
) -> aclError {
    guard("aclrtGetStreamResLimit", || {
        non_null(value, "value")?;
        let kind = res_limit::Kind::of(type_)?;
        let target = context::any_stream(sim()?, stream)?;
        let limit = match target.res_limits.get_set(kind) {
            Some(limit) => limit,
            None => target.device.res_limits.get(kind),
        };
        write_out(value, "value", limit)
    })
}

/// Limits the cores of one type the stream's work may use (1 to the hardware's count, else
/// 107000, as an unknown type is, before the stream is looked up); the last setting wins. A
/// stream of another context → 107003.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamResLimit(
    stream: aclrtStream,
    type_: aclrtDevResLimitType,
    value: u32,
) -> aclError {
    guard("aclrtSetStreamResLimit", || {
        let limit = res_limit::Limit::new(type_, value)?;
        let (_, target) = context::owned_stream(sim()?, stream)?;
        target.res_limits.set(limit);
        Ok(())
    })
}

/// Clears the stream's limits: it uses its device's again.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetStreamResLimit(stream: aclrtStream) -> aclError {
    guard("aclrtResetStreamResLimit", || {
        let (_, target) = context::owned_stream(sim()?, stream)?;
        target.res_limits.reset();
        Ok(())
    })
}

/// Makes the calling thread use the stream's limits (aclrtGetResInCurrentThread); the last
/// call wins. The stream must have a limit set (107000 otherwise).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtUseStreamResInCurrentThread(stream: aclrtStream) -> aclError {
    guard("aclrtUseStreamResInCurrentThread", || {
        let (_, target) = context::owned_stream(sim()?, stream)?;
        ensure!(
            target.res_limits.any_set(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} has no resource limit set (aclrtSetStreamResLimit first)",
            target.id
        );
        res_limit::use_in_thread(target.handle);
        Ok(())
    })
}

/// Stops the calling thread using the stream's limits; a stream the thread does not use →
/// 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtUnuseStreamResInCurrentThread(stream: aclrtStream) -> aclError {
    guard("aclrtUnuseStreamResInCurrentThread", || {
        let target = context::any_stream(sim()?, stream)?;
        ensure!(
            res_limit::unuse_in_thread(target.handle),
            ACL_ERROR_RT_PARAM_INVALID,
            "the calling thread does not use the resource limits of stream {}",
            target.id
        );
        Ok(())
    })
}
