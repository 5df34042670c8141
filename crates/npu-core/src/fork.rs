//! A process forked after npu-rs started a runtime or one of its threads, or while it made one
//! or started one.
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
//!
//! A child of a process that started one of npu-rs's threads ([`start_once`]: the reaper, say,
//! started by `npu_core::reaper::flush` before any runtime) is a forked child too: the child
//! finds that start made and would hand work to a thread it does not have, and wait for it.
//! So is a child forked while a thread of the parent was making a runtime (from its library's
//! load to its `aclInit`) or starting one of npu-rs's threads, even if no runtime had started
//! yet: those hold locks and one-time initialisers that the child would wait on for ever (the
//! thread that would let go stayed in the parent), so they are windows the child handler
//! counts. A child forked outside any window, of a process where no runtime and none of
//! npu-rs's threads started (every `aclInit` failed, or none was made), is no forked child and
//! may start its own.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

use crate::error::{Error, Result};

/// How many forks separate this process from the first one in which npu-rs started a runtime
/// or one of its threads, or had a window open at a fork: 0 there, raised in each child.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// Whether this process started something a child would find made and absent: a runtime (an
/// `aclInit` of npu-rs's succeeded: the runtime's threads may run) or one of npu-rs's threads
/// ([`start_once`] made a start, with or without a runtime).
static STARTED: AtomicBool = AtomicBool::new(false);

/// How many [`Window`]s are open: threads of this process inside a lock or a one-time start
/// that a child would wait for (a runtime's making, from its library's load to its `aclInit`;
/// the start of one of npu-rs's threads). A child forked during one is a forked child: the
/// thread that would end the wait does not exist there.
static WINDOWS: AtomicU32 = AtomicU32::new(0);

extern "C" fn in_child() {
    // Async-signal-safe: atomic loads and an atomic add, nothing else. A process whose every
    // `aclInit` failed, and that started none of npu-rs's threads, started nothing a child
    // would wait for: its child, unless forked inside a window, is free to start its own.
    if STARTED.load(Ordering::SeqCst) || WINDOWS.load(Ordering::SeqCst) != 0 {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether [`in_child`]'s registration was made: as npu-core was loaded ([`watch_at_load`]),
/// or else by the first runtime's making ([`report_unwatched`]).
static WATCHED: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork`'s code if registering [`in_child`] failed (0 if it did not), until
/// [`report_unwatched`] reports it.
static UNWATCHED: AtomicI32 = AtomicI32::new(0);

/// Registers [`in_child`], recording a failure's code for [`report_unwatched`].
fn watch() {
    // SAFETY: the handler is a plain function that only reads and adds to atomics, which is
    // async-signal-safe, as a handler run in a forked child must be.
    let code = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    UNWATCHED.store(code, Ordering::Relaxed);
}

// Registers [`in_child`] as the program (or the library npu-core is linked into) is loaded,
// before any of its threads can use npu-rs. A registration made on first use would be a
// one-time start of its own, and a child forked inside it could not tell (its handler may not
// be registered yet), while its first use of npu-rs waited for that start for ever. `ctor`
// places it in the platform's constructor section (`.init_array` on ELF, `__mod_init_func` on
// Mach-O, ...).
//
// SAFETY (`ctor`'s `unsafe` marker: code run before `main`, or inside `dlopen`): it makes only
// a `pthread_atfork` call and stores to atomics, and touches no state of Rust's runtime or
// standard library (no allocation, no I/O, no thread-locals, no lock), which may not be set
// up yet. Not logged here for that reason: [`report_unwatched`] logs a failure later.
#[ctor::ctor(unsafe)]
fn watch_at_load() {
    WATCHED.store(true, Ordering::SeqCst);
    watch();
}

/// Called as a runtime is made. If the registration at load never ran (a link setup that
/// dropped npu-core's constructor), registers [`in_child`] now and warns, once: forks before
/// this point went unwatched. Then logs, once, that forks are not watched if `pthread_atfork`
/// failed. A plain atomic rather than a one-time initialiser, which would be a start of its
/// own that a fork could land in.
pub(crate) fn report_unwatched() {
    if !WATCHED.swap(true, Ordering::SeqCst) {
        watch();
        crate::log!(
            warn,
            "npu-core's load-time fork watch did not run (its constructor was not linked in): \
             fork() is watched from this runtime's making on; a child forked before may hang"
        );
    }
    let code = UNWATCHED.swap(0, Ordering::Relaxed);
    if code != 0 {
        crate::log!(
            warn,
            code,
            "cannot watch for fork(): a forked child may hang"
        );
    }
}

/// Records that an `aclInit` of npu-rs's succeeded: a child forked from now on is a forked
/// child. (One under way is inside the [`Window`] of its runtime's making.)
pub(crate) fn started() {
    STARTED.store(true, Ordering::SeqCst);
}

/// A window, open until dropped: a thread inside a lock or a one-time start that a child would
/// wait for, during which a fork makes a forked child. Open it before taking what a child would
/// wait for, and drop it after letting go (a guard declared after it is dropped first).
#[must_use = "the window closes when dropped"]
pub(crate) struct Window(());

impl Window {
    pub(crate) fn open() -> Window {
        WINDOWS.fetch_add(1, Ordering::SeqCst);
        Window(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        WINDOWS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `cell`'s value, made by `init` on first use: a one-time start (of one of npu-rs's threads)
/// that a fork may land in. `None` in a forked child if the value was not made before the
/// fork: a thread of the parent may have been making it, and the child would wait for that
/// thread for ever; it behaves as if the start had happened in the parent, whose threads the
/// child has none of. Made in a window (see [`forked`]), so that a child forked meanwhile is a
/// forked child; once made, every child is a forked child, as it finds the value made and the
/// thread it names absent.
///
/// Shared with npu-rs's crates, not part of the API.
#[doc(hidden)]
pub fn start_once<T>(
    _: crate::seal::Seal,
    cell: &OnceLock<T>,
    init: impl FnOnce() -> T,
) -> Option<&T> {
    if let Some(made) = cell.get() {
        return Some(made);
    }
    if forked() {
        return None;
    }
    let _window = Window::open();
    let made = cell.get_or_init(init);
    // Inside the window: no fork lands between the value's making and this mark unseen.
    STARTED.store(true, Ordering::SeqCst);
    Some(made)
}

/// The fork generation of this process (see [`GENERATION`]).
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process was forked from one in which npu-rs had started a runtime (one whose
/// `aclInit` succeeded) or one of its threads (the reaper, the reactor, the sentinel, the
/// blocking overseer), or in which a thread was making a runtime (from loading its library to
/// its `aclInit`) or starting one of npu-rs's threads at the fork.
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

/// Refuses `api` in a forked child ([`forked`]): one forked from a process in which npu-rs had
/// started a runtime or one of its threads, or was making or starting one.
/// Shared with npu-rs's crates, not part of the API.
#[doc(hidden)]
pub fn refuse(_: crate::seal::Seal, api: &'static str) -> Result<()> {
    if forked() {
        return Err(error(api));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod held;

#[cfg(test)]
mod tests {
    use super::*;

    /// "A forked child is refused, never hung" for a one-time start: a thread is held inside
    /// one, in a process where no runtime started yet, while this thread forks. In the child,
    /// [`start_once`] on the same cell must return `None` at once (bounded by the child's
    /// alarm), and the child is a forked child; the parent, once the holder lets go, has the
    /// holder's value and is none.
    ///
    /// The break (without the window's count, or without the refusal in a forked child): the
    /// child waited on the cell, which the holder never completes there (killed by its alarm).
    /// The fork watch is registered as npu-core is loaded (its `ctor` constructor), not first
    /// by a runtime's making: checked in a fresh process, where no runtime was made, so a
    /// link setup that drops the constructor fails here rather than leaving forks before the
    /// first runtime unwatched.
    #[test]
    fn the_fork_watch_is_registered_as_npu_core_is_loaded() {
        held::in_a_fresh_process(
            "fork::tests::the_fork_watch_is_registered_as_npu_core_is_loaded",
            || {
                assert!(
                    WATCHED.load(Ordering::SeqCst),
                    "npu-core's load-time constructor did not run"
                );
                assert_eq!(
                    UNWATCHED.load(Ordering::Relaxed),
                    0,
                    "pthread_atfork failed"
                );
            },
        );
    }

    /// The fork tests' helper: a check that panics in the child fails it (the child exits
    /// with 1), in a fresh process (one thread forks, none other is inside a lock the panic
    /// takes).
    ///
    /// The break: the panic unwound into the child's copy of the test harness, which caught
    /// it as a test's failure, and the child ended as the harness's test thread did, with 0:
    /// the failed check passed.
    #[test]
    fn a_panic_in_a_forked_child_fails_its_check() {
        held::in_a_fresh_process(
            "fork::tests::a_panic_in_a_forked_child_fails_its_check",
            || {
                let status = held::in_a_forked_child(|| panic!("the child's check failed"));
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1,
                    "the child did not fail its check (status {status:#x})"
                );
            },
        );
    }

    #[test]
    fn a_child_forked_inside_a_one_time_start_is_refused_not_hung() {
        static CELL: OnceLock<u32> = OnceLock::new();
        held::in_a_fresh_process(
            "fork::tests::a_child_forked_inside_a_one_time_start_is_refused_not_hung",
            || {
                held::forked_inside_a_start(
                    || {
                        start_once(crate::SEAL, &CELL, || {
                            held::here();
                            1
                        })
                        .is_some()
                    },
                    forked,
                )
            },
        );
    }
}
