//! Task groups of captured instances: recorded during a capture, updated after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use npu_sys::*;

use crate::context;
use crate::error::{ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::TaskGroup;
use crate::sim::sim;

/// Starts recording a task group on a capturing stream (being destroyed → 107017; not
/// capturing → 107029; a group recorded or updated on it already → 107033). Only kernel
/// launches may be submitted until aclmdlRICaptureTaskGrpEnd (others → 507009), and a task
/// submitted meanwhile to another stream of the same capture interrupts the recording
/// (107034, the task is refused).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureTaskGrpBegin(stream: aclrtStream) -> aclError {
    guard("aclmdlRICaptureTaskGrpBegin", || {
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        stream.begin_recording()
    })
}

/// Ends the task group recorded on the stream and returns its handle (not recording →
/// 107033; not capturing → 107029; NULL handle → 100000).
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureTaskGrpEnd(
    stream: aclrtStream,
    handle: *mut aclrtTaskGrp,
) -> aclError {
    guard("aclmdlRICaptureTaskGrpEnd", || {
        non_null(handle, "handle")?;
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        let (indexes, capture) = stream.end_group()?;
        let group = Arc::new(TaskGroup {
            model: Arc::downgrade(&capture.model),
            indexes,
            updating: AtomicBool::new(false),
        });
        let sim = sim()?;
        let token = sim.task_groups.insert(group)?;
        capture.model.add_group_handle(token);
        write_out(handle, "handle", handle::to_ptr(token))
    })
}

/// Starts updating a task group from a stream not being captured (capturing → 107027): the
/// kernel launches submitted to it until aclmdlRICaptureTaskUpdateEnd do not run, they are the
/// group's new tasks. A group updated already, or a stream recording or updating a group →
/// 107033; an instance destroyed, or a stream being destroyed → 107017; an instance still
/// being captured → 107026; a stream bound to an instance (aclmdlRIBindStream), whose
/// launches go there → 107000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureTaskUpdateBegin(
    stream: aclrtStream,
    handle: aclrtTaskGrp,
) -> aclError {
    guard("aclmdlRICaptureTaskUpdateBegin", || {
        non_null(handle, "handle")?;
        let sim = sim()?;
        let (_, stream) = context::owned_stream(sim, stream)?;
        let group = sim.task_groups.resolve(handle::from_ptr(handle))?;
        ensure!(
            stream.capture().is_none(),
            ACL_ERROR_RT_STREAM_CAPTURED,
            "stream {} is being captured: a task group is updated from a stream that is not",
            stream.id
        );
        let Some(model) = group.model.upgrade() else {
            fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "the task group's model runtime instance was destroyed"
            );
        };
        ensure!(
            !model.is_open(),
            ACL_ERROR_RT_MODEL_CAPTURED,
            "the task group's instance {} is still being captured",
            model.id
        );
        ensure!(
            !group.updating.swap(true, Ordering::AcqRel),
            ACL_ERROR_STREAM_TASK_GROUP_STATUS,
            "the task group is being updated already"
        );
        stream.begin_update(&group).inspect_err(|_| {
            group.updating.store(false, Ordering::Release);
        })
    })
}

/// Ends the update begun on the stream (none → 107033): the launches submitted since replace
/// the group's, for the executions queued from now on. Their number must be the group's
/// (107033 otherwise, and nothing changes).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureTaskUpdateEnd(stream: aclrtStream) -> aclError {
    guard("aclmdlRICaptureTaskUpdateEnd", || {
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        let (group, staged) = stream.end_update()?;
        group.updating.store(false, Ordering::Release);
        ensure!(
            staged.len() == group.indexes.len(),
            ACL_ERROR_STREAM_TASK_GROUP_STATUS,
            "the update submitted {} tasks, and the task group has {}",
            staged.len(),
            group.indexes.len()
        );
        match group.model.upgrade() {
            Some(model) => {
                model.replace(&group.indexes, staged);
                Ok(())
            }
            None => fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "the task group's model runtime instance was destroyed"
            ),
        }
    })
}
