//! Stream configuration handles (aclrtCreateStreamV2, unsupported on an Atlas A2), stream
//! attributes and the count of streams still available.

use std::ffi::c_void;

use npu_sys::*;

use super::check::optional;
use super::device::LEAST_PRIORITY;
use crate::context;
use crate::error::{Res, ensure, fail, guard, guard_value, non_null, write_out};
use crate::sim::sim;
use crate::stream::{Attributes, Stream};
use crate::sync::lock;

/// The stream configuration functions are documented as unsupported on an Atlas A2 (and on
/// every product but one the simulator does not present), so a program written for one fails
/// with 207000 here as it would there; the argument checks come first, as a runtime makes
/// them before asking the driver for the feature.
fn unsupported<T>() -> Res<T> {
    fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "stream configuration handles are not supported on an Atlas A2"
    )
}

/// Not supported on an Atlas A2: returns NULL (the recent error message says why).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamConfigHandle() -> *mut aclrtStreamConfigHandle {
    guard_value(
        "aclrtCreateStreamConfigHandle",
        std::ptr::null_mut(),
        unsupported,
    )
}

/// Not supported on an Atlas A2: NULL → 100000, any other handle → 207000.
///
/// # Safety
/// No preconditions: the handle is never read or freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStreamConfigHandle(
    handle: *mut aclrtStreamConfigHandle,
) -> aclError {
    guard("aclrtDestroyStreamConfigHandle", || {
        non_null(handle, "handle")?;
        unsupported()
    })
}

/// Not supported on an Atlas A2: the arguments in parameter order first (NULL handle, an
/// `attr` outside aclrtStreamConfigAttr, NULL value, `valueSize` 0 → 100000), otherwise
/// 207000.
///
/// # Safety
/// No preconditions: neither pointer is read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamConfigOpt(
    handle: *mut aclrtStreamConfigHandle,
    attr: aclrtStreamConfigAttr,
    attrValue: *const c_void,
    valueSize: usize,
) -> aclError {
    guard("aclrtSetStreamConfigOpt", || {
        non_null(handle, "handle")?;
        ensure!(
            attr <= ACL_RT_STREAM_PRIORITY,
            ACL_ERROR_INVALID_PARAM,
            "attr {attr} is not an aclrtStreamConfigAttr"
        );
        non_null(attrValue, "attrValue")?;
        ensure!(valueSize != 0, ACL_ERROR_INVALID_PARAM, "valueSize is 0");
        unsupported()
    })
}

/// Not supported on an Atlas A2: NULL stream or handle → 100000, otherwise 207000 (no
/// stream is created).
///
/// # Safety
/// No preconditions: neither pointer is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamV2(
    stream: *mut aclrtStream,
    handle: *const aclrtStreamConfigHandle,
) -> aclError {
    guard("aclrtCreateStreamV2", || {
        non_null(stream, "stream")?;
        non_null(handle, "handle")?;
        unsupported()
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
            crate::stream::MAX_STREAMS_PER_DEVICE.saturating_sub(live) as u32,
        )
    })
}

/// A 0/1 switch value.
pub(super) fn switch(name: &str, value: u32) -> Res<u32> {
    ensure!(
        value <= 1,
        ACL_ERROR_INVALID_PARAM,
        "{name} must be 0 or 1, not {value}"
    );
    Ok(value)
}

/// A failure mode argument: ACL_CONTINUE_ON_FAILURE or ACL_STOP_ON_FAILURE (100000 otherwise).
pub(super) fn failure_mode(mode: u64) -> Res<u64> {
    ensure!(
        mode == u64::from(ACL_CONTINUE_ON_FAILURE) || mode == u64::from(ACL_STOP_ON_FAILURE),
        ACL_ERROR_INVALID_PARAM,
        "failure mode {mode} is neither ACL_CONTINUE_ON_FAILURE nor ACL_STOP_ON_FAILURE"
    );
    Ok(mode)
}

/// A stream attribute to set, checked as far as the arguments alone decide.
enum Setting {
    FailureMode(u64),
    OverflowSwitch(u32),
    UserCustomTag(u32),
    CacheOpInfo(u32),
    Priority(u32),
}

/// The attribute aclrtSetStreamAttribute is asked to set: an unknown attribute, a failure mode
/// or a switch outside its values → 100000; a priority above 7 → 107000.
fn setting(kind: aclrtStreamAttr, value: &aclrtStreamAttrValue) -> Res<Setting> {
    // SAFETY: every field of the union is plain integers; each arm reads the one its attribute
    // defines.
    unsafe {
        Ok(match kind {
            ACL_STREAM_ATTR_FAILURE_MODE => Setting::FailureMode(failure_mode(value.failureMode)?),
            ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK => {
                Setting::OverflowSwitch(switch("overflowSwitch", value.overflowSwitch)?)
            }
            ACL_STREAM_ATTR_USER_CUSTOM_TAG => Setting::UserCustomTag(value.userCustomTag),
            ACL_STREAM_ATTR_CACHE_OP_INFO => {
                Setting::CacheOpInfo(switch("cacheOpInfoSwitch", value.cacheOpInfoSwitch)?)
            }
            ACL_STREAM_ATTR_PRIORITY => {
                let priority = value.streamPriority;
                ensure!(
                    priority <= LEAST_PRIORITY,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "priority {priority} is outside 0..={LEAST_PRIORITY}"
                );
                Setting::Priority(priority)
            }
            _ => return unknown_attribute(kind),
        })
    }
}

fn unknown_attribute<T>(kind: aclrtStreamAttr) -> Res<T> {
    fail!(ACL_ERROR_INVALID_PARAM, "{kind} is not an aclrtStreamAttr")
}

/// Sets a stream attribute (NULL is the default stream, except for FAILURE_MODE → 107000):
/// FAILURE_MODE as aclrtSetStreamFailureMode; FLOAT_OVERFLOW_CHECK (0/1) and USER_CUSTOM_TAG
/// are stored (no effect: no overflow detection here); CACHE_OP_INFO (0/1) is the switch
/// aclrtCacheLastTaskOpInfo obeys in a capture begun on the stream; PRIORITY 0..=7 (107000
/// beyond). NULL value, unknown attribute or a bad switch → 100000. The
/// attribute and its value are checked before the stream is looked up.
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
        let setting = setting(stmAttrType, &value)?;
        let (_, target) = context::owned_stream(sim()?, stream)?;
        match setting {
            Setting::FailureMode(mode) => {
                // The default stream, named by NULL or by its own handle
                // (aclrtCtxGetCurrentDefaultStream): the reference excludes the stream.
                ensure!(
                    !target.is_default,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "the failure mode of the default stream cannot be set"
                );
                target.set_failure_mode(mode);
            }
            Setting::OverflowSwitch(on) => lock(&target.attributes).overflow_switch = on,
            Setting::UserCustomTag(tag) => lock(&target.attributes).user_custom_tag = tag,
            Setting::CacheOpInfo(on) => lock(&target.attributes).cache_op_info = on,
            Setting::Priority(priority) => target.set_priority(priority),
        }
        Ok(())
    })
}

/// Reads a stream attribute (NULL is the default stream). CACHE_OP_INFO reads 1 only while the
/// stream is being captured and the stream that began the capture has the switch set (the
/// reference: only then is the switch on, and joined streams share the first one's). NULL
/// value or unknown attribute → 100000, before the stream is looked up.
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
        // The attribute is an argument: known or not is settled before the stream is looked up.
        type Read = fn(&Stream, &Attributes, &mut aclrtStreamAttrValue);
        let read: Read = match stmAttrType {
            ACL_STREAM_ATTR_FAILURE_MODE => |s, _, out| out.failureMode = s.failure_mode(),
            ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK => {
                |_, a, out| out.overflowSwitch = a.overflow_switch
            }
            ACL_STREAM_ATTR_USER_CUSTOM_TAG => |_, a, out| out.userCustomTag = a.user_custom_tag,
            // On only where the switch acts: in a capture whose first stream has it set.
            ACL_STREAM_ATTR_CACHE_OP_INFO => |s, _, out| {
                out.cacheOpInfoSwitch = u32::from(s.capture().is_some_and(|c| c.caches_op_info()))
            },
            ACL_STREAM_ATTR_PRIORITY => |s, _, out| out.streamPriority = s.priority(),
            _ => return unknown_attribute(stmAttrType),
        };
        let target = context::any_stream(sim()?, stream)?;
        let attributes = *lock(&target.attributes);
        let mut out = aclrtStreamAttrValue::default();
        read(&target, &attributes, &mut out);
        write_out(value, "value", out)
    })
}
