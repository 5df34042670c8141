//! Stream configuration handles (aclrtCreateStreamV2), stream attributes and the count of
//! streams still available.

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::sync::Mutex;

use npu_sys::*;

use super::check::optional;
use super::device::LEAST_PRIORITY;
use crate::context;
use crate::error::{Res, ensure, fail, guard, guard_value, non_null, write_out};
use crate::sim::sim;
use crate::stream::MAX_STREAMS_PER_DEVICE;
use crate::sync::lock;

/// The configuration handles aclrtCreateStreamConfigHandle gave out and that are not destroyed
/// yet: the handle is a plain struct the caller holds a pointer to, so this is how a stale or
/// foreign pointer is told apart (and never freed or written through).
static CONFIGS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// A configuration handle argument, checked to be live.
fn config(handle: *const aclrtStreamConfigHandle) -> Res<*mut aclrtStreamConfigHandle> {
    non_null(handle, "handle")?;
    ensure!(
        lock(&CONFIGS).contains(&(handle as usize)),
        ACL_ERROR_RT_PARAM_INVALID,
        "{handle:p} is not a live aclrtStreamConfigHandle (destroyed, or not from \
         aclrtCreateStreamConfigHandle)"
    );
    Ok(handle.cast_mut())
}

/// A zeroed stream configuration (no work memory, flags 0, priority 0); NULL only if the
/// process is out of memory. Free it with aclrtDestroyStreamConfigHandle.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamConfigHandle() -> *mut aclrtStreamConfigHandle {
    guard_value(
        "aclrtCreateStreamConfigHandle",
        std::ptr::null_mut(),
        || {
            let handle = Box::into_raw(Box::<aclrtStreamConfigHandle>::default());
            lock(&CONFIGS).insert(handle as usize);
            Ok(handle)
        },
    )
}

/// Frees a configuration handle. NULL → 100000; a pointer that is not a live handle → 107000.
///
/// # Safety
/// No preconditions beyond the C contract: the pointer is checked against the live handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStreamConfigHandle(
    handle: *mut aclrtStreamConfigHandle,
) -> aclError {
    guard("aclrtDestroyStreamConfigHandle", || {
        let handle = config(handle)?;
        lock(&CONFIGS).remove(&(handle as usize));
        // SAFETY: a live handle is a Box this module leaked and has not freed (just removed
        // from the live set, so it is freed once).
        drop(unsafe { Box::from_raw(handle) });
        Ok(())
    })
}

/// Sets one option of a configuration handle from `valueSize` bytes at `attrValue`: WORK_ADDR_PTR
/// (a `void *`), WORK_SIZE (a `size_t`), FLAG (the creation flags, `uint32_t` or `size_t`),
/// PRIORITY (a `uint32_t`). NULL handle or value, an unknown option or a size that does not
/// fit it → 100000; a handle that is not live → 107000.
///
/// # Safety
/// `attrValue` must be NULL or point at `valueSize` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamConfigOpt(
    handle: *mut aclrtStreamConfigHandle,
    attr: aclrtStreamConfigAttr,
    attrValue: *const c_void,
    valueSize: usize,
) -> aclError {
    guard("aclrtSetStreamConfigOpt", || {
        non_null(handle, "handle")?;
        non_null(attrValue, "attrValue")?;
        let handle = config(handle)?;
        let bytes = super::check::bytes(attrValue, valueSize, "attrValue")?;
        let read = |size: usize| -> Res<u64> {
            ensure!(
                valueSize == size,
                ACL_ERROR_INVALID_PARAM,
                "option {attr} takes {size} bytes, not {valueSize}"
            );
            let mut word = [0u8; 8];
            word[..size].copy_from_slice(bytes);
            Ok(u64::from_ne_bytes(word))
        };
        // SAFETY: a live handle points at the struct this module allocated.
        let config = unsafe { &mut *handle };
        match attr {
            ACL_RT_STREAM_WORK_ADDR_PTR => {
                config.workptr = read(size_of::<usize>())? as *mut c_void
            }
            ACL_RT_STREAM_WORK_SIZE => config.workSize = read(size_of::<usize>())? as usize,
            ACL_RT_STREAM_FLAG => {
                let size = if valueSize == 4 {
                    4
                } else {
                    size_of::<usize>()
                };
                config.flag = read(size)? as usize;
            }
            ACL_RT_STREAM_PRIORITY => config.priority = read(4)? as u32,
            _ => fail!(
                ACL_ERROR_INVALID_PARAM,
                "{attr} is not an aclrtStreamConfigAttr"
            ),
        }
        Ok(())
    })
}

/// Creates a stream in the current context from a configuration handle, as
/// aclrtCreateStreamWithConfig(priority, flag) does. The work memory options are accepted and
/// unused: they serve models, which the simulator does not run. NULL → 100000; a handle that
/// is not live → 107000.
///
/// # Safety
/// `stream` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamV2(
    stream: *mut aclrtStream,
    handle: *const aclrtStreamConfigHandle,
) -> aclError {
    guard("aclrtCreateStreamV2", || {
        non_null(stream, "stream")?;
        let handle = config(handle)?;
        // SAFETY: a live handle points at the struct this module allocated.
        let config = unsafe { handle.read() };
        super::stream::create(stream, config.priority, config.flag as u32)
    })
}

/// How many more streams the current context's device can create.
///
/// # Safety
/// `streamCount` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamAvailableNum(streamCount: *mut u32) -> aclError {
    guard("aclrtGetStreamAvailableNum", || {
        non_null(streamCount, "streamCount")?;
        let ctx = context::current(sim()?)?;
        let live = ctx
            .device
            .live_streams
            .load(std::sync::atomic::Ordering::Acquire);
        write_out(
            streamCount,
            "streamCount",
            MAX_STREAMS_PER_DEVICE.saturating_sub(live) as u32,
        )
    })
}

/// A 0/1 switch value.
fn switch(name: &str, value: u32) -> Res<u32> {
    ensure!(
        value <= 1,
        ACL_ERROR_INVALID_PARAM,
        "{name} must be 0 or 1, not {value}"
    );
    Ok(value)
}

/// Sets a stream attribute (NULL is the default stream, except for FAILURE_MODE → 107000):
/// FAILURE_MODE as aclrtSetStreamFailureMode; FLOAT_OVERFLOW_CHECK and CACHE_OP_INFO (0/1) and
/// USER_CUSTOM_TAG are stored (no effect: no overflow detection or operator cache here);
/// PRIORITY 0..=7 (107000 beyond). NULL value, unknown attribute or a bad switch → 100000.
///
/// # Safety
/// `value` must be NULL or point at a readable aclrtStreamAttrValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamAttribute(
    stream: aclrtStream,
    stmAttrType: aclrtStreamAttr,
    value: *mut aclrtStreamAttrValue,
) -> aclError {
    guard("aclrtSetStreamAttribute", || {
        let Some(value) = optional(value) else {
            fail!(ACL_ERROR_INVALID_PARAM, "value is NULL");
        };
        let (_, target) = context::owned_stream(sim()?, stream)?;
        // SAFETY: every field of the union is plain integers; each arm reads the one its
        // attribute defines.
        unsafe {
            match stmAttrType {
                ACL_STREAM_ATTR_FAILURE_MODE => {
                    ensure!(
                        !stream.is_null(),
                        ACL_ERROR_RT_PARAM_INVALID,
                        "the failure mode of the default stream cannot be set"
                    );
                    let mode = value.failureMode;
                    ensure!(
                        mode == u64::from(ACL_CONTINUE_ON_FAILURE)
                            || mode == u64::from(ACL_STOP_ON_FAILURE),
                        ACL_ERROR_INVALID_PARAM,
                        "failure mode {mode} is neither ACL_CONTINUE_ON_FAILURE nor \
                         ACL_STOP_ON_FAILURE"
                    );
                    target.set_failure_mode(mode);
                }
                ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK => {
                    lock(&target.attributes).overflow_switch =
                        switch("overflowSwitch", value.overflowSwitch)?;
                }
                ACL_STREAM_ATTR_USER_CUSTOM_TAG => {
                    lock(&target.attributes).user_custom_tag = value.userCustomTag;
                }
                ACL_STREAM_ATTR_CACHE_OP_INFO => {
                    lock(&target.attributes).cache_op_info =
                        switch("cacheOpInfoSwitch", value.cacheOpInfoSwitch)?;
                }
                ACL_STREAM_ATTR_PRIORITY => {
                    let priority = value.streamPriority;
                    ensure!(
                        priority <= LEAST_PRIORITY,
                        ACL_ERROR_RT_PARAM_INVALID,
                        "priority {priority} is outside 0..={LEAST_PRIORITY}"
                    );
                    target.set_priority(priority);
                }
                _ => fail!(
                    ACL_ERROR_INVALID_PARAM,
                    "{stmAttrType} is not an aclrtStreamAttr"
                ),
            }
        }
        Ok(())
    })
}

/// Reads a stream attribute (NULL is the default stream). NULL value or unknown attribute →
/// 100000.
///
/// # Safety
/// `value` must be NULL or valid for a write of an aclrtStreamAttrValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamAttribute(
    stream: aclrtStream,
    stmAttrType: aclrtStreamAttr,
    value: *mut aclrtStreamAttrValue,
) -> aclError {
    guard("aclrtGetStreamAttribute", || {
        non_null(value, "value")?;
        let target = context::any_stream(sim()?, stream)?;
        let attributes = *lock(&target.attributes);
        let mut out = aclrtStreamAttrValue::default();
        match stmAttrType {
            ACL_STREAM_ATTR_FAILURE_MODE => out.failureMode = target.failure_mode(),
            ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK => out.overflowSwitch = attributes.overflow_switch,
            ACL_STREAM_ATTR_USER_CUSTOM_TAG => out.userCustomTag = attributes.user_custom_tag,
            ACL_STREAM_ATTR_CACHE_OP_INFO => out.cacheOpInfoSwitch = attributes.cache_op_info,
            ACL_STREAM_ATTR_PRIORITY => out.streamPriority = target.priority(),
            _ => fail!(
                ACL_ERROR_INVALID_PARAM,
                "{stmAttrType} is not an aclrtStreamAttr"
            ),
        }
        write_out(value, "value", out)
    })
}
