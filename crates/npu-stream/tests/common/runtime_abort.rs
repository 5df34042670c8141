//! Waiting for the runtime's own abort of a stream, for the abort tests of npu-stream and of the
//! facade; each includer provides `Stream` and `ffi` (the same types, named through its crate).

use super::{Stream, ffi};

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
    let code = unsafe { (api.aclrtCreateEvent)(&mut event) };
    ctx.runtime().check("aclrtCreateEvent", code).unwrap();
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
