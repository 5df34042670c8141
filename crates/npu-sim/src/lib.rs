//! npu-sim: a software Ascend NPU behind the AscendCL (`aclrt*`) C ABI.
//!
//! The crate builds as an rlib and as `libascendcl.so`. Either way it exports every function of
//! npu-rs's ACL headers (`include/acl/`; `aclAppLog` on x86_64 and aarch64) with CANN's names,
//! types and error codes, and implements the runtime's documented semantics: thread-local
//! current contexts, ref-counted primary contexts, FIFO streams running concurrently on worker
//! threads, legacy and Ex events, host callbacks, kernels, the exact error layering (ACL 100000
//! vs runtime 107000) and generation-checked handles (stale handles fail with 107017, never
//! crash). Device memory
//! is host memory the simulator owns, so copies really move bytes and kernels really compute.
//!
//! - [`abi`]: the exported C functions (also callable from Rust);
//! - [`api`]: the same functions as an [`npu_sys::AclApi`] table;
//! - [`SimConfig`] / [`TimingModel`]: process-level configuration;
//! - [`control`]: runtime controls (timing, fault injection, device loss, hold gate, counters);
//! - [`kernel`]: the kernel ABI, in-process registration and the shipped kernels;
//! - [`trace`]: the Chrome/Perfetto timeline of device tasks.
//! - [`version`]: the CANN package versions `aclsysGetVersionStr`/`Num` report.
//! - [`dump`]: the dump configuration aclInit and aclmdlSetDump keep (nothing is dumped).
//!
//! docs/simulator.md describes the semantics and every decision where CANN's documentation is
//! silent.
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! use std::ptr;
//! use npu_sim::abi::*;
//!
//! // SAFETY: every pointer passed is valid for the call's contract.
//! unsafe {
//!     assert_eq!(aclrtSetDevice(0), 0);
//!     let mut stream = ptr::null_mut();
//!     assert_eq!(aclrtCreateStream(&mut stream), 0);
//!     let (mut host, mut dev) = (ptr::null_mut(), ptr::null_mut());
//!     assert_eq!(aclrtMallocHost(&mut host, 4096), 0);
//!     assert_eq!(aclrtMalloc(&mut dev, 4096, 0), 0);
//!     host.cast::<u8>().write_bytes(7, 4096);
//!     assert_eq!(aclrtMemcpyAsync(dev, 4096, host, 4096, 1, stream), 0);
//!     assert_eq!(aclrtSynchronizeStream(stream), 0);
//!     let mut back = vec![0u8; 4096];
//!     assert_eq!(aclrtMemcpy(back.as_mut_ptr().cast(), 4096, dev, 4096, 2), 0);
//!     assert!(back.iter().all(|&b| b == 7));
//!     assert_eq!(aclrtFree(dev), 0);
//!     assert_eq!(aclrtFreeHost(host), 0);
//!     assert_eq!(aclrtDestroyStream(stream), 0);
//!     assert_eq!(aclrtResetDeviceForce(0), 0);
//! }
//! ```

pub mod abi;
pub mod config;
pub mod control;
pub mod dump;
pub mod kernel;
pub mod trace;
pub mod version;

mod advice;
mod allocator;
mod capture;
mod clock;
mod context;
mod control_flow;
mod data_buffer;
mod device;
mod device_limit;
mod error;
mod event;
mod exception;
mod handle;
mod hardware;
mod host_task;
mod indirect;
mod ipc;
mod kernel_fault;
mod lifecycle;
mod memory;
mod model_ri;
mod notify;
mod op_timeout;
mod philox;
mod pool;
mod quarantine;
mod random;
mod reduce;
mod report;
mod res_limit;
mod sim;
mod snapshot;
mod stream;
mod stream_state;
mod sync;
mod sys_param;
mod task;
mod task_abort;
mod task_update;
mod uce;
mod vmm;

pub use config::{ConfigError, JsonError, SimConfig, TimingModel};

/// Every ACL function as an [`npu_sys::AclApi`], pointing at this crate's implementations.
///
/// The table is expanded from `npu_sys::for_each_acl_function!`, so a header function missing
/// here, or implemented with another signature, is a compile error.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// let api = npu_sim::api();
/// let mut count = 0u32;
/// // SAFETY: a valid out pointer.
/// assert_eq!(unsafe { (api.aclrtGetDeviceCount)(&mut count) }, 0);
/// assert_eq!(count, 2);
/// assert!(api.unsupported().is_empty());
/// ```
pub fn api() -> npu_sys::AclApi {
    macro_rules! sim_api {
        (
            required { $( fn $r:ident ( $($ra:ident : $rt:ty),* ) -> $rr:ty ; )* }
            optional { $( fn $o:ident ( $($oa:ident : $ot:ty),* ) -> $or:ty ; )* }
        ) => {
            npu_sys::AclApi {
                $( $r: abi::$r as unsafe extern "C" fn($($rt),*) -> $rr, )*
                $( $o: Some(abi::$o as unsafe extern "C" fn($($ot),*) -> $or), )*
            }
        };
    }
    npu_sys::for_each_acl_function!(sim_api!())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_table_builds_with_every_function() {
        let api = super::api();
        assert!(api.unsupported().is_empty());
    }
}
