//! Host functions processed on user threads (aclrtSubscribeHostFunc and its companions): an
//! IPV350 feature the Atlas A2 does not have.

use npu_sys::*;

use crate::context;
use crate::error::{Res, fail, guard, non_null};
use crate::sim::sim;

/// Refuses a host-function call that the Atlas A2 does not support.
fn unsupported(api: &str) -> Res<()> {
    fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{api} is not supported on an Atlas A2 device (host functions on user threads exist \
         only on IPV350); use aclrtLaunchHostFunc or aclrtLaunchCallback"
    )
}

/// A (un)subscription: the stream argument is checked as every stream-taking call checks it
/// (NULL → 100000, destroyed → 107017, another context's → 107003), then the call is refused:
/// arguments come before the feature, as aclrtProcessHostFunc's timeout does.
fn subscription(api: &'static str, stream: aclrtStream) -> aclError {
    guard(api, || {
        non_null(stream, "exeStream")?;
        context::owned_stream(sim()?, stream)?;
        unsupported(api)
    })
}

/// Not supported on an Atlas A2: NULL stream → 100000, a destroyed one → 107017, another
/// context's → 107003, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSubscribeHostFunc(
    hostFuncThreadId: u64,
    exeStream: aclrtStream,
) -> aclError {
    let _ = hostFuncThreadId;
    subscription("aclrtSubscribeHostFunc", exeStream)
}

/// Not supported on an Atlas A2: 207000 (after the timeout check: 0 or below -1 → 100000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtProcessHostFunc(timeout: i32) -> aclError {
    guard("aclrtProcessHostFunc", || {
        super::check::deadline(timeout, ACL_ERROR_INVALID_PARAM)?;
        unsupported("aclrtProcessHostFunc")
    })
}

/// Not supported on an Atlas A2: NULL stream → 100000, a destroyed one → 107017, another
/// context's → 107003, else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtUnSubscribeHostFunc(
    hostFuncThreadId: u64,
    exeStream: aclrtStream,
) -> aclError {
    let _ = hostFuncThreadId;
    subscription("aclrtUnSubscribeHostFunc", exeStream)
}
