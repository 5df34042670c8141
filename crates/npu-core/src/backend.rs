//! Choosing and loading the ACL runtime: a real libascendcl.so, or npu-sim.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use crate::error::{LoadAttempt, LoadError};
use crate::ffi::AclApi;
use crate::runtime::SharedState;

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
pub enum BackendChoice {
    /// The in-process simulator (requires the `sim` feature).
    Sim,
    /// A real AscendCL runtime, searched for in the documented places.
    Acl,
    /// A real runtime when one is found, otherwise the simulator.
    #[default]
    Auto,
    /// The AscendCL runtime library at exactly this path.
    Library(PathBuf),
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
    /// Reads `NPU_BACKEND`; unset means [`BackendChoice::Auto`].
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
            Err(_) => Ok(BackendChoice::Auto),
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
/// let cann = Backend::Library { path: "/opt/lib64/libascendcl.so".into(), simulated: false };
/// assert_eq!(cann.to_string(), "AscendCL (/opt/lib64/libascendcl.so)");
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// npu-sim, linked into this process.
    Simulator,
    /// An AscendCL runtime library loaded at run time.
    Library {
        /// The path (or name) the library was loaded from.
        path: PathBuf,
        /// Whether the library is npu-sim's `libascendcl.so` rather than CANN's.
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

/// A loaded runtime. Loaded runtimes live for the rest of the process: their worker threads and
/// thread-local destructors must never outlive their code, so libraries are never unloaded.
pub(crate) struct Loaded {
    pub(crate) api: AclApi,
    pub(crate) backend: Backend,
    /// Distinguishes runtimes in per-thread caches; ACL state is per loaded library.
    pub(crate) id: usize,
    /// How many `Runtime`s hold an `aclInit` reference on this library. Separate from
    /// `shared`: `aclInit` and `aclFinalize` run under this lock.
    pub(crate) init_users: Mutex<usize>,
    /// Primary contexts and peer-access counts of this library.
    pub(crate) shared: Mutex<SharedState>,
}

/// Every library loaded so far, so loading the same path twice shares one table.
static LIBRARIES: Mutex<Vec<&'static Loaded>> = Mutex::new(Vec::new());

fn next_id() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn leak(api: AclApi, backend: Backend) -> &'static Loaded {
    Box::leak(Box::new(Loaded {
        api,
        backend,
        id: next_id(),
        init_users: Mutex::new(0),
        shared: Mutex::default(),
    }))
}

/// Resolves a choice into a loaded runtime, logging what `auto` picked.
pub(crate) fn load(choice: &BackendChoice) -> Result<&'static Loaded, LoadError> {
    match choice {
        BackendChoice::Sim => simulator(),
        BackendChoice::Library(path) => load_path(path).map_err(|reason| LoadError::NotFound {
            tried: vec![LoadAttempt {
                path: path.clone(),
                reason,
            }],
        }),
        BackendChoice::Acl => load_installed(),
        BackendChoice::Auto => match load_installed() {
            Ok(loaded) => {
                tracing::info!(backend = %loaded.backend, "NPU_BACKEND=auto chose a real runtime");
                Ok(loaded)
            }
            Err(LoadError::NotFound { tried }) => match simulator() {
                Ok(loaded) => {
                    tracing::info!(
                        tried = tried.len(),
                        "NPU_BACKEND=auto found no AscendCL runtime; using the simulator"
                    );
                    Ok(loaded)
                }
                Err(LoadError::SimulatorNotBuilt) => Err(LoadError::NotFound { tried }),
                Err(other) => Err(other),
            },
            Err(other) => Err(other),
        },
    }
}

#[cfg(feature = "sim")]
fn simulator() -> Result<&'static Loaded, LoadError> {
    static SIMULATOR: std::sync::OnceLock<&'static Loaded> = std::sync::OnceLock::new();
    Ok(SIMULATOR.get_or_init(|| leak(npu_sim::api(), Backend::Simulator)))
}

#[cfg(not(feature = "sim"))]
fn simulator() -> Result<&'static Loaded, LoadError> {
    Err(LoadError::SimulatorNotBuilt)
}

/// A place to look for libascendcl.so.
pub(crate) struct Candidate {
    path: PathBuf,
    /// Named by the user (`NPU_ACL_LIB`): accepted even if it is npu-sim's build.
    explicit: bool,
}

/// Where a CANN installation keeps libascendcl.so, in the order they are tried.
pub(crate) fn candidates() -> Vec<Candidate> {
    let mut candidates = Vec::new();
    if let Some(lib) = std::env::var_os("NPU_ACL_LIB").filter(|v| !v.is_empty()) {
        candidates.push(Candidate {
            path: PathBuf::from(lib),
            explicit: true,
        });
    }
    let mut paths = Vec::new();
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        if let Some(home) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            paths.push(Path::new(&home).join("lib64").join("libascendcl.so"));
        }
    }
    // CANN's default install prefix, for hosts where set_env.sh was not sourced.
    paths.push(PathBuf::from(
        "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
    ));
    // A bare name makes the dynamic loader search LD_LIBRARY_PATH and its cache.
    paths.push(PathBuf::from("libascendcl.so"));
    candidates.extend(paths.into_iter().map(|path| Candidate {
        path,
        explicit: false,
    }));
    candidates
}

fn load_installed() -> Result<&'static Loaded, LoadError> {
    load_first(candidates())
}

/// Loads the first candidate that is CANN's runtime. npu-sim's own libascendcl.so is skipped
/// unless named explicitly: `cargo run` and `cargo test` put the build's `deps` directory on
/// the loader path, where the simulator's cdylib would otherwise pass for a real install.
fn load_first(candidates: Vec<Candidate>) -> Result<&'static Loaded, LoadError> {
    let mut tried = Vec::new();
    for Candidate { path, explicit } in candidates {
        let reason = match load_path(&path) {
            Ok(loaded) if explicit || !is_simulated(loaded) => return Ok(loaded),
            Ok(_) => "is npu-sim's libascendcl.so, not CANN's (name it in NPU_ACL_LIB to use it)"
                .to_string(),
            Err(reason) => reason,
        };
        tried.push(LoadAttempt { path, reason });
    }
    Err(LoadError::NotFound { tried })
}

/// An error and its causes on one line: libloading keeps dlerror's text in the source.
fn with_sources(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn is_simulated(loaded: &Loaded) -> bool {
    matches!(
        loaded.backend,
        Backend::Library {
            simulated: true,
            ..
        }
    )
}

fn load_path(path: &Path) -> Result<&'static Loaded, String> {
    let mut libraries = LIBRARIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(loaded) = libraries
        .iter()
        .find(|l| matches!(&l.backend, Backend::Library { path: p, .. } if p == path))
    {
        return Ok(loaded);
    }
    if path.is_absolute() && !path.exists() {
        return Err("no such file".into());
    }
    // SAFETY: loading runs the library's initialisers. The candidates are the AscendCL runtime
    // of a CANN install or npu-sim's build of it, both of which are designed to be dlopened.
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| with_sources(&e))?;
    // SAFETY: an AscendCL runtime exports these functions with the header's prototypes, and
    // the library is leaked below, so the pointers stay valid for the rest of the process.
    let api = unsafe { AclApi::from_library(&library) }.map_err(|e| e.to_string())?;
    // SAFETY: only the symbol's presence is checked; it is never dereferenced or called.
    let simulated = unsafe { library.get::<*const ()>(b"npusimConfigure\0") }.is_ok();
    std::mem::forget(library);
    let unsupported = api.unsupported();
    if !unsupported.is_empty() {
        tracing::debug!(path = %path.display(), ?unsupported, "optional ACL functions absent");
    }
    let loaded = leak(
        api,
        Backend::Library {
            path: path.to_path_buf(),
            simulated,
        },
    );
    libraries.push(loaded);
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_reported_with_its_path() {
        let err = load(&BackendChoice::Library(
            "/nonexistent/libascendcl.so".into(),
        ))
        .err()
        .expect("no library there");
        let LoadError::NotFound { tried } = err else {
            panic!("unexpected {err:?}")
        };
        assert_eq!(tried[0].path, Path::new("/nonexistent/libascendcl.so"));
        assert_eq!(tried[0].reason, "no such file");
    }

    #[test]
    fn a_library_without_acl_symbols_is_rejected_by_name() {
        let err = load(&BackendChoice::Library("libc.so.6".into()))
            .err()
            .expect("not ACL");
        let LoadError::NotFound { tried } = err else {
            panic!("unexpected {err:?}")
        };
        assert!(tried[0].reason.contains("aclInit"), "{}", tried[0].reason);
    }

    #[test]
    fn candidates_end_with_the_system_loader() {
        let candidates = candidates();
        let last = candidates.last().unwrap();
        assert_eq!(last.path, Path::new("libascendcl.so"));
        assert!(!last.explicit);
    }

    #[test]
    fn every_failed_candidate_is_listed_with_its_reason() {
        let candidates = [
            "/nonexistent/a/libascendcl.so",
            "libc.so.6",
            "no-such-library.so",
        ]
        .into_iter()
        .map(|p| Candidate {
            path: p.into(),
            explicit: false,
        })
        .collect();
        let Err(LoadError::NotFound { tried }) = load_first(candidates) else {
            panic!("nothing there is an ACL runtime")
        };
        let reasons: Vec<_> = tried.iter().map(|t| t.reason.as_str()).collect();
        assert_eq!(tried.len(), 3, "{reasons:?}");
        assert_eq!(reasons[0], "no such file");
        assert!(
            reasons[1].contains("missing required ACL symbols"),
            "{}",
            reasons[1]
        );
        assert!(reasons[2].contains("no-such-library.so"), "{}", reasons[2]);
    }
}
