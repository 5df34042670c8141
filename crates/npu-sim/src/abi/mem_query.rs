//! Questions about memory: the allocation an address lies in, its type, and the device's
//! memory use.

use std::ffi::c_void;

use npu_sys::*;

use super::check::array;
use crate::error::{ensure, fail, guard, non_null, write_out};
use crate::memory::AllocKind;
use crate::sim::{Sim, sim};

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

/// The aclrtCheckMemType type of an address: RSVD in a range reserved with
/// aclrtReserveMemAddress (mapped or not), DEV in other device memory, none (0) elsewhere. The
/// simulator has no DVPP allocator, so no address is DVPP.
fn mem_type(sim: &Sim, address: usize) -> u32 {
    if sim.vmm.reserved(address) {
        ACL_RT_MEM_TYPE_RSVD
    } else if let Some((_, _, AllocKind::Device { .. })) = sim.memory.allocation_of(address) {
        ACL_RT_MEM_TYPE_DEV
    } else {
        0
    }
}

/// Whether every address of `addrList` is of one of the types `memType` or-s together
/// (ACL_RT_MEM_TYPE_DEV, _DVPP, _RSVD): `*checkResult` 1 if so, 0 if not. NULL list or result,
/// `size` 0, a `memType` of no or unknown type bits, or a non-zero `reserve` → 100000, the NULL
/// pointers first.
///
/// # Safety
/// `addrList` must be NULL or valid for `size` reads; `checkResult` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCheckMemType(
    addrList: *mut *mut c_void,
    size: u32,
    memType: u32,
    checkResult: *mut u32,
    reserve: u32,
) -> aclError {
    guard("aclrtCheckMemType", || {
        non_null(addrList, "addrList")?;
        non_null(checkResult, "checkResult")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let known = ACL_RT_MEM_TYPE_DEV | ACL_RT_MEM_TYPE_DVPP | ACL_RT_MEM_TYPE_RSVD;
        ensure!(
            memType != 0 && memType & !known == 0,
            ACL_ERROR_INVALID_PARAM,
            "memType {memType:#x} is not an or of ACL_RT_MEM_TYPE_DEV, _DVPP and _RSVD"
        );
        ensure!(
            reserve == 0,
            ACL_ERROR_INVALID_PARAM,
            "reserve must be 0, not {reserve}"
        );
        let addresses = array(addrList.cast_const(), size as usize, "addrList")?;
        let sim = sim()?;
        let matches = addresses
            .iter()
            .all(|&address| mem_type(sim, address as usize) & memType != 0);
        write_out(checkResult, "checkResult", u32::from(matches))
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
