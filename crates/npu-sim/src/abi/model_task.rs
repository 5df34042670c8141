//! The streams and tasks of model runtime instances: listing them, what a task is, disabling
//! tasks and applying the change.

use std::sync::Arc;

use npu_sys::*;

use super::model_ri::{complete_model, model};
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::{Captured, ModelRi, Step, TaskRef, task_type};
use crate::sim::sim;
use crate::task::Op;

/// Writes `items` to `out` and sets `*count` to how many there are; with `out` NULL only the
/// number. An array of fewer than that many (`*count` on input) → 107039
/// (ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY), nothing written.
fn write_list<T: Copy>(out: *mut T, count: *mut u32, items: &[T], what: &str) -> Res<()> {
    non_null(count, what)?;
    if !out.is_null() {
        // SAFETY: non-NULL; valid for a read by the API contract.
        let room = unsafe { count.read_unaligned() } as usize;
        ensure!(
            room >= items.len(),
            ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY,
            "{what} is {room}, but there are {}: ask for the number first (a NULL array)",
            items.len()
        );
        for (at, item) in items.iter().enumerate() {
            // SAFETY: the caller's array holds `*count` elements (the API contract), and `at`
            // is below it.
            unsafe { out.add(at).write_unaligned(*item) };
        }
    }
    write_out(count, what, items.len() as u32)
}

/// The instance's streams: a built one's bound streams, a captured one's model streams (one
/// per stream it captured). `streams` NULL: only their number into `*numStreams`; else the
/// handles, into an array of `*numStreams` (fewer than there are → 107039). Still being
/// captured or built → 107026.
///
/// # Safety
/// `numStreams` must be NULL or valid for a read and a write; `streams` NULL or valid for
/// `*numStreams` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIGetStreams(
    modelRI: aclmdlRI,
    streams: *mut aclrtStream,
    numStreams: *mut u32,
) -> aclError {
    guard("aclmdlRIGetStreams", || {
        non_null(modelRI, "modelRI")?;
        // A NULL count is refused before the instance is looked up, as every NULL argument.
        non_null(numStreams, "numStreams")?;
        let model = complete_model(modelRI, "listing its streams")?;
        let handles: Vec<aclrtStream> = model
            .stream_handles()
            .into_iter()
            .map(handle::to_ptr)
            .collect();
        write_list(streams, numStreams, &handles, "numStreams")
    })
}

/// The tasks of a stream of an instance (aclmdlRIGetStreams), in order, as with
/// aclmdlRIGetStreams. A stream of no instance → 107005.
///
/// # Safety
/// `numTasks` must be NULL or valid for a read and a write; `tasks` NULL or valid for
/// `*numTasks` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIGetTasksByStream(
    stream: aclrtStream,
    tasks: *mut aclmdlRITask,
    numTasks: *mut u32,
) -> aclError {
    guard("aclmdlRIGetTasksByStream", || {
        non_null(numTasks, "numTasks")?;
        let sim = sim()?;
        let stream = context::any_stream(sim, stream)?;
        let Some(model) = stream.bound_model() else {
            fail!(
                ACL_ERROR_RT_STREAM_MODEL,
                "stream {} belongs to no model runtime instance",
                stream.id
            );
        };
        let model = complete_model(handle::to_ptr(model.handle), "listing its tasks")?;
        let handles = model
            .tasks_of(stream.id)
            .into_iter()
            .map(|index| {
                let handle = model.task_handle(index, || {
                    let task = TaskRef {
                        model: Arc::downgrade(&model),
                        index,
                    };
                    sim.model_tasks.insert(Arc::new(task))
                })?;
                Ok(handle::to_ptr(handle))
            })
            .collect::<Res<Vec<aclmdlRITask>>>()?;
        write_list(tasks, numTasks, &handles, "numTasks")
    })
}

/// The instance and index of the task behind a handle (NULL → 100000; stale, or of a
/// destroyed instance → 107017).
pub(super) fn task_ref(task: aclmdlRITask) -> Res<(Arc<ModelRi>, usize)> {
    non_null(task, "task")?;
    let found = sim()?.model_tasks.resolve(handle::from_ptr(task))?;
    match found.model.upgrade() {
        Some(model) => Ok((model, found.index)),
        None => fail!(
            ACL_ERROR_RT_INVALID_HANDLE,
            "the task's model runtime instance was destroyed"
        ),
    }
}

/// The captured task behind a handle.
fn captured_task(task: aclmdlRITask) -> Res<Captured> {
    let (model, index) = task_ref(task)?;
    match model.task(index) {
        Some(captured) => Ok(captured),
        None => fail!(ACL_ERROR_RT_INVALID_HANDLE, "the task does not exist"),
    }
}

/// The task's type: a kernel, an event record, wait or reset, a value write or wait, or
/// DEFAULT (copies, memsets and the other tasks).
///
/// # Safety
/// `type_` (the header's `type`) must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRITaskGetType(
    task: aclmdlRITask,
    type_: *mut aclmdlRITaskType,
) -> aclError {
    guard("aclmdlRITaskGetType", || {
        non_null(task, "task")?;
        non_null(type_, "type")?;
        let captured = captured_task(task)?;
        write_out(type_, "type", task_type(&captured.step))
    })
}

/// The task's place among its stream's tasks (0 for the first).
///
/// # Safety
/// `id` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRITaskGetSeqId(task: aclmdlRITask, id: *mut u32) -> aclError {
    guard("aclmdlRITaskGetSeqId", || {
        non_null(task, "task")?;
        non_null(id, "id")?;
        let captured = captured_task(task)?;
        write_out(id, "id", captured.seq)
    })
}

/// The launch attribute `attrId` of a kernel task (ACL_MODEL_RI_TASK_KERNEL), as its launch
/// configuration gave it (0 when it gave none): SCHEM_MODE, DYN_UBUF_SIZE, DATA_DUMP, TIMEOUT,
/// TIMEOUT_US, ENABLE_PROFILING. ENGINE_TYPE, BLOCKDIM_OFFSET and BLOCK_TASK_PREFETCH, which the
/// reference says cannot be queried, and unknown ids → 107000, before the task is looked up; a
/// task that is no kernel launch → 507009 (ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT).
///
/// # Safety
/// `attrValue` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIKernelTaskGetAttribute(
    task: aclmdlRITask,
    attrId: aclrtLaunchKernelAttrId,
    attrValue: *mut aclrtLaunchKernelAttrValue,
) -> aclError {
    guard("aclmdlRIKernelTaskGetAttribute", || {
        non_null(task, "task")?;
        non_null(attrValue, "attrValue")?;
        // The attribute is a value: checked before the task is looked up.
        match attrId {
            ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE
            | ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE
            | ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP
            | ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT
            | ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US
            | ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING => {}
            ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE
            | ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET
            | ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "launch attribute {attrId} cannot be queried (ENGINE_TYPE, BLOCKDIM_OFFSET and \
                 BLOCK_TASK_PREFETCH are not kept with the task)"
            ),
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown launch attribute {other}"
            ),
        }
        let captured = captured_task(task)?;
        let Step::Run(Op::Kernel(launch)) = &captured.step else {
            fail!(
                ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
                "the task is no kernel task (its type is {}, not ACL_MODEL_RI_TASK_KERNEL)",
                task_type(&captured.step)
            );
        };
        let attrs = launch.attrs;
        // The union's unused bytes read 0, as after a zeroed declaration.
        let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
        match attrId {
            ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE => value.schemMode = attrs.schem_mode,
            // A simulated kernel is no SIMT kernel: its launch took only 0.
            ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE => value.dynUBufSize = 0,
            ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP => value.isDataDump = attrs.data_dump,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT => value.timeout = attrs.timeout_s,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US => {
                value.timeoutUs = aclrtTimeoutUs {
                    timeoutLow: attrs.timeout_us as u32,
                    timeoutHigh: (attrs.timeout_us >> 32) as u32,
                };
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING => value.enableProfiling = attrs.profiling,
            // The others were refused before the lookup.
            _ => {}
        }
        write_out(attrValue, "attrValue", value)
    })
}

/// Applies the instance's pending changes: the tasks disabled with aclmdlRITaskDisable are
/// skipped by the executions queued from now on. Still being captured or built, or an
/// execution not over → 107040.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIUpdate(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIUpdate", || model(modelRI)?.update())
}

/// Disables a task from the next aclmdlRIUpdate of its instance on: executions skip it.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRITaskDisable(task: aclmdlRITask) -> aclError {
    guard("aclmdlRITaskDisable", || {
        let (model, index) = task_ref(task)?;
        model.disable(index);
        Ok(())
    })
}
