//! The parameters of a task of a model runtime instance: reading them, and setting new ones
//! for the executions queued afterwards (aclmdlRITaskGetParams, aclmdlRITaskSetParams).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use npu_sys::*;

use super::check::bytes;
use super::kernel::task_launch;
use super::model_task::task_ref;
use super::task_info::MAX_OP_INFO;
use super::value::check_word;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::event::Event;
use crate::handle;
use crate::model_ri::{Captured, ModelRi, Step, TaskInfo, task_type};
use crate::sim::sim;
use crate::task::{Compare, Op};

/// The handle of a live event (NULL once it is destroyed).
fn event_handle(event: Option<Arc<Event>>) -> Res<aclrtEvent> {
    let Some(event) = event else {
        return Ok(ptr::null_mut());
    };
    let live = sim()?.events.live_with_handles();
    let found = live.into_iter().find(|(_, e)| Arc::ptr_eq(e, &event));
    Ok(found.map_or(ptr::null_mut(), |(handle, _)| handle::to_ptr(handle)))
}

/// The handle of the task group holding the task at `index` (NULL if none does).
fn group_of(model: &ModelRi, index: usize) -> Res<aclrtTaskGrp> {
    let groups = &sim()?.task_groups;
    let found = model.group_handles().into_iter().find(|&handle| {
        groups
            .get(handle)
            .is_some_and(|group| group.indexes.contains(&index))
    });
    Ok(found.map_or(ptr::null_mut(), handle::to_ptr))
}

/// The creation flags of an event (0 once it is gone).
fn flags_of(event: &Option<Arc<Event>>) -> u32 {
    event.as_ref().map_or(0, |event| event.flags)
}

/// The task's parameters: its type, its task group (NULL if none), the operator information
/// cached on it (NULL, 0 if none; the bytes stay the instance's, valid until they are replaced
/// or the instance is destroyed), and by its type: a kernel launch's function handle, block
/// count and arguments (where the task reads them, as device memory: isHostArgs 0; cfg NULL,
/// its attributes are aclmdlRIKernelTaskGetAttribute's), an event record's, wait's or reset's
/// event (NULL once destroyed), its creation flag and the record's or wait's flag, a value
/// write's or wait's address, value and comparison. Other tasks: the union is zero.
///
/// # Safety
/// `params` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRITaskGetParams(
    task: aclmdlRITask,
    params: *mut aclmdlRITaskParams,
) -> aclError {
    guard("aclmdlRITaskGetParams", || {
        non_null(task, "task")?;
        non_null(params, "params")?;
        let (model, index) = task_ref(task)?;
        let group = group_of(&model, index)?;
        let out = described(&in_task(&model, index)?, group)?;
        write_out(params, "params", out)
    })
}

/// The task at `index` (a copy, sharing what it points into with the instance's); 107017 if
/// there is none.
fn in_task(model: &ModelRi, index: usize) -> Res<Captured> {
    match model.task(index) {
        Some(captured) => Ok(captured),
        None => fail!(ACL_ERROR_RT_INVALID_HANDLE, "the task does not exist"),
    }
}

/// The parameters of a task (of task group `group`).
fn described(captured: &Captured, group: aclrtTaskGrp) -> Res<aclmdlRITaskParams> {
    // SAFETY: the struct is integers, pointers and a union of them: all-zero is valid.
    let mut out: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
    out.type_ = task_type(&captured.step);
    out.taskGrp = group;
    if let Some(info) = &captured.op_info {
        out.opInfoPtr = info.as_ptr().cast_mut().cast();
        out.opInfoSize = info.len();
    }
    let union = &mut out.__bindgen_anon_1;
    match &captured.step {
        Step::Run(Op::Kernel(launch)) => {
            let (args, argsSize) = launch.args();
            union.kernelTaskParams = aclmdlRIKernelTaskParams {
                funcHandle: handle::to_ptr(launch.handle),
                cfg: ptr::null_mut(),
                args,
                isHostArgs: 0,
                argsSize,
                numBlocks: launch.blocks,
                rsv: [0; 10],
            };
        }
        Step::Run(Op::Record(record)) => {
            let event = record.event();
            let recordFlag = event.as_ref().and_then(|e| e.record_flag.get().copied());
            union.eventRecordTaskParams = aclmdlRIEventRecordTaskParams {
                eventFlag: flags_of(&event),
                event: event_handle(event)?,
                recordFlag: recordFlag.unwrap_or(ACL_EVENT_RECORD_DEFAULT),
            };
        }
        Step::Run(Op::Wait { record, .. }) => {
            let event = record.event();
            union.eventWaitTaskParams = aclmdlRIEventWaitTaskParams {
                eventFlag: flags_of(&event),
                event: event_handle(event)?,
                waitFlag: ACL_EVENT_WAIT_DEFAULT,
            };
        }
        Step::WaitFor(event) => {
            let event = Some(event.clone());
            union.eventWaitTaskParams = aclmdlRIEventWaitTaskParams {
                eventFlag: flags_of(&event),
                event: event_handle(event)?,
                waitFlag: ACL_EVENT_WAIT_EXTERNAL,
            };
        }
        Step::Run(Op::Reset { event, .. }) => {
            let event = Some(event.clone());
            union.eventResetTaskParams = aclmdlRIEventResetTaskParams {
                eventFlag: flags_of(&event),
                event: event_handle(event)?,
                resetFlag: 0,
            };
        }
        &Step::Run(Op::ValueWrite { dst, value }) => {
            union.valueWriteTaskParams = aclmdlRIValueWriteTaskParams {
                devAddr: dst as *mut c_void,
                value,
            };
        }
        &Step::Run(Op::ValueWait { src, value, cmp }) => {
            union.valueWaitTaskParams = aclmdlRIValueWaitTaskParams {
                devAddr: src as *mut c_void,
                value,
                flag: cmp.flag(),
            };
        }
        _ => {}
    }
    Ok(out)
}

/// The operation a task of type `kind` becomes with the union's parameters, for an instance
/// on `device`; `None` for the types whose parameters are not set (event tasks, DEFAULT).
fn new_op(
    kind: aclmdlRITaskType,
    params: &aclmdlRITaskParams,
    device: i32,
    step: &Step,
) -> Res<Option<Op>> {
    let union = &params.__bindgen_anon_1;
    let op = match kind {
        ACL_MODEL_RI_TASK_KERNEL => {
            // SAFETY: the union is plain data; a KERNEL task's parameters are kernelTaskParams.
            let kernel = unsafe { union.kernelTaskParams };
            ensure!(
                kernel.isHostArgs <= 1,
                ACL_ERROR_RT_PARAM_INVALID,
                "isHostArgs is {}, not 0 (device memory) or 1 (host memory)",
                kernel.isHostArgs
            );
            let args = (kernel.args.cast_const(), kernel.argsSize);
            let host = kernel.isHostArgs == 1;
            let current = match step {
                Step::Run(Op::Kernel(launch)) => Some(launch),
                _ => None,
            };
            let launch = task_launch(
                kernel.funcHandle,
                kernel.numBlocks,
                args,
                host,
                kernel.cfg,
                device,
                current,
            )?;
            Op::Kernel(launch)
        }
        ACL_MODEL_RI_TASK_VALUE_WRITE => {
            // SAFETY: as above; a VALUE_WRITE task's parameters are valueWriteTaskParams.
            let write = unsafe { union.valueWriteTaskParams };
            non_null(write.devAddr, "devAddr")?;
            check_word(write.devAddr as usize, 8, device, "devAddr")?;
            Op::ValueWrite {
                dst: write.devAddr as usize,
                value: write.value,
            }
        }
        ACL_MODEL_RI_TASK_VALUE_WAIT => {
            // SAFETY: as above; a VALUE_WAIT task's parameters are valueWaitTaskParams.
            let wait = unsafe { union.valueWaitTaskParams };
            non_null(wait.devAddr, "devAddr")?;
            let Some(cmp) = Compare::from_flag(wait.flag) else {
                fail!(
                    ACL_ERROR_INVALID_PARAM,
                    "flag {:#x} is not an ACL_STREAM_WAIT_VALUE_* comparison",
                    wait.flag
                );
            };
            check_word(wait.devAddr as usize, 8, device, "devAddr")?;
            Op::ValueWait {
                src: wait.devAddr as usize,
                value: wait.value,
                cmp,
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(op))
}

/// Sets a task's parameters for the executions queued from now on (those queued before run
/// it as it was). `params->type` must be the task's type (else 107000). A kernel launch takes
/// a new launch, checked as aclrtLaunchKernelV2 checks its own (NULL function or arguments
/// NULL with a size → 100000, 0 blocks → 100000, a bad configuration as the launch's, then
/// a stale function → 107017, fewer bytes than the kernel declares → 107000, a function of
/// another device → 107044, device arguments that are not device memory of the instance's
/// device → 107000), its arguments in host memory (isHostArgs 1: copied now) or
/// in device memory (0: read when it runs; another value → 107000; the arguments a query
/// gave, the task's own copy, stay its arguments); a value write or wait a
/// new address (NULL → 100000; not 8-byte aligned device memory of the instance's device →
/// 107000), value and, for a wait, comparison (not an ACL_STREAM_WAIT_VALUE_* flag → 100000).
/// The union of event tasks and DEFAULT tasks, and taskGrp, are not read. A non-NULL
/// opInfoPtr replaces the task's operator information with its `opInfoSize` bytes (0 or above
/// 64 KiB → 100000); NULL leaves it. Nothing changes unless every check passes.
///
/// # Safety
/// `params` must be NULL or valid for a read; its pointers as the launch or value operation
/// they describe requires, `opInfoPtr` NULL or valid for `opInfoSize` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRITaskSetParams(
    task: aclmdlRITask,
    params: *mut aclmdlRITaskParams,
) -> aclError {
    guard("aclmdlRITaskSetParams", || {
        non_null(task, "task")?;
        non_null(params, "params")?;
        let (model, index) = task_ref(task)?;
        // SAFETY: non-NULL; valid for a read by the API contract (plain data).
        let params = unsafe { params.read_unaligned() };
        let captured = in_task(&model, index)?;
        let kind = task_type(&captured.step);
        ensure!(
            params.type_ == kind,
            ACL_ERROR_RT_PARAM_INVALID,
            "params->type is {}, but the task's type is {kind}",
            params.type_
        );
        let info = match params.opInfoPtr.is_null() {
            true => None,
            false => {
                let size = params.opInfoSize;
                ensure!(
                    size > 0 && size <= MAX_OP_INFO,
                    ACL_ERROR_INVALID_PARAM,
                    "opInfoSize is {size}; it must be 1 to {MAX_OP_INFO} bytes"
                );
                Some(bytes(params.opInfoPtr, size, "opInfoPtr")?)
            }
        };
        let device = model.device.id;
        let op = new_op(kind, &params, device, &captured.step)?;
        if let Some(op) = op {
            model.set_op(index, op);
        }
        if let Some(info) = info {
            model.cache_info(index, TaskInfo::Op, info);
        }
        Ok(())
    })
}
