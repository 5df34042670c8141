//! The one error type of npu-rs.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use crate::code::{AclCode, ErrorClass};
use crate::fault::DeviceFault;

/// Result alias used across npu-rs.
///
/// ```
/// use npu_core::{Device, Result};
///
/// fn devices() -> Result<u32> {
///     Device::count() // the error type defaults to npu_core::Error
/// }
/// assert!(devices()? >= 1);
/// # Ok::<(), npu_core::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in npu-rs.
///
/// ```
/// use npu_core::{AclCode, AclError, Error};
///
/// let err = Error::from(AclError::new("aclrtMemcpyAsync", AclCode(107003), None));
/// assert_eq!(
///     err.to_string(),
///     "aclrtMemcpyAsync failed: ACL_ERROR_RT_STREAM_CONTEXT (107003): \
///      stream belongs to another context"
/// );
/// assert_eq!(err.acl_code(), Some(AclCode(107003)));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An ACL call returned a failure code.
    #[error(transparent)]
    Acl(#[from] AclError),
    /// npu-rs rejected an argument before calling ACL.
    #[error("{api}: invalid argument `{argument}`: {rule}")]
    InvalidArgument {
        /// The npu-rs or ACL API that was called.
        api: &'static str,
        /// The argument that broke the rule.
        argument: &'static str,
        /// The rule, phrased for the caller.
        rule: Cow<'static, str>,
    },
    /// The loaded runtime does not export a function this operation needs.
    #[error("{api} is not exported by the loaded AscendCL runtime (an older CANN release?)")]
    Unsupported {
        /// The missing ACL function.
        api: &'static str,
    },
    /// No runtime could be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The operation was discarded by an abort of its stream (`Stream::abort`, or an
    /// `aclrtDeviceTaskAbort` of its device made through the raw API, which npu-rs hears of
    /// through the runtime's device task abort callback where the runtime has one); the device
    /// is done with its memory.
    ///
    /// Discarded means its completion was: the device never started its work, or its work
    /// was the task running when the abort began, which the runtime lets finish while it
    /// drops what follows (the record npu-rs watches the operation by among it). The runtime
    /// does not tell the two apart, so neither can this error: the memory the operation
    /// wrote is unspecified (untouched, or everything its task wrote), never written after
    /// the error is returned.
    #[error("{api} was discarded: its stream was aborted")]
    Aborted {
        /// The ACL function that submitted the operation.
        api: &'static str,
    },
    /// Called in a process `fork()`ed from one in which npu-rs had started a runtime or one of
    /// its threads, or was making or starting one ([`forked`](crate::forked)). Neither ACL nor
    /// the threads that run and watch device work survive a fork, so the child refuses every
    /// ACL call, and a wait for work submitted before the fork (which nothing in the child
    /// will ever complete) ends with this error.
    /// Start npu-rs in a fresh process instead (`exec` after the fork, or
    /// `std::process::Command`).
    #[error(
        "{api} was called in a process forked after (or while) npu-rs started AscendCL or one \
         of its threads, which do not survive fork(): use npu-rs in a fresh process (exec) \
         instead"
    )]
    Forked {
        /// The ACL function, or the npu-rs wait, that was refused.
        api: &'static str,
    },
    /// Teardowns npu-rs handed to threads of their own (a device's reset, ACL's finalisation:
    /// see [`wait_for_teardowns`](crate::wait_for_teardowns)) were still running when a wait
    /// for them ran out: stuck in the runtime, or slower than the wait allowed; or the wait ran
    /// out on something that may still hand one off (`waiting_for`).
    #[error(
        "{api}: {running} teardown(s) of npu-rs (aclrtResetDevice, aclrtDestroyContext or \
         aclFinalize on a thread of npu-rs's own, such a thread yet to let go of the last \
         handle, or a stream the program dropped with work still in flight) still running \
         after {waited:?}{}",
        match waiting_for {
            Unsettled::Teardowns => "",
            Unsettled::CompletingThread =>
                " (a thread of npu-rs's that completed an operation had not let go of its \
                 stream yet)",
            Unsettled::Reaper => " (releases queued on npu-rs's reaper had not run yet)",
        }
    )]
    TeardownsRunning {
        /// The npu-rs API that waited.
        api: &'static str,
        /// How many teardowns were still running when it ran out.
        running: usize,
        /// What the wait was waiting for when it ran out.
        waiting_for: Unsettled,
        /// How long it waited.
        waited: std::time::Duration,
    },
}

/// What a wait for teardowns ([`Error::TeardownsRunning`]) was waiting for when it ran out.
///
/// ```
/// use std::time::Duration;
/// use npu_core::{Error, Unsettled};
///
/// fn held_up_by(result: Result<(), Error>) -> Option<Unsettled> {
///     match result {
///         Err(Error::TeardownsRunning { waiting_for, .. }) => Some(waiting_for),
///         _ => None,
///     }
/// }
/// drop(npu_core::Device::open(0)?);
/// // Nothing of npu-rs's is torn down on a thread of its own here: nothing held it up.
/// assert_eq!(held_up_by(npu_core::wait_for_teardowns(Duration::from_secs(10))), None);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsettled {
    /// Teardowns running on threads of npu-rs's own, or streams the program dropped that
    /// npu-rs still holds (their work in flight, or a thread of npu-rs's yet to let go of
    /// them): `running` of them.
    Teardowns,
    /// A thread of npu-rs's that completed an operation (the reactor, a callback worker, a
    /// blocking waiter, the sentinel, an abort's thread) had not let go of what it held for it
    /// (its stream, through which a context or a runtime whose teardown it may hand off).
    CompletingThread,
    /// npu-rs's reaper had not run the releases queued before the wait (one may hand off a
    /// teardown).
    Reaper,
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    ///
    /// ```
    /// use npu_core::Error;
    ///
    /// fn check_even(len: usize) -> Result<(), Error> {
    ///     if len % 2 == 1 {
    ///         return Err(Error::invalid("check_even", "len", format!("{len} is odd")));
    ///     }
    ///     Ok(())
    /// }
    /// let err = check_even(3).unwrap_err();
    /// assert_eq!(err.to_string(), "check_even: invalid argument `len`: 3 is odd");
    /// assert!(matches!(err, Error::InvalidArgument { argument: "len", .. }));
    /// ```
    pub fn invalid(
        api: &'static str,
        argument: &'static str,
        rule: impl Into<Cow<'static, str>>,
    ) -> Self {
        Error::InvalidArgument {
            api,
            argument,
            rule: rule.into(),
        }
    }

    /// The ACL return code, when the error came from an ACL call.
    ///
    /// ```
    /// use npu_core::{AclCode, Error, Runtime};
    ///
    /// let rt = Runtime::global()?;
    /// let failed = rt.check("aclrtMalloc", 207001).unwrap_err();
    /// assert_eq!(failed.acl_code(), Some(AclCode(207001)));
    /// assert_eq!(Error::invalid("example", "len", "must not be 0").acl_code(), None);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn acl_code(&self) -> Option<AclCode> {
        match self {
            Error::Acl(e) => Some(e.code),
            _ => None,
        }
    }

    /// What the runtime reported about the device-side fault behind this error (the failed
    /// task, its stream and device, the device's error detail), when it did.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, DeviceFault, Error};
    ///
    /// let mut fault = DeviceFault::new(AclCode(507015));
    /// (fault.task_id, fault.stream_id) = (2, 4);
    /// let err = Error::from(AclError::new("aclrtMemsetAsync", AclCode(507015), None).with_fault(fault));
    /// assert_eq!(err.fault().map(|f| f.task_id), Some(2));
    /// assert!(Error::invalid("example", "len", "must not be 0").fault().is_none());
    /// ```
    pub fn fault(&self) -> Option<&DeviceFault> {
        match self {
            Error::Acl(e) => e.fault.as_deref(),
            _ => None,
        }
    }

    /// Whether memory (device or host) ran out ([`AclCode::is_out_of_memory`]).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error};
    ///
    /// let err = Error::from(AclError::new("aclrtMalloc", AclCode::MEMORY_ALLOCATION, None));
    /// assert!(err.is_out_of_memory());
    /// assert!(!Error::invalid("example", "len", "must not be 0").is_out_of_memory());
    /// ```
    pub fn is_out_of_memory(&self) -> bool {
        self.acl_code().is_some_and(AclCode::is_out_of_memory)
    }

    /// Whether the device is lost ([`AclCode::is_device_lost`]).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error};
    ///
    /// let err = Error::from(AclError::new("aclrtMemsetAsync", AclCode::DEVICE_LOST, None));
    /// assert!(err.is_device_lost());
    /// ```
    pub fn is_device_lost(&self) -> bool {
        self.acl_code().is_some_and(AclCode::is_device_lost)
    }

    /// Whether something timed out ([`AclCode::is_timeout`], or a wait for teardowns that ran
    /// out: [`Error::TeardownsRunning`]).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error};
    ///
    /// let err = Error::from(AclError::new("aclrtSynchronizeStreamWithTimeout", AclCode::STREAM_SYNC_TIMEOUT, None));
    /// assert!(err.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::TeardownsRunning { .. })
            || self.acl_code().is_some_and(AclCode::is_timeout)
    }

    /// Whether device memory the work touched has an uncorrectable error
    /// ([`AclCode::is_memory_error`]).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error};
    ///
    /// let err = Error::from(AclError::new("aclrtMemsetAsync", AclCode::DEVICE_MEM_ERROR, None));
    /// assert!(err.is_memory_error());
    /// assert!(!Error::invalid("example", "len", "must not be 0").is_memory_error());
    /// ```
    pub fn is_memory_error(&self) -> bool {
        self.acl_code().is_some_and(AclCode::is_memory_error)
    }

    /// The kind of device memory error the work failed with, if it failed with one
    /// ([`AclCode::memory_error_kind`]): whether CANN can repair the memory.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error, MemoryErrorKind};
    ///
    /// let err = Error::from(AclError::new("aclrtMemsetAsync", AclCode::HBM_MULTI_BIT_ECC_ERROR, None));
    /// assert_eq!(err.memory_error_kind(), Some(MemoryErrorKind::Unrepairable));
    /// assert_eq!(Error::invalid("example", "len", "must not be 0").memory_error_kind(), None);
    /// ```
    pub fn memory_error_kind(&self) -> Option<crate::MemoryErrorKind> {
        self.acl_code().and_then(AclCode::memory_error_kind)
    }

    /// Whether the work was aborted ([`AclCode::is_aborted`]).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, Error};
    ///
    /// let err = Error::from(AclError::new("aclrtMemcpyAsync", AclCode::STREAM_ABORT, None));
    /// assert!(err.is_aborted());
    /// ```
    pub fn is_aborted(&self) -> bool {
        matches!(self, Error::Aborted { .. }) || self.acl_code().is_some_and(AclCode::is_aborted)
    }
}

/// A failed ACL call: which function, the code it returned and what the runtime said.
///
/// ```
/// use npu_core::{AclCode, Error, Runtime};
///
/// let rt = Runtime::global()?;
/// let Err(Error::Acl(failure)) = rt.check("aclrtFree", 507899) else { unreachable!() };
/// assert_eq!(failure.api, "aclrtFree");
/// assert_eq!(failure.code, AclCode(507899));
/// assert_eq!(failure.code.name(), Some("ACL_ERROR_RT_DRV_INTERNAL_ERROR"));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AclError {
    /// The ACL function that failed, e.g. `aclrtMemcpyAsync`.
    pub api: &'static str,
    /// The code it returned.
    pub code: AclCode,
    /// The text of `aclGetRecentErrMsg` right after the failure, when there was one.
    pub message: Option<String>,
    /// For a task that failed on the device: what the runtime's exception callback reported
    /// about it, when it did.
    pub fault: Option<Box<DeviceFault>>,
}

impl AclError {
    /// Creates an error record for `api` failing with `code`.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError};
    ///
    /// let err = AclError::new("aclrtMalloc", AclCode(207001), Some("4096 bytes".into()));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "aclrtMalloc failed: ACL_ERROR_RT_MEMORY_ALLOCATION (207001): device out of memory \
    ///      (runtime: 4096 bytes)"
    /// );
    /// ```
    pub fn new(api: &'static str, code: AclCode, message: Option<String>) -> Self {
        AclError {
            api,
            code,
            message,
            fault: None,
        }
    }

    /// The same error, carrying what the runtime reported about the device-side fault.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, DeviceFault};
    ///
    /// let mut fault = DeviceFault::new(AclCode(507015));
    /// (fault.task_id, fault.stream_id) = (2, 4);
    /// let err = AclError::new("aclrtMemsetAsync", AclCode(507015), None).with_fault(fault.clone());
    /// assert_eq!(err.fault.as_deref(), Some(&fault));
    /// assert!(err.to_string().ends_with(", at task 2 of stream 4 on device 0"), "{err}");
    /// ```
    pub fn with_fault(mut self, fault: DeviceFault) -> Self {
        self.fault = Some(Box::new(fault));
        self
    }

    /// The code's class (caller, resource, business, internal, or unknown for a code outside
    /// ACL's ranges).
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, ErrorClass};
    ///
    /// let trap = AclError::new("aclrtLaunchKernelWithHostArgs", AclCode(507015), None);
    /// assert_eq!(trap.class(), ErrorClass::Internal);
    /// ```
    pub fn class(&self) -> ErrorClass {
        self.code.class()
    }

    /// What the runtime said, without a leading "`<function>` failed with `<code>` (`<name>`): "
    /// that names the same code: the error already says which operation failed and how, and the
    /// function the runtime names may be one npu-rs called on the operation's behalf (the event
    /// synchronisation that reported a kernel's fault), not one the caller made.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError};
    ///
    /// let message = "aclrtSynchronizeEvent failed with 507015 (ACL_ERROR_RT_AICORE_EXCEPTION): \
    ///                a task on stream 3 trapped";
    /// let err = AclError::new("aclrtLaunchKernelWithHostArgs", AclCode(507015), Some(message.into()));
    /// assert_eq!(err.detail(), Some("a task on stream 3 trapped"));
    /// assert!(!err.to_string().contains("aclrtSynchronizeEvent"));
    /// assert_eq!(err.to_string().matches("507015").count(), 1, "{err}");
    /// ```
    pub fn detail(&self) -> Option<&str> {
        let message = self.message.as_deref()?;
        let prefix = format!(" failed with {} (", self.code.0);
        let stripped = message
            .split_once(&prefix)
            .filter(|(function, _)| !function.contains(' '))
            .and_then(|(_, rest)| rest.split_once("): "))
            .map(|(_, detail)| detail);
        Some(stripped.unwrap_or(message))
    }
}

impl fmt::Display for AclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.api, self.code)?;
        if let Some(description) = self.code.description() {
            write!(f, ": {description}")?;
        }
        if let Some(detail) = self.detail() {
            write!(f, " (runtime: {detail})")?;
        }
        if let Some(fault) = &self.fault {
            write!(f, ", at {fault}")?;
        }
        Ok(())
    }
}

impl std::error::Error for AclError {}

/// One place the loader looked for an AscendCL runtime, and why it was not used.
///
/// ```
/// use npu_core::{Error, LoadError, LoadFailure, Runtime};
///
/// // SAFETY: the path names CANN's runtime library, if the file exists at all.
/// let missing = unsafe { Runtime::builder().library("/nonexistent/libacl_rt.so") }
///     .build()
///     .unwrap_err();
/// let Error::Load(LoadError::NotFound { tried }) = missing else { unreachable!() };
/// assert_eq!(tried[0].path, std::path::Path::new("/nonexistent/libacl_rt.so"));
/// assert_eq!(tried[0].reason, LoadFailure::NoSuchFile);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadAttempt {
    /// The path or library name handed to the dynamic loader.
    pub path: PathBuf,
    /// Why it could not be used.
    pub reason: LoadFailure,
}

/// Why one candidate library could not be used.
///
/// ```
/// use npu_core::LoadFailure;
///
/// let hal = LoadFailure::MissingDependency { library: "libascend_hal.so".into() };
/// let text = hal.to_string();
/// assert!(text.starts_with("needs libascend_hal.so, which the dynamic loader cannot find"));
/// assert!(text.contains("source the set_env.sh of your CANN install"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadFailure {
    /// The path names no file.
    #[error("no such file")]
    NoSuchFile,
    /// The path names something other than a regular file: a directory, a FIFO or a device.
    /// None is a library, and opening a FIFO (or a terminal) to look would wait for a writer.
    #[error("not a regular file (a directory, a FIFO or a device)")]
    NotARegularFile,
    /// A bare library name the system loader did not find.
    #[error("not found by the system loader (LD_LIBRARY_PATH, the ld.so cache)")]
    NotInLoaderPath,
    /// The library exists, but a library it links against could not be found. CANN's runtime
    /// needs the rest of the toolkit and the driver (`libascend_hal.so`), which only
    /// `set_env.sh` puts on `LD_LIBRARY_PATH`.
    #[error(
        "needs {library}, which the dynamic loader cannot find: source the set_env.sh of your \
         CANN install (e.g. `source /usr/local/Ascend/cann/set_env.sh`) so that LD_LIBRARY_PATH \
         lists the toolkit's and the driver's libraries"
    )]
    MissingDependency {
        /// The file name of the missing library, as the dynamic loader reported it.
        library: String,
    },
    /// The library loaded but lacks required ACL functions, `aclInit` among them: it is not an
    /// AscendCL runtime.
    #[error("not an AscendCL runtime: missing required ACL symbols: {}", .missing.join(", "))]
    NotAcl {
        /// The required functions it does not export.
        missing: Vec<&'static str>,
    },
    /// An AscendCL runtime (it exports `aclInit`) without some function npu-rs calls
    /// unconditionally: a CANN release older than npu-rs supports (or an out-of-date build of
    /// npu-sim, which exports the same functions).
    #[error(
        "an AscendCL runtime too old for npu-rs: it lacks {} (a CANN release older than npu-rs \
         supports, or an out-of-date build)",
        .missing.join(", ")
    )]
    TooOld {
        /// The required functions it does not export.
        missing: Vec<&'static str>,
    },
    /// The file is a shared object for another processor architecture or word size than this
    /// program's (an x86-64 toolkit on an Arm server, say). The dynamic loader reports it as
    /// "cannot open shared object file: No such file or directory", about a file that exists.
    #[error(
        "built for {found}, but this program runs on {expected}: install the CANN packages for \
         {expected}"
    )]
    WrongArchitecture {
        /// The architecture the file was built for, from its ELF header.
        found: String,
        /// This program's architecture.
        expected: String,
    },
    /// npu-sim's build of the runtime, found where CANN's was expected.
    #[error(
        "is npu-sim's build, not CANN's (name it in NPU_ACL_LIB, or set \
         NPU_ACL_ALLOW_SIMULATOR=1, to load it)"
    )]
    Simulator,
    /// The library is not npu-sim's build, but a library it links against was resolved to
    /// npu-sim's build, which is named like CANN's `libascendcl.so`: `cargo run` and
    /// `cargo test` put the target directory's `deps`, where npu-sim's build lies, on
    /// `LD_LIBRARY_PATH` ahead of CANN's directories.
    #[error(
        "links npu-sim's build at {} in place of a CANN library (cargo run and cargo test put \
         target/<profile>/deps, where npu-sim's libascendcl.so lies, ahead of CANN's directories \
         on LD_LIBRARY_PATH): run the built program directly, not through cargo",
        .simulator.display()
    )]
    SimulatorDependency {
        /// The npu-sim build the dynamic loader mapped for the dependency.
        simulator: PathBuf,
    },
    /// The library is not npu-sim's build, but npu-sim's ACL functions are already in the
    /// process's global symbol scope, exported by `simulator`: a shared library built with npu's
    /// `sim` feature that the program links against (or loaded with `RTLD_GLOBAL`), or an
    /// `LD_PRELOAD`. The dynamic loader would bind the runtime's calls to its own exported
    /// functions to the simulator's, running CANN on a mix of the two.
    #[error(
        "npu-sim's ACL functions are already exported to the whole process by {} (a shared \
         library built with npu's `sim` feature, or an LD_PRELOAD), and CANN's runtime would call \
         them in place of its own: build that library with default-features = false",
        .simulator.display()
    )]
    SimulatorInProcess {
        /// The object exporting npu-sim's functions to the process.
        simulator: PathBuf,
    },
    /// Any other error of the dynamic loader, in its words.
    #[error("{0}")]
    Loader(String),
}

/// Selecting or loading the ACL runtime failed.
///
/// ```
/// use npu_core::{BackendChoice, LoadError};
///
/// let err = "cuda".parse::<BackendChoice>().unwrap_err();
/// assert_eq!(err, LoadError::InvalidBackend("cuda".into()));
/// assert_eq!(err.to_string(), "NPU_BACKEND=\"cuda\" is not a backend: use sim, acl or auto");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate library could be loaded.
    #[error(
        "no usable AscendCL runtime (libacl_rt.so or libascendcl.so) was found; tried:{}",
        list_attempts(.tried)
    )]
    NotFound {
        /// Every candidate, in the order tried.
        tried: Vec<LoadAttempt>,
    },
    /// `NPU_BACKEND` holds something other than `sim`, `acl` or `auto`.
    #[error("NPU_BACKEND={0:?} is not a backend: use sim, acl or auto")]
    InvalidBackend(String),
    /// The simulator backend was requested but npu-core was built without its `sim` feature.
    #[error("the sim backend was requested but npu-core was built without the `sim` feature")]
    SimulatorNotBuilt,
}

pub(crate) fn list_attempts(tried: &[LoadAttempt]) -> String {
    tried
        .iter()
        .map(|a| format!("\n  {}: {}", a.path.display(), a.reason))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_includes_runtime_message() {
        let err = AclError::new("aclrtMalloc", AclCode(207001), Some("4096 bytes".into()));
        assert_eq!(
            err.to_string(),
            "aclrtMalloc failed: ACL_ERROR_RT_MEMORY_ALLOCATION (207001): device out of memory \
             (runtime: 4096 bytes)"
        );
        assert_eq!(err.class(), ErrorClass::Resource);
    }

    #[test]
    fn load_error_lists_attempts() {
        let err = LoadError::NotFound {
            tried: vec![
                LoadAttempt {
                    path: "/a/libacl_rt.so".into(),
                    reason: LoadFailure::NoSuchFile,
                },
                LoadAttempt {
                    path: "libascendcl.so".into(),
                    reason: LoadFailure::Simulator,
                },
            ],
        };
        assert_eq!(
            err.to_string(),
            "no usable AscendCL runtime (libacl_rt.so or libascendcl.so) was found; tried:\n  \
             /a/libacl_rt.so: no such file\n  libascendcl.so: is npu-sim's build, not CANN's \
             (name it in NPU_ACL_LIB, or set NPU_ACL_ALLOW_SIMULATOR=1, to load it)"
        );
    }

    #[test]
    fn invalid_argument_names_api_argument_and_rule() {
        let err = Error::invalid(
            "Stream::copy_2d",
            "width",
            "must not exceed the source pitch",
        );
        assert_eq!(
            err.to_string(),
            "Stream::copy_2d: invalid argument `width`: must not exceed the source pitch"
        );
        assert_eq!(err.acl_code(), None);
    }
}
