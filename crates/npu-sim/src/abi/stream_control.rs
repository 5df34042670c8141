//! Stream stop and abort, stream state callbacks and the thread's last task id.

use std::ffi::c_char;

use npu_sys::*;

use super::check::c_str;
use crate::context;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::sim::sim;

/// A stream argument that must name a created stream, not the default one.
fn explicit_stream(api: &str, stream: aclrtStream) -> Res<std::sync::Arc<crate::stream::Stream>> {
    ensure!(
        !stream.is_null(),
        ACL_ERROR_INVALID_PARAM,
        "{api} does not take the default stream (NULL)"
    );
    let (_, stream) = context::owned_stream(sim()?, stream)?;
    // The default stream named by its handle (aclrtCtxGetCurrentDefaultStream) is the same
    // stream NULL names: refused too, as aclrtDestroyStream refuses it (107000, a runtime
    // check, where NULL is the ACL layer's 100000).
    ensure!(
        !stream.is_default,
        ACL_ERROR_RT_PARAM_INVALID,
        "{api} does not take the default stream (stream {} is its context's default stream)",
        stream.id
    );
    Ok(stream)
}

/// Refuses a stream bound to a model runtime instance (aclmdlRIBindStream), which the reference
/// excludes from aclrtStreamStop and aclrtStreamAbort: its tasks belong to the instance, whose
/// executions run them on other streams (aclmdlRIAbort ends those). 207000, naming no code.
fn refuse_bound(api: &str, stream: &crate::stream::Stream) -> Res<()> {
    ensure!(
        stream.bound_model().is_none(),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{api} does not take stream {}, which is bound to a model runtime instance \
         (aclmdlRIBindStream; unbind it first)",
        stream.id
    );
    Ok(())
}

/// Stops a created stream of the current context: it takes no further task (the task running
/// finishes: the simulator cannot interrupt host code); queued work stays, and
/// synchronisations and queries of the stream fail with ACL_ERROR_RT_INTERNAL_ERROR (507000)
/// until aclrtStreamAbort discards the work. NULL → 100000; the default stream's own handle →
/// 107000; a stream bound to a model runtime instance → 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamStop(stream: aclrtStream) -> aclError {
    guard("aclrtStreamStop", || {
        let stream = explicit_stream("aclrtStreamStop", stream)?;
        refuse_bound("aclrtStreamStop", &stream)?;
        stream.stop();
        Ok(())
    })
}

/// Discards every task of a stream of the current context not run yet (the task running
/// finishes), clears its task errors and a stop, and returns with the stream empty and usable.
/// Meanwhile submissions are refused and waits on the stream or its records fail with
/// ACL_ERROR_RT_STREAM_ABORT (107023); records dropped by the abort fail their waits with it
/// later too. NULL is the default stream; a stream bound to a model runtime instance → 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamAbort(stream: aclrtStream) -> aclError {
    guard("aclrtStreamAbort", || {
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        refuse_bound("aclrtStreamAbort", &stream)?;
        // The abort waits for the running task, which would be the caller's own.
        stream.refuse_wait_for_caller(u64::MAX)?;
        stream.abort();
        Ok(())
    })
}

/// Drops the tasks an ACL_STREAM_PERSISTENT stream of the current context keeps for a model,
/// so that new ones can be issued without destroying the stream (task ids restart at 1). NULL
/// → 100000; a stream of another context → 107003; a stream that is not PERSISTENT (the
/// default stream's handle among them) → 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtPersistentTaskClean(stream: aclrtStream) -> aclError {
    guard("aclrtPersistentTaskClean", || {
        explicit_stream("aclrtPersistentTaskClean", stream)?.clean_persistent()
    })
}

/// Registers `callback` under the unique name `regName` (NULL `callback`: removes the
/// registration). It is called with ACL_RT_STREAM_STATE_CREATE_POST after every stream
/// (default streams included) is created and ACL_RT_STREAM_STATE_DESTROY_PRE before one is
/// destroyed, on the creating or destroying thread. NULL or empty name → 100000; a name
/// already registered, or removing one that is not → 107000.
///
/// # Safety
/// `regName` must be NULL or a NUL-terminated string; `callback` must be safe to call with
/// `args` from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRegStreamStateCallback(
    regName: *const c_char,
    callback: aclrtStreamStateCallback,
    args: *mut std::ffi::c_void,
) -> aclError {
    guard("aclrtRegStreamStateCallback", || {
        let name = c_str(regName, "regName")?;
        crate::stream_state::register_stream(name, callback, args as usize)
    })
}

/// The id of the last task the calling thread submitted to a stream (its position in that
/// stream; 0 before any).
///
/// # Safety
/// `taskId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetThreadLastTaskId(taskId: *mut u32) -> aclError {
    guard("aclrtGetThreadLastTaskId", || {
        non_null(taskId, "taskId")?;
        write_out(taskId, "taskId", crate::stream::last_task_id())
    })
}
