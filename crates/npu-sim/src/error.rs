//! Error reporting at the C boundary: the thread's last error, the accumulated error messages
//! (aclGetRecentErrMsg), and the guard every exported function runs its body in.

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use npu_sys::*;

/// A failed call: the ACL code it returns and a description of what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimError {
    pub(crate) code: aclError,
    pub(crate) msg: String,
}

impl SimError {
    pub(crate) fn new(code: aclError, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
        }
    }

    /// This error with `code` in place of any of `refusals`, message kept: for a function whose
    /// header names another code for refused input than the shared check it calls answers.
    pub(crate) fn recoded(mut self, refusals: &[aclError], code: aclError) -> Self {
        if refusals.contains(&self.code) {
            self.code = code;
        }
        self
    }
}

/// Result of the simulator's internal operations.
pub(crate) type Res<T> = Result<T, SimError>;

/// Returns early with a [`SimError`] built from a code and a format string.
macro_rules! fail {
    ($code:expr, $($arg:tt)+) => {
        return Err($crate::error::SimError::new($code, format!($($arg)+)))
    };
}

/// Returns early with a [`SimError`] unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $code:expr, $($arg:tt)+) => {
        if !$cond {
            $crate::error::fail!($code, $($arg)+);
        }
    };
}

/// Emits a `tracing` event (`log!(warn, target: ..., ...)`) inside a [`contain`]ment: the
/// subscriber is the program's code and may panic, and the simulator logs from exported
/// functions, its workers and allocations half made.
macro_rules! log {
    ($level:ident, $($event:tt)+) => {{
        let _ = $crate::error::contain(|| tracing::$level!($($event)+));
    }};
}

pub(crate) use {ensure, fail, log};

/// Checks a required pointer argument: NULL is rejected by the ACL layer with 100000.
pub(crate) fn non_null<T>(ptr: *const T, what: &str) -> Res<()> {
    ensure!(!ptr.is_null(), ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    Ok(())
}

/// Makes room for `len` elements in `vec` for a size the caller chose: a size the host cannot
/// allocate fails with 207001, as the runtime's own host allocations do, instead of aborting
/// the process.
pub(crate) fn reserve<T>(vec: &mut Vec<T>, len: usize, what: &str) -> Res<()> {
    vec.try_reserve_exact(len.saturating_sub(vec.len()))
        .map_err(|_| {
            SimError::new(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!(
                    "cannot allocate {} bytes of host memory for {what}",
                    len.saturating_mul(size_of::<T>())
                ),
            )
        })
}

/// Writes a result through a caller-supplied out pointer after checking it is not NULL.
pub(crate) fn write_out<T>(ptr: *mut T, what: &str, value: T) -> Res<()> {
    non_null(ptr, what)?;
    // SAFETY: the pointer is non-NULL, and the C contract of every ACL out parameter is that a
    // non-NULL pointer is valid for a write of its type. It may be unaligned when C code packs
    // structures, hence write_unaligned.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Most messages a thread accumulates before the oldest are dropped (nobody may ever read
/// them, and a long-lived thread must not grow without bound).
const MAX_PENDING_MESSAGES: usize = 64;

thread_local! {
    static LAST_ERROR: Cell<aclError> = const { Cell::new(ACL_SUCCESS) };
    static PENDING: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static RETURNED: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Whether messages are kept for the whole process (aclInit's `"err_msg_mode": "1"`) instead
/// of per thread.
static PROCESS_LEVEL: AtomicBool = AtomicBool::new(false);
/// The pending messages of every thread, at process level.
static PROCESS_PENDING: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Switches between thread-level (the default) and process-level messages. Messages pending at
/// process level are dropped; those pending on each thread stay for thread level.
pub(crate) fn set_process_level_messages(process: bool) {
    PROCESS_LEVEL.store(process, Ordering::Release);
    crate::sync::lock(&PROCESS_PENDING).clear();
}

/// Appends a message, dropping the oldest beyond [`MAX_PENDING_MESSAGES`].
fn push_message(pending: &mut Vec<String>, line: String) {
    if pending.len() == MAX_PENDING_MESSAGES {
        pending.remove(0);
    }
    pending.push(line);
}

/// Records a failure of `api` on the calling thread: last error and message (the message for
/// the whole process at process level).
///
/// `try_with`: a call from a thread-exit destructor (after the thread's locals are gone) still
/// returns its code instead of panicking outside the guard.
pub(crate) fn record(api: &str, error: &SimError) {
    let _ = LAST_ERROR.try_with(|last| last.set(error.code));
    let line = format!(
        "{api} failed with {} ({}): {}",
        error.code,
        code_name(error.code),
        error.msg
    );
    // The subscriber is the program's code and may panic; the code and message are kept
    // whatever it does, and its panic stops here (the caller is an exported C function).
    log!(debug, target: "npu_sim", "{line}");
    if PROCESS_LEVEL.load(Ordering::Acquire) {
        push_message(&mut crate::sync::lock(&PROCESS_PENDING), line);
    } else {
        let _ = PENDING.try_with(|pending| push_message(&mut pending.borrow_mut(), line));
    }
}

/// Runs `f`, stopping a panic: gives back what it panicked with, as text. The payload is
/// dropped inside a containment of its own (its `Drop` is the panicking code's, and may
/// panic too), and leaked if that panics. The simulator's one way of running code that may
/// panic (user kernels and subscribers, its own task bodies) where an unwind must stop.
pub(crate) fn contain<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
        what
    })
}

/// aclGetRecentErrMsg: returns and clears the pending messages (of the thread, or of the
/// process at process level), newest first; NULL when none. The string stays valid until the
/// next call on the same thread.
///
/// `try_with`, as in [`record`]: called from a thread-exit destructor, after the thread's
/// locals are gone, it returns NULL (nothing can hold the string then) instead of panicking in
/// a function that cannot unwind, which aborted the process.
pub(crate) fn take_recent_message() -> *const c_char {
    let pending = if PROCESS_LEVEL.load(Ordering::Acquire) {
        std::mem::take(&mut *crate::sync::lock(&PROCESS_PENDING))
    } else {
        PENDING
            .try_with(|pending| std::mem::take(&mut *pending.borrow_mut()))
            .unwrap_or_default()
    };
    if pending.is_empty() {
        let _ = RETURNED.try_with(|slot| slot.replace(None));
        return ptr::null();
    }
    let joined: Vec<String> = pending.into_iter().rev().collect();
    // Messages never contain NUL (they are built from format strings and C strings).
    let text = CString::new(joined.join("\n").replace('\0', " ")).unwrap_or_default();
    RETURNED
        .try_with(|slot| slot.borrow_mut().insert(text).as_ptr())
        .unwrap_or(ptr::null())
}

/// aclrtPeekAtLastError.
pub(crate) fn peek_last_error() -> aclError {
    LAST_ERROR.get()
}

/// aclrtGetLastError.
pub(crate) fn take_last_error() -> aclError {
    LAST_ERROR.replace(ACL_SUCCESS)
}

/// Runs the body of an exported function: converts its error into the returned code (recording
/// it for the thread), and a panic into ACL_ERROR_RT_INTERNAL_ERROR, so no unwinding crosses the
/// C boundary.
pub(crate) fn guard(api: &'static str, body: impl FnOnce() -> Res<()>) -> aclError {
    // While the process is snapshot-locked, the calls the lock blocks wait here for the unlock.
    let _pass = crate::snapshot::admit(api);
    let error = match contain(body) {
        Ok(Ok(())) => return ACL_SUCCESS,
        Ok(Err(error)) => error,
        Err(what) => SimError::new(
            ACL_ERROR_RT_INTERNAL_ERROR,
            format!("internal error: {what}"),
        ),
    };
    record(api, &error);
    error.code
}

/// Like [`guard`] for the few functions that return a value instead of a code; `fallback` is
/// returned on failure.
pub(crate) fn guard_value<T>(api: &'static str, fallback: T, body: impl FnOnce() -> Res<T>) -> T {
    let mut out = None;
    let code = guard(api, || {
        out = Some(body()?);
        Ok(())
    });
    match out {
        Some(value) if code == ACL_SUCCESS => value,
        _ => fallback,
    }
}

/// The symbolic name of an ACL code, for messages.
pub(crate) fn code_name(code: aclError) -> &'static str {
    npu_sys::code_info(code).map_or("an ACL error code", |info| info.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn recent_message_is_newest_first_and_cleared() {
        record("first", &SimError::new(ACL_ERROR_INVALID_PARAM, "one"));
        record("second", &SimError::new(ACL_ERROR_RT_PARAM_INVALID, "two"));
        let text = take_recent_message();
        assert!(!text.is_null());
        // SAFETY: non-NULL results point at the thread's NUL-terminated message.
        let text = unsafe { CStr::from_ptr(text) }.to_str().unwrap().to_owned();
        assert!(text.starts_with("second failed with 107000 (ACL_ERROR_RT_PARAM_INVALID): two"));
        assert!(text.ends_with("first failed with 100000 (ACL_ERROR_INVALID_PARAM): one"));
        assert!(take_recent_message().is_null());
        assert_eq!(take_last_error(), ACL_ERROR_RT_PARAM_INVALID);
        assert_eq!(peek_last_error(), ACL_SUCCESS);
    }

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let code = guard("panicky", || panic!("boom"));
        assert_eq!(code, ACL_ERROR_RT_INTERNAL_ERROR);
        assert_eq!(peek_last_error(), ACL_ERROR_RT_INTERNAL_ERROR);
        let _ = take_recent_message();
    }
}
