//! Loading an AscendCL runtime library, once per file the dynamic loader maps.

use std::ffi::{CStr, OsStr, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Backend;
use super::search::Candidate;
use crate::error::{LoadAttempt, LoadFailure};
use crate::fault::FaultTable;
use crate::ffi::AclApi;
use crate::runtime::SharedState;

/// A loaded runtime. Loaded runtimes live for the rest of the process: their worker threads and
/// thread-local destructors must never outlive their code, so libraries are never unloaded.
pub(crate) struct Loaded {
    pub(crate) api: AclApi,
    pub(crate) backend: Backend,
    /// Distinguishes runtimes in per-thread caches; ACL state is per loaded library.
    pub(crate) id: usize,
    /// How many `Runtime`s hold an `aclInit` reference on this library, and how ACL was
    /// initialised for them. Separate from `shared`: `aclInit` and `aclFinalize` run under this
    /// lock.
    pub(crate) init_users: Mutex<InitUsers>,
    /// Primary contexts and peer-access counts of this library.
    pub(crate) shared: Mutex<SharedState>,
    /// The faults its exception callback recorded.
    pub(crate) faults: FaultTable,
    /// Who its device task abort callback tells of each device's aborts.
    pub(crate) device_aborts: crate::device_abort::DeviceAborts,
}

/// The `aclInit` references npu-rs holds on one library.
#[derive(Debug, Default)]
pub(crate) struct InitUsers {
    /// How many `Runtime`s hold one.
    pub(crate) count: usize,
    /// Whether the first of them found ACL already initialised by another component of the
    /// process (`aclInit` returned `ACL_ERROR_REPEAT_INITIALIZE`). Without
    /// `aclFinalizeReference` npu-rs then owns no reference it could release: `aclFinalize`
    /// would finalise ACL under that component's feet.
    pub(crate) borrowed: bool,
    /// The configuration file npu-rs passed to that `aclInit`: a later runtime asking for
    /// another one cannot have it while ACL stays initialised.
    pub(crate) config: Option<std::path::PathBuf>,
}

impl Loaded {
    pub(crate) fn leak(api: AclApi, backend: Backend) -> &'static Loaded {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
        Box::leak(Box::new(Loaded {
            api,
            backend,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            init_users: Mutex::default(),
            shared: Mutex::default(),
            faults: FaultTable::default(),
            device_aborts: Default::default(),
        }))
    }

    pub(crate) fn is_simulated(&self) -> bool {
        matches!(
            self.backend,
            Backend::Library {
                simulated: true,
                ..
            }
        )
    }
}

/// Every library loaded so far. A library is identified by the address of its `aclInit`, not
/// by the path it was asked for: the dynamic loader maps a file once however it is spelt (a
/// symlink, `..`, a bare name found on `LD_LIBRARY_PATH`), so two handles to one mapped object
/// resolve the symbol to one address, and they must share one runtime (its contexts, its
/// `aclInit` count) as they share one ACL state.
static LIBRARIES: Mutex<Vec<&'static Loaded>> = Mutex::new(Vec::new());

/// Loads the first candidate that is an acceptable runtime, or lists why each was not.
pub(crate) fn load_first(
    candidates: impl IntoIterator<Item = Candidate>,
) -> Result<&'static Loaded, Vec<LoadAttempt>> {
    let mut tried = Vec::new();
    for candidate in candidates {
        let reason = match open(&candidate.path) {
            Ok(loaded) if candidate.accepts_simulator || !loaded.is_simulated() => {
                return Ok(loaded);
            }
            Ok(_) => LoadFailure::Simulator,
            Err(reason) => reason,
        };
        tried.push(LoadAttempt {
            path: candidate.path,
            reason,
        });
    }
    Err(tried)
}

/// Whether `path` names something that exists but is no regular file (a directory, a FIFO, a
/// device), which a reader would block on or read forever. A missing file is not: whoever
/// opens it names it.
///
/// A check before the open, not on the open file: a file swapped for a FIFO in between is the
/// swapper's doing, and opening the file here to check it would mean handing the loader a
/// `/proc/self/fd` path, under which it could not tell that it had loaded the file before.
pub(crate) fn names_no_regular_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|found| !found.is_file())
}

/// Loads the library at `path` (a bare name is searched by the dynamic loader), or returns the
/// runtime already loaded from the same file.
pub(crate) fn open(path: &Path) -> Result<&'static Loaded, LoadFailure> {
    let is_path = path.as_os_str().as_bytes().contains(&b'/');
    // An empty name would make dlopen return the main program.
    if path.as_os_str().is_empty() || (is_path && !path.exists()) {
        return Err(LoadFailure::NoSuchFile);
    }
    // dlopen opens what it is given: a FIFO would hold it (and the lock below, so every later
    // load) until some writer came, a terminal until input did. A bare name is the loader's
    // to search, in directories the environment and the system's cache name.
    if is_path && names_no_regular_file(path) {
        return Err(LoadFailure::NotARegularFile);
    }
    // Held across the load, so two threads loading one file cannot make two runtimes of it.
    let mut libraries = LIBRARIES.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: loading runs the library's initialisers, and `from_library` below calls its
    // exports with ACL's prototypes: sound only for an AscendCL runtime (a CANN install's or
    // npu-sim's build of it, both designed to be dlopened). npu-rs's own search finds only
    // those (trusting the install locations and the loader's search path, as any program
    // does); a path of the caller's choice comes as a `RuntimeLibrary`, whose `unsafe`
    // constructor's contract is that it is one.
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| {
        // glibc reports a file for another architecture as missing; its ELF header says more.
        let foreign = is_path.then(|| elf::foreign_architecture(path)).flatten();
        foreign.unwrap_or_else(|| loader_failure(path, &e))
    })?;
    // SAFETY: an AscendCL runtime exports these functions with the header's prototypes, and
    // the library is leaked below, so the pointers stay valid for the rest of the process.
    let api = unsafe { AclApi::from_library(&library) }.map_err(|e| {
        // With aclInit it is an AscendCL runtime, only an older one than npu-rs needs.
        match e.missing.contains(&"aclInit") {
            true => LoadFailure::NotAcl { missing: e.missing },
            false => LoadFailure::TooOld { missing: e.missing },
        }
    })?;
    // The handle is deliberately leaked: loaded runtimes are never unloaded (see `Loaded`).
    // Loading an already mapped file again only raised its reference count.
    let simulated = is_simulator(&library);
    let (library, own) = own_file(library);
    if let Some(simulator) = simulated
        .then(|| simulator_dependency(&library, own))
        .flatten()
    {
        return Err(LoadFailure::SimulatorDependency { simulator });
    }
    if let Some(simulator) = (!simulated).then(simulator_in_global_scope).flatten() {
        return Err(LoadFailure::SimulatorInProcess { simulator });
    }
    std::mem::forget(library);
    if let Some(loaded) = libraries
        .iter()
        .find(|l| std::ptr::fn_addr_eq(l.api.aclInit, api.aclInit))
    {
        return Ok(loaded);
    }
    let unsupported = api.unsupported();
    if !unsupported.is_empty() {
        crate::log!(debug, path = %path.display(), ?unsupported, "optional ACL functions absent");
    }
    let file = mapped_file(api.aclInit as *const c_void).unwrap_or_else(|| path.to_path_buf());
    let loaded = Loaded::leak(
        api,
        Backend::Library {
            path: file.canonicalize().unwrap_or(file),
            simulated,
        },
    );
    libraries.push(loaded);
    Ok(loaded)
}

/// npu-sim's build exports its control functions (`npusim*`); CANN's runtime has none of them.
fn is_simulator(library: &libloading::Library) -> bool {
    // SAFETY: only the symbol's presence is checked; it is never dereferenced or called.
    unsafe { library.get::<*const ()>(b"npusimConfigure\0") }.is_ok()
}

/// The object that puts npu-sim's functions in the process's global symbol scope, if one does:
/// a shared library built with npu's `sim` feature (a Rust `cdylib` exports every `#[no_mangle]`
/// function of its dependencies, the simulator's ACL functions among them) that the program links
/// against or that was loaded with `RTLD_GLOBAL`, or an `LD_PRELOAD`. The dynamic loader binds
/// a CANN runtime's calls to the functions it exports itself to the first definition in that
/// scope, so that runtime would call the simulator's `aclrt*` functions in place of its own.
/// (A program built with the feature exports none of them, nor does a library loaded as
/// `RTLD_LOCAL`, as npu-core loads runtimes.)
fn simulator_in_global_scope() -> Option<PathBuf> {
    // SAFETY: a lookup in the global scope by a NUL-terminated name; the address returned is
    // only passed to dladdr, never dereferenced or called.
    let marker = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"npusimConfigure".as_ptr()) };
    match marker.is_null() {
        true => None,
        false => Some(mapped_file(marker).unwrap_or_else(|| PathBuf::from("npusimConfigure"))),
    }
}

/// Where npu-sim's build came from when `library` is not that build itself but links against
/// it: a symbol lookup through a handle searches the library's dependencies too, so the
/// simulator's marker can come from a `libascendcl.so` the dynamic loader found for a CANN
/// library on a cargo-set `LD_LIBRARY_PATH`.
///
/// The library's own file is what the marker's is compared with: a CANN library may define
/// none of AscendCL's functions itself (a thin `libacl_rt.so` over the `libascendcl.so` it
/// links against), and then `aclInit` comes from the simulator too.
fn simulator_dependency(library: &libloading::Library, own: Option<PathBuf>) -> Option<PathBuf> {
    // SAFETY: only the symbols' addresses are read; they are never dereferenced or called.
    let (marker, init) = unsafe {
        (
            *library.get::<*const c_void>(b"npusimConfigure\0").ok()?,
            *library.get::<*const c_void>(b"aclInit\0").ok()?,
        )
    };
    let simulator = mapped_file(marker)?;
    let own = own.or_else(|| mapped_file(init))?;
    (own != simulator).then_some(simulator)
}

/// The file the dynamic loader mapped for `library` itself, as its link map names it (as
/// [`mapped_file`] does for a symbol's object), with the library handed back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn own_file(library: libloading::Library) -> (libloading::Library, Option<PathBuf>) {
    /// The start of glibc's `struct link_map` (<link.h>), whose layout is public.
    #[repr(C)]
    struct LinkMap {
        l_addr: usize,
        l_name: *const std::ffi::c_char,
    }
    let handle = libloading::os::unix::Library::from(library).into_raw();
    let mut map: *const LinkMap = std::ptr::null();
    // SAFETY: `handle` is a live dlopen handle (owned here until handed back below);
    // RTLD_DI_LINKMAP writes a `struct link_map *` to the pointer it is given.
    let got = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            std::ptr::from_mut(&mut map).cast::<c_void>(),
        )
    };
    let name = match got == 0 && !map.is_null() {
        // SAFETY: dlinfo succeeded, so `map` is the loader's entry for the library, which
        // lives while the library is mapped (the handle keeps it mapped).
        true => unsafe { (*map).l_name },
        false => std::ptr::null(),
    };
    let own = (!name.is_null()).then(|| {
        // SAFETY: a non-NULL l_name is a NUL-terminated string owned by the loader, which
        // keeps it while the library is mapped; it is copied out at once.
        let name = unsafe { CStr::from_ptr(name) };
        PathBuf::from(OsStr::from_bytes(name.to_bytes()))
    });
    // SAFETY: `handle` came from `into_raw` above and is handed back to a `Library` once.
    let library = unsafe { libloading::os::unix::Library::from_raw(handle) };
    (library.into(), own)
}

/// Elsewhere the library's own `aclInit` stands for it.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn own_file(library: libloading::Library) -> (libloading::Library, Option<PathBuf>) {
    (library, None)
}

/// The file the dynamic loader mapped for the object holding `symbol`, as its link map names it
/// (the path given to `dlopen`, or the one the loader found for a bare name).
fn mapped_file(symbol: *const c_void) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and writes the `Dl_info` it is given.
    if unsafe { libc::dladdr(symbol, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded, so it filled `info` (and it was zeroed before).
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-NULL dli_fname is a NUL-terminated string owned by the loader, which keeps
    // it while the object is mapped (forever, here); it is copied out at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

/// Reading the architecture of a shared object from its ELF header.
mod elf {
    use std::io::Read;
    use std::path::Path;

    use crate::error::LoadFailure;

    /// `EI_CLASS` of this program: `ELFCLASS64` (2) or `ELFCLASS32` (1).
    const HOST_CLASS: u8 = if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    };

    /// `e_machine` of this program, for the architectures CANN ships for and their neighbours.
    const HOST_MACHINE: Option<u16> = if cfg!(target_arch = "x86_64") {
        Some(62)
    } else if cfg!(target_arch = "aarch64") {
        Some(183)
    } else if cfg!(target_arch = "x86") {
        Some(3)
    } else if cfg!(target_arch = "arm") {
        Some(40)
    } else {
        None
    };

    fn machine_name(machine: u16, class: u8) -> String {
        let name = match machine {
            3 => "x86 (32-bit)",
            40 => "ARM (32-bit)",
            62 => "x86-64",
            183 => "AArch64",
            243 => "RISC-V",
            258 => "LoongArch",
            other => return format!("ELF machine {other} ({}-bit)", 32 * u32::from(class)),
        };
        name.to_string()
    }

    /// [`LoadFailure::WrongArchitecture`] when `path` is an ELF file whose class or machine is
    /// not this program's; `None` when it is not ELF, cannot be read, or matches.
    pub(super) fn foreign_architecture(path: &Path) -> Option<LoadFailure> {
        let host = HOST_MACHINE?;
        let mut header = [0u8; 20];
        std::fs::File::open(path)
            .and_then(|mut file| file.read_exact(&mut header))
            .ok()?;
        if header[..4] != *b"\x7fELF" {
            return None;
        }
        let class = header[4];
        // Neither ELFCLASS32 nor ELFCLASS64: a damaged file, for the loader's own message.
        if !matches!(class, 1 | 2) {
            return None;
        }
        let machine = match header[5] {
            1 => u16::from_le_bytes([header[18], header[19]]),
            2 => u16::from_be_bytes([header[18], header[19]]),
            _ => return None,
        };
        if class == HOST_CLASS && machine == host {
            return None;
        }
        let (found, expected) = (machine_name(machine, class), machine_name(host, HOST_CLASS));
        // The same machine number in the other class (an x32 library, say) still differs.
        let found = match found == expected {
            true => format!("{found} (ELFCLASS{})", 32 * u32::from(class)),
            false => found,
        };
        Some(LoadFailure::WrongArchitecture { found, expected })
    }
}

/// Classifies a `dlopen` failure. glibc reports a library that cannot be found as
/// `<name>: cannot open shared object file: ...`; when `<name>` is not the library asked for, a
/// library it depends on is missing.
fn loader_failure(path: &Path, err: &libloading::Error) -> LoadFailure {
    let text = with_sources(err);
    let Some(before) = text
        .find(": cannot open shared object file")
        .map(|end| &text[..end])
    else {
        return LoadFailure::Loader(text);
    };
    let missing = before.rsplit([' ', '"']).next().unwrap_or(before);
    let wanted = path.file_name().and_then(OsStr::to_str);
    let missing_name = Path::new(missing).file_name().and_then(OsStr::to_str);
    if missing_name != wanted {
        LoadFailure::MissingDependency {
            library: missing.to_string(),
        }
    } else if path.as_os_str().as_bytes().contains(&b'/') {
        LoadFailure::Loader(text)
    } else {
        LoadFailure::NotInLoaderPath
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(path: &str) -> Candidate {
        Candidate {
            path: path.into(),
            accepts_simulator: false,
        }
    }

    #[test]
    fn every_failed_candidate_is_listed_with_its_reason() {
        let candidates = [
            "/nonexistent/a/libacl_rt.so",
            "libc.so.6",
            "no-such-library.so",
        ]
        .map(candidate);
        let Err(tried) = load_first(candidates) else {
            panic!("nothing there is an ACL runtime")
        };
        let reasons: Vec<_> = tried.iter().map(|t| t.reason.clone()).collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert_eq!(reasons[0], LoadFailure::NoSuchFile);
        assert!(
            matches!(&reasons[1], LoadFailure::NotAcl { missing } if missing.contains(&"aclInit")),
            "{reasons:?}"
        );
        assert_eq!(reasons[2], LoadFailure::NotInLoaderPath);
    }

    #[test]
    fn an_empty_path_names_no_file() {
        assert!(matches!(open(Path::new("")), Err(LoadFailure::NoSuchFile)));
    }

    #[test]
    fn a_file_that_is_no_library_gives_the_loader_s_words() {
        let not_elf = std::env::current_dir().unwrap().join("Cargo.toml");
        let Err(LoadFailure::Loader(text)) = open(&not_elf) else {
            panic!("Cargo.toml is not a shared object")
        };
        assert!(text.contains("Cargo.toml"), "{text}");
    }
}
