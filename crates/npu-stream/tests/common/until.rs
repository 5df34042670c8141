//! Waiting until another thread has done something no completion orders with the test's
//! thread, for npu-stream's tests and the facade's; each includer provides `HANG`, `Stream`
//! and `ffi` (the same types, named through its crate).

use super::{HANG, Stream, ffi};

/// Waits (spinning, with a hang detector) until another thread makes `done` true: for state
/// that no completion orders with the test's thread (a callback thread winding down).
pub(crate) fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + HANG;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "hung waiting until {what}"
        );
        std::thread::yield_now();
    }
}

/// Returns once the runtime's own abort of `stream` has begun, which `Stream::abort`'s refusals
/// cannot tell: they start when its thread marks what it discards, just before the runtime
/// call, so a task the test lets finish in between rightly completes. Records made on the raw
/// stream until the runtime refuses one are queued behind the abort's horizon and discarded.
pub(crate) fn until_the_runtime_aborts(stream: &Stream) {
    let ctx = stream.context();
    ctx.bind().unwrap();
    let api = ctx.runtime().api();
    let mut event = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let code = unsafe { (api.aclrtCreateEventWithFlag)(&mut event, ffi::ACL_EVENT_SYNC) };
    ctx.runtime()
        .check("aclrtCreateEventWithFlag", code)
        .unwrap();
    loop {
        // SAFETY: the event and the stream are alive, and the stream's context is bound.
        let code = unsafe { (api.aclrtRecordEvent)(event, stream.as_raw()) };
        if code == ffi::ACL_ERROR_RT_STREAM_ABORT {
            break;
        }
        ctx.runtime().check("aclrtRecordEvent", code).unwrap();
        std::thread::yield_now();
    }
    // SAFETY: the event is alive and no longer used.
    let code = unsafe { (api.aclrtDestroyEvent)(event) };
    ctx.runtime().check("aclrtDestroyEvent", code).unwrap();
}
