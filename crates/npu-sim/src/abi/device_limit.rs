//! Process-wide device resource limits (aclrtDeviceSetLimit / aclrtDeviceGetLimit).

use npu_sys::*;

use crate::device_limit::{Limit, PRINTF_FIFO_LIMIT, SIMD_STACK_LIMIT};
use crate::error::{Res, fail, guard, non_null, write_out};

/// The limit a supported type names; the SIMT limits are not supported on an Atlas A2
/// (207000), an unknown type → 107000.
fn limit_of(limit: aclrtDeviceLimit) -> Res<&'static Limit> {
    match limit {
        ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE => Ok(&SIMD_STACK_LIMIT),
        ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE => Ok(&PRINTF_FIFO_LIMIT),
        ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE
        | ACL_RT_DEV_LIMIT_SIMT_DVG_WARP_STACK_SIZE
        | ACL_RT_DEV_LIMIT_SIMT_PRINTF_FIFO_SIZE => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "limit {limit} is a SIMT limit, which an Atlas A2 does not support"
        ),
        _ => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "limit {limit} is not an aclrtDeviceLimit"
        ),
    }
}

/// Sets a device resource limit for the process (all devices share it; the runtime applies it
/// at the next aclrtSetDevice that creates a device's primary context). SIMD stack: up to
/// 32 KiB takes effect as 32 KiB, above it is rounded up to 16 KiB, more than 192 KiB →
/// 107000. SIMD printf FIFO per core: rounded up to 8 bytes, outside 1 KiB..=64 MiB → 107000.
/// SIMT limits → 207000; unknown → 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceSetLimit(limit: aclrtDeviceLimit, value: usize) -> aclError {
    guard("aclrtDeviceSetLimit", || {
        let stored = limit_of(limit)?;
        let Some(effective) = stored.effective(value as u64) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{value} bytes is out of range for limit {limit}: {}",
                stored.range
            );
        };
        stored.store(effective);
        Ok(())
    })
}

/// The process's value of a device resource limit (the last setting, as it takes effect, or
/// the default: 32 KiB for both SIMD limits). NULL → 100000; SIMT limits → 207000; unknown →
/// 107000.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetLimit(
    limit: aclrtDeviceLimit,
    value: *mut usize,
) -> aclError {
    guard("aclrtDeviceGetLimit", || {
        non_null(value, "value")?;
        let stored = limit_of(limit)?;
        write_out(value, "value", stored.load() as usize)
    })
}
