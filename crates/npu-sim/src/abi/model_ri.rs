//! Model runtime instances: stream capture, replay, and what an instance tells about itself.

use std::ffi::c_char;
use std::sync::Arc;

use npu_sys::*;

use super::check::{c_str, deadline, write_c_str};
use crate::capture::{self, Capture};
use crate::context;
use crate::context::Context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::{Captured, ModelRi, Step, TaskRef, describe_step, task_type};
use crate::sim::{Sim, sim};
use crate::stream::Stream;
use crate::task::Op;

/// The instance behind a handle (NULL → 100000, stale or forged → 107017).
fn model(model_ri: aclmdlRI) -> Res<Arc<ModelRi>> {
    non_null(model_ri, "modelRI")?;
    sim()?.models.resolve(handle::from_ptr(model_ri))
}

/// The instance, whose capture or build must be over (ACL_ERROR_RT_MODEL_CAPTURED): `what`
/// needs it complete.
fn complete_model(model_ri: aclmdlRI, what: &str) -> Res<Arc<ModelRi>> {
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

/// A built instance (aclmdlRIBuildBegin) still being built: a captured one, or one whose
/// build ended → ACL_ERROR_RT_PARAM_INVALID.
fn building_model(model_ri: aclmdlRI) -> Res<Arc<ModelRi>> {
    let model = model(model_ri)?;
    ensure!(
        model.built,
        ACL_ERROR_RT_PARAM_INVALID,
        "model runtime instance {} was captured, not begun with aclmdlRIBuildBegin",
        model.id
    );
    ensure!(
        model.is_open(),
        ACL_ERROR_RT_PARAM_INVALID,
        "model runtime instance {} is built already (aclmdlRIBuildEnd)",
        model.id
    );
    Ok(model)
}

/// The stream flag of aclmdlRIBindStream that makes a stream run from the start of every
/// execution (CANN's ACL_MODEL_STREAM_FLAG_HEAD, a macro its headers do not define).
const STREAM_FLAG_HEAD: u32 = 0x0000_0000;
/// ... and the one of streams that an activation starts (ACL_MODEL_STREAM_FLAG_DEFAULT).
const STREAM_FLAG_DEFAULT: u32 = 0x7FFF_FFFF;

/// A stream an instance owns (its execution stream, its model streams), in its context.
fn own_stream(sim: &Sim, ctx: &Context, flags: u32) -> Res<Arc<Stream>> {
    let stream = Stream::create(sim, ctx.handle, &ctx.device, &ctx.health, 0, flags, false)?;
    ctx.add_stream(stream.clone());
    Ok(stream)
}

/// Retires the instance: its handle and its tasks' handles, its bindings, the streams it
/// owns.
fn discard(sim: &Sim, model: &ModelRi) {
    sim.models.remove(model.handle);
    for handle in model.take_task_handles() {
        sim.model_tasks.remove(handle);
    }
    for handle in model.take_group_handles() {
        sim.task_groups.remove(handle);
    }
    model.unbind_all();
    for stream in model.take_own_streams() {
        stream.destroy(sim, false);
        if let Some(ctx) = sim.contexts.get(model.ctx) {
            ctx.remove_stream(stream.handle);
        }
    }
}

/// The stream, of the current context, must belong to the instance's context
/// (ACL_ERROR_RT_MODEL_CONTEXT).
fn check_same_context(model: &ModelRi, stream: &Stream) -> Res<()> {
    ensure!(
        stream.ctx == model.ctx,
        ACL_ERROR_RT_MODEL_CONTEXT,
        "model runtime instance {} belongs to another context than stream {}'s",
        model.id,
        stream.id
    );
    Ok(())
}

/// Starts capturing the stream's tasks into a new instance. The default stream → 107031; a
/// stream capturing already → 107027; a mode outside aclmdlRICaptureMode → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureBegin(
    stream: aclrtStream,
    mode: aclmdlRICaptureMode,
) -> aclError {
    guard("aclmdlRICaptureBegin", || {
        capture::check_mode(mode)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        ensure!(
            !stream.is_default,
            ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
            "the default stream cannot be captured"
        );
        let handle = sim.models.reserve()?;
        let model = Arc::new(ModelRi::new(
            handle,
            stream.ctx,
            stream.device.clone(),
            false,
        ));
        match Capture::begin(&stream, model.clone(), mode) {
            Ok(_) => {
                sim.models.fill(handle, model);
                Ok(())
            }
            Err(error) => {
                sim.models.remove(handle);
                Err(error)
            }
        }
    })
}

/// The stream's capture status and instance: NONE and NULL when it is not being captured,
/// ACTIVE, or INVALIDATED once an operation refused because of the capture invalidated it.
///
/// # Safety
/// `status` and `modelRI` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureGetInfo(
    stream: aclrtStream,
    status: *mut aclmdlRICaptureStatus,
    modelRI: *mut aclmdlRI,
) -> aclError {
    guard("aclmdlRICaptureGetInfo", || {
        non_null(status, "status")?;
        non_null(modelRI, "modelRI")?;
        let stream = context::any_stream(sim()?, stream)?;
        let (state, model) = match stream.capture() {
            None => (ACL_MODEL_RI_CAPTURE_STATUS_NONE, std::ptr::null_mut()),
            Some(capture) => {
                let state = match capture.is_invalidated() {
                    true => ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
                    false => ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
                };
                (state, handle::to_ptr(capture.model.handle))
            }
        };
        write_out(status, "status", state)?;
        write_out(modelRI, "modelRI", model)
    })
}

/// Ends the capture begun on this stream and returns its instance. Not capturing → 107029;
/// a stream that joined another's capture → 107036; a non-RELAXED capture ended on another
/// thread → 107038 (the capture goes on). An invalidated capture (507903) or one with a stream
/// that did not return to this one (107025) ends without an instance.
///
/// # Safety
/// `modelRI` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureEnd(
    stream: aclrtStream,
    modelRI: *mut aclmdlRI,
) -> aclError {
    guard("aclmdlRICaptureEnd", || {
        non_null(modelRI, "modelRI")?;
        let sim = sim()?;
        let (_, stream) = context::owned_stream(sim, stream)?;
        let Some(capture) = stream.capture() else {
            fail!(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                "stream {} is not being captured",
                stream.id
            );
        };
        ensure!(
            capture.origin.handle == stream.handle,
            ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
            "stream {} joined the capture of stream {}, which is the one to end it",
            stream.id,
            capture.origin.id
        );
        ensure!(
            capture.mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED
                || capture.thread == std::thread::current().id(),
            ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
            "the capture of stream {} was not begun in RELAXED mode, so it ends on the thread that began it",
            stream.id
        );
        capture.end();
        let model = &capture.model;
        model.forget_captured_records();
        let outcome = capture
            .check_valid()
            .and_then(|()| match model.unjoined(stream.id) {
                Some(other) => fail!(
                    ACL_ERROR_RT_STREAM_UNJOINED,
                    "stream {other} joined the capture of stream {} but did not return to it (its \
                 last task must be an event record that another stream of the capture waits on)",
                    stream.id
                ),
                None => Ok(()),
            });
        let outcome = outcome.and_then(|()| {
            let ctx = sim.contexts.resolve(model.ctx)?;
            model.adopt_streams(|| own_stream(sim, &ctx, ACL_STREAM_PERSISTENT))
        });
        if let Err(error) = outcome {
            discard(sim, model);
            return Err(error);
        }
        write_out(modelRI, "modelRI", handle::to_ptr(model.handle))
    })
}

/// Sets the calling thread's capture mode; `*mode` receives the previous one (GLOBAL until
/// first changed). A mode outside aclmdlRICaptureMode → 100000.
///
/// # Safety
/// `mode` must be NULL or valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureThreadExchangeMode(
    mode: *mut aclmdlRICaptureMode,
) -> aclError {
    guard("aclmdlRICaptureThreadExchangeMode", || {
        non_null(mode, "mode")?;
        // SAFETY: non-NULL; valid for a read by the API contract.
        let wanted = unsafe { mode.read_unaligned() };
        capture::check_mode(wanted)?;
        write_out(mode, "mode", capture::exchange_mode(wanted))
    })
}

/// Queues the instance's tasks on a stream of its context (another context → 107004; a
/// stream being captured → 107027; an instance being captured → 107026).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIExecuteAsync", || {
        let model = complete_model(modelRI, "an execution")?;
        let stream = context::submit_stream(sim()?, stream)?;
        check_same_context(&model, &stream)?;
        stream.check_not_captured("executing a model runtime instance on it")?;
        model.replay(&stream)
    })
}

/// Destroys the instance and runs its destroy callbacks. Still being captured → 107026; an
/// execution not over → 107037.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIDestroy", || {
        let model = complete_model(modelRI, "destroying it")?;
        ensure!(
            !model.running(),
            ACL_ERROR_RT_MODEL_RUNNING,
            "model runtime instance {} is still running (synchronize the streams it executes on first)",
            model.id
        );
        let sim = sim()?;
        discard(sim, &model);
        model.run_destroy_callbacks();
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
        let model = model(modelRI)?;
        model.set_name(c_str(name, "name")?);
        Ok(())
    })
}

/// The instance's name ("" if never named) into `maxLen` bytes; too small → 107000.
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
        let model = model(modelRI)?;
        non_null(modelRIId, "modelRIId")?;
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
        tracing::info!(target: "npu_sim::model_ri", "{}", model.describe());
        Ok(())
    })
}

/// Writes the instance's tasks to `path` as Chrome trace-event JSON: one track per captured
/// stream, one slice per task in capture order, its type and description in `args`; VERBOSE
/// adds each kernel's argument bytes. Flags other than SUMMARY or VERBOSE → 100000; a file
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
        let model = complete_model(modelRI, "printing it")?;
        let path = c_str(path, "path")?;
        let verbose = match flags {
            ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY => false,
            ACL_MDLRI_DEBUG_JSON_PRINT_VERBOSE => true,
            other => fail!(
                ACL_ERROR_INVALID_PARAM,
                "flags {other:#x} are neither ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY nor ..._VERBOSE"
            ),
        };
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
        let model = model(modelRI)?;
        let Some(func) = func else {
            fail!(ACL_ERROR_INVALID_PARAM, "func is NULL");
        };
        model.register_destroy_callback(func, userData as usize);
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
        let model = model(modelRI)?;
        let Some(func) = func else {
            fail!(ACL_ERROR_INVALID_PARAM, "func is NULL");
        };
        model.unregister_destroy_callback(func);
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
        let model = complete_model(modelRI, "an execution")?;
        let deadline = deadline(timeout, ACL_ERROR_RT_PARAM_INVALID)?;
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
        model.replay(&stream)?;
        stream.synchronize(deadline)
    })
}

/// Begins building an instance in the current context (`flag` is reserved: 0, else
/// 100000): its tasks are those submitted to the streams bound to it until aclmdlRIBuildEnd.
///
/// # Safety
/// `modelRI` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIBuildBegin(modelRI: *mut aclmdlRI, flag: u32) -> aclError {
    guard("aclmdlRIBuildBegin", || {
        non_null(modelRI, "modelRI")?;
        ensure!(
            flag == 0,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag:#x} is reserved and must be 0"
        );
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.check_usable()?;
        let handle = sim.models.reserve()?;
        let model = Arc::new(ModelRi::new(handle, ctx.handle, ctx.device.clone(), true));
        sim.models.fill(handle, model);
        write_out(modelRI, "modelRI", handle::to_ptr(handle))
    })
}

/// Binds an ACL_STREAM_PERSISTENT stream of the instance's context to an instance being
/// built: its tasks go into the instance. NULL stream or a flag other than HEAD (0) and
/// DEFAULT (0x7FFFFFFF) → 100000; a stream not PERSISTENT, bound already, or an instance
/// captured or built already → 107000; another context → 107003 / 107004.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIBindStream(
    modelRI: aclmdlRI,
    stream: aclrtStream,
    flag: u32,
) -> aclError {
    guard("aclmdlRIBindStream", || {
        let model = building_model(modelRI)?;
        non_null(stream, "stream")?;
        ensure!(
            flag == STREAM_FLAG_HEAD || flag == STREAM_FLAG_DEFAULT,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag:#x} is neither ACL_MODEL_STREAM_FLAG_HEAD nor ACL_MODEL_STREAM_FLAG_DEFAULT"
        );
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        check_same_context(&model, &stream)?;
        model.bind(&stream, flag == STREAM_FLAG_HEAD)
    })
}

/// Marks the end of the tasks of a stream bound to the instance (not bound → 107005): later
/// submissions to it are refused (107000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIEndTask(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIEndTask", || {
        let model = building_model(modelRI)?;
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        model.end_tasks(&stream)
    })
}

/// Ends the build (`reserve` must be NULL, else 100000): the instance can execute, and its
/// streams take no more tasks (107000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIBuildEnd(
    modelRI: aclmdlRI,
    reserve: *mut std::ffi::c_void,
) -> aclError {
    guard("aclmdlRIBuildEnd", || {
        let model = building_model(modelRI)?;
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        model.close();
        Ok(())
    })
}

/// Unbinds a stream from the instance (not bound → 107005); the instance keeps its tasks.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIUnbindStream(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIUnbindStream", || {
        let model = model(modelRI)?;
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        model.unbind(&stream)
    })
}

/// Writes up to `*count` of `items` to `out` and sets `*count` to how many there are; with
/// `out` NULL only the number.
fn write_list<T: Copy>(out: *mut T, count: *mut u32, items: &[T], what: &str) -> Res<()> {
    non_null(count, what)?;
    if !out.is_null() {
        // SAFETY: non-NULL; valid for a read by the API contract.
        let room = unsafe { count.read_unaligned() } as usize;
        for (at, item) in items.iter().take(room).enumerate() {
            // SAFETY: the caller's array holds `*count` elements (the API contract), and `at`
            // is below it.
            unsafe { out.add(at).write_unaligned(*item) };
        }
    }
    write_out(count, what, items.len() as u32)
}

/// The instance's streams: a built one's bound streams, a captured one's model streams (one
/// per stream it captured). `streams` NULL: only their number into `*numStreams`; else up to
/// `*numStreams` handles, and `*numStreams` becomes their number. Still being captured or
/// built → 107026.
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
fn task_ref(task: aclmdlRITask) -> Res<(Arc<ModelRi>, usize)> {
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
        let captured = captured_task(task)?;
        non_null(type_, "type")?;
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
        let captured = captured_task(task)?;
        non_null(id, "id")?;
        write_out(id, "id", captured.seq)
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
