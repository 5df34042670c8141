//! Explicit builds of model runtime instances: binding PERSISTENT streams, activating one
//! from another, ending their tasks and the build.

use std::sync::Arc;

use npu_sys::*;

use super::model_ri::{check_same_context, model};
use super::value::{check_aligned, check_word};
use crate::context;
use crate::control_flow::{Comparison, Switch};
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::{ModelRi, Step};
use crate::sim::sim;
use crate::stream::Stream;

/// An instance begun with aclmdlRIBuildBegin (a captured one → ACL_ERROR_RT_PARAM_INVALID:
/// its streams are its own, made at the capture's end).
fn built_model(model_ri: aclmdlRI) -> Res<Arc<ModelRi>> {
    let model = model(model_ri)?;
    ensure!(
        model.built,
        ACL_ERROR_RT_PARAM_INVALID,
        "model runtime instance {} was captured, not begun with aclmdlRIBuildBegin",
        model.id
    );
    Ok(model)
}

/// A built instance (aclmdlRIBuildBegin) still being built: a captured one, or one whose
/// build ended → ACL_ERROR_RT_PARAM_INVALID.
fn building_model(model_ri: aclmdlRI) -> Res<Arc<ModelRi>> {
    let model = built_model(model_ri)?;
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
/// captured or built already → 107000; another context → 107003 / 107004; a stream whose
/// destruction has begun → 107017, as a submission there.
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
        non_null(modelRI, "modelRI")?;
        non_null(stream, "stream")?;
        // A value no lookup decides: before the instance and the stream are looked up.
        ensure!(
            flag == STREAM_FLAG_HEAD || flag == STREAM_FLAG_DEFAULT,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag:#x} is neither ACL_MODEL_STREAM_FLAG_HEAD nor ACL_MODEL_STREAM_FLAG_DEFAULT"
        );
        let model = building_model(modelRI)?;
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
        non_null(modelRI, "modelRI")?;
        // `reserve` needs no lookup: refused before the instance is looked up.
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        building_model(modelRI)?.close();
        Ok(())
    })
}

/// Unbinds a stream from a built instance (a captured instance → 107000; not bound → 107005):
/// the instance no longer runs its tasks.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIUnbindStream(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIUnbindStream", || {
        let model = built_model(modelRI)?;
        let (_, stream) = context::owned_stream(sim()?, stream)?;
        model.unbind(&stream)
    })
}

/// Adds to a bound stream's tasks the activation of another stream bound to the same
/// instance (aclrtActiveStream): when an execution reaches it, the activated stream runs its
/// tasks. Either stream not bound to a built instance, or the two bound to different ones →
/// 107005; a stream whose tasks are complete → 107000; another context → 107003.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtActiveStream(
    activeStream: aclrtStream,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtActiveStream", || {
        let sim = sim()?;
        let (_, active) = context::owned_stream(sim, activeStream)?;
        let stream = context::submit_stream(sim, stream)?;
        let model = same_instance(&stream, &active, "activeStream")?;
        model.check_accepts(&stream)?;
        model.push(&stream, Step::Activate(active.id));
        Ok(())
    })
}

/// Adds to a bound stream's tasks a switch to `trueStream` (bound to the same built
/// instance): when an execution reaches it, it compares the values at `leftValue` and
/// `rightValue` (int32 or int64 device memory of the stream's device, aligned to their size,
/// else 107000: the alignment is checked before either stream is looked up) and, if `cond`
/// holds, runs `trueStream` from its first task instead of the
/// rest of this stream's. NULL values or `trueStream`, a `falseStream` (reserved: NULL), or a
/// condition or type outside their enums → 100000; either stream not bound to a built
/// instance, or the two bound to different ones → 107005; another HEAD stream as
/// `trueStream` (it runs in every execution already) or `stream`'s tasks complete → 107000.
///
/// # Safety
/// No preconditions; the values are only read by the device when the switch runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSwitchStream(
    leftValue: *mut std::ffi::c_void,
    cond: aclrtCondition,
    rightValue: *mut std::ffi::c_void,
    dataType: aclrtCompareDataType,
    trueStream: aclrtStream,
    falseStream: aclrtStream,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtSwitchStream", || {
        non_null(leftValue, "leftValue")?;
        non_null(rightValue, "rightValue")?;
        let comparison = Comparison::new(cond, dataType)?;
        non_null(trueStream, "trueStream")?;
        ensure!(
            falseStream.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "falseStream is reserved and must be NULL"
        );
        let width = comparison.width();
        check_aligned(leftValue as usize, width, "leftValue")?;
        check_aligned(rightValue as usize, width, "rightValue")?;
        let sim = sim()?;
        let (_, target) = context::owned_stream(sim, trueStream)?;
        let stream = context::submit_stream(sim, stream)?;
        let model = same_instance(&stream, &target, "trueStream")?;
        // Switching to itself is a loop; to another HEAD stream would run its tasks twice.
        ensure!(
            target.handle == stream.handle || !model.is_head(&target),
            ACL_ERROR_RT_PARAM_INVALID,
            "trueStream {} is another HEAD stream of model runtime instance {}, which runs in every execution already",
            target.id,
            model.id
        );
        model.check_accepts(&stream)?;
        check_word(leftValue as usize, width, stream.device.id, "leftValue")?;
        check_word(rightValue as usize, width, stream.device.id, "rightValue")?;
        model.push(
            &stream,
            Step::Switch(Switch::Stream {
                left: leftValue as usize,
                right: rightValue as usize,
                comparison,
                target: target.id,
            }),
        );
        Ok(())
    })
}

/// The built instance `stream` and `other` (the argument `what`) are both bound to (either
/// bound to none, or the two to different ones → ACL_ERROR_RT_STREAM_MODEL).
fn same_instance(stream: &Stream, other: &Stream, what: &str) -> Res<Arc<ModelRi>> {
    let model = bound_model(stream, "stream")?;
    let other_model = bound_model(other, what)?;
    ensure!(
        Arc::ptr_eq(&model, &other_model),
        ACL_ERROR_RT_STREAM_MODEL,
        "{what} {} is bound to model runtime instance {}, stream {} to {}",
        other.id,
        other_model.id,
        stream.id,
        model.id
    );
    Ok(model)
}

/// The built instance `stream` (the argument `what`) is bound to (none →
/// ACL_ERROR_RT_STREAM_MODEL).
pub(super) fn bound_model(stream: &Stream, what: &str) -> Res<Arc<ModelRi>> {
    match stream.bound_model() {
        Some(model) => Ok(model),
        None => fail!(
            ACL_ERROR_RT_STREAM_MODEL,
            "{what} {} is not bound to a model runtime instance (aclmdlRIBindStream)",
            stream.id
        ),
    }
}
