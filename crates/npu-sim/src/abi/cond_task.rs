//! Conditional tasks of captured instances: condition handles, the tasks that read them,
//! and the capture of their branches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;

use npu_sys::*;

use super::model_ri::{check_same_context, model, retire_contents};
use crate::capture::{self, Capture};
use crate::context;
use crate::control_flow::{CondHandle, CondKind};
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::memory::{AllocKind, PAGE};
use crate::model_ri::{CondEntry, ModelRi, Step};
use crate::sim::{Sim, sim};
use crate::sync::lock;

/// The bytes of a condition handle's word.
const WORD: usize = 8;

/// The condition handle behind a handle (NULL → 100000; stale or forged → 107017).
fn cond_handle(handle: aclmdlRICondHandle) -> Res<Arc<CondHandle>> {
    non_null(handle, "handle")?;
    sim()?.cond_handles.resolve(handle::from_ptr(handle))
}

/// Allocates a condition word in `model`'s device, holding `value`.
fn allocate_word(sim: &Sim, model: &ModelRi, value: u64) -> Res<usize> {
    let device = &model.device;
    device.check_alive()?;
    device.reserve(WORD as u64)?;
    let kind = AllocKind::Device {
        device: device.id,
        accounted: WORD as u64,
        page_size: PAGE as u32,
    };
    let word = match sim.memory.allocate(WORD, kind) {
        Ok(word) => word,
        Err(error) => {
            device.unreserve(WORD as u64);
            return Err(error);
        }
    };
    // SAFETY: `word` is a fresh 8-byte allocation of simulator memory, aligned to a page, that
    // no task can reach yet.
    unsafe { (word as *mut u64).write(value) };
    lock(&WORDS).insert(word);
    Ok(word)
}

/// The words of live condition handles: aclrtFree refuses them.
static WORDS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// Frees a condition handle's word.
fn free_word(sim: &Sim, word: usize) {
    lock(&WORDS).remove(&word);
    if let Ok(AllocKind::Device {
        device, accounted, ..
    }) = sim.memory.free(word, false)
        && let Ok(device) = sim.device(device.into())
    {
        device.unreserve(accounted);
    }
}

/// Retires an instance's condition handles and frees their words (it is being destroyed,
/// or its capture cleared).
pub(super) fn free_words(sim: &Sim, handles: Vec<CondEntry>) {
    for (handle, cond) in handles {
        sim.cond_handles.remove(handle);
        free_word(sim, cond.word);
    }
}

/// Whether `ptr` is the word of a condition handle, which the runtime frees with its
/// instance (aclrtFree refuses it).
pub(super) fn is_cond_word(ptr: usize) -> bool {
    lock(&WORDS).contains(&ptr)
}

/// Clears what a branch's capture that failed or was cut short recorded, so that it can be
/// captured again.
pub(super) fn clear_branch(sim: &Sim, branch: &ModelRi) {
    retire_contents(sim, branch);
    branch.forget_capture();
}

/// Creates a condition handle for a captured instance (open or complete; a built one →
/// 107000): an 8-byte word of device memory holding `defaultLaunchValue`, which it takes
/// again whenever the instance's tasks start running if `flag` is
/// ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT (0: the program sets it). Another flag or NULL
/// `handle` → 100000.
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICondHandleCreate(
    modelRI: aclmdlRI,
    defaultLaunchValue: u32,
    flag: aclmdlRICondHandleFlag,
    handle: *mut aclmdlRICondHandle,
) -> aclError {
    guard("aclmdlRICondHandleCreate", || {
        non_null(modelRI, "modelRI")?;
        ensure!(
            flag == 0 || flag == ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag} is neither 0 nor ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT"
        );
        non_null(handle, "handle")?;
        let model = model(modelRI)?;
        ensure!(
            !model.built,
            ACL_ERROR_RT_PARAM_INVALID,
            "model runtime instance {} was built, and conditional tasks are captured",
            model.id
        );
        let sim = sim()?;
        let value = u64::from(defaultLaunchValue);
        let word = allocate_word(sim, &model, value)?;
        let cond = Arc::new(CondHandle {
            model: Arc::downgrade(&model),
            word,
            default: (flag == ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT).then_some(value),
        });
        let id = match sim.cond_handles.insert(cond.clone()) {
            Ok(id) => id,
            Err(error) => {
                free_word(sim, word);
                return Err(error);
            }
        };
        model.add_cond_handle(id, cond);
        write_out(handle, "handle", handle::to_ptr(id))
    })
}

/// The device address of the handle's 8-byte word (freed with its instance, not by the
/// program). NULL `ptr` → 100000.
///
/// # Safety
/// `ptr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICondHandleGetCondPtr(
    handle: aclmdlRICondHandle,
    ptr: *mut *mut u64,
) -> aclError {
    guard("aclmdlRICondHandleGetCondPtr", || {
        non_null(handle, "handle")?;
        non_null(ptr, "ptr")?;
        let cond = cond_handle(handle)?;
        write_out(ptr, "ptr", cond.word as *mut u64)
    })
}

/// Adds a conditional task to the instance a stream is capturing (not capturing → 107029):
/// when it runs, its handle's word chooses the branch (IF: the first when non-zero, else the
/// second if any; WHILE: the only one, again while non-zero; SWITCH: the one it indexes,
/// none past the end). It creates `size` branches, empty instances written to
/// `modelRIArray` and captured with aclmdlRICaptureToModelRIBegin. A handle made for
/// another instance → 107000; `flags` (reserved) not 0, a type outside aclmdlRICondTaskType,
/// a size that does not suit it, or NULL `modelRIArray` → 100000.
///
/// # Safety
/// `params.modelRIArray` must be NULL or valid for writes of `params.size` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIAddCondTask(
    params: aclmdlRICondTaskParams,
    stream: aclrtStream,
    flags: u32,
) -> aclError {
    guard("aclmdlRIAddCondTask", || {
        non_null(params.handle, "handle")?;
        let kind = CondKind::of(params.type_, params.size)?;
        non_null(params.modelRIArray, "modelRIArray")?;
        ensure!(
            flags == 0,
            ACL_ERROR_INVALID_PARAM,
            "flags {flags:#x} is reserved and must be 0"
        );
        let cond = cond_handle(params.handle)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let Some(capture) = stream.capture() else {
            fail!(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                "stream {} is not being captured: conditional tasks are captured",
                stream.id
            );
        };
        capture.check_valid()?;
        let model = &capture.model;
        ensure!(
            std::ptr::eq(cond.model.as_ptr(), Arc::as_ptr(model)),
            ACL_ERROR_RT_PARAM_INVALID,
            "the condition handle was made for another instance than model runtime instance {}, which stream {} is capturing",
            model.id,
            stream.id
        );
        let mut branches = Vec::new();
        let unmade = |branches: &[Arc<ModelRi>]| {
            for branch in branches {
                sim.models.remove(branch.handle);
            }
        };
        for _ in 0..params.size {
            let handle = match sim.models.reserve() {
                Ok(handle) => handle,
                Err(error) => {
                    unmade(&branches);
                    return Err(error);
                }
            };
            let branch = Arc::new(ModelRi::new_branch(handle, model.ctx, model.device.clone()));
            sim.models.fill(handle, branch.clone());
            branches.push(branch);
        }
        // Held by the instance from now on, so that destroying it retires them.
        model.add_branches(&branches);
        let step = Step::Cond {
            handle: cond,
            kind,
            branches: branches.clone(),
        };
        // Captured as every task is (it becomes the thread's last task; a task group refuses
        // it).
        if let Err(error) = stream.submit_captured(&capture, step) {
            unmade(&branches);
            return Err(error);
        }
        for (i, branch) in branches.iter().enumerate() {
            // SAFETY: non-NULL, and valid for `size` writes by the API contract.
            unsafe {
                params
                    .modelRIArray
                    .add(i)
                    .write_unaligned(handle::to_ptr(branch.handle))
            };
        }
        Ok(())
    })
}

/// Begins capturing the stream's tasks into a branch that aclmdlRIAddCondTask created, until
/// aclmdlRICaptureEnd on the stream; a branch is captured once. The default stream → 107031;
/// an instance that is not such a branch, or one captured already → 107000; a stream of
/// another context → 107004; a stream capturing already → 107027; a NULL instance or a mode
/// outside aclmdlRICaptureMode → 100000, before anything is looked up.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureToModelRIBegin(
    stream: aclrtStream,
    modelRI: aclmdlRI,
    mode: aclmdlRICaptureMode,
) -> aclError {
    guard("aclmdlRICaptureToModelRIBegin", || {
        // The NULL instance and the mode before the stream and the instance are looked up,
        // in that (parameter) order.
        non_null(modelRI, "modelRI")?;
        capture::check_mode(mode)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let model = model(modelRI)?;
        ensure!(
            !stream.is_default,
            ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
            "the default stream cannot be captured"
        );
        check_same_context(&model, &stream)?;
        model.capture_branch(|cut_short| {
            if cut_short {
                clear_branch(sim, &model);
            }
            Capture::begin(&stream, model.clone(), mode)
        })
    })
}
