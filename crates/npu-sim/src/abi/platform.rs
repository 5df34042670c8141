//! The platform queries (CANN's `acl_platform.h`): the simulated AI processor's hardware
//! description as text, and its instruction set.

use std::ffi::c_char;

use npu_sys::*;

use super::check::{c_str_or, write_c_str_or};
use crate::error::{Res, fail, guard, non_null};
use crate::hardware::*;
use crate::sim::sim;

/// One item of the description, as the text aclplatformGetDeviceInfo writes.
fn device_info(item: aclplatformDevInfo) -> Res<String> {
    let sim = sim()?;
    Ok(match item {
        ACL_PLATFORM_AICORE_CNT | ACL_PLATFORM_CUBE_CORE_CNT => CUBE_CORES.to_string(),
        ACL_PLATFORM_VECTOR_CORE_CNT => VECTOR_CORES.to_string(),
        ACL_PLATFORM_AICORE_UB_SIZE => UB_BYTES.to_string(),
        ACL_PLATFORM_L2_SIZE => L2_CACHE_BYTES.to_string(),
        ACL_PLATFORM_MEMORY_SIZE => sim.config.memory_per_device.to_string(),
        ACL_PLATFORM_CUBE_FREQ | ACL_PLATFORM_VEC_FREQ => CORE_MHZ.to_string(),
        ACL_PLATFORM_BT_SIZE => BT_BYTES.to_string(),
        ACL_PLATFORM_L0_A_SIZE => L0_A_BYTES.to_string(),
        ACL_PLATFORM_L0_B_SIZE => L0_B_BYTES.to_string(),
        ACL_PLATFORM_L0_C_SIZE => L0_C_BYTES.to_string(),
        ACL_PLATFORM_L1_SIZE => L1_BYTES.to_string(),
        ACL_PLATFORM_SOC_VERSION => sim.config.soc_name.clone(),
        ACL_PLATFORM_AIC_VERSION => AIC_VERSION.to_owned(),
        ACL_PLATFORM_NPU_ARCH => NPU_ARCH.to_string(),
        ACL_PLATFORM_MEMORY_TYPE => HBM.to_string(),
        other => fail!(
            ACL_ERROR_INVALID_PARAM,
            "{other} is not an aclplatformDevInfo"
        ),
    })
}

/// Writes one item of the simulated processor's description (decimal text for numbers) into
/// `value`, NUL-terminated. NULL `value`, an unknown item, or a text that does not fit
/// `maxLen` with its NUL → ACL_ERROR_INVALID_PARAM, nothing written.
///
/// # Safety
/// `value` must be NULL or valid for `maxLen` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclplatformGetDeviceInfo(
    infoType: aclplatformDevInfo,
    value: *mut c_char,
    maxLen: u32,
) -> aclError {
    guard("aclplatformGetDeviceInfo", || {
        non_null(value, "value")?;
        let text = device_info(infoType)?;
        write_c_str_or(value, maxLen, &text, "value", ACL_ERROR_INVALID_PARAM)
    })
}

/// What the core type's instruction set says of `instruction`. The simulator's kernels are
/// host code and it keeps no instruction table, so once the arguments are checked (NULL
/// `instruction` or `value`, a type outside aclplatformCoreType → ACL_ERROR_INVALID_PARAM)
/// every instruction is unknown: ACL_ERROR_INVALID_PARAM, nothing written.
///
/// # Safety
/// `instruction` must be NULL or a NUL-terminated string; `value` NULL or valid for `maxLen`
/// bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclplatformGetInstructionInfo(
    type_: aclplatformCoreType,
    instruction: *const c_char,
    value: *mut c_char,
    maxLen: u32,
) -> aclError {
    let _ = maxLen;
    guard("aclplatformGetInstructionInfo", || {
        let instruction = c_str_or(instruction, "instruction", ACL_ERROR_INVALID_PARAM)?;
        non_null(value, "value")?;
        match type_ {
            ACL_PLATFORM_CORE_TYPE_AI_CORE | ACL_PLATFORM_CORE_TYPE_VECTOR_CORE => fail!(
                ACL_ERROR_INVALID_PARAM,
                "instruction {instruction:?} is not in the simulator's instruction set (it \
                 keeps none: its kernels are host code)"
            ),
            other => fail!(
                ACL_ERROR_INVALID_PARAM,
                "{other} is not an aclplatformCoreType"
            ),
        }
    })
}
