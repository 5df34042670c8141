//! Shared buffers (aclrtAllocBuf, aclrtGetBufData, the buffer chains and the rest). CANN's
//! runtime API reference lists them as reserved and not supported yet, so no mbuf can exist:
//! each function checks its pointer arguments (NULL → 100000), then returns 207000 and writes
//! nothing. A program that probes for them gets the answer a CANN release that reserves them
//! gives, and links either way.

use std::ffi::c_void;

use npu_sys::*;

use super::check::refuse_after_checks;

/// Checks the pointer arguments (NULL → 100000), then refuses the call.
fn refuse(api: &'static str, pointers: &[(*const c_void, &str)]) -> aclError {
    refuse_after_checks(
        api,
        pointers,
        "shared buffers (aclrtMbuf, reserved by CANN)",
    )
}

/// Reserved: NULL buf → 100000, else 207000 (nothing allocated or written).
///
/// # Safety
/// No preconditions; nothing is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocBuf(buf: *mut aclrtMbuf, size: usize) -> aclError {
    let _ = size;
    refuse("aclrtAllocBuf", &[(buf.cast(), "buf")])
}

/// Reserved: NULL buf → 100000, else 207000 (nothing freed).
///
/// # Safety
/// No preconditions; the handle is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeBuf(buf: aclrtMbuf) -> aclError {
    refuse("aclrtFreeBuf", &[(buf.cast_const(), "buf")])
}

/// Reserved: NULL buf, dataPtr or size → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetBufData(
    buf: aclrtMbuf,
    dataPtr: *mut *mut c_void,
    size: *mut usize,
) -> aclError {
    refuse(
        "aclrtGetBufData",
        &[
            (buf.cast_const(), "buf"),
            (dataPtr.cast(), "dataPtr"),
            (size.cast(), "size"),
        ],
    )
}

/// Reserved: NULL buf or dataPtr → 100000, else 207000 (nothing read).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetBufUserData(
    buf: aclrtMbuf,
    dataPtr: *const c_void,
    size: usize,
    offset: usize,
) -> aclError {
    let _ = (size, offset);
    refuse(
        "aclrtSetBufUserData",
        &[(buf.cast_const(), "buf"), (dataPtr, "dataPtr")],
    )
}

/// Reserved: NULL buf or dataPtr → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetBufUserData(
    buf: aclrtMbuf,
    dataPtr: *mut c_void,
    size: usize,
    offset: usize,
) -> aclError {
    let _ = (size, offset);
    refuse(
        "aclrtGetBufUserData",
        &[(buf.cast_const(), "buf"), (dataPtr.cast_const(), "dataPtr")],
    )
}

/// Reserved: NULL buf or len → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetBufDataLen(buf: aclrtMbuf, len: *mut usize) -> aclError {
    refuse(
        "aclrtGetBufDataLen",
        &[(buf.cast_const(), "buf"), (len.cast(), "len")],
    )
}

/// Reserved: NULL buf → 100000, else 207000.
///
/// # Safety
/// No preconditions; the handle is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetBufDataLen(buf: aclrtMbuf, len: usize) -> aclError {
    let _ = len;
    refuse("aclrtSetBufDataLen", &[(buf.cast_const(), "buf")])
}

/// Reserved: NULL buf or newBuf → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCopyBufRef(buf: aclrtMbuf, newBuf: *mut aclrtMbuf) -> aclError {
    refuse(
        "aclrtCopyBufRef",
        &[(buf.cast_const(), "buf"), (newBuf.cast(), "newBuf")],
    )
}

/// Reserved: NULL headBuf or buf → 100000, else 207000.
///
/// # Safety
/// No preconditions; the handles are never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAppendBufChain(headBuf: aclrtMbuf, buf: aclrtMbuf) -> aclError {
    refuse(
        "aclrtAppendBufChain",
        &[(headBuf.cast_const(), "headBuf"), (buf.cast_const(), "buf")],
    )
}

/// Reserved: NULL headBuf or buf → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetBufFromChain(
    headBuf: aclrtMbuf,
    index: u32,
    buf: *mut aclrtMbuf,
) -> aclError {
    let _ = index;
    refuse(
        "aclrtGetBufFromChain",
        &[(headBuf.cast_const(), "headBuf"), (buf.cast(), "buf")],
    )
}

/// Reserved: NULL headBuf or num → 100000, else 207000 (nothing written).
///
/// # Safety
/// No preconditions; nothing is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetBufChainNum(headBuf: aclrtMbuf, num: *mut u32) -> aclError {
    refuse(
        "aclrtGetBufChainNum",
        &[(headBuf.cast_const(), "headBuf"), (num.cast(), "num")],
    )
}
