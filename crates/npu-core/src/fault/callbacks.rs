//! The runtime callbacks npu-core registers once per loaded runtime: the exception callback,
//! which records faults, and the stream-state callback, which forgets them.
//!
//! Both run on runtime threads (a stream's worker, the thread creating or destroying a
//! stream). They take one short lock, never wait for device work, never call anything that
//! submits or synchronises, and contain every panic: unwinding into C is undefined behaviour.
//! Loaded runtimes are never unloaded and their tables are leaked, so a callback racing with
//! `aclFinalize` still finds everything it touches alive.

use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

use super::{DeviceFault, FaultKind};
use crate::backend::Loaded;
use crate::code::AclCode;
use crate::ffi;

/// An exception callback receives only the info, not which runtime called it; each loaded
/// runtime therefore gets a callback of its own, one of these, and the info's getters are
/// that runtime's. A process loading more runtimes than this gets no fault detail from the
/// extra ones.
const SLOTS: usize = 8;

static LOADED: [OnceLock<&'static Loaded>; SLOTS] = [const { OnceLock::new() }; SLOTS];

type ExceptionCallback = unsafe extern "C" fn(*mut ffi::aclrtExceptionInfo);

const EXCEPTION_CALLBACKS: [ExceptionCallback; SLOTS] = [
    on_exception::<0>,
    on_exception::<1>,
    on_exception::<2>,
    on_exception::<3>,
    on_exception::<4>,
    on_exception::<5>,
    on_exception::<6>,
    on_exception::<7>,
];

/// The name npu-core's stream-state callback is registered under (unique per runtime).
const STATE_CALLBACK_NAME: &CStr = c"npu-rs fault table";

/// Registers both callbacks with `loaded`, after its `aclInit`. A runtime without the
/// functions (or with a slot shortage) simply gives no fault detail; failures are logged.
pub(crate) fn register(loaded: &'static Loaded) {
    let Some(slot) = loaded.id.checked_sub(1).filter(|&slot| slot < SLOTS) else {
        crate::log!(
            debug,
            runtime = loaded.id,
            "no exception callback slot left: faults carry no detail"
        );
        return;
    };
    let _ = LOADED[slot].set(loaded);
    let api = &loaded.api;
    let callback = Some(EXCEPTION_CALLBACKS[slot]);
    // The deprecated call replaces a callback the program may have set itself, so it is only
    // the fallback for runtimes that predate the registry.
    let exception = match (
        api.aclrtExceptionInfoCallbackRegister,
        api.aclrtSetExceptionInfoCallback,
    ) {
        // SAFETY: the callback is safe to call from any thread, at any time (see above).
        (Some(register), _) => unsafe { register(callback) },
        // SAFETY: as above.
        (None, Some(set)) => unsafe { set(callback) },
        (None, None) => ffi::ACL_SUCCESS,
    };
    if exception != ffi::ACL_SUCCESS {
        // The runtime's message is taken off this thread (the one making the runtime), or
        // the next error npu-rs reports here would carry it as its own.
        let message = crate::runtime::recent_message(loaded).unwrap_or_default();
        crate::log!(debug, code = %AclCode(exception), message, "no exception callback: faults carry no detail");
    }
    if let Some(register_state) = api.aclrtRegStreamStateCallback {
        let args = std::ptr::from_ref(loaded).cast_mut().cast::<c_void>();
        // SAFETY: the name is NUL-terminated and static; the callback is safe to call from any
        // thread; `args` points at the leaked (never freed) `Loaded`.
        let code =
            unsafe { register_state(STATE_CALLBACK_NAME.as_ptr(), Some(on_stream_state), args) };
        // Already registered (by an earlier aclInit of the same library) is fine.
        if code != ffi::ACL_SUCCESS {
            // As above: a runtime initialised again finds the callback registered still,
            // which it explains like a failure.
            let message = crate::runtime::recent_message(loaded).unwrap_or_default();
            crate::log!(debug, code = %AclCode(code), message, "stream-state callback not (re)registered");
        }
    }
}

unsafe extern "C" fn on_exception<const SLOT: usize>(info: *mut ffi::aclrtExceptionInfo) {
    let panicked = crate::contain::contained(crate::SEAL, || {
        if let Some(loaded) = LOADED[SLOT].get()
            && let Some(fault) = read_fault(loaded, info)
        {
            loaded.faults.record(fault);
        }
    });
    if panicked {
        crate::log!(
            error,
            "recording a device fault panicked; the fault carries no detail"
        );
    }
}

/// The fault an exception info describes, with the device's error detail. `None` if the
/// runtime lacks the getters.
fn read_fault(loaded: &Loaded, info: *mut ffi::aclrtExceptionInfo) -> Option<DeviceFault> {
    let api = &loaded.api;
    let info = info.cast_const();
    // SAFETY: `info` is the runtime's own, valid for the duration of the callback; the getters
    // only read it.
    unsafe {
        let device_id = (api.aclrtGetDeviceIdFromExceptionInfo?)(info);
        Some(DeviceFault {
            task_id: (api.aclrtGetTaskIdFromExceptionInfo?)(info),
            stream_id: u64::from((api.aclrtGetStreamIdFromExceptionInfo?)(info)),
            device_id,
            thread_id: (api.aclrtGetThreadIdFromExceptionInfo?)(info),
            code: AclCode((api.aclrtGetErrorCodeFromExceptionInfo?)(info) as i32),
            kind: error_verbose(loaded, device_id),
        })
    }
}

/// `aclrtGetErrorVerbose`, read inside the exception callback: it describes the device's
/// latest fault, so later is less accurate, and the reference wants it read after the fault
/// is reported and before any abort. It is a query, none of the submitting or synchronising
/// calls the reference warns against making in the callback.
fn error_verbose(loaded: &Loaded, device_id: u32) -> Option<FaultKind> {
    let verbose = loaded.api.aclrtGetErrorVerbose?;
    let device = i32::try_from(device_id).ok()?;
    // SAFETY: aclrtErrorInfo is integers, byte arrays and a union of integers and
    // `aclrtMemUceInfo` arrays (integers and a raw address), for all of which all-zero bytes
    // are a valid value (a raw pointer may be null).
    let mut detail: ffi::aclrtErrorInfo = unsafe { std::mem::zeroed() };
    // SAFETY: `detail` is a valid out-pointer for the call.
    let code = unsafe { verbose(device, &mut detail) };
    (code == ffi::ACL_SUCCESS)
        .then(|| FaultKind::from_raw(detail.errorType))
        .flatten()
}

unsafe extern "C" fn on_stream_state(
    stream: ffi::aclrtStream,
    _state: ffi::aclrtStreamState,
    args: *mut c_void,
) {
    let panicked = crate::contain::contained(crate::SEAL, || {
        // SAFETY: `args` is the `&'static Loaded` given at registration.
        let loaded = unsafe { &*args.cast_const().cast::<Loaded>() };
        if let Some(id) = stream_id(loaded, stream) {
            loaded.faults.forget(stream as usize, id);
        }
    });
    if panicked {
        crate::log!(error, "forgetting a stream's faults panicked");
    }
}

/// The id of a stream being created or destroyed (`aclrtStreamGetId`, a getter of the stream
/// itself). Its device is not asked for: the runtime calls this while creating a context's
/// default stream, under locks that `aclrtGetDevice` would wait for.
fn stream_id(loaded: &Loaded, stream: ffi::aclrtStream) -> Option<u64> {
    let mut id = 0;
    // SAFETY: a valid out-pointer; the stream is alive for the callback's duration.
    let code = unsafe { (loaded.api.aclrtStreamGetId?)(stream, &mut id) };
    if code != ffi::ACL_SUCCESS {
        // Take the runtime's message off this thread, or its next real error would carry it.
        // SAFETY: no arguments; the returned text is not used.
        unsafe { (loaded.api.aclGetRecentErrMsg)() };
        return None;
    }
    u64::try_from(id).ok()
}
