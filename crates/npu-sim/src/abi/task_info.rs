//! Information attached to the task the calling thread submitted last, while it is being
//! captured or built (aclrtCacheLastTaskOpInfo, aclrtCacheLastTaskExtendInfo).
//!
//! The information stays with the captured task (released with the instance);
//! aclmdlRIDebugJsonPrint shows it. The simulator has no profiler whose data could carry the
//! operator information, as CANN's does.

use std::ffi::{c_char, c_void};

use npu_sys::*;

use super::check::bytes;
use crate::capture::{LastCaptured, last_captured};
use crate::error::{ensure, fail, guard, non_null};
use crate::model_ri::TaskInfo;

/// The most bytes of operator information a task takes (the reference's range is (0, 64K]).
pub(crate) const MAX_OP_INFO: usize = 64 << 10;
/// The most bytes of extended information kept (more are accepted; the rest is dropped).
pub(crate) const MAX_EXTEND_INFO: usize = 4 << 10;

/// Caches `infoSize` bytes of operator information (host memory at `infoPtr`) on the task the
/// calling thread submitted last, for the instance's profiling. NULL → 100000; size 0 or above
/// 64 KiB → 100000. The information is kept only while that task is being captured and the
/// capture's stream (the one aclmdlRICaptureBegin named, whose switch the streams joining its
/// capture share) has ACL_STREAM_ATTR_CACHE_OP_INFO on; otherwise the call succeeds and
/// keeps nothing, as the switch means to. A second call replaces the first's information.
///
/// # Safety
/// `infoPtr` must be NULL or point at `infoSize` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCacheLastTaskOpInfo(
    infoPtr: *const c_void,
    infoSize: usize,
) -> aclError {
    guard("aclrtCacheLastTaskOpInfo", || {
        non_null(infoPtr, "infoPtr")?;
        ensure!(
            infoSize > 0 && infoSize <= MAX_OP_INFO,
            ACL_ERROR_INVALID_PARAM,
            "infoSize is {infoSize}; it must be 1 to {MAX_OP_INFO} bytes"
        );
        let info = bytes(infoPtr, infoSize, "infoPtr")?;
        let Some(LastCaptured {
            model,
            index,
            capture: Some(capture),
        }) = last_captured()
        else {
            return Ok(());
        };
        let (Some(model), Some(capture)) = (model.upgrade(), capture.upgrade()) else {
            return Ok(());
        };
        if capture.caches_op_info() {
            model.cache_info(index, TaskInfo::Op, info);
        }
        Ok(())
    })
}

/// Caches extended information (a UTF-8 JSON text of `infoSize` bytes at `extendInfoPtr`; only
/// the first 4 KiB are kept) on the task the calling thread submitted last, which must be
/// in an instance still being captured or built: aclmdlRIDebugJsonPrint then shows it with
/// the task (parsed, when the bytes kept are JSON; as text otherwise). NULL → 100000; size 0 →
/// 100000; the thread's last task is in no instance being captured or built → 107029
/// ACL_ERROR_RT_STREAM_NOT_CAPTURED. A second call replaces the first's information.
///
/// # Safety
/// `extendInfoPtr` must be NULL or point at `infoSize` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCacheLastTaskExtendInfo(
    extendInfoPtr: *const c_char,
    infoSize: usize,
) -> aclError {
    guard("aclrtCacheLastTaskExtendInfo", || {
        non_null(extendInfoPtr, "extendInfoPtr")?;
        ensure!(
            infoSize > 0,
            ACL_ERROR_INVALID_PARAM,
            "infoSize is 0: there is no information to cache"
        );
        let kept = infoSize.min(MAX_EXTEND_INFO);
        let info = bytes(extendInfoPtr.cast(), kept, "extendInfoPtr")?;
        let target = last_captured().and_then(|last| Some((last.model.upgrade()?, last.index)));
        match target {
            Some((model, index)) if model.is_open() => {
                model.cache_info(index, TaskInfo::Extend, info);
                Ok(())
            }
            _ => fail!(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                "the calling thread's last task is not in a model runtime instance being \
                 captured or built"
            ),
        }
    })
}
