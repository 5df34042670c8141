//! The host task a thread is running: a host function on its stream's worker, or a blocking
//! callback inside aclrtProcessReport. Its stream cannot pass it until the thread returns, so a
//! call from inside that waits for the stream to pass it would wait for itself; the reference
//! warns that such calls may deadlock, and the simulator refuses them with a code instead.

use std::cell::Cell;

use npu_sys::*;

use crate::error::{Res, fail};
use crate::handle::Handle;

thread_local! {
    /// The stream and position of the host task the thread is running, if any.
    static RUNNING: Cell<Option<(Handle, u64)>> = const { Cell::new(None) };
}

/// Runs `f` as the host task at `position` of the stream `stream`.
pub(crate) fn run<R>(stream: Handle, position: u64, f: impl FnOnce() -> R) -> R {
    // A callback may process another one (aclrtProcessReport from inside): restore the outer.
    let outer = RUNNING.replace(Some((stream, position)));
    let result = f();
    RUNNING.set(outer);
    result
}

/// Fails if the calling thread is running a host task of `stream` (shown as `id`) at or
/// before `position`: waiting for the stream to reach `position` would never return.
pub(crate) fn refuse_self_wait(stream: Handle, id: i32, position: u64) -> Res<()> {
    match RUNNING.get() {
        Some((running, at)) if running == stream && at <= position => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "the calling thread is running task {at} of stream {id} (a host function or a \
             blocking callback), which the stream cannot pass until it returns; waiting for the \
             stream from inside it would never return"
        ),
        _ => Ok(()),
    }
}

/// Whether the calling thread is running a host task (a host function on a stream's worker,
/// or a blocking callback inside aclrtProcessReport).
pub(crate) fn is_running() -> bool {
    RUNNING.get().is_some()
}
