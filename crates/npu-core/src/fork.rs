//! A process forked after npu-rs started a runtime.
//!
//! `fork()` copies only the calling thread: the child has none of the runtime's threads (npu-sim's
//! device workers, CANN's), nor npu-rs's reactor, reaper, sentinel or callback workers, while
//! every table that names them is copied. ACL does not support use across a fork, and in the
//! child work submitted to the runtime was accepted but never ran, so an awaited operation
//! waited for ever. A child of a process that started a runtime therefore refuses every ACL call
//! npu-rs makes ([`Error::Forked`]), and a wait for work submitted before the fork, which
//! nothing in the child will ever complete, ends with that error instead of waiting.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

/// How many forks separate this process from the one that registered the handler: 0 in the
/// process that started npu-rs's first runtime, raised in each child.
static GENERATION: AtomicU32 = AtomicU32::new(0);

extern "C" fn in_child() {
    // Async-signal-safe: an atomic add, nothing else.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the child handler, once per process; called before the first runtime starts.
pub(crate) fn watch() {
    static WATCHING: Once = Once::new();
    WATCHING.call_once(|| {
        // SAFETY: the handler is a plain function that only adds to an atomic, which is
        // async-signal-safe, as a handler run in a forked child must be.
        let code = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if code != 0 {
            crate::log!(
                warn,
                code,
                "cannot watch for fork(): a forked child may hang"
            );
        }
    });
}

/// The fork generation of this process (see [`GENERATION`]).
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process was forked from one in which npu-rs had started a runtime.
///
/// ```
/// assert!(!npu_core::forked(), "this process is no forked child");
/// ```
pub fn forked() -> bool {
    generation() != 0
}

/// The error of `api` called in a forked child.
pub(crate) fn error(api: &'static str) -> Error {
    Error::Forked { api }
}

/// Refuses `api` in a process forked from one in which npu-rs had started a runtime.
/// Shared with the `acl_call!` macros; not part of the API.
#[doc(hidden)]
pub fn refuse(api: &'static str) -> Result<()> {
    if forked() {
        return Err(error(api));
    }
    Ok(())
}
