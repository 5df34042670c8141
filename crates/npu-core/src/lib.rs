//! The foundation of npu-rs: loading the AscendCL runtime, typed errors, devices, and contexts
//! that follow the task rather than the thread.
//!
//! - [`Runtime`] loads CANN's runtime (`libacl_rt.so`, or the older `libascendcl.so`) or the
//!   npu-sim simulator (`NPU_BACKEND`) and initialises ACL once.
//! - [`Device`] and [`Context`] wrap devices and contexts; every context-dependent object holds
//!   its `Context` and binds it before each call, so a Tokio task may migrate between threads.
//! - [`Error`] names the failed API, the code, its symbolic name and the runtime's message.
//! - [`Module`] and [`Function`] load kernel binaries and look kernels up; [`ArgPacker`] and
//!   [`LaunchConfig`] describe a launch (npu-stream's `Stream::launch` awaits it).
//! - [`Completion`] and [`UseList`] are the building blocks the stream and memory crates use to
//!   complete operations and to release resources only after the device is done with them.
//!
//! ```
//! use npu_core::Device;
//!
//! let device = Device::open(0)?;
//! println!("{} on {}", device.soc_name().unwrap_or_default(), device.runtime().backend());
//! # Ok::<(), npu_core::Error>(())
//! ```

pub use npu_sys as ffi;

mod backend;
mod call;
mod code;
mod completion;
#[doc(hidden)]
pub mod contain;
mod context;
#[cfg(feature = "sim")]
mod control_error;
mod device;
mod device_abort;
mod error;
mod fault;
#[doc(hidden)]
pub mod fork;
#[doc(hidden)]
pub mod holds;
mod launch;
mod module;
mod op_error;
mod paused_clock;
pub mod reaper;
mod runtime;
#[doc(hidden)]
pub mod seal;
mod teardown;

pub use backend::{Backend, BackendChoice, BackendReason, Fallback, RuntimeLibrary};
pub use code::{AclCode, ErrorClass, MemoryErrorKind};
pub use completion::{BlockingWaiter, Completer, Completion, UseList, Wait};
pub use context::Context;
pub use device::{Device, DeviceAttr, DeviceStatus, MemAttr, MemInfo, PeerAccess, PriorityRange};
pub use device_abort::DeviceAbortWatch;
pub use error::{AclError, Error, LoadAttempt, LoadError, LoadFailure, Result, Unsettled};
pub use fault::{DeviceFault, FaultKind, FaultWatch};
pub use fork::forked;
pub use launch::{ArgPacker, Engine, LaunchConfig};
pub use module::{BinaryMagic, Function, Module, ModuleLoader};
pub use op_error::OpError;
pub use runtime::{Runtime, RuntimeBuilder};
pub(crate) use seal::SEAL;
#[doc(hidden)]
pub use teardown::refuse_blocking;
pub use teardown::wait_for_teardowns;
