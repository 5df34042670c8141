//! A runtime of its own, of npu-sim's cdylib (which nothing else in the process loads), for
//! docs/ascend.md's teardown promise: once everything of it is dropped, ACL is finalised, and
//! the runtime may be built again.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use npu::sim;

use super::HANG;

/// The library and (empty) ACL configuration files, a new one for each look. A runtime still
/// initialised refuses a file other than the one it was initialised with (it names
/// `acl_config`), so a runtime built with a new one says ACL was finalised. The file must be
/// new each time: the runtime a look builds is initialised with its file, and a runtime of the
/// same library built after it (without a file) joins that initialisation, which then accepts
/// the same file again without having been finalised.
pub(crate) struct OwnRuntime {
    library: PathBuf,
    /// The looks' files are named after it.
    config: PathBuf,
    /// Looks taken so far: the next look's file is numbered after them.
    looks: Cell<u32>,
}

impl OwnRuntime {
    /// `name` keeps the configuration file apart from other test binaries'.
    pub(crate) fn new(name: &str) -> OwnRuntime {
        let exe = std::env::current_exe().unwrap();
        let library = exe.parent().unwrap().join("libascendcl.so");
        let file = format!("npu-{name}-{}.json", std::process::id());
        let config = std::env::temp_dir().join(file);
        OwnRuntime {
            library,
            config,
            looks: Cell::new(0),
        }
    }

    pub(crate) fn builder(&self) -> npu::runtime::RuntimeBuilder {
        // SAFETY: npu-sim's build of libascendcl.so, an AscendCL runtime.
        let library = unsafe { npu::runtime::RuntimeLibrary::new(&self.library) };
        let backend = npu::runtime::BackendChoice::Library(library);
        npu::Runtime::builder().backend(backend)
    }

    /// A runtime of the library, without the configuration file.
    pub(crate) fn build(&self) -> npu::Runtime {
        self.builder().build().unwrap()
    }

    /// Once every deferred release has run and the shared threads have let go (at their next
    /// quiet moment), a runtime built with a configuration file no earlier look used, handed
    /// to `check`; panics naming `what` if ACL is still initialised after a minute (the bound
    /// only catches a hang: a shared thread keeping a handle of the dropped runtime).
    pub(crate) fn when_finalised(&self, what: &str, check: impl FnOnce(npu::Runtime)) {
        self.looks.set(self.looks.get() + 1);
        let config = self
            .config
            .with_extension(format!("{}.json", self.looks.get()));
        std::fs::write(&config, "{}").unwrap();
        let _removed = Removed(config.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            sim::flush_releases();
            match self.builder().acl_config(&config).build() {
                Ok(applied) => return check(applied),
                Err(err) if Instant::now() > deadline => {
                    panic!("{what}: ACL was never finalised: {err}")
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    }
}

/// Removes a configuration file when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What the ACL finalize callback [`hold_finalisation`] registers saw and waits for: the
/// threads it ran on, and whether the test lets it return.
pub(crate) struct Finalising {
    pub(crate) threads: Vec<String>,
    go: bool,
}

static FINALISING: Mutex<Finalising> = Mutex::new(Finalising {
    threads: Vec::new(),
    go: true,
});
static FINALISING_CHANGED: Condvar = Condvar::new();

/// An ACL finalize callback standing in for CANN's own finalisation, which waits up to 2 s for
/// the device's logs: it notes its thread and waits (bounded) until the test lets it go.
unsafe extern "C" fn finalising(_: *mut std::ffi::c_void) -> i32 {
    let mut state = FINALISING.lock().unwrap();
    state
        .threads
        .push(std::thread::current().name().unwrap_or("").to_owned());
    FINALISING_CHANGED.notify_all();
    let bound = FINALISING_CHANGED.wait_timeout_while(state, 2 * HANG, |state| !state.go);
    drop(bound.unwrap());
    0
}

/// Registers the finalize callback with `runtime`'s library: its next finalisation of ACL
/// notes its thread and waits until [`let_finalisation_go`].
pub(crate) fn hold_finalisation(runtime: &npu::Runtime) {
    let register = runtime.api().aclFinalizeCallbackRegister.unwrap();
    // SAFETY: a C function of the callback type; it takes no user data.
    let code = unsafe {
        register(
            npu::ffi::ACL_REG_TYPE_OTHER,
            Some(finalising),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0);
    *FINALISING.lock().unwrap() = Finalising {
        threads: Vec::new(),
        go: false,
    };
}

/// Lets a held finalisation return (and any later one pass); the threads it ran on so far.
pub(crate) fn let_finalisation_go() -> Vec<String> {
    let mut state = FINALISING.lock().unwrap();
    state.go = true;
    FINALISING_CHANGED.notify_all();
    state.threads.clone()
}

/// Lets a held ACL finalisation go when dropped, so that a failing test leaves no thread
/// waiting in it; the threads it ran on are read before.
pub(crate) struct FinalisationHeld;

impl Drop for FinalisationHeld {
    fn drop(&mut self) {
        let_finalisation_go();
    }
}

/// Waits (bounded) until `done` holds of the finalize callback's state.
pub(crate) fn until_finalising(what: &str, done: impl Fn(&Finalising) -> bool) {
    let state = FINALISING.lock().unwrap();
    let (state, waited) = FINALISING_CHANGED
        .wait_timeout_while(state, HANG, |state| !done(state))
        .unwrap();
    assert!(!waited.timed_out(), "{what}: not within {HANG:?}");
    drop(state);
}

/// npusim/control.h's device statistics, as the cdylib fills them in.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct CdylibDeviceStats {
    pub(crate) bytes_allocated: u64,
    pub(crate) live_allocations: u64,
    pub(crate) live_streams: u64,
    pub(crate) live_events: u64,
    pub(crate) capacity: u64,
    pub(crate) lost: i32,
    pub(crate) reserved: i32,
    pub(crate) live_contexts: u64,
}

/// The controls of the cdylib an [`OwnRuntime`] loads (which `npu::sim` does not reach): its
/// hold gate and its device statistics, through npusim/control.h's C functions.
pub(crate) struct CdylibControls {
    hold: unsafe extern "C" fn(i32) -> i32,
    release: unsafe extern "C" fn(i32) -> i32,
    stats: unsafe extern "C" fn(i32, *mut CdylibDeviceStats) -> i32,
    lose: unsafe extern "C" fn(i32) -> i32,
}

impl CdylibControls {
    /// The controls of the library loaded already (a runtime of it must be alive).
    pub(crate) fn of_the_loaded_library() -> CdylibControls {
        let exe = std::env::current_exe().unwrap();
        let path = exe.parent().unwrap().join("libascendcl.so");
        let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD only looks the library up. The handle's
        // reference is kept for the process's life, so the symbols stay valid.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!handle.is_null(), "the cdylib is loaded");
        let symbol = |name: &std::ffi::CStr| {
            // SAFETY: a live handle and a NUL-terminated name.
            let symbol = unsafe { libc::dlsym(handle, name.as_ptr()) };
            assert!(!symbol.is_null(), "{name:?} is exported");
            symbol
        };
        // SAFETY: npusim/control.h declares these with exactly these signatures.
        unsafe {
            CdylibControls {
                hold: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(i32) -> i32>(
                    symbol(c"npusimHold"),
                ),
                release: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(i32) -> i32>(
                    symbol(c"npusimRelease"),
                ),
                stats: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(i32, *mut CdylibDeviceStats) -> i32,
                >(symbol(c"npusimGetDeviceStats")),
                lose: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(i32) -> i32>(
                    symbol(c"npusimLoseDevice"),
                ),
            }
        }
    }

    pub(crate) fn hold(&self, device: i32) {
        // SAFETY: takes a device id; no pointer.
        assert_eq!(unsafe { (self.hold)(device) }, 0);
    }

    pub(crate) fn release(&self, device: i32) {
        // SAFETY: takes a device id; no pointer.
        assert_eq!(unsafe { (self.release)(device) }, 0);
    }

    pub(crate) fn lose(&self, device: i32) {
        // SAFETY: takes a device id; no pointer.
        assert_eq!(unsafe { (self.lose)(device) }, 0);
    }

    pub(crate) fn stats(&self, device: i32) -> CdylibDeviceStats {
        let mut stats = CdylibDeviceStats::default();
        // SAFETY: `stats` is a valid out-pointer of the C layout.
        assert_eq!(unsafe { (self.stats)(device, &mut stats) }, 0);
        stats
    }
}
