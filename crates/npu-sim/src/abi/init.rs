//! Initialisation and error-reporting functions.

use std::ffi::{CString, c_char, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use npu_sys::*;

use super::check::c_path;
use crate::config::{ConfigError, SimConfig};
use crate::context;
use crate::device_limit::{Limit, PRINTF_FIFO_LIMIT, SIMD_STACK_LIMIT};
use crate::dump::{self, DumpSettings};
use crate::error::{self, Res, ensure, fail, guard, guard_value, write_out};
use crate::lifecycle;
use crate::sim::sim;
use crate::sync::{Raised, lock};

struct InitState {
    refs: u64,
    finalized: bool,
    /// The text of the first configuration file, compared on re-initialisation.
    first_config: Option<String>,
}

static INIT: Mutex<InitState> = Mutex::new(InitState {
    refs: 0,
    finalized: false,
    first_config: None,
});

thread_local! {
    /// Set while this thread runs aclInit's init callbacks, holding [`INIT`]'s lock further up
    /// its stack: a callback calling a function that takes the lock would wait for itself.
    static INITIALISING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Fails with `code` if the calling thread is inside aclInit's init callbacks, where `what`
/// (aclInit or a finalisation) cannot run: the initialisation is neither done nor undone.
fn refuse_inside_init(code: aclError, what: &str) -> Res<()> {
    ensure!(
        !INITIALISING.get(),
        code,
        "{what} called from an init callback: AscendCL is being initialised by this thread's \
         aclInit, which has not finished"
    );
    Ok(())
}

/// What an aclInit configuration file asks of the simulator.
#[derive(Default)]
struct InitConfig {
    /// `"npu_sim"`: the simulator's own configuration.
    sim: Option<SimConfig>,
    /// `"err_msg_mode": "1"`: aclGetRecentErrMsg reports the messages of the whole process.
    process_messages: bool,
    /// `"defaultDevice": {"default_device": "N"}`: the device of threads that set none.
    default_device: Option<i32>,
    /// `"dump"`: the dump the file turns on (see `crate::dump`).
    dump: DumpSettings,
    /// The device resource limits the file sets, each as it takes effect: `"StackSize":
    /// {"aicore_stack_size": N}` (the SIMD stack per AI core) and
    /// `"simd_printf_fifo_size_per_core": N`.
    limits: Vec<(&'static Limit, u64)>,
}

/// A device resource limit of the file, `limit`'s value under `key`: a JSON unsigned integer
/// (bytes), as it takes effect. Another form, or a value outside the limit's range → 100000.
fn limit_value(
    key: &str,
    value: Option<&serde_json::Value>,
    limit: &'static Limit,
) -> Res<Option<(&'static Limit, u64)>> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.as_u64().map(|requested| limit.effective(requested)) {
        Some(Some(bytes)) => Ok(Some((limit, bytes))),
        Some(None) => fail!(
            ACL_ERROR_INVALID_PARAM,
            "\"{key}\" is {value} bytes, out of range: {}",
            limit.range
        ),
        None => fail!(
            ACL_ERROR_INVALID_PARAM,
            "\"{key}\" is {value}, not a size in bytes (an unsigned integer)"
        ),
    }
}

/// Checks `"max_opqueue_num"`, the length of the single-operator model cache's queue: the
/// simulator runs no single-operator models, so it keeps nothing, but a value that is not a
/// positive count in a string (the reference's form, `"10000"`) is refused as CANN refuses an
/// invalid cache ageing configuration, with ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG.
fn check_opqueue_num(value: Option<&serde_json::Value>) -> Res<()> {
    let Some(value) = value else {
        return Ok(());
    };
    let count = value
        .as_str()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok());
    ensure!(
        count.is_some_and(|count| count > 0),
        ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG,
        "\"max_opqueue_num\" is {value}, not a positive count of single-operator models in a \
         string (\"20000\")"
    );
    Ok(())
}

fn parse_config(text: &str) -> Res<InitConfig> {
    let json = dump::parse_json(text)?;
    let dump = dump::parse_section(&json)?;
    let sim = match json.get("npu_sim") {
        None => None,
        Some(sim_json) => match serde_json::from_value(sim_json.clone()) {
            Ok(config) => Some(config),
            Err(e) => fail!(
                ACL_ERROR_INVALID_PARAM,
                "\"npu_sim\" is not a simulator configuration: {e}"
            ),
        },
    };
    let process_messages = match json.get("err_msg_mode") {
        None => false,
        Some(mode) => match mode.as_str() {
            Some("0") => false,
            Some("1") => true,
            _ => fail!(
                ACL_ERROR_INVALID_PARAM,
                "\"err_msg_mode\" is {mode}, not \"0\" (thread level) or \"1\" (process level)"
            ),
        },
    };
    let default_device = match json.get("defaultDevice") {
        None => None,
        Some(section) => {
            let Some(section) = section.as_object() else {
                fail!(
                    ACL_ERROR_INVALID_PARAM,
                    "\"defaultDevice\" is {section}, not an object"
                );
            };
            match section.get("default_device") {
                None => None,
                Some(id) => match id.as_str().and_then(|id| id.parse::<i32>().ok()) {
                    Some(id) => Some(id),
                    None => fail!(
                        ACL_ERROR_INVALID_PARAM,
                        "\"default_device\" is {id}, not a device id in a string (\"0\")"
                    ),
                },
            }
        }
    };
    // The SIMD limits aclrtDeviceSetLimit also sets (an Atlas A2 has no SIMT ones: the
    // Ascend 950's "simt_*" keys are ignored, as other keys the simulator has no use for).
    let simd_stack = match json.get("StackSize") {
        None => None,
        Some(section) => {
            let Some(section) = section.as_object() else {
                fail!(
                    ACL_ERROR_INVALID_PARAM,
                    "\"StackSize\" is {section}, not an object"
                );
            };
            limit_value(
                "aicore_stack_size",
                section.get("aicore_stack_size"),
                &SIMD_STACK_LIMIT,
            )?
        }
    };
    let printf_fifo = limit_value(
        "simd_printf_fifo_size_per_core",
        json.get("simd_printf_fifo_size_per_core"),
        &PRINTF_FIFO_LIMIT,
    )?;
    check_opqueue_num(json.get("max_opqueue_num"))?;
    Ok(InitConfig {
        sim,
        process_messages,
        default_device,
        dump,
        limits: simd_stack.into_iter().chain(printf_fifo).collect(),
    })
}

/// Applies a parsed configuration: the simulator's (which starts the simulator), then the
/// default device (checked against the device count) and the message level.
fn apply_config(config: InitConfig) -> Res<()> {
    if let Some(sim_config) = config.sim {
        match sim_config.install() {
            Ok(()) => {}
            Err(ConfigError::AlreadyInitialised { current }) => fail!(
                ACL_ERROR_INVALID_PARAM,
                "\"npu_sim\" differs from the configuration the simulator already runs with ({current:?})"
            ),
            Err(e) => fail!(ACL_ERROR_INVALID_PARAM, "{e}"),
        }
    }
    let sim = sim()?;
    if let Some(device) = config.default_device {
        sim.device(device.into())?;
    }
    context::set_default_device(config.default_device);
    error::set_process_level_messages(config.process_messages);
    dump::configure_from_init(config.dump.settle(super::dump::any_device_set()?));
    // Process-wide, like aclrtDeviceSetLimit's: whichever is set last wins, and aclFinalize
    // keeps them.
    for &(limit, bytes) in &config.limits {
        limit.store(bytes);
    }
    Ok(())
}

/// What aclFinalize undoes of aclInit's configuration (the simulator's own stays). The dump
/// configuration is reset apart, under [`INIT`]'s lock (see [`while_initialised`]).
fn undo_config() {
    context::set_default_device(None);
    error::set_process_level_messages(false);
}

/// Runs `body` while AscendCL is initialised, holding [`INIT`]'s lock so that aclFinalize
/// cannot end the initialisation meanwhile (the dump functions; the lock is taken before the
/// dump state's, everywhere). Not initialised → ACL_ERROR_UNINITIALIZE.
pub(super) fn while_initialised<T>(body: impl FnOnce() -> Res<T>) -> Res<T> {
    if INITIALISING.get() {
        // An init callback: this thread's aclInit holds the lock, so nothing can end the
        // initialisation meanwhile, and its configuration is in force (a failing callback
        // undoes the dump state with it).
        return body();
    }
    let state = lock(&INIT);
    ensure!(
        state.refs > 0,
        ACL_ERROR_UNINITIALIZE,
        "AscendCL is not initialised (call aclInit first)"
    );
    let result = body();
    drop(state);
    result
}

/// Finalises an initialised AscendCL: runs every finalize callback (all of them, even after
/// one failed), then undoes the configuration and writes the trace. Returns the first
/// callback failure.
fn finalize() -> Res<()> {
    *lock(&CURRENT_CONFIG) = None;
    let callbacks = lifecycle::FINALIZE.run(false, |func, user_data| {
        // SAFETY: the user registered a C function of this type, with `user_data` as its
        // argument.
        unsafe { func(user_data as *mut c_void) }
    });
    undo_config();
    flush_trace();
    callbacks
}

/// The configuration text (NUL-terminated, for callbacks that read it as a C string) of the
/// initialisation in force; `None` while AscendCL is not initialised. Kept apart from [`INIT`]
/// so that a callback run by aclInit may register callbacks.
static CURRENT_CONFIG: Mutex<Option<Arc<CString>>> = Mutex::new(None);

/// Calls an init callback with the configuration text.
fn call_init(func: lifecycle::InitFn, config: &CString, user_data: usize) -> aclError {
    // SAFETY: the user registered a C function of this type; the text is NUL-terminated,
    // `len` bytes long without the NUL, and outlives the call.
    unsafe {
        func(
            config.as_ptr(),
            config.as_bytes().len(),
            user_data as *mut c_void,
        )
    }
}

fn flush_trace() {
    if let Err(e) = crate::trace::flush() {
        crate::error::log!(warn, target: "npu_sim", "writing the trace failed: {e}");
    }
}

/// Initialises AscendCL (reference-counted; a repeat counts and returns
/// ACL_ERROR_REPEAT_INITIALIZE). The JSON config file may carry `"err_msg_mode": "1"`
/// (aclGetRecentErrMsg reports the messages of every thread), `"defaultDevice":
/// {"default_device": "N"}` (threads that set no device or context use device N, as if they
/// had called aclrtSetDevice(N)), a dump configuration under `"dump"` (validated as
/// aclmdlSetDump validates one, → 100009; while it turns a dump on, aclmdlInitDump → 100044),
/// the SIMD device resource limits aclrtDeviceSetLimit also sets (`"StackSize":
/// {"aicore_stack_size": N}`, `"simd_printf_fifo_size_per_core": N`, rounded and bounded as
/// there), the single-operator cache's `"max_opqueue_num"` (checked only: a positive count in a
/// string, else 148048) and the simulator's configuration under `"npu_sim"`. A file of no bytes is no
/// configuration (as NULL is); not JSON, or nested deeper than 10 → 100006; a value of the
/// wrong form → 100000; a default device that does not exist → 107001. The registered
/// init callbacks then run in registration order; the first that fails stops the others, undoes
/// the file's configuration and is returned (AscendCL stays uninitialised).
///
/// # Safety
/// `configPath` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInit(configPath: *const c_char) -> aclError {
    guard("aclInit", || {
        // Not counted: the initialisation it would add a reference to has not finished.
        refuse_inside_init(ACL_ERROR_REPEAT_INITIALIZE, "aclInit")?;
        let mut state = lock(&INIT);
        if state.refs > 0 {
            state.refs += 1;
            fail!(
                ACL_ERROR_REPEAT_INITIALIZE,
                "AscendCL is already initialised (the call was counted)"
            );
        }
        let text = match configPath.is_null() {
            true => None,
            false => match c_path(configPath, "configPath")? {
                path if path.as_os_str().is_empty() => None,
                path => match std::fs::read(path) {
                    // A file of no bytes configures nothing, as NULL does: a choice where the
                    // reference is silent (it calls `{}` the empty configuration), so that a
                    // program shipping an empty acl.json starts.
                    Ok(bytes) if bytes.is_empty() => None,
                    Ok(bytes) => Some(dump::json_text(bytes, path)?),
                    Err(e) => fail!(
                        ACL_ERROR_INVALID_FILE,
                        "cannot read the configuration file {path:?}: {e}"
                    ),
                },
            },
        };
        if let (Some(first), Some(text)) = (&state.first_config, &text) {
            ensure!(
                first == text,
                ACL_ERROR_INVALID_PARAM,
                "re-initialising with a configuration that differs from the first one"
            );
        }
        let config = match &text {
            Some(text) => parse_config(text)?,
            None => InitConfig::default(),
        };
        // A failing init callback undoes the file, the limits it set included: each limit the
        // file set goes back to its value before, unless set again since (by a callback or
        // another thread: the later setting wins).
        let limits: Vec<_> = (config.limits.iter())
            .map(|&(limit, set)| (limit, set, limit.load()))
            .collect();
        apply_config(config)?;
        // A file with a NUL is no JSON parse_config accepts, so the text converts.
        let current = Arc::new(CString::new(text.clone().unwrap_or_default()).unwrap_or_default());
        let initialising = Raised::new(&INITIALISING);
        let callbacks =
            lifecycle::INIT.run(true, |func, user_data| call_init(func, &current, user_data));
        drop(initialising);
        if let Err(e) = callbacks {
            undo_config();
            dump::reset();
            for (limit, set, before) in limits {
                limit.restore(set, before);
            }
            return Err(e);
        }
        *lock(&CURRENT_CONFIG) = Some(current);
        if state.first_config.is_none() {
            state.first_config = text;
        }
        state.refs = 1;
        state.finalized = false;
        Ok(())
    })
}

/// Finalises AscendCL: drops every aclInit reference, runs the finalize callbacks (if it was
/// initialised; all of them, returning the first failure), undoes the file's `"err_msg_mode"`
/// and `"defaultDevice"`, ends every dump configuration (the file's and an aclmdlInitDump
/// session's), and writes the trace, if one is recorded. A second call without a new aclInit
/// returns ACL_ERROR_REPEAT_FINALIZE. Devices keep their state (reset them with
/// aclrtResetDevice).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalize() -> aclError {
    guard("aclFinalize", || {
        refuse_inside_init(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize")?;
        let mut state = lock(&INIT);
        ensure!(
            state.refs > 0 || !state.finalized,
            ACL_ERROR_REPEAT_FINALIZE,
            "AscendCL is already finalised"
        );
        let initialised = state.refs > 0;
        state.refs = 0;
        state.finalized = true;
        dump::reset();
        drop(state);
        match initialised {
            true => finalize(),
            false => {
                flush_trace();
                Ok(())
            }
        }
    })
}

/// Drops one aclInit reference, finalising at zero as aclFinalize does (finalize callbacks
/// included); `refCount` (nullable) receives the count left, unless a finalize callback failed
/// the call.
///
/// # Safety
/// `refCount` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalizeReference(refCount: *mut u64) -> aclError {
    guard("aclFinalizeReference", || {
        refuse_inside_init(ACL_ERROR_REPEAT_FINALIZE, "aclFinalizeReference")?;
        let mut state = lock(&INIT);
        ensure!(
            state.refs > 0,
            ACL_ERROR_REPEAT_FINALIZE,
            "AscendCL is not initialised"
        );
        state.refs -= 1;
        let left = state.refs;
        if left == 0 {
            state.finalized = true;
            dump::reset();
        }
        drop(state);
        if left == 0 {
            // A failing finalize callback fails the call, which then leaves `refCount` as it
            // was, as every failed call leaves its outputs (the finalisation has happened).
            finalize()?;
        }
        if !refCount.is_null() {
            write_out(refCount, "refCount", left)?;
        }
        Ok(())
    })
}

/// Registers a callback aclInit calls with its configuration text (the file's content, ""
/// without a file) and `userData`; if AscendCL is initialised, it is called at once instead
/// of waiting for the next aclInit, and a failure it returns is this call's (leaving nothing
/// registered). Registering the same function for the same type again replaces `userData`.
/// NULL `cbFunc` or a type outside `aclRegisterCallbackType` → 100000.
///
/// # Safety
/// `cbFunc` must be NULL or a function of the callback's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInitCallbackRegister(
    r#type: aclRegisterCallbackType,
    cbFunc: aclInitCallbackFunc,
    userData: *mut c_void,
) -> aclError {
    guard("aclInitCallbackRegister", || {
        let func = callback(cbFunc)?;
        lifecycle::check_module(r#type)?;
        let current = lock(&CURRENT_CONFIG).clone();
        if let Some(config) = current {
            let code = call_init(func, &config, userData as usize);
            ensure!(
                code == ACL_SUCCESS,
                code,
                "the callback, called at once as AscendCL is initialised, returned {code}"
            );
        }
        lifecycle::INIT.register(r#type, func, userData as usize);
        Ok(())
    })
}

/// Removes an init callback's registration for `type` (none is fine). NULL `cbFunc` or an
/// unknown type → 100000.
///
/// # Safety
/// `cbFunc` must be NULL or a function of the callback's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInitCallbackUnRegister(
    r#type: aclRegisterCallbackType,
    cbFunc: aclInitCallbackFunc,
) -> aclError {
    guard("aclInitCallbackUnRegister", || {
        let func = callback(cbFunc)?;
        lifecycle::check_module(r#type)?;
        lifecycle::INIT.unregister(r#type, func);
        Ok(())
    })
}

/// Registers a callback aclFinalize calls with `userData` (also aclFinalizeReference when the
/// count reaches zero) before it tears AscendCL down. Every callback runs; the finalisation
/// returns the first failure. Registering again replaces `userData`. NULL `cbFunc` or an
/// unknown type → 100000.
///
/// # Safety
/// `cbFunc` must be NULL or a function of the callback's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalizeCallbackRegister(
    r#type: aclRegisterCallbackType,
    cbFunc: aclFinalizeCallbackFunc,
    userData: *mut c_void,
) -> aclError {
    guard("aclFinalizeCallbackRegister", || {
        let func = callback(cbFunc)?;
        lifecycle::check_module(r#type)?;
        lifecycle::FINALIZE.register(r#type, func, userData as usize);
        Ok(())
    })
}

/// Removes a finalize callback's registration for `type` (none is fine). NULL `cbFunc` or an
/// unknown type → 100000.
///
/// # Safety
/// `cbFunc` must be NULL or a function of the callback's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalizeCallbackUnRegister(
    r#type: aclRegisterCallbackType,
    cbFunc: aclFinalizeCallbackFunc,
) -> aclError {
    guard("aclFinalizeCallbackUnRegister", || {
        let func = callback(cbFunc)?;
        lifecycle::check_module(r#type)?;
        lifecycle::FINALIZE.unregister(r#type, func);
        Ok(())
    })
}

/// A required callback argument: NULL → 100000, checked before the type (a pointer before a
/// value, as every function checks its arguments).
fn callback<F>(func: Option<F>) -> Res<F> {
    match func {
        Some(func) => Ok(func),
        None => fail!(ACL_ERROR_INVALID_PARAM, "cbFunc is NULL"),
    }
}

/// Returns and clears the calling thread's error messages, newest first (NULL when none). The
/// string stays valid until the next call on the same thread.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    error::take_recent_message()
}

/// Reports the run mode: the simulator is a host-side (EP) deployment, ACL_HOST.
///
/// # Safety
/// `runMode` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetRunMode(runMode: *mut aclrtRunMode) -> aclError {
    guard("aclrtGetRunMode", || {
        write_out(runMode, "runMode", ACL_HOST)
    })
}

/// The configured SoC name (NULL if the simulator cannot start).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    static NAME: OnceLock<CString> = OnceLock::new();
    guard_value("aclrtGetSocName", std::ptr::null(), || {
        let sim = sim()?;
        Ok(NAME
            .get_or_init(|| CString::new(sim.config.soc_name.clone()).unwrap_or_default())
            .as_ptr())
    })
}

fn check_level(level: aclrtLastErrLevel) -> Res<()> {
    ensure!(
        level == ACL_RT_THREAD_LEVEL,
        ACL_ERROR_INVALID_PARAM,
        "level {level} is not ACL_RT_THREAD_LEVEL"
    );
    Ok(())
}

/// The thread's last runtime error, cleared by this call.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLastError(level: aclrtLastErrLevel) -> aclError {
    match check_level(level) {
        Ok(()) => error::take_last_error(),
        Err(e) => e.code,
    }
}

/// The thread's last runtime error, left in place.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtPeekAtLastError(level: aclrtLastErrLevel) -> aclError {
    match check_level(level) {
        Ok(()) => error::peek_last_error(),
        Err(e) => e.code,
    }
}
