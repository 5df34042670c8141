//! Operator wait and execute timeouts (process-wide; the last setting wins).

use npu_sys::*;

use crate::error::{fail, guard, non_null, write_out};
use crate::op_timeout::{self, NEVER};
use crate::sim::sim;

/// Sets how long an aclrtStreamWaitEvent issued from now on may wait, in seconds (0: no
/// timeout, the default). A wait still pending then fails its stream's task with
/// ACL_ERROR_RT_WAIT_TIMEOUT (107019), which the stream's synchronisation reports.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpWaitTimeout(timeout: u32) -> aclError {
    guard("aclrtSetOpWaitTimeout", || {
        op_timeout::set_wait_timeout(timeout);
        Ok(())
    })
}

/// Sets the kernel execution timeout in seconds (0: the longest). It takes effect rounded up
/// to a whole number (1 to 254) of aclrtGetOpTimeOutInterval's steps; under a timing model a
/// kernel whose duration exceeds it fails at the timeout with ACL_ERROR_RT_AICORE_TIMEOUT
/// (ACL_ERROR_RT_VECTOR_CORE_TIMEOUT on the AIV engine).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpExecuteTimeOut(timeout: u32) -> aclError {
    guard("aclrtSetOpExecuteTimeOut", || {
        let interval = sim()?.config.op_timeout_interval_us;
        let requested = u64::from(timeout) * 1_000_000;
        op_timeout::set_execute_timeout(op_timeout::effective_us(requested, interval));
        Ok(())
    })
}

/// The millisecond form of aclrtSetOpExecuteTimeOut, which an Atlas A2 does not support:
/// ACL_ERROR_RT_FEATURE_NOT_SUPPORT, and nothing changes.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpExecuteTimeOutWithMs(timeout: u32) -> aclError {
    guard("aclrtSetOpExecuteTimeOutWithMs", || {
        fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "an Atlas A2 does not support setting the execute timeout ({timeout} ms) in ms; use aclrtSetOpExecuteTimeOutV2"
        )
    })
}

/// aclrtSetOpExecuteTimeOut in µs, writing the timeout that takes effect to `actualTimeout`
/// (UINT64_MAX: never, when 0 is asked for and the interval is below 100,000 µs). NULL
/// `actualTimeout` → 100000, and nothing changes.
///
/// # Safety
/// `actualTimeout` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpExecuteTimeOutV2(
    timeout: u64,
    actualTimeout: *mut u64,
) -> aclError {
    guard("aclrtSetOpExecuteTimeOutV2", || {
        non_null(actualTimeout, "actualTimeout")?;
        let interval = sim()?.config.op_timeout_interval_us;
        let effective = op_timeout::effective_us(timeout, interval);
        op_timeout::set_execute_timeout(effective);
        write_out(actualTimeout, "actualTimeout", effective)
    })
}

/// The step of execute timeouts, in µs (the simulator's `op_timeout_interval_us`).
///
/// # Safety
/// `interval` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetOpTimeOutInterval(interval: *mut u64) -> aclError {
    guard("aclrtGetOpTimeOutInterval", || {
        non_null(interval, "interval")?;
        let step = sim()?.config.op_timeout_interval_us;
        write_out(interval, "interval", step)
    })
}

/// The execute timeout in force, in ms (truncated): the effective one set, else the default
/// (254 steps, 1091 s with the default interval); UINT32_MAX when kernels never time out.
///
/// # Safety
/// `timeoutMs` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetOpExecuteTimeout(timeoutMs: *mut u32) -> aclError {
    guard("aclrtGetOpExecuteTimeout", || {
        non_null(timeoutMs, "timeoutMs")?;
        let us = op_timeout::execute_timeout_us(sim()?.config.op_timeout_interval_us);
        let ms = match us {
            NEVER => u32::MAX,
            // The configuration keeps 254 steps in ms within u32 (MAX_OP_TIMEOUT_INTERVAL_US).
            us => u32::try_from(us / 1000).unwrap_or(u32::MAX),
        };
        write_out(timeoutMs, "timeoutMs", ms)
    })
}
