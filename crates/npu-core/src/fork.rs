//! A process forked after npu-rs started a runtime.
//!
//! `fork()` copies only the calling thread: the child has none of the runtime's threads (npu-sim's
//! device workers, CANN's), nor npu-rs's reactor, reaper, sentinel or callback workers, while
//! every table that names them is copied. ACL does not support use across a fork, and in the
//! child work submitted to the runtime was accepted but never ran, so an awaited operation
//! waited for ever. A child of a process that started a runtime therefore refuses every ACL call
//! npu-rs makes ([`Error::Forked`]), and a wait for work submitted before the fork, which
//! nothing in the child will ever complete, ends with that error instead of waiting.
//!
//! Only a wait polled in the child: a task parked on one at the fork is never woken there
//! (whoever would wake it stayed in the parent), and the child handler cannot wake it, as it
//! may make only async-signal-safe calls and a waker takes locks. The program wakes or drops
//! such tasks in the child itself.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::error::{Error, Result};

/// How many forks separate this process from the one that started npu-rs's first runtime: 0
/// there, raised in each child.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// Whether an `aclInit` of npu-rs's succeeded in this process: from then on the runtime's
/// threads may run, and a child has none of them.
static STARTED: AtomicBool = AtomicBool::new(false);

/// How many `aclInit`s of npu-rs's are under way: a fork during one has the runtime half
/// started in the parent.
static STARTING: AtomicU32 = AtomicU32::new(0);

extern "C" fn in_child() {
    // Async-signal-safe: atomic loads and an atomic add, nothing else. A process whose every
    // `aclInit` failed started no runtime: its child is free to start its own.
    if STARTED.load(Ordering::SeqCst) || STARTING.load(Ordering::SeqCst) != 0 {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `init` (an `aclInit`) as npu-rs's start of a runtime in this process: a child forked
/// during or after it is a forked child; if `init` fails and no runtime started before, a
/// child forked afterwards is not.
pub(crate) fn starting<T, E>(
    init: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    STARTING.fetch_add(1, Ordering::SeqCst);
    let started = init();
    if started.is_ok() {
        STARTED.store(true, Ordering::SeqCst);
    }
    STARTING.fetch_sub(1, Ordering::SeqCst);
    started
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

/// Whether this process was forked from one in which npu-rs had started a runtime (one whose
/// `aclInit` succeeded, or was under way at the fork).
///
/// In such a child every ACL call of npu-rs is refused with [`Error::Forked`], and a wait for
/// an operation made before the fork ends with it when it is polled there. A task already
/// parked on such a wait at the fork is not woken in the child (what would have woken it, the
/// reactor or a callback worker, stayed in the parent, and the fork handler may make only
/// async-signal-safe calls, which a waker is not): wake the task yourself, or drop it or its
/// runtime, which returns.
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
