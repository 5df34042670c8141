//! Model runtime instances: execution, destruction, and what an instance tells about itself;
//! the helpers the other model modules (`capture`, `model_build`, `model_task`) share.

use std::ffi::c_char;
use std::sync::Arc;

use npu_sys::*;

use super::check::{c_path, c_str, check_text_room, deadline, write_c_str};
use crate::context;
use crate::context::Context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::{ModelRi, Step, describe_step};
use crate::sim::{Sim, sim};
use crate::stream::Stream;
use crate::task::Op;

/// The instance behind a handle (NULL → 100000, stale or forged → 107017).
pub(super) fn model(model_ri: aclmdlRI) -> Res<Arc<ModelRi>> {
    non_null(model_ri, "modelRI")?;
    sim()?.models.resolve(handle::from_ptr(model_ri))
}

/// The instance, whose capture or build must be over (ACL_ERROR_RT_MODEL_CAPTURED): `what`
/// needs it complete.
pub(super) fn complete_model(model_ri: aclmdlRI, what: &str) -> Res<Arc<ModelRi>> {
    let model = model(model_ri)?;
    ensure!(
        !model.is_open(),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "model runtime instance {} is still being {}: {what} needs {} first",
        model.id,
        if model.built { "built" } else { "captured" },
        if model.built {
            "aclmdlRIBuildEnd"
        } else {
            "aclmdlRICaptureEnd"
        }
    );
    Ok(model)
}

/// An instance that executes and is destroyed on its own: not a branch of a conditional task
/// (207000: it runs, and is destroyed, with its instance), complete, and with no branch
/// being captured (107026).
fn root_model(model_ri: aclmdlRI, what: &str) -> Res<Arc<ModelRi>> {
    let model = model(model_ri)?;
    ensure!(
        !model.is_branch(),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "model runtime instance {} is a branch of a conditional task: it runs, and is destroyed, with the instance holding the task, not {what}",
        model.id
    );
    let model = complete_model(model_ri, what)?;
    if let Some(branch) = model.capturing_branch() {
        fail!(
            ACL_ERROR_RT_MODEL_CAPTURED,
            "branch {branch} of model runtime instance {} is still being captured: {what} needs aclmdlRICaptureEnd on it first",
            model.id
        );
    }
    Ok(model)
}

/// A stream an instance owns (its execution stream, its model streams), in its context.
pub(super) fn own_stream(sim: &Sim, ctx: &Context, flags: u32) -> Res<Arc<Stream>> {
    ctx.create_stream(sim, 0, flags)
}

/// Retires the instance: its handle and its tasks' handles, its bindings, the streams it
/// owns. A destroy calls it once [`ModelRi::retire`] has decided that this call destroys it.
pub(super) fn discard(sim: &Sim, model: &ModelRi) {
    sim.models.remove(model.handle);
    retire_contents(sim, model);
}

/// Retires what an instance holds: its condition handles (their words freed), its branches,
/// its tasks' and task groups' handles, its bindings and the streams it created.
pub(super) fn retire_contents(sim: &Sim, model: &ModelRi) {
    let (cond_handles, branches) = model.take_dependents();
    super::cond_task::free_words(sim, cond_handles);
    for branch in branches {
        discard(sim, &branch);
    }
    for handle in model.take_task_handles() {
        sim.model_tasks.remove(handle);
    }
    for handle in model.take_group_handles() {
        sim.task_groups.remove(handle);
    }
    model.unbind_all();
    for stream in model.take_own_streams() {
        destroy_own_stream(sim, model, &stream);
    }
}

/// Destroys a stream the instance created.
fn destroy_own_stream(sim: &Sim, model: &ModelRi, stream: &Stream) {
    stream.destroy(sim, false);
    if let Some(ctx) = sim.contexts.get(model.ctx) {
        ctx.remove_stream(stream.handle);
    }
}

/// The stream, of the current context, must belong to the instance's context
/// (ACL_ERROR_RT_MODEL_CONTEXT).
pub(super) fn check_same_context(model: &ModelRi, stream: &Stream) -> Res<()> {
    ensure!(
        stream.ctx == model.ctx,
        ACL_ERROR_RT_MODEL_CONTEXT,
        "model runtime instance {} belongs to another context than stream {}'s",
        model.id,
        stream.id
    );
    Ok(())
}

/// Queues the instance's tasks on a stream of its context (another context → 107004; a
/// stream being captured → 107027, one collecting a task group's update → 507009; an instance
/// being captured → 107026).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIExecuteAsync", || {
        let model = root_model(modelRI, "an execution")?;
        let stream = context::submit_stream(sim()?, stream)?;
        check_same_context(&model, &stream)?;
        stream.check_not_captured("executing a model runtime instance on it")?;
        // Its tasks would be queued one by one: their launches taken for the update.
        stream.check_not_updating("executing a model runtime instance on it")?;
        model.replay(&stream)
    })
}

/// Destroys the instance and runs its destroy callbacks. Still being captured → 107026; an
/// execution not over → 107037. An instance still being built may go: its build is abandoned
/// and its streams are unbound.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIDestroy", || {
        // The error table refuses only a capture going on: a program whose build failed half
        // way must be able to let the instance go without ending a build it cannot finish.
        let found = model(modelRI)?;
        let model = match found.built {
            true => found,
            false => root_model(modelRI, "destroying it")?,
        };
        let sim = sim()?;
        model.retire()?;
        discard(sim, &model);
        model.run_destroy_callbacks();
        Ok(())
    })
}

/// Stops the executions of a built instance queued so far: their tasks that have not started
/// are dropped as their streams reach them (a running task finishes); executing it again
/// runs it in full. A captured instance → 207000 (CANN does not support it for captures).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIAbort(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIAbort", || {
        let model = model(modelRI)?;
        ensure!(
            model.built,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "model runtime instance {} was captured: aclmdlRIAbort supports built instances only",
            model.id
        );
        model.abort();
        Ok(())
    })
}

/// Names the instance (the last name wins; at most 511 bytes are kept).
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRISetName(modelRI: aclmdlRI, name: *const c_char) -> aclError {
    guard("aclmdlRISetName", || {
        non_null(modelRI, "modelRI")?;
        let name = c_str(name, "name")?;
        model(modelRI)?.set_name(name);
        Ok(())
    })
}

/// The instance's name ("" if never named) into `maxLen` bytes; too small → 107000 (`maxLen`
/// 0 before the instance is looked up, after the NULL checks).
///
/// # Safety
/// `name` must be NULL or valid for `maxLen` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIGetName(
    modelRI: aclmdlRI,
    maxLen: u32,
    name: *mut c_char,
) -> aclError {
    guard("aclmdlRIGetName", || {
        non_null(modelRI, "modelRI")?;
        non_null(name, "name")?;
        check_text_room(maxLen, "model runtime instance name")?;
        let model = model(modelRI)?;
        write_c_str(name, maxLen, &model.name(), "model runtime instance name")
    })
}

/// The instance's id, unique in the process.
///
/// # Safety
/// `modelRIId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIGetId(modelRI: aclmdlRI, modelRIId: *mut u32) -> aclError {
    guard("aclmdlRIGetId", || {
        non_null(modelRI, "modelRI")?;
        non_null(modelRIId, "modelRIId")?;
        let model = model(modelRI)?;
        write_out(modelRIId, "modelRIId", model.id)
    })
}

/// Writes the instance and its tasks to the log (`tracing`, target `npu_sim::model_ri`, level
/// INFO). Still being captured → 107026.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDebugPrint(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIDebugPrint", || {
        let model = complete_model(modelRI, "printing it")?;
        crate::error::log!(info, target: "npu_sim::model_ri", "{}", model.describe());
        Ok(())
    })
}

/// Writes the instance's tasks to `path` as Chrome trace-event JSON: one track per captured
/// stream, one slice per task in capture order, its type and description in `args`, with the
/// information aclrtCacheLastTaskOpInfo (`op_info`, hex) and aclrtCacheLastTaskExtendInfo
/// (`extend_info`) cached on it; VERBOSE adds each kernel's argument bytes. Flags other than SUMMARY or VERBOSE → 100000; a file
/// that cannot be written → 107010; still being captured → 107026.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDebugJsonPrint(
    modelRI: aclmdlRI,
    path: *const c_char,
    flags: u32,
) -> aclError {
    guard("aclmdlRIDebugJsonPrint", || {
        non_null(modelRI, "modelRI")?;
        let path = c_path(path, "path")?;
        // The flags are a value: checked before the instance is looked up.
        let verbose = match flags {
            ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY => false,
            ACL_MDLRI_DEBUG_JSON_PRINT_VERBOSE => true,
            other => fail!(
                ACL_ERROR_INVALID_PARAM,
                "flags {other:#x} are neither ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY nor ..._VERBOSE"
            ),
        };
        let model = complete_model(modelRI, "printing it")?;
        let text = debug_json(&model, verbose).to_string();
        match std::fs::write(path, text) {
            Ok(()) => Ok(()),
            Err(error) => fail!(ACL_ERROR_RT_FILE_WRITE, "cannot write {path:?}: {error}"),
        }
    })
}

/// The trace-event document aclmdlRIDebugJsonPrint writes.
fn debug_json(model: &ModelRi, verbose: bool) -> serde_json::Value {
    use serde_json::json;
    let tasks = model.tasks();
    let mut events = Vec::new();
    let mut named = Vec::new();
    for (at, task) in tasks.iter().enumerate() {
        if !named.contains(&task.stream_id) {
            named.push(task.stream_id);
            events.push(json!({
                "ph": "M", "name": "thread_name", "pid": model.id, "tid": task.stream_id,
                "args": { "name": format!("stream {}", task.stream_id) },
            }));
        }
        let (category, name) = task.step.label();
        let mut args = json!({
            "task": task.seq,
            "description": describe_step(&task.step),
        });
        if verbose && let Step::Run(Op::Kernel(launch)) = &task.step {
            args["kernel_args"] = json!(launch.args_hex());
        }
        if let Some(info) = &task.op_info {
            let hex: String = info.iter().map(|byte| format!("{byte:02x}")).collect();
            args["op_info"] = json!(hex);
        }
        if let Some(info) = &task.extend_info {
            // The reference asks for UTF-8 JSON; anything else is shown as (lossy) text.
            args["extend_info"] = serde_json::from_slice(info)
                .unwrap_or_else(|_| json!(String::from_utf8_lossy(info)));
        }
        events.push(json!({
            "ph": "X", "name": name, "cat": category, "pid": model.id, "tid": task.stream_id,
            "ts": at, "dur": 1, "args": args,
        }));
    }
    json!({
        "traceEvents": events,
        "otherData": {
            "model_id": model.id,
            "name": model.name(),
            "device": model.device.id,
        },
    })
}

/// Registers a function called with `userData` when the instance is destroyed (again:
/// replaces its user data). NULL func → 100000.
///
/// # Safety
/// `func` must be NULL or a function that may be called with `userData` on the destroying
/// thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroyRegisterCallback(
    modelRI: aclmdlRI,
    func: aclrtCallback,
    userData: *mut std::ffi::c_void,
) -> aclError {
    guard("aclmdlRIDestroyRegisterCallback", || {
        non_null(modelRI, "modelRI")?;
        // A NULL func is refused before the instance is looked up, as every NULL argument.
        let Some(func) = func else {
            fail!(ACL_ERROR_INVALID_PARAM, "func is NULL");
        };
        model(modelRI)?.register_destroy_callback(func, userData as usize);
        Ok(())
    })
}

/// Unregisters a destroy callback (one never registered: nothing to do). NULL func → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroyUnregisterCallback(
    modelRI: aclmdlRI,
    func: aclrtCallback,
) -> aclError {
    guard("aclmdlRIDestroyUnregisterCallback", || {
        non_null(modelRI, "modelRI")?;
        let Some(func) = func else {
            fail!(ACL_ERROR_INVALID_PARAM, "func is NULL");
        };
        model(modelRI)?.unregister_destroy_callback(func);
        Ok(())
    })
}

/// Executes the instance and waits for it: its tasks run on a stream of its own (created in
/// its context at the first call, destroyed with it), and the first task error, or 507046 at
/// the timeout (ms, -1 = forever; 0 or below -1 → 107000), is returned. Still being captured
/// or built → 107026; from another context than the instance's → 107004.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIExecute(modelRI: aclmdlRI, timeout: i32) -> aclError {
    guard("aclmdlRIExecute", || {
        non_null(modelRI, "modelRI")?;
        // The timeout is a value: checked before the instance is looked up.
        let deadline = deadline(timeout, ACL_ERROR_RT_PARAM_INVALID)?;
        let model = root_model(modelRI, "an execution")?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.check_usable()?;
        ensure!(
            ctx.handle == model.ctx,
            ACL_ERROR_RT_MODEL_CONTEXT,
            "model runtime instance {} belongs to another context than the current one",
            model.id
        );
        let stream = model.exec_stream(|| own_stream(sim, &ctx, 0))?;
        // Refused before anything is queued: a host task of the instance's own stream (a
        // host function it captured) would wait for itself in the synchronisation, and a
        // refusal must leave no execution behind.
        stream.refuse_self_wait(u64::MAX)?;
        model.replay(&stream)?;
        stream.synchronize(deadline)
    })
}
