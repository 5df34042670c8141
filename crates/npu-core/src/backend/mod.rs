//! Choosing and loading the ACL runtime: CANN's `libacl_rt.so`/`libascendcl.so`, or npu-sim.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{LoadAttempt, LoadError};

pub(crate) mod auto;
mod library;
mod reason;
mod search;

pub(crate) use library::{InitUsers, Loaded, names_no_regular_file};
pub use reason::{BackendReason, Fallback};

/// Which runtime a [`Runtime`](crate::Runtime) should use.
///
/// `NPU_BACKEND` parses into this: `sim`, `acl` or `auto` (the default).
///
/// ```
/// use npu_core::BackendChoice;
///
/// assert_eq!("acl".parse::<BackendChoice>().unwrap(), BackendChoice::Acl);
/// assert!("cuda".parse::<BackendChoice>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BackendChoice {
    /// The in-process simulator (requires the `sim` feature).
    Sim,
    /// A real AscendCL runtime, searched for in the documented places.
    Acl,
    /// A real runtime when one is found, initialises and sees a device; otherwise the
    /// simulator.
    #[default]
    Auto,
    /// The AscendCL runtime library at exactly this path (npu-sim's build is accepted),
    /// which the caller vouches for: see [`RuntimeLibrary::new`].
    Library(RuntimeLibrary),
}

/// An AscendCL runtime library at a path of the caller's choice, for
/// [`BackendChoice::Library`] and [`RuntimeBuilder::library`](crate::RuntimeBuilder::library).
///
/// Making one is `unsafe` because nothing can check what a file is before loading it:
/// loading runs the library's initialisers, and npu-rs then calls the `acl*` functions it
/// exports with CANN's prototypes. The libraries npu-rs finds itself (`acl`, `auto`: CANN's
/// documented install locations and the dynamic loader's search path) are trusted as the
/// loader's search path is; a path named in code is the caller's word.
///
/// ```
/// use npu_core::{BackendChoice, Runtime, RuntimeLibrary};
///
/// // SAFETY: the path names CANN's runtime library, if the file exists at all.
/// let library = unsafe { RuntimeLibrary::new("/nonexistent/libascendcl.so") };
/// let err = Runtime::builder().backend(BackendChoice::Library(library)).build().unwrap_err();
/// assert!(err.to_string().contains("no such file"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuntimeLibrary {
    path: PathBuf,
}

impl RuntimeLibrary {
    /// The runtime library at `path` (a bare file name is searched by the dynamic loader).
    ///
    /// # Safety
    ///
    /// `path`, if it names a file that loads, must be an AscendCL runtime: CANN's
    /// `libascendcl.so` or `libacl_rt.so`, or npu-sim's build of `libascendcl.so`. Any other
    /// library's initialisers would run in this process, and its functions named like ACL's
    /// would be called with ACL's prototypes, which is undefined behaviour unless they have
    /// them. A path that does not exist, or does not load, is safe: it is an error.
    ///
    /// ```
    /// use npu_core::RuntimeLibrary;
    ///
    /// // SAFETY: a bare name of CANN's runtime library, found by the dynamic loader if at all.
    /// let library = unsafe { RuntimeLibrary::new("libacl_rt.so") };
    /// assert_eq!(library.path(), std::path::Path::new("libacl_rt.so"));
    /// ```
    pub unsafe fn new(path: impl Into<PathBuf>) -> Self {
        RuntimeLibrary { path: path.into() }
    }

    /// The path as given.
    ///
    /// ```
    /// use npu_core::RuntimeLibrary;
    ///
    /// // SAFETY: CANN's runtime library, at its default install location.
    /// let library = unsafe { RuntimeLibrary::new("/usr/local/Ascend/cann/lib64/libacl_rt.so") };
    /// assert!(library.path().ends_with("lib64/libacl_rt.so"));
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl FromStr for BackendChoice {
    type Err = LoadError;

    fn from_str(s: &str) -> Result<Self, LoadError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sim" => Ok(BackendChoice::Sim),
            "acl" => Ok(BackendChoice::Acl),
            "auto" | "" => Ok(BackendChoice::Auto),
            _ => Err(LoadError::InvalidBackend(s.to_string())),
        }
    }
}

impl BackendChoice {
    /// Reads `NPU_BACKEND`; unset means [`BackendChoice::Auto`]. A value that is not UTF-8
    /// is [`LoadError::InvalidBackend`] (shown lossily), as any other value that is not a
    /// backend.
    ///
    /// ```
    /// use npu_core::BackendChoice;
    ///
    /// # let saved = std::env::var_os("NPU_BACKEND");
    /// // SAFETY: no other thread of this program reads or writes the environment.
    /// unsafe { std::env::set_var("NPU_BACKEND", "sim") };
    /// assert_eq!(BackendChoice::from_env()?, BackendChoice::Sim);
    /// unsafe { std::env::set_var("NPU_BACKEND", "tpu") };
    /// assert!(BackendChoice::from_env().is_err());
    /// unsafe { std::env::remove_var("NPU_BACKEND") };
    /// assert_eq!(BackendChoice::from_env()?, BackendChoice::Auto);
    /// # if let Some(value) = saved { unsafe { std::env::set_var("NPU_BACKEND", value) } }
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, LoadError> {
        match std::env::var("NPU_BACKEND") {
            Ok(value) => value.parse(),
            Err(std::env::VarError::NotPresent) => Ok(BackendChoice::Auto),
            // Set, but not UTF-8: not a backend either. (Reading it as unset chose `auto`
            // silently, so a mistyped `sim` could load CANN.)
            Err(std::env::VarError::NotUnicode(value)) => Err(LoadError::InvalidBackend(
                value.to_string_lossy().into_owned(),
            )),
        }
    }
}

/// The runtime that was actually loaded.
///
/// ```
/// use npu_core::{Backend, BackendChoice, Runtime};
///
/// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
/// assert_eq!(rt.backend(), &Backend::Simulator);
/// assert_eq!(rt.backend().to_string(), "npu-sim (in-process)");
/// let cann = Backend::Library { path: "/opt/lib64/libacl_rt.so".into(), simulated: false };
/// assert_eq!(cann.to_string(), "AscendCL (/opt/lib64/libacl_rt.so)");
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// npu-sim, linked into this process.
    Simulator,
    /// An AscendCL runtime library loaded at run time.
    Library {
        /// The file the dynamic loader mapped, symlinks resolved (for a bare name, the file
        /// it found).
        path: PathBuf,
        /// Whether the library is npu-sim's build of the runtime rather than CANN's.
        simulated: bool,
    },
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Simulator => f.write_str("npu-sim (in-process)"),
            Backend::Library {
                path,
                simulated: true,
            } => {
                write!(f, "npu-sim ({})", path.display())
            }
            Backend::Library {
                path,
                simulated: false,
            } => {
                write!(f, "AscendCL ({})", path.display())
            }
        }
    }
}

/// Resolves a choice into a loaded runtime. `RuntimeBuilder::build` sends `auto` to
/// [`auto::choose`] instead, which must initialise what it finds before choosing; here it loads
/// what `acl` would.
pub(crate) fn load(choice: &BackendChoice) -> Result<&'static Loaded, LoadError> {
    match choice {
        BackendChoice::Sim => simulator(),
        BackendChoice::Library(chosen) => {
            library::open(chosen.path()).map_err(|reason| LoadError::NotFound {
                tried: vec![LoadAttempt {
                    path: chosen.path().to_path_buf(),
                    reason,
                }],
            })
        }
        BackendChoice::Acl | BackendChoice::Auto => {
            load_installed().map_err(|tried| LoadError::NotFound { tried })
        }
    }
}

#[cfg(feature = "sim")]
fn simulator() -> Result<&'static Loaded, LoadError> {
    static SIMULATOR: std::sync::OnceLock<&'static Loaded> = std::sync::OnceLock::new();
    Ok(SIMULATOR.get_or_init(|| Loaded::leak(npu_sim::api(), Backend::Simulator)))
}

#[cfg(not(feature = "sim"))]
fn simulator() -> Result<&'static Loaded, LoadError> {
    Err(LoadError::SimulatorNotBuilt)
}

/// The first installed runtime in the documented order, or every attempt and its failure.
fn load_installed() -> Result<&'static Loaded, Vec<LoadAttempt>> {
    let env = search::SearchEnv::from_process();
    library::load_first(search::candidates(&env, Path::new(search::SYSTEM_ROOT)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadFailure;

    /// The one attempt an explicit library choice makes, when it fails.
    fn failed_attempt(path: &str) -> LoadAttempt {
        // SAFETY: the tests' paths are missing files or files that are no AscendCL runtime
        // and refuse to load as one before any of their functions is called.
        match load(&BackendChoice::Library(unsafe {
            RuntimeLibrary::new(path)
        })) {
            Err(LoadError::NotFound { tried }) if tried.len() == 1 => tried[0].clone(),
            Err(other) => panic!("unexpected {other:?}"),
            Ok(_) => panic!("{path} is no AscendCL runtime"),
        }
    }

    #[test]
    fn a_missing_file_is_reported_with_its_path() {
        let attempt = failed_attempt("/nonexistent/libacl_rt.so");
        assert_eq!(attempt.path, Path::new("/nonexistent/libacl_rt.so"));
        assert_eq!(attempt.reason, LoadFailure::NoSuchFile);
    }

    #[test]
    fn a_library_without_acl_symbols_is_rejected_by_name() {
        let attempt = failed_attempt("libc.so.6");
        let LoadFailure::NotAcl { missing } = &attempt.reason else {
            panic!("unexpected {}", attempt.reason)
        };
        assert!(missing.contains(&"aclInit"), "{missing:?}");
    }
}
