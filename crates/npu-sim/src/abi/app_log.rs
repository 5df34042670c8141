//! aclAppLog: an application's log records (CANN's `ACL_APP_LOG(level, fmt, ...)` macro).
//!
//! aclAppLog is C-variadic, and stable Rust cannot define a C-variadic function. So the
//! function has two halves:
//!
//! - `csrc/app_log.c` (compiled by `build.rs` into a static library linked into this crate)
//!   defines the hidden `npusim_app_log`, with aclAppLog's exact prototype: it formats the
//!   record with `vsnprintf` into CANN's 1024 bytes (the NUL included), ends a longer one with
//!   `...[truncated]`, and passes the text to [`npusimAppLogWrite`] below.
//! - The exported `aclAppLog` is a naked Rust function whose whole body is a tail jump to
//!   `npusim_app_log` (`jmp` on x86_64, `b` on aarch64). It touches no register and no stack
//!   slot, so the C function receives the caller's call as it was made: the SysV x86_64 `%al`
//!   vector-register count, the integer and vector argument registers and the stack arguments,
//!   or AAPCS64's registers and stack. A C symbol in a static library would be hidden by the
//!   version script rustc gives a cdylib (`local: *`), which no linker flag overrides on both
//!   lld and ld.bfd; a Rust item is exported like every other function of this module.
//!
//! `aclAppLog` is private and declared `fn()`: Rust code cannot call it with the wrong
//! signature by accident. Rust code that means to call it declares CANN's prototype in an
//! `unsafe extern "C"` block (Rust can call C-variadic functions), as `tests/app_log.rs` does.
//! On targets other than x86_64 and aarch64 the library does not export aclAppLog.
//!
//! What a record does (the header's comment; docs/simulator.md, Decisions): it always becomes a
//! `tracing` event (target `npu_sim::app_log`, level DEBUG, INFO, WARN or ERROR, fields `func`,
//! `file`, `line`); with `ASCEND_SLOG_PRINT_TO_STDOUT=1` one at or above
//! `ASCEND_GLOBAL_LOG_LEVEL` (0 debug to 3 error, the default; 4 prints nothing) is also printed
//! to stdout as one plog-like line. The environment is read once, at the first record. A level
//! outside 0..=3 or a NULL `fmt` writes nothing; a NULL `func` or `file` reads as empty.

use std::borrow::Cow;
use std::ffi::{CStr, c_char};
use std::io::Write;
use std::sync::OnceLock;

use tracing::Level;

/// The `tracing` target of application records.
const TARGET: &str = "npu_sim::app_log";

// SAFETY: defined in csrc/app_log.c with exactly this prototype; the build script links that
// file's static library into the crate.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe extern "C" {
    /// The C half: formats and truncates the record, then calls [`npusimAppLogWrite`]. Only
    /// the trampoline refers to it.
    fn npusim_app_log(
        logLevel: npu_sys::aclLogLevel,
        func: *const c_char,
        file: *const c_char,
        line: u32,
        fmt: *const c_char,
        ...
    );
}

// SAFETY: defined in csrc/app_log.c with exactly this prototype; the build script links that
// file's static library into the crate.
unsafe extern "C" {
    /// Writes a NUL-terminated line to the C library's stdout and flushes it.
    fn npusim_app_log_print(text: *const c_char);
}

/// The exported aclAppLog: a tail jump to the C half with the caller's registers and stack as
/// they are (see the module documentation).
#[cfg(target_arch = "x86_64")]
// SAFETY: the body is a single `jmp` to a function with aclAppLog's prototype (hidden, so the
// jump binds inside the library); it reads and writes no register or stack slot, so it needs
// none of the prologue a naked function lacks, and the C function returns to our caller.
#[unsafe(naked)]
// SAFETY: the name is CANN's, and nothing else in the library or its dependencies defines it.
#[unsafe(no_mangle)]
extern "C" fn aclAppLog() {
    core::arch::naked_asm!("jmp {f}", f = sym npusim_app_log);
}

/// The exported aclAppLog: a tail jump to the C half with the caller's registers and stack as
/// they are (see the module documentation).
#[cfg(target_arch = "aarch64")]
// SAFETY: the body is a single `b` to a function with aclAppLog's prototype (hidden, so the
// branch binds inside the library); it reads and writes no register or stack slot (not even
// the link register), so it needs none of the prologue a naked function lacks, and the C
// function returns to our caller.
#[unsafe(naked)]
// SAFETY: the name is CANN's, and nothing else in the library or its dependencies defines it.
#[unsafe(no_mangle)]
extern "C" fn aclAppLog() {
    core::arch::naked_asm!("b {f}", f = sym npusim_app_log);
}

/// How records reach stdout: read from the environment once.
struct Stdout {
    /// `ASCEND_SLOG_PRINT_TO_STDOUT=1`.
    enabled: bool,
    /// `ASCEND_GLOBAL_LOG_LEVEL`: records at or above it are printed (4 prints none).
    threshold: i32,
    /// The process's name, as in plog's `APP(<pid>,<name>)`.
    process: Vec<u8>,
}

/// The stdout configuration, read at the first record.
fn stdout_config() -> &'static Stdout {
    static CONFIG: OnceLock<Stdout> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let enabled = std::env::var_os("ASCEND_SLOG_PRINT_TO_STDOUT").is_some_and(|v| v == "1");
        let threshold = std::env::var("ASCEND_GLOBAL_LOG_LEVEL")
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|level| (0..=4).contains(level))
            .unwrap_or(3);
        Stdout {
            enabled,
            threshold,
            process: process_name(),
        }
    })
}

/// The program's name: the last component of `argv[0]`, else of the executable's path.
fn process_name() -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let name = |path: &std::path::Path| path.file_name().map(|n| n.as_bytes().to_vec());
    std::env::args_os()
        .next()
        .and_then(|arg0| name(std::path::Path::new(&arg0)))
        .or_else(|| std::env::current_exe().ok().and_then(|exe| name(&exe)))
        .unwrap_or_default()
}

/// A C string the caller may pass as NULL, as bytes (NULL is empty).
///
/// # Safety
/// `text` must be NULL or point to a NUL-terminated string alive for `'a`.
unsafe fn c_bytes<'a>(text: *const c_char) -> &'a [u8] {
    if text.is_null() {
        return &[];
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's contract).
    unsafe { CStr::from_ptr(text) }.to_bytes()
}

/// The local time as plog prints it: `YYYY-MM-DD-hh:mm:ss.mmm.uuu`.
fn timestamp() -> String {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    // SAFETY: all-zero is a valid `tm` (integers and a NULL zone name).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a time and an out struct; localtime_r is the reentrant form.
    if unsafe { libc::localtime_r(&now.tv_sec, &mut tm) }.is_null() {
        return String::new();
    }
    let micros = now.tv_nsec / 1000;
    format!(
        "{:04}-{:02}-{:02}-{:02}:{:02}:{:02}.{:03}.{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        micros / 1000,
        micros % 1000
    )
}

/// One stdout line: `[INFO] APP(<pid>,<name>):<time> [<file>:<line>]<func>: <message>\n`.
fn stdout_line(level: i32, func: &[u8], file: &[u8], line: u32, message: &[u8]) -> Vec<u8> {
    let name = match level {
        0 => "DEBUG",
        1 => "INFO",
        2 => "WARNING",
        _ => "ERROR",
    };
    let config = stdout_config();
    let mut out = Vec::with_capacity(96 + func.len() + file.len() + message.len());
    // Writing to a Vec cannot fail.
    let _ = write!(out, "[{name}] APP({},", std::process::id());
    out.extend_from_slice(&config.process);
    let _ = write!(out, "):{} [", timestamp());
    out.extend_from_slice(file);
    let _ = write!(out, ":{line}]");
    out.extend_from_slice(func);
    out.extend_from_slice(b": ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\n\0");
    out
}

/// The Rust sink of aclAppLog's C half: one formatted record (at most 1023 bytes). It sends
/// the record to `tracing` and, as configured, to stdout; a level outside 0..=3 or a NULL
/// message writes nothing. Never panics: a panicking `tracing` subscriber is contained.
///
/// Exported (it is `#[no_mangle]` for the C half to call it) but declared in no header: it is
/// not part of the simulator's interface.
///
/// # Safety
/// `func`, `file` and `message` must each be NULL or a NUL-terminated string.
// SAFETY: the name is the simulator's own (`npusim` prefix) and defined nowhere else.
#[unsafe(no_mangle)]
unsafe extern "C" fn npusimAppLogWrite(
    level: i32,
    func: *const c_char,
    file: *const c_char,
    line: u32,
    message: *const c_char,
) {
    if !(0..=3).contains(&level) || message.is_null() {
        return;
    }
    // SAFETY: each is NULL or NUL-terminated (the C half passes its caller's strings and its
    // own buffer), alive for this call.
    let (func, file, message) = unsafe { (c_bytes(func), c_bytes(file), c_bytes(message)) };
    let _ = crate::error::contain(|| {
        record(level, func, file, line, message);
        let config = stdout_config();
        if config.enabled && level >= config.threshold {
            let text = stdout_line(level, func, file, line, message);
            // SAFETY: `text` ends in its only NUL (C strings contain none); the C helper only
            // reads it.
            unsafe { npusim_app_log_print(text.as_ptr().cast()) };
        }
    });
}

/// The `tracing` event of a record.
fn record(level: i32, func: &[u8], file: &[u8], line: u32, message: &[u8]) {
    let func: Cow<'_, str> = String::from_utf8_lossy(func);
    let file: Cow<'_, str> = String::from_utf8_lossy(file);
    let message: Cow<'_, str> = String::from_utf8_lossy(message);
    macro_rules! event {
        ($level:expr) => {
            tracing::event!(target: TARGET, $level, func = &*func, file = &*file, line, "{message}")
        };
    }
    match level {
        0 => event!(Level::DEBUG),
        1 => event!(Level::INFO),
        2 => event!(Level::WARN),
        _ => event!(Level::ERROR),
    }
}
