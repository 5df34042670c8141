//! Initialisation, version and error-reporting functions.

use std::ffi::{CString, c_char};
use std::sync::{Mutex, OnceLock};

use npu_sys::*;

use super::check::c_str;
use crate::config::{ConfigError, SimConfig};
use crate::context;
use crate::error::{self, Res, ensure, fail, guard, guard_value, non_null, write_out};
use crate::sim::sim;
use crate::sync::lock;

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

/// What an aclInit configuration file asks of the simulator.
#[derive(Default)]
struct InitConfig {
    /// `"npu_sim"`: the simulator's own configuration.
    sim: Option<SimConfig>,
    /// `"err_msg_mode": "1"`: aclGetRecentErrMsg reports the messages of the whole process.
    process_messages: bool,
    /// `"defaultDevice": {"default_device": "N"}`: the device of threads that set none.
    default_device: Option<i32>,
}

fn parse_config(text: &str) -> Res<InitConfig> {
    let json: serde_json::Value = match serde_json::from_str(text) {
        Ok(json) => json,
        Err(e) => fail!(
            ACL_ERROR_PARSE_FILE,
            "the configuration file is not valid JSON: {e}"
        ),
    };
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
    Ok(InitConfig {
        sim,
        process_messages,
        default_device,
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
    Ok(())
}

/// What aclFinalize undoes of aclInit's configuration (the simulator's own stays).
fn finalize() {
    context::set_default_device(None);
    error::set_process_level_messages(false);
    flush_trace();
}

fn flush_trace() {
    if let Err(e) = crate::trace::flush() {
        tracing::warn!(target: "npu_sim", "writing the trace failed: {e}");
    }
}

/// Initialises AscendCL (reference-counted; a repeat counts and returns
/// ACL_ERROR_REPEAT_INITIALIZE). The JSON config file may carry `"err_msg_mode": "1"`
/// (aclGetRecentErrMsg reports the messages of every thread), `"defaultDevice":
/// {"default_device": "N"}` (threads that set no device or context use device N, as if they
/// had called aclrtSetDevice(N)) and the simulator's configuration under `"npu_sim"`. A value
/// of the wrong form → 100000; a default device that does not exist → 107001.
///
/// # Safety
/// `configPath` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInit(configPath: *const c_char) -> aclError {
    guard("aclInit", || {
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
            false => match c_str(configPath, "configPath")? {
                "" => None,
                path => match std::fs::read_to_string(path) {
                    Ok(text) => Some(text),
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
        apply_config(config)?;
        if state.first_config.is_none() {
            state.first_config = text;
        }
        state.refs = 1;
        state.finalized = false;
        Ok(())
    })
}

/// Finalises AscendCL: drops every aclInit reference, undoes the file's `"err_msg_mode"` and
/// `"defaultDevice"`, and writes the trace, if one is recorded. A second call without a new
/// aclInit returns ACL_ERROR_REPEAT_FINALIZE. Devices keep their state (reset them with
/// aclrtResetDevice).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalize() -> aclError {
    guard("aclFinalize", || {
        let mut state = lock(&INIT);
        ensure!(
            state.refs > 0 || !state.finalized,
            ACL_ERROR_REPEAT_FINALIZE,
            "AscendCL is already finalised"
        );
        state.refs = 0;
        state.finalized = true;
        drop(state);
        finalize();
        Ok(())
    })
}

/// Drops one aclInit reference, finalising at zero; `refCount` (nullable) receives the count
/// left.
///
/// # Safety
/// `refCount` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalizeReference(refCount: *mut u64) -> aclError {
    guard("aclFinalizeReference", || {
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
        }
        drop(state);
        if left == 0 {
            finalize();
        }
        if !refCount.is_null() {
            write_out(refCount, "refCount", left)?;
        }
        Ok(())
    })
}

/// The configured version of a package (see [`SimConfig::packages`]) and its weighted number;
/// an unknown package is a parameter error.
fn package_version(name: &str) -> Res<(String, i32)> {
    let sim = sim()?;
    match sim.config.packages.get(name) {
        Some(version) => match crate::version::package_version_number(version) {
            Some(number) => Ok((version.clone(), number)),
            None => fail!(
                ACL_ERROR_INTERNAL_ERROR,
                "the configured version {version:?} of {name:?} has no number"
            ),
        },
        None => fail!(
            ACL_ERROR_INVALID_PARAM,
            "no package {name:?} is installed (the simulator knows {:?})",
            sim.config.packages.keys().collect::<Vec<_>>()
        ),
    }
}

/// Writes the version string of a package (as configured; CANN's packages default to
/// [`crate::config::DEFAULT_CANN_VERSION`]) into `versionStr` (at least
/// ACL_PKG_VERSION_MAX_SIZE bytes).
///
/// # Safety
/// `pkgName` must be NULL or NUL-terminated; `versionStr` NULL or writable for
/// ACL_PKG_VERSION_MAX_SIZE bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetVersionStr(
    pkgName: *mut c_char,
    versionStr: *mut c_char,
) -> aclError {
    guard("aclsysGetVersionStr", || {
        let name = c_str(pkgName, "pkgName")?;
        non_null(versionStr, "versionStr")?;
        let (version, _) = package_version(name)?;
        let bytes = CString::new(version).unwrap_or_default();
        let bytes = bytes.as_bytes_with_nul();
        // SAFETY: the caller provides ACL_PKG_VERSION_MAX_SIZE (128) writable bytes, more than
        // the version string with its NUL (SimConfig::validate only admits short versions).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), versionStr.cast::<u8>(), bytes.len())
        };
        Ok(())
    })
}

/// Writes the version of a package as its weighted number ([`crate::version`]), which orders
/// as the versions do.
///
/// # Safety
/// `pkgName` must be NULL or NUL-terminated; `versionNum` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetVersionNum(
    pkgName: *mut c_char,
    versionNum: *mut i32,
) -> aclError {
    guard("aclsysGetVersionNum", || {
        let name = c_str(pkgName, "pkgName")?;
        non_null(versionNum, "versionNum")?;
        let (_, number) = package_version(name)?;
        write_out(versionNum, "versionNum", number)
    })
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
