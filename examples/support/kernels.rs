//! Where the examples get their kernels.
//!
//! The examples use two kernels with npu-sim's argument layout (docs/simulator.md):
//! `vector_add_f32(const float *a, const float *b, float *c, uint64_t n)` and
//! `scale_f32(float *x, uint64_t n, float alpha)`. On the simulator they come from the shared
//! object npu-sim ships. On CANN, point `NPU_EXAMPLE_KERNELS` at an Ascend C kernel binary
//! exporting both (docs/ascend.md says how to build one).

use npu::runtime::Backend;
use npu::{Context, Error, Module, Result};

/// The environment variable naming a kernel binary that overrides the simulator's library.
pub(crate) const KERNELS_ENV: &str = "NPU_EXAMPLE_KERNELS";

/// Loads the kernel binary for `ctx`'s runtime.
pub(crate) fn load(ctx: &Context) -> Result<Module> {
    if let Some(path) = std::env::var_os(KERNELS_ENV) {
        // SAFETY: the user names a kernel binary built for this device and the examples'
        // kernel ABI (the contract of NPU_EXAMPLE_KERNELS, documented above and in the README).
        return unsafe { Module::from_file(ctx, path) };
    }
    match ctx.runtime().backend() {
        Backend::Simulator
        | Backend::Library {
            simulated: true, ..
        } => simulator_kernels(ctx),
        // CANN, or a backend added later: either way, not npu-sim's kernel ABI.
        _ => Err(Error::invalid(
            "examples",
            KERNELS_ENV,
            "on CANN, set it to an Ascend kernel binary exporting vector_add_f32 and scale_f32",
        )),
    }
}

/// npu-sim's shipped kernel library.
#[cfg(feature = "sim")]
fn simulator_kernels(ctx: &Context) -> Result<Module> {
    // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    unsafe { Module::from_file(ctx, npu::sim::kernel::LIBRARY_PATH) }
}

/// A build without the `sim` feature does not know where npu-sim's kernel library is.
#[cfg(not(feature = "sim"))]
fn simulator_kernels(_ctx: &Context) -> Result<Module> {
    Err(Error::invalid(
        "examples",
        KERNELS_ENV,
        "built without the `sim` feature: set it to npu-sim's kernel library",
    ))
}
