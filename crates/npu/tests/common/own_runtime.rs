//! A runtime of its own, of npu-sim's cdylib (which nothing else in the process loads), for
//! docs/ascend.md's teardown promise: once everything of it is dropped, ACL is finalised, and
//! the runtime may be built again.

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use npu::sim;

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
