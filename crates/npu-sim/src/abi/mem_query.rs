//! Questions about memory: the allocation an address lies in, and the device's memory use.

use std::ffi::c_void;

use npu_sys::*;

use crate::error::{ensure, fail, guard, non_null, write_out};
use crate::sim::sim;

/// The name aclrtGetMemUsageInfo reports the simulator's one memory user under: all device
/// memory (aclrtMalloc* and pools) is the runtime's.
const COMPONENT: &[u8] = b"runtime";

/// The start and size of the device or aclrtMallocHost allocation containing `ptr` (the size
/// the runtime reserved, rounding and padding included); other addresses → 107000.
///
/// # Safety
/// `pbase` and `psize` must each be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemGetAddressRange(
    ptr: *mut c_void,
    pbase: *mut *mut c_void,
    psize: *mut usize,
) -> aclError {
    guard("aclrtMemGetAddressRange", || {
        non_null(ptr, "ptr")?;
        non_null(pbase, "pbase")?;
        non_null(psize, "psize")?;
        let Some((base, len, _)) = sim()?.memory.allocation_of(ptr as usize) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{ptr:p} is not in memory allocated by the runtime"
            );
        };
        write_out(pbase, "pbase", base as *mut c_void)?;
        write_out(psize, "psize", len)
    })
}

fn usage_entry(current: u64, peak: u64) -> aclrtMemUsageInfo {
    let mut name = [0; 32];
    for (to, &from) in name.iter_mut().zip(COMPONENT) {
        *to = from as core::ffi::c_char;
    }
    aclrtMemUsageInfo {
        name,
        curMemSize: current,
        memPeakSize: peak,
        reserved: [0; 8],
    }
}

/// The device memory use of each component on `deviceId`, largest first: the simulator has one,
/// `"runtime"`, whose current and peak use are the device's. `inputNum` 0 → 100000.
///
/// # Safety
/// `memUsageInfo` must be NULL or valid for `inputNum` writes; `outputNum` NULL or valid for a
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemUsageInfo(
    deviceId: i32,
    memUsageInfo: *mut aclrtMemUsageInfo,
    inputNum: usize,
    outputNum: *mut usize,
) -> aclError {
    guard("aclrtGetMemUsageInfo", || {
        non_null(memUsageInfo, "memUsageInfo")?;
        non_null(outputNum, "outputNum")?;
        ensure!(inputNum != 0, ACL_ERROR_INVALID_PARAM, "inputNum is 0");
        let device = sim()?.device(deviceId.into())?;
        device.check_alive()?;
        write_out(
            memUsageInfo,
            "memUsageInfo",
            usage_entry(device.used(), device.peak()),
        )?;
        write_out(outputNum, "outputNum", 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_component_name_is_nul_terminated() {
        let entry = usage_entry(1, 2);
        // SAFETY: the array holds a NUL within its 32 bytes.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.name.as_ptr()) };
        assert_eq!(name.to_bytes(), COMPONENT);
        assert_eq!((entry.curMemSize, entry.memPeakSize), (1, 2));
    }
}
