//! Argument conversions shared by the exported functions.

use std::ffi::{CStr, c_char, c_void};
use std::time::{Duration, Instant};

use npu_sys::*;

use crate::error::{Res, ensure, non_null};

/// Converts an ACL timeout in ms (-1 = forever, > 0) into a deadline. 0 and values below -1 are
/// rejected with `invalid` (107000 from the waits, 100000 from aclrtProcessReport), as the
/// runtime does (the header's "0 polls" is not implemented by CANN).
pub(super) fn deadline(timeout_ms: i32, invalid: aclError) -> Res<Option<Instant>> {
    ensure!(
        timeout_ms == -1 || timeout_ms > 0,
        invalid,
        "timeout {timeout_ms} is invalid: use -1 (wait forever) or a positive number of ms"
    );
    Ok((timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64)))
}

/// Refuses a feature an Atlas A2 does not have (ACL_ERROR_RT_FEATURE_NOT_SUPPORT).
pub(super) fn unsupported_on_a2(what: &str) -> Res<()> {
    crate::error::fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{what} is not supported on an Atlas A2"
    )
}

/// Looks `stream` up as every stream-taking call does (NULL is the current context's default
/// stream: no context → 107002; destroyed → 107017, another context's → 107003), then refuses
/// `what` (207000): a function's arguments, handles included, come before its feature.
pub(super) fn unsupported_on_stream(stream: aclrtStream, what: &str) -> Res<()> {
    crate::context::owned_stream(crate::sim::sim()?, stream)?;
    unsupported_on_a2(what)
}

/// Checks pointer arguments (NULL → 100000), then refuses a feature an Atlas A2 does not have
/// (207000): for functions whose objects cannot exist on one.
pub(super) fn unsupported_after_checks(pointers: &[(*const c_void, &str)], what: &str) -> Res<()> {
    for &(pointer, name) in pointers {
        non_null(pointer, name)?;
    }
    unsupported_on_a2(what)
}

/// The whole body of an exported function of a feature that cannot exist here: `api`'s
/// pointer checks, then the refusal of `what`.
pub(super) fn refuse_after_checks(
    api: &'static str,
    pointers: &[(*const c_void, &str)],
    what: &str,
) -> aclError {
    crate::error::guard(api, || unsupported_after_checks(pointers, what))
}

/// Reads a C string argument.
pub(super) fn c_str<'a>(ptr: *const c_char, what: &str) -> Res<&'a str> {
    c_str_or(ptr, what, ACL_ERROR_RT_PARAM_INVALID)
}

/// [`c_str`], refusing a string that is not UTF-8 with `not_utf8` (the ACL layer's functions
/// answer ACL_ERROR_INVALID_PARAM where the runtime's answer ACL_ERROR_RT_PARAM_INVALID).
pub(super) fn c_str_or<'a>(ptr: *const c_char, what: &str, not_utf8: aclError) -> Res<&'a str> {
    match c_string(ptr, what)?.to_str() {
        Ok(text) => Ok(text),
        Err(_) => crate::error::fail!(not_utf8, "{what} is not valid UTF-8"),
    }
}

/// Reads a C string argument naming a file: any bytes but NUL, as a Linux path may hold
/// bytes that are not UTF-8.
pub(super) fn c_path<'a>(ptr: *const c_char, what: &str) -> Res<&'a std::path::Path> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = c_string(ptr, what)?.to_bytes();
    Ok(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)))
}

/// A C string argument (NULL → ACL_ERROR_INVALID_PARAM naming `what`).
fn c_string<'a>(ptr: *const c_char, what: &str) -> Res<&'a CStr> {
    non_null(ptr, what)?;
    // SAFETY: non-NULL; C string arguments are NUL-terminated by the API contract, and the
    // borrow does not outlive the call.
    Ok(unsafe { CStr::from_ptr(ptr) })
}

/// Refuses a `max_len` of 0 for a text [`write_c_str`] is to write (no text fits without its
/// NUL), with ACL_ERROR_RT_PARAM_INVALID: a value check needing no lookup, so a query makes
/// it before it looks up the handle whose text it writes, as it checks its other values.
pub(super) fn check_text_room(max_len: u32, what: &str) -> Res<()> {
    ensure!(
        max_len > 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "maxLen is 0: no {what} fits, not even its NUL"
    );
    Ok(())
}

/// Writes `text` and its NUL into the caller's `max_len` bytes at `out`: a buffer too small
/// for both → ACL_ERROR_RT_PARAM_INVALID, nothing written (a truncated name would be silently
/// wrong).
pub(super) fn write_c_str(out: *mut c_char, max_len: u32, text: &str, what: &str) -> Res<()> {
    write_c_str_or(out, max_len, text, what, ACL_ERROR_RT_PARAM_INVALID)
}

/// [`write_c_str`], refusing a buffer too small with `too_small` (the ACL layer's functions
/// answer ACL_ERROR_INVALID_PARAM where the runtime's answer ACL_ERROR_RT_PARAM_INVALID).
pub(super) fn write_c_str_or(
    out: *mut c_char,
    max_len: u32,
    text: &str,
    what: &str,
    too_small: aclError,
) -> Res<()> {
    non_null(out, what)?;
    let bytes = text.as_bytes();
    ensure!(
        bytes.len() < max_len as usize,
        too_small,
        "the {what} {text:?} needs {} bytes with its NUL, maxLen is {max_len}",
        bytes.len() + 1
    );
    // SAFETY: `out` is non-NULL and, by the API contract, valid for `max_len` bytes, which the
    // text and its NUL fit in (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len());
        out.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Borrows `len` bytes at a non-NULL pointer.
pub(super) fn bytes<'a>(ptr: *const c_void, len: usize, what: &str) -> Res<&'a [u8]> {
    non_null(ptr, what)?;
    // No buffer is larger than `isize::MAX` bytes, and a slice may not claim to be.
    ensure!(
        isize::try_from(len).is_ok(),
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} cannot hold the {len} bytes given as its size"
    );
    // SAFETY: non-NULL; the API contract is that the caller's buffer holds `len` readable bytes
    // for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Reads a caller-supplied array of `count` elements (NULL allowed only when empty).
pub(super) fn array<'a, T>(ptr: *const T, count: usize, what: &str) -> Res<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    non_null(ptr, what)?;
    ensure!(
        count <= 1 << 16,
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} has an implausible {count} entries"
    );
    ensure!(
        ptr.is_aligned(),
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} is not aligned for its element type"
    );
    // SAFETY: non-NULL and aligned; the API contract is that the array holds `count` elements
    // for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// Checks every handle of an array argument for NULL (100000) before any of them is looked up:
/// the ACL layer's pointer checks come before the runtime's lookups.
pub(super) fn non_null_entries<T>(entries: &[*mut T], what: &str) -> Res<()> {
    for &entry in entries {
        non_null(entry.cast_const(), what)?;
    }
    Ok(())
}

/// Checks the start indexes of a batch's runs (copy attributes, prefetch locations): `starts`
/// holds 1 to `count` entries, the first 0, each above the one before and below `count`
/// (107000 otherwise).
pub(super) fn run_starts(starts: &[usize], count: usize, what: &str) -> Res<()> {
    ensure!(
        !starts.is_empty()
            && starts.len() <= count
            && starts[0] == 0
            && starts.windows(2).all(|w| w[0] < w[1])
            && starts[starts.len() - 1] < count,
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {starts:?} must hold 1 to {count} entries, start at 0 and increase below {count}"
    );
    Ok(())
}

/// The run of `starts` (checked with [`run_starts`]) that holds entry `index`.
pub(super) fn run_of(starts: &[usize], index: usize) -> usize {
    starts.partition_point(|&start| start <= index) - 1
}

/// Reads a caller-supplied struct (NULL → `None`).
pub(super) fn optional<T: Copy>(ptr: *const T) -> Option<T> {
    // SAFETY: a non-NULL struct argument points at a readable T by the API contract; it may be
    // unaligned in packed C code, hence read_unaligned.
    (!ptr.is_null()).then(|| unsafe { ptr.read_unaligned() })
}
