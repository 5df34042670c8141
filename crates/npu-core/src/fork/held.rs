//! Test-only: forks aimed inside a one-time start of npu-rs's (a thread's start through
//! `npu_core::fork::start_once`), by holding another thread there. npu-core's and
//! npu-stream's unit tests share this file (npu-stream includes it by path); each start calls
//! [`here`] inside its initialiser under `#[cfg(test)]`, which holds only a thread the test
//! armed.

use std::cell::RefCell;
use std::sync::mpsc::{Receiver, Sender, channel};

thread_local! {
    /// Set on the thread to hold: whom to tell it is held, and what to wait for.
    static ARMED: RefCell<Option<(Sender<()>, Receiver<()>)>> = const { RefCell::new(None) };
}

/// Called inside a start's initialiser: holds this thread there, if the test armed it, until
/// the test lets it go.
pub(crate) fn here() {
    if let Some((held, go)) = ARMED.take() {
        let _ = held.send(());
        let _ = go.recv();
    }
}

/// The environment variable that makes a test run its case in the process it runs in.
const CASE_ENV: &str = "NPU_FORK_START_CASE";

/// Runs `case` in a process of its own: this test binary, started again to run only `test`
/// (the test calling this, by its full path). A start is one per process, and a runtime any
/// other test started would make every child a forked child whatever the windows.
pub(crate) fn in_a_fresh_process(test: &str, case: impl FnOnce()) {
    if std::env::var_os(CASE_ENV).is_some() {
        case();
        println!("CHILD OK");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, "1")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && printed.contains("CHILD OK"),
        "{}: {printed}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// First forks outside any window: that child is no forked child, and makes the start itself.
/// Then holds a thread inside `start` (a one-time start that calls [`here`]; it returns
/// whether it has what the start makes) and forks again. In that child, `start` must return
/// `false` at once, and `forked` (`npu_core::forked`) `true`; in the parent, once the holder
/// is let go, the holder's and a later `start` return `true`, and `forked` `false`. Each
/// child is bounded by an alarm. For a process in which no runtime and no such start has
/// been made ([`in_a_fresh_process`]).
pub(crate) fn forked_inside_a_start(start: fn() -> bool, forked: fn() -> bool) {
    assert!(!forked(), "a fresh process");
    let status = in_a_forked_child(|| start() && !forked());
    assert!(
        exited_ok(status),
        "a child forked outside any window did not make the start, or was refused as a \
         forked child (status {status:#x})"
    );
    let (held, is_held) = channel();
    let (go, may_go) = channel();
    let holder = std::thread::spawn(move || {
        ARMED.set(Some((held, may_go)));
        start()
    });
    is_held
        .recv()
        .expect("the holder was never held inside the start");
    let status = in_a_forked_child(|| !start() && forked());
    go.send(()).unwrap();
    assert!(holder.join().unwrap(), "the holder's start made nothing");
    assert!(
        exited_ok(status),
        "the child hung, or was not refused as a forked child (status {status:#x})"
    );
    assert!(start(), "the parent's start made nothing");
    assert!(!forked(), "the parent is no forked child");
}

/// Forks; the child checks `body` (bounded by an alarm) and `_exit`s with 0 if it held (1 if it
/// did not, or panicked); the parent waits for the child and returns its raw status (see
/// [`exited_ok`]).
pub(crate) fn in_a_forked_child(body: impl FnOnce() -> bool) -> i32 {
    // SAFETY: the child only runs `body`, under an alarm, and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: an alarm turns a hang of the child into its death by SIGALRM.
        unsafe { libc::alarm(10) };
        // A panic (a failed check) must end the child here with 1, not unwind into its copy
        // of the test harness: that reports the failure as the parent's test, and ends the
        // child as the harness ends (with 0 when the last test thread returns).
        let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(false);
        // SAFETY: ends the child at once, running no destructor of the parent's state.
        unsafe { libc::_exit(if held { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child (bounded by its alarm); `status` a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

/// Whether a child's raw status says it exited with 0.
pub(crate) fn exited_ok(status: i32) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}
