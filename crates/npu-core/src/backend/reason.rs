//! Why a runtime uses the backend it does.

use std::fmt;

use super::{Backend, BackendChoice};
use crate::error::{Error, LoadAttempt, list_attempts};

/// Why a [`Runtime`](crate::Runtime) uses its backend: see
/// [`Runtime::backend_reason`](crate::Runtime::backend_reason).
///
/// ```
/// use npu_core::{BackendChoice, BackendReason, Runtime};
///
/// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
/// assert!(matches!(rt.backend_reason(), BackendReason::Requested(BackendChoice::Sim)));
/// assert_eq!(rt.backend_reason().to_string(), "requested: sim");
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BackendReason {
    /// The builder or `NPU_BACKEND` asked for exactly this backend (`sim`, `acl` or a library).
    Requested(BackendChoice),
    /// `auto` found an AscendCL runtime whose `aclInit` succeeded and which sees `devices`
    /// devices.
    Detected {
        /// What `aclrtGetDeviceCount` reported.
        devices: u32,
    },
    /// `auto` did not use an AscendCL runtime and fell back to the simulator.
    Fallback(Fallback),
    /// `auto` in a build without the simulator (no `sim` feature): there is nothing to fall
    /// back to, so it behaves as `acl`.
    NoSimulator,
}

/// Why `auto` fell back to the simulator.
///
/// ```
/// use npu_core::{Backend, Fallback};
///
/// let library = Backend::Library { path: "/opt/lib64/libacl_rt.so".into(), simulated: false };
/// let why = Fallback::NoDevice { library, visible_devices: Some("4,5".into()) };
/// assert_eq!(
///     why.to_string(),
///     "AscendCL (/opt/lib64/libacl_rt.so): aclInit succeeded but no device is visible \
///      (ASCEND_RT_VISIBLE_DEVICES=\"4,5\")"
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Fallback {
    /// No candidate library could be used.
    NotInstalled {
        /// Every candidate, in the order tried, and why it was not used.
        tried: Vec<LoadAttempt>,
    },
    /// A runtime library loaded but `aclInit` failed (for example: no driver).
    InitFailed {
        /// The library that was loaded.
        library: Backend,
        /// The `aclInit` error.
        error: Error,
    },
    /// `aclInit` succeeded but `aclrtGetDeviceCount` failed.
    DeviceCountFailed {
        /// The library that was loaded.
        library: Backend,
        /// The `aclrtGetDeviceCount` error.
        error: Error,
    },
    /// `aclInit` succeeded but the runtime sees no device. The runtime applies
    /// `ASCEND_RT_VISIBLE_DEVICES` before counting, so a list naming no installed device
    /// counts as none.
    NoDevice {
        /// The library that was loaded.
        library: Backend,
        /// `ASCEND_RT_VISIBLE_DEVICES`, when set.
        visible_devices: Option<String>,
    },
}

impl fmt::Display for BackendReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendReason::Requested(BackendChoice::Sim) => f.write_str("requested: sim"),
            BackendReason::Requested(BackendChoice::Acl) => f.write_str("requested: acl"),
            BackendReason::Requested(BackendChoice::Auto) => f.write_str("requested: auto"),
            BackendReason::Requested(BackendChoice::Library(library)) => {
                write!(f, "requested: the library {}", library.path().display())
            }
            BackendReason::Detected { devices } => write!(
                f,
                "auto: aclInit succeeded and {devices} device(s) are visible"
            ),
            BackendReason::Fallback(why) => write!(f, "auto fell back to the simulator: {why}"),
            BackendReason::NoSimulator => {
                f.write_str("auto: built without the simulator, so the AscendCL runtime found")
            }
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::NotInstalled { tried } => write!(
                f,
                "no usable AscendCL runtime was found; tried:{}",
                list_attempts(tried)
            ),
            Fallback::InitFailed { library, error }
            | Fallback::DeviceCountFailed { library, error } => write!(f, "{library}: {error}"),
            Fallback::NoDevice {
                library,
                visible_devices,
            } => {
                write!(f, "{library}: aclInit succeeded but no device is visible")?;
                match visible_devices {
                    Some(value) => write!(f, " (ASCEND_RT_VISIBLE_DEVICES={value:?})"),
                    None => Ok(()),
                }
            }
        }
    }
}
