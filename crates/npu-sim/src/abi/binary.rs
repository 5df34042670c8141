//! The older binary load path (aclrtCreateBinary, aclrtBinaryLoad), what a function handle
//! tells about itself, and a binary's exception callback.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use npu_sys::*;

use super::check::c_str;
use super::kernel::store_binary;
use crate::context;
use crate::error::{Res, ensure, fail, guard, guard_value, non_null, write_out};
use crate::handle;
use crate::kernel::{Binary, BinaryData, Function, OpCallback};
use crate::sim::sim;

/// Describes kernel binary data for aclrtBinaryLoad. The bytes are referenced, not copied
/// (as in CANN, the caller frees them), so they must stay valid until loaded. NULL data or
/// length 0 → NULL (the thread's last error is 100000).
///
/// # Safety
/// `data` must be NULL or valid for `dataLen` bytes until the binary is loaded.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateBinary(data: *const c_void, dataLen: usize) -> aclrtBinary {
    guard_value("aclrtCreateBinary", std::ptr::null_mut(), || {
        non_null(data, "data")?;
        ensure!(dataLen != 0, ACL_ERROR_INVALID_PARAM, "dataLen is 0");
        let described = BinaryData {
            address: data as usize,
            len: dataLen,
        };
        let handle = sim()?.binary_data.insert(Arc::new(described))?;
        Ok(handle::to_ptr(handle))
    })
}

/// Destroys an aclrtBinary (binaries loaded from it stay loaded; the data stays the caller's).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyBinary(binary: aclrtBinary) -> aclError {
    guard("aclrtDestroyBinary", || {
        non_null(binary, "binary")?;
        let sim = sim()?;
        let handle = handle::from_ptr(binary);
        sim.binary_data.remove_live(handle).map(drop)
    })
}

/// Loads the binary an aclrtBinary describes onto the current context's device: the bytes are
/// read now, as aclrtBinaryLoadFromData reads them (an ELF shared object or a registry image;
/// anything else → 107000). Needs a current context.
///
/// # Safety
/// The data `binary` describes must still be valid; `binHandle` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryLoad(
    binary: aclrtBinary,
    binHandle: *mut aclrtBinHandle,
) -> aclError {
    guard("aclrtBinaryLoad", || {
        non_null(binary, "binary")?;
        non_null(binHandle, "binHandle")?;
        let sim = sim()?;
        let described = sim.binary_data.resolve(handle::from_ptr(binary))?;
        context::current(sim)?;
        // SAFETY: non-NULL (checked at creation); aclrtCreateBinary's contract is that the
        // caller keeps the `len` bytes valid until they are loaded, which is now.
        let data =
            unsafe { std::slice::from_raw_parts(described.address as *const u8, described.len) };
        store_binary(Binary::from_data(data)?, binHandle)
    })
}

/// Reserved by CANN ("not supported yet"): 207000 after the pointer checks and the lookup of
/// `binHandle` (unloaded → 107017).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryGetFunctionByEntry(
    binHandle: aclrtBinHandle,
    funcEntry: u64,
    funcHandle: *mut aclrtFuncHandle,
) -> aclError {
    guard("aclrtBinaryGetFunctionByEntry", || {
        non_null(binHandle, "binHandle")?;
        non_null(funcHandle, "funcHandle")?;
        // The handle before the feature, as every call looks its handles up first.
        sim()?.binaries.resolve(handle::from_ptr(binHandle))?;
        fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "looking a kernel up by entry ({funcEntry:#x}) is reserved and not supported; use \
             aclrtBinaryGetFunction with the kernel's name"
        )
    })
}

fn function(func: *const c_void) -> Res<Arc<Function>> {
    non_null(func, "funcHandle")?;
    sim()?.functions.resolve(handle::from_ptr(func))
}

/// The binary a function was resolved from.
///
/// # Safety
/// `binHandle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFunctionGetBinary(
    funcHandle: aclrtFuncHandle,
    binHandle: *mut aclrtBinHandle,
) -> aclError {
    guard("aclrtFunctionGetBinary", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(binHandle, "binHandle")?;
        let function = function(funcHandle)?;
        write_out(binHandle, "binHandle", handle::to_ptr(function.binary))
    })
}

/// The kernel's name, NUL-terminated, into `name` (`maxLen` bytes). A buffer too small for
/// the name and its NUL → 107000, nothing written; `maxLen` 0 is refused so before the
/// function is looked up, after the NULL checks.
///
/// # Safety
/// `name` must be NULL or valid for `maxLen` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFunctionName(
    funcHandle: aclrtFuncHandle,
    maxLen: u32,
    name: *mut c_char,
) -> aclError {
    guard("aclrtGetFunctionName", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(name, "name")?;
        super::check::check_text_room(maxLen, "kernel name")?;
        let function = function(funcHandle)?;
        super::check::write_c_str(name, maxLen, &function.name, "kernel name")
    })
}

/// Where the kernel's code starts. A simulated kernel is one host function that either engine
/// runs (the ENGINE_TYPE launch attribute chooses), so both addresses are its entry.
///
/// # Safety
/// `aicAddr` and `aivAddr` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFunctionAddr(
    funcHandle: aclrtFuncHandle,
    aicAddr: *mut *mut c_void,
    aivAddr: *mut *mut c_void,
) -> aclError {
    guard("aclrtGetFunctionAddr", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(aicAddr, "aicAddr")?;
        non_null(aivAddr, "aivAddr")?;
        let function = function(funcHandle)?;
        let address = function.code_address() as *mut c_void;
        write_out(aicAddr, "aicAddr", address)?;
        write_out(aivAddr, "aivAddr", address)
    })
}

/// The size of the kernel's code: as for aclrtGetFunctionAddr, both engines run the same
/// code, so both sizes are its ELF symbol's size (0 for a Rust closure registered in-process,
/// which has no symbol). NULL or stale handle → 100000 / 107017, NULL output → 100000.
///
/// # Safety
/// `aicSize` and `aivSize` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFunctionSize(
    funcHandle: aclrtFuncHandle,
    aicSize: *mut usize,
    aivSize: *mut usize,
) -> aclError {
    guard("aclrtGetFunctionSize", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(aicSize, "aicSize")?;
        non_null(aivSize, "aivSize")?;
        let function = function(funcHandle)?;
        let size = function.code_size();
        write_out(aicSize, "aicSize", size)?;
        write_out(aivSize, "aivSize", size)
    })
}

/// An attribute of the kernel as its binary gives it: a simulated kernel runs on whichever
/// core its launch chooses (ACL_KERNEL_TYPE_AICORE), is no mix kernel and so has no
/// Cube/Vector ratio (0), and declares the normal schedule mode (0). Another attribute → 107000,
/// before the function is looked up (after the NULL checks).
///
/// # Safety
/// `attrValue` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFunctionAttribute(
    funcHandle: aclrtFuncHandle,
    attrType: aclrtFuncAttribute,
    attrValue: *mut i64,
) -> aclError {
    guard("aclrtGetFunctionAttribute", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(attrValue, "attrValue")?;
        // The attribute is a value: checked before the lookup, as every query's values are.
        let value = match attrType {
            ACL_FUNC_ATTR_KERNEL_TYPE => i64::from(ACL_KERNEL_TYPE_AICORE),
            ACL_FUNC_ATTR_KERNEL_RATIO | ACL_FUNC_ATTR_KERNEL_SCHED_MODE => 0,
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "attrType {other} is not an aclrtFuncAttribute"
            ),
        };
        function(funcHandle)?;
        write_out(attrValue, "attrValue", value)
    })
}

/// How many parameters the kernel's declared parameter list has (none declared → 107000).
///
/// # Safety
/// `paramCount` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFunctionGetParamCount(
    func: *const c_void,
    paramCount: *mut usize,
) -> aclError {
    guard("aclrtFunctionGetParamCount", || {
        non_null(func, "funcHandle")?;
        non_null(paramCount, "paramCount")?;
        let function = function(func)?;
        let count = function.param_list()?.len();
        write_out(paramCount, "paramCount", count)
    })
}

/// Where parameter `paramIndex` of the kernel's declared parameter list lies in the packed
/// arguments, and its size (none declared, or an index past the list → 107000).
///
/// # Safety
/// `paramOffset` and `paramSize` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFunctionGetParamInfo(
    func: *const c_void,
    paramIndex: usize,
    paramOffset: *mut usize,
    paramSize: *mut usize,
) -> aclError {
    guard("aclrtFunctionGetParamInfo", || {
        non_null(func, "funcHandle")?;
        non_null(paramOffset, "paramOffset")?;
        non_null(paramSize, "paramSize")?;
        let function = function(func)?;
        let params = function.param_list()?;
        let Some(&(offset, size)) = params.get(paramIndex) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "paramIndex {paramIndex} is past the kernel's {} parameters",
                params.len()
            );
        };
        write_out(paramOffset, "paramOffset", offset)?;
        write_out(paramSize, "paramSize", size)
    })
}

/// The dynamic UB buffer a block of a SIMT kernel may use; simulated kernels are not SIMT
/// kernels, for which CANN reports 0. `flags` must be 0 (107000, before the function is
/// looked up).
///
/// # Safety
/// `dynamicUbufSize` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFunctionGetAvailDynUbufPerBlock(
    func: *mut c_void,
    flags: u32,
    dynamicUbufSize: *mut usize,
) -> aclError {
    guard("aclrtFunctionGetAvailDynUbufPerBlock", || {
        non_null(func, "funcHandle")?;
        non_null(dynamicUbufSize, "dynamicUbufSize")?;
        ensure!(
            flags == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "flags is reserved and must be 0, not {flags}"
        );
        function(func)?;
        write_out(dynamicUbufSize, "dynamicUbufSize", 0)
    })
}

/// Registers an AI CPU kernel of a binary loaded from data. CANN refuses binaries of other
/// kernels with 107000, and a simulated binary holds host-function kernels only, so after the
/// checks (NULL arguments → 100000, a stale binary → 107017) it is always refused.
///
/// # Safety
/// `funcName` and `kernelName` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRegisterCpuFunc(
    handle: aclrtBinHandle,
    funcName: *const c_char,
    kernelName: *const c_char,
    funcHandle: *mut aclrtFuncHandle,
) -> aclError {
    guard("aclrtRegisterCpuFunc", || {
        non_null(handle, "handle")?;
        let entry = c_str(funcName, "funcName")?;
        let op_type = c_str(kernelName, "kernelName")?;
        non_null(funcHandle, "funcHandle")?;
        sim()?.binaries.resolve(handle::from_ptr(handle))?;
        fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "the binary holds no AI CPU kernels (simulated kernels are host functions), so \
             {entry:?} ({op_type:?}) cannot be registered as one"
        )
    })
}

/// Sets the binary's exception callback (the last one set wins): when one of its kernels fails,
/// it is called with the failure's info and `userData`, after the process-wide exception
/// callbacks. NULL callback → 100000.
///
/// # Safety
/// `callback` must be safe to call from any thread with `userData`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinarySetExceptionCallback(
    binHandle: aclrtBinHandle,
    callback: aclrtOpExceptionCallback,
    userData: *mut c_void,
) -> aclError {
    guard("aclrtBinarySetExceptionCallback", || {
        non_null(binHandle, "binHandle")?;
        let Some(func) = callback else {
            fail!(ACL_ERROR_INVALID_PARAM, "callback is NULL");
        };
        let binary = sim()?.binaries.resolve(handle::from_ptr(binHandle))?;
        binary.set_exception_callback(OpCallback {
            func,
            user_data: userData as usize,
        });
        Ok(())
    })
}
