//! aclDataBuffer: creation, queries, update and destruction (the model is in
//! `crate::data_buffer`).

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use crate::data_buffer::DataBuffer;
use crate::error::{Res, ensure, guard, guard_value, non_null};
use crate::handle;
use crate::sim::sim;

/// The live buffer a handle names: NULL → 100000, stale or forged → 107017.
fn buffer(dataBuffer: *const aclDataBuffer) -> Res<Arc<DataBuffer>> {
    non_null(dataBuffer, "dataBuffer")?;
    sim()?
        .data_buffers
        .resolve(handle::from_ptr(dataBuffer.cast()))
}

/// Describes `size` bytes at `data` (caller-owned memory, not copied or checked). NULL data
/// with a non-zero size → NULL (error 100000); NULL data with size 0 is an empty buffer.
///
/// # Safety
/// No preconditions: the memory is only described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateDataBuffer(data: *mut c_void, size: usize) -> *mut aclDataBuffer {
    guard_value("aclCreateDataBuffer", std::ptr::null_mut(), || {
        let buffer = DataBuffer::new("aclCreateDataBuffer", data as usize, size)?;
        let handle = sim()?.data_buffers.insert(Arc::new(buffer))?;
        Ok(handle::to_ptr(handle).cast())
    })
}

/// Destroys a data buffer (not the memory it describes). NULL → 100000; a buffer already
/// destroyed or never created → 107017.
///
/// # Safety
/// No preconditions: the handle is checked, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyDataBuffer(dataBuffer: *const aclDataBuffer) -> aclError {
    guard("aclDestroyDataBuffer", || {
        non_null(dataBuffer, "dataBuffer")?;
        sim()?
            .data_buffers
            .remove_live(handle::from_ptr(dataBuffer.cast()))
            .map(drop)
    })
}

/// Makes a data buffer describe `size` bytes at `data`, with the rules of aclCreateDataBuffer.
/// NULL buffer, or NULL `data` with a size, → 100000 before the buffer is looked up; a dead
/// one → 107017.
///
/// # Safety
/// No preconditions: the handle is checked, the memory only described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclUpdateDataBuffer(
    dataBuffer: *mut aclDataBuffer,
    data: *mut c_void,
    size: usize,
) -> aclError {
    guard("aclUpdateDataBuffer", || {
        // A NULL `data` with a size is the ACL layer's refusal, before the buffer is looked up.
        non_null(dataBuffer, "dataBuffer")?;
        crate::data_buffer::check("aclUpdateDataBuffer", data as usize, size)?;
        buffer(dataBuffer)?.update(data as usize, size);
        Ok(())
    })
}

/// The address a data buffer describes; NULL for a NULL or dead buffer (error 100000 /
/// 107017) and for an empty one.
///
/// # Safety
/// No preconditions: the handle is checked, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetDataBufferAddr(dataBuffer: *const aclDataBuffer) -> *mut c_void {
    guard_value("aclGetDataBufferAddr", std::ptr::null_mut(), || {
        Ok(buffer(dataBuffer)?.get().0 as *mut c_void)
    })
}

/// The size in bytes a data buffer describes; 0 for a NULL or dead buffer (error 100000 /
/// 107017).
///
/// # Safety
/// No preconditions: the handle is checked, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetDataBufferSizeV2(dataBuffer: *const aclDataBuffer) -> usize {
    guard_value("aclGetDataBufferSizeV2", 0, || {
        Ok(buffer(dataBuffer)?.get().1)
    })
}

/// The deprecated 32-bit form of aclGetDataBufferSizeV2: a size that does not fit → 0 (error
/// 100000) rather than a truncated size.
///
/// # Safety
/// No preconditions: the handle is checked, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetDataBufferSize(dataBuffer: *const aclDataBuffer) -> u32 {
    guard_value("aclGetDataBufferSize", 0, || {
        let size = buffer(dataBuffer)?.get().1;
        ensure!(
            u32::try_from(size).is_ok(),
            ACL_ERROR_INVALID_PARAM,
            "the buffer's {size} bytes do not fit the deprecated 32-bit size: use aclGetDataBufferSizeV2"
        );
        Ok(size as u32)
    })
}
