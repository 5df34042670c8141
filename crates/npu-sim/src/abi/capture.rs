//! Stream capture: beginning, observing and ending it, and the threads' capture modes.

use std::sync::Arc;

use npu_sys::*;

use super::cond_task::clear_branch;
use super::model_ri::{discard, own_stream};
use crate::capture::{self, Capture};
use crate::context;
use crate::error::{ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::ModelRi;
use crate::sim::sim;

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
/// thread → 107038 (the capture goes on). An invalidated capture (507903), one with a stream
/// that did not return to this one (107025) or one with a task group begun and not ended
/// (107033) ends without an instance.
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
            })
            .and_then(|()| {
                ensure!(
                    !capture.left_a_group_open(),
                    ACL_ERROR_STREAM_TASK_GROUP_STATUS,
                    "a stream of the capture of stream {} began a task group \
                     (aclmdlRICaptureTaskGrpBegin) and did not end it (aclmdlRICaptureTaskGrpEnd)",
                    stream.id
                );
                Ok(())
            });
        let outcome = outcome.and_then(|()| {
            // A branch's instance destroyed (its root's capture failed) during its capture.
            sim.models.resolve(model.handle)?;
            let ctx = sim.contexts.resolve(model.ctx)?;
            model.adopt_streams(|| own_stream(sim, &ctx, ACL_STREAM_PERSISTENT))
        });
        if let Err(error) = outcome {
            match model.is_branch() {
                // Its conditional task still names it: it runs nothing until captured again.
                true => clear_branch(sim, model),
                false => discard(sim, model),
            }
            model.end_branch_capture(false);
            return Err(error);
        }
        model.end_branch_capture(true);
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
