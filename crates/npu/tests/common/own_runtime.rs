//! A runtime of its own, of npu-sim's cdylib (which nothing else in the process loads), for
//! docs/ascend.md's teardown promise: once everything of it is dropped, ACL is finalised, and
//! the runtime may be built again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use npu::sim;

/// The library and an (empty) ACL configuration file. A runtime still initialised refuses the
/// file (it names `acl_config`), so a runtime built with it says ACL was finalised.
pub(crate) struct OwnRuntime {
    library: PathBuf,
    config: PathBuf,
}

impl OwnRuntime {
    /// `name` keeps the configuration file apart from other test binaries'.
    pub(crate) fn new(name: &str) -> OwnRuntime {
        let exe = std::env::current_exe().unwrap();
        let library = exe.parent().unwrap().join("libascendcl.so");
        let file = format!("npu-{name}-{}.json", std::process::id());
        let config = std::env::temp_dir().join(file);
        std::fs::write(&config, "{}").unwrap();
        OwnRuntime { library, config }
    }

    fn builder(&self) -> npu::runtime::RuntimeBuilder {
        let backend = npu::runtime::BackendChoice::Library(self.library.clone());
        npu::Runtime::builder().backend(backend)
    }

    /// A runtime of the library, without the configuration file.
    pub(crate) fn build(&self) -> npu::Runtime {
        self.builder().build().unwrap()
    }

    /// Once every deferred release has run and the shared threads have let go (at their next
    /// quiet moment), a runtime built with the configuration file, handed to `check`; panics
    /// naming `what` if ACL is still initialised after a minute (the bound only catches a
    /// hang: a shared thread keeping a handle of the dropped runtime).
    pub(crate) fn when_finalised(&self, what: &str, check: impl FnOnce(npu::Runtime)) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            sim::flush_releases();
            match self.builder().acl_config(&self.config).build() {
                Ok(applied) => return check(applied),
                Err(err) if Instant::now() > deadline => {
                    panic!("{what}: ACL was never finalised: {err}")
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}
