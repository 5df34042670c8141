//! Loading the ACL runtime: CANN's `libacl_rt.so` (or `libascendcl.so`) or the simulator.
//!
//! [`Runtime::global`] (what [`Device::open`](crate::Device::open) uses) loads the backend
//! `NPU_BACKEND` names (`sim`, `acl` or `auto`, the default: CANN if it is found, its
//! `aclInit` succeeds and it sees a device, else the simulator); [`Runtime::builder`] chooses
//! in code, and [`Runtime::backend_reason`] says why `auto` chose what it did. [`Runtime::backend`] says which one was
//! loaded. docs/ascend.md lists where a real runtime is looked for.
//!
//! Before a program exits, [`wait_for_teardowns`] waits (bounded) for the device resets and
//! ACL finalisations npu-rs ran on threads of their own, when a runtime's last handle went on
//! one of npu-rs's threads (docs/ascend.md, "Teardown and process exit").
//!
//! ```
//! use npu::runtime::{Backend, BackendChoice, Runtime};
//!
//! let runtime = Runtime::builder().backend(BackendChoice::Sim).build()?;
//! assert_eq!(runtime.backend(), &Backend::Simulator);
//! assert!(runtime.device_count()? >= 1);
//! # Ok::<(), npu::Error>(())
//! ```

pub use npu_core::{
    Backend, BackendChoice, BackendReason, Fallback, Runtime, RuntimeBuilder, RuntimeLibrary,
    forked, wait_for_teardowns,
};
