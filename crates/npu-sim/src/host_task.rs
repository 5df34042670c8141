//! The host tasks a thread is running: a host function on its stream's worker, or a blocking
//! callback inside aclrtProcessReport. A stream cannot pass such a task until the thread
//! returns, so a call from inside that waits for the stream to pass it would wait for itself;
//! the reference warns that such calls may deadlock, and the simulator refuses them with a code
//! instead. Host tasks nest (a host function that processes a callback of another stream), and
//! every one of them is the thread's: a wait for any of their streams is refused.

use std::cell::Cell;
use std::ptr;

use npu_sys::*;

use crate::error::{Res, fail};
use crate::handle::Handle;

/// One host task the thread is running, linked to the one it runs inside (if any). It lives on
/// the stack of the [`run`] call that runs the task.
struct Frame {
    stream: Handle,
    position: u64,
    outer: *const Frame,
}

thread_local! {
    /// The innermost host task the thread is running (NULL: none). A plain pointer in a
    /// `const` cell: it needs no destructor, so a call from a thread-exit destructor reads it.
    static RUNNING: Cell<*const Frame> = const { Cell::new(ptr::null()) };
}

/// Runs `f` as the host task at `position` of the stream `stream`.
pub(crate) fn run<R>(stream: Handle, position: u64, f: impl FnOnce() -> R) -> R {
    /// Unlinks the frame when `run` returns or unwinds, before the frame goes away.
    struct Unlink(*const Frame);
    impl Drop for Unlink {
        fn drop(&mut self) {
            RUNNING.set(self.0);
        }
    }
    let frame = Frame {
        stream,
        position,
        outer: RUNNING.get(),
    };
    let _unlink = Unlink(frame.outer);
    RUNNING.set(&raw const frame);
    f()
}

/// Fails if the calling thread is running a host task of `stream` (shown as `id`) at or
/// before `position`, directly or around the host task it runs now: waiting for the stream to
/// reach `position` would never return.
pub(crate) fn refuse_self_wait(stream: Handle, id: i32, position: u64) -> Res<()> {
    let mut at = RUNNING.get();
    while !at.is_null() {
        // SAFETY: a frame is linked only while the `run` call that owns it is on this thread's
        // stack (`Unlink` unlinks it as that call returns or unwinds), and only this thread
        // reads its own list.
        let frame = unsafe { &*at };
        if frame.stream == stream && frame.position <= position {
            fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "the calling thread is running task {} of stream {id} (a host function or a \
                 blocking callback), which the stream cannot pass until it returns; waiting for \
                 the stream from inside it would never return",
                frame.position
            );
        }
        at = frame.outer;
    }
    Ok(())
}

/// Whether the calling thread is running a host task (a host function on a stream's worker,
/// or a blocking callback inside aclrtProcessReport).
pub(crate) fn is_running() -> bool {
    !RUNNING.get().is_null()
}
