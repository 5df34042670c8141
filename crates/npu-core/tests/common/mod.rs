//! Helpers shared by npu-core's integration tests.

use std::path::PathBuf;

use npu_core::{BackendChoice, Runtime};

/// npu-sim's `libascendcl.so`, which cargo builds next to the test binaries because npu-sim is
/// a dependency of npu-core.
pub(crate) fn simulator_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe
        .parent()
        .expect("test binaries live in target/<profile>/deps");
    let library = deps.join("libascendcl.so");
    assert!(
        library.exists(),
        "npu-sim's cdylib was not built at {}",
        library.display()
    );
    library
}

/// Both ways of reaching the simulator: linked in-process, and dlopened as a real
/// libascendcl.so would be. Every test that takes a runtime runs on both.
#[allow(dead_code, reason = "the loader tests build their own runtimes")]
pub(crate) fn runtimes() -> Vec<(&'static str, Runtime)> {
    let in_process = Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .expect("in-process sim");
    // SAFETY: npu-sim's build of libascendcl.so, an AscendCL runtime.
    let dlopened = unsafe { Runtime::builder().library(simulator_library()) }
        .build()
        .expect("sim cdylib");
    vec![("in-process", in_process), ("dlopen", dlopened)]
}
